"""Limits on user-defined resources (issue 14, after subway and open-lmake).

A node says what one of its members holds while it runs (``resources: {license: 1}``);
the workflow says how much of each there is in the whole run (``limits: {license: 4}``),
a host entry how much there is on that host (its ``limits``); both apply when both are
given. The engine hands a member out only if what it asks for fits under every limit
that covers it, counting what is in flight: members assigned to a pilot or running,
across all pilots and hosts.

The counts are not kept anywhere of their own: they are worked out, at each feed of a
pilot, from the members' states (``NodeState.counts``: queued + running), which the
journal rebuilds after any crash. So a resumed engine (``kill -9``, ``pwe resume``)
counts the members its pilots still run, and never goes above a limit around a restart.
A member counts from its assignment until its pilot says it ended (its process reaped),
so the limit holds for the processes themselves, not only for the engine's books.

Checked before a run (``pwe validate``/``plan``/``run``): a node asking for more of a
resource than a limit allows could never run, and a resource no limit names is most
likely misspelt; both are one line, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..base.errors import InputError
from ..base.source import did_you_mean


def check(plan: Any, hosts: dict[str, Any], src: Path) -> None:
    """Every resource a node asks for is limited (by the workflow or its host), and no
    limit is smaller than what one member asks for; :class:`InputError` otherwise."""
    run_limits = plan.workflow.limits
    for nid, pn in plan.nodes.items():
        host = hosts.get(pn.host)
        host_limits = host.limits if host is not None else {}
        for name, amount in pn.spec.resources.items():
            if name not in run_limits and name not in host_limits:
                known = set(run_limits) | set(host_limits)
                raise InputError(
                    f"node '{nid}': resource '{name}' has no limit{did_you_mean(name, known)}; add "
                    f"'limits: {{{name}: N}}' to the workflow or to host '{pn.host}' in hosts.yaml", src,
                    pn.resources_line or pn.line)
            for where, limits in (("the workflow's limits", run_limits),
                                  (f"the limits of host '{pn.host}'", host_limits)):
                if name in limits and amount > limits[name]:
                    raise InputError(
                        f"node '{nid}': a member needs {amount} of '{name}' but {where} allow {limits[name]} at once, "
                        f"so it could never run; lower its resources or raise the limit", src,
                        pn.resources_line or pn.line)


def limit_lines(plan: Any, hosts: dict[str, Any]) -> dict[str, Any]:
    """What ``pwe plan`` shows: the run's limits, each host's, and what each node asks."""
    return {
        "run": dict(plan.workflow.limits),
        "hosts": {name: dict(h.limits) for name, h in hosts.items() if h.limits},
        "nodes": {nid: dict(pn.spec.resources) for nid, pn in plan.nodes.items() if pn.spec.resources},
    }


class Limits:
    """The engine's gate: built once per engine from the plan and its lanes' hosts."""

    def __init__(self, plan: Any, host_of: dict[str, str], host_limits: dict[str, dict[str, int]]):
        self.run = dict(plan.workflow.limits)
        self.hosts = {host: dict(lim) for host, lim in host_limits.items() if lim}
        self.host_of = host_of
        # per node what one member holds, only the names some limit covers
        self.need: dict[str, dict[str, int]] = {}
        for nid, pn in plan.nodes.items():
            host_lim = self.hosts.get(host_of[nid], {})
            need = {k: v for k, v in pn.spec.resources.items() if k in self.run or k in host_lim}
            if need:
                self.need[nid] = need

    @classmethod
    def of(cls, plan: Any, lane_of: dict[str, str], lanes: dict[str, Any]) -> "Limits | None":
        """The gate, or None when no node asks for a resource (nothing to count)."""
        # counted per host, not per lane: a host whose nodes need two partitions has two
        # lanes (partitions.partition_lanes), and its limit holds across both
        host_of = {nid: lanes[lane].host.name for nid, lane in lane_of.items()}
        gate = cls(plan, host_of, {lane.host.name: getattr(lane.host, "limits", {}) for lane in lanes.values()})
        return gate if gate.need else None

    def gate(self, in_flight: Callable[[str], int]) -> "Gate":
        """What is in flight now, from ``in_flight(node)``: how many members of a node are
        queued on a pilot or running (the engine counts them in its members' states)."""
        run_used: dict[str, int] = {}
        host_used: dict[tuple[str, str], int] = {}
        for nid, need in self.need.items():
            held = in_flight(nid)
            if not held:
                continue
            host = self.host_of[nid]
            for name, amount in need.items():
                run_used[name] = run_used.get(name, 0) + amount * held
                host_used[(host, name)] = host_used.get((host, name), 0) + amount * held
        return Gate(self, run_used, host_used)


class Gate:
    """One feed's view of the limits: :meth:`take` a member's resources if they fit."""

    __slots__ = ("limits", "run_used", "host_used")

    def __init__(self, limits: Limits, run_used: dict[str, int], host_used: dict[tuple[str, str], int]):
        self.limits, self.run_used, self.host_used = limits, run_used, host_used

    def fits(self, nid: str) -> bool:
        """Whether one more member of ``nid`` fits under every limit (nothing counted)."""
        need = self.limits.need.get(nid)
        if not need:
            return True
        host = self.limits.host_of[nid]
        host_lim = self.limits.hosts.get(host, {})
        for name, amount in need.items():
            cap = self.limits.run.get(name)
            if cap is not None and self.run_used.get(name, 0) + amount > cap:
                return False
            cap = host_lim.get(name)
            if cap is not None and self.host_used.get((host, name), 0) + amount > cap:
                return False
        return True

    def take(self, nid: str) -> bool:
        """True (and counted) when one more member of ``nid`` fits under every limit."""
        if not self.fits(nid):
            return False
        need = self.limits.need.get(nid)
        if not need:
            return True
        host = self.limits.host_of[nid]
        for name, amount in need.items():
            self.run_used[name] = self.run_used.get(name, 0) + amount
            self.host_used[(host, name)] = self.host_used.get((host, name), 0) + amount
        return True

