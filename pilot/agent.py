"""The pilot's main loop: read tasks, launch members, reap them, report events.

The pilot talks to the engine through its transport (:mod:`pilot.transport`: today two
JSON-lines files in its own directory, each with one writer); the messages, their kinds
and fields are listed once, in :mod:`pilot.wire`.

The pilot does not need the engine to be alive: it keeps running what it was given and
its events wait for an engine to read them.

The agent is composed (issue 46): it holds its parts, each made once in ``__init__`` and
given what it uses (the shared queue and running members, the allocation, the packer,
the pilot's stage, callables such as ``emit`` or ``hand_back``), never the agent:
``intake`` (intake.py: what the engine sends, groups, leave, cancel), ``endings``
(endings.py: walltimes, memory, drain, signals, a spawn refused for now, the run
directory gone), ``setups`` (nodesetup.py), ``scratch`` (tmpdirs.py: members' $TMPDIRs and
output files, a node without scratch), ``losses`` (nodewatch.py: nodes lost), ``remote``
(remote.py: other nodes' agents, over ssh or srun) and ``spawners`` (spawners.py: local
spawners), the last two over ``helpers`` (remote.py: what they share). Its life is one
:class:`pilot.phase.PilotPhase` in ``life`` (shared with the parts), moved only along its
table; the SIGTERM of the batch system is a note beside it (``endings.term_heard``). What
has state of its own and no call back into the pilot is apart (members.py, packing.py,
transport.py, broker.py, streams.py); the command line is __main__.py.

Why this module stays over 450 lines: what is left in it is the loop and the path every
member takes through it (launch, spawn, reap, finish, and what an agent or spawner says
of its members: read_agent), the pilot's per-member hot path, kept inline in one place so
that its cost is read, profiled (bench/pilot_profile.py) and changed in one sitting, and
``__init__``, where the parts are made and wired; each job that could leave it has gone
to a part above.
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import time
from typing import Any

from .allocation import Allocation, discover, hostname, visible_gpus
from .launchers import PREFIXES, choose, srun_refused, wrap
from .packing import Packer, Placement
from .phase import Life, PilotPhase
from .tmpdirs import MemberTmp, TmpDirs
from .spawn import (REFUSED_FOR_NOW, DirectoryError, Spawner, environ, make_member_dir, member_base_env, open_node_dir,
                    reaped, start_failure, writable)
from .guardian import MemberTable
from .members import (INVALID_OUTPUT, KILLED, Member, argv_for, collect, killpg, note_stderr, outputs_path,
                      product_fault, say, task_shape)
from .memwatch import MemoryWatch
from .endings import RUN_GONE, Endings, when_ended
from .intake import TaskIntake
from .nodesetup import SETUP_FAILED, NodeSetup
from .nodewatch import NodeLosses, NodeWatch, slurmd_port
from .remote import Helpers, NodeAgent, RemoteNodes
from .spawners import LocalSpawners, spawner_count
from .pyworkers import PyWorker, PyWorkers, outputs
from .streams import StreamWriter, tail
from .transport import PilotSpool, Transport, keys
from .wire import (AGENT_ENDED, AGENT_FAILED, AGENT_KILL, AGENT_ORPHANS, AGENT_STARTED, DOWN, END, HB, REASON_INVALID,
                   REASON_OOM, REASON_WALLTIME, START, UNWRITABLE, UP, VERSION)



FIRST_POLL = 0.002  # s between looks for the first task, in the first second (protocols/warmpilot.py)


class PilotAgent:
    """One pilot: fills the cores of its allocation's nodes with members."""

    def __init__(self, directory: str, allocation: Allocation | int, heartbeat: float = 5.0,
                 idle_timeout: float = 300.0, fsync: bool = False, poll: float = 0.02,
                 launcher: str | None = None, launcher_prefix: str | None = None, core_cap: int | None = None,
                 margin: float = 60.0, spawners: int | None = None, transport: Transport | None = None,
                 scratch: str | None = None, tmp_per_node: int | None = None, table: MemberTable | None = None,
                 orphan_key: bytes | None = None):
        if isinstance(allocation, int):  # a number of slots on this machine
            allocation = discover(env={}, cores=allocation)
        self.dir = directory
        self.alloc = allocation
        self.life = Life()  # the pilot's stage (pilot/phase.py): RUNNING until it is told or found otherwise
        self.tmpdirs = TmpDirs(directory, scratch)  # each member attempt's own $TMPDIR
        # members' stdout/stderr: captured in node-local scratch, kept in this pilot's stream
        self.streams = StreamWriter(directory, "out-pilot",
                                    scratch=self.tmpdirs.root if not self.tmpdirs.error else None)
        self.node_dirs: dict[str, int] = {}  # the directories members run in when not their own: opened once
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
        self.running: dict[int, Member] = {}
        # (none given: the spool, signed with the run's secret when the pilot finds it)
        self.transport = transport or PilotSpool(directory, fsync, *keys(directory))
        self._out: list[dict[str, Any]] = []
        self.write_blocked = False
        self._unwritable = ""  # the last member directory that refused, said once in pilot.log
        self._base_env = member_base_env()
        self._visible_gpus = visible_gpus(os.environ) or []
        self.spawner = Spawner()
        self.memory = MemoryWatch()  # members' memoryPerMember, of those it starts itself (pilot/memwatch.py)
        self.table = table  # shared with the guardian (pilot/guardian.py), if any
        self._to_report: list[int] = []  # its entries of members collected since the last write
        self.sel: selectors.BaseSelector | None = None  # (the loop's: run)
        self.watch: NodeWatch | None = None  # the other nodes' liveness (SLURM: their slurmd), from run

        # its parts, each given what it uses (never the agent): ARCHITECTURE.md draws them
        self.setups = NodeSetup(directory, allocation, self.packer, launcher, launcher_prefix, self.emit,
                                self.tmpdirs.base)
        self.intake = intake = TaskIntake(self.transport, self.life, self.running, self.emit, self.signal_member,
                                          self.setups.take_setup)
        self.queue, self.chained, self.taken = intake.queue, intake.chained, intake.taken  # (shared, never rebound)
        self.hand_back, self.next_in_group, self.read_tasks = intake.hand_back, intake.next_in_group, intake.read_tasks
        self.endings = Endings(directory, self.life, allocation, self.running, self.memory, self.emit,
                               self.signal_member, self.member_over, intake.hand_back, intake.hand_back_held,
                               intake.next_in_group, intake.straggle)
        self.signalled = self.endings.signalled  # (shared, never rebound)
        self.scratch = MemberTmp(self.tmpdirs, self.streams, self.packer, allocation, self.queue, self.life,
                                 intake.hand_back_held)
        self.losses = NodeLosses(self.packer, self.running, self.queue, self.streams, self.emit, intake.hand_back,
                                 self.fail_now)
        self.helpers = Helpers(directory, self.streams, table, orphan_key)
        self.remote = RemoteNodes(self.helpers, self.tmpdirs, self.packer, self.running, launcher_prefix,
                                  self.losses, self.emit, intake.hand_back, self.finish, self.scratch.scratch_refused)
        # many slots here: members are started by local spawners (pilot/spawners.py)
        self.spawners = LocalSpawners(
            self.helpers, spawner_count(sum(self.packer.cap[n.name] for n in allocation.nodes if n.local), spawners),
            self.running, self.queue, self.packer, self.emit, self.flush, self.finish)
        # function members (python: package.module:function): calls to warm workers here (pilot/pyworkers.py)
        self.pyworkers = PyWorkers(
            directory, self._base_env, sum(self.packer.cap[n.name] for n in allocation.nodes if n.local),
            self.running, self.packer, self.memory, self.streams, self.emit, self.flush, self.finish, self.fail_now,
            self.member_over, table, self._seen_over if table is not None else None)

    @property
    def free(self) -> int:
        return sum(self.packer.free.values())

    # -- events ---------------------------------------------------------------------------
    def emit(self, kind: str, **fields: Any) -> None:
        fields["k"] = kind
        if "t" not in fields:  # (an end says when the member ended: finish, settle_signalled)
            fields["t"] = round(time.time(), 3)
        self._out.append(fields)

    def flush(self) -> bool:
        """Send the pending events, one write; False (events held) when the disk refuses them."""
        if not self._out and not self.transport.held:
            return True
        out, self._out = self._out, []
        reported, self._to_report = self._to_report, []
        try:
            self.transport.send(out)
            if self.table is not None:  # (their ends are in the events now: the guardian need not tell)
                for k in reported:
                    self.table.reported(k)
        except OSError as exc:
            self._to_report = reported + self._to_report
            # disk full or quota: the transport holds what was not written; start no member
            # until it is (their events would have nowhere to go)
            if not self.write_blocked:
                say(f"cannot write events: {exc.strerror}; holding them, starting no member until they are written")
            self.write_blocked = True
            return False
        self.write_blocked = False
        return True

    # -- members --------------------------------------------------------------------------
    def launch(self, task: dict, placement: Placement, ranks: int, threads: int, exclusive: bool) -> None:
        cwd = task["cwd"]
        if "_then" in task and len(placement) == 1:
            task["_on"] = placement[0][0].name  # (a group's: its next member goes there too)
        where = self.start_dir(task, placement, threads, exclusive)
        if where is None:
            return
        member_env = dict(task.get("env") or {})
        if not self.scratch.member_tmpdir(task, placement, threads, exclusive, member_env):
            return
        member_env["PWE_OUTPUTS"] = task["_out"] = outputs_path(
            task, self.tmpdirs.base if "PWE_TMPDIR" in member_env else None)
        if placement.gpu_ids:  # the GPUs of its node that are this member's alone
            ids = [str(j) for j in placement.gpu_ids]
            if placement[0][0].local and self._visible_gpus:
                # the allocation's own GPU ids here (SLURM may give the job devices 2,3)
                ids = [self._visible_gpus[j] if j < len(self._visible_gpus) else str(j) for j in placement.gpu_ids]
            member_env["CUDA_VISIBLE_DEVICES"] = member_env["PWE_GPUS"] = ",".join(ids)
        self.setups.prepare(task, placement, member_env)  # (its modules' environment here, its container's argv)
        if "py" in task:  # a function member: a call to a warm worker of its function (pilot/pyworkers.py)
            self.call(task, placement, threads, exclusive, member_env)
            return
        env = environ(self._base_env, member_env)
        launcher = choose(self.alloc.kind, placement, ranks, self.launcher)
        if launcher == "fork" and self.spawners.count and self.spawners.launch_on_spawner(task, placement, threads,
                                                                                          exclusive, member_env):
            return
        # the host's prefix is for the launcher it chose (or for any, when it chose none)
        prefix = self.launcher_prefix if self.launcher in (None, "auto", launcher) else None
        chosen = self.launcher in (None, "auto")
        if len(placement) == 1 and ranks == 1 and (launcher == "ssh" or (launcher == "srun" and chosen)):
            # through that node's agent: one ssh session, or one srun step, per node for the
            # pilot's life, not one per member (pilot/remote.py). A host that names srun
            # itself gets a step per member (SLURM accounts and confines each)
            self.remote.launch_on_agent(task, placement, threads, exclusive, member_env, launcher)
            return
        if launcher == "srun" and ranks > 1 and prefix is None:
            from .mpi import srun_mpi

            plugin = srun_mpi()  # (MpiDefault none: PMIx, so that its ranks are one MPI job)
            if plugin:
                prefix = PREFIXES["srun"].replace("srun ", f"srun --mpi={plugin} ", 1)
        if launcher == "mpiexec" and prefix is None:
            from .mpi import find as find_mpi  # (only members of several ranks pay for it)

            mpi = find_mpi()
            if isinstance(mpi, str):  # never through a launcher that would not run the payload
                self.packer.release(placement, threads, exclusive)
                self.fail_now(task, 127, f"cannot start {ranks} ranks: {mpi}")
                self.member_over(task, placement)
                return
            prefix = mpi.prefix(sorted(k for k, v in member_env.items() if v is not None))
        inner = task.get("_argv")  # (inside its container: pilot/containers.py)
        argv = wrap(launcher, inner or argv_for(task["cmd"]), task["cmd"], placement, ranks, threads, cwd, member_env,
                    prefix, inner)
        fds = self.scratch.capture(task, placement, threads, exclusive)  # (before its start is said: tmpdirs.py)
        if fds is None:
            return
        # its start on disk before it exists (one write, no fsync): a pilot killed at any
        # moment, even inside the spawn, leaves no member running that the engine does not
        # know of (it finds it by its environment and ends it before running it again)
        self.emit(START, n=task["n"], m=task["m"], a=task["a"], nodes=[n.name for n, _ in placement])
        self.flush()
        try:
            pid = self.spawner.spawn(argv, env, where, task["cmd"], fds, made=True)
        except OSError as exc:
            self.streams.drop(fds)
            self.spawn_failed(task, placement, threads, exclusive, cwd, exc)
            return
        task["_io"] = (*fds, pid)  # (kept into the stream as it ends: member_over)
        self.spawned(Member(task, pid, placement, threads, exclusive, launcher))

    def call(self, task: dict, placement: Placement, threads: int, exclusive: bool, member_env: dict) -> None:
        """A function member: on this node, a call to the pilot's own workers; on another, to
        its node agent's (one ssh session or srun step per node, as its commands)."""
        if placement[0][0].local:
            self.pyworkers.launch(task, placement, threads, exclusive, member_env, self.scratch.capture)
        else:
            self.remote.launch_on_agent(task, placement, threads, exclusive, member_env,
                                        "srun" if self.alloc.kind == "slurm" else "ssh")

    def spawn_failed(self, task: dict, placement: Placement, threads: int, exclusive: bool, cwd: str,
                     exc: OSError) -> None:
        """A member whose spawn failed, its start said already. Its directory that refused
        its stdout (made a moment before it turned read-only): the run's cause. Its node's
        limit of processes or memory (EAGAIN: a cgroup's pids.max, ``ulimit -u``; ENOMEM):
        not the member's doing and not for good, so it goes back (no attempt spent) and
        nothing more starts here until a member ends (or a pause that doubles, while none
        runs): a node at its limit is not a black hole that fails a sweep. Else (not
        found, not executable): the member fails, the pilot goes on."""
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and not writable(cwd):
            self.unwritable(task, placement, threads, exclusive, cwd, exc.strerror)
        elif exc.errno in REFUSED_FOR_NOW:
            self.packer.release(placement, threads, exclusive)
            self.endings.refused_for_now(task, placement[0][0].name, exc.strerror)
        else:
            self.packer.release(placement, threads, exclusive)
            self.fail_now(task, *start_failure(exc))
        self.member_over(task, placement)

    def start_dir(self, task: dict, placement: Placement, threads: int, exclusive: bool) -> str | int | None:
        """Where a member starts (:meth:`member_cwd`), or None when it cannot start: a
        directory that takes no files is the run's cause (handed back, the run stops); one
        that cannot be a directory (too long, a file in the way) fails the member."""
        try:
            return self.member_cwd(task)
        except DirectoryError as exc:
            self.unwritable(task, placement, threads, exclusive, exc.filename, exc.strerror)
        except OSError as exc:
            self.packer.release(placement, threads, exclusive)
            self.fail_now(task, *start_failure(exc))
        return None

    def member_cwd(self, task: dict) -> str | int:
        """Where a member starts: its own directory, made now (``own``), or its node's, made
        and opened once (a descriptor: pilot.spawn.open_node_dir); DirectoryError when it
        takes no files (the run directory is shared: this is the other nodes' too)."""
        cwd = task["cwd"]
        if task.get("own"):
            make_member_dir(cwd)
            return cwd
        fd = self.node_dirs.get(cwd)
        if fd is None:
            fd = self.node_dirs[cwd] = open_node_dir(cwd)
        return fd

    def spawned(self, member: Member) -> None:
        """A member this pilot started itself: running, known to its guardian, its memory limited."""
        task, pid = member.task, member.pid
        self.running[pid] = member
        if task.get("mem") and member.launcher == "fork":  # (srun and mpiexec: the batch system's to confine)
            self.memory.attach(pid, pid, int(task["mem"]))
        if self.table is not None:
            self.table.spawned(pid, task["n"], task["m"], task["a"])

    def member_over(self, task: dict, placement: Placement) -> None:
        """A member attempt that has ended (or never started): what it wrote on stdout and
        stderr into the pilot's stream (with the lines the pilot added), its $TMPDIR gone
        (its tmp space went back to the pool with its cores: Packer.release)."""
        io = task.pop("_io", None)
        if io is not None:
            self.streams.keep(task["n"], task["m"], task["a"], io, task.pop("_note", ""))
        self.tmpdirs.remove(task["n"], task["m"], task["a"])

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
            m.agent.send(k=AGENT_KILL, id=m.key, sig=int(sig))
        else:
            killpg(m.pid, sig)

    def fail_now(self, task: dict, rc: int, why: str) -> None:
        note_stderr(self.streams, task, f"{why}: {task['cmd']}")
        self.emit(END, n=task["n"], m=task["m"], a=task["a"], rc=rc, why=why, dt=0.0, out={})
        self.next_in_group(task)

    def time_left(self, now: float) -> float | None:
        return None if self.alloc.end is None else self.alloc.end - self.margin - now

    def launch_ready(self) -> None:
        while self.chained:  # (a group's next member: first in line, into the slot just freed)
            self.queue.appendleft(self.chained.pop())
        setups = self.setups
        if setups.setup_procs:
            setups.poll_setups()
        if self.write_blocked or self.life.phase.drained:
            return
        if self.scratch.no_scratch:  # (what came since no node had scratch for a member: back, as it comes)
            self.scratch.hand_back_queued()
            return
        now = time.time()
        left = self.time_left(now)
        # first fit over a short look-ahead, so one wide member does not stall narrow ones
        i = 0
        # (none while its node refuses spawns for now: spawn_failed)
        endings, pending = self.endings, self.spawners.pending
        while i < len(self.queue) and i < 64 and self.free > 0 and endings.spawn_paused_until <= now:
            task = self.queue[i]
            shape = task_shape(task)
            ranks, threads, exclusive = shape[:3]
            wall = task.get("wall")
            if left is not None and wall and wall * 60 > left:
                # it cannot finish before the allocation ends: the next pilot runs it
                del self.queue[i]
                self.hand_back(task, f"needs {wall:g} min, {max(left, 0) / 60:.1f} min left in this allocation")
                continue
            never = self.losses.why_never(shape)
            if never:
                del self.queue[i]
                self.fail_now(task, 1, f"cannot be placed: {never}")
                continue
            if setups.setup_failed_everywhere(task):  # (pilot/nodesetup.py) another pilot runs it
                del self.queue[i]
                self.hand_back(task, SETUP_FAILED)
                continue
            placement = setups.place_for(task, shape, task.get("_near"))
            if placement is None:
                i += 1
                continue
            del self.queue[i]
            self.launch(task, placement, ranks, threads, exclusive)
            # (a member of another node: its start, as its agent starts it; members for
            # local spawners: their starts in one write, after the pass)
            if not pending and not self.flush():
                return
        self.spawners.send_pending()

    def _seen_over(self, pid: int, rc: int) -> None:
        """A child that has ended, before it is collected: into the guardian's table first."""
        k = self.table.over(pid, rc)  # (given to reaped() only when there is a table)
        if k is not None:
            self._to_report.append(k)

    def reap(self) -> None:
        for pid, rc, cpu, rss in reaped(lambda: self.running, self._seen_over if self.table is not None else None):
            at = time.time()  # (when it ended, as near as the pilot knows: its end's t)
            if self.pyworkers.pool.retired:  # (a worker killed earlier, collected here: never waited for again)
                self.pyworkers.pool.reaped(pid)
            member = self.running.pop(pid, None)
            if member is None:
                self.setups.setup_reaped(pid, rc)  # (a setup_per_node's process, or nothing of ours)
                continue
            if self.endings.spawn_paused_until:
                self.endings.spawns_may_go()
            member.cpu, member.rss = cpu, rss
            if "py" in member.task:  # (a worker that died mid-call: why, pilot/pyworkers.py)
                self.pyworkers.died(pid, member, rc)
            if self.memory.limits:
                over = self.memory.ended(pid, rss, rc)  # (its cgroup is done with; killed for memory: why)
                if over and (not member.killed or member.reason == REASON_OOM):
                    member.killed, member.reason = over, REASON_OOM
            self.packer.release(member.placement, member.threads, member.exclusive)
            t = member.task
            lost = self.losses.lost_node_of(member)
            if lost:  # its node died under it: not the member's fault, whatever its launcher said
                self.losses.member_lost(t, lost, self.losses.lost_why(lost))
                self.member_over(t, member.placement)
                continue
            if member.launcher == "srun" and rc and not member.killed:
                refused = srun_refused(tail(t["_io"][1])) if "_io" in t else None
                if refused:  # the allocation is going: srun's failure, not the member's
                    self.member_over(t, member.placement)
                    self.hand_back(t, f"srun could not start it: {refused}")
                    continue
                if rc > 0:  # (srun's own words may be others: wait a moment for our SIGTERM)
                    self.signalled.append((at, member, rc))
                    continue
            self.finish(member, rc, at)

    def finish(self, member: Member, rc: int, at: float | None = None) -> None:
        """Report a member that ended (its cores are already released) at ``at`` (when it
        was reaped; None: now). Its end's ``t`` is that time, whenever it is sent, so that
        ``t - dt`` is its start and its end comes before what started in its slot after it."""
        if at is None:
            at = time.time()
        t = member.task
        self.member_over(t, member.placement)  # (it has ended: its $TMPDIR goes, whatever it left)
        if member.killed == "allocation ends" and rc != 0:  # (rc 0: it finished first)
            self.hand_back(t, "the allocation ended while it ran", "the allocation is ending")
            return
        if member.killed == RUN_GONE and rc != 0:
            self.hand_back(t, RUN_GONE)
            return
        if rc in KILLED and not member.killed:
            # killed by someone else: when the batch system ends the job it signals the
            # members and the pilot at once (a member's shell says so as 143 or 137). Wait
            # a moment for our own SIGTERM before calling it the member's failure.
            self.signalled.append((at, member, rc))
            return
        fields: dict[str, Any] = {}
        if member.killed:
            fields["why"] = member.killed
            if member.reason:
                fields["reason"] = member.reason
        elif rc == 0 and t.get("prod"):
            fault = product_fault(t["prod"], t.get("pmin"))
            if fault:  # (pwe.planning.products: it said it succeeded, but what it was to make is not there, or short)
                rc, fields["why"], fields["reason"] = 1, fault, REASON_INVALID
        out = collect(t)
        mark = out.pop(INVALID_OUTPUT, None)  # (pwe's own, never an output: as pwe.engine.recovery.judged takes it)
        if rc and not member.killed and mark is not None:  # (pwe/planning/validate.py)
            fields["why"], fields["reason"] = f"its validate exited {rc}: the result is not good", REASON_INVALID
        elif rc and not member.killed and t.get("sim") in (REASON_OOM, REASON_WALLTIME):
            # (pwe run --simulate --fail QUERY@oom: a rehearsal's member, failing as one killed so would)
            fields["why"], fields["reason"] = f"pwe --simulate: a simulated {t['sim']}", t["sim"]
        self.emit(END, n=t["n"], m=t["m"], a=t["a"], rc=rc, out=out, **when_ended(at, member.started),
                  **fields, **member.usage())
        self.next_in_group(t)

    def read_agent(self, agent: NodeAgent) -> None:
        """What a node agent or local spawner said of its members (a spawner's members
        end here: the per-member path); its session ended: what it ran goes back."""
        msgs = agent.read()
        if msgs is None:  # the session ended: the node died, or its agent did
            if agent.local:
                self.spawners.spawner_lost(agent)
            else:
                self.remote.agent_lost(agent)
            return
        for msg in msgs:
            member = agent.members.get(msg.get("id"))
            if member is None:
                continue
            if msg["k"] == AGENT_STARTED:
                member.pid = msg["pid"]
            elif msg["k"] in (AGENT_ENDED, AGENT_FAILED):
                member.cpu, member.rss = msg.get("cpu"), msg.get("rss")
                if msg.get("reason") and not member.killed:  # (its agent killed it: for memory)
                    member.killed, member.reason = msg.get("why") or msg["reason"], msg["reason"]
                elif msg.get("why") and not member.killed:  # (a function member's failure a traceback does not say)
                    member.killed = str(msg["why"])[:1000]
                if msg.get("out"):  # (a function member's return value: pilot/pyworkers.py)
                    member.task["_ret"] = outputs(msg)
                agent.members.pop(member.key, None)
                self.running.pop(member.key, None)
                self.packer.release(member.placement, member.threads, member.exclusive)
                if msg["k"] == AGENT_ENDED and self.endings.spawn_paused_until:
                    self.endings.spawns_may_go()
                if msg["k"] == AGENT_FAILED and msg.get("scratch"):  # (its node's, not the member's)
                    self.scratch.scratch_refused(agent.node, str(msg.get("why")), member.task)
                elif msg["k"] == AGENT_FAILED and msg.get("again"):  # (its node's limit, for now: endings.py)
                    self.endings.refused_for_now(member.task, agent.node, str(msg.get("why")))
                elif msg["k"] == AGENT_FAILED:
                    self.fail_now(member.task, msg["rc"], msg["why"])
                else:
                    self.finish(member, msg["rc"])

    # -- main loop ------------------------------------------------------------------------
    def run(self) -> int:
        rfd, wfd = os.pipe()
        os.set_blocking(wfd, False)
        os.set_blocking(rfd, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(wfd)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_term)
        sel = self.sel = self.helpers.sel = self.pyworkers.sel = selectors.DefaultSelector()
        sel.register(rfd, selectors.EVENT_READ)
        others = [n.name for n in self.alloc.nodes if not n.local]
        if self.alloc.kind == "slurm" and others:
            self.watch = self.losses.watch = NodeWatch(others, slurmd_port(), sel, every=min(1.0, self.heartbeat / 5))
        for left in self.tmpdirs.sweep():  # what pilots of this run killed here (SIGKILL) left
            say(f"removed {left}, left by a pilot of this run that is gone")
        self.emit(UP, v=VERSION, pid=os.getpid(), host=hostname(), slots=self.slots,
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
        self.setups.stop_setups()
        if self.watch is not None:
            self.watch.close()
        for agent in list(self.remote.agents.values()) + list(self.spawners.agents.values()):
            if agent.orphans is not None:
                # (a close on purpose: what it still runs was handed back, so no grace, no orphans)
                agent.send(k=AGENT_ORPHANS, grace=0)
                self.helpers.gone(agent)
            agent.close()  # its stdin closes: the agent leaves (killing any member it still runs)
        self.pyworkers.close()
        self.memory.close()  # (members' cgroups, then its own)
        self.tmpdirs.close()  # (members' $TMPDIRs not removed yet: a member killed with the pilot)
        self.streams.close()
        self.emit(DOWN, why=why)
        self.flush()
        return 1 if why.startswith("error") else 0

    def _loop(self, sel: selectors.BaseSelector, rfd: int) -> str:
        """Take tasks, start and reap members, report, until there is nothing left to do;
        why the pilot leaves."""
        last_hb = last_activity = began = time.time()
        fed = False  # (until its first task: looked for every FIRST_POLL s, for at most a second)
        life, endings, remote = self.life, self.endings, self.remote
        while True:
            if not life.phase.ended:
                # (the tasks file is read on every pass: a halt, a drain or a cancel is heard
                # before the next member starts. Reading it only once a poll while the queue
                # was deep saved a tenth of the pilot's CPU, but let 20 ms of members start
                # after a halt: tests/engine/test_halt.py saw one more failure than the budget)
                if self.read_tasks():
                    last_activity, fed = time.time(), True
                    if self.packer.dead:  # (what came in may fit on no node that is left)
                        self.losses.fail_unplaceable()
                self.launch_ready()
            if self.watch is not None:
                self._watch_nodes()
            self.reap()
            if not life.phase.ended:
                self.launch_ready()  # fill the slots just freed before sleeping
            now = time.time()
            self._stop_if_told(now)
            if remote.awaited:
                remote.settle_awaited(now)
            if self.running:
                last_activity = now
                endings.enforce_walltimes(now)
                if self.memory.limits:
                    endings.enforce_memory(now)
            if now - last_hb >= self.heartbeat:
                self.emit(HB, running=len(self.running), queued=len(self.queue) + len(self.chained))
                last_hb = now
                endings.look_home()
            self.flush()
            self.spawners.send_pending()  # (held while the disk refused their starts)
            why = self._why_leave(now, last_activity)
            if why is not None:
                return why
            # sleep until a child exits (SIGCHLD writes to the wakeup pipe) or it is time to look for tasks
            wait = self.poll if self.free > 0 else max(self.poll, 0.05)
            self._sleep(sel, rfd, wait if fed or now - began > 1.0 else FIRST_POLL)

    def _watch_nodes(self) -> None:
        """Probe the allocation's other nodes (nodewatch.py); hand back what ran on a node found lost."""
        self.watch.tick()
        if self.watch.lost:
            for name in self.watch.take_lost():
                self.losses.lose_node(name)
                agent = self.remote.agents.get(name)
                if agent is not None:  # members over ssh: their session goes too
                    self.remote.agent_lost(agent, dead=True)
                self.losses.fail_unplaceable()

    def _stop_if_told(self, now: float) -> None:
        """Drain when the batch system stops the pilot or the allocation ends; carry on
        ending members after a signal."""
        left = self.time_left(now)
        endings = self.endings
        if ((left is not None and left <= 0) or endings.term_heard) and not self.life.phase.ended:
            endings.drain(now, "the batch system stopped the pilot" if endings.term_heard else "the allocation ends")
        if self.signalled:
            endings.settle_signalled(now)

    def _why_leave(self, now: float, last_activity: float) -> str | None:
        """Why the pilot leaves now (nothing runs and nothing is left to do), or None."""
        if self.running or self.remote.awaited:
            return None
        phase = self.life.phase
        if not self.signalled and (phase.drained or phase.ended or (
                phase is not PilotPhase.RUNNING and not self.queue and not self.chained)):
            return phase.word
        if not self.queue and not self.chained and now - last_activity > self.idle_timeout:
            return "idle"
        return None

    def _sleep(self, sel: selectors.BaseSelector, rfd: int, timeout: float) -> None:
        """Wait up to timeout for a node agent's message, a node watcher's reply or the
        wakeup pipe (a child exited), and take what came."""
        for key, _ in sel.select(timeout=timeout):
            if isinstance(key.data, NodeAgent):
                self.read_agent(key.data)
                continue
            if isinstance(key.data, NodeWatch):
                key.data.ready(key.fileobj)
                continue
            if isinstance(key.data, PyWorker):
                self.pyworkers.ready(key.data)
                continue
            try:
                while os.read(rfd, 4096):
                    pass
            except BlockingIOError:
                pass

    def _on_term(self, signum: int, _frame: Any) -> None:
        # the batch system is taking the allocation back (scancel, preemption, walltime):
        # not the members' fault; the loop hands them back (Endings.drain), unless cancelled
        self.endings.term_heard = True

