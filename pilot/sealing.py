"""A spool's files over time: a live file rotated by its writer past ``PWE_SPOOL_SEGMENT``,
its parts and a left pilot's files sealed (gzip) once read (:mod:`pilot.transport` tells
the story; this is the part of it that renames and compresses files). Standard library only.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading

from . import faults
from .bounded import open_regular, segments
from .settings import SEAL_ABOVE, SPOOL_SEGMENT

TASKS, EVENTS = "tasks.jsonl", "events.jsonl"
ARCHIVE = "events.redis.jsonl"  # what the engine read from a broker, as it read it (pilot/broker.py)

def seal_above() -> int:
    """The bytes ``PWE_SEAL_ABOVE`` says (:mod:`pilot.settings`; default 8 MiB, about 16,000
    members' worth): a left pilot's spool files are sealed (compressed) once together they
    are bigger; smaller ones stay plain text, to be read as they are, and a run of that size
    is not held up at its end for the few MB it would save."""
    return SEAL_ABOVE.get()


def segment_size() -> int:
    """The bytes ``PWE_SPOOL_SEGMENT`` says (:mod:`pilot.settings`; default 128 MiB): a spool
    file past it is rotated by its writer (see the module)."""
    return SPOOL_SEGMENT.get()


def spool_bytes(directory: str, names: tuple[str, ...] = (TASKS, EVENTS, ARCHIVE)) -> dict[str, int]:
    """The plain spool files ``names`` of a pilot's directory that are there, their rotated
    parts not yet sealed first: path -> size."""
    sizes: dict[str, int] = {}
    for name in names:
        path = os.path.join(directory, name)
        for _, part in segments(path):
            size_of(part, sizes)
        size_of(path, sizes)
    return sizes


def size_of(path: str, sizes: dict[str, int]) -> None:
    """Add ``path``'s size to ``sizes`` (path -> bytes) when it is there and a regular file
    (itself, not through a link): a FIFO, a device, a link or a directory in a pilot's
    directory (written there by someone else: a damaged run) is never sealed, so never
    opened here."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        sizes[path] = st.st_size


#: one seal at a time in a process: a part sealed as the run goes on and the pilot's last
#: seal never write the same ``.gz.tmp``
_SEALING = threading.Lock()


def rotate(path: str, base: int, size: int) -> int:
    """(A writer's side, its file closed.) The live spool file ``path``, which holds the
    whole's bytes from ``base`` on, ``size`` of them, renamed to its rotated part's name; the
    base of the live file that follows."""
    end = base + size
    faults.at("rename")
    os.rename(path, f"{path}.{end}")
    return end


def live_base(path: str) -> int:
    """Where the live spool file ``path`` starts in the whole: the end of its last rotated part."""
    parts = segments(path)
    return parts[-1][0] if parts else 0


def seal(directory: str, names: tuple[str, ...] = (TASKS, EVENTS, ARCHIVE), above: int | None = None) -> int:
    """Compress the spool files ``names`` of a pilot's directory to ``NAME.gz`` (then the
    plain one goes), when together they are more than ``above`` bytes (:func:`seal_above`);
    the bytes saved. Only for a pilot that has left and whose every message was taken in: nobody
    writes these files again. Each is written, synced and renamed into place before its
    plain file is removed, so a crash or a full disk leaves the plain file, read as before
    (what the disk refused is :class:`OSError`, the plain file kept)."""
    sizes = spool_bytes(directory, names)
    if sum(sizes.values()) <= (seal_above() if above is None else above):
        return 0
    return seal_files(sizes)


def seal_files(sizes: dict[str, int]) -> int:
    """Compress each plain file (path -> its size) to ``PATH.gz``, then remove it (see
    :func:`seal`); the bytes saved."""
    saved = 0
    with _SEALING:
        for path, size in sizes.items():
            saved += _seal_one(path, size)
    return saved


def _seal_one(path: str, size: int) -> int:
    if not os.path.exists(path):
        return 0  # (sealed meanwhile)
    tmp = path + ".gz.tmp"
    try:
        os.unlink(tmp)  # (a seal cut short left it; a link planted there is removed, not followed)
    except FileNotFoundError:
        pass
    try:
        with open_regular(path, "rb", within=os.path.dirname(path) or ".") as src, \
                os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as raw:
            import gzip  # (only a sealing pays for it, not every process that imports this module)

            with gzip.GzipFile(os.path.basename(path), "wb", 6, raw, mtime=0) as gz:
                shutil.copyfileobj(src, gz, 1 << 20)
            raw.flush()
            os.fsync(raw.fileno())
        faults.at("rename")
        os.replace(tmp, path + ".gz")
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.unlink(path)
    return size - os.stat(path + ".gz").st_size
