"""Acting on a run from outside: an engine started in the background, a running engine
asked to cancel (or the run cancelled here when none runs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ..base.errors import InputError, PweError, RunTaken
from ..runstate.locks import EngineLock
from ..runstate.rundir import run_ref

#: How long ``pwe cancel`` waits for a running engine to stop its pilots and leave.
CANCEL_WAIT = 10.0
#: How long ``pwe submit`` and ``--detach`` wait for the engine they started to take the run.
START_WAIT = 30.0


def spawn_engine(run_dir: Path, retry: bool = False, wait: float = START_WAIT, by: str | None = None,
                 only: dict[str, list[list[int]]] | None = None) -> int:
    """Run the engine of ``run_dir`` in the background, detached from this terminal (its
    own session), writing to ``engine.log`` (``pwe submit``, ``--detach``, the service);
    its pid. With ``wait``, return only once that engine holds the run's lock, so that a
    ``pwe status`` or ``pwe cancel`` typed just after ``pwe submit`` finds it; when it
    could not take the run (another engine holds it: :class:`RunTaken`, or it failed
    before), raise what it said, so the command that started it says it too, with its
    exit status. The engine tells over a pipe (``--ready-fd``): another holder seen in
    the lock file is not this engine. The service passes 0: it says "starting" itself.
    ``by`` (who asked) and ``only`` (the members a retry takes, :meth:`Engine.run`) go to
    the engine (``only`` in a file of ``control/`` it reads and removes)."""
    extra = ["--by", by] if by else []
    if only is not None:
        import json
        import secrets

        (run_dir / "control").mkdir(exist_ok=True)
        path = run_dir / "control" / f"retry-{secrets.token_hex(8)}.json"
        path.write_text(json.dumps(only, separators=(",", ":")))
        extra += ["--only", str(path)]
    log = open(run_dir / "engine.log", "ab")
    r, w = os.pipe() if wait else (-1, -1)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pwe", "_engine", str(run_dir), *(["--retry"] if retry else []),
             *(["--ready-fd", str(w)] if wait else []), *extra],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd=os.getcwd(),
            pass_fds=(w,) if wait else ())
    except BaseException:
        if wait:
            os.close(r)
        raise
    finally:
        log.close()
        if wait:
            os.close(w)
    if not wait:
        return proc.pid
    try:
        said = _read_word(r, time.monotonic() + wait)
    finally:
        os.close(r)
    if said is None or said.startswith(TAKEN):
        return proc.pid  # it holds the run (or, after `wait`, is still starting: as before)
    if said.startswith(REFUSED):
        status, _, line = said[len(REFUSED):].partition(" ")
        try:  # (it leaves once it said so: reaped here, never a zombie of a caller that lives on, the service)
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        raise _said(line, int(status) if status.isdigit() else 1)
    try:
        status = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        status = None
    raise PweError(f"the engine started for {run_ref(run_dir)} ended before it took the run (exit status {status}); "
                   f"{run_dir / 'engine.log'} says why")


#: What a background engine writes on its ``--ready-fd``: that it holds the run, or why not.
TAKEN, REFUSED = "taken", "refused "


def _read_word(fd: int, deadline: float) -> str | None:
    """What the engine wrote on the pipe, once it closed it; "" when it closed it without a
    word (it died); None when it said nothing before ``deadline``."""
    import select

    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        data += chunk
        if not chunk or data.endswith(b"\n"):  # (closed, or its one line whole)
            return data.decode(errors="replace").strip()


def _said(line: str, status: int) -> PweError:
    """The background engine's refusal, raised here with its exit status."""
    if status == RunTaken.exit_status and " already taken by " in line:
        return RunTaken(line)
    exc = PweError(line)
    exc.exit_status = status
    return exc


def detach(run_dir: Path, retry: bool = False, by: str | None = None,
           only: dict[str, list[list[int]]] | None = None) -> str:
    """Continue a run (``retry``: its failed members again; ``only``: those of them alone)
    in the background; its run id. The run and its hosts are checked here first, so bad
    input is said at once; the engine started takes the run, or this says who has it
    (:class:`RunTaken`, exit 2). ``by``: who asked (the journal says it)."""
    from .loop import Engine

    engine = Engine.open(run_dir, reload_hosts=True)
    held = engine.lock.holder()
    if held:
        raise RunTaken(engine.lock.taken(held))
    spawn_engine(run_dir, retry, by=by, only=only)
    return engine.run_id


