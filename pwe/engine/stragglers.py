"""Stragglers (``straggler: {factor: F, after: N}`` of a node): once N of its members are
done, a member running longer than F times their median duration is stopped and retried as
its retry policy says (GNU parallel's ``--timeout 200%``, Work Queue's fast abort).

:class:`Stragglers` is a part the engine holds (:mod:`pwe.engine.loop`). The intake tells
it the duration of each member that ended done (:meth:`done`); it keeps a bounded sample
of them per node (:data:`SAMPLE`, the newest replacing the oldest), and when a node has N
done its limit, F x their median, goes to every pilot as a ``straggle`` message (pilot/wire.py),
again whenever the median moves by more than :data:`MOVES` (:meth:`bring`, each cycle). The
pilot stops a member past it like one past its walltime: SIGTERM, then SIGKILL after a
grace, its end's reason ``straggler`` (a retry policy's ``on`` may name it).

What is counted: members done in this engine's life. An engine that takes a run up again
(pwe resume) counts anew, so its limit comes after N more are done: it never stops a member
on a median it has not seen.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import TYPE_CHECKING, Any

from pilot.wire import STRAGGLE

from ..base.numbers import finite

if TYPE_CHECKING:
    from ..planning.plan import Plan
    from .handles import Pilots

#: durations kept per node for its median (the newest)
SAMPLE = 10_001
#: how far (a share) the median moves before the pilots are told the new limit
MOVES = 0.05


class Stragglers:
    """The straggler limit of each node that has ``straggler:`` (see the module's docstring)."""

    def __init__(self, plan: Plan, pilots: Pilots):
        self.pilots = pilots
        self.policy = {nid: pn.straggler for nid, pn in plan.nodes.items() if pn.straggler is not None}
        self.durations: dict[str, deque[float]] = {nid: deque(maxlen=SAMPLE) for nid in self.policy}
        self.count: dict[str, int] = dict.fromkeys(self.policy, 0)
        #: node -> (limit s, the words said with it), once it has one
        self.limits: dict[str, tuple[float, str]] = {}
        self._median: dict[str, float] = {}
        self._sent: dict[tuple[str, str], float] = {}  # (pilot, node) -> the limit it was sent

    @property
    def any(self) -> bool:
        return bool(self.policy)

    def done(self, nid: str, dt: Any) -> None:
        """A member of ``nid`` ended done after ``dt`` seconds."""
        if nid not in self.policy or not isinstance(dt, (int, float)) or not finite(dt) or dt < 0:
            return
        self.durations[nid].append(float(dt))
        self.count[nid] += 1
        n = self.count[nid]
        rule = self.policy[nid]
        # (the median again at each of the first N done past the threshold, then every 1/20th
        # more: a million ends cost a few hundred medians of at most SAMPLE durations)
        if n < rule.after or (n > 2 * rule.after and n % max(1, n // 20)):
            return
        median = statistics.median(self.durations[nid])
        last = self._median.get(nid)
        if last is not None and abs(median - last) <= MOVES * last:
            return
        self._median[nid] = median
        limit = max(rule.factor * median, 1.0)  # (a second at least: a member of 10 ms is not stopped at 30 ms)
        self.limits[nid] = (round(limit, 3), f"{rule.factor:g} x the median {median:.3g} s of {n:,} members done")

    def bring(self) -> None:
        """Send each live pilot that takes work the limits it has not been sent."""
        if not self.limits:
            return
        for pilot in self.pilots.values():
            if not pilot.alive or not pilot.state.takes_work:
                continue
            for nid, (limit, why) in self.limits.items():
                if self._sent.get((pilot.id, nid)) != limit:
                    pilot.send({"k": STRAGGLE, "n": nid, "s": limit, "why": why})
                    self._sent[(pilot.id, nid)] = limit
