"""A local pilot's interpreter started ahead of its order (``python -m pilot --await-start``).

:meth:`protocols.local.Local.start` starts every local pilot this way: the interpreter
and the pilot's imports first, then one JSON line on its stdin with the command line,
environment, working directory and log. ``pwe run`` calls :func:`prestart` first thing
(pwe/cli/front.py, before click is imported), so that the pilot's start-up overlaps the
command line's, the engine's imports and the planning instead of following them. Kept
apart from ``local.py`` so that calling it imports nothing heavy (the protocols' base
imports jinja2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

_ROOT = str(Path(__file__).resolve().parent.parent)  # the pilot package sits beside pwe (also in a source tree)
_warm: subprocess.Popen | None = None  # a pilot started before its run was made (prestart)


def pythonpath(env: Mapping[str, str]) -> str:
    """PYTHONPATH with the pilot package's folder first."""
    return _ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")


def take() -> subprocess.Popen | None:
    """The prestarted pilot, once (None when there is none)."""
    global _warm
    warm, _warm = _warm, None
    return warm


def await_start(env: dict[str, str], stdout: Any, cwd: Path | str) -> subprocess.Popen:
    """A pilot interpreter that imports the pilot, then waits for its order on stdin.
    ``-S``: no site-packages (the pilot is standard library only, found through
    PYTHONPATH): ~20 ms less before the first member starts. Its own session, so that
    it outlives the engine: if the engine dies, the pilot goes on."""
    return subprocess.Popen([sys.executable, "-S", "-m", "pilot", "--await-start"], cwd=cwd, env=env,
                            stdin=subprocess.PIPE, stdout=stdout, stderr=stdout, start_new_session=True)


def hand(proc: subprocess.Popen, order: dict[str, Any]) -> bool:
    """Give a waiting pilot its order (one JSON line); False when it is gone."""
    try:
        proc.stdin.write(json.dumps(order).encode() + b"\n")
        proc.stdin.close()
    except (BrokenPipeError, ValueError, OSError):
        return False
    return True


def prestart() -> None:
    """Start a pilot's interpreter now, before the run is planned, so that its start-up
    (~60 ms: Python, the pilot's imports) overlaps the engine's instead of following it.
    The next :meth:`Local.start` hands it its order; one never used leaves without doing
    anything when this process closes the pipe or exits, or after a minute
    (pilot.__main__.ORDER_WAIT): a Local.start after that starts a new one."""
    global _warm
    if _warm is not None and _warm.poll() is None:
        return  # (one waits already; one that has left, its minute over, is replaced)
    env = dict(os.environ, PYTHONPATH=pythonpath(os.environ))
    try:
        _warm = await_start(env, stdout=subprocess.DEVNULL, cwd=os.getcwd())
    except OSError:  # no matter: Local.start starts one itself
        _warm = None


def dismiss() -> None:
    """Let an unused prestarted pilot go (it reads end-of-file and leaves)."""
    global _warm
    warm, _warm = _warm, None
    if warm is not None:
        try:
            warm.stdin.close()
        except OSError:
            pass
        warm.wait()
