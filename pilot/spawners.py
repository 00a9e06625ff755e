"""Local spawners: on a node with many slots, members are started by a few child
processes of the pilot instead of the pilot itself (standard library only).

One process that starts every member is the ceiling on a big node: posix_spawn waits
in vfork until the child has exec'd, and the pilot also reads tasks, writes events and
reaps. So with many local slots the pilot starts ``spawner_count`` spawners: each is a
:mod:`pilot.nodeagent` (the very program that starts members on other nodes) run here
over pipes instead of ssh, speaking its JSON lines (never pickle). The pilot keeps
everything else: packing, the member's directory, its ``start`` written before the member
is handed over (one write for all the members handed over in one pass), timeouts,
cancels, drains. Each spawner starts and reaps the members it is given and says each
one's exit status and rusage (``cpu``, ``rss``) back.

A spawner that dies (it should not) has the members it ran killed by process group and
run again (no result came back, as for a node that still answers); the next member
starts a new spawner.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import deque
from collections.abc import Callable

from .members import Member, argv_for, say
from .packing import Packer, Placement
from .remote import Helpers, NodeAgent
from .settings import SPAWNERS
from .wire import AGENT_RUN, START

#: Slots one spawner serves. Below this many local slots the pilot spawns by itself, as
#: it always did (a second process buys nothing on a few cores and costs a pipe message
#: each way per member).
SLOTS_PER_SPAWNER = 8
#: Where the node has the cores for it, one spawner per this many slots: on 16 cores, 16
#: slots of `true` ran at 0.91 of the bare spawn loop with 4 spawners, 0.78 with 2 and
#: 0.85 with 8 (bench/dispatch_cores.py, 20,000 members, 2026-11-26; BENCHMARKS.md).
SLOTS_PER_SPAWNER_MANY_CORES = 4
MAX_SPAWNERS = 16


def spawner_count(local_slots: int, asked: int | None = None, cores: int | None = None) -> int:
    """How many local spawners for this many slots on the pilot's node: ``asked`` when
    given (``--spawners``, ``PWE_SPAWNERS``; 0: the pilot spawns by itself), else none
    below :data:`SLOTS_PER_SPAWNER` slots and one per that many above; on a node of
    ``cores`` cores (default: those this process may run on), up to one per
    :data:`SLOTS_PER_SPAWNER_MANY_CORES` slots, at most a quarter of the cores (on few
    cores the spawners would take the members' turn)."""
    if asked is None:
        asked = SPAWNERS.get()
    if asked is not None:
        return max(0, asked)
    if local_slots < SLOTS_PER_SPAWNER:
        return 0
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    wide = min(-(-local_slots // SLOTS_PER_SPAWNER_MANY_CORES), cores // 4)
    return min(MAX_SPAWNERS, max(-(-local_slots // SLOTS_PER_SPAWNER), wide))


class LocalSpawners:
    """The part of :class:`pilot.agent.PilotAgent` that hands local members to spawners:
    it holds the spawners by index (``agents``) and the members placed in this pass
    (``pending``); it is given the helpers' shared ground (remote.py), how many spawners,
    the pilot's running members, queue and packer, and the callables it calls."""

    def __init__(self, helpers: Helpers, count: int, running: dict[int, Member], queue: deque[dict],
                 packer: Packer, emit: Callable[..., None], flush: Callable[[], bool],
                 finish: Callable[..., None]):
        self.helpers = helpers
        self.dir = helpers.dir
        self.count = count  # how many (spawner_count; 0: the pilot starts its members itself)
        self.running = running
        self.queue = queue
        self.packer = packer
        self.emit = emit
        self.flush = flush
        self.finish = finish
        self.agents: dict[int, NodeAgent] = {}
        self.pending: list[tuple[Member, dict]] = []  # handed to spawners once their starts are written

    def start_spawner(self, i: int) -> NodeAgent | None:
        import subprocess

        import pilot as pkg

        root = os.path.dirname(os.path.dirname(os.path.abspath(pkg.__file__)))
        # its members start from its environment: the pilot's own, PYTHONPATH changed only
        # where the pilot package was not on it already
        env = dict(os.environ)
        if root not in env.get("PYTHONPATH", "").split(os.pathsep):
            env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log = os.path.join(self.dir, f"spawner-{i}.log")
        try:
            # -S: no site-packages to read (standard library only, found through PYTHONPATH);
            # its own session: a signal to the pilot's process group (Ctrl-C, the batch
            # system's SIGTERM) reaches the pilot, which stops the members through it
            argv = [sys.executable, "-S", "-m", "pilot.nodeagent"] + self.helpers.stream_for(f"spawner-{i}", here=True)
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=open(log, "ab"),
                                    env=env, cwd=self.dir, start_new_session=True)
        except OSError as exc:
            say(f"cannot start local spawner {i}: {exc}; the pilot starts its members itself")
            return None
        agent = NodeAgent(f"spawner-{i}", proc, self.helpers.sel)
        agent.local = True
        self.agents[i] = agent
        # should the pilot die, its members are the spawner's children, not the guardian's: the
        # spawner gives them the grace and writes their ends, and the guardian waits for it
        self.helpers.arrange_orphans(agent, f"spawner-{i}")
        return agent

    def launch_on_spawner(self, task: dict, placement: Placement, threads: int, exclusive: bool,
                          member_env: dict) -> bool:
        """Hand a member of this node to the least busy spawner: its ``start`` now, the
        message once the ``start`` is written (:meth:`send_pending`). False: no spawner
        could be started; the pilot starts the member itself."""
        spawners = self.agents
        if len(spawners) < self.count:
            for i in [i for i in range(self.count) if i not in spawners]:
                if self.start_spawner(i) is None:
                    break
            if not spawners:
                return False
        agent = min(spawners.values(), key=lambda a: len(a.members))
        key = next(self.helpers.keys)
        member = Member(task, 0, placement, threads, exclusive, "fork")
        member.agent, member.key = agent, key
        agent.members[key] = member
        self.running[key] = member
        self.emit(START, n=task["n"], m=task["m"], a=task["a"], nodes=[placement[0][0].name])
        run = {"k": AGENT_RUN, "id": key, "argv": task.get("_argv") or argv_for(task["cmd"]),
               "cmd": task["cmd"], "cwd": task["cwd"],
               "env": member_env, "made": True, "n": task["n"], "m": task["m"], "a": task["a"]}
        if task.get("mem"):
            run["mem"] = task["mem"]  # (the spawner enforces it: pilot/memwatch.py)
        self.pending.append((member, run))
        return True

    def send_pending(self) -> None:
        """Hand the members placed in this pass to their spawners, once their ``start``
        records are written (a pilot killed at any moment leaves no member the engine does
        not know of); one write per spawner."""
        if not self.pending or not self.flush():
            return
        batches: dict[NodeAgent, list[dict]] = {}
        for member, msg in self.pending:
            if member.killed:  # cancelled before it was handed over: it never ran
                member.agent.members.pop(member.key, None)
                self.running.pop(member.key, None)
                self.packer.release(member.placement, member.threads, member.exclusive)
                self.finish(member, -signal.SIGKILL)
                continue
            batches.setdefault(member.agent, []).append(msg)
        self.pending.clear()
        for agent, msgs in batches.items():
            if not agent.send_all(msgs):
                self.spawner_lost(agent)

    def spawner_lost(self, agent: NodeAgent) -> None:
        """A local spawner's pipe broke: kill what it ran (by process group, where its pid
        was heard) and run it again; a new spawner starts with the next member."""
        agent.close()
        self.helpers.gone(agent)
        for i, a in list(self.agents.items()):
            if a is agent:
                del self.agents[i]
        lost = list(agent.members.values())
        agent.members.clear()
        again = []
        for m in lost:
            self.running.pop(m.key, None)
            self.packer.release(m.placement, m.threads, m.exclusive)
            if m.pid:
                try:
                    os.killpg(m.pid, signal.SIGKILL)
                except OSError:
                    pass
            if m.killed:
                self.finish(m, -signal.SIGKILL)
            else:
                again.append(m.task)
        try:
            agent.proc.kill()
        except OSError:
            pass
        say(f"local {agent.node} ended unexpectedly; its {len(again)} running members start again")
        for t in reversed(again):
            self.queue.appendleft(t)
