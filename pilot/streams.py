"""Members' stdout and stderr in a few files: the one writer and the one reader of stream
files (standard library only: the pilot, its local spawners and its node agents write them;
every reader of pwe reads them through :func:`read_member`). One module over 450 lines on
purpose: the frame and index layouts, written and read, must change together.

**Capture.** Whoever starts a member (the pilot, a local spawner, a node agent) opens two
nameless files in its node-local scratch (``O_TMPFILE``; where the file system has none, a
file made and unlinked at once) and gives them to the member as its fds 1 and 2. When the
member has been reaped, what they hold is read back, bounded, and appended to the
process's own stream file as one frame. The pair is then used again for a later member
(emptied if it held anything) when nothing of the member's process group is left to
write into it (``killpg(pid, 0)``); else it is closed. Making a nameless file on ext4
costs about 30 us of CPU, twice a member; using one again, one ``kill`` (and, when it
held output, an ``ftruncate`` and an ``lseek`` each). Not pipes: a pipe dies with a killed pilot, and a
member the guardian keeps alive for its grace would then die of SIGPIPE at its next line;
a file takes its writes whoever is left to read it. Not the member writing into a shared
file: two processes would append to one file, and a member's bytes could be made to look
like another's.

**Files.** In the pilot's directory, one ``NAME.stream`` per writer (``pilot``, each local
spawner and each node agent under its own name; no two processes ever append to one file)
and its ``NAME.index``; a writer whose members printed nothing makes neither. A frame is
``MAGIC, crc32`` then the body (:data:`_BODY`: member, attempt, stdout's and stderr's
lengths and bytes left out, time, the node id's length), the node id, stdout, stderr. The
CRC covers all of it; the reader goes to a frame only through the index (never scanning for
the magic), so a member's own bytes, which sit inside a frame of known length, can never
be taken for another member's frame. A writer killed between a frame and its index record
leaves that frame out of the index: readers step past the last frame the index names,
checked whole, frame by frame by each one's own length (:func:`unindexed`), and the seal of a
left pilot writes the records back (:func:`mend_index`). An index record (:data:`_INDEX`, 32 bytes) says the
node (a hash of its id), member, attempt, offset and length; a member's records are found by
``mmap.find`` of its 16-byte key (C speed: a million records in milliseconds).

**Bounded.** Each of stdout and stderr is kept up to ``PWE_OUTPUT_CAP`` bytes per attempt:
its head and tail, half each, and how many bytes between them were left out. A member
printing gigabytes costs its starter two ``pread`` calls of at most the cap.

**Sealed.** When the pilot has left, a stream bigger than ``PWE_SEAL_ABOVE`` is compressed
(:func:`seal`) as independent gzip members of :data:`BLOCK` plain bytes each, with a table
of where each begins (``NAME.stream.blocks``): a frame is read by decompressing only the
blocks it lies in. The index stays as it is (plain offsets).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import struct
import sys
import time
import zlib
from typing import TYPE_CHECKING, NamedTuple

from .bounded import Damaged, open_regular, run_pilots
from .settings import OUTPUT_CAP
from .transport import append_whole

if TYPE_CHECKING:
    import mmap

MAGIC = b"PWS\x01"
_HEAD = struct.Struct(">4sI")  # magic, crc32 of everything after it
_BODY = struct.Struct(">QIIIQQdH")  # member, attempt, out len, err len, out left out, err left out, t, node len
_INDEX = struct.Struct(">8sQIQI")  # node key, member, attempt, offset, frame length
STREAM, INDEX, BLOCKS, SEALED = ".stream", ".index", ".stream.blocks", ".stream.gz"
#: plain bytes of one gzip member of a sealed stream
BLOCK = 1 << 20
#: the longest frame a reader takes (two caps at their highest, and room for the rest)
MAX_FRAME = 2 * OUTPUT_CAP.high + (1 << 16)
#: The largest offset an index record may give (2^62: past any file; an offset of 2^64 - 1 is
#: a damaged record, not a read that overflows).
MOST_OFFSET = 1 << 62
_NAME = re.compile(r"[^A-Za-z0-9._-]")
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)


def node_key(node: str) -> bytes:
    """The 8 bytes that stand for a node id in the index (its frames say the whole id)."""
    return hashlib.blake2b(node.encode(), digest_size=8).digest()


def writer_name(name: str) -> str:
    """A stream file's name for a writer (a node's name from the allocation: confined)."""
    return _NAME.sub("_", name)[:80] or "_"


def _bounded(fd: int, cap: int) -> tuple[bytes, int]:
    """What a capture file holds, at most ``cap`` bytes (its head and tail), and how many
    bytes were left out between them."""
    size = os.fstat(fd).st_size
    if size == 0:
        return b"", 0
    if size <= cap:
        return _pread(fd, size, 0), 0
    head = cap // 2
    return _pread(fd, head, 0) + _pread(fd, cap - head, size - (cap - head)), size - cap


def _pread(fd: int, n: int, at: int) -> bytes:
    parts = []
    while n > 0:
        got = os.pread(fd, n, at)
        if not got:
            break
        parts.append(got)
        n -= len(got)
        at += len(got)
    return b"".join(parts)


def tail(fd: int, n: int = 4096) -> bytes:
    """The last ``n`` bytes a capture file holds (srun's last words: pilot/launchers.py)."""
    size = os.fstat(fd).st_size
    return _pread(fd, min(n, size), max(0, size - n))


class StreamWriter:
    """One process's stream file and its index, and the capture files of its members.
    Files are opened at the first frame; each frame is appended whole or not at all (a
    full disk cuts back what it took: :func:`pilot.transport.append_whole`)."""

    def __init__(self, directory: str, name: str, cap: int | None = None, scratch: str | None = None):
        self.path = os.path.join(directory, writer_name(name))
        self.cap = OUTPUT_CAP.get() if cap is None else cap
        self.scratch = scratch or directory
        self._fh = self._ix = None
        self._end = 0
        self._keys: dict[str, bytes] = {}
        self._spare: list[tuple[int, int]] = []  # capture pairs free to be used again
        self._nodes: dict[str, bytes] = {}
        self.failed = ""  # why the last frame could not be written (said once by the caller)

    # -- capture ----------------------------------------------------------------------------
    def capture(self) -> tuple[int, int]:
        """Two empty nameless files for a member's stdout and stderr (close-on-exec here:
        the spawn dup2s them onto its 1 and 2): a pair used before, else two new."""
        if self._spare:
            return self._spare.pop()
        return self._scratch_fd(), self._scratch_fd()

    def _scratch_fd(self) -> int:
        if _O_TMPFILE:
            try:
                return os.open(self.scratch, _O_TMPFILE | os.O_RDWR, 0o600)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT, errno.EACCES,
                                     errno.EROFS):
                    raise
                self._no_tmpfile()
        import tempfile  # (a scratch without O_TMPFILE only)

        fd, path = tempfile.mkstemp(prefix=".pwe-out-", dir=self.scratch)
        os.unlink(path)
        return fd

    def _no_tmpfile(self) -> None:
        """The scratch takes no O_TMPFILE (NFS, Lustre) or no files: made and unlinked from
        now on, in the scratch if it takes files, else in the pilot's directory."""
        global _O_TMPFILE
        _O_TMPFILE = 0
        if not os.access(self.scratch, os.W_OK):
            self.scratch = os.path.dirname(self.path)

    @staticmethod
    def drop(fds: tuple[int, ...]) -> None:
        for fd in fds[:2]:
            try:
                os.close(fd)
            except OSError:
                pass

    def _again(self, fds: tuple[int, ...], used: bool) -> None:
        """A pair whose member was reaped: to be used again when its process group is gone
        (nothing left that could still write into it), emptied if it holds anything. A
        third item None: no process holds them (a warm worker's call, pilot/pyworkers.py:
        the worker gave them back before it answered)."""
        try:
            if fds[2] is not None:
                os.killpg(fds[2], 0)
            else:
                raise ProcessLookupError
        except ProcessLookupError:
            try:
                if used:
                    for fd in fds[:2]:
                        os.ftruncate(fd, 0)
                        os.lseek(fd, 0, os.SEEK_SET)
                self._spare.append((fds[0], fds[1]))
                return
            except OSError:
                pass
        except OSError:
            pass
        self.drop(fds)

    def keep(self, node: str, member: int, attempt: int, fds: tuple[int, ...], note: str = "") -> None:
        """A reaped member's capture files (``fds``: stdout, stderr and, to use them again,
        the member's pid, its process group): read back (bounded) and appended as one frame
        when they hold anything (a member that printed nothing costs no write); then used
        again or closed."""
        try:
            out, out_cut = _bounded(fds[0], self.cap)
            err, err_cut = _bounded(fds[1], self.cap)
        except OSError:
            out = err = b""
            out_cut = err_cut = 0
        if len(fds) > 2 and len(self._spare) < 64:
            self._again(fds, bool(out or err or out_cut or err_cut))
        else:
            self.drop(fds)
        if note:
            err += f"pwe: {note}\n".encode()
        if out or err:
            self.frame(node, member, attempt, out, err, out_cut, err_cut)

    def note(self, node: str, member: int, attempt: int, text: str) -> None:
        """A ``pwe: ...`` line the starter adds to a member attempt's stderr."""
        self.frame(node, member, attempt, b"", f"pwe: {text}\n".encode(), 0, 0)

    def frame(self, node: str, member: int, attempt: int, out: bytes, err: bytes, out_cut: int, err_cut: int) -> None:
        """Append one frame and its index record; best effort (a full disk loses this
        member's output, said in :attr:`failed`, never the pilot)."""
        nb = self._nodes.get(node)
        if nb is None:
            nb = self._nodes[node] = node.encode()
            self._keys[node] = node_key(node)
        body = b"".join((_BODY.pack(member, attempt, len(out), len(err), out_cut, err_cut, time.time(), len(nb)),
                         nb, out, err))
        data = _HEAD.pack(MAGIC, zlib.crc32(body)) + body
        try:
            if self._fh is None:
                self._open()
            append_whole(self._fh, data)
            at, self._end = self._end, self._end + len(data)
            append_whole(self._ix, _INDEX.pack(self._keys[node], member, attempt, at, len(data)))
            self.failed = ""
        except OSError as exc:
            if not self.failed:  # (said once in the writer's log, until a frame goes in again)
                try:
                    print(f"pilot: cannot write {self.path}{STREAM}: {exc.strerror or exc}; members' output "
                          "is lost until it can", file=sys.stderr, flush=True)
                except OSError:
                    pass
            self.failed = f"cannot write {self.path}{STREAM}: {exc.strerror or exc}"
            if self._fh is not None:
                try:
                    self._end = self._fh.seek(0, os.SEEK_END)
                except OSError:
                    pass

    def _open(self) -> None:
        self._fh = open(self.path + STREAM, "ab", buffering=0)
        self._ix = open(self.path + INDEX, "ab", buffering=0)
        self._end = self._fh.seek(0, os.SEEK_END)
        # (an index record cut short by a crash: the reader skips it, whole records only)

    def close(self) -> None:
        for fds in self._spare:
            self.drop(fds)
        self._spare.clear()
        for fh in (self._fh, self._ix):
            if fh is not None:
                try:
                    fh.close()
                except OSError:
                    pass
        self._fh = self._ix = None


