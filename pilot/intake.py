"""What the engine sends a pilot, taken in (a mixin of :class:`pilot.agent.PilotAgent`):
tasks and groups of tasks, each attempt taken once (:meth:`TaskIntake.take`), the
control messages (stop, setup, leave, cancel), and members handed back unstarted. A
group's members hold one slot between them and run one after another in it
(:meth:`TaskIntake.next_in_group`). Standard library only.
"""

from __future__ import annotations

from array import array
from collections import deque

from .members import say
from .wire import BACK, CANCEL, DAMAGED, ENV, FORGED, GROUP, LEAVE, MALFORMED, NO_ENV, SETUP, STOP, TASK


class TaskIntake:
    """The part of :class:`pilot.agent.PilotAgent` that takes what the engine sends
    (its queue, ``taken``, transport and the rest are the agent's)."""

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
                elif msg.get("a", 1) > 1:
                    # it ran before (its node or pilot was lost, or it failed): it had its
                    # turn, so it goes ahead of what this pilot holds, not behind it
                    self.queue.appendleft(msg)
                else:
                    self.queue.append(msg)
                got = True
            elif kind == GROUP:
                tasks = msg.get("tasks")
                got = self.take_group(tasks if isinstance(tasks, list) else []) or got
            elif kind == STOP:
                self.stopping = True
            elif kind == ENV:
                env = msg.get("env")
                if isinstance(env, dict) and all(type(v) is str for v in env.values()):
                    self.envs[str(msg.get("id"))] = env
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
