"""The ``local`` protocol: a pilot started as a process on this machine, not a job.

The pilot is started exactly as a batch job script would start it inside an
allocation (``python -m pilot --dir D --slots N``), in its own session so that it
outlives the engine: if the engine dies, the pilot goes on, and ``pwe resume`` finds it.
It is alive while its process is; it is cancelled as the ``ssh`` protocol cancels, with
SIGTERM (it hands its members back, as when a batch system stops it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from .base import Protocol


class Local(Protocol):
    name = "local"
    batch = False  # no job script, no scheduler: start() runs the pilot here
    polls_status = False  # is-it-alive is asked of each pilot's process (alive()), not of a scheduler
    cancel_command = ["kill", "-TERM"]

    def start(self, pilot_dir: Path, slots: int, heartbeat: float = 5.0, idle_timeout: float = 300.0,
              extra_args: list[str] | tuple[str, ...] = (), host_env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start a pilot filling ``slots`` cores of this machine; its process. ``host_env``:
        the host entry's ``env``, which its members see (as a job script exports it)."""
        pilot_dir.mkdir(parents=True, exist_ok=True)
        # the pilot package sits beside pwe in one distribution; make it importable even when
        # pwe runs from a source tree
        env = {**os.environ, **(host_env or {})}
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log = open(pilot_dir / "pilot.log", "ab")
        try:
            return subprocess.Popen(
                # -S: no site-packages (the pilot is standard library only, found through
                # PYTHONPATH): ~20 ms less before the first member starts
                [sys.executable, "-S", "-m", "pilot", "--dir", str(pilot_dir), "--slots", str(slots),
                 "--heartbeat", str(heartbeat), "--idle-timeout", str(idle_timeout), *extra_args],
                cwd=pilot_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
        finally:
            log.close()

    def alive(self, pid: int, host: str, popen: subprocess.Popen | None = None) -> bool:
        """Whether a pilot's process runs: asked of the process when this engine started
        it, else of its pid on this machine. One started on another machine (the run was
        resumed elsewhere) counts as alive: its heartbeats tell."""
        if popen is not None:
            return popen.poll() is None
        if host != socket.gethostname():
            return True
        from pilot.spawn import pid_alive

        return pid_alive(pid)
