"""The pilot's main loop: read tasks, launch members, reap them, report events.

The pilot talks to the engine through its transport (:mod:`pilot.transport`: today two
JSON-lines files in its own directory, each with one writer); the messages, their kinds
and fields are listed once, in :mod:`pilot.wire`.

The pilot does not need the engine to be alive: it keeps running what it was given and
its events wait for an engine to read them.

Why ~570 lines in one module: the loop's steps (taking tasks, packing, launching,
reaping, walltimes, draining, cancelling, a group's next member) all read and change the
same queue, packer and running members; what has state of its own is already apart
(members.py, remote.py, spawners.py, packing.py, transport.py and broker.py).
"""

from __future__ import annotations

import argparse
import errno
import os
import selectors
import signal
import socket
import sys
import time
from array import array
from collections import deque
from typing import Any

from .allocation import Allocation, discover, visible_gpus
from .launchers import SSH_FAILED, choose, wrap
from .packing import Packer, Placement
from .tmpdirs import TmpDirs
from .spawn import DirectoryError, Spawner, make_member_dir, member_base_env, reaped, start_failure, writable
from .members import Member, argv_for, collect, killpg, missing_product, note_stderr, say, task_shape
from .nodesetup import SETUP_FAILED, NodeSetup
from .remote import NodeAgent, RemoteNodes
from .spawners import LocalSpawners, spawner_count
from .transport import PilotSpool, Transport, keys
from .wire import (BACK, CANCEL, DAMAGED, DOWN, DRAIN, END, FORGED, GROUP, HB, LEAVE, MALFORMED, NODE_LOST, SETUP,
                   START, STOP, TASK, UNWRITABLE, UP, VERSION)

_KILL_GRACE = 5.0
_SIGNAL_GRACE = 1.0


