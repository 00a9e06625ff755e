"""How messages travel between the engine and one pilot: one interface, one side each.

Each end holds a :class:`Transport` for each pilot it talks to:

``send(msgs)``
    Deliver a batch of messages (:mod:`pilot.wire` kinds) to the other side, in order, with
    one write. Raises :class:`OSError` when the medium refuses (a full disk); what the
    side keeps of an unsent batch is its own (see each implementation).
``receive(cursor) -> (msgs, cursor)``
    The messages the other side sent after ``cursor``, and the cursor after them. A
    cursor is opaque to the caller: it only keeps it (the engine journals it, so that a
    restarted engine reads on from where the last one stopped) and gives it back. The
    start is ``0``.

Two implementations. The **spool** (here, the default): two append-only JSON-lines files
in the pilot's directory, ``tasks.jsonl`` (the engine writes) and ``events.jsonl`` (the
pilot writes). Each file has exactly one writer, so appends never interleave and nothing
needs a lock on NFS, GPFS or Lustre; the cursor is a byte offset; a partial last line is
held back until its writer finishes it. **Redis** (:mod:`pilot.broker`): the pilot's
events through a Redis stream, its tasks still through the spool; a pilot that loses
the broker goes on through the spool by itself.

A spool file that grows past ``PWE_SPOOL_SEGMENT`` bytes (:func:`segment_size`, 128 MiB) is
**rotated** by its writer between two batches: renamed to ``NAME.END`` (``END`` the offset
of its end in the whole) and begun again empty; the engine **seals** (gzip) each part behind
what both sides have read, in a thread, as the run goes on (:meth:`EngineSpool.seal_behind`),
so that a pilot that lives for 10^7 members never keeps gigabytes of plain text. A pilot that
has left, once the engine has taken in all it said, has the rest of its files sealed
(:func:`pilot.sealing.seal`; the renaming and compressing are :mod:`pilot.sealing`'s):
compressed to ``NAME.gz`` when together they are big (a million members'
are hundreds of MB of repetitive JSON). Every reader opens any of these through
:func:`open_spool` (a rotated file through :class:`pilot.bounded.Chain`), and a cursor stays
an offset into the whole plain text.

Every line is signed with its channel's key (:func:`pilot.wire.channel_key`, from the
run's ``secret``; :func:`keys` is how a pilot finds it) and every message a pilot sends
has its sequence number ``q``, given here as it is first sent: the engine applies each
``q`` once, whichever way it came (:mod:`pwe.engine.pilots`).
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from typing import Any

from . import faults
from .bounded import (MAX_LINE, SECRET_MOST, Chain, Damaged, Sealed, lines, open_append, open_part, open_regular,
                      segments)
from .bounded import open_spool as open_spool  # (every spool's reader: re-exported for the transports' users)
from .sealing import ARCHIVE as ARCHIVE, EVENTS as EVENTS, TASKS as TASKS  # (the spool's files: every reader's)
from .sealing import live_base, rotate, seal_files, segment_size, size_of
from .wire import FORGED, GROUP, TASK, channel_key, decode, encode

#: the most of a spool file read at once; a line held back waiting for its end longer than
#: :data:`pilot.bounded.MAX_LINE` (a group of many tasks is a few MB) is not one of the
#: other end's, and is dropped as ``forged`` rather than held in memory without bound
READ_CHUNK = MAX_LINE
#: what one read of a spool file asks for: asking for READ_CHUNK at once allocates and frees
#: 64 MiB on every read, ~20 us even when nothing new is there (the pilot reads its tasks
#: once per member that ends), and the unmapping interrupts the other cores too
READ_STEP = 1 << 20


def read_some(fh: Any, most: int) -> bytes:
    """What ``fh`` holds from its position now, up to ``most`` bytes, READ_STEP at a time
    (a read that comes back short is the end of what is there)."""
    parts, total = [], 0
    while total < most:
        more = fh.read(min(READ_STEP, most - total))
        parts.append(more)
        total += len(more)
        if len(more) < READ_STEP:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)

def keys(directory: str, secret: str | None = None) -> tuple[bytes | None, bytes | None]:
    """(The pilot's side.) The keys of its channel: (what it sends, what it reads). The
    run's secret is ``secret`` or, by default, the run directory's (the pilot's directory
    is ``RUN/pilots/ID``); (None, None) when there is none (a pilot run alone, by hand).
    A secret that others may read is refused (:class:`PermissionError`)."""
    path = secret or os.path.join(directory, os.pardir, os.pardir, "secret")
    try:
        fh = open_regular(path, "rb")  # (a FIFO put there: refused, never waited on)
    except FileNotFoundError:
        if secret:
            raise
        return None, None
    with fh:
        if os.fstat(fh.fileno()).st_mode & 0o077:
            raise PermissionError(f"{path} may be read by others: make it owner-only (chmod 600)")
        data = fh.read(SECRET_MOST + 1)
        if len(data) > SECRET_MOST:
            raise Damaged(path, f"a secret longer than {SECRET_MOST} bytes")
        data = data.strip()
    pilot = os.path.basename(os.path.normpath(directory))
    return channel_key(data, pilot, True), channel_key(data, pilot, False)


class Transport:
    """What each end uses to talk to the other (see the module's docstring)."""

    #: where the messages go, for error messages (never opened by the caller)
    where = ""

    # -- what a transport can do beyond sending and receiving, declared here with a default
    # each (as protocols/base.py declares what a batch system can do): the engine asks these,
    # never a transport's class or attributes of its own.

    #: (The engine's side.) The pilot keeps what it sent until the engine acknowledges it:
    #: the engine sends an ``ack`` with the last ``q`` it journaled.
    acks = False

    def wait_on(self, cursor: Any) -> tuple[Any, str, str] | None:
        """(The engine's side.) What the engine may block on for this pilot's next message,
        read on from ``cursor``: (a broker with ``wait(streams, timeout)``, the stream, the
        last entry read); None when there is nothing to wait on (a spool is polled)."""
        return None

    def trim(self) -> None:
        """(The engine's side; called once the journal holds what was read.) Let the medium
        forget what was read; nothing for a spool, whose files are the pilot's record."""

    def forget(self) -> None:
        """(The engine's side; the run is over and all its pilot said is journaled.) Drop
        what the medium keeps of this pilot; nothing for a spool."""

    def send(self, msgs: list[dict[str, Any]]) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def receive(self, cursor: Any) -> tuple[list[dict[str, Any]], Any]:  # pragma: no cover - interface
        raise NotImplementedError

    def sent(self, among: set[tuple[str, int, int]] | None = None) -> Counter[tuple[str, int, int]]:  # pragma: no cover
        """(The engine's side.) (node, member, attempt) of every task the pilot was sent,
        and how many times: a resumed engine hands back what it journaled as assigned but
        never sent, and takes back what was sent but the journal lost. ``among``: only
        these are asked about (the answer may leave out any other)."""
        raise NotImplementedError

    def await_seal(self) -> None:
        """(The engine's side.) Wait for what this transport compresses in the background,
        if anything (a spool's parts behind both readers, sealed in a daemon thread: an
        engine that exited under it left a part plain beside an empty ``.gz.tmp``)."""

    def close(self) -> None:
        pass


class _Inbox:
    """Reading one spool file from a byte offset; a partial last line is held back."""

    def __init__(self, path: str, key: bytes | None = None):
        self.path = path
        self.key = key
        self._fh = None
        self._at = 0  # the cursor of the last read: the file's position less the partial line
        self._partial = b""

    def read(self, cursor: int) -> tuple[list[dict[str, Any]], int]:
        fh = self._fh
        if fh is None or cursor != self._at:
            if fh is None:  # (a Chain even before any rotation: it follows its writer's rotations)
                fh = self._fh = Chain(self.path, within=os.path.dirname(self.path))
            fh.seek(cursor)
            self._at, self._partial = cursor, b""
        data = read_some(fh, READ_CHUNK)
        if not data:
            return [], cursor
        msgs, self._partial = decode(self._partial + data, self.key)
        if len(self._partial) > MAX_LINE:  # (no message is that long: its bytes are skipped, said as forged)
            msgs.append({"k": FORGED, "text": self._partial[:80].decode("utf-8", "replace"),
                         "why": f"a line longer than {MAX_LINE >> 20} MiB"})
            self._partial = b""
        self._at = fh.tell() - len(self._partial)
        return msgs, self._at

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def append_whole(fh, data: bytes, fsync: bool = False) -> None:
    """Append ``data`` to a file with one writer, or none of it: on a write error (disk
    full, quota) the part written is cut back, so that a reader never meets a torn line,
    and the :class:`OSError` goes on."""
    faults.at("write", fh, data)
    view = memoryview(data)
    try:
        while view:
            view = view[fh.write(view):]
        if fsync:
            faults.at("fsync")
            os.fsync(fh.fileno())
    except OSError:
        try:
            fh.truncate(fh.seek(0, os.SEEK_END) - (len(data) - len(view)))
        except OSError:
            pass
        raise


class EngineSpool(Transport):
    """The engine's side of a pilot's spool: writes ``tasks.jsonl``, reads ``events.jsonl``.

    A batch is appended whole or not at all; the engine journals each assignment before
    sending it, so a batch lost to a full disk is handed back by a resumed engine
    (:meth:`sent` tells which tasks the pilot did get). ``key_in``/``key_out``: the keys
    of what the pilot sends and what the engine sends (none: nothing signed or checked)."""

    def __init__(self, directory: str | os.PathLike, key_in: bytes | None = None, key_out: bytes | None = None):
        self.dir = str(directory)
        self.where = os.path.join(self.dir, TASKS)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self._out = None  # (opened at the first send: a sealed pilot's is never made again)
        self._base = self._size = 0  # (the live tasks file's start in the whole, and its size)
        self._segment = segment_size()
        self._in = _Inbox(os.path.join(self.dir, EVENTS), key_in)
        self._read_part = 0  # (the start of the events part last read: a new one seals those behind)
        self._sealer: threading.Thread | None = None
        self._seal_lock = threading.Lock()
        self._again = False  # (asked while the seal's thread ran: it looks once more before it ends)
        self._closed = False  # (no seal's thread is started once closed)
        self.key_out = key_out

    def send(self, msgs: list[dict[str, Any]]) -> None:
        data = encode(msgs, self.key_out)
        try:
            if self._out is None:
                self._out = open_append(self.where)
                self._base, self._size = live_base(self.where), os.fstat(self._out.fileno()).st_size
            append_whole(self._out, data)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, self.where) from None
        self._size += len(data)
        if self._size >= self._segment:  # (rotated between two batches: a part holds whole lines)
            self._out.close()
            self._out = None  # (the next batch begins the new live file)
            try:
                rotate(self.where, self._base, self._size)
            except OSError:
                return  # (not rotated: tried again after the next batch; what was sent is sent)
            self.seal_behind()

    def receive(self, cursor: int) -> tuple[list[dict[str, Any]], int]:
        got = self._in.read(cursor)
        fh = self._in._fh
        if fh is not None and fh._base != self._read_part:  # (read into a new part: the one before is all read)
            self._read_part = fh._base
            self.seal_behind()
        return got

    def seal_behind(self) -> None:
        """Seal (gzip, in a thread) the rotated parts of this pilot's spool that nobody reads
        again: every rotated part of the tasks (the pilot reads on from its open file, or
        through the seal) and of the events those the engine has read past. One thread at a
        time: asked while it runs, it looks again before it ends (a part rotated just as it
        found nothing left is not left plain)."""
        if self._closed:
            return
        with self._seal_lock:
            if self._sealer is not None:
                self._again = True
                return
            if not self._behind():
                return
            sealer = self._sealer = threading.Thread(target=self._seal_all_behind, name=f"seal {self.dir}", daemon=True)
        sealer.start()

    def _behind(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for _, part in segments(self.where):
            size_of(part, sizes)
        for end, part in segments(self._in.path):
            if end <= self._read_part:
                size_of(part, sizes)
        return sizes

    def _seal_all_behind(self) -> None:
        """(The seal's thread.) Until none is left, and nobody asked again meanwhile; a disk
        that refuses ends it (left plain, readers take either; the pilot's last seal tries again)."""
        refused = False
        while True:
            with self._seal_lock:
                self._again = False
            try:
                sizes = self._behind()
                if sizes:
                    seal_files(sizes)
                    continue
            except OSError:
                refused = True
            with self._seal_lock:
                if refused or not self._again:
                    self._sealer = None
                    return

    def sent(self, among: set[tuple[str, int, int]] | None = None) -> Counter[tuple[str, int, int]]:
        """(node, member, attempt) of every task the pilot was sent, and how many times.
        ``among``: only whether these were sent (a resumed engine asks about the few it had
        queued): the file is read backwards from its end and only until all of them are
        found, not whole (a million members' tasks are hundreds of MB); one never sent
        costs a read of the whole file."""
        out: Counter[tuple[str, int, int]] = Counter()
        parts = segments(self.where)  # (rotated: each part, the newest first, until all are found)
        for path in [self.where] + [p for _, p in reversed(parts)]:
            try:
                fh = open_part(path, within=self.dir)
            except FileNotFoundError:
                continue  # (nothing was ever sent; the live file between a rotation and its next batch)
            with fh:
                _sent_in(fh, path, among, out)
            if among is not None and among <= out.keys():
                break
        return out

    def await_seal(self) -> None:
        sealer = self._sealer
        if sealer is not None:
            sealer.join()

    def close(self) -> None:
        """Close the spool's files; no seal's thread starts after this (one under way goes
        on: :meth:`await_seal`)."""
        if self._out is not None:
            self._out.close()
            self._out = None
        self._in.close()
        self._closed = True


def _sent_in(fh: Any, path: str, among: set | None, out: Counter) -> None:
    """Count the tasks of one spool file (part) opened for reading (see EngineSpool.sent)."""
    if among is None or isinstance(fh, Sealed):  # (sealed: read forwards, whole)
        for line in lines(fh, MAX_LINE, path):
            _count_task(line, out, among)
        return
    end, carry = fh.seek(0, os.SEEK_END), b""
    while end > 0 and not among <= out.keys():
        start = max(0, end - (1 << 20))
        fh.seek(start)
        block = (fh.read(end - start) + carry).split(b"\n")
        carry = block.pop(0) if start else b""  # (its start is in the block before)
        if len(carry) > MAX_LINE:
            raise Damaged(path, f"a line longer than {MAX_LINE} bytes")
        for line in block:
            _count_task(line, out, among)
        end = start


def _count_task(line: bytes, out: Counter, among: set | None) -> None:
    if not line.strip():
        return
    try:
        msg = json.loads(line)
        for t in msg["tasks"] if msg.get("k") == GROUP else (msg,):  # (a group: each of its tasks)
            if t.get("k") == TASK:
                key = (t["n"], t["m"], t["a"])
                if among is None or key in among:
                    out[key] += 1
    except (ValueError, KeyError, TypeError, AttributeError):
        pass  # (a damaged line: the pilot could not read it either)


class PilotSpool(Transport):
    """The pilot's side of its spool: writes ``events.jsonl``, reads ``tasks.jsonl``.

    A batch the disk refuses is held (what was written of it stays: the pilot is the
    only writer and finishes the line later) and sent first with the next batch. Past
    ``PWE_SPOOL_SEGMENT`` bytes its events file is rotated (see the module); the engine
    seals the parts it has read."""

    def __init__(self, directory: str, fsync: bool = False, key_out: bytes | None = None,
                 key_in: bytes | None = None):
        self.where = os.path.join(directory, EVENTS)
        self.fsync = fsync
        self._out = open_append(self.where)
        self._base, self._size = live_base(self.where), os.fstat(self._out.fileno()).st_size
        self._segment = segment_size()
        self._in = _Inbox(os.path.join(directory, TASKS), key_in)
        self.held = b""  # what the disk refused: sent before anything new
        self.key_out = key_out
        self.q = 0  # the sequence number of the last message framed

    def frame(self, msgs: list[dict[str, Any]]) -> bytes:
        """The bytes of a batch: each message numbered (``q``) and signed."""
        q = self.q
        for m in msgs:
            q += 1
            m["q"] = q
        self.q = q
        return encode(msgs, self.key_out)

    def send(self, msgs: list[dict[str, Any]]) -> None:
        self.write(self.frame(msgs))

    def write(self, data: bytes) -> None:
        """Append framed lines (after what the disk refused before)."""
        if self.held:
            data = self.held + data
        if not data:
            return
        view = memoryview(data)
        try:
            if self._out is None:  # (the live file a rotation could not make: made now)
                self._out = open_append(self.where)
            faults.at("write", self._out, data)
            while view:
                view = view[self._out.write(view):]
            if self.fsync:
                faults.at("fsync")
                os.fsync(self._out.fileno())
        except OSError:
            self._size += len(data) - len(view)
            self.held = bytes(view)
            raise
        self.held = b""
        self._size += len(data)
        if self._size >= self._segment:  # (rotated between two batches: a part holds whole lines)
            self._out.close()
            self._out = None
            try:
                self._base, self._size = rotate(self.where, self._base, self._size), 0
            except OSError:
                pass  # (not rotated: tried again after the next batch; what was sent is sent)
            try:
                self._out = open_append(self.where)
            except OSError:
                pass  # (no inode left, say: this batch is written; the next is held until the file can be made)

    def receive(self, cursor: int) -> tuple[list[dict[str, Any]], int]:
        return self._in.read(cursor)

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
        self._in.close()
