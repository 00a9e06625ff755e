"""Function members (``python: package.module:function``): calls to warm worker processes
instead of a process each. :class:`WorkerPool` keeps a process's workers (the pilot's on its
own node, a node agent's on its node: pilot/nodeagent.py); :class:`PyWorkers` is the part of
:class:`pilot.agent.PilotAgent` that hands its own node's members to its pool. Standard
library only.

A worker (:mod:`pilot.pyworker`) is a Python process that imported its node's module once
and runs its function for one member after another; it holds the slot of the member it
runs, so a pilot keeps at most one worker a slot (an idle one of another function gives
its place to a new one). Workers are kept apart by their function and the environment
that does not change from member to member (the node's ``env:``, ``PWE_NODE``,
``PWE_HOST``...): ``PWE_MEMBER``, ``PWE_ATTEMPT``, ``PWE_PARAM_*``, ``PWE_OUTPUTS``,
``$TMPDIR`` and the like are set for each call (:data:`PER_MEMBER`). The interpreter is
``PWE_PYTHON`` where the member's environment gives one, else the pilot's own; the
worker's directory is the run's workspace (``PWE_WORKSPACE``), first on its ``sys.path``.

A call is a member as the pilot sees it: its ``start`` written before the call is sent
(exactly once holds as for commands), the worker's pid its member's key in ``running``
and in the guardian's table (pilot/guardian.py: a pilot killed mid-call, its guardian
takes the worker's exit, the call's status, as the member's end), its walltime and
memory enforced on the worker. A signal to the member is a signal to the worker's process
group (its own session): stopped at its walltime, cancelled, drained, or over its
``memoryPerMember`` while it runs (pilot/memwatch.py, watched: its process tree, every
0.5 s), the worker dies, the pilot's reaper ends the member as it ends a command
(``walltime``, ``oom``...), and the next call starts a new worker. After each call its
peak resident memory (the worker's, over the call) is held against ``memoryPerMember``
too: over it, the member fails ``oom`` and the worker is replaced. A worker that dies
mid-call (``os._exit``, a crash) ends its member with its exit status (retried as its
policy says) and is replaced.

Its calls' stdout and stderr are the pilot's capture files (pilot/streams.py), handed to
the worker with each call over a Unix socket (``SCM_RIGHTS``): each call's output is one
frame of the pilot's stream, as a command's. What a worker prints outside calls (at its
import) goes to ``pyworker-N.log`` in the pilot's directory.
"""

from __future__ import annotations

import array
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from . import containers
from .members import Member, say
from .memwatch import MemoryWatch
from .packing import Packer, Placement
from .spawn import environ
from .streams import StreamWriter
from .wire import REASON_OOM, START

#: the worker's program (run as a file: any Python may run it, the pilot package need not be importable)
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyworker.py")
#: a member's own variables, set for its call alone (the rest of its environment is its worker's)
#: (not its GPUs: a library reads CUDA_VISIBLE_DEVICES once, so a worker keeps the GPUs it started with,
#: and serves only members given the same)
PER_MEMBER = frozenset({"PWE_MEMBER", "PWE_ATTEMPT", "PWE_OUTPUTS", "PWE_TMPDIR", "TMPDIR", "PWE_PARENT",
                        "PWE_ITERATION", "PWE_WALLTIME_MINUTES"})
#: the most bytes of a worker's answer line (its outputs are at most 16 KB of it: pilot/pyworker.py)
ANSWER_MOST = 1 << 20
_PARAM = "PWE_PARAM_"
_encode = json.JSONEncoder(separators=(",", ":")).encode


class PyWorker:
    """The pilot's end of one worker: its process, socket, what it runs now."""

    __slots__ = ("pid", "sock", "key", "member", "calls", "partial", "name")

    def __init__(self, pid: int, sock: socket.socket, key: tuple, name: str):
        self.pid = pid
        self.sock = sock
        self.key = key
        self.member: Member | None = None
        self.calls = 0
        self.partial = b""
        self.name = name


def call_of(msg: dict, own: dict[str, str]) -> dict:
    """The call a worker is sent for a member (pilot/pyworker.py): its parameters (``kw``),
    its own variables ``own``, its node's validate (``vd``: run by the worker after the call
    returns) and, where its memory is limited (``mem``), that the worker measure the call's
    own peak. ``msg``: the pilot's task, or the node agent's ``run``, which carry the same."""
    call = {"kw": msg.get("kw") or {}, "env": own}
    if msg.get("vd"):
        call["vd"] = str(msg["vd"])
    if msg.get("mem"):
        call["mem"] = 1
    return call


