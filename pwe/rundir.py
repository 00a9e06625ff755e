"""The run directory: everything a run keeps, and where.

    pwe-runs/<run-id>/
      run.json            what was run: workflow file copy, --set values, host, cores
      workflow.<ext>      a copy of the workflow file as submitted
      journal.jsonl       the event history; the run's state store (one writer: the engine)
      state.json          a snapshot of per-node counts, rewritten atomically (pwe status)
      engine.lock         held by the one engine working on the run
      engine.log          the background engine's output (pwe submit)
      control/cancel      a request to cancel, for a running engine to act on
      pilots/<id>/        tasks.jsonl (engine -> pilot), events.jsonl (pilot -> engine), pilot.log
      members/<node>/<index // 1000>/<index>/   stdout, stderr, outputs; the member's cwd

Why not SQLite: HPC home and project directories are NFS, GPFS or Lustre, where SQLite's
locking is unreliable and WAL mode is unsupported. An append-only journal with exactly
one writer needs neither locks nor mmap from the filesystem, survives kill -9 (a torn
last line is ignored), and replays in well under a second for a 100,000-member run.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any

from .errors import InputError, PweError

DEFAULT_ROOT = Path("pwe-runs")


class RunNotFound(InputError):
    """No run by that id or path."""


def new_run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def member_dir(root: Path, node: str, index: int) -> Path:
    # sharded by thousands: a million entries in one directory is slow on every filesystem
    return root / "members" / node / str(index // 1000) / str(index)


def create(run_dir: Path) -> Path:
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
        for sub in ("pilots", "members", "control"):
            (run_dir / sub).mkdir()
    except FileExistsError:
        raise InputError(f"run directory {run_dir} already exists; choose another --run-dir") from None
    except OSError as exc:
        raise InputError(f"cannot create run directory {run_dir}: {exc.strerror}; choose another --run-dir") from None
    return run_dir


def find(run: str | None, root: Path = DEFAULT_ROOT) -> Path:
    """A run directory from a run id, a path, or (None) the newest run under ``root``."""
    if run is None:
        runs = sorted((p for p in root.glob("*/run.json")), key=lambda p: p.stat().st_mtime) if root.is_dir() else []
        if not runs:
            raise RunNotFound(f"no runs under {root}/; give a run id or a run directory")
        return runs[-1].parent
    for cand in (Path(run), root / run):
        if (cand / "run.json").is_file():
            return cand
    known = sorted(p.parent.name for p in root.glob("*/run.json")) if root.is_dir() else []
    from .source import did_you_mean

    raise RunNotFound(f"no run '{run}' (looked in {root}/){did_you_mean(run, known)}")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write then rename: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, separators=(",", ":"), default=str)
    os.replace(tmp, path)


class EngineLock:
    """One engine per run. ``O_EXCL`` creation works on NFS v3+ and on local disks; a
    lock left by a dead engine on this host is taken over, one on another host is not."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / "engine.lock"
        self.held = False

    def holder(self) -> dict | None:
        try:
            info = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if info.get("host") == socket.gethostname() and not pid_alive(info.get("pid", -1)):
            return None
        return info

    def acquire(self) -> None:
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                info = self.holder()
                if info is not None:
                    raise PweError(
                        f"an engine is already working on this run (pid {info.get('pid')} on {info.get('host')}); "
                        "use pwe status, or pwe cancel"
                    ) from None
                self.path.unlink(missing_ok=True)  # stale: its engine is gone
                continue
            with os.fdopen(fd, "w") as fh:
                json.dump({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}, fh)
            self.held = True
            return
        raise PweError(f"cannot take {self.path}")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
