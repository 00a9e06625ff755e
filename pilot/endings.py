"""How members end other than on their own (:class:`Endings`, a part of
:class:`pilot.agent.PilotAgent`): their walltime (SIGTERM, then SIGKILL after a grace;
reason ``walltime``), their memory (pilot/memwatch.py; reason ``oom``), the allocation
ending or the batch system stopping the pilot (drain: everything handed back, no attempt
spent), a signal from someone else, a spawn its node refused for now, and the pilot's own
directory removed or replaced while nobody was there to stop it (:meth:`Endings.look_home`).
``pwe cancel`` and ``pwe pilot drain`` are the engine's words: pilot/intake.py. Standard
library only.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from .allocation import Allocation
from .members import Member, collect, say
from .memwatch import MemoryWatch
from .phase import Life, PilotPhase
from .wire import DRAIN, END, NOT_STARTED, REASON_OOM, REASON_STRAGGLER, REASON_WALLTIME

_KILL_GRACE = 5.0
#: why the members of a pilot whose run directory went (Endings.look_home) are handed back
RUN_GONE = "its run directory was removed"
#: s: the pause after a spawn its node refused for now, doubled while no member ends (Endings.refused_for_now)
SPAWN_PAUSE_LEAST, SPAWN_PAUSE_MOST = 0.5, 30.0
_SIGNAL_GRACE = 1.0


def identity(directory: str) -> int | None:
    """What tells this directory from another made later at the same path: a descriptor
    of it, held open (None when it cannot be opened now). Its inode number is compared:
    held open, that number cannot be given to a directory made after this one is removed
    (a file system reuses the numbers of inodes nobody holds). Not the device: a file
    system mounted again (an automounter) may be given another number for the same one."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def when_ended(at: float, started: float) -> dict[str, float]:
    """An END's ``t`` and ``dt`` for a member started at ``started`` and ended at ``at``: its
    duration is taken between the two times as rounded, so the start a reader works out
    (``t - dt``) is ``started`` to the millisecond, never a millisecond before the end of the
    member whose slot it took (rounding each apart can put it there)."""
    t, began = round(at, 3), round(started, 3)
    return {"t": t, "dt": round(max(0.0, t - began), 3)}


