"""Packing members onto the allocation's nodes by the cores they ask for.

A member needs ``ranks x threads`` cores. It goes on one node when one node can hold it
(best fit: the fullest node that still has room, so wide members find whole nodes
later); otherwise its ranks spread over nodes, each rank's threads on one node: a rank
never straddles nodes. ``core_cap`` (coreUsageRule) caps the cores used on each node;
``exclusive`` (shareNodes: false) gives a member whole nodes that nothing else shares.
"""

from __future__ import annotations

from .allocation import Node

Placement = list[tuple[Node, int]]  # (node, ranks on it)


class Packer:
    def __init__(self, nodes: list[Node], core_cap: int | None = None):
        self.nodes = list(nodes)
        self.cap = {n.name: min(n.cores, core_cap) if core_cap else n.cores for n in nodes}
        self.free = dict(self.cap)
        self.dead: set[str] = set()

    def _limit(self, name: str, cap: int | None) -> int:
        return min(self.cap[name], cap) if cap else self.cap[name]

    def _room(self, name: str, cap: int | None) -> int:
        """Cores a member with this per-node cap may still take on the node."""
        used = self.cap[name] - self.free[name]
        return max(0, min(self.free[name], self._limit(name, cap) - used))

    def why_never(self, ranks: int, threads: int, exclusive: bool = False, cap: int | None = None) -> str | None:
        """Why a member can never be placed here (even on an empty allocation), or None."""
        live = [n for n in self.nodes if n.name not in self.dead]
        if not live:
            return "no node of the allocation is left"
        biggest = max(self._limit(n.name, cap) for n in live)
        if threads > biggest:
            return (f"a rank needs {threads} cores (threadsPerRank) but nodes here have at most {biggest}"
                    " usable")
        total = sum(self._limit(n.name, cap) // threads for n in live)
        if ranks > total:
            return f"needs {ranks} ranks of {threads} cores; the allocation holds {total}"
        return None

    def place(self, ranks: int, threads: int, exclusive: bool = False, cap: int | None = None) -> Placement | None:
        live = [n for n in self.nodes if n.name not in self.dead]
        need = ranks * threads
        if exclusive:
            chosen: Placement = []
            left = ranks
            for n in live:
                if self.free[n.name] == self.cap[n.name] and left > 0:
                    k = min(left, self._limit(n.name, cap) // threads)
                    if k:
                        chosen.append((n, k))
                        left -= k
            if left > 0:
                return None
            for n, _ in chosen:
                self.free[n.name] = 0  # whole node: nothing else goes there
            return chosen
        fits = [n for n in live if self._room(n.name, cap) >= need]
        if fits:
            node = min(fits, key=lambda n: (self.free[n.name], not n.local))
            self.free[node.name] -= need
            return [(node, ranks)]
        chosen = []
        left = ranks
        for n in sorted(live, key=lambda n: -self._room(n.name, cap)):
            k = min(left, self._room(n.name, cap) // threads)
            if k:
                chosen.append((n, k))
                left -= k
            if left == 0:
                break
        if left > 0:
            return None
        for n, k in chosen:
            self.free[n.name] -= k * threads
        return chosen

    def release(self, placement: Placement, threads: int, exclusive: bool = False) -> None:
        for n, k in placement:
            if n.name in self.dead:
                continue
            self.free[n.name] = self.cap[n.name] if exclusive else self.free[n.name] + k * threads

    def kill_node(self, name: str) -> None:
        self.dead.add(name)
        self.free[name] = 0

    @property
    def idle(self) -> bool:
        return all(self.free[n.name] == self.cap[n.name] for n in self.nodes if n.name not in self.dead)
