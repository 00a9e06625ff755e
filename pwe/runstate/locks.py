"""The locks on a run: :class:`EngineLock`, one engine per run (``engine.lock`` in the run
directory), and :class:`LiveLock`, one live run per workflow per workspace
(``WORKSPACE/.pwe/live/NAME.lock``). Each is an exclusive ``flock`` with its holder's record
inside (pid, host, since when; LiveLock's also the run), so that a run found taken is said
in one line naming who has it (:class:`RunTaken`).

The engine takes both (pwe.engine.loop); making a run asks LiveLock first (runs.py);
``pwe status``, ``pwe runs``, the service's supervisor, lending.py and ``pwe pilot`` ask
EngineLock who holds a run (:meth:`EngineLock.holder`), which never takes it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import stat
import time
from pathlib import Path
from typing import Any

from .rundir import first_missing, remove_empty, run_ref
from ..base.errors import InputError, PweError, RunTaken


class EngineLock:
    """One engine per run: an exclusive ``flock`` on ``engine.lock``, a file the run keeps,
    with the holder's record inside: its pid, host and since when (for ``pwe status`` and
    the words of :class:`RunTaken`, what a second engine, ``pwe resume`` or ``retry``
    says when it finds the run taken).

    The kernel drops the lock when its holder dies (kill -9 included), so there is no
    stale lock to take over and no check-then-take race: of two engines that try at
    once, exactly one gets it. The lock belongs to the open file, not the process, so
    asking who holds it (:meth:`holder`) never drops a lock this process holds. On NFS
    the Linux client turns ``flock`` into a lock the server keeps (NLM, NFSv4), so two
    engines on different hosts exclude each other as far as the server supports locks;
    a filesystem that refuses locks (Lustre mounted without ``flock``) is said so."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "engine.lock"
        self.held = False
        self._fd: int | None = None
        self.before: dict | None = None

    def holder(self) -> dict | None:
        """The record (pid, host, since) of the engine that holds the lock; None when none
        does. Asked the moment an engine takes the lock, it waits (at most :data:`SETTLE`)
        for that engine's record rather than name a holder that died before it."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO put there: never waited on)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                return None
        except OSError:
            return None
        try:
            deadline = time.monotonic() + self.SETTLE
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass  # held
                except OSError:
                    return None  # no locks on this filesystem: nobody can hold one
                else:
                    return None  # taken (and given back when fd closes): nobody held it
                info = _record(fd)
                if info and _live(info):
                    return info
                if time.monotonic() > deadline:
                    return info or {"pid": "?", "host": "?"}
                time.sleep(0.005)
        finally:
            os.close(fd)

    #: How long :meth:`acquire` keeps trying while the lock is busy but names no live holder:
    #: one that has just taken it and not yet written its record, or a reader asking who
    #: holds it (:meth:`holder`, a moment's shared lock) over a record a dead holder left.
    SETTLE = 1.0

    def acquire(self) -> None:
        """Take the run, atomically (``flock``), or raise :class:`RunTaken` saying who has
        it, from the holder's own record (pid, host, since when)."""
        try:
            # (no link followed, a FIFO never waited on: a lock file is a regular file of its own)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InputError(f"{self.path} is a symbolic link: remove it (a lock is a file of its own)") from None
            from .journal import cannot_write

            raise cannot_write(self.path, exc) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InputError(f"{self.path} is not a regular file: remove it (a lock is a file of its own)")
        deadline, pause = time.monotonic() + self.SETTLE, 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.before = _record(fd)  # (the last holder's record: LiveLock's previous run)
                break
            except BlockingIOError:
                info = _record(fd)
                if (info and _live(info)) or time.monotonic() > deadline:
                    os.close(fd)
                    raise RunTaken(self.taken(info or {})) from None
                time.sleep(pause)
                pause = min(2 * pause, 0.05)
            except OSError as exc:
                os.close(fd)
                raise NoLocks(f"cannot lock {self.path}: {exc.strerror}: the run directory must be on a filesystem "
                              "with file locks (Lustre: mounted with -o flock)") from None
        info = json.dumps(self.record()).encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, info, 0)
        except OSError:
            pass  # held all the same; status names no holder
        self._fd = fd
        self.held = True

    def record(self) -> dict:
        """What the holder writes into the lock: its pid, host and since when."""
        return {"pid": os.getpid(), "host": os.uname().nodename, "since": time.time()}

    def taken(self, info: dict) -> str:
        """The one line a command that found the run taken says: who holds it (its record:
        pid, host, since when) and what to do."""
        ref = run_ref(self.path.parent)
        return (f"{ref}: already taken by pid {info.get('pid', '?')} on {info.get('host', '?')} since "
                f"{_when(info.get('since'))}; `pwe status {ref}` shows it: wait for it to end, or stop it with "
                f"`pwe cancel {ref}`")

    def release(self) -> None:
        if self.held and self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)  # no holder named any more
            except OSError:
                pass  # (a read-only or full filesystem): the lock goes with the close all the same
            os.close(self._fd)
            self._fd = None
            self.held = False


class NoLocks(PweError):
    """The filesystem refuses ``flock`` (Lustre mounted without ``-o flock``)."""


