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
  that directory is refused; a pilot's directory is confined to its run once
  (:func:`run_pilots`, :func:`pilot_dir`: not a symbolic link, resolving inside the run's
  real path), and its files opened under that real path with ``within`` it, so a
  ``RUN/pilots/ID`` linked to another run's is never read as this run's;
- **lines of bounded length**: :func:`lines` gives whole lines of at most ``cap`` bytes; a
  line longer than that is :class:`Damaged` (it is read no further);
- **sealed (gzip) files read incrementally, with a cap on what they expand to**:
  :class:`Sealed`; a gzip bomb (more than :data:`RATIO` times its compressed size, and
  more than :data:`FLOOR`), a truncated stream or a file that is not gzip is
  :class:`Damaged`, an :class:`OSError`: every reader that says "cannot be read" says it
  (never an ``EOFError``, which click would turn into a bare "Aborted!").

Why one module over 450 lines: it is the one opener and reader of what others wrote, and
its guarantees (regular files only, inside their directory, lines bounded, expansions
capped) hold only together: every reader goes through it, so a check added to one path
and not another would be read here, in one sitting, or missed.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import time
import zlib
from typing import IO, Any, Iterator

#: the longest line of a run directory's files (a group of many tasks is a few MB)
MAX_LINE = 64 << 20
#: the most a run's secret (``RUN/secret``: 64 hex digits written by pwe) is read of
SECRET_MOST = 4096
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


class Outside(OSError):
    """A directory of a run that is not the run's own (``errno.EXDEV``): a symbolic link
    where the run's own directory should be (``RUN/pilots/ID`` linked to another run's, or
    anywhere), or one that resolves out of the run directory. Its ``filename`` names it,
    its ``strerror`` says why; nothing in it is read."""

    def __init__(self, path: Any, why: str):
        super().__init__(errno.EXDEV, why, str(path))


def own_dir(path: Any, root: str) -> str:
    """The real path of ``path``, a directory of the run whose real path is ``root``
    (``os.path.realpath`` of the run directory, resolved once by the caller): :class:`Outside`
    when ``path`` is itself a symbolic link, or resolves (through a link among its parents)
    out of ``root``. One ``lstat`` and one ``realpath``: a reader checks each directory once
    per command, then opens its files under the real path with ``within`` that path."""
    path = os.fspath(path)
    if os.path.islink(path):
        try:
            to = os.readlink(path)
        except OSError:
            to = "?"
        raise Outside(path, f"a symbolic link (to {to!r}), not this run's own directory: not read")
    real = os.path.realpath(path)
    if not real.startswith(root.rstrip(os.sep) + os.sep):
        raise Outside(path, f"resolves out of the run directory {root} (to {real!r}): not read")
    return real


def run_pilots(run_dir: Any) -> tuple[list[tuple[str, str]], list[OSError]]:
    """The pilots' directories of a run (``RUN/pilots/ID``), each confined to the run
    directory (:func:`own_dir`, the run's real path resolved once): (id, real path) of each
    that is the run's own directory, by id (``p2`` before ``p10``); and an :class:`Outside`
    for each that is not (a symbolic link, to another run or anywhere), and for ``pilots``
    itself when it is not: skipped, never read. Entries that are not directories are left
    out (no pilot writes one)."""
    root = os.path.realpath(run_dir)
    try:
        top = own_dir(os.path.join(run_dir, "pilots"), root)
        names = os.listdir(top)
    except Outside as exc:
        return [], [exc]
    except OSError:
        return [], []
    found: list[tuple[str, str]] = []
    refused: list[OSError] = []
    for name in sorted(names, key=lambda n: (len(n), n)):
        path = os.path.join(top, name)
        try:
            real = own_dir(path, root)
        except Outside as exc:
            refused.append(exc)
            continue
        if os.path.isdir(real):
            found.append((name, real))
    return found, refused


def pilot_dir(run_dir: Any, pilot_id: str, root: str | None = None) -> str:
    """The real path of one pilot's directory (``RUN/pilots/ID``), confined to the run
    directory (``root``: its real path, when the caller has it): :class:`Outside` when it
    is a symbolic link or resolves out of the run (see :func:`own_dir`)."""
    root = root if root is not None else os.path.realpath(run_dir)
    return own_dir(os.path.join(run_dir, "pilots", pilot_id), root)


