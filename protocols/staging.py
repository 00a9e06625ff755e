"""Files to and from a login node whose file systems are not this machine's (a host with
``shared_fs: false``), over the SSH runner's one connection: SFTP for the bytes, one
batched command for the checks.

- **Never a half file in place.** A file is written to ``NAME.part`` beside its place and
  renamed into place only when all of it is there and its SHA-256 is the source's. A
  member (or a user) reading the real name reads a whole file or none.
- **Resumed, not re-sent.** A ``.part`` left by an interrupted transfer is continued from
  its end when its bytes are a prefix of the source (its size is at most the source's and
  the hash of that many bytes of the source is the hash of the ``.part``); otherwise it
  is started again. A file already in place with the source's hash is not sent at all,
  so staging a run a second time sends nothing.
- **Batched checks.** One remote command (``stat`` and ``sha256sum``, coreutils) sizes
  and hashes every file of a batch, and one the ``.part`` files after the transfer:
  never a round trip per file. Fetching lists a remote directory the same way (one
  ``find``), then hashes what it needs in batches.

Names are passed as argv (quoted by the runner), never pasted into a shell line. Standard
library plus the runner's SFTP client; nothing here knows what a run is.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from pwe.base.confine import inside, shown
from pwe.base.errors import StagingError

from .runner import CommandRunner, ContactError
from .ssh import sftp_makedirs

PART = ".part"
_CHUNK = 1 << 20           # bytes read from a local file per write
_BATCH = 256               # files per remote check command (well under ARG_MAX)
_CHECK_TIMEOUT = 600.0     # hashing a batch of large files takes a while
# sizes, then a separator, then hashes of the files given as arguments: two processes for
# the whole batch (not a few per file); missing ones are left out (their errors dropped),
# so the answer is what exists
_SIZES_AND_HASHES = ('stat -c "%s %n" -- "$@" 2>/dev/null; echo "--"; sha256sum -- "$@" 2>/dev/null; exit 0')
# every regular file under $0: size, mode, path relative to it, NUL-separated (any name)
_LIST = 'cd -- "$0" && find . -type f -printf "%s %m %P\\0"'


@dataclass
class Moved:
    """What one file cost: its size, where the transfer started (a resumed ``.part``: its
    length; else 0), the bytes sent now, and whether it was already in place (nothing sent)."""

    path: str
    size: int
    resumed_at: int = 0
    sent: int = 0
    skipped: bool = False


def sha256_of(path: Path | str, limit: int | None = None) -> str:
    """The SHA-256 of a local file (of its first ``limit`` bytes)."""
    h = hashlib.sha256()
    left = limit
    with open(path, "rb") as fh:
        while left is None or left > 0:
            block = fh.read(_CHUNK if left is None else min(_CHUNK, left))
            if not block:
                break
            h.update(block)
            if left is not None:
                left -= len(block)
    return h.hexdigest()


class Stager:
    """Moves files over one :class:`~protocols.ssh.SshRunner` (its SFTP client and its
    commands). ``on_file`` is told of each file once it is in place (a log line, a bar)."""

    def __init__(self, runner: CommandRunner, on_file: Callable[[Moved], None] | None = None):
        self.runner = runner
        self.on_file = on_file or (lambda moved: None)
        self._made: set[str] = set()  # remote directories known to be there (one check each)

    # -- to the host ------------------------------------------------------------------------
    def put(self, pairs: Iterable[tuple[Path, str]]) -> list[Moved]:
        """Send each local file to its remote path (absolute, or relative to the login
        directory). Returns what each cost; raises :class:`StagingError` for a file whose
        copy does not hash as the source does twice in a row."""
        pairs = list(pairs)
        done: list[Moved] = []
        for start in range(0, len(pairs), _BATCH):
            done += self._put_batch(pairs[start:start + _BATCH])
        return done

    def _put_batch(self, pairs: list[tuple[Path, str]]) -> list[Moved]:
        there = self.remote_sums([r for _, r in pairs] + [r + PART for _, r in pairs])
        sftp = self.runner.sftp()
        todo: list[tuple[Path, str, str, Moved]] = []
        moved = []
        for local, remote in pairs:
            size = os.stat(local).st_size
            digest = sha256_of(local)
            m = Moved(remote, size)
            moved.append(m)
            if there.get(remote, (None, None))[1] == digest:
                m.skipped = True
                self.on_file(m)
                continue
            part_size, part_sum = there.get(remote + PART, (None, None))
            if part_size is not None and 0 < part_size <= size and part_sum == sha256_of(local, part_size):
                m.resumed_at = part_size
            parent = posixpath.dirname(remote)
            if parent not in self._made:
                sftp_makedirs(sftp, parent)
                self._made.add(parent)
            m.sent = self._send(sftp, local, remote + PART, m.resumed_at)
            todo.append((local, remote, digest, m))
        if not todo:
            return moved
        arrived = self.remote_sums([r + PART for _, r, _, _ in todo])
        for local, remote, digest, m in todo:
            if arrived.get(remote + PART, (None, None))[1] != digest:
                # (a .part that was not what it seemed, or bytes changed on the way): once more, whole
                m.resumed_at = 0
                m.sent += self._send(sftp, local, remote + PART, 0)
                if self.remote_sums([remote + PART]).get(remote + PART, (None, None))[1] != digest:
                    raise StagingError(f"{local}: the copy at {remote} does not hash as the file does after "
                                       "two tries; is the file changing while it is sent?")
            sftp.chmod(remote + PART, os.stat(local).st_mode & 0o777)  # (a script staged stays runnable)
            sftp.posix_rename(remote + PART, remote)
            self.on_file(m)
        return moved

    @staticmethod
    def _send(sftp: Any, local: Path, part: str, offset: int) -> int:
        sent = 0
        with open(local, "rb") as src, sftp.open(part, "r+b" if offset else "wb", bufsize=_CHUNK) as dst:
            dst.set_pipelined(True)  # (no wait for each write's answer: the link's speed, not its latency)
            if offset:
                dst.truncate(offset)  # (a .part longer than what matched is cut back first)
                dst.seek(offset)
                src.seek(offset)
            while block := src.read(_CHUNK):
                dst.write(block)
                sent += len(block)
        return sent

    # -- from the host ----------------------------------------------------------------------
    def listing(self, directory: str) -> dict[str, tuple[int, int]]:
        """Every regular file under a remote directory: relative path -> (size, mode); {}
        when it does not exist."""
        res = self.runner.run(["sh", "-c", _LIST, directory], timeout=_CHECK_TIMEOUT)
        if res.status != 0 and not res.stdout:
            return {}
        out = {}
        for item in res.stdout.split("\0"):
            if item:
                size, _, rest = item.partition(" ")
                mode, _, rel = rest.partition(" ")
                if not (size.isdigit() and mode.isdigit() and set(mode) <= set("01234567") and rel):
                    raise StagingError(f"{directory}: the host's listing has an entry that is not 'SIZE MODE NAME': "
                                       f"{shown(item)}", res.command)
                out[rel] = (int(size), int(mode, 8))
        return out

    def get(self, into: Path, pairs: Iterable[tuple[str, str]], modes: dict[str, int] | None = None) -> list[Moved]:
        """Bring each remote file to its name under the local directory ``into``, as
        :meth:`put` sends: to ``.part``, resumed, checked against the remote hash, renamed
        into place; a local file that already hashes as the remote one is left as it is.
        ``pairs``: (remote path, local name relative to ``into``); every name (and its
        ``.part``) is confined to ``into`` (:func:`pwe.base.confine.inside`: no ``/`` first,
        no ``..``, no line break or NUL, no symlink out) before any file is fetched: a name
        that is not is :class:`~pwe.base.errors.Unconfined` and nothing is written.
        ``modes``: remote path -> permission bits to give the local copy (owner-only,
        whatever the remote's)."""
        placed = []
        what = f"a file to fetch from {getattr(self.runner, 'display', 'the host')} into {into}"
        for remote, name in pairs:
            local = inside(into, name, what)
            inside(into, f"{name}{PART}", what)
            placed.append((remote, local))
        done: list[Moved] = []
        for start in range(0, len(placed), _BATCH):
            done += self._get_batch(placed[start:start + _BATCH], into, modes or {})
        return done

    def _get_batch(self, pairs: list[tuple[str, Path]], into: Path, modes: dict[str, int]) -> list[Moved]:
        there = self.remote_sums([r for r, _ in pairs])
        sftp = self.runner.sftp()
        moved = []
        for remote, local in pairs:
            size, digest = there.get(remote, (None, None))
            if size is None:
                raise StagingError(f"{remote} is not there to fetch")
            m = Moved(str(local), size)
            moved.append(m)
            if local.is_file() and local.stat().st_size == size and sha256_of(local) == digest:
                m.skipped = True
                self.on_file(m)
                continue
            local.parent.mkdir(parents=True, exist_ok=True)
            # (checked again now its directories are made: one made meanwhile may be a symlink)
            inside(into, str(local.relative_to(into)), f"a file to fetch into {into}")
            part = local.with_name(local.name + PART)
            for attempt in (1, 2):
                have = part.stat().st_size if part.is_file() else 0
                m.resumed_at = have if 0 < have <= size and attempt == 1 else 0
                m.sent += self._fetch(sftp, remote, part, m.resumed_at, size)
                if sha256_of(part) == digest:
                    break
                if attempt == 2:
                    raise StagingError(f"{remote}: the copy at {local} does not hash as the remote file does "
                                       "after two tries; is it changing while it is fetched?")
            os.chmod(part, (modes.get(remote, 0o600) & 0o700) | 0o600)
            os.replace(part, local)
            self.on_file(m)
        return moved

    @staticmethod
    def _fetch(sftp: Any, remote: str, part: Path, offset: int, size: int) -> int:
        got = 0
        with sftp.open(remote, "rb", bufsize=_CHUNK) as src, open(part, "r+b" if offset else "wb") as dst:
            if offset:
                dst.truncate(offset)
                dst.seek(offset)
                src.seek(offset)
            src.prefetch(size)  # (reads ahead in parallel requests: the link's speed, not its latency)
            while block := src.read(_CHUNK):
                dst.write(block)
                got += len(block)
        return got

    # -- the checks -------------------------------------------------------------------------
    def remote_sums(self, paths: list[str]) -> dict[str, tuple[int, str]]:
        """path -> (size, sha256) for those of ``paths`` that are regular files on the
        host, in one command per batch."""
        out: dict[str, tuple[int, str]] = {}
        for start in range(0, len(paths), _BATCH):
            batch = paths[start:start + _BATCH]
            res = self.runner.run(["sh", "-c", _SIZES_AND_HASHES, "sh", *batch], timeout=_CHECK_TIMEOUT)
            if res.status != 0:
                raise ContactError(getattr(self.runner, "display", "the host"),
                                   f"could not check files there: {res.stderr.strip() or res.status}")
            sizes_text, _, sums_text = res.stdout.partition("--\n")
            sizes = {}
            for line in sizes_text.splitlines():
                size, _, path = line.partition(" ")
                if size.isdigit():  # (an answer that is not a size is no file there)
                    sizes[path] = int(size)
            for line in sums_text.splitlines():
                if line.startswith("\\"):  # sha256sum escapes a name holding \ or a newline
                    line = line[1:]
                    digest, _, path = line.partition("  ")
                    path = path.replace("\\n", "\n").replace("\\\\", "\\")
                else:
                    digest, _, path = line.partition("  ")
                if path in sizes:
                    out[path] = (sizes[path], digest)
        return out
