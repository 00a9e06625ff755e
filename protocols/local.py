"""The ``local`` protocol: a pilot started as a process on this machine.

The pilot is started exactly as a batch job script would start it inside an
allocation (``python -m pilot --dir D --slots N``), in its own session so that it
outlives the engine: if the engine dies, the pilot goes on, and ``pwe resume`` finds it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def local_cores() -> int:
    """The cores this process may use (cgroup / affinity aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def start_pilot(pilot_dir: Path, slots: int, heartbeat: float = 5.0, idle_timeout: float = 300.0,
                extra_args: list[str] | tuple[str, ...] = ()) -> subprocess.Popen:
    pilot_dir.mkdir(parents=True, exist_ok=True)
    (pilot_dir / "tasks.jsonl").touch()
    # the pilot package sits beside pwe in one distribution; make it importable even when
    # pwe runs from a source tree
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    log = open(pilot_dir / "pilot.log", "ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "pilot", "--dir", str(pilot_dir), "--slots", str(slots),
             "--heartbeat", str(heartbeat), "--idle-timeout", str(idle_timeout), *extra_args],
            cwd=pilot_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
    finally:
        log.close()