# -- sealing -------------------------------------------------------------------------------------
def seal(directory: str, above: int) -> int:
    """Compress each stream file of a left pilot bigger than ``above`` bytes into
    ``NAME.stream.gz`` (independent gzip members of :data:`BLOCK` plain bytes) and its
    block table, then remove the plain one; bytes saved. A seal cut short leaves the plain
    file, which readers prefer."""
    saved = 0
    try:
        names = [n for n in os.listdir(directory) if n.endswith(STREAM)]
    except OSError:
        return 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            mend_index(path[:-len(STREAM)])  # (what a writer killed between its two writes left out)
        except OSError:
            pass
        try:
            with open_regular(path, "rb", within=directory) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size <= above:
                    continue
                offsets = [0]
                with open(path + ".gz.part", "wb") as gz:
                    while True:
                        block = fh.read(BLOCK)
                        if not block:
                            break
                        z = zlib.compressobj(6, zlib.DEFLATED, 31)
                        gz.write(z.compress(block) + z.flush())
                        offsets.append(gz.tell())
                    os.fsync(gz.fileno())
            with open(path + ".blocks.part", "wb") as bt:
                bt.write(struct.pack(f">{len(offsets)}Q", *offsets))
                os.fsync(bt.fileno())
            os.replace(path + ".blocks.part", path + ".blocks")
            os.replace(path + ".gz.part", path + ".gz")
            os.unlink(path)
            saved += size - offsets[-1]
        except OSError:
            for part in (path + ".gz.part", path + ".blocks.part"):
                try:
                    os.unlink(part)
                except OSError:
                    pass
    return saved


