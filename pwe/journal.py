"""The journal: an append-only JSON-lines file, the run's one state store.

Exactly one process (the engine holding the run's lock) appends. Records are written in
batches with one ``write`` call; a crash can leave at most a torn last line, which
:func:`replay` drops (and :class:`Journal` truncates before appending again).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from pilot import transport

from .errors import JournalError  # the run stops cleanly (drawn in pwe.errors)


def replay(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete record, in order."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            if not line.endswith(b"\n"):
                return  # torn by a crash mid-write: never applied, so never happened
            try:
                yield json.loads(line)
            except ValueError:
                return


def append_whole(fh, data: bytes, path: Path, fsync: bool = False) -> None:
    """Append ``data`` (whole JSON lines) to a file with one writer, or none of it.

    On a write error (disk full, quota) whatever part got written is cut back, so a
    reader never meets a torn line followed by the next writer's lines; then
    :class:`JournalError` says what to do.
    """
    try:
        transport.append_whole(fh, data, fsync)
    except OSError as exc:
        raise cannot_write(path, exc) from None


def cannot_write(where: Any, exc: OSError) -> JournalError:
    """The error that stops a run whose files the disk refuses."""
    return JournalError(f"cannot write {where}: {exc.strerror}: free space")


class Journal:
    def __init__(self, path: Path, fsync: bool = False):
        self.path = path
        self.fsync = fsync
        self._buf: list[bytes] = []
        self._trim_torn_tail()
        self._fh = open(path, "ab", buffering=0)

    def _trim_torn_tail(self) -> None:
        try:
            with open(self.path, "rb+") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                if size == 0:
                    return
                back = min(size, 1 << 16)
                fh.seek(size - back)
                tail = fh.read()
                if tail.endswith(b"\n"):
                    return
                cut = tail.rfind(b"\n")
                fh.truncate(size - back + cut + 1 if cut >= 0 else 0)
        except FileNotFoundError:
            pass

    def append(self, record: dict[str, Any]) -> None:
        self._buf.append(json.dumps(record, separators=(",", ":")).encode() + b"\n")

    def flush(self) -> None:
        if not self._buf:
            return
        append_whole(self._fh, b"".join(self._buf), self.path, self.fsync)
        self._buf.clear()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._fh.close()
