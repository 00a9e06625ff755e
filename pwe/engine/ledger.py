"""The run's books as the engine's parts share them: its state and its journal
(:class:`Ledger`). Every part that changes the run does it through :meth:`Ledger.record`:
the record is journaled, then applied, so that the state never holds what the journal
does not. The loop opens the books (``pwe.engine.loop.Engine._load``); a part is given the
ledger when it is made, before they are open."""

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

    def record(self, rec: dict[str, Any]) -> Any:
        """Journal ``rec``, then apply it; what the state's apply returned."""
        self.journal.append(rec)
        return self.state.apply(rec)