class Endings:
    """The part of :class:`pilot.agent.PilotAgent` that stops members and hands them back:
    it holds the members whose end waits for the pilot's own SIGTERM (``signalled``),
    whether that SIGTERM was heard (``term_heard``: a signal handler's note, not a stage:
    pilot/phase.py), the pause after a spawn refused for now and the pilot's hold on its
    directory; it is given the pilot's stage, allocation, running members and memory
    watch, and the callables it calls."""

    #: looks in a row that must find the directory gone before the pilot believes it
    GONE_AFTER = 2

    def __init__(self, directory: str, life: Life, alloc: Allocation, running: dict[int, Member],
                 memory: MemoryWatch, emit: Callable[..., None], signal_member: Callable[[Member, int], None],
                 member_over: Callable[[dict, Any], None], hand_back: Callable[..., None],
                 hand_back_held: Callable[[str], None], next_in_group: Callable[[dict], None],
                 straggle: dict[str, tuple[float, str]] | None = None):
        self.dir = directory
        self.life = life
        self.alloc = alloc
        self.running = running
        self.memory = memory
        self.emit = emit
        self.signal_member = signal_member
        self.member_over = member_over
        self.hand_back = hand_back
        self.hand_back_held = hand_back_held
        self.next_in_group = next_in_group
        self.straggle = straggle if straggle is not None else {}  # (the intake's: node -> (seconds, words))
        self.home = identity(directory)  # (a descriptor: its run removed or replaced meanwhile, look_home)
        self.gone_looks = 0
        self.signalled: list[tuple[float, Member, int]] = []
        self.term_heard = False  # (set by the pilot's SIGTERM handler: the batch system stops it)
        self.spawns_refused = 0
        self.spawns_may_go()  # (spawn_paused_until: its node refused a spawn for now, nothing starts before)

    def look_home(self) -> None:
        """(Once a heartbeat.) Whether this pilot's directory is still the one it started
        in. When its engine was killed and the run directory removed (or another run made
        at the same path), nobody is left to cancel it: its members would run to their
        walltime and its allocation would stay held until its idle timeout, for a run that
        no longer exists. Seen :data:`GONE_AFTER` times in a row (one heartbeat apart), it
        ends its members and leaves (why ``gone``). Only "no such directory" or another
        directory at the path counts: any other error (a network file system that does not
        answer now) is never taken for a removed run."""
        if self.life.phase.ended or self.home is None:
            return
        try:
            gone = os.stat(self.dir).st_ino != os.fstat(self.home).st_ino
        except FileNotFoundError:
            gone = True
        except OSError:
            gone = False
        self.gone_looks = self.gone_looks + 1 if gone else 0
        if self.gone_looks >= self.GONE_AFTER:
            say(f"{self.dir} was removed, or is another run's now: this pilot's run is gone; ending its "
                f"{len(self.running)} running members and leaving")
            self.life.become(PilotPhase.GONE)  # (it takes nothing more: the loop reads no tasks)
            # handed back, no attempt spent: it is not the members' doing (should the run be
            # resumed where it was moved to, they run again as the same attempt)
            self.hand_back_held(RUN_GONE)
            now = time.time()
            for m in self.running.values():
                m.killed, m.term_at = RUN_GONE, now  # (SIGKILL after the grace: enforce_walltimes)
                self.signal_member(m, signal.SIGTERM)

    def refused_for_now(self, task: dict, node: str, strerror: str) -> None:
        """``node`` refused ``task``'s spawn for now (EAGAIN, ENOMEM: its limit of processes
        or memory; its cores are released already): it goes back, no attempt spent
        (:data:`NOT_STARTED`), and nothing more starts until a member ends, or while none
        runs a pause that doubles (pilot.agent.PilotAgent.spawn_failed)."""
        if not self.spawns_refused:  # (said once: a node at its limit refuses many)
            say(f"cannot start a member now: {strerror} (node {node}'s limit of processes or memory); it goes "
                "back, and nothing more starts until a member ends")
        self.spawns_refused += 1
        self.spawn_paused_until = time.time() + self.spawn_pause
        self.spawn_pause = min(2 * self.spawn_pause, SPAWN_PAUSE_MOST)
        self.hand_back(task, f"{NOT_STARTED}{strerror} on {node}")

    def spawns_may_go(self) -> None:
        """A member ended (one process less on its node): a spawn refused for now may go,
        and the pause starts again from its least (:meth:`refused_for_now`)."""
        self.spawn_paused_until, self.spawn_pause = 0.0, SPAWN_PAUSE_LEAST

    def settle_signalled(self, now: float) -> None:
        """Members whose end waits a moment for the pilot's own SIGTERM (the allocation
        ending): killed by a signal nobody here sent, or an srun that failed (srun fails
        when the allocation goes, with words that change from release to release). If the
        SIGTERM comes, they go back to the engine; if not, they ended as they said."""
        keep = []
        for at, member, rc in self.signalled:
            if not self.term_heard and now - at <= _SIGNAL_GRACE:
                keep.append((at, member, rc))
                continue
            t = member.task
            self.member_over(t, member.placement)
            if self.term_heard:
                self.hand_back(t, "the batch system stopped the pilot while it ran", "the allocation is ending")
                continue
            # (a signal only when the pilot saw one: an exit status of 137 that the member's
            # shell returned is its "exit 137", whatever killed a child of it)
            why = {"why": f"killed by signal {-rc}"} if rc < 0 else {}
            # (its t: when it ended, not now, a grace later: its slot went to the next member then)
            self.emit(END, n=t["n"], m=t["m"], a=t["a"], rc=rc, out=collect(t), **when_ended(at, member.started),
                      **why, **member.usage())
            self.next_in_group(t)
        self.signalled[:] = keep  # (in place: the agent holds this list too)

    def enforce_walltimes(self, now: float) -> None:
        """Members past their maxWallTimePerMember, or past their node's straggler limit
        (the engine's ``straggle``), are stopped: SIGTERM, then SIGKILL after a grace."""
        straggle = self.straggle
        for m in self.running.values():
            if m.deadline and now > m.deadline and not m.killed:
                m.killed = f"ran past its maxWallTimePerMember of {m.task['wall']:g} min"
                m.reason = REASON_WALLTIME
                m.term_at = now
                self.signal_member(m, signal.SIGTERM)
            elif straggle and not m.killed and (limit := straggle.get(m.task["n"])) and now - m.started > limit[0]:
                m.killed = f"a straggler: ran {now - m.started:.1f} s, past {limit[0]:.1f} s ({limit[1]})"
                m.reason = REASON_STRAGGLER
                m.term_at = now
                self.signal_member(m, signal.SIGTERM)
            elif m.killed and m.term_at and now - m.term_at > _KILL_GRACE:
                self.signal_member(m, signal.SIGKILL)
                m.term_at = 0.0

    def enforce_memory(self, now: float) -> None:
        """The members this pilot started itself that are over their ``mem`` (one sweep every
        memwatch.EVERY s; killed there): they end with reason ``oom``. (A spawner's or a
        node agent's members are its own to watch: it says so in their ``ended``.)"""
        for key, why in self.memory.sweep(now):
            m = self.running.get(key)
            if m is not None and not m.killed:
                m.killed, m.reason = why, REASON_OOM

    def drain(self, now: float, why: str = "the allocation ends") -> None:
        """The allocation is about to end (or the batch system stopped the pilot:
        TERMINATED): hand back what has not started, stop what has (it would be killed
        anyway) and hand that back too: no attempt is spent."""
        first = not self.life.phase.drained
        self.life.at_least(PilotPhase.TERMINATED if self.term_heard else PilotPhase.DRAINING)
        if first:
            left = round(self.alloc.end - now, 1) if self.alloc.end else None
            self.emit(DRAIN, why=why, left=left)
            self.hand_back_held("the allocation is ending")
        for m in self.running.values():
            if not m.killed:
                m.killed = "allocation ends"
                m.term_at = now
                self.signal_member(m, signal.SIGTERM)
