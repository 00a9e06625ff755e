"""A node's groups (``group:``, Row's ``action.group``): which members go to a pilot slot
together, to run there one after another.

How the groups are formed, as Row forms them: the members ``include`` selects (any one
of its conditions holds; a condition is ``pwe show -q``'s language, :mod:`pwe.planning.conditions`,
over the member's parameters and index), ordered by ``sort_by`` (stable: members with
the same key keep their index order; ``reverse_sort`` descending), cut wherever the sort
key changes (``split_by_sort_key``), then into pieces of at most ``maximum_size``. A
member ``include`` leaves out runs ungrouped, one slot of its own, as without ``group``.

Cheap for a million members: without ``include`` and ``sort_by`` a group is a run of
consecutive indices and nothing is stored; otherwise two arrays of 4 bytes a member
(the order, and each member's place in it) and one offset per group, built once, when
first asked (the engine's first group, ``pwe plan``).

Which of a group's members go out together is the engine's (``pwe.engine.feed.Feeder._feed_group``):
those ready when the group is handed out (``submit_whole``: only once none waits).
"""

from __future__ import annotations

import bisect
from array import array
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

from ..base.errors import InputError, WorkflowSchemaError


class Groups:
    """The groups of one planned node (``pn.spec.group`` set)."""

    def __init__(self, pn: Any):
        self.pn = pn
        self.spec = pn.spec.group
        self.size = pn.size
        self._order: array | None = None  # member indices, group after group (None: all, in index order)
        self._pos: array | None = None  # each member's place in _order (-1: not included)
        self._starts: array | None = None  # where each group begins in _order
        self._step = self.spec.maximum_size or max(self.size, 1)
        self._built = not (self.spec.include or self.spec.sort_by)

    # -- checks at plan time ----------------------------------------------------------------
    @staticmethod
    def check(nid: str, node: Any, path: Path, line_of: Callable[..., int | None]) -> None:
        """``group:`` of node ``nid`` makes sense for its parameters: one clear line
        (:class:`WorkflowSchemaError`, exit 2) when it does not."""
        from . import conditions  # (here, not at the top: a run whose nodes have no group never imports it)

        spec = node.group
        names = set(node.parameters)
        for k, name in enumerate(spec.sort_by):
            if name not in names:
                from ..base.errors import did_you_mean

                raise WorkflowSchemaError(
                    f"node '{nid}': group.sort_by names '{name}', which is not one of its parameters"
                    f"{did_you_mean(name, names)}; sort by the node's parameters "
                    f"({', '.join(sorted(names)) or 'none'})",
                    path, line_of("nodes", nid, "group", "sort_by", k) or line_of("nodes", nid, "group"))
        for k, text in enumerate(spec.include or ()):
            where = line_of("nodes", nid, "group", "include", k) or line_of("nodes", nid, "group")
            try:
                conds = conditions.parse(text, names)
            except InputError as exc:
                raise WorkflowSchemaError(f"node '{nid}': group.include: {exc}", path, where) from None
            for c in conds:
                if not (c.field.startswith("params.") and c.field[7:] in names) and c.field != "member":
                    raise WorkflowSchemaError(
                        f"node '{nid}': group.include condition {c.text!r}: only the member's parameters and its "
                        "index ('member') are known when groups are formed; write e.g. 'seed<10'", path, where)

    # -- forming ---------------------------------------------------------------------------
    def _build(self) -> None:
        spec, n = self.spec, self.size
        chosen: Sequence[int] = range(n)
        if spec.include:
            ok = self._include_test()
            chosen = [i for i in range(n) if ok(i)]
        key: Callable[[int], int] | None = None
        if spec.sort_by:
            key = self._sort_key()
            chosen = sorted(chosen, key=key, reverse=spec.reverse_sort)
        split = key if spec.split_by_sort_key else None
        starts = array("I")
        prev, count = None, 0
        for p, i in enumerate(chosen):  # cut where the key changes (split), then by maximum_size
            k = split(i) if split is not None else None
            if p == 0 or count == self._step or k != prev:
                starts.append(p)
                count = 0
            count += 1
            prev = k
        self._order = array("I", chosen)
        pos = array("i", [-1]) * n
        for p, i in enumerate(self._order):
            pos[i] = p
        self._pos, self._starts = pos, starts
        self._built = True

    def _axis(self, name: str) -> Callable[[int], int]:
        """Member index -> the position of its value of parameter ``name`` (arithmetic)."""
        space = self.pn.space
        if space.combine == "zip":
            return lambda i: i
        stride, size = space.strides[space.names.index(name)], len(space.values[name])
        return lambda i: (i // stride) % size

    def _include_test(self) -> Callable[[int], bool]:
        """Member index -> whether ``include`` selects it. Each condition on a parameter
        is tested once per value of that parameter (a table), not once per member."""
        from . import conditions

        space = self.pn.space
        entries = []
        for text in self.spec.include or ():
            tests = []
            for c in conditions.parse(text, set(space.names)):
                if c.field == "member":
                    tests.append(lambda i, c=c: c.test({"member": i}))
                else:
                    name = c.field[7:]
                    vals = space.values[name]
                    table = bytes(c.test({"parameters": {name: vals[p]}}) for p in range(len(vals)))
                    axis = self._axis(name)
                    tests.append(lambda i, at=axis, t=table: t[at(i)])
            entries.append(tests)
        return lambda i: any(all(t(i) for t in tests) for tests in entries)

    def _sort_key(self) -> Callable[[int], int]:
        """Member index -> one whole number that orders members as their ``sort_by``
        values do (each value's rank among its parameter's, in mixed radix): a small key
        per member, where tuples of values would cost a hundred bytes each."""
        space = self.pn.space
        parts = []
        for name in self.spec.sort_by:
            vals = space.values[name]
            order = sorted(range(len(vals)), key=lambda p: _sortable(vals[p]))
            rank = array("I", bytes(4 * len(vals)))
            r = -1
            for k, p in enumerate(order):
                if k == 0 or _sortable(vals[p]) != _sortable(vals[order[k - 1]]):
                    r += 1
                rank[p] = r
            parts.append((self._axis(name), rank, r + 1))

        def key(i: int) -> int:
            out = 0
            for at, rank, radix in parts:
                out = out * radix + rank[at(i)]
            return out

        return key

    def group_of(self, i: int) -> int | None:
        """The group member ``i`` belongs to (None: ``include`` leaves it out)."""
        if not self._built:
            self._build()
        if self._pos is None:
            return i // self._step
        p = self._pos[i]
        return None if p < 0 else bisect.bisect_right(self._starts, p) - 1

    def members(self, g: int) -> Sequence[int]:
        """The members of group ``g``, in their order."""
        if not self._built:
            self._build()
        if self._order is None:
            return range(g * self._step, min(self.size, (g + 1) * self._step))
        end = self._starts[g + 1] if g + 1 < len(self._starts) else len(self._order)
        return self._order[self._starts[g]:end]

    def summary(self) -> dict[str, Any]:
        """How many groups, of which sizes, and how many members run ungrouped (``pwe plan``)."""
        if not self._built:
            self._build()
        if self._order is None:
            full, rest = divmod(self.size, self._step)
            sizes = Counter({self._step: full} if full else {})
            if rest:
                sizes[rest] += 1
            grouped = self.size
        else:
            bounds = list(self._starts) + [len(self._order)]
            sizes = Counter(b - a for a, b in zip(bounds, bounds[1:]))
            grouped = len(self._order)
        return {"groups": sum(sizes.values()), "sizes": {str(k): v for k, v in sorted(sizes.items())},
                "ungrouped": self.size - grouped, "submit_whole": self.spec.submit_whole}


def _sortable(v: Any) -> tuple:
    """A parameter value as a sort key: numbers before text, each in its own order."""
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def describe(summary: dict[str, Any]) -> str:
    """``pwe plan``'s line for a node's groups."""
    sizes = ", ".join(f"{n} of {k} member(s)" for k, n in summary["sizes"].items())
    text = f"{summary['groups']} group(s) ({sizes or 'none'})"
    if summary["ungrouped"]:
        text += f", {summary['ungrouped']} member(s) ungrouped"
    return text + (", each handed out whole" if summary["submit_whole"] else "")
