"""The checkpoint: the members' state as of a point in the journal, so that the engine (on
resume) and every reader (``pwe show``, ``pwe status`` after a crash, the report, the API)
load it and replay only the journal's tail, not the whole journal.

It is derived, never a second store: the journal stays the run's one record, the
checkpoint says which prefix of it (byte offset and line count) it covers, and it can
always be rebuilt by a full replay. A checkpoint that is damaged (its checksum), that
belongs to another journal (the bytes just before its offset are not the ones it saw), or
to another plan (node sizes) is ignored with a warning and the whole journal replayed.

``checkpoint.bin`` (owner-only, written to a temporary name then renamed, so a reader
sees the old one or the new one)::

    PWECKPT1 <crc32 of the rest, 8 hex> <header length>\\n
    <header: JSON, one line>\\n
    <body: each node's state bytes, attempt counters, dependency counters, raw>

The header holds the journal offset, line count and anchor (the CRC-32 of up to 4 KiB
of journal before the offset), each node's counts, seconds spent, and sparse maps (exit statuses,
reasons, outputs, failures, pilots and pids of members in flight), and the run-wide
state (pilots, barriers, edge events, cancelled, finished, stopped). Nothing else is
needed: the ready queue is the members in state ``ready``, found again from the state
bytes.

Cost at a million members of one node: 13 MB (a byte, 4 bytes and 8 bytes a member;
dependency counters are left out for a node with nothing upstream: always zero), written
in tens of milliseconds; the engine writes one at most every ``PWE_CHECKPOINT_EVERY``
seconds (20 by default) and never spends more than about 2 % of its time on them (:func:`due`).
"""

from __future__ import annotations

import json
import os
import zlib
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .journal import Replayed, replay
from .state import RunState, ready_runs
from pilot import faults
from ..base.regular import open_regular
from ..base.states import NAMES
from ..base.settings import CHECKPOINT_EVERY

if TYPE_CHECKING:
    from ..planning.plan import Plan

NAME = "checkpoint.bin"
MAGIC = b"PWECKPT1"
_ANCHOR = 4096
_SPARSE = ("rc", "why", "outputs", "failures", "pilot", "pid")
#: sparse maps a checkpoint of an earlier version may lack (empty then)
_SPARSE_NEW = ("reason", "losses")


def _anchor(journal: Path, offset: int) -> int:
    """CRC-32 of the journal's bytes just before ``offset``: whether it is still the
    journal the checkpoint was taken of."""
    with open_regular(journal, "rb") as fh:
        start = max(0, offset - _ANCHOR)
        fh.seek(start)
        data = fh.read(offset - start)
    if len(data) != offset - start:
        raise ValueError("the journal is shorter than the checkpoint's offset")
    return zlib.crc32(data)


def write(run_dir: Path, state: RunState, offset: int, lines: int, fsync: bool = False) -> int:
    """Write the checkpoint of ``state``, which is the journal's first ``offset`` bytes
    (``lines`` lines) applied. Returns its size. Raises OSError (the caller goes on: a
    checkpoint is a convenience)."""
    run_dir = Path(run_dir)
    body: list[bytes] = []
    nodes: dict[str, Any] = {}
    for nid, ns in state.nodes.items():
        deps = bool(state.plan.edges_into(nid))  # (nothing upstream: its counters stay 0)
        parts = [bytes(ns.state), ns.attempt.tobytes()] + ([ns.deps.tobytes()] if deps else [])
        nodes[nid] = {"size": ns.size, "counts": ns.counts, "deps": deps, "bytes": [len(p) for p in parts],
                      "spent": ns.spent, "done_spent": ns.done_spent, "complete": ns.complete,
                      "reused": ns.reused,
                      **{k: list(getattr(ns, k).items()) for k in _SPARSE + _SPARSE_NEW}}
        tree = state.plan.nodes[nid].tree
        if tree.values or tree.verdict or tree.open:  # (a check's members and verdicts: pwe/planning/trees.py)
            nodes[nid]["tree"] = tree.to_json()
        body.extend(parts)
    header = {
        "offset": offset, "lines": lines, "anchor": _anchor(run_dir / "journal.jsonl", offset),
        "nodes": nodes, "barrier_left": [[s, d, n] for (s, d), n in state.barrier_left.items()],
        "pilots": state.pilots, "cancelled": state.cancelled, "finished_ok": state.finished_ok,
        "stopped": state.stopped, "halted": state.halted, "edges": state.edges, "rejected": state.rejected,
        "holds": state.holds, "released": sorted(state.released), "sets": state.sets,
        "edge_files": sorted(state.edge_files), "api_checks": sorted(state.api_checks),
    }
    head = json.dumps(header, separators=(",", ":")).encode() + b"\n"
    crc = zlib.crc32(head)
    for part in body:
        crc = zlib.crc32(part, crc)
    path = run_dir / NAME
    tmp = run_dir / f".{NAME}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with open(fd, "wb") as fh:
            fh.write(b"%s %08x %d\n" % (MAGIC, crc, len(head)))
            fh.write(head)
            for part in body:
                fh.write(part)
            size = fh.tell()
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        faults.at("rename")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size