# -- reading --------------------------------------------------------------------------------------
class Frame(NamedTuple):
    attempt: int
    t: float
    stdout: bytes
    stderr: bytes
    out_cut: int
    err_cut: int
    path: str  # the stream file it was read from


def stream_names(pilots_dir: str, refused: list[OSError] | None = None) -> list[str]:
    """Every writer's stream of a run (``pilots/<id>/NAME``, without its suffix): those
    with an index. Pilots are few, so this is one listing each. Each pilot's directory is
    confined to the run (``pilots_dir``'s parent; :func:`pilot.bounded.run_pilots`): one
    that is a symbolic link, or resolves out of the run, is never listed; ``refused``, when
    given, gets its :class:`~pilot.bounded.Outside`."""
    out: list[str] = []
    found, outside = run_pilots(os.path.dirname(os.path.normpath(pilots_dir)))
    if refused is not None:
        refused.extend(outside)
    for _, d in found:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        out.extend(os.path.join(d, n[:-len(INDEX)]) for n in sorted(names) if n.endswith(INDEX))
    return out


def _indexed_last(index: bytes | mmap.mmap) -> tuple[int, int] | None:
    """Offset and length of the last frame an index names (None: it names none); its whole
    records only."""
    whole = len(index) - len(index) % _INDEX.size
    if not whole:
        return None
    *_, at, n = _INDEX.unpack_from(index, whole - _INDEX.size)
    return at, n


