"""What the engine sends a pilot, taken in (:class:`TaskIntake`, a part of
:class:`pilot.agent.PilotAgent`): tasks and groups of tasks, each attempt taken once
(:meth:`TaskIntake.take`), the control messages (stop, setup, leave, cancel), and members
handed back unstarted. A group's members hold one slot between them and run one after
another in it (:meth:`TaskIntake.next_in_group`). Standard library only.
"""

from __future__ import annotations

import signal
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

from .members import Member, say
from .phase import Life, PilotPhase
from .transport import Transport
from .numbers import finite
from .wire import (BACK, CANCEL, DAMAGED, ENV, FORGED, GROUP, LEAVE, MALFORMED, NO_ENV, SETUP, STOP, STRAGGLE, TASK,
                   WITHHOLD)


class TaskIntake:
    """The part of :class:`pilot.agent.PilotAgent` that takes what the engine sends: it
    holds the queue, the groups' next members (``chained``), each member's attempt taken
    and the shared environments; it is given the transport, the pilot's stage, its running
    members and the callables it calls (events out, a member signalled, a setup taken)."""

    def __init__(self, transport: Transport, life: Life, running: dict[int, Member],
                 emit: Callable[..., None], signal_member: Callable[[Member, int], None],
                 take_setup: Callable[[dict[str, Any]], None]):
        self.transport = transport
        self.life = life
        self.running = running
        self.emit = emit
        self.signal_member = signal_member
        self.take_setup = take_setup
        self._task_cursor = 0
        self.queue: deque[dict] = deque()
        # the next member of a group whose member just ended: queued first, into the slot
        # it leaves (a task of a group carries the rest of its group under "_then")
        self.chained: deque[dict] = deque()
        self.taken: dict[str, array] = {}  # per node, the highest attempt of each member taken
        self.envs: dict[str, dict[str, str]] = {}  # the engine's ``env`` messages: id -> shared environment
        #: the engine's ``straggle`` messages: node -> (seconds, words); Endings stops a member past it
        self.straggle: dict[str, tuple[float, str]] = {}

    def read_tasks(self) -> bool:
        """Take in whatever complete task messages were sent; True if any arrived."""
        msgs, self._task_cursor = self.transport.receive(self._task_cursor)
        got = False
        ahead = 0  # (this batch's attempts that ran before, put ahead of what the pilot holds, in order)
        for msg in msgs:
            kind = msg.get("k")
            if kind == TASK:
                if not self.take(msg):
                    continue
                back = self.life.phase.back_why  # (draining: the allocation is ending; leaving: drained)
                if back:
                    self.hand_back(msg, back)
                elif msg.get("a", 1) > 1:
                    # it ran before (its node or pilot was lost, or it failed): it had its
                    # turn, so it goes ahead of what this pilot holds, not behind it (those of
                    # one batch in the order the engine sent them: a pwe set priority's)
                    self.queue.insert(ahead, msg)
                    ahead += 1
                else:
                    self.queue.append(msg)
                got = True
            elif kind == GROUP:
                tasks = msg.get("tasks")
                got = self.take_group(tasks if isinstance(tasks, list) else []) or got
            else:
                self._other(kind, msg)
        return got

    def _other(self, kind: object, msg: dict) -> None:
        """An engine message other than a task or a group: act on it."""
        if kind == STOP:
            self.life.at_least(PilotPhase.STOPPING)
        elif kind == ENV:
            env = msg.get("env")
            if isinstance(env, dict) and all(type(v) is str for v in env.values()):
                self.envs[str(msg.get("id"))] = env
        elif kind == SETUP:
            self.take_setup(msg)
        elif kind == STRAGGLE:
            s = msg.get("s")
            if isinstance(s, (int, float)) and not isinstance(s, bool) and finite(s) and s > 0:
                self.straggle[str(msg.get("n"))] = (float(s), str(msg.get("why") or "")[:200])
        elif kind == WITHHOLD:
            self.withhold(str(msg.get("n")), msg.get("m"), str(msg.get("why") or "held")[:200])
        elif kind == LEAVE:
            self.leave()
        elif kind == CANCEL:
            self.cancel()
        elif kind == DAMAGED:
            say(f"a damaged line in the tasks file skipped: {msg.get('text')!r}")
        elif kind == FORGED or kind == MALFORMED:  # never acted on
            say(f"a {kind} line in the tasks file refused ({msg.get('why') or 'bad signature'}): "
                f"{msg.get('text')!r}")

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
        if "eb" in task:  # its node's shared environment (an ``env`` message), under its own
            base = self.envs.get(task["eb"])
            if base is None:
                self.hand_back(task, f"{NO_ENV}{str(task['eb'])[:40]}")
                return False
            del task["eb"]
            task["env"] = {**base, **(task.get("env") or {})}
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

    def withhold(self, node: str, members: object, why: str) -> None:
        """The engine's ``withhold``: those members of ``node`` this pilot has queued, not
        started, go back (a value held: ``hold:``); what runs runs on."""
        if not isinstance(members, list):
            return
        wanted = {m for m in members if type(m) is int}
        keep = deque()
        while self.queue:
            task = self.queue.popleft()
            if task.get("n") == node and task.get("m") in wanted:
                self.hand_back(task, why)
            else:
                keep.append(task)
        self.queue.extend(keep)

    def hand_back_held(self, why: str) -> None:
        """Everything this pilot holds and has not started (its queue, and the next members
        of its groups) back to the engine, with ``why``: a drain, a leave, its run gone, no
        scratch left."""
        while self.chained:
            self.queue.appendleft(self.chained.pop())
        while self.queue:
            self.hand_back(self.queue.popleft(), why)

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
        if self.life.phase.drained:  # (a group that comes while the pilot leaves is run, as before)
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
        phase = self.life.phase
        if phase.back_why:  # (the allocation ending; pwe pilot drain: what has not started goes back)
            self.hand_back(nxt, phase.back_why)
        elif not phase.ended:
            self.chained.append(nxt)

    # -- the engine's leave and cancel -----------------------------------------------------
    def leave(self) -> None:
        """``pwe pilot drain``: hand back what is queued (no attempt spent), take nothing
        new, finish what runs, then leave."""
        if self.life.at_least(PilotPhase.LEAVING):
            self.hand_back_held("the pilot is drained")

    def cancel(self) -> None:
        """``pwe cancel``: nothing more starts, what runs is killed (said ``cancelled``)."""
        self.life.at_least(PilotPhase.CANCELLED)
        self.queue.clear()
        self.chained.clear()
        for m in self.running.values():
            m.killed = "cancelled"
            self.signal_member(m, signal.SIGKILL)
