"""Each pilot of a run as ``pwe status`` shows it (:func:`pilot_states`): up, gone or
unknown, from the journal's record of it and, without an engine, the pilot's own files and
process. Moved out of :mod:`pwe.runstate.rundir` (it reads runs back, changing nothing)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..base.regular import Outside, open_regular, pilot_dir


def pilot_states(run_dir: Path, pilots: dict[str, dict[str, Any]], engine_running: bool,
                 heartbeat: float = 5.0) -> dict[str, dict[str, Any]]:
    """Each pilot as ``pwe status`` shows it, in text and JSON alike: the journal's record
    of it plus ``state`` (``up``, ``gone`` or ``unknown``), ``alive`` (``state == "up"``)
    and ``why``.

    While an engine works on the run, the journal is current: alive there is up. Without
    an engine the journal stops at the engine's last word, while a pilot may run on (it
    finishes what it was given: kill -9 of the engine) or have left since (told to stop at
    the run's end). Then the pilot's own files say: its last event ``down`` is gone; a pilot
    of this machine is up while its process is; a batch pilot is up while its heartbeats
    come, else unknown.
    """
    out: dict[str, dict[str, Any]] = {}
    now = time.time()
    root = os.path.realpath(run_dir)  # (once: each pilot's directory is confined to the run)
    for pid_, p in pilots.items():
        view = dict(p)
        why = p.get("why")
        if not p.get("alive"):
            state = "gone"
        elif engine_running:
            state = "up"
        else:
            state, why = _unattended(run_dir, root, pid_, p, now, heartbeat)
        view.update(state=state, alive=state == "up", why=why)
        out[pid_] = view
    return out


def _unattended(run_dir: Path, root: str, pid_: str, p: dict[str, Any], now: float,
                heartbeat: float) -> tuple[str, Any]:
    """(state, why) of a pilot the journal says is alive, when no engine works on the run:
    from its own files, read only from its own directory of this run (a ``pilots/ID``
    that is a symbolic link, to another run or anywhere, is not read: unknown, and why)."""
    try:
        d = Path(pilot_dir(run_dir, pid_, root))
    except Outside as exc:
        return "unknown", f"{exc.filename}: {exc.strerror}"
    last, age = _last_event(d / "events.jsonl", now)
    if last.get("k") == "down":
        return "gone", f"left ({last.get('why')})"
    if not p.get("job") and p.get("host") == os.uname().nodename:
        if _is_pilot_process(p.get("pid", 0), p.get("started"), d):
            return "up", p.get("why")
        return "gone", "died (pwe resume hands its members on)"
    if age is not None and age <= 3 * heartbeat:
        return "up", p.get("why")
    return "unknown", "no word from it" + (f" for {age:.0f} s" if age is not None else "")


def _last_event(path: Path, now: float) -> tuple[dict[str, Any], float | None]:
    """The last whole event in a pilot's events file and how long ago the file changed."""
    try:
        with open_regular(path, "rb", within=path.parent) as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - 4096))
            tail = fh.read()
            age = now - os.fstat(fh.fileno()).st_mtime
    except OSError:
        return {}, None
    for line in reversed(tail.split(b"\n")):
        try:
            return json.loads(line), age
        except ValueError:
            continue
    return {}, age


def _is_pilot_process(pid: Any, started: Any, pilot_dir: Path) -> bool:
    """The pid is alive and is that pilot, not a process that took the pid since: its start
    time is the one journaled with it (pilot/identity.py). A record of an older pwe has no
    start time: then its working directory must be the pilot's (a local pilot learns its
    directory on its stdin: protocols/warmpilot.py); never a match over its command line."""
    from pilot.identity import is_same

    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    if isinstance(started, int) and not isinstance(started, bool):
        return is_same(pid, started)
    if not is_same(pid, None):
        return False
    try:
        return os.readlink(f"/proc/{pid}/cwd") == os.path.realpath(pilot_dir)
    except OSError:
        return not os.path.isdir("/proc/self")  # no /proc at all: the pid alone, as before