def _whole_frame(fd: int, at: int, size: int) -> tuple[bytes, int] | None:
    """The frame that begins at ``at`` of a plain stream of ``size`` bytes, checked whole
    (magic, its own length within the file, CRC), and its length; None if it is not one."""
    fixed = _HEAD.size + _BODY.size
    if at < 0 or at + fixed > size:
        return None
    head = os.pread(fd, fixed, at)
    magic, crc = _HEAD.unpack_from(head)
    *_, lo, le, _co, _ce, _t, ln = _BODY.unpack_from(head, _HEAD.size)
    n = fixed + ln + lo + le
    if magic != MAGIC or n > MAX_FRAME or at + n > size:
        return None
    data = os.pread(fd, n, at)
    if len(data) < n or zlib.crc32(memoryview(data)[_HEAD.size:]) != crc:
        return None
    return data, n


def unindexed(base: str, last: tuple[int, int] | None, most: int = 64) -> list[bytes]:
    """The index records of the whole frames of a plain stream past ``last`` (the offset and
    length of the last frame its index names; None: from the start): a writer killed
    between a frame and its index record, or one between the two now. Found by stepping
    from the end of that frame, checked whole first, frame by frame, each by its own length
    and checked by its CRC, never by searching for the magic (a member's own bytes are not
    frames); the first frame cut short or damaged ends the walk. At most ``most``."""
    out: list[bytes] = []
    try:
        fh = open_regular(base + STREAM, "rb", within=os.path.dirname(base))
    except FileNotFoundError:
        return out
    with fh:
        fd = fh.fileno()
        size = os.fstat(fd).st_size
        end = 0
        if last is not None:
            got = _whole_frame(fd, last[0], size)
            if got is None or got[1] != last[1]:
                return out  # (an index that does not end on a frame of its own: no walk from there)
            end = last[0] + last[1]
        fixed = _HEAD.size + _BODY.size
        while len(out) < most:
            got = _whole_frame(fd, end, size)
            if got is None:
                break
            data, n = got
            m, a, *_, ln = _BODY.unpack_from(data, _HEAD.size)
            out.append(_INDEX.pack(node_key(data[fixed:fixed + ln].decode("utf-8", "replace")), m, a, end, n))
            end += n
    return out