def _read(run_dir: Path, plan: Plan) -> tuple[RunState, int, int]:
    """The checkpoint's state, offset and line count; ValueError (what is wrong) when it
    cannot be used, FileNotFoundError when there is none."""
    with open_regular(run_dir / NAME, "rb", within=run_dir) as fh:
        data = fh.read()
    first, _, rest = data.partition(b"\n")
    try:
        magic, crc, hlen = first.split(b" ")
        crc_, hlen_ = int(crc, 16), int(hlen)
    except ValueError:
        raise ValueError("not a checkpoint") from None
    if magic != MAGIC or zlib.crc32(rest) != crc_:
        raise ValueError("its checksum does not match")
    h = json.loads(rest[:hlen_])
    offset, lines = int(h["offset"]), int(h["lines"])
    if _anchor(run_dir / "journal.jsonl", offset) != h["anchor"]:
        raise ValueError("the journal is not the one it was taken of")
    if sorted(h["nodes"]) != sorted(plan.nodes) or any(
            h["nodes"][nid]["size"] - len(h["nodes"][nid].get("tree", {}).get("values", ())) != pn.size
            for nid, pn in plan.nodes.items()):
        raise ValueError("its nodes are not the run's")
    st = RunState(plan, init=False)
    at = hlen_
    for nid, ns in st.nodes.items():
        n = h["nodes"][nid]
        if "tree" in n:  # members a check grew: the node is that much larger
            plan.nodes[nid].tree.load_json(n["tree"])
            ns.size = int(n["size"])
        sizes = n["bytes"]
        ns.state = bytearray(rest[at:at + sizes[0]])
        at += sizes[0]
        ns.attempt = array("I")
        ns.attempt.frombytes(rest[at:at + sizes[1]])
        at += sizes[1]
        if n["deps"]:
            ns.deps = array("q")
            ns.deps.frombytes(rest[at:at + sizes[2]])
            at += sizes[2]
        elif len(ns.deps) != ns.size:  # (grown members: zeros too)
            ns.deps = array("q", bytes(8 * ns.size))
        if len(ns.state) != ns.size or len(ns.attempt) != ns.size or len(ns.deps) != ns.size:
            raise ValueError("a node's arrays have the wrong size")
        ns.counts = [int(c) for c in n["counts"]]
        ns.counts += [0] * (len(NAMES) - len(ns.counts))  # (a checkpoint from before a state was added)
        ns.spent, ns.done_spent = float(n["spent"]), float(n["done_spent"])  # (pwe status's core-hours)
        for k in _SPARSE:
            setattr(ns, k, {int(i): v for i, v in n[k]})
        for k in _SPARSE_NEW:
            setattr(ns, k, {int(i): v for i, v in n.get(k, ())})
        ns.complete = [[int(lo), int(hi)] for lo, hi in n.get("complete", [])]  # (pwe.planning.products)
        ns.reused = [[int(lo), int(hi), int(src), str(run)] for lo, hi, src, run in n.get("reused", [])]
        if any(not 0 <= i < ns.size for k in _SPARSE + _SPARSE_NEW for i in getattr(ns, k)) or any(
                not 0 <= lo <= hi <= ns.size for lo, hi, *_ in ns.complete + ns.reused) or \
                len(ns.counts) != len(NAMES):
            raise ValueError("a member index out of its node's range")  # (forged: its CRC is no signature)
        for lo, hi in ready_runs(ns.state):
            st.ready.append_run(nid, lo, hi)
    st.barrier_left = {(s, d): n for s, d, n in h["barrier_left"]}
    st.pilots = h["pilots"]
    st.cancelled, st.finished_ok, st.stopped = h["cancelled"], h["finished_ok"], h["stopped"]
    st.halted = h.get("halted")
    st.holds = list(h.get("holds") or [])  # (a checkpoint from before holds: none)
    st.released = {(str(n), str(p), str(v)) for n, p, v in h.get("released") or []}
    st.sets = list(h.get("sets") or [])
    st.edges, st.edge_files = h["edges"], set(h["edge_files"])
    st.api_checks = set(h.get("api_checks", ()))  # (nodes a Python callable checks: pwe/planning/trees.py)
    st.rejected = {str(k): int(n) for k, n in h.get("rejected", {}).items()}  # (pilot messages refused)
    return st, offset, lines


def load(run_dir: Path, plan: Plan) -> tuple[RunState, Replayed, list[str]]:
    """The run's state: its checkpoint, then the journal after it (or, without a usable
    checkpoint, the whole journal). Returns the state, what the replay found, and warnings
    (a checkpoint that could not be used: why, and that the whole journal was replayed).
    The one way the engine and every reader get a run's state."""
    run_dir = Path(run_dir)
    warnings: list[str] = []
    try:
        st, offset, lines = _read(run_dir, plan)
    except FileNotFoundError:
        st, offset, lines = RunState(plan), 0, 0
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        warnings.append(f"{run_dir / NAME} cannot be used ({why}); the whole journal is replayed instead")
        st, offset, lines = RunState(plan), 0, 0
    return st, replay(run_dir / "journal.jsonl", st.apply, start=offset, lines=lines), warnings


def due(last_at: float, last_cost: float, now: float) -> bool:
    """Whether the engine writes a checkpoint now: ``PWE_CHECKPOINT_EVERY`` seconds after the
    last, and never more often than 50 times what the last one took (so checkpoints cost
    the loop at most about 2 % of its time, however large the run)."""
    return now - last_at >= max(CHECKPOINT_EVERY.get(), 50 * last_cost)