def split_env(member_env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A member's environment as (what its worker starts with: what members share, its own
    variables, set for its call alone: :data:`PER_MEMBER` and ``PWE_PARAM_*``)."""
    shared, own = {}, {}
    for k, v in member_env.items():
        (own if k in PER_MEMBER or k.startswith(_PARAM) else shared)[k] = v
    return shared, own


class WorkerPool:
    """The warm workers of one process (the pilot; a node agent, pilot/nodeagent.py): made as
    calls need them, at most ``most``; an idle one of another function gives its place."""

    def __init__(self, directory: str, base_env: dict[str, str], most: int):
        self.dir = directory  # (its workers' logs; where they start when no workspace is said)
        self.base_env = base_env
        self.most = max(1, most)
        self.sel: Any = None  # (the loop's selector, from its start)
        self.workers: dict[int, PyWorker] = {}  # pid -> worker
        self.idle: dict[tuple, list[PyWorker]] = {}  # key -> idle workers of that function and environment
        self.retired: list[int] = []  # killed, not yet collected
        self.made = 0
        self._which: dict[tuple, str] = {}

    def get(self, spec: str, shared: dict[str, str], box: dict | None = None) -> PyWorker:
        """An idle worker of ``spec`` started with ``shared`` (inside the container ``box``:
        pilot/containers.py :func:`~pilot.containers.box`), else a new one (OSError: it
        cannot be started)."""
        key = (spec, frozenset(shared.items()), _encode(box) if box else None)
        free = self.idle.get(key)
        while free:
            worker = free.pop()
            if worker.pid in self.workers:
                return worker
        return self._start(key, spec, shared, box)

    def send(self, worker: PyWorker, call: dict, fds: tuple[int, int]) -> None:
        """A call (one JSON line) with its stdout's and stderr's files; OSError: the worker is gone."""
        worker.calls += 1
        call["id"] = worker.calls
        data = (_encode(call) + "\n").encode()
        sent = worker.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        if sent < len(data):
            worker.sock.sendall(data[sent:])

    def answers(self, worker: PyWorker) -> list[dict] | None:
        """What a worker said (its socket is readable): its answers to its current call; None
        when its socket closed (it died, or closed it) or it said a line past
        :data:`ANSWER_MOST` (not our worker's answer): it is to go (:meth:`lost`)."""
        try:
            data = worker.sock.recv(1 << 16)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            return None
        lines = (worker.partial + data).split(b"\n")
        worker.partial = lines.pop()
        if len(worker.partial) > ANSWER_MOST:
            say(f"{worker.name} said more than {ANSWER_MOST} bytes in a line; it is replaced")
            return None
        out = []
        for line in lines:
            try:
                msg = json.loads(line) if line.strip() else None
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("id") == worker.calls:
                out.append(msg)
        return out

    def ended_why(self, worker: PyWorker) -> str:
        """Why a member's call ended with its worker (its socket closed mid-call). A worker
        that ended on its first call most likely never started (no Python in its image, an
        interpreter that cannot run this program): the last line of its log says why."""
        why = "its Python worker ended while the function ran"
        if worker.calls > 1:
            return why
        try:
            with open(os.path.join(self.dir, f"{worker.name}.log"), "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - 2048))
                lines = [w for w in fh.read().decode("utf-8", "replace").splitlines() if w.strip()]
        except OSError:
            return why
        if not lines:
            return why
        last = "".join(c if c.isprintable() else "?" for c in lines[-1].strip())[:300]
        return f"{why}, before it answered its first call: {last}"

    def back(self, worker: PyWorker) -> None:
        """A worker whose call is over: idle, for the next call of its function."""
        worker.member = None
        self.idle.setdefault(worker.key, []).append(worker)

    def lost(self, worker: PyWorker) -> None:
        """A worker that is to go: killed (its process group), collected later (a worker that
        runs a call is its starter's reaper's, which ends that member with its status)."""
        if self.workers.pop(worker.pid, None) is not None:
            if self.sel is not None:
                try:
                    self.sel.unregister(worker.sock.fileno())
                except (KeyError, ValueError):
                    pass
            worker.sock.close()
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except OSError:
            pass
        self.retired.append(worker.pid)

    def reaped(self, pid: int) -> None:
        """A process its starter's reaper collected: no worker of ours to wait for any more
        (its pid may be another child's next: a setup's, a spawner's)."""
        if pid in self.retired:
            self.retired.remove(pid)

    def collect(self, busy: Any) -> None:
        """Workers killed earlier that have ended, collected; those in ``busy`` (running a
        member: the starter's reaper ends it with their status) left to their reaper."""
        if not self.retired:
            return
        left = []
        for pid in self.retired:
            if pid in busy:
                left.append(pid)
                continue
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if not done:
                left.append(pid)
        self.retired = left

    def _start(self, key: tuple, spec: str, shared: dict[str, str], box: dict | None) -> PyWorker:
        if len(self.workers) >= self.most:
            for other in self.idle.values():
                if other:
                    self.lost(other.pop(0))
                    break
        # the interpreter: PWE_PYTHON, else ours (inside a container, the image's python3)
        python = shared.get("PWE_PYTHON") or self.base_env.get("PWE_PYTHON") or ("python3" if box else sys.executable)
        workspace = shared.get("PWE_WORKSPACE") or self.dir
        env = environ(self.base_env, shared)
        args = [spec, workspace, str(containers.WORKER_FD)]
        # inside a container: the runtime starts the image's Python, which reads this
        # program on its stdin (no path of ours need be in the image)
        argv = containers.worker(box, python, args, workspace, env) if box else [python, WORKER, *args]
        found = (argv[0], env.get("PATH"))  # (found on the PATH its environment gives: a module's, say)
        exe = self._which.get(found)
        if exe is None:
            exe = self._which[found] = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=found[1]) or argv[0]
        self.made += 1
        name = f"pyworker-{os.getpid()}-{self.made}"
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log = -1
        try:
            log = os.open(os.path.join(self.dir, f"{name}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
                          | os.O_CLOEXEC, 0o600)
            os.chdir(workspace)  # (posix_spawn has no cwd; every path of the pilot is absolute: pilot/spawn.py)
            if child.fileno() == containers.WORKER_FD:  # (a dup2 onto itself keeps its close-on-exec)
                os.set_inheritable(child.fileno(), True)
            # its socket is its fd 3, the one fd it inherits (after 1 and 2: the log may be 3 here)
            pid = os.posix_spawn(exe, argv, env, file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, WORKER if box else "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log, 1), (os.POSIX_SPAWN_DUP2, log, 2),
                (os.POSIX_SPAWN_DUP2, child.fileno(), containers.WORKER_FD)], setsid=True)
        except (OSError, ValueError) as exc:  # (said with the program it is: the runtime, PWE_PYTHON's, or ours)
            parent.close()
            if isinstance(exc, OSError):
                raise OSError(exc.errno, f"{exc.strerror or exc} ({argv[0]})") from None
            raise OSError(22, f"{exc} ({argv[0]})") from None
        finally:
            child.close()
            if log >= 0:
                os.close(log)
        worker = PyWorker(pid, parent, key, name)
        self.workers[pid] = worker
        if self.sel is not None:
            import selectors

            self.sel.register(parent.fileno(), selectors.EVENT_READ, worker)
        if self.made == 1:
            say(f"function members: warm Python workers ({exe}), at most {self.most}")
        return worker

    def close(self) -> None:
        """Its process leaves: every worker goes (killed) and is collected."""
        for worker in list(self.workers.values()):
            self.lost(worker)
        for pid in self.retired:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.retired.clear()


class PyWorkers:
    """The pilot's function members on its own node: calls to its :class:`WorkerPool`."""

    def __init__(self, directory: str, base_env: dict[str, str], slots: int, running: dict[int, Member],
                 packer: Packer, memory: MemoryWatch, streams: StreamWriter, emit: Callable[..., None],
                 flush: Callable[[], bool], finish: Callable[..., None], fail_now: Callable[[dict, int, str], None],
                 member_over: Callable[[dict, Any], None], table: Any = None,
                 seen_over: Callable[[int, int], None] | None = None):
        self.pool = WorkerPool(directory, base_env, slots)
        self.running = running
        self.packer = packer
        self.memory = memory
        self.streams = streams
        self.emit = emit
        self.flush = flush
        self.finish = finish
        self.fail_now = fail_now
        self.member_over = member_over
        self.table = table
        self.seen_over = seen_over

    @property
    def sel(self) -> Any:
        return self.pool.sel

    @sel.setter
    def sel(self, sel: Any) -> None:
        self.pool.sel = sel

    # -- the call ---------------------------------------------------------------------------
    def launch(self, task: dict, placement: Placement, threads: int, exclusive: bool, member_env: dict[str, str],
               capture: Callable[..., tuple[int, int] | None]) -> None:
        """Hand a member to a worker of its function: its ``start`` written, then the call sent.
        ``capture``: its stdout's and stderr's files (pilot/tmpdirs.py ``MemberTmp.capture``:
        None when this node's scratch takes none, the member queued again)."""
        fds = capture(task, placement, threads, exclusive)
        if fds is None:
            return
        shared, own = split_env(member_env)
        self.pool.collect(self.running)
        try:
            worker = self.pool.get(task["py"], shared, task.get("_box"))
        except OSError as exc:
            self.streams.drop(fds)
            self.packer.release(placement, threads, exclusive)
            self.fail_now(task, 127 if exc.errno == 2 else 126,
                          f"cannot start a Python worker for {task['py']}: {exc.strerror or exc}")
            self.member_over(task, placement)
            return
        # its start on disk before the call is sent (one write): a pilot killed at any moment
        # leaves no call running that the engine does not know of
        self.emit(START, n=task["n"], m=task["m"], a=task["a"], nodes=[placement[0][0].name])
        self.flush()
        member = Member(task, worker.pid, placement, threads, exclusive, "fork")
        worker.member = member
        task["_io"] = fds  # (its call's stdout and stderr: kept into the stream as it ends)
        self.running[worker.pid] = member
        mem = task.get("mem")
        if mem:
            self.memory.attach(worker.pid, worker.pid, int(mem), watch=True)
        try:
            self.pool.send(worker, call_of(task, own), fds)
        except OSError as exc:
            # gone before it had the call: it ends as a worker that died (the reaper's), never
            # taken for the member's success
            member.killed = f"its Python worker had ended before the call ({exc.strerror or exc})"
            self.pool.lost(worker)
            return
        if self.table is not None:  # (after the send: a worker killed before has no call to answer for)
            self.table.spawned(worker.pid, task["n"], task["m"], task["a"])

    def ready(self, worker: PyWorker) -> None:
        """What a worker said (the loop's selector): its call's answer; its socket closed."""
        got = self.pool.answers(worker)
        if got is None:
            member = worker.member
            if member is not None and self.running.get(worker.pid) is member and not member.killed:
                member.killed = self.pool.ended_why(worker)
            self.pool.lost(worker)
            return
        for msg in got:
            self._answered(worker, msg)

    def died(self, pid: int, member: Member, rc: int) -> None:
        """A worker reaped while its call ran, before its closed socket was read: why its
        member ended (:meth:`WorkerPool.ended_why`), as :meth:`ready` would have said it."""
        worker = self.pool.workers.get(pid)
        if worker is not None and worker.member is member and rc and not member.killed:
            member.killed = self.pool.ended_why(worker)

    def _answered(self, worker: PyWorker, msg: dict) -> None:
        member = worker.member
        if member is None:
            return
        worker.member = None
        if self.running.get(worker.pid) is not member:
            return  # (ended already: its worker was reaped first)
        del self.running[worker.pid]
        rc = msg.get("rc") if type(msg.get("rc")) is int else 1
        if self.seen_over is not None:  # (the guardian's table: its end is about to be said)
            self.seen_over(worker.pid, rc)
        task = member.task
        signalled = bool(member.killed)  # (stopped meanwhile: its worker has the signal too)
        over = self.memory.ended(worker.pid, None, rc) if self.memory.limits else None
        member.cpu, member.rss = usage(msg)
        if not member.killed:
            member.killed, member.reason = judged(msg, task.get("mem"), over)
        ret = outputs(msg)
        if ret:  # (its return value: the end's outputs, pilot.members.collect)
            task["_ret"] = ret
        if "_io" in task:  # (it gave its capture files back before it answered: used again, pilot/streams.py)
            task["_io"] = (*task["_io"][:2], None)
        self.packer.release(member.placement, member.threads, member.exclusive)
        if signalled or member.reason or msg.get("broken"):
            self.pool.lost(worker)  # (over its memory, signalled meanwhile, or its function cannot be had)
        else:
            self.pool.back(worker)
        self.finish(member, rc)

    def close(self) -> None:
        self.pool.close()


def usage(msg: dict) -> tuple[float | None, int | None]:
    """(cpu, rss) of a worker's answer, where it gave them as numbers."""
    rss = msg.get("rss") if type(msg.get("rss")) is int else None
    cpu = msg.get("cpu") if type(msg.get("cpu")) in (int, float) else None
    return cpu, rss


def judged(msg: dict, mem: Any, over: str | None) -> tuple[str | None, str | None]:
    """(why, reason) of a call that answered: over its ``mem`` while it ran (``over``, the
    memory watch's words) or by its peak (the answer's ``rss``): ``oom``; its function's
    failure that a traceback does not say (the answer's ``why``); else (None, None)."""
    if over:
        return over, REASON_OOM
    rss = usage(msg)[1]
    if mem and rss is not None and rss > int(mem) * 1024:
        return f"used {rss // 1024} MB of its memoryPerMember {mem} MB", REASON_OOM
    if msg.get("why"):
        return str(msg["why"])[:1000], None
    return None, None


def outputs(msg: dict) -> dict[str, str]:
    """The outputs an answer carries (its return value), as texts."""
    out = msg.get("out")
    return {str(k): str(v) for k, v in out.items()} if isinstance(out, dict) else {}
