"""A pilot's life stage (:class:`PilotPhase`): one enum with its allowed moves, each stage
carrying the word the pilot's ``down`` says when it leaves from there (pilot/wire.py).
Standard library only.

A pilot's life only goes forward, along this line, skipping any stage; CANCELLED and
GONE are ends (:data:`TRANSITIONS`)::

    RUNNING --> STOPPING --> LEAVING --> DRAINING --> TERMINATED --> CANCELLED
                                                                \\-> GONE

RUNNING takes work. STOPPING (the engine's ``stop``, or no node left with scratch for a
member): takes what comes, leaves once nothing is queued or runs. LEAVING (``pwe pilot
drain``): what is queued went back, what comes goes back, leaves once what runs ends.
DRAINING (the allocation ends) and TERMINATED (the batch system's SIGTERM): what is
queued went back, what runs is stopped and handed back, then it leaves. CANCELLED (``pwe
cancel``) and GONE (its run directory removed: :class:`pilot.endings.Endings`): what runs
is killed, nothing more is read. A later stage holds an earlier one's conditions (a
drained pilot does not also stop), so a request for a stage at or behind the present one
changes nothing (the callers ask :attr:`PilotPhase.rank`), and one that is not in the
table is a defect (:class:`PhaseError`).

One fact is not a stage and is kept beside it, in the agent: that the batch system's
SIGTERM was heard (a signal handler only notes it; the loop drains on it, or not when the
pilot was cancelled, and a member killed by a signal nobody here sent waits for it).
"""

from __future__ import annotations

from enum import Enum


class PhaseError(Exception):
    """A move the table does not allow: a defect in the pilot."""


class PilotPhase(Enum):
    """The pilot's life stage; its value is its ``down`` word (see the module's docstring)."""

    RUNNING = "idle"  # (it leaves from here only when idle past its idle_timeout)
    STOPPING = "stop"
    LEAVING = "leave"
    DRAINING = "walltime"
    TERMINATED = "terminated"
    CANCELLED = "cancel"
    GONE = "gone"

    #: (set below from the table: plain attributes, read on every pass of the loop)
    word: str  # what its ``down`` says
    rank: int  # its place on the line
    drained: bool  # DRAINING, TERMINATED: what comes or is queued goes back ("the allocation is ending")
    ended: bool  # CANCELLED, GONE: nothing more is read or started
    back_why: str | None  # why a task that comes, or a group's next member, is handed back (None: it is not)
    next: frozenset["PilotPhase"]


#: The moves a pilot's stage may make; any other is a defect (PhaseError).
TRANSITIONS: dict[PilotPhase, frozenset[PilotPhase]] = {
    PilotPhase.RUNNING: frozenset({PilotPhase.STOPPING, PilotPhase.LEAVING, PilotPhase.DRAINING,
                                   PilotPhase.TERMINATED, PilotPhase.CANCELLED, PilotPhase.GONE}),
    PilotPhase.STOPPING: frozenset({PilotPhase.LEAVING, PilotPhase.DRAINING, PilotPhase.TERMINATED,
                                    PilotPhase.CANCELLED, PilotPhase.GONE}),
    PilotPhase.LEAVING: frozenset({PilotPhase.DRAINING, PilotPhase.TERMINATED, PilotPhase.CANCELLED,
                                   PilotPhase.GONE}),
    PilotPhase.DRAINING: frozenset({PilotPhase.TERMINATED, PilotPhase.CANCELLED, PilotPhase.GONE}),
    PilotPhase.TERMINATED: frozenset({PilotPhase.CANCELLED, PilotPhase.GONE}),
    PilotPhase.CANCELLED: frozenset(),  # (a cancelled pilot no longer looks for its run directory)
    PilotPhase.GONE: frozenset(),
}
for _rank, _p in enumerate(PilotPhase):
    _p.word = _p.value
    _p.rank = _rank
    _p.drained = _p in (PilotPhase.DRAINING, PilotPhase.TERMINATED)
    _p.ended = _p in (PilotPhase.CANCELLED, PilotPhase.GONE)
    _p.back_why = ("the allocation is ending" if _p.drained else "the pilot is drained" if _p is PilotPhase.LEAVING
                   else None)
    _p.next = TRANSITIONS[_p]
del _rank, _p


class Life:
    """A pilot's stage, shared by the agent and its parts (each is given this, not the agent)."""

    __slots__ = ("phase",)

    def __init__(self) -> None:
        self.phase = PilotPhase.RUNNING

    def become(self, new: PilotPhase) -> None:
        """Move to stage ``new``; PhaseError when the present stage does not allow it."""
        if new not in self.phase.next:
            raise PhaseError(f"the pilot's stage {self.phase.name} cannot become {new.name}")
        self.phase = new

    def at_least(self, new: PilotPhase) -> bool:
        """Move to ``new`` unless the present stage is already at or past it (its conditions
        held already); True when it moved. A move off the table still raises."""
        if new is self.phase or (self.phase.rank > new.rank and not new.ended):
            return False
        self.become(new)
        return True
