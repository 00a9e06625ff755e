"""Acting on a run from outside: an engine started in the background, a running engine
asked to cancel (or the run cancelled here when none runs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .errors import PweError
from .rundir import EngineLock

#: How long ``pwe cancel`` waits for a running engine to stop its pilots and leave.
CANCEL_WAIT = 10.0
#: How long ``pwe submit`` and ``--detach`` wait for the engine they started to take the run.
START_WAIT = 30.0


def spawn_engine(run_dir: Path, retry: bool = False, wait: float = START_WAIT) -> int:
    """Run the engine of ``run_dir`` in the background, detached from this terminal (its
    own session), writing to ``engine.log`` (``pwe submit``, ``--detach``, the service);
    its pid. With ``wait``, return only once the engine holds the run's lock (or has
    already ended), so that a ``pwe status`` or ``pwe cancel`` typed just after ``pwe
    submit`` finds the engine: before it, the run looked stopped, and a cancel then ran
    beside the starting engine. The service passes 0: it says "starting" itself."""
    log = open(run_dir / "engine.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "_engine", str(run_dir), *(["--retry"] if retry else [])],
                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd=os.getcwd())
    log.close()
    lock, deadline = EngineLock(run_dir), time.monotonic() + wait
    while wait and proc.poll() is None and not lock.holder() and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc.pid


def detach(run_dir: Path, retry: bool = False) -> str:
    """Continue a run (``retry``: its failed members again) in the background; its run id.
    The run and its hosts are checked here first, so bad input is said at once."""
    from .engine import Engine

    engine = Engine.open(run_dir, reload_hosts=True)
    if engine.lock.holder():
        raise PweError(f"an engine is already working on {run_dir.name}")
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
