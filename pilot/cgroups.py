"""Members' memory cgroups (cgroup v1 and v2): finding the one this process may make them
in, making, limiting, reading and removing each member's, and those a killed process left.
What the limits are for and when each is used is :mod:`pilot.memwatch`'s story (its
:class:`~pilot.memwatch.MemoryWatch` is the one user). Standard library only.
"""

from __future__ import annotations

import errno
import os
import signal


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