class PilotAgent(RemoteNodes, LocalSpawners, NodeSetup):
    """One pilot: fills the cores of its allocation's nodes with members."""

    def __init__(self, directory: str, allocation: Allocation | int, heartbeat: float = 5.0,
                 idle_timeout: float = 300.0, fsync: bool = False, poll: float = 0.02,
                 launcher: str | None = None, launcher_prefix: str | None = None, core_cap: int | None = None,
                 margin: float = 60.0, spawners: int | None = None, transport: Transport | None = None,
                 scratch: str | None = None, tmp_per_node: int | None = None):
        if isinstance(allocation, int):  # a number of slots on this machine
            allocation = discover(env={}, cores=allocation)
        self.dir = directory
        self.alloc = allocation
        self.tmpdirs = TmpDirs(directory, scratch)  # each member attempt's own $TMPDIR
        # each node's tmp pool (tmpPerMember): the host's tmp_per_node, else what is free under
        # the tmp root here, measured once (other nodes' is not known: not counted)
        measured = None if tmp_per_node is not None else self.tmpdirs.free_mb()
        self.packer = Packer(allocation.nodes, core_cap, {
            n.name: tmp_per_node if tmp_per_node is not None else measured if n.local else None
            for n in allocation.nodes})
        self.slots = sum(self.packer.cap.values())
        self.launcher = launcher
        self.launcher_prefix = launcher_prefix
        self.margin = margin
        self.heartbeat = heartbeat
        self.idle_timeout = idle_timeout
        self.poll = poll
        self.queue: deque[dict] = deque()
        # the next member of a group whose member just ended: queued first, into the slot
        # it leaves (a task of a group carries the rest of its group under "_then")
        self.chained: deque[dict] = deque()
        self.running: dict[int, Member] = {}
        self.stopping = False
        self.draining = False
        self.terminated = False
        self.signalled: list[tuple[float, Member, int]] = []
        self.cancelled = False
        # (none given: the spool, signed with the run's secret when the pilot finds it)
        self.transport = transport or PilotSpool(directory, fsync, *keys(directory))
        self._task_cursor = 0
        self.taken: dict[str, array] = {}  # per node, the highest attempt of each member taken
        self._out: list[dict[str, Any]] = []
        self.write_blocked = False
        self._unwritable = ""  # the last member directory that refused, said once in pilot.log
        self._base_env = member_base_env()
        self._visible_gpus = visible_gpus(os.environ) or []
        self.spawner = Spawner()
        self.agents: dict[str, NodeAgent] = {}
        # many slots here: members are started by local spawners (pilot/spawners.py)
        self.n_spawners = spawner_count(sum(self.packer.cap[n.name] for n in allocation.nodes if n.local), spawners)
        self.spawners: dict[int, NodeAgent] = {}
        self.pending: list[tuple[Member, dict]] = []  # handed to spawners once their starts are written
        self.sel: selectors.BaseSelector | None = None
        self._next_key = -1
        self.leaving = False  # (pwe pilot drain) take nothing new, finish what runs, leave
        self.setup_sets: dict[str, list[str]] = {}  # setup_per_node sets by id (pilot/nodesetup.py)
        self.node_setups: dict[tuple[str, str], str] = {}  # (node, id) -> running | ok | failed
        self.setup_procs: dict[int, tuple] = {}  # pid -> (process, node, id, started, log)

    @property
    def free(self) -> int:
        return sum(self.packer.free.values())

    # -- events ---------------------------------------------------------------------------
    def emit(self, kind: str, **fields: Any) -> None:
        fields["k"] = kind
        fields["t"] = round(time.time(), 3)
        self._out.append(fields)

    def flush(self) -> bool:
        """Send the pending events, one write; False (events held) when the disk refuses them."""
        if not self._out and not self.transport.held:
            return True
        out, self._out = self._out, []
        try:
            self.transport.send(out)
        except OSError as exc:
            # disk full or quota: the transport holds what was not written; start no member
            # until it is (their events would have nowhere to go)
            if not self.write_blocked:
                say(f"cannot write events: {exc.strerror}; holding them, starting no member until they are written")
            self.write_blocked = True
            return False
        self.write_blocked = False
        return True

    # -- tasks ----------------------------------------------------------------------------
    def read_tasks(self) -> bool:
        """Take in whatever complete task messages were sent; True if any arrived."""
        msgs, self._task_cursor = self.transport.receive(self._task_cursor)
        got = False
        for msg in msgs:
            kind = msg.get("k")
            if kind == TASK:
                if not self.take(msg):
                    continue
                if self.draining or self.leaving:
                    self.hand_back(msg, "the allocation is ending" if self.draining else "the pilot is drained")
                else:
                    self.queue.append(msg)
                got = True
            elif kind == GROUP:
                tasks = msg.get("tasks")
                got = self.take_group(tasks if isinstance(tasks, list) else []) or got
            elif kind == STOP:
                self.stopping = True
            elif kind == SETUP:
                self.take_setup(msg)
            elif kind == LEAVE:
                self.leave()
            elif kind == CANCEL:
                self.cancel()
            elif kind == DAMAGED:
                say(f"a damaged line in the tasks file skipped: {msg.get('text')!r}")
            elif kind == FORGED or kind == MALFORMED:  # never acted on
                say(f"a {kind} line in the tasks file refused ({msg.get('why') or 'bad signature'}): "
                    f"{msg.get('text')!r}")
        return got

    def take(self, task: dict) -> bool:
        """Whether a task is new to this pilot: an attempt of a member it has taken (and
        not handed back) is never taken again, so it never runs twice, whatever the
        engine sends (a resumed engine whose journal lost the assignment). Kept per node
        as the highest attempt taken of each member, 4 bytes a member."""
        try:
            n, m, a = task["n"], int(task["m"]), int(task["a"])
            if m < 0 or a < 1:
                raise ValueError(m, a)
        except (KeyError, TypeError, ValueError):
            say(f"a task without node, member and attempt ignored: {str(task)[:200]}")
            return False
        taken = self.taken.get(n)
        if taken is None:
            taken = self.taken[n] = array("I")
        if m >= len(taken):
            taken.frombytes(bytes(4 * (max(m + 1, 2 * len(taken)) - len(taken))))
        if a <= taken[m]:
            say(f"task {n}[{m}] attempt {a} ignored: this pilot took attempt {taken[m]} of it already")
            return False
        taken[m] = a
        return True

    def hand_back(self, task: dict, why: str, rest: str | None = None) -> None:
        """Return an unstarted member to the engine; it costs no attempt (and the engine
        may give this attempt to this pilot again). The rest of its group goes back too
        (``rest``: why, when not ``why``: they never started)."""
        taken = self.taken.get(task["n"])
        if taken is not None and task["m"] < len(taken) and taken[task["m"]] == task["a"]:
            taken[task["m"]] = task["a"] - 1
        self.emit(BACK, n=task["n"], m=task["m"], a=task["a"], why=why)
        for t in task.pop("_then", None) or ():
            self.hand_back(t, rest or why)

    # -- groups: members that run one after another in one slot ----------------------------
    def take_group(self, tasks: list[dict]) -> bool:
        """A ``group`` message: its members queue as one entry (the first, carrying the
        rest), so they hold one slot between them and run in their order."""
        tasks = [t for t in tasks if self.take(t)]
        if not tasks:
            return False
        head = tasks[0]
        if len(tasks) > 1:
            head["_then"] = deque(tasks[1:])
        if self.draining:
            self.hand_back(head, "the allocation is ending")
        else:
            self.queue.append(head)
        return True

    def next_in_group(self, task: dict) -> None:
        """A member of a group ended (whatever its exit status: each member has its own):
        the next one takes its slot; when the allocation is ending it goes back instead."""
        rest = task.pop("_then", None)
        if not rest:
            return
        nxt = rest.popleft()
        if rest:
            nxt["_then"] = rest
        if "_on" in task:
            nxt["_near"] = task["_on"]  # (the node it ran on: the next one takes the slot it left)
        if self.draining:
            self.hand_back(nxt, "the allocation is ending")
        elif self.leaving:  # (pwe pilot drain: what has not started goes back)
            self.hand_back(nxt, "the pilot is drained")
        elif not self.cancelled:
            self.chained.append(nxt)

    # -- members --------------------------------------------------------------------------
    def launch(self, task: dict, placement: Placement, ranks: int, threads: int, exclusive: bool) -> None:
        cwd = task["cwd"]
        if "_then" in task and len(placement) == 1:
            task["_on"] = placement[0][0].name  # (a group's: its next member goes there too)
        try:
            make_member_dir(cwd)  # (the run directory is shared: this is the other nodes' too)
        except DirectoryError as exc:
            self.unwritable(task, placement, threads, exclusive, exc.filename, exc.strerror)
            return
        member_env = dict(task.get("env") or {})
        member_env["PWE_OUTPUTS"] = os.path.join(cwd, "outputs")
        if not self.member_tmpdir(task, placement, threads, exclusive, member_env):
            return
        if placement.gpu_ids:  # the GPUs of its node that are this member's alone
            ids = [str(j) for j in placement.gpu_ids]
            if placement[0][0].local and self._visible_gpus:
                # the allocation's own GPU ids here (SLURM may give the job devices 2,3)
                ids = [self._visible_gpus[j] if j < len(self._visible_gpus) else str(j) for j in placement.gpu_ids]
            member_env["CUDA_VISIBLE_DEVICES"] = member_env["PWE_GPUS"] = ",".join(ids)
        env = self._base_env.copy()
        env.update(member_env)
        launcher = choose(self.alloc.kind, placement, ranks, self.launcher)
        if launcher == "fork" and self.n_spawners and self.launch_on_spawner(task, placement, threads, exclusive,
                                                                            member_env):
            return
        if launcher == "ssh" and len(placement) == 1 and ranks == 1:
            self.launch_on_agent(task, placement, threads, exclusive, member_env)
            return
        # the host's prefix is for the launcher it chose (or for any, when it chose none)
        prefix = self.launcher_prefix if self.launcher in (None, "auto", launcher) else None
        if launcher == "mpiexec" and prefix is None:
            from .mpi import find as find_mpi  # (only members of several ranks pay for it)

            mpi = find_mpi()
            if isinstance(mpi, str):  # never through a launcher that would not run the payload
                self.packer.release(placement, threads, exclusive)
                self.fail_now(task, 127, f"cannot start {ranks} ranks: {mpi}")
                self.member_over(task, placement)
                return
            prefix = mpi.prefix(sorted(member_env))
        argv = wrap(launcher, argv_for(task["cmd"]), task["cmd"], placement, ranks, threads, cwd, member_env, prefix)
        # its start on disk before it exists (one write, no fsync): a pilot killed at any
        # moment, even inside the spawn, leaves no member running that the engine does not
        # know of (it finds it by its environment and ends it before running it again)
        self.emit(START, n=task["n"], m=task["m"], a=task["a"], pid=0, nodes=[n.name for n, _ in placement])
        self.flush()
        try:
            pid = self.spawner.spawn(argv, env, cwd, task["cmd"], made=True)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES) and not writable(cwd):
                # its directory refused its stdout: made a moment before it turned read-only
                self.unwritable(task, placement, threads, exclusive, cwd, exc.strerror)
                self.member_over(task, placement)
                return
            # not found / not executable / no space: the member fails, the pilot goes on
            self.packer.release(placement, threads, exclusive)
            self.fail_now(task, *start_failure(exc))
            self.member_over(task, placement)
            return
        self.running[pid] = Member(task, pid, placement, threads, exclusive, launcher)

    def member_over(self, task: dict, placement: Placement) -> None:
        """A member attempt that has ended (or never started): its $TMPDIR goes (its tmp
        space went back to the pool with its cores: Packer.release)."""
        self.tmpdirs.remove(task["n"], task["m"], task["a"])

    def member_tmpdir(self, task: dict, placement: Placement, threads: int, exclusive: bool,
                      member_env: dict) -> bool:
        """The member attempt's own fresh $TMPDIR (pilot/tmpdirs.py), made here for a member
        on this node and put in its environment (TMPDIR, PWE_TMPDIR); False when it cannot be
        made (the member fails with the reason). A member on another node gets its own from
        that node's agent (remote.py); one whose ranks span nodes, or that srun or mpiexec
        start on another node, keeps the nodes' own $TMPDIR (one path would not exist on all)."""
        if len(placement) != 1 or not placement[0][0].local:
            return True
        try:
            member_env["TMPDIR"] = member_env["PWE_TMPDIR"] = self.tmpdirs.make(task["n"], task["m"], task["a"])
        except OSError as exc:
            self.packer.release(placement, threads, exclusive)
            self.fail_now(task, 1, f"cannot make its $TMPDIR under {self.tmpdirs.root}: {exc.strerror or exc}")
            return False
        return True

    def unwritable(self, task: dict, placement: Placement, threads: int, exclusive: bool, where: str,
                   strerror: str) -> None:
        """A member whose directory takes no files: the run's cause, not the member's. It is
        handed back unstarted (the ``back``'s why begins with UNWRITABLE, so the engine
        spends no attempt even after its ``start``); the engine stops the run, to be
        resumed once the directory takes files again."""
        self.packer.release(placement, threads, exclusive)
        why = f"{UNWRITABLE}{where}: {strerror}"
        if why != self._unwritable:
            say(f"{why}: handing members back")
            self._unwritable = why
        self.hand_back(task, why)

    def signal_member(self, m: Member, sig: int) -> None:
        if m.agent is not None:
            m.agent.send(k="kill", id=m.key, sig=int(sig))
        else:
            killpg(m.pid, sig)

    def fail_now(self, task: dict, rc: int, why: str) -> None:
        note_stderr(task, f"{why}: {task['cmd']}")
        self.emit(END, n=task["n"], m=task["m"], a=task["a"], rc=rc, why=why, dt=0.0, out={})
        self.next_in_group(task)

    def time_left(self, now: float) -> float | None:
        return None if self.alloc.end is None else self.alloc.end - self.margin - now

    def leave(self) -> None:
        """``pwe pilot drain``: hand back what is queued (no attempt spent), take nothing
        new, finish what runs, then leave."""
        if self.leaving:
            return
        self.leaving = self.stopping = True
        while self.chained:
            self.queue.appendleft(self.chained.pop())
        while self.queue:
            self.hand_back(self.queue.popleft(), "the pilot is drained")

    def launch_ready(self) -> None:
        while self.chained:  # (a group's next member: first in line, into the slot just freed)
            self.queue.appendleft(self.chained.pop())
        if self.setup_procs:
            self.poll_setups()
        if self.write_blocked or self.draining:
            return
        now = time.time()
        left = self.time_left(now)
        # first fit over a short look-ahead, so one wide member does not stall narrow ones
        i = 0
        while i < len(self.queue) and i < 64 and self.free > 0:
            task = self.queue[i]
            shape = task_shape(task)
            ranks, threads, exclusive = shape[:3]
            wall = task.get("wall")
            if left is not None and wall and wall * 60 > left:
                # it cannot finish before the allocation ends: the next pilot runs it
                del self.queue[i]
                self.hand_back(task, f"needs {wall:g} min, {max(left, 0) / 60:.1f} min left in this allocation")
                continue
            never = self.packer.why_never(*shape)
            if never:
                del self.queue[i]
                self.fail_now(task, 1, f"cannot be placed: {never}")
                continue
            if self.setup_failed_everywhere(task):  # (pilot/nodesetup.py) another pilot runs it
                del self.queue[i]
                self.hand_back(task, SETUP_FAILED)
                continue
            placement = self.place_for(task, shape, task.get("_near"))
            if placement is None:
                i += 1
                continue
            del self.queue[i]
            self.launch(task, placement, ranks, threads, exclusive)
            # (a member of another node: its start, as its agent starts it; members for
            # local spawners: their starts in one write, after the pass)
            if not self.pending and not self.flush():
                return
        self.send_pending()

    def reap(self) -> None:
        for pid, rc, cpu, rss in reaped(lambda: self.running):
            member = self.running.pop(pid, None)
            if member is None:
                self.setup_reaped(pid, rc)  # (a setup_per_node's process, or nothing of ours)
                continue
            member.cpu, member.rss = cpu, rss
            self.packer.release(member.placement, member.threads, member.exclusive)
            t = member.task
            if member.launcher == "ssh" and rc == SSH_FAILED and not member.killed:
                node = member.placement[0][0]
                if not self.node_alive(node.name):
                    # the node died under the member: not the member's fault, run it elsewhere
                    self.packer.kill_node(node.name)
                    self.emit(NODE_LOST, node=node.name, n=t["n"], m=t["m"])
                    say(f"node {node.name} is unreachable; its members go to the other nodes")
                    self.queue.appendleft(t)
                    self.fail_unplaceable()
                    continue
            self.finish(member, rc)

    def finish(self, member: Member, rc: int) -> None:
        """Report a member that ended (its cores are already released)."""
        t = member.task
        self.member_over(t, member.placement)  # (it has ended: its $TMPDIR goes, whatever it left)
        if member.killed == "allocation ends" and rc != 0:  # (rc 0: it finished first)
            self.hand_back(t, "the allocation ended while it ran", "the allocation is ending")
            return
        if rc in (-signal.SIGTERM, -signal.SIGKILL) and not member.killed:
            # killed by someone else: when the batch system ends the job it signals the
            # members and the pilot at once. Wait a moment for our own SIGTERM before
            # calling it the member's failure.
            self.signalled.append((time.time(), member, rc))
            return
        fields: dict[str, Any] = {}
        if member.killed:
            fields["why"] = member.killed
        elif rc == 0 and t.get("prod"):
            missing = missing_product(t["prod"])
            if missing:  # (pwe.products: it said it succeeded, but what it was to make is not there)
                rc, fields["why"] = 1, f"exited 0 without making its product {missing}"
        self.emit(END, n=t["n"], m=t["m"], a=t["a"], rc=rc, dt=round(time.time() - member.started, 3),
                  out=collect(t["cwd"]), **fields, **member.usage())
        self.next_in_group(t)

    def fail_unplaceable(self) -> None:
        """After a node died: members that no longer fit anywhere fail now, with the reason,
        instead of waiting for cores that will never come back."""
        keep: deque[dict] = deque()
        for task in self.queue:
            never = self.packer.why_never(*task_shape(task))
            if never:
                self.fail_now(task, 1, f"cannot be placed: {never}")
            else:
                keep.append(task)
        self.queue = keep

    def settle_signalled(self, now: float) -> None:
        keep = []
        for at, member, rc in self.signalled:
            t = member.task
            self.member_over(t, member.placement)  # (it has ended, whatever is said of it)
            if self.terminated:
                self.hand_back(t, "the batch system stopped the pilot while it ran", "the allocation is ending")
            elif now - at > _SIGNAL_GRACE:
                self.emit(END, n=t["n"], m=t["m"], a=t["a"], rc=rc, dt=round(at - member.started, 3),
                          out=collect(t["cwd"]), why=f"killed by signal {-rc}", **member.usage())
                self.next_in_group(t)
            else:
                keep.append((at, member, rc))
        self.signalled = keep

    def enforce_walltimes(self, now: float) -> None:
        for m in self.running.values():
            if m.deadline and now > m.deadline and not m.killed:
                m.killed = "timeout"
                m.term_at = now
                self.signal_member(m, signal.SIGTERM)
            elif m.killed and m.term_at and now - m.term_at > _KILL_GRACE:
                self.signal_member(m, signal.SIGKILL)
                m.term_at = 0.0

    def drain(self, now: float, why: str = "the allocation ends") -> None:
        """The allocation is about to end: hand back what has not started, stop what has
        (it would be killed anyway) and hand that back too: no attempt is spent."""
        if not self.draining:
            self.draining = True
            left = round(self.alloc.end - now, 1) if self.alloc.end else None
            self.emit(DRAIN, why=why, left=left)
            while self.chained:
                self.queue.appendleft(self.chained.pop())
            while self.queue:
                self.hand_back(self.queue.popleft(), "the allocation is ending")
        for m in self.running.values():
            if not m.killed:
                m.killed = "allocation ends"
                m.term_at = now
                self.signal_member(m, signal.SIGTERM)

    def cancel(self) -> None:
        self.cancelled = True
        self.queue.clear()
        self.chained.clear()
        for m in self.running.values():
            m.killed = "cancelled"
            self.signal_member(m, signal.SIGKILL)

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> int:
        rfd, wfd = os.pipe()
        os.set_blocking(wfd, False)
        os.set_blocking(rfd, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wfd)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_term)
        sel = self.sel = selectors.DefaultSelector()
        sel.register(rfd, selectors.EVENT_READ)
        for left in self.tmpdirs.sweep():  # what pilots of this run killed here (SIGKILL) left
            say(f"removed {left}, left by a pilot of this run that is gone")
        self.emit(UP, v=VERSION, pid=os.getpid(), host=socket.gethostname(), slots=self.slots,
                  allocation=self.alloc.kind, job=self.alloc.job_id, end=self.alloc.end, margin=self.margin,
                  nodes={n.name: self.packer.cap[n.name] for n in self.alloc.nodes})
        self.flush()
        try:
            why = self._loop(sel, rfd)
        except Exception as exc:
            # a defect in the pilot: say what it was, end the members it started (nobody
            # would reap or report them; the engine runs them again) and leave with a
            # reason the engine counts as a failure, never as a clean exit
            import traceback

            say("internal error, leaving:\n" + traceback.format_exc().rstrip())
            for m in self.running.values():
                self.signal_member(m, signal.SIGKILL)
            why = f"error: {type(exc).__name__}: {exc}"
        self.stop_setups()
        for agent in list(self.agents.values()) + list(self.spawners.values()):
            agent.close()  # its stdin closes: the agent leaves (killing any member it still runs)
        self.tmpdirs.close()  # (members' $TMPDIRs not removed yet: a member killed with the pilot)
        self.emit(DOWN, why=why)
        self.flush()
        return 1 if why.startswith("error") else 0

    def _loop(self, sel: selectors.BaseSelector, rfd: int) -> str:
        """Take tasks, start and reap members, report, until there is nothing left to do;
        why the pilot leaves."""
        last_hb = last_activity = time.time()
        while True:
            if not self.cancelled:
                if self.read_tasks():
                    last_activity = time.time()
                self.launch_ready()
            self.reap()
            if not self.cancelled:
                self.launch_ready()  # fill the slots just freed before sleeping
            now = time.time()
            left = self.time_left(now)
            if ((left is not None and left <= 0) or self.terminated) and not self.cancelled:
                self.drain(now, "the batch system stopped the pilot" if self.terminated else "the allocation ends")
            if self.signalled:
                self.settle_signalled(now)
            if self.running:
                last_activity = now
                self.enforce_walltimes(now)
            if now - last_hb >= self.heartbeat:
                self.emit(HB, running=len(self.running), queued=len(self.queue) + len(self.chained))
                last_hb = now
            self.flush()
            self.send_pending()  # (held while the disk refused their starts)
            if not self.running and not self.signalled and (
                    self.cancelled or self.draining or (self.stopping and not self.queue and not self.chained)):
                return ("cancel" if self.cancelled else "terminated" if self.terminated
                        else "walltime" if self.draining else "leave" if self.leaving else "stop")
            if not self.running and not self.queue and not self.chained and now - last_activity > self.idle_timeout:
                return "idle"
            # sleep until a child exits (SIGCHLD writes to the wakeup pipe) or it is time to
            # look for new tasks
            for key, _ in sel.select(timeout=self.poll if self.free > 0 else max(self.poll, 0.05)):
                if isinstance(key.data, NodeAgent):
                    self.read_agent(key.data)
                    continue
                try:
                    while os.read(rfd, 4096):
                        pass
                except BlockingIOError:
                    pass

    def _on_term(self, signum: int, _frame: Any) -> None:
        # the batch system is taking the allocation back (scancel, preemption, walltime):
        # not the members' fault; the loop hands them back (see drain)
        self.terminated = True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pilot", description="pwe glide-in pilot")
    ap.add_argument("--dir", required=True, help="the pilot's directory (tasks.jsonl, events.jsonl)")
    ap.add_argument("--slots", type=int, default=None, help="cores to fill on this machine (no batch system)")
    ap.add_argument("--hosts", default=None, help="explicit nodes: host:cores,host:cores")
    ap.add_argument("--hostfile", default=None, help="a file of 'host [cores]' lines")
    ap.add_argument("--launcher", default=None, choices=["auto", "fork", "srun", "ssh", "mpiexec"],
                    help="how members reach other nodes (default: by allocation)")
    ap.add_argument("--launcher-prefix", default=None, help="the launcher's command, with {node} {nodes} "
                    "{hosts} {nnodes} {ranks} {threads} {cwd}")
    ap.add_argument("--core-cap", type=int, default=None, help="most cores used per node (coreUsageRule)")
    ap.add_argument("--gpus-per-node", type=int, default=None, help="GPUs on each node (default: from the batch "
                    "system, or CUDA_VISIBLE_DEVICES here)")
    ap.add_argument("--memory-per-node", type=int, default=None, help="MB of memory on each node for members")
    ap.add_argument("--scratch", default=None, help="where members' own $TMPDIRs are made (the host's scratch; "
                    "default: $TMPDIR, else /tmp)")
    ap.add_argument("--tmp-per-node", type=int, default=None, help="MB of $TMPDIR space per node for members "
                    "(tmpPerMember; default: the free space under the tmp root)")
    ap.add_argument("--walltime", type=float, default=None, help="minutes until the allocation ends")
    ap.add_argument("--margin", type=float, default=None,
                    help="seconds before the end to stop and hand back (default: 60, or a tenth of a short walltime)")
    ap.add_argument("--heartbeat", type=float, default=5.0, help="seconds between heartbeats")
    ap.add_argument("--idle-timeout", type=float, default=300.0, help="leave after this long with nothing to do")
    ap.add_argument("--spawners", type=int, default=None,
                    help="local spawner processes that start this node's members (default: none below 8 slots, "
                         "one per 8 slots above; 0: the pilot starts them itself; or PWE_SPAWNERS)")
    ap.add_argument("--fsync", action="store_true", help="fsync events (a network filesystem between pilot and engine)")
    ap.add_argument("--secret", default=None, help="the run's secret (default: RUN/secret, the pilot's directory "
                    "being RUN/pilots/ID)")
    ap.add_argument("--transport", default="spool", choices=["spool", "redis"], help="how events travel")
    ap.add_argument("--broker", default=None, help="redis://host:port/db (--transport redis)")
    ap.add_argument("--broker-password-file", default=None, help="an owner-only file with the broker's password")
    args = ap.parse_args(argv)
    try:
        alloc = discover(hosts=args.hosts, hostfile=args.hostfile, cores=args.slots, walltime_minutes=args.walltime,
                         gpus_per_node=args.gpus_per_node, memory_per_node=args.memory_per_node)
    except (ValueError, OSError) as exc:  # a node that is no host name, a host file that cannot be read
        ap.exit(2, f"python -m pilot: the allocation's nodes: {exc}\n")
    if args.margin is None:
        args.margin = min(60.0, args.walltime * 6) if args.walltime else 60.0
    os.chdir(args.dir)
    directory = os.path.abspath(args.dir)
    try:
        key_out, key_in = keys(directory, args.secret)
        transport: Transport
        if args.transport == "redis":
            from .broker import PilotRedis, read_password

            password = read_password(args.broker_password_file) if args.broker_password_file else None
            transport = PilotRedis(directory, args.broker or "", password, args.fsync, key_out, key_in)
        else:
            transport = PilotSpool(directory, args.fsync, key_out, key_in)
    except (ValueError, OSError) as exc:  # a secret or password others may read, a broker URL that is none
        ap.exit(2, f"python -m pilot: {exc}\n")
    pilot = PilotAgent(directory, alloc, args.heartbeat, args.idle_timeout, args.fsync,
                  launcher=args.launcher, launcher_prefix=args.launcher_prefix, core_cap=args.core_cap,
                  margin=args.margin, spawners=args.spawners, transport=transport, scratch=args.scratch,
                  tmp_per_node=args.tmp_per_node)
    sys.exit(pilot.run())

