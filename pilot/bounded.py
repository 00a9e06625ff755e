"""The one way a file of a run directory is opened and read back (standard library only:
the pilot reads its tasks with it, the engine and every reader of pwe the rest, through
:mod:`pwe.base.regular`, which re-exports it).

What is read was written by others (the engine, a pilot, a batch system, whoever else can
write the run directory), so nothing in it is trusted to be the size or the kind it should:

- **regular files only**: :func:`open_regular` opens with ``O_NONBLOCK`` (a FIFO without a
  writer would wait for one for ever) and checks the kind on the open descriptor (no race
  with a rename): a FIFO, a device (a link to ``/dev/zero``), a socket or a directory is
  :class:`OSError` naming what it is; a dangling link is :class:`FileNotFoundError`;
- **inside its directory**: with ``within``, a path that resolves (through links) outside
  that directory is refused;
- **lines of bounded length**: :func:`lines` gives whole lines of at most ``cap`` bytes; a
  line longer than that is :class:`Damaged` (it is read no further);
- **sealed (gzip) files read incrementally, with a cap on what they expand to**:
  :class:`Sealed`; a gzip bomb (more than :data:`RATIO` times its compressed size, and
  more than :data:`FLOOR`), a truncated stream or a file that is not gzip is
  :class:`Damaged`, an :class:`OSError`: every reader that says "cannot be read" says it
  (never an ``EOFError``, which click would turn into a bare "Aborted!").
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import zlib
from typing import IO, Any, Iterator

#: the longest line of a run directory's files (a group of many tasks is a few MB)
MAX_LINE = 64 << 20
#: a sealed file may expand to at most RATIO times its compressed size (JSON lines, each
#: with a signature of random hex, compress 5-30 times; gzip's own limit is about 1,030)...
RATIO = 200
#: ... or FLOOR bytes, whichever is more
FLOOR = 64 << 20


class Damaged(OSError):
    """A file that cannot be read as what it should be (see the module); its ``strerror``
    says why, its ``filename`` which file."""

    def __init__(self, path: Any, why: str):
        super().__init__(errno.EINVAL, why, str(path))


def kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a file"


def inside(path: Any, within: Any) -> bool:
    """Whether ``path``, its links resolved, is inside directory ``within`` (resolved too)."""
    real, top = os.path.realpath(path), os.path.realpath(within)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def open_regular(path: Any, mode: str = "rb", within: Any = None, **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for reading, of a regular file only, never blocking on the open;
    with ``within``, only one that resolves inside that directory (see the module)."""
    if within is not None and not inside(path, within):
        raise OSError(errno.EXDEV, f"a link out of {within}", str(path))
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


class Sealed(io.RawIOBase):
    """A sealed (gzip) file read as its plain text: ``read``, ``readline``, ``seek``
    (forwards by decompressing), ``tell``, offsets into the plain text; incrementally, at
    most :func:`cap` bytes of it, and every failure of the stream :class:`Damaged`."""

    def __init__(self, raw: IO[bytes], path: Any):
        super().__init__()
        self.path = str(path)
        self._raw = raw
        self.cap = max(FLOOR, RATIO * os.fstat(raw.fileno()).st_size)
        self._gz = gzip.GzipFile(fileobj=raw, mode="rb")

    def _guard(self, fn: Any, *args: Any) -> Any:
        try:
            out = fn(*args)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            why = "cut short" if isinstance(exc, EOFError) else f"not gzip ({exc})"
            raise Damaged(self.path, f"a sealed file that is {why}") from None
        if self._gz.tell() > self.cap:
            raise Damaged(self.path, f"a sealed file that expands past {self.cap} bytes (a gzip bomb?)")
        return out

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        room = self.cap + 1 - self._gz.tell()
        return self._guard(self._gz.read, room if n is None or n < 0 else min(n, max(room, 0)))

    def readline(self, limit: int | None = -1) -> bytes:
        room = self.cap + 1 - self._gz.tell()
        return self._guard(self._gz.readline, room if limit is None or limit < 0 else min(limit, max(room, 0)))

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == io.SEEK_END:  # (the plain text's end: read to it, bounded)
            while self.read(1 << 20):
                pass
            return self._gz.tell()
        if whence == io.SEEK_CUR:
            offset += self._gz.tell()
        if offset > self.cap:
            raise Damaged(self.path, f"an offset past what a sealed file may expand to ({self.cap} bytes)")
        return self._guard(self._gz.seek, offset)

    def tell(self) -> int:
        return self._gz.tell()

    def close(self) -> None:
        if not self.closed:
            try:
                self._gz.close()
            finally:
                self._raw.close()
        super().close()


def open_spool(path: Any, within: Any = None) -> IO[bytes]:
    """A spool file opened for reading, plain or sealed (``path + ".gz"``, read through
    :class:`Sealed`); the plain one when both are there (a seal cut short).
    :class:`FileNotFoundError` when neither is."""
    try:
        return open_regular(path, "rb", within)
    except FileNotFoundError:
        if os.path.islink(path):  # (a dangling link is not "no file": a sealed one is not looked for)
            raise
    gz = f"{path}.gz"
    return Sealed(open_regular(gz, "rb", within), gz)


def lines(fh: IO[bytes], cap: int = MAX_LINE, path: Any = None) -> Iterator[bytes]:
    """The lines of a file opened for reading, each with its ``\\n`` (the last one may have
    none: cut short); a line longer than ``cap`` is :class:`Damaged`, read no further."""
    while True:
        line = fh.readline(cap + 1)
        if not line:
            return
        if len(line) > cap:
            raise Damaged(path or getattr(fh, "name", "?"), f"a line longer than {cap} bytes")
        yield line


def read_lines(path: Any, cap: int = MAX_LINE, within: Any = None) -> Iterator[bytes]:
    """The lines of a spool file, plain or sealed (:func:`open_spool`, :func:`lines`)."""
    with open_spool(path, within) as fh:
        yield from lines(fh, cap, path)
