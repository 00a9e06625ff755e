"""Each member attempt's own ``$TMPDIR`` (from open-lmake): a fresh, empty, owner-only
directory made before the member starts and removed when it has ended, however it ended
(done, failed, killed by its walltime, cancelled); one the member left empty and
owner-only is handed, as it is, to the next member instead (no metadata write for the
many members that never use it). Standard library only.

Layout: ``<root>/pwe-<run>-<pilot>-<host>-<pid>/<k>``, where root is
the host's ``scratch`` (``$VARS`` expanded here, on the node), else the node's ``$TMPDIR``,
else ``/tmp``; ``<run>`` is a short hash of the run directory. The pilot's own directory
goes when the pilot leaves. A pilot killed with SIGKILL cannot tidy: its guardian removes
its directory once its members have ended (:func:`remove_left`, pilot/guardian.py), and the
next pilot of the same run on the same node removes what pilots of that run left there
whose process is gone (:meth:`TmpDirs.sweep`: a pilot killed with its guardian).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from .allocation import Allocation, hostname
from .members import say
from .packing import Packer, Placement
from .phase import Life, PilotPhase
from .spawn import pid_alive
from .wire import NO_SCRATCH

if TYPE_CHECKING:
    from .streams import StreamWriter


def make_fresh(path: str) -> None:
    """An empty owner-only directory at ``path`` (its parent made owner-only if missing);
    what was there before is removed first."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    if os.path.lexists(path):
        remove_tree(path)
    os.mkdir(path, 0o700)


def remove_tree(path: str) -> None:
    """Remove a member's $TMPDIR and what it left; its pilot's directory too once empty."""
    try:
        os.rmdir(path)  # (most members leave it empty: one call)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


_VAR = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand(text: str, env: dict | None = None) -> str:
    """``$NAME`` and ``${NAME}`` in ``text`` replaced by their values (then ``~``); an unset
    or empty variable is ValueError naming it, never left as a literal folder name (what
    ``os.path.expandvars`` does, and ``makedirs`` would make)."""
    env = os.environ if env is None else env

    def one(m: re.Match) -> str:
        name = m.group(1) if m.group(1) is not None else m.group(2)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
            raise ValueError(f"scratch {text!r}: '${{{name}}}' is not a variable's name")
        value = env.get(name)
        if not value:
            raise ValueError(f"scratch {text!r}: ${name} is not set on {hostname()}; set it in the host's "
                             "environment or setup lines, or give the scratch directory as a path")
        return value

    return os.path.expanduser(_VAR.sub(one, text))


def tmp_root(scratch: str | None) -> str:
    """Where members' directories are made on this node; ValueError (naming it) for a
    variable in ``scratch`` that is not set here."""
    if scratch:
        return expand(scratch)
    return os.environ.get("TMPDIR") or "/tmp"


def _prefix(pilot_dir: str) -> str:
    run_dir = os.path.dirname(os.path.dirname(pilot_dir))  # RUN/pilots/<id>
    return f"pwe-{hashlib.sha256(run_dir.encode()).hexdigest()[:10]}-"


def remove_left(pilot_dir: str, scratch: str | None, pid: int) -> None:
    """Remove the directory of the pilot process ``pid`` of ``pilot_dir`` on this node,
    with what is in it: its guardian's tidying once the pilot was killed and its members
    have all ended (the pilot's own :meth:`TmpDirs.close` never ran)."""
    pilot_dir = os.path.abspath(pilot_dir)
    try:
        root = tmp_root(scratch)
    except ValueError:
        return
    path = os.path.join(root, f"{_prefix(pilot_dir)}{os.path.basename(pilot_dir)}-{hostname()}-{pid}")
    if not os.path.islink(path):
        keep_outputs(path, pilot_dir)
        shutil.rmtree(path, ignore_errors=True)


#: where a killed pilot's guardian keeps the outputs its members wrote beside their $TMPDIRs
#: (pilot.members.outputs_path), in the pilot's directory: the engine reads an orphaned end's
#: outputs there (pwe.engine.recovery)
LEFT_OUTPUTS = "outputs-left"


