"""Packing members onto the allocation's nodes by the cores they ask for.

A member needs ``ranks x threads`` cores. It goes on one node when one node can hold it
(best fit: the fullest node that still has room, so wide members find whole nodes
later); otherwise its ranks spread over nodes, each rank's threads on one node: a rank
never straddles nodes. ``core_cap`` (coreUsageRule) caps the cores used on each node;
``exclusive`` (shareNodes: false) gives a member whole nodes that nothing else shares.

A member that asks for GPUs or memory (gpusPerMember, memoryPerMember) runs on one node
that has them free as well as the cores: it is given GPU ids of that node, and the
memory is counted against the node's (when the node's memory is known). Nothing here
enforces memory use; it keeps members from being packed beyond what the node holds.

A member that asks for tmp space (tmpPerMember, MB: its ``$TMPDIR``, pilot/tmpdirs.py) is
packed the same way against each node's tmp pool: a node without that much free takes
it on none of its ranks, and every node it runs on counts it until it ends (a member
whose ranks span nodes writes to each node's own ``$TMPDIR``). A node whose pool is not
known (``None``) is not counted.
"""

from __future__ import annotations

from .allocation import Node


class Placement(list):
    """``[(node, ranks on it), ...]``, and what a one-node member took besides cores."""

    gpu_ids: tuple[int, ...] = ()
    mem: int = 0
    tmp: int = 0  # MB of each of its nodes' tmp pool