def mend_index(base: str) -> int:
    """Append to a left writer's index the records of frames it wrote and did not index
    (:func:`unindexed`), after cutting a record it left cut short; how many. Called only
    when no writer is left (the seal of a left pilot)."""
    path = base + INDEX
    # (its own directory's file, never a link nor a FIFO put in its place)
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with open(fd, "r+b", buffering=0) as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        index = fh.read()
        whole = len(index) - len(index) % _INDEX.size
        found = unindexed(base, _indexed_last(index[:whole]), most=1 << 20)
        if whole != len(index) or found:
            fh.truncate(whole)
            fh.seek(whole)
            fh.write(b"".join(found))
    return len(found)


def _read_plain(path: str, at: int, n: int) -> bytes:
    with open_regular(path, "rb", within=os.path.dirname(path)) as fh:
        data = os.pread(fh.fileno(), n, at)
    if len(data) < n:
        raise Damaged(path, f"a stream file cut short (a frame at {at} of {n} bytes)")
    return data


def _read_sealed(base: str, at: int, n: int) -> bytes:
    first, last = at // BLOCK, (at + n - 1) // BLOCK
    gz_path, table = base + SEALED, base + BLOCKS
    with open_regular(table, "rb", within=os.path.dirname(table)) as bt:
        raw = os.pread(bt.fileno(), 8 * (last - first + 2), 8 * first)
    if len(raw) < 8 * (last - first + 2):
        raise Damaged(table, f"a block table cut short (no block {last})")
    offs = struct.unpack(f">{len(raw) // 8}Q", raw)
    if any(b <= a for a, b in zip(offs, offs[1:])) or offs[-1] - offs[0] > 2 * BLOCK * (last - first + 1) + 4096:
        raise Damaged(table, "a block table whose offsets disagree")
    with open_regular(gz_path, "rb", within=os.path.dirname(gz_path)) as fh:
        comp = os.pread(fh.fileno(), offs[-1] - offs[0], offs[0])
    if len(comp) < offs[-1] - offs[0]:
        raise Damaged(gz_path, "a sealed stream cut short")
    plain = []
    for a, b in zip(offs, offs[1:]):
        z = zlib.decompressobj(31)
        try:
            got = z.decompress(comp[a - offs[0]:b - offs[0]], BLOCK)
        except zlib.error as exc:
            raise Damaged(gz_path, f"a sealed stream that is not gzip ({exc})") from None
        if not z.eof or z.unconsumed_tail:
            raise Damaged(gz_path, "a sealed stream block that is cut short or expands past its size")
        plain.append(got)
    data = b"".join(plain)[at - first * BLOCK:at - first * BLOCK + n]
    if len(data) < n:
        raise Damaged(gz_path, f"a sealed stream cut short (a frame at {at} of {n} bytes)")
    return data


def _frame(base: str, node: str, member: int, attempt: int, at: int, n: int) -> Frame:
    """The frame an index record points at, checked whole (magic, CRC, whose it is)."""
    if n < _HEAD.size + _BODY.size or n > MAX_FRAME:
        raise Damaged(base + INDEX, f"an index record of a frame of {n} bytes")
    if at > MOST_OFFSET:  # (2^64 - 1 fits the record; pread's offset is a signed C long: OverflowError)
        raise Damaged(base + INDEX, f"an index record of a frame at offset {at}, past any stream file")
    try:
        data = _read_plain(base + STREAM, at, n)
    except FileNotFoundError:
        if os.path.islink(base + STREAM):
            raise
        data = _read_sealed(base, at, n)
    magic, crc = _HEAD.unpack_from(data)
    body = memoryview(data)[_HEAD.size:]
    if magic != MAGIC or zlib.crc32(body) != crc:
        raise Damaged(base + STREAM, f"a damaged frame at offset {at}")
    m, a, lo, le, co, ce, t, ln = _BODY.unpack_from(body)
    start = _BODY.size + ln
    if (m, a) != (member, attempt) or bytes(body[_BODY.size:start]) != node.encode() or start + lo + le != len(body):
        raise Damaged(base + STREAM, f"a frame at offset {at} that is not the one its index names")
    return Frame(a, t, bytes(body[start:start + lo]), bytes(body[start + lo:]), co, ce,
                 base + STREAM if os.path.exists(base + STREAM) else base + SEALED)


