"""Opening a file pwe reads from a run directory (run.json, state.json, the journal, the
checkpoint, the secret, edge events, control requests, a member's stdout): only a regular
file is read. A FIFO, a device or a socket put where one should be is refused with an
OSError whose ``strerror`` says what it is (one line in the callers' messages), and it is
never opened for a blocking read: ``O_NONBLOCK`` on the open (a FIFO without a writer
would wait for one), the kind checked on the open descriptor (no race with a rename).
:func:`in_the_way` says what stands where a directory should be (a run directory, a run
root), from ``stat`` alone. And the one way pwe writes a JSON file of a run directory or of the
service's: :func:`write_json_atomic` (whole, by rename)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import IO, Any


def kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def open_regular(path: Path | str, mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for reading, of a regular file only (see the module)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({kind(st.st_mode)})", str(path))
        os.set_blocking(fd, True)
        return open(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path | str, limit: int | None = None) -> bytes:
    """A regular file's bytes (at most ``limit`` of them when given)."""
    with open_regular(path, "rb") as fh:
        return fh.read() if limit is None else fh.read(limit)


def read_text(path: Path | str, errors: str = "strict", limit: int | None = None) -> str:
    """A regular file's text (UTF-8)."""
    return read_bytes(path, limit).decode("utf-8", errors)


def in_the_way(path: Path | str) -> tuple[Path, str] | None:
    """What stands where directory ``path`` is, or would be made: (that path, what it is:
    ``a regular file``, ``a FIFO``, ``a dangling symbolic link to X`` ...) for ``path`` or
    the nearest of its parents that exists; None when that is a directory. Only ``stat``:
    nothing is opened, so a FIFO there never blocks."""
    p = Path(path)
    for q in (p, *p.parents):
        try:
            st = os.stat(q)
        except FileNotFoundError:
            if os.path.islink(q):
                return q, f"a dangling symbolic link to {os.readlink(q)}"
            continue
        except NotADirectoryError:
            continue  # (a parent is not a directory: said when the walk gets there)
        except OSError as exc:
            return q, f"not usable ({exc.strerror})"
        if stat.S_ISDIR(st.st_mode):
            return None
        return q, "a regular file" if stat.S_ISREG(st.st_mode) else kind(st.st_mode)
    return None


def write_json_atomic(path: Path, data: Any) -> None:
    """Write then rename: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, separators=(",", ":"), default=str)
    os.replace(tmp, path)
