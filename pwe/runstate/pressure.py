"""Ready members ordered by pressure (issue 14, after open-lmake).

A node's *pressure* is the estimated time from the start of one of its members to the
end of the run along the longest chain below it: its member estimate plus the largest
pressure among the nodes that wait on it. Ready members of the node with the highest
pressure are handed out first, so a long chain's first member starts before a short
leaf; within a node, members go by index.

Why per node, not per member: the ready queue keeps runs of consecutive member indices
(a million ready members are one entry), and the node graph is small (tens to a few
thousand nodes), so a pressure per node costs nothing per member and is recomputed in
well under a millisecond. The price: members of one node are taken as alike (their
mean), so a member that was slow in an earlier run does not start before its siblings.

A member estimate, per node, the first of:

1. this run: the mean duration of its members that succeeded (``NodeState.done_spent``
   over its done count; rebuilt from the journal on resume), once one has ended;
2. an earlier run of the same workflow: the same mean, from ``durations.json`` in the
   newest run directory under the same run root that has one for this workflow (written
   when a run ends: what it measured, and what it had from its own earlier run for the
   nodes it did not measure), so no old journal is ever replayed;
3. ``maxWallTimePerMember`` (minutes, an upper bound);
4. :data:`DEFAULT_SECONDS`.

The engine's hooks (pwe/engine/loop.py): each lane's ready queue is a :class:`PressureQueue`
(``order: pressure``, the default) or the FIFO :class:`~pwe.runstate.state.ReadyQueue`
(``order: fifo``); :meth:`Pressure.deep_ok` keeps a pilot's queue from filling with
low-pressure members while a higher-pressure node still waits (a pilot runs its queue
first in first out, so a member queued there cannot be overtaken).
"""

from __future__ import annotations

import heapq
import json
import os
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from .readyqueue import ReadyQueue
from ..base.states import DONE, WAITING
from ..base.regular import read_json

#: a member's estimate when nothing is known about its node (seconds)
DEFAULT_SECONDS = 60.0
#: the file in a run directory with each node's mean member duration, written as the run ends
DURATIONS = "durations.json"
#: how many earlier runs (newest first, with that file) are looked at for the same workflow
LOOK_BACK = 50
#: how often at most the pressures are worked out again from new measurements (seconds)
RECOMPUTE_EVERY = 0.5


def read_durations(run_dir: Path, workflow: str) -> dict[str, float]:
    """Per node the mean member duration (seconds) of the newest earlier run of
    ``workflow`` under the same run root that recorded them; {} when there is none (an
    estimate only: nothing that cannot be read is an error). Looks at the newest
    :data:`LOOK_BACK` runs that have the file."""
    from .rundir import run_dirs

    here = Path(run_dir).resolve()
    looked = 0
    for d in run_dirs(here.parent):
        if d.resolve() == here:
            continue
        try:
            data = read_json(d / DURATIONS)
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            data = None
        looked += 1
        if isinstance(data, dict) and data.get("workflow") == workflow and isinstance(data.get("nodes"), dict):
            try:
                return {str(k): float(v["mean"]) for k, v in data["nodes"].items() if float(v["mean"]) >= 0}
            except (TypeError, KeyError, ValueError):
                return {}
        if looked >= LOOK_BACK:
            break
    return {}


def write_durations(run_dir: Path, workflow: str, state: Any, earlier: dict[str, float] | None = None) -> None:
    """Record this run's measured means (``earlier``'s for nodes it did not measure), for
    the next run of the workflow: ``durations.json`` in the run directory, atomically,
    owner-only. Never raises: an estimate is a convenience."""
    nodes = {nid: {"mean": round(m, 4), "n": 0} for nid, m in (earlier or {}).items()}
    for nid, ns in state.nodes.items():
        done = ns.counts[DONE]
        if done:
            nodes[nid] = {"mean": round(ns.done_spent / done, 4), "n": done}
    data = {"workflow": workflow, "updated": time.time(), "nodes": nodes}
    path = Path(run_dir) / DURATIONS
    try:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError:
        pass


