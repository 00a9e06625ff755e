"""A member's memory limit (``memoryPerMember``: a task's ``mem``, MB) enforced, by whoever
started the member (the pilot, a local spawner, a node agent: the same code). Standard
library only.

Where the node gives this process a memory cgroup it may write (cgroup v1: the memory
controller's directory of this process writable; cgroup v2: its own directory writable
and ``memory`` in its ``cgroup.subtree_control``, or enabled there now), each member with
a ``mem`` gets a cgroup of its own, ``<ours>/pwe-<pid>/c<N>``, with that limit
(v1 ``memory.limit_in_bytes``, and ``memory.memsw.limit_in_bytes`` where swap is
accounted; v2 ``memory.max``, ``memory.swap.max`` 0, ``memory.oom.group`` 1): the kernel
kills it at its limit. The member is moved there as soon as it is spawned (it has just
exec'd: nothing of it has forked yet). Its OOM kill is read from ``memory.oom_control``'s
``oom_kill`` (v1) or ``memory.events``' (v2) at each sweep (v1 kills one process: the rest
of the member's cgroup is killed then) and when it is reaped. A member's cgroup, once its
member is reaped, empty and with no OOM kill in it, is the next member's (its limit set
again where it differs; a member that exited 0 with nothing of its process group left
gives it on without a file of it read: a child of it killed for memory while it went on
to succeed is not its reason); else it is removed (processes it left behind moved up to ours
first, v1; killed, v2). Every one, and ``pwe-<pid>``, goes when the process that made
them leaves; a pilot killed with SIGKILL leaves its own, which the next one on that node
removes (:func:`pilot.cgroups.sweep_left`). The cgroups themselves are :mod:`pilot.cgroups`'s.

Elsewhere (no such cgroup, or one a member's cannot be made in, or ``PWE_NO_CGROUPS``),
the member's process tree is watched: every :data:`EVERY` seconds, in the loop of the
process that started it (one sweep over the members that have a ``mem``; no thread), the
resident memory (``statm``) of the member and its descendants (``/proc/PID/task/PID/
children``) is added up, with the trees of what it started that left its tree (a
double fork: ``setsid``, fork, the parent exits, the child re-parented to init or a
subreaper, in a session of its own): those are found by the marker every member's
processes inherit in their environment (``PWE_RUN_ID``, ``PWE_NODE``, ``PWE_MEMBER``,
``PWE_ATTEMPT``, read from ``/proc/PID/environ``: :class:`Strays`; each process of the user
read once, when it is first listed: bench/memwatch.py measures the sweep). Over its limit,
the tree, its process group and those strays with their trees are killed (SIGKILL).
Still not counted: a process that left the tree and replaced its environment (``env -i``,
an ``exec`` with a new one) before a sweep saw it; descendants that a thread other than a
process's first forked (``children`` lists a thread's own); what a member left running
after it was reaped (its limit goes with it). The cgroup counts everything.

Either way the member ends with reason ``oom`` (pilot/wire.py) and a ``why`` saying what
it used against what it asked ("used 812 MB of its memoryPerMember 512 MB"). Members
without a ``mem`` cost nothing here.
"""

from __future__ import annotations

import errno
import os
import signal

from .cgroups import Cgroups, find_cgroups, sweep_left
from .members import say
from .settings import NO_CGROUPS

#: Seconds between two sweeps over the watched members' memory.
EVERY = 0.5
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024 if hasattr(os, "sysconf") else 4


def tree_kb(pid: int) -> tuple[int, list[int]]:
    """Resident KB of a process and its descendants, and their pids (those gone meanwhile
    count nothing)."""
    total, seen, todo = 0, [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * _PAGE_KB
            with open(f"/proc/{p}/task/{p}/children", "rb") as fh:
                todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError, IndexError):
            continue
        seen.append(p)
    return total, seen


#: the variables whose values, together, say which member attempt a process is of
_MARK = (b"\0PWE_RUN_ID=", b"\0PWE_NODE=", b"\0PWE_MEMBER=", b"\0PWE_ATTEMPT=")
#: the most of a process's environment read for the marker (a member's is a few KB)
_ENV_MOST = 1 << 20


