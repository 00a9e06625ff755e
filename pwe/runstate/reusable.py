"""What a run may lend to later runs of its workflow, signed; and which members a new run reuses.

When a run's engine reaches its end it writes, beside its journal, the record of each
member that ended well (``reusable.json``): its key (:mod:`pwe.planning.reuse`), its outputs
and, for a node with ``products``, each product's fingerprint (size and ``mtime_ns``, one
``stat`` by the engine per product). The keys, 16 bytes each, are in ``reusable.keys``,
whose SHA-256 the record holds. Since version 2, the keys' **parts** too (what names the
change when a later run runs a member again: :mod:`pwe.runstate.rerun_why`): per node
``np`` (:func:`pwe.planning.reuse.node_parts`), and per member 8 bytes in
``reusable.parts`` (the members that lend, in the keys' order, then those that failed,
``failed: {runs, at}`` per node), whose SHA-256 the record holds as well. A record of
version 1 is still read: its members' parts are unknown (zeros). The record is signed with the run's secret
(:func:`pwe.runstate.notify.sign`: HMAC-SHA256 under ``RUN/secret``, owner-only), so a
record changed by hand, or keys put in another run's place, do not verify: nothing of
that run is reused, and ``pwe plan --explain`` says so.

When a new run begins (:func:`decide`), each member is **reused** when

- its node may be (``reuse`` not false, no ``check``);
- every member it waits for is reused too (a member downstream of one that runs, runs);
- a run of the same workflow under the runs root (or ``--reuse-from``) made a member
  with the same key and ended it well (the newest such run lends it);
- each of its products is still in the workspace with the fingerprint it had then
  (deleted or changed: it runs, and is not taken as complete by its products either);
  a lending run whose workspace was another lends no member that has products (this
  run's own workspace decides, by completion by products).

Reused members are journaled compactly (:data:`pwe.runstate.journal.REUSED`: runs of
consecutive members taken from consecutive members of one run), done without a pilot;
their outputs come from the record.

Why one module over 450 lines: the record written at a run's end and the decision read from
it at the next run's start are the two sides of one format (its fields, its signature, its
keys file, the fingerprints), kept together so that they cannot drift; what a run lends as
it goes is :mod:`pwe.runstate.lending`.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..base.errors import InputError
from ..base.regular import open_regular, read_json, write_json_atomic
from ..base.states import DONE
from ..base.states import FAILED
from ..planning.reuse import KEY_BYTES, PART_BYTES, Parts, keys as member_keys, reusable, same_space
from . import lending
from .lending import fingerprint
from .notify import authentic, sign
from .records import reused

RECORD, KEYS, PARTS = "reusable.json", "reusable.keys", "reusable.parts"
KIND, VERSION = "pwe-reusable", 2
#: the versions read (1: without parts)
READS = (1, 2)
#: the largest record read (outputs are small values: pwe limits them per member)
MAX_RECORD = 256 << 20
#: most runs of consecutive members one journal record holds
RUNS_PER_RECORD = 4096
#: most run directories looked at under a runs root
MAX_RUNS = 10_000
_DONE_RUN = re.compile(b"[%c]+" % DONE)
_FAILED_RUN = re.compile(b"[%c]+" % FAILED)

#: why a member runs (pwe plan --explain)
NEW = "no earlier run made a member with its key (new, or its command, parameters, environment or inputs changed)"
UPSTREAM = "a member it waits for runs"
OFF = "its node says reuse: false"
CHECKED = "its node has a check (its members grow while it runs)"
GONE = "a product it made is gone"
CHANGED = "a product it made was changed since"
ELSEWHERE = "the run that made it made its products in another workspace"


def _runs_of(positions: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in positions:
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def _less(runs: list[list[int]], minus: list[list[int]]) -> list[list[int]]:
    """``runs`` less the members of ``minus`` (both sorted runs ``[lo, hi)``)."""
    if not minus:
        return runs
    out = []
    for lo, hi in runs:
        for a, b in minus:
            if b <= lo or a >= hi:
                continue
            if a > lo:
                out.append([lo, a])
            lo = max(lo, b)
            if lo >= hi:
                break
        if lo < hi:
            out.append([lo, hi])
    return out


def _within(runs: list[list[int]], i: int) -> bool:
    from bisect import bisect_right

    k = bisect_right(runs, [i, float("inf")]) - 1
    return k >= 0 and runs[k][0] <= i < runs[k][1]


def write(run_dir: Path, plan: Any, state: Any, run_id: str, workspace: str | None,
          recorded: Callable[[str, list[list[int]]], Any] | None = None,
          parts: Any = None) -> int:
    """Write the run's signed record of what it may lend: every member of a reusable node
    that is done and was not found complete by its products (reused ones included: their
    outputs are in the state). Returns how many members it lends. ``recorded(node, runs)``:
    the node's keys as they were fixed when its members were handed to pilots
    (:meth:`pwe.runstate.keyring.KeyRing.filled`), those of ``runs`` all there; and
    ``parts``, the engine's :class:`pwe.runstate.keyring.KeyRing` for their parts
    (``parts(node, runs)``, ``node_parts(node)``); None (a run without its engine's keys):
    every key and part made now, the inputs as they are now."""
    root = workspace or str(plan.file.parent)
    # the keys streamed into the file as each node's runs are known, never gathered into
    # one more copy of them (the engine's peak at the end of a 10^7 run was three copies:
    # 472 MiB, bench/BENCHMARKS.md)
    keys: Any = recorded
    if recorded is None or parts is None:
        made_parts = Parts()
        made, _ = member_keys(plan, Path(root), frozen=False, parts=made_parts)

        def keys(nid: str, runs: list[list[int]]) -> bytearray:
            return made[nid]
        parts = _Made(made_parts)
    digest, pdigest = hashlib.sha256(), hashlib.sha256()
    tmp = run_dir / f".{KEYS}.{os.getpid()}.tmp"
    ptmp = run_dir / f".{PARTS}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh, open(ptmp, "wb") as ph:
            nodes = _write_keys(fh, digest, plan, state, keys, workspace, _PartsOut(ph, pdigest, parts))
            count = fh.tell() // KEY_BYTES
    except BaseException:
        tmp.unlink(missing_ok=True)  # (a full disk: no half-written keys left behind)
        ptmp.unlink(missing_ok=True)
        raise
    body = {"kind": KIND, "v": VERSION, "workflow": plan.workflow.name, "run": run_id, "workspace": root,
            "t": time.time(), "keys_sha256": digest.hexdigest(), "parts_sha256": pdigest.hexdigest(), "nodes": nodes}
    os.replace(tmp, run_dir / KEYS)
    os.replace(ptmp, run_dir / PARTS)
    write_json_atomic(run_dir / RECORD, sign(run_dir, body))
    return count


class _Made:
    """Parts made at once (:func:`pwe.planning.reuse.keys`), seen as the engine's keyring's."""

    def __init__(self, made: Parts):
        self.made = made

    def parts(self, nid: str, runs: Any = None) -> bytearray:
        return self.made.members[nid]

    def node_parts(self, nid: str) -> dict[str, str]:
        return self.made.node[nid]


class _PartsOut:
    """``reusable.parts`` as it is written: each node's lending members' parts (in the
    keys' order), their failed members' after all of them."""

    def __init__(self, fh: Any, digest: Any, source: Any):
        self.fh, self.digest, self.source = fh, digest, source
        self.failed: list[tuple[str, list[list[int]]]] = []

    def put(self, nid: str, runs: list[list[int]]) -> None:
        view = memoryview(self.source.parts(nid, runs))
        for lo, hi in runs:
            piece = view[lo * PART_BYTES:hi * PART_BYTES]
            self.fh.write(piece)
            self.digest.update(piece)

    def put_failed(self, nodes: dict[str, Any]) -> None:
        """The failed members' parts, after every lent one's: where they begin, per node."""
        for nid, runs in self.failed:
            nodes[nid]["failed"] = {"runs": runs, "at": self.fh.tell() // PART_BYTES}
            self.put(nid, runs)


def _write_keys(fh: Any, digest: Any, plan: Any, state: Any, keys: Callable[[str, list[list[int]]], Any],
                workspace: str | None, parts: _PartsOut) -> dict[str, Any]:
    """The keys of what the run lends, written to ``fh`` (and fed to ``digest``) node after
    node, and their parts to ``parts``; each node's record: its runs of members, where its
    keys begin, its outputs, its parts; its failed members and where their parts begin."""
    nodes: dict[str, Any] = {}
    for nid, ns in state.nodes.items():
        pn = plan.nodes[nid]
        if not reusable(plan, nid):
            continue
        runs, prod = _lent_runs(plan, nid, ns, workspace)
        runs = _less(runs, state.env_set_runs(nid) if getattr(state, "sets", None) else [])
        failed = [list(m.span()) for m in _FAILED_RUN.finditer(ns.state, 0, pn.size)]
        if not runs and not failed:
            continue
        node = nodes[nid] = {"runs": runs, "at": fh.tell() // KEY_BYTES, "out": {},
                             "np": parts.source.node_parts(nid)}
        if failed:
            parts.failed.append((nid, failed))
        if not runs:
            continue
        view = memoryview(keys(nid, runs))
        for lo, hi in runs:
            piece = view[lo * KEY_BYTES:hi * KEY_BYTES]  # (a view: no copy)
            fh.write(piece)
            digest.update(piece)
        parts.put(nid, runs)
        node["out"] = {str(i): o for i, o in sorted(ns.outputs.items()) if o and _within(runs, i)}
        if prod:
            node["prod"] = prod
    parts.put_failed(nodes)
    return nodes


def _lent_runs(plan: Any, nid: str, ns: Any, workspace: str | None) -> tuple[list[list[int]], dict[str, Any]]:
    """The runs of members of ``nid`` the run lends, and their products' fingerprints
    (member -> list; only for a node with products)."""
    from ..planning.products import absolute

    pn = plan.nodes[nid]
    # runs of members done, less those complete by their products (not made by a run)
    runs = _less([list(m.span()) for m in _DONE_RUN.finditer(ns.state, 0, pn.size)], ns.complete)
    prod: dict[str, Any] = {}
    if pn.products and workspace:  # (one stat per product, only for nodes that have them)
        kept = []
        for lo, hi in runs:
            for i in range(lo, hi):
                fps = [fingerprint(p) for p in absolute(plan, workspace, nid, i)]
                if all(fps):
                    prod[str(i)] = fps
                    kept.append(i)
        runs = _runs_of(kept)
    return runs, prod


@dataclass
class Lender:
    """One earlier run's verified record. ``parts``: its lent members' parts, in the keys'
    order (8 bytes each; zeros: not known, a record of an older pwe); ``failed``: per node
    its failed members' runs and their parts (``{"runs": [[lo, hi]], "parts": bytes}``);
    a node's parts are its ``nodes[nid]["np"]`` (none: not known)."""

    dir: Path
    run: str
    t: float
    nodes: dict[str, Any]
    keys: bytes
    workspace: str
    parts: bytes = b""
    failed: dict[str, Any] = field(default_factory=dict)
    #: whether the run reached its end (else: what it lent as its members ended, killed or taken up again)
    ended: bool = True


def read(run_dir: Path, workflow: str | None = None) -> Lender | str:
    """The verified record of ``run_dir``, or why it lends nothing (one line): no record
    (no member of it has ended), not this ``workflow``'s, or tampered with. The record
    written at its end (``reusable.json``), what it lent as its members ended
    (``lending.jsonl``: a run killed, or taken up again, :mod:`pwe.runstate.lending`), or
    both: when either does not verify, nothing."""
    final = _read_final(run_dir, workflow) if (run_dir / RECORD).exists() else None
    if not os.path.lexists(run_dir / lending.FILE):
        return final or f"run {run_dir.name}: no record of what it may lend (it has not reached its end)"
    taken = lending.read(run_dir, workflow)
    if isinstance(final, str):
        return final
    if isinstance(taken, str):
        return taken
    return _merged(run_dir, final, taken)


def _merged(run_dir: Path, final: Lender | None, taken: lending.Taken) -> Lender:
    """One lender of a run's end record (if any) and what it lent as its members ended
    (the later word on a member is the one kept)."""
    if final is not None:
        for nid, n in final.nodes.items():
            at = n["at"]
            ms = [i for lo, hi in n["runs"] for i in range(lo, hi)]
            keys = final.keys[at * KEY_BYTES:(at + len(ms)) * KEY_BYTES]
            parts = final.parts[at * PART_BYTES:(at + len(ms)) * PART_BYTES]
            # (the end record's members first: what was lent as they ended comes after it)
            taken.members[nid] = ms + taken.members.get(nid, [])
            taken.keys[nid] = bytearray(keys) + taken.keys.get(nid, bytearray())
            taken.parts[nid] = bytearray(parts) + taken.parts.get(nid, bytearray())
            taken.out[nid] = {**n.get("out", {}), **taken.out.get(nid, {})}
            taken.prod[nid] = {**n.get("prod", {}), **taken.prod.get(nid, {})}
            if "np" in n and nid not in taken.np:
                taken.np[nid] = n["np"]
    nodes: dict[str, Any] = {}
    blob, pblob = bytearray(), bytearray()
    for nid, ms in taken.members.items():
        keys, parts = taken.keys[nid], taken.parts[nid]
        last = {m: k for k, m in enumerate(ms)}  # (a member lent twice: its last word)
        order = sorted(last)
        runs = _runs_of(order)
        at = len(blob) // KEY_BYTES
        for m in order:
            k = last[m]
            blob += keys[k * KEY_BYTES:(k + 1) * KEY_BYTES]
            pblob += parts[k * PART_BYTES:(k + 1) * PART_BYTES]
        out = {str(m): o for m in order if (o := taken.out.get(nid, {}).get(str(m)))}
        prod = {str(m): p for m in order if (p := taken.prod.get(nid, {}).get(str(m))) is not None}
        nodes[nid] = {"runs": runs, "at": at, "out": out, **({"prod": prod} if prod else {}),
                      **({"np": taken.np[nid]} if nid in taken.np else {})}
    head = taken.head
    t = max(taken.t, final.t if final is not None else 0.0)
    return Lender(run_dir, str(head.get("run") or run_dir.name), t, nodes, bytes(blob),
                  str(final.workspace if final is not None else head.get("workspace")), bytes(pblob),
                  final.failed if final is not None else {}, ended=False)


def _read_final(run_dir: Path, workflow: str | None = None) -> Lender | str:
    """The verified record a run wrote at its end (:func:`write`), or why it lends nothing."""
    path = run_dir / RECORD
    try:
        msg = read_json(path, {"kind": str, "run": str, "workflow": str, "nodes": dict, "keys_sha256": str},
                        limit=MAX_RECORD)
    except OSError as exc:
        return f"run {run_dir.name}: its record of what it may lend cannot be read: {exc.strerror or exc}"
    if msg.get("kind") != KIND or msg.get("v") not in READS:
        return f"run {run_dir.name}: its record of what it may lend is of another version of pwe"
    if workflow is not None and msg["workflow"] != workflow:
        return f"run {run_dir.name} is a run of workflow '{msg['workflow']}', not '{workflow}'"
    if not authentic(run_dir, msg):
        return f"run {run_dir.name}: its record of what it may lend does not match its signature (tampered with?)"
    count = 0
    try:
        for n in msg["nodes"].values():
            got = sum(hi - lo for lo, hi in n["runs"])
            if type(n["at"]) is not int or n["at"] != count or got < 0:
                raise ValueError("its nodes' keys do not follow one another")
            count += got
        with open_regular(run_dir / KEYS, "rb") as fh:
            blob = fh.read(count * KEY_BYTES + 1)
        parts, failed = _read_parts(run_dir, msg, count) if msg["v"] >= 2 else (bytes(count * PART_BYTES), {})
    except (OSError, TypeError, ValueError, KeyError, AttributeError) as exc:
        return f"run {run_dir.name}: its record of what it may lend is damaged ({exc})"
    if len(blob) != count * KEY_BYTES or hashlib.sha256(blob).hexdigest() != msg["keys_sha256"]:
        return f"run {run_dir.name}: its keys ({KEYS}) do not match its signed record (tampered with?)"
    if parts is None:
        return f"run {run_dir.name}: its keys' parts ({PARTS}) do not match its signed record (tampered with?)"
    return Lender(run_dir, msg["run"], float(msg.get("t") or 0), msg["nodes"], blob, str(msg.get("workspace")),
                  parts, failed)


def _read_parts(run_dir: Path, msg: dict[str, Any], count: int) -> tuple[bytes | None, dict[str, Any]]:
    """A version 2 record's parts: those of its ``count`` lent members, and per node its
    failed members' (:class:`Lender`); None for parts that do not match the signed record's
    SHA-256. ValueError (and the like) for a record whose failed members do not add up."""
    failed: dict[str, Any] = {}
    total = count
    for nid, n in msg["nodes"].items():
        f = n.get("failed")
        if f is None:
            continue
        got = sum(hi - lo for lo, hi in f["runs"])
        if type(f["at"]) is not int or f["at"] != total or got < 0:
            raise ValueError("its failed members' parts do not follow one another")
        failed[nid] = {"runs": f["runs"], "at": f["at"]}
        total += got
    with open_regular(run_dir / PARTS, "rb") as fh:
        blob = fh.read(total * PART_BYTES + 1)
    if len(blob) != total * PART_BYTES or hashlib.sha256(blob).hexdigest() != msg["parts_sha256"]:
        return None, {}
    for f in failed.values():
        at = f.pop("at")
        n = sum(hi - lo for lo, hi in f["runs"])
        f["parts"] = blob[at * PART_BYTES:(at + n) * PART_BYTES]
    return blob[:count * PART_BYTES], failed


def is_run(d: Path) -> bool:
    return (d / "run.json").is_file()


def lenders(where: Path, workflow: str, exclude: Path | None = None, named: bool = False,
            said: str = "--reuse-from") -> tuple[list[Lender], list[str]]:
    """The verified records of the runs of ``workflow`` at ``where`` (a runs root, or one
    run), newest first; and a line for each run of it that lends nothing. ``named``
    (``--reuse-from``): ``where`` must be a run of this workflow or a runs root holding one,
    else :class:`InputError` (one line)."""
    where = Path(where)
    if named and not where.is_dir():
        raise InputError(f"{said} {where}: not a directory; give a runs root (such as ./pwe-runs) or a run directory")
    if is_run(where):
        got = read(where.resolve(), None)
        if isinstance(got, str):
            if named:
                raise InputError(f"{said} {where}: {got}")
            return [], [got]
        wf = _workflow_of(where)
        if wf != workflow:
            raise InputError(f"{said} {where}: a run of workflow '{wf}', not of '{workflow}'; give a run of "
                             f"'{workflow}' or a runs root")
        return [got], []
    out: list[Lender] = []
    notes: list[str] = []
    runs_seen = 0
    try:
        entries = sorted(os.scandir(where), key=lambda e: e.name)[:MAX_RUNS] if where.is_dir() else []
    except OSError as exc:
        raise InputError(f"{said} {where}: cannot list it: {exc.strerror}") from None
    for e in entries:
        d = Path(e.path)
        if not e.is_dir(follow_symlinks=False) or (exclude is not None and d.resolve() == exclude) or not is_run(d):
            continue
        runs_seen += 1
        if not (d / RECORD).exists() and not os.path.lexists(d / lending.FILE):
            continue
        if _workflow_of(d) != workflow:
            continue
        got = read(d.resolve(), workflow)
        if isinstance(got, str):
            notes.append(got)
        else:
            out.append(got)
    if named and not runs_seen:
        raise InputError(f"{said} {where}: not a runs root (no run directory in it) nor a run; give a directory "
                         "such as ./pwe-runs or one run of it")
    if named and not out and not notes:
        raise InputError(f"{said} {where}: holds no ended run of workflow '{workflow}'")
    out.sort(key=lambda lender: lender.t, reverse=True)
    return out, notes


def _workflow_of(run_dir: Path) -> str | None:
    """The workflow name a run's record says (unverified: only to pass over other workflows' runs)."""
    try:
        return read_json(run_dir / RECORD, {"workflow": str}, limit=MAX_RECORD)["workflow"]
    except OSError:
        return lending.workflow_of(run_dir)


@dataclass
class Decision:
    """Which members a new run reuses (per node, runs ``[lo, hi, from_lo, lender]``), why
    each other one runs (per node and reason, runs ``[lo, hi]``), and the members whose
    products were gone or changed (not to be taken as complete by their products)."""

    reused: dict[str, list[list[int]]] = field(default_factory=dict)
    why: dict[str, dict[str, list[list[int]]]] = field(default_factory=dict)
    changed: dict[str, set[int]] = field(default_factory=dict)
    lenders: list[Lender] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    outputs: dict[str, dict[int, Any]] = field(default_factory=dict)
    #: every member's key as the run begins (the reused ones' are their recorded keys)
    keys: dict[str, bytes] = field(default_factory=dict)

    def count(self, nid: str) -> int:
        return sum(r[1] - r[0] for r in self.reused.get(nid, ()))

    def records(self) -> Iterator[dict[str, Any]]:
        """The journal's ``reused`` records: per node and lending run, at most
        :data:`RUNS_PER_RECORD` runs each, with the outputs of their members."""
        for nid, runs in self.reused.items():
            by: dict[int, list[list[int]]] = {}
            for lo, hi, src, li in runs:
                by.setdefault(li, []).append([lo, hi, src])
            outs = self.outputs.get(nid, {})
            for li, rs in by.items():
                for k in range(0, len(rs), RUNS_PER_RECORD):
                    part = rs[k:k + RUNS_PER_RECORD]
                    yield reused(nid, self.lenders[li].run, part,
                                 {str(i): outs[i] for lo, hi, _ in part for i in range(lo, hi) if i in outs})


def _add(runs: list[list[int]], i: int) -> None:
    if runs and runs[-1][1] == i:
        runs[-1][1] = i + 1
    else:
        runs.append([i, i + 1])


def decide(plan: Any, workspace: str | None, found: list[Lender], notes: list[str] | None = None,
           keys: dict[str, bytes] | None = None) -> Decision:
    """Which members of a run of ``plan`` beginning now are reused from ``found``
    (newest first): the rules in the module's docstring. ``keys``: the plan's, made
    already (:func:`pwe.planning.reuse.keys`)."""

    out = Decision(lenders=found, notes=list(notes or []))
    if not found and not any(pn.inputs for pn in plan.nodes.values()):
        return out
    # (with inputs: hashed even with nothing to reuse, so that an input that is no regular
    # file of the workspace is refused when the run begins, not found when it ends)
    keys = keys or member_keys(plan, Path(workspace or plan.file.parent))[0]
    if not found:
        return out
    out.keys = keys
    here = workspace or str(plan.file.parent)  # (as write() records a lender's)
    taken: dict[str, bytearray] = {}
    for nid, pn in plan.nodes.items():
        size = pn.size
        ok = taken[nid] = bytearray(size)
        why = out.why[nid] = {}
        if not reusable(plan, nid):
            why[OFF if pn.check is None else CHECKED] = [[0, size]] if size else []
            continue
        index = _index(found, nid)
        edges = plan.edges_into(nid)
        if any(e.barrier and taken[e.src].count(1) != len(taken[e.src]) for e in edges):
            why[UPSTREAM] = [[0, size]] if size else []
            continue
        # over an edge between nodes of the same parameters and values, member i waits for member i
        same = [(taken[e.src], None if same_space(plan.nodes[e.src].space, pn.space, e.shared) else e)
                for e in edges if not e.barrier]
        k = keys[nid]
        reused: list[list[int]] = []
        outs: dict[int, Any] = {}
        for i in range(size):
            if same and not all(up[i] if e is None else all(up[j] for j in plan.upstream(e, i)) for up, e in same):
                _add(why.setdefault(UPSTREAM, []), i)
                continue
            hit = index.get(k[i * KEY_BYTES:(i + 1) * KEY_BYTES])
            if hit is None:
                _add(why.setdefault(NEW, []), i)
                continue
            li, m = hit
            node = found[li].nodes[nid]
            bad = _products_not_lent(plan, workspace, here, found[li], nid, i, m) if pn.products else None
            if bad:
                _add(why.setdefault(bad, []), i)
                if bad != ELSEWHERE:  # (gone or changed: it runs, not taken as complete by its products)
                    out.changed.setdefault(nid, set()).add(i)
                continue
            ok[i] = 1
            if reused and reused[-1][1] == i and reused[-1][3] == li and reused[-1][2] + i - reused[-1][0] == m:
                reused[-1][1] = i + 1
            else:
                reused.append([i, i + 1, m, li])
            if node.get("out") and (o := node["out"].get(str(m))):
                outs[i] = o
        if reused:
            out.reused[nid] = reused
        if outs:
            out.outputs[nid] = outs
    return out


def _products_not_lent(plan: Any, workspace: str | None, here: str, lender: Lender, nid: str, i: int,
                       m: int) -> str | None:
    """Why member ``i``'s products, made by member ``m`` of ``lender``, are not lent, or
    None: the lender made them in another workspace (not this run's to give its
    dependants: completion by products decides, in this run's own), or one is gone or
    changed since."""
    from ..planning.products import absolute

    if lender.workspace != here:
        return ELSEWHERE
    return _products_differ(absolute(plan, workspace, nid, i) if workspace else [],
                            lender.nodes[nid].get("prod", {}).get(str(m)))


def _products_differ(paths: list[str], recorded: Any) -> str | None:
    if not isinstance(recorded, list) or len(recorded) != len(paths):
        return GONE
    for p, fp in zip(paths, recorded):
        now = fingerprint(p)
        if now is None:
            return GONE
        if now != fp:
            return CHANGED
    return None


def _index(found: list[Lender], nid: str) -> dict[bytes, tuple[int, int]]:
    """key -> (lender, member) of node ``nid`` over every lender, the newest first."""
    index: dict[bytes, tuple[int, int]] = {}
    for li, lender in enumerate(found):
        node = lender.nodes.get(nid)
        if not node:
            continue
        pos, blob = node["at"], lender.keys
        for lo, hi in node["runs"]:
            for m in range(lo, hi):
                index.setdefault(blob[pos * KEY_BYTES:(pos + 1) * KEY_BYTES], (li, m))
                pos += 1
    return index
