"""A member's output read back: its stdout and stderr, by attempt (:func:`member_output`,
the one reader: from the run's output streams, pilot/streams.py; from the member's own
files in a run made before streams; from the lending run for a member reused from one),
what ``pwe logs --json`` and the dashboard print of it (:func:`logs_document`), the last
lines of a failure (:func:`stderr_tail`, for ``pwe run``'s last lines and the report), and
the members per node (:func:`node_sizes`).

Used by pwe.cli.see (``pwe logs``), pwe.ui.api, pwe.observe.report and runview.py's
failed members. Reading only, as runview.py.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from ..base.errors import InputError, PweError
from ..runstate.rundir import member_dir
from ..base.regular import open_regular, read_json
from ..base.settings import OUTPUT_CAP


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
