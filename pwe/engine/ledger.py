"""The run's books as the engine's parts share them: its state and its journal
(:class:`Ledger`). Every part that changes the run does it through :meth:`Ledger.take`:
the record (made by :mod:`pwe.runstate.records`) is checked, journaled, then applied, so
that the state never holds what the journal does not; a damaged one (a pilot's message
naming a node or member the run does not have) is neither. The loop opens the books
(``pwe.engine.loop.Engine._load``); a part is given the ledger when it is made, before they
are open.

The commonest records go the same way: a pilot's starts, ends and hand-backs are taken one
by one as its batch is read (:meth:`pwe.engine.intake.Intake.ingest`), the journal holding
the batch's starts so that an end carries its start (:meth:`pwe.runstate.journal.Journal.hold`).
"""

from __future__ import annotations

from typing import Any

from ..runstate.journal import Journal
from ..runstate.state import RunState


class Ledger:
    """The run's state and journal (None until the engine loads the run)."""

    def __init__(self) -> None:
        self.state: RunState | None = None
        self.journal: Journal | None = None

    def open(self, state: RunState, journal: Journal) -> None:
        self.state, self.journal = state, journal

    def take(self, rec: dict[str, Any]) -> Any:
        """Journal ``rec``, then apply it; what the state's apply returned. A record the
        state cannot take (damaged: ValueError, KeyError, TypeError) raises before it is
        journaled, and changes nothing."""
        state = self.state
        on = state.handler(rec)
        self.journal.append(rec)
        return on(state, rec)