def open_regular(path: Any, mode: str = "rb", within: Any = None, **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for reading, of a regular file only, never blocking on the open;
    with ``within``, only one that resolves inside that directory (see the module)."""
    if within is not None and not inside(path, within):
        raise OSError(errno.EXDEV, f"a link out of {within}", str(path))
    access = os.O_RDWR if "+" in mode else os.O_RDONLY  # ("rb+": the journal's torn tail cut back)
    fd = os.open(path, access | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
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


def open_append(path: Any, within: Any = None, mode: int = 0o666) -> IO[bytes]:
    """A file of a run directory opened to append to (made when missing, with ``mode``),
    unbuffered: of a regular file only, never blocking on the open (``O_NONBLOCK``: a FIFO
    put there fails at once, ``ENXIO`` without a reader, else refused on its kind; a
    writer's open of a FIFO would wait for a reader for ever), never through a link out
    of ``within``."""
    if within is not None and not inside(path, within):
        raise OSError(errno.EXDEV, f"a link out of {within}", str(path))
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # (a FIFO with no reader)
            raise OSError(errno.EINVAL, "not a regular file (a FIFO)", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({kind(st.st_mode)})", str(path))
        os.set_blocking(fd, True)
        return open(fd, "ab", buffering=0)
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
        import gzip  # (here, not at the top: the engine imports this module on its way to the first member)

        self._gz = gzip.GzipFile(fileobj=raw, mode="rb")
        self._bad = (EOFError, zlib.error, gzip.BadGzipFile)

    def _guard(self, fn: Any, *args: Any) -> Any:
        try:
            out = fn(*args)
        except self._bad as exc:
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


def segments(path: Any) -> list[tuple[int, str]]:
    """The segments a spool file was rotated into as it grew (:mod:`pilot.transport`):
    ``(end, path)`` in order, where ``PATH.END`` (or, sealed, ``PATH.END.gz``) holds its
    plain text from the end of the one before (0 for the first) up to offset ``END``; the
    live file ``path`` holds what follows the last. [] for a spool never rotated."""
    d, name = os.path.split(os.fspath(path))
    pre = name + "."
    try:
        names = os.listdir(d or ".")
    except OSError:
        return []
    ends: dict[int, str] = {}
    for f in names:
        if f.startswith(pre):
            rest = f[len(pre):].removesuffix(".gz")
            if rest.isascii() and rest.isdigit() and len(rest) < 19:
                ends[int(rest)] = os.path.join(d, pre + rest)
    return sorted(ends.items())


class Chain(io.RawIOBase):
    """A rotated spool file (:func:`segments`, then the live file) read as one plain text:
    ``read``, ``readline``, ``seek``, ``tell``, offsets into the whole. Each part is opened
    by :func:`open_part` (plain or sealed: a part sealed while it is read is read on from
    its open descriptor). At the end of the live file, at most every :data:`RELIST` seconds
    (and only once it is past :data:`ROTATED_FLOOR` bytes, the least a writer rotates at),
    whether the writer has rotated it is looked at again; a part shorter than its name
    says is :class:`Damaged`."""

    #: seconds between two looks for a rotation at the end of the live file
    RELIST = 0.5
    #: listings of the parts in one open of the live file, while the writer rotates it meanwhile
    RELOCATE = 100

    def __init__(self, path: Any, within: Any = None, parts: list[tuple[int, str]] | None = None):
        super().__init__()
        self.path = os.fspath(path)
        self.name = self.path
        self.within = within
        self._parts = segments(path) if parts is None else parts
        self._fh: IO[bytes] | None = None
        self._base = 0
        self._end: int | None = None  # (None: the live file, open-ended)
        self._part = self.path  # (the part read now)
        self._pos = 0
        self._looked = 0.0
        self._locate(0)

    def parts(self) -> list[tuple[int, int, str]]:
        """(start, end, path) of every rotated part, then (start, -1, path) of the live file."""
        out, base = [], 0
        for end, p in self._parts:
            out.append((base, end, p))
            base = end
        return out + [(base, -1, self.path)]

    def _locate(self, pos: int) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        for _ in range(self.RELOCATE):
            base, end, p = next((b, e, q) for b, e, q in self.parts() if pos < e or e < 0)
            self._base, self._end, self._part = base, (end if end >= 0 else None), p
            try:
                self._fh = open_part(p, self.within)
            except FileNotFoundError:
                if end >= 0:
                    raise Damaged(p, "a rotated part of a spool file that is gone") from None
                self._fh = None  # (the live file between its rotation and its new start)
            if end < 0 and self._fh is not None:
                # The live file starts where the last part listed ends, if no rotation came
                # since that listing: a reader that waited for it (its parts listed before
                # the writer rotated again) would read a later live file as if it began
                # there, skipping a part, then reading another from mid-line (a pilot took
                # its tasks out of order, refused a cut line as forged and sat idle)
                parts = segments(self.path)
                if (parts[-1][0] if parts else 0) != base:
                    self._fh.close()
                    self._fh = None
                    self._parts = parts
                    continue
            if self._fh is not None and pos > base:
                self._fh.seek(pos - base)
            self._pos = pos
            return
        raise Damaged(self.path, f"a spool file rotated {self.RELOCATE} times while it was opened")

    def _next(self) -> bool:
        """At the end of the part read: on to the next one, if there is one now."""
        if self._end is not None:
            if self._pos < self._end:
                raise Damaged(self._part, "a rotated part of a spool file shorter than its name says "
                              f"({self._end - self._base} bytes; or a part before it is gone)")
            self._locate(self._pos)
            return True
        if self._fh is None:  # (no live file yet: tried again as often as asked, as a plain open is)
            self._locate(self._pos)
            if self._fh is not None:
                return True
        elif self._pos - self._base < ROTATED_FLOOR:
            return False
        now = time.monotonic()
        if now - self._looked < self.RELIST:
            return False
        self._looked = now
        parts = segments(self.path)
        if not parts or parts[-1][0] <= self._base:
            return False
        self._parts = parts
        self._locate(self._pos)
        return True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _room(self, n: int | None) -> int:
        left = -1 if self._end is None else self._end - self._pos
        if n is None or n < 0:
            return left
        return n if left < 0 else min(n, left)

    def read(self, n: int | None = -1) -> bytes:
        out: list[bytes] = []
        want = -1 if n is None or n < 0 else n
        while want != 0:
            data = self._fh.read(self._room(want)) if self._fh is not None else b""
            if data:
                self._pos += len(data)
                out.append(data)
                if want > 0:
                    want -= len(data)
                if self._end is None and want > 0:
                    break  # (the live file: what is there now, one read as a plain file's)
                continue
            if not self._next():
                break
        return b"".join(out)

    def readline(self, limit: int | None = -1) -> bytes:
        while True:
            data = self._fh.readline(self._room(limit)) if self._fh is not None else b""
            if data:
                self._pos += len(data)
                return data
            if not self._next():
                return b""

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == io.SEEK_END:
            self._parts = segments(self.path)
            self._locate(self._parts[-1][0] if self._parts else 0)
            if self._fh is not None:
                self._pos = self._base + self._fh.seek(0, io.SEEK_END)
            return self._pos
        if whence == io.SEEK_CUR:
            offset += self._pos
        if self._base <= offset and (self._end is None or offset < self._end) and self._fh is not None:
            self._fh.seek(offset - self._base)
            self._pos = offset
        else:
            self._locate(offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        super().close()


#: the least size at which a writer rotates a spool file (pilot.settings' PWE_SPOOL_SEGMENT
#: may not be set lower): a reader short of it in the live file never looks for a rotation
ROTATED_FLOOR = 64 << 10


def open_spool(path: Any, within: Any = None) -> IO[bytes]:
    """A spool file opened for reading, plain or sealed (``path + ".gz"``, read through
    :class:`Sealed`); the plain one when both are there (a seal cut short); a spool file
    that was rotated as it grew, read whole through :class:`Chain`.
    :class:`FileNotFoundError` when none of them is."""
    parts = segments(path)
    if parts:
        return Chain(path, within, parts)
    return open_part(path, within)


def open_part(path: Any, within: Any = None) -> IO[bytes]:
    """One file of a spool, plain or sealed (``path + ".gz"``, read through :class:`Sealed`);
    the plain one when both are there (a seal cut short); never the parts it was rotated
    into (:func:`open_spool` reads those). :class:`FileNotFoundError` when neither is."""
    try:
        return open_regular(path, "rb", within)
    except FileNotFoundError:
        if os.path.islink(path):  # (a dangling link is not "no file": a sealed one is not looked for)
            raise
    gz = f"{path}.gz"
    return Sealed(open_regular(gz, "rb", within), gz)


#: the most :func:`take_line` reads in one step: what a line longer than its cap costs
#: (besides the cap itself) while it is found out and skipped
STEP = 1 << 20


def take_line(fh: IO[bytes], cap: int = MAX_LINE) -> tuple[bytes | None, int, bool]:
    """The next line of a file opened for reading: ``(line, size, ended)``, ``line`` with its
    ``\\n`` when ``ended`` (the last one may have none: cut short; ``b""`` at the end), or
    None when it is longer than ``cap`` bytes: then read on to its end in steps of
    :data:`STEP` and dropped, ``size`` its length. Read in steps, so that a line of any
    length (200 MB of one line, a file with no newline) holds at most ``cap`` bytes of
    memory, never the line whole nor a buffer of ``cap`` per read."""
    step = min(cap + 1, STEP)
    line = fh.readline(step)
    if len(line) < step or line.endswith(b"\n"):  # (the usual case: one read)
        return line, len(line), line.endswith(b"\n")
    parts, size = [line], len(line)
    while True:
        more = fh.readline(step)
        size += len(more)
        if size > cap:
            parts = []
            while more and not more.endswith(b"\n"):
                more = fh.readline(STEP)
                size += len(more)
            return None, size, more.endswith(b"\n")
        parts.append(more)
        if len(more) < step or more.endswith(b"\n"):
            whole = b"".join(parts)
            return whole, size, whole.endswith(b"\n")


def lines(fh: IO[bytes], cap: int = MAX_LINE, path: Any = None) -> Iterator[bytes]:
    """The lines of a file opened for reading, each with its ``\\n`` (the last one may have
    none: cut short); a line longer than ``cap`` is :class:`Damaged`, read no further
    (:func:`take_line`: at most ``cap`` bytes held while it is found out)."""
    while True:
        line, _, _ = take_line(fh, cap)
        if line is None:
            raise Damaged(path or getattr(fh, "name", "?"), f"a line longer than {cap} bytes")
        if not line:
            return
        yield line


def read_lines(path: Any, cap: int = MAX_LINE, within: Any = None) -> Iterator[bytes]:
    """The lines of a spool file, plain or sealed (:func:`open_spool`, :func:`lines`)."""
    with open_spool(path, within) as fh:
        yield from lines(fh, cap, path)
