"""What a run lends as its members end: an append-only signed record, so that a run killed
(kill -9, a lost machine) still lends what it finished to the next run of its workflow.

``lending.jsonl``, beside the journal: a first line that says whose record it is (kind,
version, workflow, run, workspace), then a line per round of the engine that saw members
end well: per node, the members (runs ``[lo, hi]``), their keys as they were recorded when
each was handed to a pilot (:mod:`pwe.runstate.keyring`; base64, 16 bytes a member, in the
members' order), their outputs and, for a node with ``products``, each product's
fingerprint (size, ``mtime_ns``). Since version 2, the keys' parts (what names a change,
:mod:`pwe.runstate.rerun_why`): ``p``, 8 bytes a member (base64), and, the first time a
node is lent in the file, ``np``, the node's parts. A file of version 1 is still read (its
members' parts unknown). Every line is signed with the run's secret
(:func:`pwe.runstate.notify.sign`), so a line edited (a key, an output) does not verify
and nothing of that run is lent. A line cut short by a kill is not a record: left out.
The engine writes a round's line after the journal that holds those ends (the loop calls
:meth:`Lending.flush` after the journal's flush): nothing is lent that a resumed engine
would not find done.

When the run reaches its end the whole record is written once more, compactly
(``reusable.json`` + ``reusable.keys``: :func:`pwe.runstate.reusable.write`), and this
file is removed; a run taken up again (``pwe retry``) starts a new one beside it, and a
reader (:func:`pwe.runstate.reusable.read`) takes both.

:func:`unfinished` finds the runs of a workflow that did not finish and whose engine is
gone (``pwe run`` names them: ``pwe resume RUN`` would pick one up).
"""

from __future__ import annotations

import base64
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from pilot import transport

from ..base.regular import MAX_LINE, open_regular, read_json
from ..base.states import DONE
from ..planning.reuse import KEY_BYTES, PART_BYTES, reusable
from .notify import authentic, sign

FILE = "lending.jsonl"
KIND, VERSION = "pwe-lending", 2
#: the versions read (1: without parts)
READS = (1, 2)
#: most members one line holds
PER_LINE = 512
#: the largest record read (a run of 10^7 members writes about 300 MB)
MAX_FILE = 2 << 30


