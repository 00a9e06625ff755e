"""The failure budget (``halt:``, ``pwe run --halt``): when enough members failed, no new
member starts.

:class:`Halting` is a part the engine holds (:mod:`pwe.engine.loop`). The intake calls
:meth:`Halting.failed` right after it journals an end that failed a member for good, so
the ``halt`` record comes right after the end that spent the budget; the budget is
weighed again when an engine takes the run up (a resume with a larger ``--halt`` goes on,
one with the same budget halts again at once). A halt, whatever asked for it (this
budget, or the core-hour budget: :meth:`Halting.halt`):

- is journaled first (``halt``: why, when, the counts), so ``pwe status`` says it;
- ``soon``: every pilot is told to ``leave`` (it hands back what it has not started,
  finishes what runs, and goes): a member a pilot starts after that is one it started
  before the word reached it;
- ``now``: what is queued or running is handed back, journaled as stopped by the halt
  (``unassign`` with ``halted``; not a failure, its attempt not counted against it), and
  every pilot is told to ``cancel`` (its members killed, their ends no longer current: they
  are journaled, not applied); the run ends once those pilots are down, so that a member
  a pilot started before it heard the halt has its start and end in the journal;
- the feed hands nothing out while the run is halted, and the run ends (exit 1) when
  nothing it started is in flight.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pilot.wire import CANCEL, LEAVE

from ..base.states import ASSIGNED, FAILED, RUNNING
from ..runstate import records
from ..workflow import records as workflow_records
from .handles import PilotState

if TYPE_CHECKING:
    from ..planning.plan import Plan
    from ..workflow.model import Halt
    from .handles import Pilots
    from .ledger import Ledger


class Halting:
    """The run's failure budget and the halt (see the module's docstring)."""

    def __init__(self, plan: Plan, info: dict[str, Any], ledger: Ledger, pilots: Pilots):
        self.plan = plan
        self.ledger = ledger
        self.pilots = pilots
        # the run's own (pwe run --halt, kept in run.json), else the workflow's
        self.run_budget: Halt | None = (workflow_records.validate("Halt", info["halt"]) if info.get("halt")
                                        else plan.workflow.halt)
        self.node_budgets = {nid: pn.halt for nid, pn in plan.nodes.items() if pn.halt is not None}

    @property
    def any(self) -> bool:
        """Whether the run has a failure budget at all (nothing to weigh otherwise)."""
        return self.run_budget is not None or bool(self.node_budgets)

    def failed(self, nid: str) -> None:
        """A member of ``nid`` failed for good: halt when that spent a budget."""
        st = self.ledger.state
        if st.halted is not None or st.cancelled or not self.any:
            return
        over = self._over(nid)
        if over is not None:
            self.halt(*over)

    def weigh(self) -> None:
        """When an engine takes the run up: halt at once when a budget is spent already."""
        st = self.ledger.state
        if st.halted is not None or st.cancelled or not self.any:
            return
        for nid in [None, *self.node_budgets]:
            over = self._over(nid, run_too=nid is None)
            if over is not None:
                self.halt(*over)
                return

    def _over(self, nid: str | None, run_too: bool = True) -> tuple[str, str, dict[str, Any]] | None:
        """(why, when, the record's counts) when node ``nid``'s budget, or the run's, is spent."""
        nodes = self.ledger.state.nodes
        node_budget = self.node_budgets.get(nid) if nid is not None else None
        if node_budget is not None:
            ns = nodes[nid]
            failed, of = ns.counts[FAILED], ns.size
            if failed >= node_budget.limit(of):
                return (f"halted: node {nid}: {failed:,} of {of:,} failed, budget {node_budget.shown()}",
                        node_budget.when, {"node": nid, "failed": failed, "of": of, "budget": node_budget.shown()})
        if self.run_budget is not None and run_too:
            failed = sum(ns.counts[FAILED] for ns in nodes.values())
            of = sum(ns.size for ns in nodes.values())
            if failed >= self.run_budget.limit(of):
                return (f"halted: {failed:,} of {of:,} failed, budget {self.run_budget.shown()}",
                        self.run_budget.when, {"failed": failed, "of": of, "budget": self.run_budget.shown()})
        return None

    def halt(self, why: str, when: str = "soon", fields: dict[str, Any] | None = None) -> None:
        """Halt the run: journaled, then the pilots told (see the module's docstring)."""
        st, take = self.ledger.state, self.ledger.take
        if st.halted is not None:
            return
        now = time.time()
        take(records.halt(why, when, now, **(fields or {})))
        if when == "now":
            for nid, ns in st.nodes.items():
                for i, pid_ in list(ns.pilot.items()):
                    take(records.unassign(nid, i, pid_, ns.attempt[i], f"stopped by the halt ({why})", now,
                                          halted=True))
        self.ledger.journal.flush()  # (said before any pilot hears it)
        for pilot in self.pilots.values():
            if not pilot.alive or pilot.state is PilotState.DOWN:
                continue
            if when == "now":
                pilot.send({"k": CANCEL})
            elif pilot.state is PilotState.ACTIVE:
                pilot.send({"k": LEAVE})
                pilot.become(PilotState.DRAINING)
            pilot.flush()

    def over(self) -> bool:
        """A halted run with nothing it started still queued or running: it ends. After a
        halt ``now``, once its pilots told to cancel are heard to their end too (``down``,
        or given up): what one started before it heard the halt is journaled, its start
        and its end, so that the trace holds every attempt that started."""
        st = self.ledger.state
        if st.halted is None or any(ns.counts[ASSIGNED] or ns.counts[RUNNING] for ns in st.nodes.values()):
            return False
        return st.halted.get("when") != "now" or not any(p.alive and p.state is not PilotState.DOWN
                                                         for p in self.pilots.values())