class Pressure:
    """Each node's estimate and pressure, for one run; :meth:`refresh` after members end."""

    def __init__(self, plan: Any, earlier: dict[str, float] | None = None):
        self.plan = plan
        self.earlier = earlier or {}
        self.succ = {nid: [e.dst for e in plan.edges_out_of(nid)] for nid in plan.nodes}
        # sinks first: a node's pressure needs those of the nodes that wait on it
        self.order = list(reversed(plan.graph.topological_sort()))
        self.estimate: dict[str, float] = {}
        self.pressure: dict[str, float] = {}
        self.version = 0  # bumped whenever a pressure changes (queues re-sort)
        self._done_seen: dict[str, int] = {}
        self._at = 0.0
        self.refresh(None, force=True)

    def _estimate(self, nid: str, state: Any) -> tuple[float, str]:
        if state is not None:
            ns = state.nodes[nid]
            done = ns.counts[DONE]
            if done:
                return ns.done_spent / done, "this run"
        if nid in self.earlier:
            return self.earlier[nid], "an earlier run"
        wall = self.plan.nodes[nid].scheduling.maxWallTimePerMember
        if wall:
            return float(wall) * 60.0, "maxWallTimePerMember"
        return DEFAULT_SECONDS, "default"

    def refresh(self, state: Any, force: bool = False) -> bool:
        """Work the pressures out again when members ended since (at most every
        :data:`RECOMPUTE_EVERY` s); True when any changed."""
        now = time.monotonic()
        if not force and now - self._at < RECOMPUTE_EVERY:
            return False
        if state is not None and not force:
            seen = {nid: ns.counts[DONE] for nid, ns in state.nodes.items()}
            if seen == self._done_seen:
                self._at = now
                return False
            self._done_seen = seen
        self._at = now
        est = {nid: self._estimate(nid, state)[0] for nid in self.plan.nodes}
        pressure: dict[str, float] = {}
        for nid in self.order:
            pressure[nid] = est[nid] + max((pressure[s] for s in self.succ[nid]), default=0.0)
        changed = pressure != self.pressure
        self.estimate, self.pressure = est, pressure
        if changed:
            self.version += 1
        return changed

    def waiting_max(self, state: Any, nodes: Iterable[str]) -> float:
        """The highest pressure among ``nodes`` that still have members waiting for
        their upstream (they may become ready any moment)."""
        best = -1.0
        p = self.pressure
        for nid in nodes:
            if state.nodes[nid].counts[WAITING] and p[nid] > best:
                best = p[nid]
        return best

    def describe(self, state: Any = None) -> list[dict[str, Any]]:
        """Per node its estimate, where it came from, and its pressure (highest first)."""
        rows = []
        for nid in self.plan.nodes:
            est, source = self._estimate(nid, state)
            rows.append({"node": nid, "estimate_s": round(est, 3), "source": source,
                         "pressure_s": round(self.pressure[nid], 3)})
        return sorted(rows, key=lambda r: -r["pressure_s"])


class PressureQueue:
    """A lane's ready members, highest node pressure first, by index within a node: one
    :class:`~pwe.runstate.state.ReadyQueue` (runs of indices) per node, and a heap of the nodes
    that have members in it. The interface the engine uses of a ReadyQueue."""

    __slots__ = ("_p", "_q", "_heap", "_in", "_version", "_rank")

    def __init__(self, pressure: Pressure):
        self._p = pressure
        self._q: dict[str, ReadyQueue] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._in: set[str] = set()
        self._version = pressure.version
        # ties: the node that comes first in the workflow (a stable, explainable order)
        self._rank = {nid: k for k, nid in enumerate(pressure.plan.nodes)}

    def _push(self, nid: str) -> None:
        if nid not in self._in:
            self._in.add(nid)
            heapq.heappush(self._heap, (-self._p.pressure[nid], self._rank[nid], nid))

    def _resort(self) -> None:
        if self._version != self._p.version:
            self._version = self._p.version
            self._heap = [(-self._p.pressure[n], self._rank[n], n) for n in self._in]
            heapq.heapify(self._heap)

    def _node(self, nid: str) -> ReadyQueue:
        q = self._q.get(nid)
        if q is None:
            q = self._q[nid] = ReadyQueue()
        return q

    def append(self, item: tuple[str, int]) -> None:
        self._node(item[0]).append(item)
        self._push(item[0])

    def append_run(self, nid: str, lo: int, hi: int) -> None:
        if hi > lo:
            self._node(nid).append_run(nid, lo, hi)
            self._push(nid)

    def appendleft(self, item: tuple[str, int]) -> None:
        self._node(item[0]).appendleft(item)
        self._push(item[0])

    def extend(self, items: Iterable[tuple[str, int]]) -> None:
        for item in items:
            self.append(item)

    def pop_next(self, skip: set[str] | frozenset = frozenset()) -> tuple[str, int] | None:
        """The next member of the highest-pressure node not in ``skip``; None if none."""
        self._resort()
        heap = self._heap
        aside = []
        found = None
        while heap:
            nid = heap[0][2]
            q = self._q[nid]
            if not q:
                heapq.heappop(heap)
                self._in.discard(nid)
                continue
            if nid in skip:
                aside.append(heapq.heappop(heap))
                continue
            found = q.popleft()
            break
        for entry in aside:
            heapq.heappush(heap, entry)
        return found

    def popleft(self) -> tuple[str, int]:
        item = self.pop_next()
        if item is None:
            raise IndexError("pop from an empty queue")
        return item

    def clear(self) -> None:
        self._q.clear()
        self._heap.clear()
        self._in.clear()

    def nodes(self) -> set[str]:
        """The nodes with members queued."""
        return {nid for nid, q in self._q.items() if q}

    def __bool__(self) -> bool:
        # (the heap's top is kept non-empty here, so this costs O(1) per member popped, not
        # a look at every node: the engine asks before each member it hands out)
        self._resort()
        heap = self._heap
        while heap and not self._q[heap[0][2]]:
            self._in.discard(heapq.heappop(heap)[2])
        return bool(heap)

    def __len__(self) -> int:
        return sum(len(q) for q in self._q.values())

    def __iter__(self) -> Iterator[tuple[str, int]]:
        self._resort()
        for _, _, nid in sorted(self._heap):
            yield from self._q[nid]