class Lending:
    """The engine's writer of ``lending.jsonl`` (see the module's docstring)."""

    def __init__(self, run_dir: Path, plan: Any, run_id: str, workspace: str | None, keyring: Any):
        self.dir = Path(run_dir)
        self.plan = plan
        self.run_id = run_id
        self.workspace = workspace
        self.keyring = keyring
        self.nodes = frozenset(n for n in plan.nodes if reusable(plan, n)) if keyring.on else frozenset()
        self.pending: dict[str, list[int]] = {}
        self._fh: Any = None
        self.told: set[str] = set()  # the nodes whose parts this file has (written once each)
        self.broken: str | None = None  # why this run stopped lending as it goes (a full disk)

    def done(self, nid: str, i: int) -> None:
        """Member ``i`` of ``nid`` ended well (its end is journaled): lent at the next flush."""
        if nid in self.nodes:
            self.pending.setdefault(nid, []).append(i)

    def reused(self, nid: str, runs: list[list[int]]) -> None:
        """Members reused from an earlier run: lent again by this one."""
        if nid in self.nodes:
            marks = self.pending.setdefault(nid, [])
            for lo, hi, *_ in runs:
                marks.extend(range(lo, hi))

    def _open(self) -> None:
        path = self.dir / FILE
        fresh = not os.path.lexists(path)
        if not fresh:
            _trim_torn(path)
        self._fh = open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600), "ab",
                        buffering=0)
        self.told = set()
        if fresh or os.fstat(self._fh.fileno()).st_size == 0:
            head = sign(self.dir, {"kind": KIND, "v": VERSION, "workflow": self.plan.workflow.name, "run": self.run_id,
                                   "workspace": self.workspace or str(self.plan.file.parent), "t": time.time()})
            transport.append_whole(self._fh, _line(head))

    def flush(self, state: Any) -> int:
        """Lend the members that ended well since the last flush: one signed line (or a few,
        :data:`PER_LINE` members each). How many were lent. A disk that refuses the file
        stops the lending as it goes (said once in ``broken``); the run's end writes the
        whole record."""
        if not self.pending or self.broken:
            self.pending.clear()
            return 0
        pending, self.pending = self.pending, {}
        lines: list[bytes] = []
        count = 0
        body: dict[str, Any] = {}
        size = 0
        for nid, marks in pending.items():
            ms = sorted(set(marks))
            for k in range(0, len(ms), PER_LINE):
                part = self._node(nid, ms[k:k + PER_LINE], state)
                if part is None:
                    continue
                n = sum(hi - lo for lo, hi in part["r"])
                if body and size + n > PER_LINE:  # (a line: at most PER_LINE members, 64 KiB of outputs each)
                    lines.append(_line(sign(self.dir, {"t": time.time(), "nodes": body})))
                    body, size = {}, 0
                body[nid] = part
                count += n
                size += n
        if body:
            lines.append(_line(sign(self.dir, {"t": time.time(), "nodes": body})))
        if not lines:
            return 0
        try:
            if self._fh is None:
                self._open()
            transport.append_whole(self._fh, b"".join(lines))
        except OSError as exc:
            self.broken = f"cannot write {self.dir / FILE}: {exc.strerror or exc}"
            return 0
        return count

    def _node(self, nid: str, ms: list[int], state: Any) -> dict[str, Any] | None:
        """One node's part of a line: its members ``ms`` (sorted) that are done, and still
        have their products, with their keys, outputs and products' fingerprints."""
        from ..planning.products import absolute

        ns = state.nodes[nid]
        done = ns.state
        ms = [i for i in ms if done[i] == DONE]
        prod: dict[str, Any] = {}
        if self.plan.nodes[nid].products and self.workspace:
            kept = []
            for i in ms:
                fps = [fingerprint(p) for p in absolute(self.plan, self.workspace, nid, i)]
                if all(fps):
                    prod[str(i)] = fps
                    kept.append(i)
            ms = kept
        if not ms:
            return None
        key = self.keyring.key
        keys = b"".join(key(nid, i) for i in ms)
        runs = _runs(ms)
        pb = self.keyring.parts(nid, runs)  # (ms are sorted: their parts are the runs' bytes)
        part: dict[str, Any] = {"r": runs, "k": base64.b64encode(keys).decode(),
                                "p": base64.b64encode(b"".join(pb[lo * PART_BYTES:hi * PART_BYTES]
                                                               for lo, hi in runs)).decode()}
        if nid not in self.told:
            part["np"] = self.keyring.node_parts(nid)
            self.told.add(nid)
        outs = {str(i): o for i in ms if (o := ns.outputs.get(i))}
        if outs:
            part["out"] = outs
        if prod:
            part["prod"] = prod
        return part

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def remove(self) -> None:
        """The run's end wrote the whole record: this one is no longer needed (nor written again)."""
        self.broken = "the run's end wrote the whole record"
        self.pending.clear()
        self.close()
        try:
            os.unlink(self.dir / FILE)
        except OSError:
            pass