class Reader:
    """The output streams of a run (its ``pilots/`` directory), read: each index opened and
    mapped once, however many members are looked up. One member is found by a search of
    each index (about 1 GB/s: 40 ms at a million records); ``many``: each index is read
    once into a table instead (a second at ten million records), for many members (the
    report's failed members, a check of every member)."""

    def __init__(self, pilots_dir: str, many: bool = False):
        #: the pilots' directories not read (symbolic links, out of the run): :class:`~pilot.bounded.Outside`
        self.refused: list[OSError] = []
        self.bases = stream_names(pilots_dir, self.refused)
        self._maps: dict[str, mmap.mmap | OSError | None] = {}
        self._tails: dict[str, list[bytes]] = {}  # (each plain stream's frames its index does not name yet)
        self._tables: dict[str, dict[bytes, list[tuple[int, int, int]]]] | None = {} if many else None

    def _map(self, base: str) -> mmap.mmap | None:
        if base not in self._maps:
            try:
                with open_regular(base + INDEX, "rb", within=os.path.dirname(base)) as fh:
                    size = os.fstat(fh.fileno()).st_size
                    whole = size - size % _INDEX.size  # (a record cut short at the end: skipped)
                    import mmap  # (a reader's only: the engine imports this module on its way to its first member)

                    self._maps[base] = mmap.mmap(fh.fileno(), whole, access=mmap.ACCESS_READ) if whole else None
            except OSError as exc:
                self._maps[base] = exc
        got = self._maps[base]
        if isinstance(got, OSError):
            raise got
        return got

    def member(self, node: str, member: int) -> tuple[dict[int, list[Frame]], list[OSError], list[OSError]]:
        """Every frame of a member, by attempt (each attempt's frames in time order: the
        member's own, then the lines its pilot added), from every stream of the run; the
        frames of it that are damaged (its own); the indexes that cannot be read (any
        member may be in one)."""
        key = node_key(node) + struct.pack(">Q", member)
        frames: dict[int, list[Frame]] = {}
        damaged: list[OSError] = []
        unreadable: list[OSError] = list(self.refused)  # (a pilot's directory not the run's own: any member's)
        for base in self.bases:
            try:
                mm = self._map(base)
            except OSError as exc:
                unreadable.append(exc)
                continue
            for a, at, n in self._records(base, mm, key):
                try:
                    frames.setdefault(a, []).append(_frame(base, node, member, a, at, n))
                except OSError as exc:
                    damaged.append(exc)
        for got in frames.values():
            got.sort(key=lambda f: f.t)
        return frames, damaged, unreadable

    def _tail(self, base: str, mm: mmap.mmap | None) -> list[bytes]:
        if base not in self._tails:
            try:
                self._tails[base] = unindexed(base, _indexed_last(mm) if mm is not None else None)
            except OSError:
                self._tails[base] = []
        return self._tails[base]

    def _records(self, base: str, mm: mmap.mmap | None, key: bytes) -> list[tuple[int, int, int]]:
        """(attempt, offset, length) of each record of ``key`` in one index, and of the
        frames past its last that its writer had not indexed yet (:func:`unindexed`)."""
        tail = self._tail(base, mm)
        if self._tables is not None:
            if base not in self._tables:
                table: dict[bytes, list[tuple[int, int, int]]] = {}
                for records in (mm or b"", b"".join(tail)):  # (the index, then the frames past it)
                    for nk, m, a, at, n in _INDEX.iter_unpack(records):
                        table.setdefault(nk + m.to_bytes(8, "big"), []).append((a, at, n))
                self._tables[base] = table
            return self._tables[base].get(key, [])
        found = [_INDEX.unpack(r)[2:] for r in tail if r.startswith(key)]
        if mm is None:
            return found
        i = mm.find(key)
        while i >= 0:
            if i % _INDEX.size == 0:
                found.append(_INDEX.unpack_from(mm, i)[2:])
            i = mm.find(key, i + 1)
        return found

    def close(self) -> None:
        for mm in self._maps.values():
            if mm is not None and not isinstance(mm, OSError):
                mm.close()
        self._maps.clear()

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
