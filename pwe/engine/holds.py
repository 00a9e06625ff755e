"""Holding a failing value (``hold: {after: N}``, of the workflow or a node): when N members
of one parameter value have failed and none of that value is done, the members of that
value not yet started are held (state ``held``, :meth:`pwe.runstate.state.RunState._hold`):
on the fiftieth hour of a sweep where every ``mesh=fine`` member runs out of memory, the
rest of ``mesh=fine`` does not spend its walltime failing, while ``coarse`` and ``medium``
go on. What depends on a held member waits. ``pwe release RUN -q QUERY`` (and ``pwe
retry``) lets them go; a value let go is not held again in that run.

:class:`Holds` is a part the engine holds (:mod:`pwe.engine.loop`). The intake tells it of
every member that ended failed for good or done (:meth:`ended`); it keeps, per node with a
hold, the failed and done members of each value of each parameter (counted once from the
state bytes, :mod:`pwe.runstate.byvalue`, then by one each end), and journals a ``hold``
record when a value crosses N. A held member is not a failure (the failure budget does not
count it); the run ends, not ok, when nothing is queued, running or ready and some member
is held (:meth:`over`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pilot.wire import WITHHOLD

from ..base.source import value_text
from ..base.states import ASSIGNED, DONE, FAILED, HELD, QUARANTINED, READY, RUNNING
from ..runstate import records
from ..runstate.byvalue import value_counts

if TYPE_CHECKING:
    from ..planning.plan import Plan
    from .handles import Pilots
    from .ledger import Ledger


class Holds:
    """The holds of a run (see the module's docstring)."""

    def __init__(self, plan: Plan, ledger: Ledger, pilots: Pilots):
        self.plan = plan
        self.ledger = ledger
        self.pilots = pilots
        self.rules = {nid: pn.hold for nid, pn in plan.nodes.items() if pn.hold is not None}
        #: node -> per parameter, per value position: [failed, done] (made at its first end)
        self.counts: dict[str, list[list[list[int]]]] = {}

    @property
    def any(self) -> bool:
        return bool(self.rules)

    def ended(self, nid: str, i: int, code: int) -> None:
        """Member ``i`` of ``nid`` ended for good as ``code`` (FAILED, DONE, QUARANTINED)."""
        rule = self.rules.get(nid)
        space = self.plan.nodes[nid].space
        if rule is None or i >= space.size or not space.names:
            return
        counts = self.counts.get(nid)
        if counts is None:  # (from the state, which has this end applied already)
            state = self.ledger.state.nodes[nid].state
            counts = self.counts[nid] = [[list(c) for c in value_counts(space, state, k)]
                                         for k in range(len(space.names))]
        else:
            slot = 1 if code == DONE else 0
            for k, p in enumerate(space.positions_of(i).values()):
                counts[k][p][slot] += 1
        if code in (FAILED, QUARANTINED):
            self._weigh(nid, i, rule.after, counts)

    def _weigh(self, nid: str, i: int, after: int, counts: list[list[list[int]]]) -> None:
        st = self.ledger.state
        space = self.plan.nodes[nid].space
        held = {(h["n"], h["param"], h["value"]) for h in st.holds}
        for k, (name, p) in enumerate(space.positions_of(i).items()):
            values = space.values[name]
            text = value_text(values[p])
            # (a value is its text, as the hold and pwe failures say it: a list may hold it twice)
            same = values.positions(text)
            failed, done = sum(counts[k][q][0] for q in same), sum(counts[k][q][1] for q in same)
            if failed < after or done:
                continue
            key = (nid, name, text)
            if key in held or key in st.released:
                continue
            self.ledger.take(records.hold(nid, name, key[2], failed, time.time()))
            held.add(key)
            self._withhold(nid, name, key[2], failed)

    def _withhold(self, nid: str, name: str, value: str, failed: int) -> None:
        """The members of the value held that pilots have queued, not started: each pilot
        is asked to hand its own back (``withhold``); handed back, they are held."""
        ns, space = self.ledger.state.nodes[nid], self.plan.nodes[nid].space
        by_pilot: dict[str, list[int]] = {}
        for j in space.matching({name: value}):
            if ns.state[j] == ASSIGNED and j in ns.pilot:
                by_pilot.setdefault(ns.pilot[j], []).append(j)
        why = f"held: {name}={value} of {nid} failed {failed} times, none done"
        for pid_, members in by_pilot.items():
            pilot = self.pilots.get(pid_)
            if pilot is not None and pilot.alive:
                pilot.send({"k": WITHHOLD, "n": nid, "m": members, "why": why})

    def over(self) -> bool:
        """Nothing queued, running or ready, and some member held: the run can go no further
        until they are let go (pwe release): it ends, not ok."""
        st = self.ledger.state
        nodes = st.nodes.values()
        return any(ns.counts[HELD] for ns in nodes) and not any(
            ns.counts[READY] or ns.counts[ASSIGNED] or ns.counts[RUNNING] for ns in nodes)

    @staticmethod
    def said(st: Any) -> list[str]:
        """One line per hold in force, for the end of a run and pwe status."""
        out = []
        for h in st.holds:
            ns = st.nodes.get(h["n"])
            space = st.plan.nodes[h["n"]].space if h["n"] in st.plan.nodes else None
            n = sum(1 for i in space.matching({h["param"]: h["value"]}) if ns.state[i] == HELD) \
                if ns is not None and space is not None else 0
            out.append(f"held: {n:,} members of {h['n']} with {h['param']}={h['value']} ({h['failed']:,} failed, "
                       "none done)")
        return out
