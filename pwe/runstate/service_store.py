"""The service's files (drawn in :mod:`pwe.service`): where they are, and reading and
writing them whole.

Each record is one JSON file replaced atomically (write, then rename), so a reader sees
the old record or the new one, never half. Read-modify-write of ``triggers.json`` happens
under ``store.lock`` (flock). ``history.jsonl`` is appended to in single writes; each line
has an ``id`` and readers keep the first line of each id (a write repeated after a crash
is not shown twice). No SQLite: the service directory may sit in an NFS home.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

from ..base.errors import InputError, PweError
from ..base.ids import MAX_QUEUE_NAME, is_queue_name
from ..base.places import service_dir
from ..base.regular import write_json_atomic

QUEUE = "pwe"


def check_queue(name: Any, where: str = "--queue") -> str:
    """A queue name (:data:`pwe.base.ids.QUEUE_NAME`); :class:`InputError` (one line, ``where`` first)."""
    if not is_queue_name(name):
        shown = repr(name[:100]) + ("..." if len(name) > 100 else "") if isinstance(name, str) else repr(name)
        raise InputError(f"{where} {shown}: a queue's name is 1 to {MAX_QUEUE_NAME} letters, digits, '.', "
                         "'_' and '-', starting with a letter or digit")
    return name


def home() -> Path:
    """The service directory: ``service/`` in pwe's state directory (:mod:`pwe.base.places`:
    ``$PWE_HOME/state``, ``$XDG_STATE_HOME/pwe``, ``~/.local/state/pwe``), or where an
    earlier pwe kept it (``$PWE_HOME/service``, ``~/.pwe/service``) while only that exists."""
    return service_dir()[0]


class Store:
    """The service directory and its files."""

    def __init__(self, root: Path | None = None):
        where, old = service_dir()
        self.root = Path(root) if root else where
        #: the directory is where an earlier pwe kept it (`pwe service status` says so)
        self.legacy = old and not root
        self.subs = self.root / "submissions"
        self.broker_dir = self.root / "broker"

    def make(self) -> "Store":
        """Create the directory tree, owner-only (0700)."""
        old = os.umask(0o077)
        try:
            for d in (self.root, self.subs, self.broker_dir, self.broker_dir / "queue",
                      self.broker_dir / "processed", self.broker_dir / "control"):
                d.mkdir(parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
        except OSError as exc:
            raise PweError(f"cannot create the service directory {self.root}: {exc.strerror}; "
                           "set PWE_HOME (or XDG_STATE_HOME) to a writable place") from None
        finally:
            os.umask(old)
        return self

    # -- config ----------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return _read(self.root / "config.json") or {}

    def write_config(self, cfg: dict[str, Any]) -> None:
        write_private(self.root / "config.json", cfg)

    def run_root(self) -> Path:
        return Path(self.config().get("run_root") or self.root / "runs")

    def queue(self) -> str:
        """The service's queue: config.json's (checked: :func:`check_queue`), else ``pwe``."""
        name = self.config().get("queue")
        return check_queue(name, f"{self.root / 'config.json'}: queue") if name not in (None, "") else QUEUE

    # -- locks ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, name: str = "store.lock", wait: bool = True) -> Iterator[bool]:
        """Hold an exclusive flock on ``name`` for the block; yields False (and holds
        nothing) when ``wait`` is off and someone else holds it."""
        fd = os.open(self.root / name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    # -- submissions: one record per run the service drives ------------------------------
    def submission(self, run_id: str) -> dict[str, Any] | None:
        return _read(self.subs / f"{run_id}.json")

    def save_submission(self, rec: dict[str, Any]) -> None:
        write_private(self.subs / f"{rec['run_id']}.json", rec)

    def submissions(self) -> list[dict[str, Any]]:
        out = []
        try:
            names = sorted(n for n in os.listdir(self.subs) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        for name in names:
            rec = _read(self.subs / name)
            if rec and isinstance(rec.get("run_id"), str):
                out.append(rec)
        return sorted(out, key=lambda r: r.get("submitted", 0))

    # -- triggers ----------------------------------------------------------------------------
    def triggers(self) -> dict[str, dict[str, Any]]:
        data = _read(self.root / "triggers.json")
        return data if isinstance(data, dict) else {}

    def save_triggers(self, triggers: dict[str, dict[str, Any]]) -> None:
        write_private(self.root / "triggers.json", triggers)

    def log(self, trigger: str, what: str, event_id: str, **fields: Any) -> None:
        """One history line: what a trigger did (``fired``, ``skipped``, ``queued``, ``missed``...)."""
        line = json.dumps({"id": event_id, "trigger": trigger, "what": what, "t": round(time.time(), 3), **fields},
                          separators=(",", ":")) + "\n"
        fd = os.open(self.root / "history.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def history(self, trigger: str | None = None) -> list[dict[str, Any]]:
        seen: set[str] = set()
        out = []
        try:
            lines = (self.root / "history.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a torn last line (killed mid-write)
            if not isinstance(rec, dict) or rec.get("id") in seen:
                continue
            seen.add(rec.get("id"))
            if trigger is None or rec.get("trigger") == trigger:
                out.append(rec)
        return out

    # -- liveness ------------------------------------------------------------------------
    def mark_tick(self) -> None:
        path = self.root / "tick"
        path.touch(mode=0o600)
        os.utime(path)

    def last_tick(self) -> float | None:
        try:
            return (self.root / "tick").stat().st_mtime
        except OSError:
            return None


def write_private(path: Path, data: Any) -> None:
    """write_json_atomic, owner-only (the file may hold a broker's password)."""
    old = os.umask(0o077)
    try:
        write_json_atomic(path, data)
    finally:
        os.umask(old)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