class LiveLock(EngineLock):
    """One live run per workflow per workspace (issue 45): an exclusive ``flock`` on
    ``WORKSPACE/.pwe/live/NAME.lock``, held by the run's engine for its life (with
    :class:`EngineLock`'s guarantees: the kernel drops it with its holder, one of two
    takers wins), its record naming the run (id and directory). Two runs of one workflow
    writing one workspace would run every member twice and overwrite each other's
    products; as Snakemake and Nextflow do, the second is refused, in one line naming the
    live run (``--concurrent`` where a user means it). The lock lives in the workspace, the
    thing shared, so runs with other run roots or on other hosts of a shared filesystem
    see it. A workspace that takes no file (read-only) holds no lock: nothing to protect."""

    def __init__(self, workspace: str | Path, workflow: str, run_id: str = "", run_dir: Path | None = None):
        self.workspace = Path(workspace)
        self.path = self.workspace / ".pwe" / "live" / f"{workflow}.lock"
        self.workflow, self.run_id, self.run_dir = workflow, run_id, run_dir
        self.held = False
        self._fd = None
        self._top: Path | None = None  # (the first of the lock's directories it made: undo)
        self._made_file = False  # (the lock's file made by this taker: undo)
        self.before = None

    def record(self) -> dict:
        return {**super().record(), "run": self.run_id, "dir": str(self.run_dir or ""), "previous": self.previous}

    @property
    def previous(self) -> str | None:
        """The run that held the lock before this one and recorded what it inherited
        (pwe.engine.halfmade: a run killed before it wrote that is passed over, to its own
        previous); None for the first run of the workflow in the workspace."""
        before = self.before or {}
        last = before.get("dir")
        if isinstance(last, str) and last and (Path(last) / "inherited.json").is_file():
            return last
        prev = before.get("previous")
        return prev if isinstance(prev, str) and prev else None

    def taken(self, info: dict) -> str:
        run = str(info.get("run") or "?")
        where = str(info.get("dir") or "")
        ref = run_ref(Path(where)) if where else run
        return (f"workflow '{self.workflow}' has a live run in workspace {self.workspace}: {ref} (pid "
                f"{info.get('pid', '?')} on {info.get('host', '?')} since {_when(info.get('since'))}); two runs would "
                f"run every member twice and overwrite each other's products: wait for it, stop it with `pwe cancel "
                f"{ref}`, resume it with `pwe resume {ref}`, or give --concurrent (then give each its own --workspace)")

    def refuse_if_held(self) -> None:
        """Before a run is made: :class:`RunTaken` (one line, exit 2) when a live run holds
        it; :class:`InputError` when its place is not pwe's own (:meth:`check_place`)."""
        self.check_place()
        info = self.holder()
        if info is not None:
            raise RunTaken(self.taken(info))

    def check_place(self) -> None:
        """Where the lock goes is inside the workspace (no link out) and, if there, a regular
        file: else one line (nothing is opened, followed or written)."""
        inside = os.path.join(os.path.realpath(self.workspace), ".pwe", "live")
        if os.path.lexists(self.path.parent) and os.path.realpath(self.path.parent) != inside:
            raise InputError(f"{self.path.parent} leads out of the workspace (a link): remove it; pwe keeps its "
                             "live-run locks there")
        try:
            st = os.lstat(self.path)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{self.path} is not a regular file: remove it (a lock is a file of its own)")

    def acquire(self) -> None:
        """Take it, or raise :class:`RunTaken` naming the live run; nothing where the
        workspace takes no file."""
        self.check_place()
        self._made_file = not os.path.lexists(self.path)
        self._top = first_missing(self.path.parent) if not self.path.parent.exists() else None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # (a read-only workspace: no products written there, no lock)
        try:
            super().acquire()
        except NoLocks:
            return  # (a filesystem without locks: as EngineLock says, nobody can hold one)

    def release(self) -> None:
        """Given back with its record kept: it names the last run of the workflow in the
        workspace for the next (pwe.engine.halfmade); whether anyone holds the lock is the
        ``flock``'s to say, not the record's."""
        if self.held and self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self.held = False

    def undo(self) -> None:
        """A run refused before it began (it made nothing else either): the lock given back
        and, where this run made it, its file and directories removed (one made meanwhile by
        another run, or that another run holds now, stays)."""
        mine = self.held
        self.release()
        if not mine or not self._made_file:
            return
        try:
            self.path.unlink()
        except OSError:
            return
        if self._top is not None:  # (each directory made for it, while empty: never another's lock)
            remove_empty(self.path.parent, self._top)


def _when(since: Any) -> str:
    """A holder's ``since`` as a time of day (today) or a date and time; ``?`` for none."""
    if not isinstance(since, (int, float)) or not math.isfinite(since):
        return "?"
    try:
        today = time.strftime("%Y-%m-%d") == time.strftime("%Y-%m-%d", time.localtime(since))
        return time.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M:%S", time.localtime(since))
    except (OverflowError, OSError, ValueError):
        return "?"


def _record(fd: int) -> dict | None:
    """The holder's record in an open ``engine.lock`` (pid, host, since); None when it is
    empty or not whole yet."""
    try:
        info = json.loads(os.pread(fd, 4096, 0))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and "pid" in info else None


def _live(info: dict) -> bool:
    """Whether a holder's record names a live process (one of another host: trusted)."""
    if info.get("host") != os.uname().nodename:
        return True
    try:
        from pilot.spawn import pid_alive  # (the one way, the pilot's)

        return pid_alive(int(info["pid"]))
    except (TypeError, ValueError):
        return True
