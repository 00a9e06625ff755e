"""The ``local`` protocol: a pilot started as a process on this machine, not a job.

The pilot is started exactly as a batch job script would start it inside an
allocation (``python -m pilot --dir D --slots N``), in its own session so that it
outlives the engine: if the engine dies, the pilot goes on, and ``pwe resume`` finds it.
It is alive while its process is; it is cancelled as the ``ssh`` protocol cancels, with
SIGTERM (it hands its members back, as when a batch system stops it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pilot.allocation import hostname

from . import warmpilot
from .base import Protocol


class Local(Protocol):
    name = "local"
    batch = False  # no job script, no scheduler: start() runs the pilot here
    polls_status = False  # is-it-alive is asked of each pilot's process (alive()), not of a scheduler
    cancel_command = ["kill", "-TERM"]

    def start(self, pilot_dir: Path, slots: int, heartbeat: float = 5.0, idle_timeout: float = 300.0,
              extra_args: list[str] | tuple[str, ...] = (), host_env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start a pilot filling ``slots`` cores of this machine; its process. ``host_env``:
        the host entry's ``env``, which its members see (as a job script exports it).

        The pilot is the one :func:`~protocols.warmpilot.prestart` made, when there is one
        (its interpreter and imports done while the engine planned), else a new one; either
        way it learns its command line, environment and log from one line on its standard
        input (``python -m pilot --await-start``)."""
        pilot_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **(host_env or {})}
        env["PYTHONPATH"] = warmpilot.pythonpath(env)
        order = {"argv": ["--dir", str(pilot_dir), "--slots", str(slots), "--heartbeat", str(heartbeat),
                          "--idle-timeout", str(idle_timeout), *extra_args],
                 "cwd": str(pilot_dir), "env": env, "log": str(pilot_dir / "pilot.log")}
        warm = warmpilot.take()
        if warm is not None and warmpilot.hand(warm, order):
            return warm
        log = open(pilot_dir / "pilot.log", "ab")
        try:
            fresh = warmpilot.await_start(env, stdout=log, cwd=pilot_dir)
        finally:
            log.close()
        if not warmpilot.hand(fresh, order):
            fresh.wait()
            raise OSError(f"the pilot did not start: see {pilot_dir / 'pilot.log'}")
        return fresh

    def alive(self, pid: int, host: str, popen: subprocess.Popen | None = None, started: int | None = None) -> bool:
        """Whether a pilot's process runs: asked of the process when this engine started
        it, else of its pid on this machine and its start time (``started``, journaled with
        the pid: another process that took the pid is not the pilot; None, a record of an
        older pwe: the pid alone). One started on another machine (the run was resumed
        elsewhere) counts as alive: its heartbeats tell."""
        if popen is not None:
            return popen.poll() is None
        if host != hostname():
            return True
        from pilot.identity import is_same

        return is_same(int(pid or 0), started)