def keep_outputs(path: str, pilot_dir: str) -> None:
    """The ``<node>.<member>.<attempt>.outputs`` files under a killed pilot's directory
    ``path`` copied into ``<pilot_dir>/outputs-left/`` (regular files only, 64 KiB each at
    most) before the directory goes: what members that ended after the pilot died wrote."""
    try:
        names = [n for n in os.listdir(path) if n.endswith(".outputs")]
    except OSError:
        return
    for name in names:
        try:
            fd = os.open(os.path.join(path, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            data = os.read(fd, 64 * 1024 + 1)
            os.makedirs(os.path.join(pilot_dir, LEFT_OUTPUTS), exist_ok=True)
            with open(os.path.join(pilot_dir, LEFT_OUTPUTS, name), "wb") as fh:
                fh.write(data)
        except OSError:
            continue
        finally:
            os.close(fd)


class TmpDirs:
    """The members' temporary directories of one pilot on its node."""

    def __init__(self, pilot_dir: str, scratch: str | None = None):
        pilot_dir = os.path.abspath(pilot_dir)
        #: why no member's directory can be made on this node (an unset variable in scratch)
        self.error: str | None = None
        try:
            self.root = tmp_root(scratch)
        except ValueError as exc:
            self.error, self.root = str(exc), os.path.join(pilot_dir, "no-scratch")
        self.prefix = _prefix(pilot_dir)
        self.host = hostname()
        self.base = os.path.join(self.root, f"{self.prefix}{os.path.basename(pilot_dir)}-{self.host}-{os.getpid()}")
        self._made = False
        self._by_member: dict[tuple[str, int, int], str] = {}  # running members' directories here
        self._spare: list[str] = []  # empty ones their members left, for the next
        self._count = 0

    def sweep(self) -> list[str]:
        """Remove what pilots of this run left on this node (killed before they could tidy):
        directories ``pwe-<run>-*-<this host>-<pid>`` whose pid is gone. What was removed."""
        gone = []
        try:
            names = os.listdir(self.root) if self.error is None else []
        except OSError:
            return gone
        tail = f"-{self.host}-"
        for name in names:
            if not name.startswith(self.prefix) or tail not in name:
                continue
            pid = name.rsplit("-", 1)[-1]
            path = os.path.join(self.root, name)
            if not pid.isdigit() or pid_alive(int(pid)) or os.path.islink(path):
                continue
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
        return gone

    def make(self, node: str, member: int, attempt: int) -> str:
        """A fresh, empty, owner-only (0700) directory for this member attempt: its path.
        OSError when it cannot be made (the caller fails the member, as for its own
        directory).

        A directory an ended member left empty and owner-only is handed to the next one
        (``remove`` checked it: one directory read, no write) instead of being removed
        and another made: on a disk filesystem that pair of metadata writes costs more
        than a short member's whole start (measured: bench/BENCHMARKS.md)."""
        if self.error is not None:
            raise OSError(errno.EINVAL, self.error)
        if not self._made:
            os.makedirs(self.root, exist_ok=True)
            if os.path.islink(self.base):  # (swapped in: members' files would go where it leads)
                raise OSError(errno.ELOOP, f"{self.base} is a symbolic link, not the pilot's own directory")
            os.makedirs(self.base, mode=0o700, exist_ok=True)
            os.chmod(self.base, 0o700)
            self._made = True
        key = (node, member, attempt)
        if self._spare:
            path = self._by_member[key] = self._spare.pop()
            return path
        self._count += 1
        path = os.path.join(self.base, str(self._count))
        try:
            os.mkdir(path, 0o700)
        except FileNotFoundError:  # its parent went (a node agent's tidying on a shared /tmp)
            os.makedirs(self.base, mode=0o700, exist_ok=True)
            os.mkdir(path, 0o700)
        self._by_member[key] = path
        return path

    def path(self, node: str, member: int, attempt: int) -> str:
        """The directory a node agent makes for a member on its own node (one per attempt)."""
        if self.error is not None:
            raise OSError(errno.EINVAL, self.error)
        return os.path.join(self.base, f"{node.replace('/', '_')}.{member}.{attempt}")

    def remove(self, node: str, member: int, attempt: int) -> None:
        """The member attempt has ended: nothing it left stays. An empty owner-only
        directory is kept for the next member; anything else goes, with what is in it."""
        path = self._by_member.pop((node, member, attempt), None)
        if path is None:
            return  # (none made here: a member on another node, or removed already)
        try:
            st = os.lstat(path)
            with os.scandir(path) as entries:
                empty = next(entries, None) is None
            if empty and stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid():
                self._spare.append(path)
                return
        except OSError:
            pass
        shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """The pilot leaves: its directory goes (with anything a member's children left)."""
        if self._made:
            shutil.rmtree(self.base, ignore_errors=True)

    def free_mb(self) -> int | None:
        """Free space under the root, MB (the tmp pool when the host states none)."""
        if self.error is not None:
            return None
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize // (1024 * 1024)


class MemberTmp:
    """The pilot's side of members' $TMPDIRs and output files (a part of
    :class:`pilot.agent.PilotAgent`: given its tmpdirs, output streams, packer,
    allocation, queue, stage and hand_back_held).

    A node whose scratch takes no directory (full, an inode quota, read-only, a ``scratch``
    naming a variable not set there) is the node's fault, never the member's: left to
    fail, every member would fail there in a millisecond and a whole sweep would drain
    into that one "black hole" node, its retries with it. So the member goes back to the
    queue (no attempt spent) and the node takes no more members of this pilot; when no
    node is left, what the pilot holds is handed back with :data:`NO_SCRATCH` and the pilot
    leaves once its running members end. A node's scratch seldom clears in the middle of a
    job; the next pilot finds out for itself."""

    def __init__(self, tmpdirs: TmpDirs, streams: StreamWriter, packer: Packer, alloc: Allocation,
                 queue: deque[dict], life: Life, hand_back_held: Callable[[str], None]):
        self.tmpdirs = tmpdirs
        self.streams = streams
        self.packer = packer
        self.alloc = alloc
        self.queue = queue
        self.life = life
        self.hand_back_held = hand_back_held
        self.no_scratch = ""  # (set once no node of the pilot is left: why, the NO_SCRATCH back's words)

    def member_tmpdir(self, task: dict, placement: Placement, threads: int, exclusive: bool,
                      member_env: dict) -> bool:
        """The member attempt's own fresh $TMPDIR (pilot/tmpdirs.py), made here for a member
        on this node and put in its environment (TMPDIR, PWE_TMPDIR); False when it cannot be
        made (:meth:`scratch_refused`: the member is queued again, or handed back). A member on
        another node gets its own from that node's agent (remote.py); one whose ranks span
        nodes, or that srun or mpiexec start on another node, keeps the nodes' own $TMPDIR
        (one path would not exist on all)."""
        if len(placement) != 1 or not placement[0][0].local:
            return True
        try:
            member_env["TMPDIR"] = member_env["PWE_TMPDIR"] = self.tmpdirs.make(task["n"], task["m"], task["a"])
        except OSError as exc:
            self.packer.release(placement, threads, exclusive)
            self.scratch_refused(placement[0][0].name, f"cannot make a member's $TMPDIR under {self.tmpdirs.root}: "
                                 f"{exc.strerror or exc}", task)
            return False
        return True

    def capture(self, task: dict, placement: Placement, threads: int, exclusive: bool) -> tuple[int, int] | None:
        """The files of a member's stdout and stderr (pilot/streams.py), in this pilot's
        scratch; None when it takes none: no member this pilot starts itself can be started
        then, so what it holds goes back (the member first) and it leaves."""
        try:
            return self.streams.capture()
        except OSError as exc:
            self.packer.release(placement, threads, exclusive)
            self.tmpdirs.remove(task["n"], task["m"], task["a"])
            self.queue.appendleft(task)
            self.no_scratch = (f"{NO_SCRATCH} (cannot make a member's output file under {self.streams.scratch}: "
                               f"{exc.strerror or exc})")
            say(self.no_scratch)
            self.hand_back_queued()
            return None

    def scratch_refused(self, node: str, why: str, task: dict) -> None:
        """``node`` could not make ``task``'s $TMPDIR: it takes no more members of this
        pilot; ``task`` is queued again (another node places it) or, with no node left, it
        and everything queued go back to the engine and the pilot leaves (see the class)."""
        if node not in self.packer.dead:
            say(f"node {node}: {why}; no member of this pilot goes there from now on (not the members' fault: "
                "none of them fails for it)")
            self.packer.kill_node(node)
        self.queue.appendleft(task)
        if all(n.name in self.packer.dead for n in self.alloc.nodes):
            self.no_scratch = f"{NO_SCRATCH} ({why})"
            self.hand_back_queued()

    def hand_back_queued(self) -> None:
        """(No node left with scratch for a member.) What the pilot holds goes back, and it
        leaves once what runs has ended (the engine sends it nothing more: STOP)."""
        self.life.at_least(PilotPhase.STOPPING)
        self.hand_back_held(self.no_scratch)