class Packer:
    def __init__(self, nodes: list[Node], core_cap: int | None = None, tmp: dict[str, int | None] | None = None):
        """``tmp``: MB of tmp space per node name (its pool; missing or None: not counted)."""
        self.nodes = list(nodes)
        self.cap = {n.name: min(n.cores, core_cap) if core_cap else n.cores for n in nodes}
        self.free = dict(self.cap)
        self.gpus_free = {n.name: list(range(n.gpus)) for n in nodes}
        self.mem_free = {n.name: n.memory_mb for n in nodes}  # None: not known, not counted
        self.tmp_size = {n.name: (tmp or {}).get(n.name) for n in nodes}
        self.tmp_free = dict(self.tmp_size)
        self.dead: set[str] = set()

    def _has(self, name: str, gpus: int, mem: int) -> bool:
        m = self.mem_free[name]
        return len(self.gpus_free[name]) >= gpus and (m is None or m >= mem)

    @staticmethod
    def _holds(pool: dict[str, int | None], name: str, tmp: int) -> bool:
        """Whether ``pool`` (tmp_free: now; tmp_size: ever) has ``tmp`` MB on the node."""
        t = pool[name]
        return not tmp or t is None or t >= tmp

    def _take(self, got: Placement, tmp: int) -> Placement:
        """Count the member's tmp against each node it was given."""
        if tmp:
            got.tmp = tmp
            for n, _ in got:
                if self.tmp_free[n.name] is not None:
                    self.tmp_free[n.name] -= tmp
        return got

    def _limit(self, name: str, cap: int | None) -> int:
        return min(self.cap[name], cap) if cap else self.cap[name]

    def _room(self, name: str, cap: int | None) -> int:
        """Cores a member with this per-node cap may still take on the node."""
        used = self.cap[name] - self.free[name]
        return max(0, min(self.free[name], self._limit(name, cap) - used))

    def why_never(self, ranks: int, threads: int, exclusive: bool = False, cap: int | None = None,
                  gpus: int = 0, mem: int = 0, tmp: int = 0, per_node: int | None = None) -> str | None:
        """Why a member can never be placed here (even on an empty allocation), or None."""
        live = [n for n in self.nodes if n.name not in self.dead]
        if not live:
            return "no node of the allocation is left"
        sizes = [self.tmp_size[n.name] for n in live]
        if tmp and None not in sizes and tmp > max(sizes):
            return f"needs {tmp} MB of $TMPDIR (tmpPerMember); nodes here have at most {max(sizes)} MB"
        if tmp:
            live = [n for n in live if self._holds(self.tmp_size, n.name, tmp)]  # (the nodes that could ever hold it)
        if gpus or mem:
            need = ranks * threads
            whole = [n for n in live if self._limit(n.name, cap) >= need]
            if not whole:
                return (f"a member that asks for GPUs or memory runs on one node; it needs {need} cores and nodes "
                        f"here have at most {max(self._limit(n.name, cap) for n in live)} usable")
            if gpus > max(n.gpus for n in whole):
                return f"needs {gpus} GPUs on one node; nodes here have at most {max(n.gpus for n in whole)}"
            known = [n.memory_mb for n in whole if n.memory_mb is not None]
            if mem and known and len(known) == len(whole) and mem > max(known):
                return f"needs {mem} MB of memory on one node; nodes here have at most {max(known)} MB"
        biggest = max(self._limit(n.name, cap) for n in live)
        if per_node:
            spans = max(1, ranks // per_node)
            can = [n for n in live if self._limit(n.name, cap) >= per_node * threads]
            if len(can) < spans:
                return (f"its {ranks} ranks go {per_node} to a node (ranksPerNode) on {spans} nodes of "
                        f"{per_node * threads} free cores; the allocation has {len(can)} such node"
                        f"{'s' if len(can) != 1 else ''} left")
        if threads > biggest:
            return (f"a rank needs {threads} cores (threadsPerRank) but nodes here have at most {biggest}"
                    " usable")
        total = sum(self._limit(n.name, cap) // threads for n in live)
        if ranks > total:
            return f"needs {ranks} ranks of {threads} cores; the allocation holds {total}"
        return None

    def place(self, ranks: int, threads: int, exclusive: bool = False, cap: int | None = None,
              gpus: int = 0, mem: int = 0, tmp: int = 0, per_node: int | None = None) -> Placement | None:
        """Where the member's ranks go, its cores (and GPUs, memory, tmp) taken; None when
        it does not fit now. ``per_node`` (ranksPerNode): exactly that many ranks on each of
        ranks / per_node nodes."""
        live = [n for n in self.nodes if n.name not in self.dead]
        if tmp:
            live = [n for n in live if self._holds(self.tmp_free, n.name, tmp)]
        need = ranks * threads
        if per_node and not (gpus or mem):
            return self._place_even(live, ranks // per_node, per_node, threads, exclusive, cap, tmp)
        if gpus or mem:
            return self._place_with_devices(live, ranks, need, exclusive, cap, gpus, mem, tmp)
        if exclusive:
            return self._place_whole_nodes(live, ranks, threads, cap, tmp)
        # (the common case, inline: the fullest node with room for all its ranks)
        fits = [n for n in live if self._room(n.name, cap) >= need]
        if fits:
            node = min(fits, key=lambda n: (self.free[n.name], not n.local))
            self.free[node.name] -= need
            return self._take(Placement([(node, ranks)]), tmp)
        return self._place_spread(live, ranks, threads, cap, tmp)

    def _place_with_devices(self, live: list[Node], ranks: int, need: int, exclusive: bool, cap: int | None,
                            gpus: int, mem: int, tmp: int) -> Placement | None:
        """All ranks on one node with the cores, the GPUs and the memory free."""
        fits = [n for n in live if self._has(n.name, gpus, mem) and (
            self.free[n.name] == self.cap[n.name] and self._limit(n.name, cap) >= need if exclusive
            else self._room(n.name, cap) >= need)]
        if not fits:
            return None
        node = min(fits, key=lambda n: (self.free[n.name], len(self.gpus_free[n.name]), not n.local))
        got = Placement([(node, ranks)])
        got.gpu_ids = tuple(self.gpus_free[node.name][:gpus])
        del self.gpus_free[node.name][:gpus]
        if self.mem_free[node.name] is not None:
            got.mem = mem
            self.mem_free[node.name] -= mem
        self.free[node.name] = 0 if exclusive else self.free[node.name] - need
        return self._take(got, tmp)

    def _place_whole_nodes(self, live: list[Node], ranks: int, threads: int, cap: int | None,
                           tmp: int) -> Placement | None:
        """The ranks on whole free nodes, in order (exclusive: nothing else goes there)."""
        chosen = Placement()
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
        return self._take(chosen, tmp)

    def _place_spread(self, live: list[Node], ranks: int, threads: int, cap: int | None,
                      tmp: int) -> Placement | None:
        """The ranks spread over the nodes with the most room, when no one node holds them all."""
        chosen = Placement()
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
        return self._take(chosen, tmp)

    def _place_even(self, live: list[Node], spans: int, per_node: int, threads: int, exclusive: bool,
                    cap: int | None, tmp: int) -> Placement | None:
        """``per_node`` ranks on each of ``spans`` nodes (the fullest that have room: best fit)."""
        need = per_node * threads
        if exclusive:
            fits = [n for n in live if self.free[n.name] == self.cap[n.name] and self._limit(n.name, cap) >= need]
        else:
            fits = [n for n in live if self._room(n.name, cap) >= need]
        if len(fits) < spans:
            return None
        chosen = sorted(fits, key=lambda n: (self.free[n.name], not n.local))[:spans]
        for n in chosen:
            self.free[n.name] = 0 if exclusive else self.free[n.name] - need
        return self._take(Placement([(n, per_node) for n in chosen]), tmp)

    def place_on(self, name: str, ranks: int, threads: int, exclusive: bool = False, cap: int | None = None,
                 gpus: int = 0, mem: int = 0, tmp: int = 0, per_node: int | None = None) -> Placement | None:
        """:meth:`place` on node ``name`` alone (a group's next member, where the one
        before it ran: the group keeps its slot); None when that node has no room."""
        others = {n.name for n in self.nodes if n.name != name} - self.dead
        self.dead |= others
        try:
            return self.place(ranks, threads, exclusive, cap, gpus, mem, tmp, per_node)
        finally:
            self.dead -= others

    def release(self, placement: Placement, threads: int, exclusive: bool = False) -> None:
        for n, k in placement:
            if n.name in self.dead:
                continue
            self.free[n.name] = self.cap[n.name] if exclusive else self.free[n.name] + k * threads
            gpu_ids = getattr(placement, "gpu_ids", ())
            if gpu_ids:
                self.gpus_free[n.name].extend(gpu_ids)
                self.gpus_free[n.name].sort()
            if getattr(placement, "mem", 0):
                self.mem_free[n.name] += placement.mem
            if getattr(placement, "tmp", 0) and self.tmp_free[n.name] is not None:
                self.tmp_free[n.name] += placement.tmp

    def kill_node(self, name: str) -> None:
        self.dead.add(name)
        self.free[name] = 0

    @property
    def idle(self) -> bool:
        return all(self.free[n.name] == self.cap[n.name] for n in self.nodes if n.name not in self.dead)

    def place_avoiding(self, avoid: set[str], ranks: int, threads: int, exclusive: bool = False,
                       cap: int | None = None, gpus: int = 0, mem: int = 0, tmp: int = 0,
                       per_node: int | None = None) -> Placement | None:
        """:meth:`place`, on no node of ``avoid`` (pilot/nodesetup.py: a node whose
        setup_per_node has not run yet there, or failed): they count as full meanwhile."""
        saved = {name: self.free[name] for name in avoid if name in self.free}
        for name in saved:
            self.free[name] = 0
        try:
            return self.place(ranks, threads, exclusive, cap, gpus, mem, tmp, per_node)
        finally:
            self.free.update(saved)
