"""The members ready to run, in the order they became ready, as runs of consecutive
indices (:class:`ReadyQueue`): the run state's queue, and each lane's, and pressure
ordering's (pwe/runstate/pressure.py).
"""

from __future__ import annotations

from collections import deque
from typing import Iterable


class ReadyQueue:
    """Members ready to run, first in first out, kept as runs ``[node, lo, hi)`` of
    consecutive indices: what a node's members become ready in index order (all at once at
    the start, or one after another as their upstream ends) costs one entry per run, not
    one per member. The deque's interface for ``(node, index)`` pairs."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: deque[list] = deque()

    def append(self, item: tuple[str, int]) -> None:
        nid, i = item
        runs = self._runs
        if runs:
            last = runs[-1]
            if last[2] == i and last[0] == nid:
                last[2] = i + 1
                return
        runs.append([nid, i, i + 1])

    def append_run(self, nid: str, lo: int, hi: int) -> None:
        """Members lo..hi-1 of ``nid``, in order."""
        if hi <= lo:
            return
        runs = self._runs
        if runs and runs[-1][2] == lo and runs[-1][0] == nid:
            runs[-1][2] = hi
        else:
            runs.append([nid, lo, hi])

    def appendleft(self, item: tuple[str, int]) -> None:
        nid, i = item
        runs = self._runs
        if runs and runs[0][1] == i + 1 and runs[0][0] == nid:
            runs[0][1] = i
        else:
            runs.appendleft([nid, i, i + 1])

    def extend(self, items: Iterable[tuple[str, int]]) -> None:
        for item in items:
            self.append(item)

    def popleft(self) -> tuple[str, int]:
        run = self._runs[0]
        i = run[1]
        run[1] = i + 1
        if run[1] >= run[2]:
            self._runs.popleft()
        return run[0], i

    def pop_next(self, skip: set[str] | frozenset = frozenset()) -> tuple[str, int] | None:
        """The first member of a node not in ``skip`` (nodes held back by a limit this
        feed: :mod:`pwe.planning.limits`), or None; the runs passed over keep their places."""
        if not skip:
            return self.popleft() if self._runs else None
        for k, run in enumerate(self._runs):
            if run[0] not in skip:
                i = run[1]
                run[1] = i + 1
                if run[1] >= run[2]:
                    del self._runs[k]
                return run[0], i
        return None

    def take_runs(self) -> deque[list]:
        """Every run ``[node, lo, hi]``, in order, leaving the queue empty."""
        runs, self._runs = self._runs, deque()
        return runs

    def clear(self) -> None:
        self._runs.clear()

    def nodes(self) -> set[str]:
        """The nodes with members queued (one look per run, not per member)."""
        return {run[0] for run in self._runs}

    def __bool__(self) -> bool:
        return bool(self._runs)

    def __len__(self) -> int:
        return sum(hi - lo for _, lo, hi in self._runs)

    def __iter__(self):
        for nid, lo, hi in list(self._runs):
            for i in range(lo, hi):
                yield nid, i


class Prioritized:
    """A lane's queue where members that ``pwe set priority=N`` names go before the rest:
    the highest priority first, each priority first in first out, then the wrapped queue in
    its own order (first in first out, or pressure). The interface the engine uses of a
    :class:`ReadyQueue`; a member put here may also stand in the wrapped queue: whichever
    entry comes first takes it, the other is then a stale entry, passed over."""

    __slots__ = ("base", "_first", "_last")

    def __init__(self, base) -> None:
        self.base = base
        self._first: dict[int, ReadyQueue] = {}
        self._last = base  # (where the last member popped came from: appendleft puts it back there)

    def put(self, priority: int, item: tuple[str, int]) -> None:
        """``item`` at the back of the members of ``priority``."""
        self._first.setdefault(priority, ReadyQueue()).append(item)

    def append(self, item: tuple[str, int]) -> None:
        self.base.append(item)

    def append_run(self, nid: str, lo: int, hi: int) -> None:
        self.base.append_run(nid, lo, hi)

    def extend(self, items: Iterable[tuple[str, int]]) -> None:
        self.base.extend(items)

    def appendleft(self, item: tuple[str, int]) -> None:
        self._last.appendleft(item)

    def pop_next(self, skip: set[str] | frozenset = frozenset()) -> tuple[str, int] | None:
        for p in sorted(self._first, reverse=True):
            q = self._first[p]
            item = q.pop_next(skip)
            if item is not None:
                self._last = q
                return item
            if not q:
                del self._first[p]
        self._last = self.base
        return self.base.pop_next(skip)

    def popleft(self) -> tuple[str, int]:
        item = self.pop_next()
        if item is None:
            raise IndexError("pop from an empty queue")
        return item

    def nodes(self) -> set[str]:
        return set().union(self.base.nodes(), *(q.nodes() for q in self._first.values()))

    def clear(self) -> None:
        self._first.clear()
        self.base.clear()

    def __iter__(self):
        for p in sorted(self._first, reverse=True):
            yield from self._first[p]
        yield from self.base

    def __len__(self) -> int:
        return len(self.base) + sum(len(q) for q in self._first.values())

    def __bool__(self) -> bool:
        return bool(self.base) or any(self._first.values())
