"""Acting on a run from outside: an engine started in the background, a running engine
asked to cancel (or the run cancelled here when none runs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .errors import PweError, RunTaken
from .rundir import EngineLock, run_ref

#: How long ``pwe cancel`` waits for a running engine to stop its pilots and leave.
CANCEL_WAIT = 10.0
#: How long ``pwe submit`` and ``--detach`` wait for the engine they started to take the run.
START_WAIT = 30.0


def spawn_engine(run_dir: Path, retry: bool = False, wait: float = START_WAIT) -> int:
    """Run the engine of ``run_dir`` in the background, detached from this terminal (its
    own session), writing to ``engine.log`` (``pwe submit``, ``--detach``, the service);
    its pid. With ``wait``, return only once that engine holds the run's lock, so that a
    ``pwe status`` or ``pwe cancel`` typed just after ``pwe submit`` finds it; when it
    could not take the run (another engine holds it: :class:`RunTaken`, or it failed
    before), raise what it said, so the command that started it says it too, with its
    exit status. The engine tells over a pipe (``--ready-fd``): another holder seen in
    the lock file is not this engine. The service passes 0: it says "starting" itself."""
    log = open(run_dir / "engine.log", "ab")
    r, w = os.pipe() if wait else (-1, -1)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pwe", "_engine", str(run_dir), *(["--retry"] if retry else []),
             *(["--ready-fd", str(w)] if wait else [])],
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


def detach(run_dir: Path, retry: bool = False) -> str:
    """Continue a run (``retry``: its failed members again) in the background; its run id.
    The run and its hosts are checked here first, so bad input is said at once; the
    engine started takes the run, or this says who has it (:class:`RunTaken`, exit 2)."""
    from .engine import Engine

    engine = Engine.open(run_dir, reload_hosts=True)
    held = engine.lock.holder()
    if held:
        raise RunTaken(engine.lock.taken(held))
    spawn_engine(run_dir, retry)
    return engine.run_id


def cancel(run_dir: Path) -> bool:
    """Cancel a run: ask its running engine (``control/cancel``) and wait until it has
    left, or, when no engine runs it, cancel it here. False when it had already finished."""
    lock = EngineLock(run_dir)
    if lock.holder():
        (run_dir / "control" / "cancel").touch()
        deadline = time.time() + CANCEL_WAIT
        while lock.holder():
            if time.time() > deadline:
                raise PweError(f"the engine of {run_dir.name} did not stop within {CANCEL_WAIT:g} s")
            time.sleep(0.05)
        return True
    from .engine import Engine

    engine = Engine.open(run_dir)
    engine.run(cancel=True)
    return engine.state.cancelled
