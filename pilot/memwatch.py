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
removes (:func:`sweep_left`).

Elsewhere (no such cgroup, or one a member's cannot be made in, or ``PWE_NO_CGROUPS``),
the member's process tree is watched: every :data:`EVERY` seconds, in the loop of the
process that started it (one sweep over the members that have a ``mem``; no thread), the
resident memory (``statm``) of the member and its descendants (``/proc/PID/task/PID/
children``) is added up; over its limit, the tree and its process group are killed
(SIGKILL). Descendants that left the tree (a daemon re-parented to init) or that a
thread other than a process's first forked are not counted: the cgroup counts everything.

Either way the member ends with reason ``oom`` (pilot/wire.py) and a ``why`` saying what
it used against what it asked ("used 812 MB of its memoryPerMember 512 MB"). Members
without a ``mem`` cost nothing here.
"""

from __future__ import annotations

import errno
import os
import signal

from .members import say
from .settings import NO_CGROUPS

#: Seconds between two sweeps over the watched members' memory.
EVERY = 0.5
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024 if hasattr(os, "sysconf") else 4
_MB = 1 << 20


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _counter(text: str, name: str) -> int | None:
    """``name N`` in a flat-keyed cgroup file (memory.events, memory.oom_control)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    return None


class Cgroups:
    """This process's memory cgroup and the directory its members' cgroups go in. A
    member's cgroup is used again by a later member once it is empty and no process in it
    was killed for memory (a mkdir and an rmdir cost the kernel more than the rest of a
    member's enforcement together: bench/memwatch.py)."""

    def __init__(self, own: str, v2: bool):
        self.own, self.v2 = own, v2
        self.base = os.path.join(own, f"pwe-{os.getpid()}")
        self.made = False  # (base made at the first member)
        self.free: list[tuple[str, int]] = []  # (an empty member cgroup, its limit in MB), to be used again
        self.limit: dict[str, int] = {}  # each member cgroup in use -> its limit in MB
        self.memsw: bool | None = None  # (v1) whether swap is accounted: limited too
        self._n = 0

    def make(self, pid: int, mb: int) -> str:
        """A cgroup for one member limited to ``mb`` MB (an empty one used again, or a new
        one), the member in it; its path. OSError when it cannot be made (nothing is left
        behind)."""
        if self.free:
            path, had = self.free.pop()
            try:
                if had != mb:
                    self._set(path, mb, had)
                    had = mb
                _join(path, pid)
                self.limit[path] = mb
                return path
            except OSError as exc:
                if exc.errno == errno.ESRCH:  # the member has ended already: the cgroup is the next one's
                    self.free.append((path, had))
                    raise
                _rmdir(path)  # (and a new one)
        if not self.made:
            try:
                os.mkdir(self.base)
            except FileExistsError:
                pass
            self.made = True
        self._n += 1
        path = os.path.join(self.base, f"c{self._n}")
        os.mkdir(path)
        try:
            if self.v2:
                for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                    try:
                        _write(os.path.join(path, name), value)
                    except OSError:
                        pass  # (no swap controller; a kernel before 4.19)
            self._set(path, mb, None)
            _join(path, pid)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                self.free.append((path, mb))
            else:
                _rmdir(path)
            raise
        self.limit[path] = mb
        return path

    def _set(self, path: str, mb: int, had: int | None) -> None:
        """Its limit: ``mb`` MB (``had``: what it was; v1 keeps memsw at or above the limit)."""
        limit = str(mb * _MB)
        if self.v2:
            _write(os.path.join(path, "memory.max"), limit)
            return
        order = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
        if had is not None and mb > had:
            order.reverse()
        for name in order:
            if name.startswith("memory.memsw"):
                if self.memsw is False:
                    continue
                try:  # (swap accounted: no swapping past the limit either)
                    _write(os.path.join(path, name), limit)
                    self.memsw = True
                except OSError:
                    if self.memsw:
                        raise
                    self.memsw = False
                continue
            _write(os.path.join(path, name), limit)

    def oom_kills(self, path: str) -> int:
        """How many processes the kernel killed in this cgroup for its limit (0 when unsaid)."""
        try:
            if self.v2:
                return _counter(_read(os.path.join(path, "memory.events")), "oom_kill") or 0
            text = _read(os.path.join(path, "memory.oom_control"))
            kills = _counter(text, "oom_kill")
            if kills is None:  # (a kernel before 4.13: the limit was hit and it is under OOM)
                return _counter(text, "under_oom") or 0
            return kills
        except (OSError, ValueError):
            return 0

    def kill_all(self, path: str) -> None:
        """Every process still in the cgroup, SIGKILL."""
        if self.v2:
            try:
                _write(os.path.join(path, "cgroup.kill"), "1")
                return
            except OSError:
                pass
        for pid in _procs(path):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def done(self, path: str, oom: bool) -> bool:
        """A member's cgroup after its member was reaped: kept for the next member when
        empty and nothing in it was killed for memory (its counter stays 0), else removed;
        False when it stays (a process the member left will not go)."""
        mb = self.limit.pop(path, 0)
        if not oom and not _procs(path):
            self.free.append((path, mb))
            return True
        return self.remove(path)

    def remove(self, path: str) -> bool:
        """The member's cgroup gone (what it left running moved up to ours first, v1; killed,
        v2, where no process may stay in a cgroup that has children); False when it stays."""
        if _rmdir(path):
            return True
        left = _procs(path)
        if self.v2:
            self.kill_all(path)
        else:
            for pid in left:
                try:
                    _write(os.path.join(self.own, "cgroup.procs"), str(pid))
                except OSError:
                    pass
        return _rmdir(path)

    def close(self) -> None:
        """The member cgroups kept for later members, then ours."""
        for path, _ in self.free:
            _rmdir(path)
        self.free.clear()
        if self.made:
            _rmdir(self.base)


def _join(path: str, pid: int) -> None:
    """Move the member ``pid`` into the cgroup ``path``, and what it started before it was
    moved. It was spawned a moment ago (posix_spawn has no way to start it inside), so a
    shell may have forked its program already: each process is moved before its children
    are listed (``/proc/PID/task/PID/children``), so a child forked after its parent moved
    is born inside, and one forked before is found and moved. OSError (ESRCH) when the
    member itself is gone already."""
    procs = os.path.join(path, "cgroup.procs")
    _write(procs, str(pid))
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = _read(f"/proc/{p}/task/{p}/children").split()
        except OSError:
            continue  # (ended, or a kernel without the list: its children forked after the move are inside)
        for kid in kids:
            try:
                _write(procs, kid)
            except OSError:
                continue  # (ended meanwhile)
            todo.append(int(kid))


def _procs(path: str) -> list[int]:
    try:
        return [int(p) for p in _read(os.path.join(path, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def find_cgroups(proc: str = "/proc/self") -> Cgroups | None:
    """This process's memory cgroup, if it may make members' cgroups with limits in it;
    else None (the members' memory is watched instead)."""
    try:
        lines = _read(os.path.join(proc, "cgroup")).splitlines()
        mounts = _read(os.path.join(proc, "mountinfo")).splitlines()
    except OSError:
        return None
    v1 = v2 = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = path
        elif controllers == "":
            v2 = path
    for line in mounts:
        fields = line.split()
        try:
            sep = fields.index("-")
        except ValueError:
            continue
        fstype, options = fields[sep + 1], fields[-1]
        root, point = fields[3], fields[4]
        mine = v1 if fstype == "cgroup" and "memory" in options.split(",") else \
            v2 if fstype == "cgroup2" and v1 is None else None
        if mine is None:
            continue
        if root == "/" or mine == root:  # (the mount shows the hierarchy from its root, or from ours)
            rel = mine if root == "/" else "/"
        elif mine.startswith(root + "/"):
            rel = mine[len(root):]
        else:
            continue
        own = os.path.normpath(point + rel)
        if not os.access(own, os.W_OK):
            return None
        if fstype == "cgroup":
            return Cgroups(own, False)
        try:
            if "memory" not in _read(os.path.join(own, "cgroup.subtree_control")).split():
                # (fails with EBUSY while processes are in our own cgroup: none of ours moves)
                _write(os.path.join(own, "cgroup.subtree_control"), "+memory")
        except OSError:
            return None
        return Cgroups(own, True)
    return None


def sweep_left(cg: Cgroups) -> list[str]:
    """Remove the cgroups that processes of this node which are gone (a pilot killed with
    SIGKILL) left in ours; what was removed."""
    out = []
    try:
        names = os.listdir(cg.own)
    except OSError:
        return out
    for name in names:
        if not name.startswith("pwe-") or not name[4:].isdigit() or int(name[4:]) == os.getpid():
            continue
        try:
            os.kill(int(name[4:]), 0)
            continue  # (alive)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        base = os.path.join(cg.own, name)
        try:
            children = [e.path for e in os.scandir(base) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for member in children:  # (its members' cgroups: what they left moved up, then gone)
            cg.remove(member)
        if _rmdir(base):
            out.append(base)
    return out


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

    def attach(self, key: int, pid: int, mb: int) -> None:
        """A member just spawned that may use ``mb`` MB: into a cgroup of its own, else watched."""
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
            if kb > mb * 1024:
                for p in [pid] + pids:
                    try:
                        (os.killpg if p == pid else os.kill)(p, signal.SIGKILL)
                    except OSError:
                        pass
                self.over[key] = self._why(mb, kb // 1024)
                out.append((key, self.over[key]))
        if self.stuck:
            self.stuck = [p for p in self.stuck if self.cgroups is None or not self.cgroups.remove(p)]
        return out

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
