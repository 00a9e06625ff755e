"""The core-hour budget (``budget: {coreHours: N}`` of the workflow, and of a host in
hosts.yaml): what the run's pilots have spent, what the rest will need, no pilot submitted
past it, and a halt when the rest cannot fit.

:class:`CoreHours` is a part the engine holds (:mod:`pwe.engine.loop`); it keeps nothing of
its own: every number comes from the run's state (its ``pilot`` records, the members' ends),
so a resumed engine counts the same.

- **spent**: each pilot's slots x the time it held them, from its ``pilot`` record's ``t``
  (a batch pilot: its submission; the journal does not say when its job began) to its
  ``pilot_gone`` (``gone``), or to now while it is held;
- **committed**: spent, with each batch pilot still held counted for its whole walltime
  (``wall`` of its record) when that is more: what the allocation is charged at most;
- **projected**: spent + the rest: per node the members not yet ended x its measured mean
  duration (seconds run by its ended attempts / their number) x cores per member, divided
  by the pilots' measured use (member core-seconds / slot-seconds held: idle cores count).
  A node counts once :data:`MIN_ENDS` of its attempts ended; before that it is
  ``unmeasured`` and adds nothing (the projection is then a lower bound).

A new pilot's cost is its slots x its walltime (a local pilot: nothing in advance, its held
time counts as it goes); :meth:`CoreHours.allows` refuses one that would carry the committed
core-hours past a budget, says so once in the journal (a ``note``) and in ``pwe status``.
:meth:`CoreHours.weigh` halts the run (``soon``: :meth:`pwe.engine.halting.Halting.halt`)
when what is spent reaches a budget with work left, when the projection, with at least
one measured node with work left, passes it, or when no pilot is held and none may be
submitted.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..base.states import DONE, FINAL
from ..runstate import records

if TYPE_CHECKING:
    from ..planning.plan import Plan
    from .halting import Halting
    from .handles import Lane
    from .ledger import Ledger

#: ended attempts of a node before its mean duration counts in the projection
MIN_ENDS = 3
#: the least use (member core-seconds / slot-seconds held) the projection divides by
MIN_USE = 0.05
RUN = ""  # (the run's own budget among the hosts')


def shown_ch(v: float) -> str:
    """Core-hours as a line says them: 412, 12.3, 0.0031."""
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2g}"


def project(spent: float, rest: list[tuple[int, float | None, int]], used: float, held: float) -> float:
    """Core-hours projected: ``spent`` (core-hours) + for each node ``(members left, mean
    seconds or None: unmeasured, cores per member)`` its core-hours, divided by the pilots'
    use ``used / held`` (core-seconds; 1 when nothing was held yet; at least MIN_USE)."""
    work = sum(left * mean * cores for left, mean, cores in rest if mean is not None and left > 0) / 3600
    use = min(1.0, max(MIN_USE, used / held)) if held > 0 else 1.0
    return spent + work / use


def ended_attempts(ns: Any) -> int:
    """Attempts of a node (its NodeState) that ended: done by running, or failed."""
    return max(0, ns.counts[DONE] - ns.complete_count()) + sum(ns.failures.values())


class CoreHours:
    """The run's core-hour budget and the host's (see the module's docstring)."""

    def __init__(self, plan: Plan, info: dict[str, Any], ledger: Ledger, lanes: dict[str, Lane],
                 lane_of: dict[str, str], halting: Halting):
        self.plan = plan
        self.ledger = ledger
        self.lanes = lanes
        self.halting = halting
        #: budgets in core-hours: the run's (key RUN) and each host's that has one
        self.limits: dict[str, float] = {}
        # the run's own (pwe resume/retry --budget, kept in run.json), else the workflow's
        if info.get("budget"):
            self.limits[RUN] = float(info["budget"]["coreHours"])
        elif plan.workflow.budget is not None:
            self.limits[RUN] = float(plan.workflow.budget.coreHours)
        for lane in lanes.values():
            if lane.host.budget is not None:
                self.limits[lane.host.name] = float(lane.host.budget.coreHours)
        self.host_of_node = {nid: lanes[ln].host.name for nid, ln in lane_of.items() if ln in lanes}
        self.refused: dict[str, str] = {}  # lane -> why no pilot is submitted there (said once)

    @property
    def any(self) -> bool:
        return bool(self.limits)

    def _host(self, p: dict[str, Any]) -> str:
        lane = self.lanes.get(p.get("lane") or "")
        return lane.host.name if lane is not None else str(p.get("lane") or p.get("host"))

    def held(self, now: float) -> tuple[dict[str, float], dict[str, float]]:
        """(spent, committed) in core-seconds, per host and the run's (key RUN)."""
        spent: dict[str, float] = {RUN: 0.0}
        committed: dict[str, float] = {RUN: 0.0}
        for p in self.ledger.state.pilots.values():
            t0 = p.get("t")
            if not isinstance(t0, (int, float)):
                continue
            if p.get("alive", True):
                end = now
            else:  # (gone: its record's time; a run made before records kept it: not counted)
                end = p["gone"] if isinstance(p.get("gone"), (int, float)) else t0
            slots = p.get("slots") or 0
            s = slots * max(0.0, end - t0)
            c = max(s, slots * float(p["wall"]) * 60) if p.get("alive", True) and p.get("wall") else s
            host = self._host(p)
            for key in (RUN, host):
                spent[key] = spent.get(key, 0.0) + s
                committed[key] = committed.get(key, 0.0) + c
        return spent, committed

    def _rest(self) -> tuple[dict[str, list[tuple[int, float | None, int]]], dict[str, float], list[str], bool]:
        """Per host (and RUN) the nodes' (left, mean, cores); member core-seconds used per
        host; the nodes with work left but unmeasured; whether a measured node has work left."""
        rest: dict[str, list[tuple[int, float | None, int]]] = {RUN: []}
        used: dict[str, float] = {RUN: 0.0}
        unmeasured, measured_left = [], False
        for nid, ns in self.ledger.state.nodes.items():
            cores = self.plan.nodes[nid].scheduling.cores_per_member()
            left = ns.size - sum(ns.counts[c] for c in FINAL)
            ended = ended_attempts(ns)
            mean = ns.spent / ended if ended >= MIN_ENDS or (ended and not left) else None
            if left and mean is None:
                unmeasured.append(nid)
            measured_left = measured_left or bool(left and mean is not None)
            host = self.host_of_node.get(nid, "")
            for key in (RUN, host):
                rest.setdefault(key, []).append((left, mean, cores))
                used[key] = used.get(key, 0.0) + ns.spent * cores
        return rest, used, unmeasured, measured_left

    def figures(self, now: float | None = None) -> dict[str, Any]:
        """What the snapshot says (``budget`` of state.json; ``pwe status``): per budget
        (``run`` and ``hosts``) ``limit``, ``spent``, ``committed``, ``projected`` (core-hours),
        ``unmeasured`` (nodes with work left not yet in the projection), ``refused`` (lanes:
        why nothing is submitted there), ``at`` (the time these are of)."""
        now = time.time() if now is None else now
        spent, committed = self.held(now)
        rest, used, unmeasured, _ = self._rest()

        def one(key: str) -> dict[str, Any]:
            proj = project(spent.get(key, 0.0) / 3600, rest.get(key, []), used.get(key, 0.0), spent.get(key, 0.0))
            return {"limit": self.limits.get(key), "spent": round(spent.get(key, 0.0) / 3600, 6),
                    "committed": round(committed.get(key, 0.0) / 3600, 6), "projected": round(proj, 6)}

        return {**one(RUN), "hosts": {h: one(h) for h in self.limits if h != RUN},
                "unmeasured": unmeasured, "refused": dict(self.refused), "at": now}

    def allows(self, lane: Lane, cost: float) -> bool:
        """Whether a new pilot on ``lane`` costing ``cost`` core-hours (slots x walltime; 0
        for a local one) stays within the budgets; a refusal is said once (journal, status)."""
        if not self.limits:
            return True
        _, committed = self.held(time.time())
        for key in (RUN, lane.host.name):
            limit = self.limits.get(key)
            if limit is None:
                continue
            have = committed.get(key, 0.0) / 3600
            if have + cost > limit or (cost == 0 and have >= limit):
                on = "" if key == RUN else f" on host '{key}'"
                why = (f"no pilot is submitted on '{lane.name}': it would cost {shown_ch(cost)} core-hours, "
                       f"{shown_ch(max(0.0, limit - have))} of the budget's {limit:,g}{on} are left ({shown_ch(have)} "
                       "held or committed)")
                if lane.name not in self.refused:
                    self.ledger.take(records.note(why, time.time()))
                self.refused[lane.name] = why
                return False
        self.refused.pop(lane.name, None)
        return True

    def weigh(self) -> None:
        """Halt (soon) when what is spent reaches a budget with work left, or the projection
        of the rest passes it (see the module's docstring)."""
        st = self.ledger.state
        if not self.limits or st.halted is not None or st.cancelled or st.unfinished() == 0:
            return
        if self.refused and not any(p.get("alive", True) for p in st.pilots.values()):
            # no pilot holds anything and none may be submitted: nothing would ever run
            why = next(iter(self.refused.values()))
            spent, _ = self.held(time.time())
            s = spent[RUN] / 3600
            self.halting.halt(f"halted: {why}", "soon", {"coreHours": {"spent": round(s, 6), "budget": self.limits.get(
                RUN, min(self.limits.values()))}})
            return
        now = time.time()
        spent, _ = self.held(now)
        rest, used, _, measured_left = self._rest()
        for key, limit in self.limits.items():
            s = spent.get(key, 0.0) / 3600
            if not any(left for left, _, _ in rest.get(key, [])):
                continue
            proj = project(s, rest.get(key, []), used.get(key, 0.0), spent.get(key, 0.0))
            if s < limit and not (measured_left and proj > limit):
                continue
            on = "" if key == RUN else f" on host '{key}'"
            why = (f"halted: the rest needs ~{shown_ch(max(0.0, proj - s))} core-hours, "
                   f"{shown_ch(max(0.0, limit - s))} of the budget's {limit:,g}{on} are left ({shown_ch(s)} spent)")
            self.halting.halt(why, "soon", {"coreHours": {"spent": round(s, 6), "projected": round(proj, 6),
                                                          "budget": limit, **({"host": key} if key else {})}})
            return