def selection(members: list[dict]) -> dict[str, list[list[int]]]:
    """Members (``pwe show`` records: node, member) as ``{node: [[first, end], ...]}``, runs of
    consecutive indices: what a ``retry`` record's ``only`` holds (a million members
    selected by a query are a few runs)."""
    out: dict[str, list[list[int]]] = {}
    for m in sorted(members, key=lambda m: (m["node"], m["member"])):
        runs = out.setdefault(m["node"], [])
        if runs and runs[-1][1] == m["member"]:
            runs[-1][1] += 1
        elif not runs or runs[-1][1] < m["member"]:
            runs.append([m["member"], m["member"] + 1])
    return out


def retry_selection(d, query: str, budget=None, held_only: bool = False) -> dict[str, list[list[int]]]:
    """The failed, skipped, cancelled, quarantined and held members of run ``d`` that
    ``query`` selects (``held_only``: the held alone, pwe release), as a retry record's
    ``only`` (:func:`selection`); :class:`InputError` when it selects none, or is empty or
    blank (a selection of nothing is never "every member"). ``pwe retry -q``, ``pwe
    release -q`` and the dashboard's retry of a selection (with its ``budget``:
    :class:`pwe.planning.conditions.Budget`)."""
    from ..observe.results import select

    from ..base.states import AGAIN, HELD, NAMES

    again = {NAMES[s] for s in ((HELD,) if held_only else AGAIN)}
    picked = [m for m in select(d, query, budget=budget) if m["state"] in again]
    if not picked:
        what = "held" if held_only else "failed, skipped, cancelled, quarantined or held"
        raise InputError(f"query {query!r} selects no {what} member of {d.name}: nothing to "
                         f"{'release' if held_only else 'retry'}")
    return selection(picked)


def set_values(d: Path, pairs: list[str] | tuple[str, ...], query: str | None, by: str, budget=None) -> dict | None:
    """``pwe set`` (the command and the dashboard's Set): ``KEY=VALUE`` words checked and
    bounded by the run's hosts (:mod:`pwe.planning.setvalues`), the members ``query``
    selects (None: every member), posted as a signed request in the run's control/ for its
    engine (kept there for the next engine when none runs). The engine's answer, or None
    when no engine took it now; :class:`InputError` (one line) before anything is written.
    ``budget``: the query's (the dashboard's: :class:`pwe.planning.conditions.Budget`)."""
    from ..observe.results import select
    from ..planning.setvalues import parse, within_hosts
    from ..runstate.runs import read
    from .pilotask import post

    values = parse(pairs)
    info, plan = read(d)
    only = None
    if query is not None:
        picked = select(d, query, budget=budget)
        if not picked:
            raise InputError(f"query {query!r} selects no member of {d.name}: nothing to set")
        only = selection(picked)
    within_hosts(values, info, plan, list(only) if only is not None else list(plan.nodes))
    return post(d, {"req": "set", "only": only, "values": values, "by": by}, keep=True)


def cancel(run_dir: Path, by: str | None = None) -> bool:
    """Cancel a run: ask its running engine (``control/cancel``) and wait until it has
    left, or, when no engine runs it, cancel it here. False when it had already finished.
    ``by``: who asked (the journal's ``cancel`` record says it)."""
    lock = EngineLock(run_dir)
    if lock.holder():
        import json

        (run_dir / "control").mkdir(exist_ok=True)
        tmp = run_dir / "control" / f".cancel.{os.getpid()}"
        tmp.write_text(json.dumps({"by": by} if by else {}))
        os.replace(tmp, run_dir / "control" / "cancel")  # (the engine reads it whole, or not yet)
        deadline = time.time() + CANCEL_WAIT
        while lock.holder():
            if time.time() > deadline:
                raise PweError(f"the engine of {run_dir.name} did not stop within {CANCEL_WAIT:g} s")
            time.sleep(0.05)
        return True
    from .loop import Engine

    engine = Engine.open(run_dir)
    engine.run(cancel=True, by=by)
    return engine.state.cancelled
