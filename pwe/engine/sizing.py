"""Where an attempt goes whose request outgrew its lane's nodes.

A retry's ``grow`` (or a ``pwe set``) can make one attempt ask for more memory, GPUs, cores
or tmp than a node of its lane has: the lane's partition was chosen for the first attempt
(:func:`pwe.planning.partitions.choose_partition`). Sent there, the pilot could only say it
"cannot be placed". Instead the attempt goes to a lane of the partition of the same host
that holds it, the first in the host's priority order (made when first needed, named
``host/partition``, its pilots sized from that partition); where none does, ``grow: {cap:
true}`` has held the request to the largest node's memory already (the engine's tasks:
:func:`pwe.planning.asks.grown` with :attr:`Sizing.ceiling`), else the attempt fails here,
before any pilot, with one line naming what it asks and the host's largest node.

Only members that have failed before (a grown request) or that a pwe set names are weighed;
the rest of a sweep goes to its lane by its node, as it always did (one look per run of
members, not per member).
"""

from __future__ import annotations

from typing import Any, Callable

from ..planning.asks import asks
from ..planning.lanes import whole_host
from ..planning.partitions import for_partition, largest_node, node_lacks, partition_for, shows_partition
from .handles import Lane, lane_for

#: the pilot id of an attempt the engine ended itself, before any pilot had it
NO_PILOT = "-"


class Sizing:
    """Each member's lane, for the members whose request may have outgrown their node's."""

    def __init__(self, plan: Any, recorded: dict[str, Any], lanes: dict[str, Lane], lane_of: dict[str, str],
                 status_every: float, settings_for: Callable[[str, int], dict[str, Any] | None]):
        self.plan = plan
        self.recorded = recorded
        self.lanes = lanes
        self.lane_of = lane_of
        self.status_every = status_every
        self.settings_for = settings_for
        # (a host whose record cannot be read: its lanes stand as they are)
        self.hosts = {name: h for name in recorded if (h := whole_host(recorded, name)) is not None}
        #: the nodes whose retries ask for more (retry.grow): their retried members are weighed
        self.growing = {nid for nid, pn in plan.nodes.items() if pn.retry is not None and pn.retry.grow is not None}
        #: per node with ``grow: {cap: true}``: its host's largest node (planning.partitions.largest_node)
        self.ceiling: dict[str, dict[str, Any]] = {}
        for nid in self.growing:
            whole = self._host_of(nid)
            if self.plan.nodes[nid].retry.grow.cap and whole is not None:
                self.ceiling[nid] = largest_node(whole)
        self._outgrows: dict[tuple[str, int], bool] = {}  # (set_outgrows, per node and count of sets)

    def _host_of(self, nid: str) -> Any:
        lane = self.lanes.get(self.lane_of.get(nid, ""))
        return None if lane is None else self.hosts.get(lane.host.name)

    def weighs(self, nid: str, sets: list[dict[str, Any]]) -> bool:
        """Whether members of ``nid`` may need another lane than their node's (a cheap look
        per run of ready members): its retries grow, or a pwe set asks more for it than
        its lane's nodes have."""
        return nid in self.growing or self.set_outgrows(nid, sets)

    def set_outgrows(self, nid: str, sets: list[dict[str, Any]]) -> bool:
        """Whether a pwe set in force (the state's ``sets``) asks more of a node for some
        member of ``nid`` than its lane's nodes have: then each of its members is weighed."""
        if not sets:
            return False
        key = (nid, len(sets))
        if key not in self._outgrows:
            view, pn = self.lanes[self.lane_of[nid]].host, self.plan.nodes[nid]
            self._outgrows[key] = any(node_lacks(view, asks(pn, 0, s.get("values") or {}))
                                      for s in sets if s.get("only") is None or nid in s["only"])
        return self._outgrows[key]

    def route(self, nid: str, i: int, retried: int) -> tuple[str, str | None]:
        """(The lane of member ``i`` of ``nid``'s next attempt, after ``retried`` failed
        ones; None, or the one line why no node of its host holds it)."""
        base = self.lane_of[nid]
        pn = self.plan.nodes[nid]
        ask = asks(pn, retried, self.settings_for(nid, i) or None, self.ceiling.get(nid))
        if not node_lacks(self.lanes[base].host, ask):
            return base, None
        whole = self._host_of(nid)
        if whole is None:
            return base, None
        part, why = partition_for(whole, pn.scheduling, ask)
        if part is None:
            return base, why or None
        return self.lane_of_partition(whole, part, for_partition(whole, part)), None

    def lane_of_partition(self, whole: Any, part: Any, view: Any) -> str:
        """The lane of host ``whole``'s partition ``part``: the run's own where it has one,
        else one made now, ``host/partition``."""
        for key, lane in self.lanes.items():
            if shows_partition(lane.host, whole.name, part.name):
                return key
        key = f"{whole.name}/{part.name}"
        self.lanes[key] = lane_for(view, whole, self.recorded[whole.name], self.status_every, key)
        return key


def restore_partition_lane(lanes: dict[str, Lane], recorded: dict[str, Any], name: str | None,
                           status_every: float) -> None:
    """Before a resumed engine reattaches a pilot of lane ``host/partition`` that an attempt
    grew into (:class:`Sizing`): that lane again, from the run's recorded hosts."""
    if not name or name in lanes or "/" not in name:
        return
    host_name, _, part_name = name.rpartition("/")
    whole = whole_host(recorded, host_name)
    if whole is None:
        return
    part = next((p for p in whole.partitions if p.name == part_name), None)
    if part is not None:
        lanes[name] = lane_for(for_partition(whole, part), whole, recorded[host_name], status_every, name)
