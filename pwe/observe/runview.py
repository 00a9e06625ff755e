"""A run seen from outside its engine: its phase, counts, pilots and members, worked out for
``pwe status``, ``pwe show``, ``pwe runs`` and the last lines of ``pwe run`` (a member's own
output is output.py's: pwe logs reads it there).

Reading only: nothing here takes the run's lock or starts anything. ``status`` answers from
``state.json`` and imports nothing heavy (not even the state's own module) unless the
journal is newer than the snapshot.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..base.errors import InputError, JournalTooNew, PweError
from ..runstate.locks import EngineLock
from ..runstate.rundir import COMMAND_LINE, origin
from .pilotview import pilot_states
from ..base.regular import read_json
from ..base.numbers import COUNT_MOST, MINUTES_MOST, SECONDS_MOST, within
from ..base.text import shown

#: the most seconds a node's attempts may have run in all (state.json's ``spent``)
SPENT_MOST = SECONDS_MOST * COUNT_MOST


def status(run_dir: Path) -> dict[str, Any]:
    """What ``pwe status`` shows: the snapshot's counts per node and in total, the run's
    ``phase`` in words, ``run_dir``, each pilot's state (:func:`pilotview.pilot_states`), and
    ``unreachable``: the hosts whose batch system does not answer the running engine, each
    with ``since`` (a time) and ``why`` (what it said)."""
    d = run_dir
    snap = snapshot(d / "state.json")
    holder = EngineLock(d).holder()
    if snap is None or (not holder and _mtime(d / "journal.jsonl") > _mtime(d / "state.json")):
        # the engine stopped before its last snapshot (killed, disk full), or the snapshot
        # is damaged: the journal is the record, so count from it
        from .results import load_state

        try:
            info, st = load_state(d)
            snap = {**(snap or {}), **st.snapshot(), "run_id": info["run_id"],
                    "total_members": sum(n.size for n in st.nodes.values())}  # (with a check's grown members)
        except PweError as exc:
            if snap is None or isinstance(exc, JournalTooNew):  # (a newer pwe's run: its snapshot is its own too)
                raise
            snap["warnings"] = [f"{exc}; these counts are the last snapshot's"]
    snap["phase"] = _phase(snap, bool(holder))
    if not holder:
        snap["unreachable"] = {}  # an engine's word on its hosts' batch systems, true while it runs
    if holder:
        snap["engine"] = {"pid": holder.get("pid"), "host": holder.get("host")}  # who holds engine.lock
    snap["run_dir"] = str(d)
    heartbeat = 5.0
    try:
        info = read_json(d / "run.json")
        heartbeat = float(info.get("heartbeat", 5.0))
        if info.get("simulate"):  # (pwe run --simulate: a rehearsal, no payload ran)
            snap["simulated"] = info["simulate"]
            snap["phase"] = f"simulated: {snap['phase']}"
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    snap["pilots"] = pilot_states(d, snap.get("pilots") or {}, bool(holder), heartbeat)
    if isinstance(snap.get("work"), dict):
        snap["core_hours"] = core_hours(snap)
    return snap


def core_hours(snap: dict[str, Any]) -> dict[str, Any]:
    """The core-hours of the run's work, as Row's status shows them: ``done`` and
    ``failed`` as measured (seconds each attempt ran, times its cores); ``running``,
    ``eligible`` (ready or queued on a pilot: only cores are missing) and ``waiting``
    (for what they depend on) as estimated per node from maxWallTimePerMember where set,
    else from the mean duration of its members that succeeded so far (None where neither
    is known). ``estimated_from`` says which, per node."""
    out: dict[str, Any] = {"done": 0.0, "failed": 0.0, "running": 0.0, "eligible": 0.0, "waiting": 0.0,
                           "estimated_from": {}}
    for nid, w in snap["work"].items():
        counts = {k: within(v, 0, COUNT_MOST) or 0 for k, v in (snap["nodes"].get(nid) or {}).items()}
        w = w if isinstance(w, dict) else {}
        # (state.json's figures read as the journal's are: out of range, absent; so no product overflows)
        cores = within(w.get("cores"), 1, COUNT_MOST) or 1
        spent = within(w.get("spent"), 0, SPENT_MOST) or 0.0
        done_spent = min(spent, within(w.get("done_spent"), 0, SPENT_MOST) or 0.0)
        w = {**w, "wall": within(w.get("wall"), 0, MINUTES_MOST)}
        out["done"] += done_spent * cores / 3600
        out["failed"] += (spent - done_spent) * cores / 3600
        if w.get("wall"):
            each, how = w["wall"] * 60.0, "maxWallTimePerMember"
        elif counts.get("done"):
            each, how = done_spent / counts["done"], f"mean of {counts['done']:,} done"
        else:
            each, how = None, "not known yet (no member done, no maxWallTimePerMember)"
        out["estimated_from"][nid] = how
        for key, n in (("running", counts.get("running", 0)),
                       ("eligible", counts.get("ready", 0) + counts.get("queued", 0)),
                       ("waiting", counts.get("waiting", 0))):
            if not n:
                continue
            if each is None or out[key] is None:
                out[key] = None
            else:
                out[key] += n * each * cores / 3600
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


def run_summary(run_dir: Path, where: str = COMMAND_LINE) -> dict[str, Any]:
    """One line of ``pwe runs``: ``run_id``, ``from`` (:func:`~pwe.runstate.rundir.origin`; ``where``:
    its root's), ``state`` (the phase), ``finished`` and ``total`` members, ``started``
    (epoch s), ``duration`` (s: to the last snapshot, or to now while an engine runs it),
    ``core_hours`` (measured: done and failed attempts), ``run_dir``. From the snapshot:
    nothing is replayed; a run that cannot be read says so
    in ``state``."""
    from ..base.states import FINAL, NAMES

    out: dict[str, Any] = {"run_id": run_dir.name, "from": where, "state": "?", "finished": 0, "total": None,
                           "started": None, "duration": None, "core_hours": None, "run_dir": str(run_dir)}
    try:
        info = read_json(run_dir / "run.json")
        out["run_id"] = info.get("run_id", run_dir.name)
        out["from"] = origin(info, where)
        out["started"] = info.get("created")
    except (OSError, ValueError, AttributeError):
        out["state"] = "damaged (run.json)"
        return out
    snap = snapshot(run_dir / "state.json")
    running = bool(EngineLock(run_dir).holder())
    if snap is None:
        out["state"] = "running" if running else "not started (no snapshot)"
        return out
    out["state"] = _phase(snap, running).split(";")[0]
    if info.get("simulate"):  # (pwe run --simulate: no payload ran)
        out["state"] = f"simulated: {out['state']}"
    totals = snap.get("totals") or {}
    out["total"] = snap.get("total_members") or sum(totals.values())
    out["finished"] = sum(totals.get(NAMES[s], 0) for s in FINAL)
    if isinstance(snap.get("work"), dict):  # measured: done and failed attempts' time x their cores
        ch = core_hours(snap)
        out["core_hours"] = round(ch["done"] + ch["failed"], 4)
    end = time.time() if running else snap.get("updated")
    if out["started"] and end:
        out["duration"] = round(max(0.0, end - out["started"]), 1)
    return out


def snapshot(path: Path) -> dict[str, Any] | None:
    """state.json's content; None when it is missing or not what the engine writes."""
    try:
        snap = read_json(path)
    except OSError:
        return None
    ok = isinstance(snap, dict) and all(isinstance(snap.get(k, {}), dict) for k in ("nodes", "totals", "pilots")) \
        and "nodes" in snap and all(isinstance(c, dict) for k in ("nodes", "pilots") for c in snap.get(k, {}).values())
    return snap if ok else None


def phase(snap: dict[str, Any], engine_running: bool) -> str:
    """Where a run is, in one word, from its snapshot and whether an engine holds it:
    running, cancelled, succeeded, failed, halted (its failure or core-hour budget spent:
    ``snap["halted"]``), stopped (why: ``snap["stopped"]``) or interrupted (its engine
    died). ``pwe status``, ``pwe runs`` and the service read this."""
    if engine_running:
        return "running"
    if snap.get("cancelled"):
        return "cancelled"
    if isinstance(snap.get("halted"), dict) and snap.get("finished_ok") is False:
        return "halted"
    if snap.get("finished_ok") is True:
        return "succeeded"
    if snap.get("finished_ok") is False:
        return "failed"
    return "stopped" if snap.get("stopped") else "interrupted"


def _phase(snap: dict[str, Any], engine_running: bool) -> str:
    """:func:`phase` as ``pwe status`` says it."""
    word = phase(snap, engine_running)
    halted = snap.get("halted") if isinstance(snap.get("halted"), dict) else {}
    then = "pwe resume --budget LARGER" if "coreHours" in halted else \
        "pwe retry (the failed run again, the budget counts anew) or pwe resume --halt LARGER"
    return {"failed": "finished with failures", "stopped": f"stopped: {snap.get('stopped')}; then: pwe resume",
            "halted": f"{halted.get('why')}; then: {then}",
            "interrupted": "stopped (pwe resume continues it)"}.get(word, word)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def members(run_dir: Path, node: str | None = None, state: str | None = None, limit: int = 0) -> list[dict[str, Any]]:
    """Members of a run as ``pwe show`` lists them (:func:`results.member_record`), of one
    node and in one state when given, at most ``limit`` (0: all)."""
    from .results import load_state, member_record
    from ..base.states import NAMES

    _, st = load_state(run_dir)
    if node is not None and node not in st.nodes:
        from ..base.source import did_you_mean

        raise InputError(f"run {run_dir.name} has no node '{node}'{did_you_mean(node, st.nodes)}")
    want = None if state is None else state.lower()
    if want is not None and want not in NAMES:
        raise InputError(f"--state: one of {', '.join(NAMES)}")
    out: list[dict[str, Any]] = []
    for nid, ns in st.nodes.items():
        if node and nid != node:
            continue
        # members in one state found in the state bytes at C speed (a million members, few failed)
        found = range(ns.size) if want is None else _indices(ns.state, NAMES.index(want))
        for i in found:
            out.append(member_record(st, nid, i))
            if limit and len(out) >= limit:
                return out
    return out


def _indices(state: bytearray, code: int):
    i = state.find(code)
    while i >= 0:
        yield i
        i = state.find(code, i + 1)


# -- a run followed to its end (pwe run, resume, retry) ----------------------------------------
def progress(totals: list[int]) -> tuple[int, str]:
    """(members finished, a line of what runs and what failed) for a progress display."""
    from ..base.states import FAILED, FINAL, RUNNING, SKIPPED

    finished = sum(totals[s] for s in FINAL)
    extra = f"running {totals[RUNNING]}  failed {totals[FAILED]}" + (
        f"  skipped {totals[SKIPPED]}" if totals[SKIPPED] else "")
    return finished, extra


def outcome(totals: list[int], state: Any = None) -> str:
    """The final counts in words: done always (with how many of them were complete by
    their products, when any), failed, skipped and cancelled when any."""
    from ..base.states import DONE, FINAL, NAMES

    counts = complete_counts(state) if state is not None else {}
    complete = sum(counts.get("complete", {}).values())
    reused = sum(counts.get("reused", {}).values())
    said = [f"{complete} complete by products"] if complete else []
    said += [f"{reused} reused from earlier runs"] if reused else []
    return ", ".join(f"{totals[s]} {NAMES[s]}" + (f" ({', '.join(said)}, not run)" if s == DONE and said else "")
                     for s in FINAL if totals[s] or s == FINAL[0])


def complete_counts(state: Any) -> dict[str, Any]:
    """``{"complete": {node: members}, "reused": {node: members}}``: members found complete
    by their products (pwe.planning.products) and members reused from earlier runs
    (pwe.runstate.reusable), each only when there are any."""
    found = {nid: c for nid, ns in state.nodes.items() if (c := ns.complete_count())}
    reused = {nid: c for nid, ns in state.nodes.items() if (c := ns.reused_count())}
    return {**({"complete": found} if found else {}), **({"reused": reused} if reused else {})}


def failed_examples(state: Any, run_dir: Path, limit: int) -> list[tuple[str, str]]:
    """(NODE:INDEX, a line) for the first few failed members: exit status or reason, and
    the last line the member wrote to stderr (what a user looks for first)."""
    from pilot.streams import Reader

    lines: list[tuple[str, str]] = []
    with Reader(str(Path(run_dir) / "pilots")) as reader:
        lines = _failed_lines(state, run_dir, limit, reader)
    return lines


def _failed_lines(state: Any, run_dir: Path, limit: int, reader: Any) -> list[tuple[str, str]]:
    from .output import stderr_tail
    from ..base.states import FAILED

    lines: list[tuple[str, str]] = []
    for nid, ns in state.nodes.items():
        i = ns.state.find(FAILED) if ns.counts[FAILED] else -1
        while i >= 0 and len(lines) < limit:
            what = ns.why.get(i) or f"exit {ns.rc.get(i)}"
            last = stderr_tail(run_dir, nid, i, reader, lines=1)
            tail = f"  | {shown(last[:120])}" if last else ""
            lines.append((f"{nid}:{i}", f"  {nid}[{i}] failed: {what}{tail}"))
            i = ns.state.find(FAILED, i + 1)
        if len(lines) >= limit:
            break
    return lines