def fingerprint(path: str) -> list[int] | None:
    """A product's ``[size, mtime_ns]``, or None when it is not there (or not a regular file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns] if stat.S_ISREG(st.st_mode) else None


def _line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def _runs(ms: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in ms:
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def _trim_torn(path: Path) -> None:
    """Cut a last line a kill left without its end (never a record: a reader leaves it out)."""
    try:
        with open_regular(path, "rb+") as fh:
            size = fh.seek(0, os.SEEK_END)
            back = min(size, 1 << 20)
            fh.seek(size - back)
            tail = fh.read()
            if not tail or tail.endswith(b"\n"):
                return
            cut = tail.rfind(b"\n")
            fh.truncate(size - back + cut + 1 if cut >= 0 else 0)
    except OSError:
        pass


class Taken:
    """What one ``lending.jsonl`` lends, node by node (members in the order lent; a later
    line's word on a member is the one kept)."""

    def __init__(self, head: dict[str, Any]):
        self.head = head
        self.t = float(head.get("t") or 0)
        self.members: dict[str, list[int]] = {}
        self.keys: dict[str, bytearray] = {}
        self.out: dict[str, dict[str, Any]] = {}
        self.prod: dict[str, dict[str, Any]] = {}
        self.parts: dict[str, bytearray] = {}
        self.np: dict[str, dict[str, str]] = {}

    def add(self, nid: str, part: dict[str, Any]) -> None:
        ms = [i for lo, hi in part["r"] for i in range(lo, hi)]
        keys = base64.b64decode(part["k"], validate=True)
        if len(keys) != len(ms) * KEY_BYTES or not all(type(i) is int and i >= 0 for i in ms):
            raise ValueError("its members and keys disagree")
        # (a line of version 1 has no parts: zeros, not known)
        parts = base64.b64decode(part["p"], validate=True) if "p" in part else bytes(len(ms) * PART_BYTES)
        if len(parts) != len(ms) * PART_BYTES:
            raise ValueError("its members and their keys' parts disagree")
        if "np" in part:
            if not isinstance(part["np"], dict) or not all(isinstance(v, str) for v in part["np"].values()):
                raise ValueError("its node's parts are not a mapping of texts")
            self.np[nid] = part["np"]
        self.members.setdefault(nid, []).extend(ms)
        self.keys.setdefault(nid, bytearray()).extend(keys)
        self.parts.setdefault(nid, bytearray()).extend(parts)
        if part.get("out"):
            self.out.setdefault(nid, {}).update(part["out"])
        if part.get("prod"):
            self.prod.setdefault(nid, {}).update(part["prod"])


def read(run_dir: Path, workflow: str | None = None) -> Taken | str:
    """What ``run_dir``'s ``lending.jsonl`` lends, or why it lends nothing (one line): not
    this ``workflow``'s, damaged, or a line that does not match its signature."""
    name = run_dir.name
    try:
        fh = open_regular(run_dir / FILE, "rb")
    except OSError as exc:
        return f"run {name}: its record of what it lends cannot be read: {exc.strerror or exc}"
    with fh:
        if os.fstat(fh.fileno()).st_size > MAX_FILE:
            return f"run {name}: its record of what it lends ({FILE}) is larger than {MAX_FILE >> 20} MiB"
        taken: Taken | None = None
        while line := fh.readline(MAX_LINE + 1):
            if not line.endswith(b"\n"):
                break  # (cut short by a kill, or longer than any line pwe writes: not a record)
            why = _take(run_dir, line, taken, workflow)
            if isinstance(why, str):
                return f"run {name}: {why}"
            taken = why
    if taken is None:
        return f"run {name}: no record of what it may lend (it has not reached its end)"
    return taken


def _take(run_dir: Path, line: bytes, taken: Taken | None, workflow: str | None) -> Taken | str:
    try:
        msg = json.loads(line)
    except ValueError:
        return f"its record of what it lends ({FILE}) is damaged"
    if not isinstance(msg, dict) or not authentic(run_dir, msg):
        return f"its record of what it lends ({FILE}) does not match its signature (tampered with?)"
    if taken is None:
        if msg.get("kind") != KIND or msg.get("v") not in READS:
            return f"its record of what it lends ({FILE}) is of another version of pwe"
        if workflow is not None and msg.get("workflow") != workflow:
            return f"it is a run of workflow '{msg.get('workflow')}', not '{workflow}'"
        return Taken(msg)
    try:
        for nid, part in msg["nodes"].items():
            taken.add(str(nid), part)
        taken.t = max(taken.t, float(msg.get("t") or 0))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"its record of what it lends ({FILE}) is damaged ({exc})"
    return taken


def workflow_of(run_dir: Path) -> str | None:
    """The workflow a run's ``lending.jsonl`` says (unverified: only to pass over other
    workflows' runs)."""
    try:
        with open_regular(run_dir / FILE, "rb") as fh:
            head = json.loads(fh.readline(MAX_LINE + 1) or b"{}")
    except (OSError, ValueError):
        return None
    return head.get("workflow") if isinstance(head, dict) and isinstance(head.get("workflow"), str) else None


def unfinished(root: Path, workflow: str, exclude: Path | None = None, most: int = 10_000) -> list[str]:
    """The runs of ``workflow`` under the runs root ``root`` that did not finish, were not
    cancelled, and whose engine is gone (none holds ``engine.lock``): each could be taken
    up again by ``pwe resume``. Newest first (by their ids' order)."""
    from .locks import EngineLock

    out = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name, reverse=True)[:most]
    except OSError:
        return []
    for e in entries:
        d = Path(e.path)
        if not e.is_dir(follow_symlinks=False) or (exclude is not None and d.resolve() == exclude.resolve()):
            continue
        if not (d / "run.json").is_file() or (d / "reusable.json").exists():
            continue  # (not a run; or one that reached its end)
        try:
            snap = read_json(d / "state.json", {"workflow": str}, limit=64 << 20)
        except OSError:
            continue
        if snap["workflow"] != workflow or snap.get("cancelled") or snap.get("finished_ok") is not None:
            continue
        if EngineLock(d).holder() is None:
            out.append(d.name)
    return out
