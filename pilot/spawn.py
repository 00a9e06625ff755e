"""Starting and reaping member processes: the one way members are spawned and collected,
on the pilot's own node and by a node agent on the others (standard library only).

A member runs in its node's directory, made once (:func:`open_node_dir`), or, where its
node asks (``directory: own``), in a directory of its own (:func:`make_member_dir`), made
before it starts and removed again when it has ended if it left nothing there
(:func:`tidy_member_dir`). It gets its own session (so a kill reaches everything it
started), stdin from /dev/null, and as its stdout and stderr the two capture files its
starter opened for it in node-local scratch (:mod:`pilot.streams`: read back when it has
been reaped, into the starter's output stream).
"""

from __future__ import annotations

import errno
import os
import shutil
from typing import Callable, Iterator

_STDIN = (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)


def file_actions(fds: tuple[int, int]) -> list[tuple]:
    """A member's fds: stdin from /dev/null, stdout and stderr the capture files ``fds``
    (:meth:`pilot.streams.StreamWriter.capture`), dup2'd onto 1 and 2."""
    return [_STDIN, (os.POSIX_SPAWN_DUP2, fds[0], 1), (os.POSIX_SPAWN_DUP2, fds[1], 2)]

#: A shell that sees these thinks sshd started it and reads ~/.bashrc (Debian's bash
#: does): members are not login sessions, and a slow or locked rc file would stall each.
SSH_SESSION_VARS = ("SSH_CLIENT", "SSH2_CLIENT", "SSH_CONNECTION", "SSH_TTY")


def member_base_env() -> dict[str, str]:
    """The environment every member starts from: ours, minus the ssh session's marks."""
    env = dict(os.environ)
    for k in SSH_SESSION_VARS:
        env.pop(k, None)
    return env


def environ(base: dict[str, str], own: dict[str, str | None]) -> dict[str, str]:
    """A member's (or worker's) environment: ``base`` with ``own`` over it, where a name
    whose value is None is taken out (a variable its node's ``module load`` unset:
    pilot/nodesetup.py). The one way each starter makes it (the pilot, a node agent, a
    spawner, a Python worker's pool)."""
    env = base.copy()
    for k, v in own.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


#: a spawn's errors that are its node's limit for now (of processes: a cgroup's pids.max,
#: ``ulimit -u``; of memory), not the member's: it goes back (pilot/endings.py refused_for_now)
REFUSED_FOR_NOW = (errno.EAGAIN, errno.ENOMEM)


def start_failure(exc: OSError) -> tuple[int, str]:
    """Exit status and reason for a member that could not be started, as a shell says it."""
    return (127 if exc.errno == errno.ENOENT else 126), f"cannot start: {exc.strerror or exc}"


class DirectoryError(OSError):
    """A member's directory cannot be made or written: the run's cause, not the member's
    (``filename``: the directory that refuses)."""


def make_member_dir(cwd: str) -> None:
    """Make a member's directory (and its shard) if missing, and check it takes files:
    :class:`DirectoryError` naming the directory that refuses (read-only, no permission,
    no space), before anything of the member starts."""
    try:
        try:
            os.mkdir(cwd)
            return  # (made just now: it takes files)
        except FileNotFoundError:  # the first member of its shard
            os.makedirs(cwd, exist_ok=True)
        except FileExistsError:  # a retry: is it still writable?
            pass
        if os.access(cwd, os.W_OK):
            return
        err: OSError = PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        if exc.errno in (errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP):  # its own path (too long, a file in
            return  # the way), no resume mends: its spawn fails on it, a failed member (not a back for ever)
        err = exc
    where = cwd
    while not os.path.isdir(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)  # the deepest directory there is: the one that refuses
    if err.errno == errno.EACCES and not writable(where):
        try:  # a read-only filesystem says so to access(), not to a directory that exists
            if os.statvfs(where).f_flag & os.ST_RDONLY:
                err = OSError(errno.EROFS, os.strerror(errno.EROFS))
        except OSError:
            pass
    raise DirectoryError(err.errno, err.strerror, where)


def open_node_dir(path: str) -> int:
    """The directory the members of a node without a directory of their own run in
    (``directory: shared``), made if missing and checked as :func:`make_member_dir` does,
    then opened: the pilot does this once per node and starts each member there by the
    descriptor (no lookup of the path on the run's file system per member; a member that
    swaps the path for a symbolic link, to /etc or another run, does not move the members
    after it). One that is a symbolic link already is refused: :class:`DirectoryError`,
    as is one that takes no files (the run's cause: it stops, to be resumed). One whose
    path cannot be a directory (too long, a file in the way) is the plain :class:`OSError`:
    no resume mends it, so its members fail (as :func:`make_member_dir`'s own do)."""
    make_member_dir(path)
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and os.path.islink(path)):
            raise DirectoryError(exc.errno, "a symbolic link, not a directory of the run", path) from None
        if exc.errno in (errno.ENAMETOOLONG, errno.ENOTDIR):
            raise
        raise DirectoryError(exc.errno, exc.strerror, path) from None