def marker(pid: int) -> bytes | None:
    """The member attempt that process ``pid`` is of, from the environment it started with
    (:data:`_MARK`'s four values); None when it has none of them (not a member's, gone, or
    not ours to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = b"\0" + fh.read(_ENV_MOST)
    except OSError:
        return None
    if _MARK[0] not in env:  # (most processes: one look)
        return None
    out = []
    for name in _MARK:
        at = env.find(name)
        if at < 0:
            return None
        at += len(name)
        end = env.find(b"\0", at)
        out.append(env[at:end if end >= 0 else len(env)])
    return b"\0".join(out)


class Strays:
    """The processes of this machine that carry a watched member's marker (:func:`marker`):
    those that left its tree are found here. Each pid's environment is read once, when it
    is first listed in ``/proc`` (a pid gone from one listing is forgotten: one that comes
    back is read again). A pid found outside its member's tree is read again before it is
    counted or killed (:func:`_with_strays`: one reused between two listings is not taken
    for the member's); one of no member's reused between two listings by a member's stray
    is missed until it is listed anew."""

    def __init__(self) -> None:
        self.known: dict[int, bytes | None] = {}

    def find(self, wanted: dict[bytes, int]) -> dict[int, list[int]]:
        """key -> pids of every process carrying the marker ``wanted`` maps to that key."""
        try:
            listing = os.listdir("/proc")
        except OSError:
            return {}
        known, seen = self.known, {}
        out: dict[int, list[int]] = {}
        for name in listing:
            if not name.isdigit():
                continue
            pid = int(name)
            mark = known[pid] if pid in known else marker(pid)
            seen[pid] = mark
            if mark is not None and mark in wanted:
                out.setdefault(wanted[mark], []).append(pid)
        self.known = seen
        return out


def _with_strays(kb: int, pids: list[int], strays: list[int], mark: bytes | None) -> tuple[int, list[int]]:
    """A member's tree (``kb``, ``pids``) with the trees of its processes found outside it
    (each read again: still of the member whose marker is ``mark``)."""
    inside = set(pids)
    for stray in strays:
        if stray not in inside and marker(stray) == mark:
            more, under = tree_kb(stray)
            fresh = [p for p in under if p not in inside]
            if len(fresh) == len(under):
                kb += more
            else:  # (a tree that overlaps what is counted: each of its processes once)
                kb += sum(tree_kb_one(p) for p in fresh)
            inside.update(fresh)
            pids = pids + fresh
    return kb, pids


def tree_kb_one(pid: int) -> int:
    """Resident KB of one process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_KB
    except (OSError, ValueError, IndexError):
        return 0


class MemoryWatch:
    """The members (by key) whose memory is limited, in cgroups or watched; :meth:`sweep`
    every :data:`EVERY` s while any is; :meth:`ended` when one is reaped."""

    def __init__(self) -> None:
        self.cgroups: Cgroups | None = None
        self._looked = False
        self.make_new = True  # (False once a member's cgroup could not be made)
        self.limits: dict[int, tuple[int, int, str | None]] = {}  # key -> (pid, MB, its cgroup or None: watched)
        self.over: dict[int, str] = {}  # key -> why, for those killed for memory
        self.stuck: list[str] = []  # members' cgroups that would not go yet
        self.due = 0.0
        self.marks: dict[int, bytes | None] = {}  # key -> the marker of a watched member (its first sweep)
        self.strays = Strays()

    def attach(self, key: int, pid: int, mb: int, watch: bool = False) -> None:
        """A member just spawned that may use ``mb`` MB: into a cgroup of its own, else watched.
        ``watch``: watched whatever the node gives (a warm worker's call, pilot/pyworkers.py:
        the process outlives the member, so it is moved into no member's cgroup)."""
        if watch:
            self.limits[key] = (pid, mb, None)
            return
        if not self._looked:
            self._looked = True
            try:
                watch_only = NO_CGROUPS.get()
            except ValueError as exc:  # (a node agent's node, whose environment the pilot did not check)
                say(f"{exc}; taken as unset")
                watch_only = False
            if not watch_only:
                self.cgroups = find_cgroups()
                if self.cgroups is not None:
                    for left in sweep_left(self.cgroups):
                        say(f"removed {left}, left by a process of pwe that is gone")
            say(f"memoryPerMember: each member in a cgroup of its own under {self.cgroups.base}"
                if self.cgroups is not None else
                f"memoryPerMember: no memory cgroup to use here; members' memory is looked at every {EVERY:g} s")
        path = None
        if self.cgroups is not None and self.make_new:
            try:
                path = self.cgroups.make(pid, mb)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOSPC):
                    say(f"memoryPerMember: cannot make a cgroup under {self.cgroups.base} ({exc.strerror}); "
                        "members' memory is looked at instead")
                    self.make_new = False  # (none can be made here: every member is watched from now)
        self.limits[key] = (pid, mb, path)

    def sweep(self, now: float) -> list[tuple[int, str]]:
        """One look at every limited member, at most every :data:`EVERY` s: (key, why) of those
        found over their limit now (killed, SIGKILL: their process group and tree)."""
        if now < self.due or not self.limits:
            return []
        self.due = now + EVERY
        out = []
        strays = self._strays()
        for key, (pid, mb, path) in self.limits.items():
            if key in self.over:
                continue
            if path is not None:
                if self.cgroups is not None and self.cgroups.oom_kills(path):
                    self.cgroups.kill_all(path)  # (v1 killed one of its processes: the member goes whole)
                    self.over[key] = self._why(mb, mb)  # (what it held when the kernel stopped it)
                    out.append((key, self.over[key]))
                continue
            kb, pids = tree_kb(pid)
            gone = strays.get(key, ())
            if gone:
                kb, pids = _with_strays(kb, pids, gone, self.marks.get(key))
            if kb > mb * 1024:
                for p in [pid] + pids:
                    try:
                        (os.killpg if p == pid or p in gone else os.kill)(p, signal.SIGKILL)
                    except OSError:
                        try:
                            os.kill(p, signal.SIGKILL)  # (a stray that leads no process group)
                        except OSError:
                            pass
                self.over[key] = self._why(mb, kb // 1024)
                out.append((key, self.over[key]))
        if self.stuck:
            self.stuck = [p for p in self.stuck if self.cgroups is None or not self.cgroups.remove(p)]
        return out

    def _strays(self) -> dict[int, list[int]]:
        """key -> the processes carrying a watched member's marker (:class:`Strays`): those
        outside its tree are counted with it. A member's marker is read at its first sweep
        (it has exec'd: its environment is its own)."""
        wanted = {}
        for key, (pid, _, path) in self.limits.items():
            if path is None and key not in self.over:
                if key not in self.marks:
                    self.marks[key] = marker(pid)
                if self.marks[key] is not None:
                    wanted[self.marks[key]] = key
        return self.strays.find(wanted) if wanted else {}

    @staticmethod
    def _why(mb: int, used: int) -> str:
        return f"used {used} MB of its memoryPerMember {mb} MB"

    def ended(self, key: int, rss_kb: int | None = None, rc: int | None = None) -> str | None:
        """A limited member was reaped (``rc``: its exit status): why, when it was killed for
        memory (else None); its cgroup done with. Nothing to do (None) for a member that had
        no limit."""
        limit = self.limits.pop(key, None)
        if limit is None:
            return None
        self.marks.pop(key, None)
        why = self.over.pop(key, None)
        pid, mb, path = limit
        if path is not None and self.cgroups is not None and rc == 0 and why is None and self.cgroups.v2:
            # it succeeded, under cgroup v2's oom.group (an OOM kill takes the whole member,
            # so one that exited 0 had none); nothing of its process group left: the
            # cgroup is the next member's without reading a file of it (those reads, the
            # first after an exit, cost the kernel ~200 us: bench/memwatch.py). Under v1
            # the kernel kills one process (the program a shell ran), the shell may go on
            # to exit 0: the cgroup's count of OOM kills is read, so the member ends oom
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                self.cgroups.limit.pop(path, None)
                self.cgroups.free.append((path, mb))
                return None
            except OSError:
                pass
        if path is not None and self.cgroups is not None:
            oom = why is not None or self.cgroups.oom_kills(path) > 0
            if oom:
                if why is None:
                    self.cgroups.kill_all(path)
                # (its peak as its reaper measured it, at least the limit it was stopped at)
                why = self._why(mb, max(mb, (rss_kb or 0) // 1024))
            if not self.cgroups.done(path, oom):
                self.stuck.append(path)
        return why

    def next_in(self, now: float) -> float | None:
        """Seconds until the next sweep is due, or None when no member is limited."""
        return max(0.0, self.due - now) if self.limits else None

    def close(self) -> None:
        """Every member's cgroup that is left, then ours (the process that made them leaves)."""
        if self.cgroups is None:
            return
        for key in list(self.limits):
            self.ended(key)
        for path in self.stuck:
            self.cgroups.remove(path)
        self.cgroups.close()
