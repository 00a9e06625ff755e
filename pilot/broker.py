"""The Redis transport: a pilot's events through a Redis stream, its tasks through the spool.

Why a stream (``XADD``/``XREAD``), not a list or pub/sub, nor kombu: a stream keeps what
was added until it is deleted, and a reader asks for "what came after entry ID": the ID
of the last entry read is a cursor the engine journals like the spool's byte offset, a
restarted engine reads on from it, and there is no consumer group, so no acknowledgement
in the broker, no visibility timeout and no redelivery to reason about. Pub/sub loses
what is sent while nobody listens; a list is consumed by reading it. kombu would bring
a dependency the pilot cannot have (``pilot/`` is standard library only) for one command
each way, so both ends use the small client here (:class:`Redis`: RESP2 over a socket,
``AUTH`` with the password, ``SELECT``).

One entry per batch (field ``b``: the batch's signed JSON lines, :mod:`pilot.wire`), one
stream per pilot (:func:`stream_for`: named from its channel key, so nobody without the
run's secret can guess it). Tasks (and the engine's ``ack``) stay in the spool's
``tasks.jsonl``: the engine's recovery from a damaged journal reads what each pilot was
sent from that file, and a pilot whose broker goes away still gets its tasks.

**Nothing is lost in a switch.** The pilot keeps every batch it added until the engine
acknowledges it (``ack`` ``q``, written to the tasks file once the engine's journal holds
the events). When the broker fails (at start, or a command that fails or times out) the
pilot writes what is not acknowledged, then everything after it, to its spool
(``events.jsonl``), and stays on the spool for the rest of its life. So it does too when
what is not acknowledged passes :data:`UNACKED_LIMIT` bytes (the engine has been away
that long): the disk keeps it then, not the pilot's memory. The engine reads
both, merges them by ``q`` and applies each ``q`` once (a batch that reached the broker
and the spool both is applied once). What the engine reads from the broker it also
appends to ``events.redis.jsonl`` in the pilot's directory (the run's record: a broker
is not one), before it applies it.

Why one module over 450 lines: the client, the pilot's side and the engine's side are the
two ends of one protocol (what is acknowledged, what goes to the spool and when, what the
engine archives), and its guarantee that nothing is lost in a switch is read across them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import socket
import time
from collections import deque
from typing import Any
from urllib.parse import unquote, urlsplit

from .members import say
from .transport import ARCHIVE, EVENTS, EngineSpool, PilotSpool, Transport, open_spool
from .wire import ACK, DOWN, decode



class BrokerError(OSError):
    """The broker refused a command (its ``-ERR`` line) or cannot be reached."""


def redact(url: str) -> str:
    """``url`` with its credentials replaced by ``***`` (``redis://:***@host/0``; a user
    name before ``:`` stays), whatever else is wrong with it: what error lines show."""
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url  # (no scheme: what comes before an '@' is still credentials)
    if "@" not in rest:
        return url
    cred, _, tail = rest.rpartition("@")
    user, colon, _ = cred.partition(":")
    return f"{head}{sep}{user + ':' if colon else ''}***@{tail}"


def parse_url(url: str, schemes: tuple[str, ...] = ("redis",)) -> tuple[str, int, int, str | None, str | None]:
    """(host, port, db, user, password) of ``redis://[user[:password]@]host[:port][/db]``;
    a :class:`ValueError` saying what is wrong and how to write one, which shows the URL
    without its password (:func:`redact`) and with any control character escaped."""
    def bad(what: str) -> ValueError:
        shown = redact(url)
        shown = repr(shown if len(shown) <= 80 else shown[:80]) + ("..." if len(shown) > 80 else "")
        return ValueError(f"{shown}: {what}; write {schemes[0]}://[:PASSWORD@]HOST[:PORT][/DB]")

    if not isinstance(url, str) or not url:
        raise bad("empty")
    if len(url) > 2048 or any(c.isspace() or not c.isprintable() for c in url):
        raise bad("longer than 2048 characters" if len(url) > 2048 else "a space or control character in it")
    u = urlsplit(url)
    if u.scheme not in schemes:
        raise bad(f"not a {' or '.join(s + '://' for s in schemes)} URL")
    if not u.hostname:
        raise bad("no host")
    try:
        port = 6379 if u.port is None else u.port
    except ValueError:  # (not a number, or past 65535)
        port = 0
    if not 1 <= port <= 65535:
        raise bad("the port is a number from 1 to 65535")
    db = u.path.strip("/") or "0"
    if not re.fullmatch(r"[0-9]{1,9}", db):
        raise bad("the database is a number (/0)")
    return (u.hostname, port, int(db), unquote(u.username) if u.username else None,
            unquote(u.password) if u.password else None)


def read_password(path: str) -> str:
    """The broker's password from an owner-only file (:class:`PermissionError` when
    others may read it)."""
    path = os.path.expanduser(path)
    fd = os.open(path, os.O_RDONLY)
    with os.fdopen(fd) as fh:
        if os.fstat(fd).st_mode & 0o077:
            raise PermissionError(f"{path} may be read by others: make it owner-only (chmod 600)")
        return fh.read().strip()


def stream_for(key: bytes | None, directory: str) -> str:
    """The stream of one pilot's events: named from its channel key (or, unsigned, its
    directory)."""
    if key is None:
        return "pwe:ev:" + hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:24]
    return "pwe:ev:" + hmac.digest(key, b"stream", "sha256").hex()[:24]


class Redis:
    """A Redis connection that speaks just enough RESP2 for the bus: one command at a time,
    replies parsed (bulk strings stay bytes). Any failure is an :class:`OSError`.

    :meth:`send` is :meth:`call` without waiting for the reply, which the next command
    reads first: at most one reply is ever outstanding. So a command whose bytes are in the
    socket when the process dies still reaches the broker (a closed socket with nothing
    unread sends what it holds, then its FIN; one with a reply unread is reset, but a reply
    there means the broker had the command)."""

    def __init__(self, url: str, password: str | None = None, timeout: float = 5.0):
        host, port, db, user, url_password = parse_url(url)
        password = password if password is not None else url_password
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = self.sock.makefile("rb")
        try:
            if password:
                self.call("AUTH", *([user] if user else []), password)
            if db:
                self.call("SELECT", db)
        except OSError:
            self.close()
            raise

    pending = False  # a command sent whose reply is not read yet (send)

    def call(self, *args: Any) -> Any:
        """Send a command and return its reply (the reply of a :meth:`send` before it read first)."""
        self.send(*args)
        return self._answer()

    def send(self, *args: Any) -> None:
        """Send a command; its reply is read by the next command (or :meth:`settle`), and an
        error in it raised there."""
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.settle()
        try:
            self.sock.sendall(b"".join(out))
        except OSError as exc:
            raise BrokerError(f"the broker did not answer: {exc}") from None
        self.pending = True

    def settle(self) -> None:
        """Read the reply of the command sent last, if it is not read yet (BrokerError if it
        says the command failed)."""
        if self.pending:
            self._answer()

    def _answer(self) -> Any:
        self.pending = False
        try:
            return self._reply()
        except (OSError, ValueError) as exc:  # (ValueError: a reply that is not RESP)
            if isinstance(exc, BrokerError):
                raise
            raise BrokerError(f"the broker did not answer: {exc}") from None

    def _reply(self) -> Any:
        line = self.rfile.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by the broker")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise BrokerError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rfile.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed by the broker")
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ValueError(f"not a RESP reply: {line[:40]!r}")

    def close(self) -> None:
        try:
            self.rfile.close()
            self.sock.close()
        except OSError:
            pass


#: The most bytes of batches a pilot keeps unacknowledged in memory (about 150,000 events)
#: before it leaves the broker for its spool.
UNACKED_LIMIT = 32 * 1024 * 1024


class PilotRedis(Transport):
    """The pilot's side: events to its stream while the broker answers, then to the spool
    (see the module's docstring); tasks from the spool, whose ``ack`` messages it keeps
    to itself."""

    def __init__(self, directory: str, url: str, password: str | None, fsync: bool = False,
                 key_out: bytes | None = None, key_in: bytes | None = None, timeout: float = 5.0):
        self.spool = PilotSpool(directory, fsync, key_out, key_in)
        self.stream = stream_for(key_out, directory)
        self.where = f"{url.split('@')[-1]} stream {self.stream}"
        self.unacked: deque[tuple[int, bytes]] = deque()  # (the batch's last q, its lines)
        self.unacked_bytes = 0
        self.broker: Redis | None = None
        try:
            self.broker = Redis(url, password, timeout)
        except OSError as exc:
            self._fall_back(f"cannot reach the broker: {exc}")

    @property
    def held(self) -> bytes:
        return self.spool.held

    def _fall_back(self, why: str) -> bytes:
        """Leave the broker for good; the batches it may not have kept, to go first."""
        say(f"events go to the spool ({self.spool.where}) from now on: {why}")
        if self.broker is not None:
            self.broker.close()
            self.broker = None
        self.where = self.spool.where
        data = b"".join(d for _, d in self.unacked)
        self.unacked.clear()
        self.unacked_bytes = 0
        return data

    def send(self, msgs: list[dict[str, Any]]) -> None:
        data = self.spool.frame(msgs)
        if not data and not self.held:
            return
        if self.broker is not None and not self.held:
            try:
                if data:
                    # (its reply is read before the next command: a member's start is in the
                    # socket before the member is spawned, and the round trip overlaps the
                    # spawn instead of coming before it: Redis.send)
                    self.broker.send("XADD", self.stream, "*", "b", data)
                    self.unacked.append((self.spool.q, data))
                    self.unacked_bytes += len(data)
                    data = b""  # (kept among the unacknowledged from here on)
                    if any(m["k"] == DOWN for m in msgs):  # its last: the stream goes in a week if nobody reads it
                        self.broker.call("EXPIRE", self.stream, 7 * 86400)
                if self.unacked_bytes <= UNACKED_LIMIT:
                    return
                why = (f"{self.unacked_bytes} bytes of events the engine has not acknowledged: "
                       "kept on disk, not in memory")
            except OSError as exc:
                why = str(exc)
            data = self._fall_back(why) + data
        self.spool.write(data)  # (what the disk refuses is held by the spool: sent first next time)

    def receive(self, cursor: int) -> tuple[list[dict[str, Any]], int]:
        msgs, cursor = self.spool.receive(cursor)
        if any(m.get("k") == ACK for m in msgs):
            for m in msgs:
                if m.get("k") == ACK and type(m.get("q")) is int:
                    while self.unacked and self.unacked[0][0] <= m["q"]:
                        self.unacked_bytes -= len(self.unacked.popleft()[1])
            msgs = [m for m in msgs if m.get("k") != ACK]
        return msgs, cursor

    def close(self) -> None:
        if self.broker is not None:
            self.broker.close()
        self.spool.close()


class Broker:
    """The engine's connection to one broker, shared by the transports of its pilots. A
    connection that fails is dropped; the next read after ``retry`` s connects again
    (nothing on the broker's side remembers a reader: each read names the entry it
    reads after). ``notes``: what the engine should journal (lost, back)."""

    def __init__(self, url: str, password: str | None, retry: float = 2.0, timeout: float = 5.0):
        self.url, self.password, self.retry, self.timeout = url, password, retry, timeout
        self.conn: Redis | None = None
        self.retry_at = 0.0
        self.down_since: float | None = None
        self.notes: list[str] = []
        self.name = url.split("@")[-1]
        # what wait() read, per stream (entries after the id it read after): read() takes it
        # without asking again, so a wake-up costs one round trip, not two
        self._waited: dict[str, tuple[str, list[tuple[str, bytes]]]] = {}

    def _conn(self) -> Redis | None:
        if self.conn is None and time.time() >= self.retry_at:
            try:
                self.conn = Redis(self.url, self.password, self.timeout)
            except OSError as exc:
                self._lost(exc)
                return None
            if self.down_since is not None:
                self.notes.append(f"the broker {self.name} answers again, after {time.time() - self.down_since:.0f} s")
                self.down_since = None
        return self.conn

    def _lost(self, exc: BaseException) -> None:
        self._waited.clear()
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        # tried again after 2, 4, 8... s, at most a minute apart: a broker that hangs costs
        # the engine a timeout per try, not one per round
        waited = time.time() - self.down_since if self.down_since is not None else 0.0
        self.retry_at = time.time() + min(60.0, max(self.retry, waited))
        if self.down_since is None:
            self.down_since = time.time()
            self.notes.append(f"the broker {self.name} does not answer ({exc}); its pilots' events are read from "
                              "their spools meanwhile")

    def read(self, stream: str, after: str, count: int = 1000) -> list[tuple[str, bytes]]:
        """The entries of a stream after entry ``after``: (id, batch); [] while the broker
        does not answer. What :meth:`wait` read of it after that same entry is taken first,
        without asking the broker again unless it was a whole ``count``."""
        waited = self._waited.pop(stream, None)
        if waited is not None and waited[0] == after and waited[1]:
            if len(waited[1]) < count:
                return waited[1]
        conn = self._conn()
        if conn is None:
            return []
        try:
            reply = conn.call("XREAD", "COUNT", count, "STREAMS", stream, after)
        except OSError as exc:
            self._lost(exc)
            return []
        return _entries(reply[0][1]) if reply else []

    def wait(self, streams: dict[str, str], timeout: float, count: int = 1000) -> bool:
        """Block until one of ``streams`` ({stream: the last entry read}) has an entry
        after it, or ``timeout`` s; False (at once) when the broker does not answer. What it
        read (up to ``count`` entries a stream) is kept for :meth:`read`."""
        conn = self._conn()
        if conn is None:
            return False
        self._waited.clear()
        try:
            reply = conn.call("XREAD", "COUNT", count, "BLOCK", max(1, round(timeout * 1000)), "STREAMS", *streams,
                              *streams.values())
        except OSError as exc:
            self._lost(exc)
            return False
        for name, entries in reply or ():
            stream = name.decode()
            if stream in streams:
                self._waited[stream] = (streams[stream], _entries(entries))
        return True

    def call(self, stream: str, command: str, *args: Any) -> None:
        """A command on a stream whose answer does not matter (trim, expire, delete)."""
        conn = self._conn()
        if conn is not None:
            try:
                conn.call(command, stream, *args)
            except OSError as exc:
                self._lost(exc)

    def delete(self, stream: str) -> None:
        self.call(stream, "DEL")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _entries(raw: list) -> list[tuple[str, bytes]]:
    """XREAD's entries of one stream as (id, batch)."""
    out = []
    for eid, fields in raw:
        f = dict(zip(fields[::2], fields[1::2]))
        out.append((eid.decode(), f.get(b"b", b"")))
    return out


def _last_q(batch: bytes) -> int:
    """The sequence number of a batch's last line (0 when it has none)."""
    i = batch.rstrip(b"\n").rfind(b'"q":')
    if i < 0:
        return 0
    digits = batch[i + 4:i + 24].split(b",")[0].split(b"}")[0]
    return int(digits) if digits.isdigit() else 0


class EngineRedis(Transport):
    """The engine's side: tasks to the spool; a pilot's events from its stream and its
    spool both, merged by ``q``. The cursor is ``[spool offset, last entry id]``; a cursor
    of 0 (the start: a new pilot, or recovery reading everything again) also reads back
    what was archived from the broker before (it may be gone). Messages read from the
    broker carry ``via: "redis"`` (engine-side only: where each came from)."""

    acks = True  # the pilot keeps what it added until acknowledged (Transport.acks)

    def __init__(self, directory: str, broker: Broker, key_in: bytes | None = None, key_out: bytes | None = None):
        self.spool = EngineSpool(directory, key_in, key_out)
        self.dir = self.spool.dir
        self.where = self.spool.where
        self.broker = broker
        self.key_in = key_in
        self.stream = stream_for(key_in, self.dir)
        self._archive = None  # (opened at the first entry read: a sealed pilot's is never made again)
        self._after = "0-0"  # the last entry read
        self._untrimmed = 0  # entries read since the stream was last trimmed

    def send(self, msgs: list[dict[str, Any]]) -> None:
        self.spool.send(msgs)

    def sent(self, among=None):
        return self.spool.sent(among)  # (tasks travel by the spool whatever carries events)

    def receive(self, cursor: Any) -> tuple[list[dict[str, Any]], Any]:
        if isinstance(cursor, list) and len(cursor) == 2:
            off, after = cursor
        else:  # 0, or an offset journaled by an engine that read this pilot's spool only
            off, after = cursor or 0, "0-0"
        msgs, off = self.spool.receive(off)
        kept = 0  # the last q archived already (read again from the start: not archived twice)
        if not cursor:
            try:
                with open_spool(os.path.join(self.dir, ARCHIVE)) as fh:
                    old = decode(fh.read(), self.key_in)[0]
            except FileNotFoundError:
                old = []
            for m in old:
                m["via"] = "redis"
                if type(m.get("q")) is int:
                    kept = max(kept, m["q"])
            msgs += old
        entries = self.broker.read(self.stream, after)
        if entries:
            data = b"".join(b for _, b in entries if not kept or _last_q(b) > kept)
            # the run's record of it first: a broker is not one
            from .transport import append_whole

            if self._archive is None:
                from .bounded import open_append

                self._archive = open_append(os.path.join(self.dir, ARCHIVE))
            append_whole(self._archive, data)
            got = decode(b"".join(b for _, b in entries), self.key_in)[0]
            for m in got:
                m["via"] = "redis"
            msgs += got
            after = self._after = entries[-1][0]
            self._untrimmed += len(entries)
        if msgs and (entries or not cursor):
            msgs.sort(key=lambda m: m.get("q") if type(m.get("q")) is int else 0)
        return msgs, [off, after]

    def wait_on(self, cursor: Any) -> tuple[Any, str, str] | None:
        """The broker and this pilot's stream, after the last entry read (Transport.wait_on)."""
        return (self.broker, self.stream, cursor[1]) if isinstance(cursor, list) else None

    def trim(self, every: int = 256) -> None:
        """(Called once the journal holds what was read.) The broker forgets the entries
        read, now and then, and the stream of a run left behind expires in a week."""
        if self._untrimmed >= every:
            self._untrimmed = 0
            self.broker.call(self.stream, "XTRIM", "MINID", self._after)
            self.broker.call(self.stream, "EXPIRE", 7 * 86400)

    def forget(self) -> None:
        """The pilot is gone and everything it said is journaled: its stream goes."""
        self.broker.delete(self.stream)

    def await_seal(self) -> None:
        self.spool.await_seal()

    def close(self) -> None:
        self.spool.close()
        if self._archive is not None:
            self._archive.close()
            self._archive = None


__all__ = ["ARCHIVE", "EVENTS", "Broker", "BrokerError", "EngineRedis", "PilotRedis", "Redis", "parse_url",
           "read_password", "redact", "stream_for"]
