"""A run seen from outside its engine: its phase, counts, pilots, members and their output,
worked out for ``pwe status``, ``pwe show``, ``pwe logs`` and the last lines of ``pwe run``.

Reading only: nothing here takes the run's lock or starts anything. ``status`` answers from
``state.json`` and imports nothing heavy (not even the state's own module) unless the
journal is newer than the snapshot.
"""

from __future__ import annotations

import errno
import time
from pathlib import Path
from typing import Any

from ..base.errors import InputError, JournalTooNew, PweError
from ..runstate.rundir import COMMAND_LINE, EngineLock, member_dir, origin
from .pilotview import pilot_states
from ..base.regular import open_regular, read_json
from ..base.settings import OUTPUT_CAP
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
        heartbeat = float(read_json(d / "run.json").get("heartbeat", 5.0))
    except (OSError, ValueError, TypeError):
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


def logs_document(run_dir: Path, node: str, index: int, said: str, tail: int | None = None,
                  only_stderr: bool = False, max_bytes: int | None = None,
                  attempt: int | None = None, channels: tuple[str, ...] | None = None) -> dict[str, Any]:
    """What ``pwe logs --json`` prints (and the dashboard shows): ``node``, ``member``,
    ``attempt`` (the one shown: the latest with output unless one is asked for),
    ``attempts`` (those with output), and ``stdout`` / ``stderr`` each as ``{"path",
    "text"}`` (``path``: the stream file, or the member's own file in a run made before
    streams; ``text``: its bytes as UTF-8, others written as ``\\xNN``; ``cut``: bytes
    left out, by the output cap or ``max_bytes``); ``tail``: only the last lines (ended by
    a newline). ``channels``: those shown (default both; ``only_stderr``: stderr alone)."""
    got = member_output(run_dir, node, index, said, attempt=attempt)
    out: dict[str, Any] = {"node": node, "member": index, "attempt": got.attempt, "attempts": got.attempts}
    if channels is None:
        channels = ("stderr",) if only_stderr else ("stdout", "stderr")
    for name in ("stdout", "stderr"):
        if name not in channels:
            continue
        data, cut = got.text(name), got.left_out[name]
        if max_bytes is not None and len(data) > max_bytes:
            cut += len(data) - max_bytes
            data = data[-max_bytes:]
        if tail:
            data = last_lines(data, tail)
        text = data.decode("utf-8", "backslashreplace")
        out[name] = {"path": got.path, "text": text, **({"cut": cut} if cut else {})}
    return out


def last_lines(data: bytes, n: int) -> bytes:
    """The last ``n`` lines of ``data``, a line being what ends in a newline (a carriage
    return or any other byte ends none), the last one also without: bytes as they are."""
    pos = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(n):
        pos = data.rfind(b"\n", 0, pos)
        if pos < 0:
            return data
    return data[pos + 1:]


class Output:
    """A member attempt's stdout and stderr (:func:`member_output`): ``stdout``,
    ``stderr`` (bytes, as the member wrote them, each cut part marked in :meth:`text`),
    ``left_out`` (bytes left out of each by the output cap), ``attempt``, ``attempts``
    (those with output), ``path`` (where they were read)."""

    __slots__ = ("parts", "left_out", "attempt", "attempts", "path")

    def __init__(self, parts: dict[str, list[tuple[bytes, int]]], attempt: int, attempts: list[int], path: str):
        self.parts = parts
        self.left_out = {k: sum(c for _, c in v) for k, v in parts.items()}
        self.attempt, self.attempts, self.path = attempt, attempts, path

    @property
    def stdout(self) -> bytes:
        return b"".join(d for d, _ in self.parts["stdout"])

    @property
    def stderr(self) -> bytes:
        return b"".join(d for d, _ in self.parts["stderr"])

    def text(self, name: str) -> bytes:
        """The bytes of ``stdout`` or ``stderr``, with a line where the cap left some out."""
        out = []
        for data, cut in self.parts[name]:
            if cut:  # (the cap keeps the first and the last half)
                half = len(data) // 2
                out += [data[:half], f"\n[pwe: {cut} bytes left out]\n".encode(), data[half:]]
            else:
                out.append(data)
        return b"".join(out)