def tidy_member_dir(cwd: str) -> None:
    """After a member that ran in a directory of its own ended: its directory is removed
    when nothing is left in it (its shard stays; its stdout and stderr are in its
    starter's stream, :mod:`pilot.streams`; its outputs were read and removed already:
    pilot.members.collect). So a run keeps a member's directory only when it wrote
    something there: a million members that write nothing leave no million directories
    behind. One ``rmdir``, no ``stat``: on a parallel file system each is a round trip."""
    try:
        os.rmdir(cwd)
    except OSError:
        pass  # not empty: what it wrote stays


def writable(directory: str) -> bool:
    """Whether files can be made in ``directory`` now (permission, a read-only mount)."""
    return os.access(directory, os.W_OK)


class Spawner:
    """Spawns members; remembers where each program was found, per PATH."""

    def __init__(self) -> None:
        self._which: dict[tuple[str, str], str | None] = {}

    def resolve(self, name: str, path: str) -> str | None:
        """The program's full path, looked up once per PATH: a spawn that walks a long
        PATH fails one exec per directory before it finds /usr/bin/true."""
        if "/" in name:
            return name
        key = (name, path)
        if key not in self._which:
            self._which[key] = shutil.which(name, path=path)
        return self._which[key]

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, shell_cmd: str, fds: tuple[int, int],
              made: bool = False) -> int:
        """Start ``argv`` in ``cwd`` (made if missing, unless ``made``) with ``fds`` as its
        stdout and stderr; its pid. Raises OSError when it cannot start (not found, not
        executable).

        ``shell_cmd`` is what runs under ``bash -c`` when ``argv[0]`` is a script without a
        ``#!`` line, as a shell would run it.
        """
        if not made:
            make_member_dir(cwd)
        # posix_spawn (vfork underneath) costs a fraction of fork+exec from Python. It has no cwd argument: callers are
        # single-threaded, so stepping into the member's directory around it is safe (every
        # other path they use is absolute, so they never step back out).
        os.chdir(cwd)
        try:
            return self._spawn(self.resolve(argv[0], env.get("PATH", "")), argv, env, shell_cmd, file_actions(fds))
        except ValueError as exc:  # a NUL byte in an argument or the environment: this member's, not ours
            raise OSError(errno.EINVAL, str(exc)) from None

    @staticmethod
    def _spawn(exe: str | None, argv: list[str], env: dict[str, str], shell_cmd: str, actions: list) -> int:
        try:
            if exe:
                return os.posix_spawn(exe, argv, env, file_actions=actions, setsid=True)
            # not found on PATH: let exec report the error as the shell would
            return os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True)
        except OSError as exc:
            if exc.errno != errno.ENOEXEC or argv[0] == "bash":
                raise
            return os.posix_spawnp("bash", ["bash", "-c", shell_cmd], env, file_actions=actions, setsid=True)


def reaped(wanted: Callable[[], object],
           seen: Callable[[int, int], None] | None = None) -> Iterator[tuple[int, int, float, int]]:
    """(pid, exit status, cpu, rss) of each child that has ended, without waiting for
    more; a signal shows as its negative number. ``cpu`` is the user + system seconds of
    the child and the descendants it waited for, ``rss`` its peak resident set in KB (the
    rusage of ``wait4``: what the ``end`` message carries). ``wanted()`` is asked before
    each collection: children that are not members (ssh sessions to node agents, local
    spawners) are left to their owner once no member is left. ``seen(pid, status)`` is
    told of each before it is collected (pilot/guardian.py: so that its end is never
    known only to a process that can die with it)."""
    while wanted():
        if seen is not None:
            from .guardian import peek_exit

            over = peek_exit()
            if over is None:
                return
            seen(*over)
            try:
                pid, status, use = os.wait4(over[0], 0)  # (ended already: at once)
            except ChildProcessError:
                continue
        else:
            try:
                pid, status, use = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
        yield pid, os.waitstatus_to_exitcode(status), round(use.ru_utime + use.ru_stime, 3), use.ru_maxrss


def pid_alive(pid: int) -> bool:
    """Whether a process of this machine runs (a zombie does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def members_of(run_id: str) -> dict[int, tuple[str, str, str]]:
    """The processes of this machine that are members of the run ``run_id`` (or their
    children): pid -> (node, member index, attempt), from the environment each started
    with (``PWE_RUN_ID``, ``PWE_NODE``, ``PWE_MEMBER``, ``PWE_ATTEMPT``). Empty where
    there is no /proc. For the engine, which ends what a dead pilot left running."""
    want = f"PWE_RUN_ID={run_id}".encode()
    out: dict[int, tuple[str, str, str]] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if want not in env:
            continue
        found = dict(v.split(b"=", 1) for v in env if v.startswith((b"PWE_NODE=", b"PWE_MEMBER=", b"PWE_ATTEMPT=")))
        try:
            out[pid] = (found[b"PWE_NODE"].decode(), found[b"PWE_MEMBER"].decode(), found[b"PWE_ATTEMPT"].decode())
        except (KeyError, UnicodeDecodeError):
            continue
    return out
