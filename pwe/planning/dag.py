"""The workflow's node graph: a small directed graph with the four questions the planner
asks of it (standard library only).

It replaces networkx, whose import alone cost ~117 ms of every ``pwe run`` and
``pwe validate`` (issue 13): a workflow has tens of nodes, not millions. The answers are
the ones networkx gave (same traversal orders), so messages and plans do not change.
"""

from __future__ import annotations

import heapq
from typing import Callable, Hashable, Iterable, Iterator

Node = Hashable


class Graph:
    """Nodes and edges, each kept in the order they were added."""

    def __init__(self) -> None:
        self.succ: dict[Node, dict[Node, float]] = {}
        self.pred: dict[Node, dict[Node, float]] = {}

    def add_nodes_from(self, nodes: Iterable[Node]) -> None:
        for n in nodes:
            self.succ.setdefault(n, {})
            self.pred.setdefault(n, {})

    def add_edge(self, a: Node, b: Node, w: float = 1) -> None:
        self.add_nodes_from((a, b))
        self.succ[a][b] = w
        self.pred[b][a] = w

    def has_edge(self, a: Node, b: Node) -> bool:
        return b in self.succ.get(a, {})

    @property
    def nodes(self) -> list[Node]:
        return list(self.succ)

    @property
    def edges(self) -> list[tuple[Node, Node]]:
        return [(a, b) for a, out in self.succ.items() for b in out]

    def number_of_edges(self) -> int:
        return sum(len(out) for out in self.succ.values())

    def find_cycle(self) -> list[tuple[Node, Node]] | None:
        """The edges of a cycle (from its first node back to it), or None: a depth-first
        walk from each node in order, out-edges in order (networkx's find_cycle)."""
        done: set[Node] = set()
        for root in self.succ:
            if root in done:
                continue
            path: list[Node] = [root]
            on_path = {root}
            stack: list[Iterator[Node]] = [iter(self.succ[root])]
            while stack:
                nxt = next(stack[-1], None)
                if nxt is None:
                    stack.pop()
                    done.add(path[-1])
                    on_path.discard(path.pop())
                    continue
                if nxt in on_path:
                    cycle = path[path.index(nxt):] + [nxt]
                    return list(zip(cycle, cycle[1:]))
                if nxt in done:
                    continue
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(self.succ[nxt]))
        return None

    def lexicographical_topological_sort(self, key: Callable[[Node], object]) -> list[Node]:
        """Nodes in topological order, the smallest ``key`` first among those ready
        (the graph must have no cycle)."""
        indeg = {n: len(p) for n, p in self.pred.items()}
        ready = [(key(n), i, n) for i, n in enumerate(self.succ) if not indeg[n]]
        heapq.heapify(ready)
        order = list(self.succ)
        out: list[Node] = []
        while ready:
            _, _, n = heapq.heappop(ready)
            out.append(n)
            for m in self.succ[n]:
                indeg[m] -= 1
                if not indeg[m]:
                    heapq.heappush(ready, (key(m), order.index(m), m))
        return out

    def topological_sort(self) -> list[Node]:
        """Nodes generation by generation (networkx's topological_sort order)."""
        indeg = {n: len(p) for n, p in self.pred.items()}
        gen = [n for n in self.succ if not indeg[n]]
        out: list[Node] = []
        while gen:
            out.extend(gen)
            nxt = []
            for n in gen:
                for m in self.succ[n]:
                    indeg[m] -= 1
                    if not indeg[m]:
                        nxt.append(m)
            gen = nxt
        return out

    def longest_path(self) -> list[Node]:
        """The heaviest path by edge weight (networkx's dag_longest_path: the first best
        predecessor wins a tie, the first end node in topological order wins)."""
        dist: dict[Node, tuple[float, Node]] = {}
        for v in self.topological_sort():
            us = [(dist[u][0] + w, u) for u, w in self.pred[v].items()]
            best = max(us, key=lambda x: x[0]) if us else (0, v)
            dist[v] = best if best[0] >= 0 else (0, v)
        v = max(dist, key=lambda x: dist[x][0])
        path: list[Node] = []
        u = None
        while u != v:
            path.append(v)
            u = v
            v = dist[v][1]
        path.reverse()
        return path