def member_output(run_dir: Path, node: str, index: int, said: str | None = None, attempt: int | None = None,
                  reader: Any = None, depth: int = 0) -> Output:
    """A member's stdout and stderr: the one reader every consumer uses (pwe logs, the
    dashboard, the report, pwe run's last lines). From the run's output streams
    (pilot/streams.py: every frame of the member, by attempt; ``attempt`` None: the latest
    with any); a run made before streams, from the member's own files. A member that
    does not exist is bad input; one that has not run yet is an error of exit status 1; one
    whose frames are damaged, or whose stream index cannot be read, is bad input (one line
    naming the file; other members read fine). A member reused from an earlier run
    (pwe.runstate.reusable) has the output of the member it was reused from, read from that
    run. ``said``: how the user named it; ``reader``: a :class:`pilot.streams.Reader` of the
    run, for many members; ``depth``: the lending runs followed so far."""
    from pilot.streams import Reader, STREAM

    said = said or f"{node}:{index}"
    own = reader is None
    rd = Reader(str(Path(run_dir) / "pilots")) if own else reader
    try:
        frames, damaged, unreadable = rd.member(node, index)
    finally:
        if own:
            rd.close()
    if damaged:
        exc = damaged[0]
        raise InputError(f"{said}: its output in {exc.filename} cannot be read ({exc.strerror})")
    if frames:
        a = max(frames) if attempt is None else attempt
        got = frames.get(a, [])
        if attempt is not None and not got and not _has_run(run_dir, node, index, attempt):
            raise InputError(f"{said}: no attempt {attempt} has run (attempts with output: "
                             f"{', '.join(map(str, sorted(frames)))})")
        parts = {"stdout": [(f.stdout, f.out_cut) for f in got], "stderr": [(f.stderr, f.err_cut) for f in got]}
        return Output(parts, a, sorted(frames), ", ".join(dict.fromkeys(f.path for f in got)) or
                      str(Path(run_dir) / "pilots" / "*" / f"*{STREAM}"))
    if unreadable:
        exc = unreadable[0]
        if exc.errno == errno.EXDEV:  # (pilot.bounded.Outside: a pilot's directory that is not this run's own)
            raise InputError(f"{said}: {exc.filename}: {exc.strerror}; a pilot's directory must be the run's own "
                             "(its output is not read from another run)")
        raise InputError(f"{said}: {exc.filename}: an output stream's index that cannot be read ({exc.strerror}); "
                         "a member's output index must be a regular file")
    lent = _lender_of(run_dir, node, index, depth)
    if lent is not None:  # reused: its output is the lending run's member's (which may be reused in turn)
        return member_output(lent[0], node, lent[1], said, attempt, depth=depth + 1)
    return _member_files(run_dir, node, index, said, attempt)


#: how many runs a reused member's output is followed through (each run lends what it reused)
LENDERS_FOLLOWED = 16


def _lender_of(run_dir: Path, node: str, index: int, depth: int) -> tuple[Path, int] | None:
    """(the lending run's directory, the member there) of a member reused from an earlier
    run (pwe.runstate.reusable), found beside this run or wherever ``pwe`` finds runs by id;
    None for a member that was not reused, or whose lender is gone (then: what the run
    itself says of it)."""
    from .results import load_state
    from ..base.errors import RunNotFound
    from ..base.states import DONE
    from ..runstate.rundir import find

    if depth >= LENDERS_FOLLOWED:
        return None
    ns = load_state(run_dir)[1].nodes.get(node)
    if ns is None or not ns.reused or not 0 <= index < ns.size or ns.state[index] != DONE:
        return None
    came = ns.reused_from(index)
    if came is None:
        return None
    run_id, member = came
    beside = Path(run_dir).parent / run_id
    try:
        where = beside if (beside / "run.json").is_file() else find(run_id)
    except (RunNotFound, OSError):
        return None
    return (where, member) if where.resolve() != Path(run_dir).resolve() else None


def _member_files(run_dir: Path, node: str, index: int, said: str, attempt: int | None) -> Output:
    """A member's output in a run made before streams (its own stdout and stderr files, an
    earlier attempt's as stdout.N), or none: it has run and wrote nothing; else why not."""
    md = member_dir(run_dir, node, index)
    if not md.is_dir():
        if _has_run(run_dir, node, index, attempt):
            return Output({"stdout": [], "stderr": []}, attempt or 0, [], str(md))  # it wrote nothing
        sizes = node_sizes(run_dir)
        if node in sizes and index >= sizes[node]:
            raise InputError(f"{said}: no such member ({node} has {sizes[node]})")
        if node not in sizes:
            from ..base.source import did_you_mean

            raise InputError(f"run {run_dir.name} has no member output for node '{node}'"
                             f"{did_you_mean(node, sizes)}; nodes with output: {', '.join(sorted(sizes))}")
        raise PweError(f"{node}[{index}] has not run yet")
    parts: dict[str, list[tuple[bytes, int]]] = {}
    for name in ("stdout", "stderr"):
        p = md / (f"{name}.{attempt}" if attempt and (md / f"{name}.{attempt}").exists() else name)
        try:
            if p.exists():
                with open_regular(p, "rb") as fh:
                    size = fh.seek(0, 2)
                    cap = OUTPUT_CAP.high
                    fh.seek(max(0, size - cap))
                    parts[name] = [(fh.read(cap), max(0, size - cap))]
            else:
                parts[name] = []
        except OSError as exc:
            raise InputError(f"{p}: cannot be read ({exc.strerror or exc}); a member's {name} must be a regular "
                             "file") from None
    return Output(parts, attempt or 0, [], str(md))


def stderr_tail(run_dir: Path, node: str, index: int, reader: Any = None, lines: int = 5) -> str:
    """The last few lines of a member's stderr (its latest attempt with output), '' when
    none or unreadable: what ``pwe run``'s last lines and the report show of a failure."""
    try:
        err = member_output(run_dir, node, index, reader=reader).stderr[-4096:]
    except PweError:
        return ""
    return "\n".join(err.decode("utf-8", "replace").rstrip().splitlines()[-lines:])


def _has_run(run_dir: Path, node: str, index: int, attempt: int | None = None) -> bool:
    """Whether a member has started at least once (its state: checkpoint and journal tail;
    a run whose state cannot be read says so, naming the file); ``attempt``: that attempt
    of it."""
    from .results import load_state
    from ..base.states import ASSIGNED, READY, SKIPPED, WAITING

    st = load_state(run_dir)[1]
    ns = st.nodes.get(node)
    if ns is None or not 0 <= index < ns.size:
        return False  # (said by the caller)
    # an attempt is counted when it is queued on a pilot: one queued now has not run yet
    if attempt is not None and attempt > ns.attempt[index]:
        return False
    if attempt is not None and attempt < ns.attempt[index]:
        return attempt >= 1
    return ns.attempt[index] > 1 or (ns.attempt[index] == 1 and ns.state[index] not in (WAITING, READY, ASSIGNED,
                                                                                          SKIPPED))


def node_sizes(run_dir: Path) -> dict[str, int]:
    """Members per node of a run: from state.json (each member is counted in exactly one
    state), else, when the engine never wrote one, from the run's plan."""
    try:
        counts = read_json(run_dir / "state.json")["nodes"]
        return {n: sum(c.values()) for n, c in counts.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    from ..runstate.runs import read

    return {nid: n.size for nid, n in read(run_dir)[1].nodes.items()}


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
