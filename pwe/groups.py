"""A node's groups (``group:``, Row's ``action.group``): which members go to a pilot slot
together, to run there one after another.

How the groups are formed, as Row forms them: the members ``include`` selects (any one
of its conditions holds; a condition is ``pwe show -q``'s language, :mod:`pwe.query`,
over the member's parameters and index), ordered by ``sort_by`` (stable: members with
the same key keep their index order; ``reverse_sort`` descending), cut wherever the sort
key changes (``split_by_sort_key``), then into pieces of at most ``maximum_size``. A
member ``include`` leaves out runs ungrouped, one slot of its own, as without ``group``.

Cheap for a million members: without ``include`` and ``sort_by`` a group is a run of
consecutive indices and nothing is stored; otherwise two arrays of 4 bytes a member
(the order, and each member's place in it) and one offset per group, built once, when
first asked (the engine's first group, ``pwe plan``).

Which of a group's members go out together is the engine's (``Engine._feed_group``):
those ready when the group is handed out (``submit_whole``: only once none waits).
"""

from __future__ import annotations

import bisect
from array import array
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

from . import query
from .errors import InputError, WorkflowSchemaError


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
        spec = node.group
        names = set(node.parameters)
        for k, name in enumerate(spec.sort_by):
            if name not in names:
                from .errors import did_you_mean

                raise WorkflowSchemaError(
                    f"node '{nid}': group.sort_by names '{name}', which is not one of its parameters"
                    f"{did_you_mean(name, names)}; sort by the node's parameters "
                    f"({', '.join(sorted(names)) or 'none'})",
                    path, line_of("nodes", nid, "group", "sort_by", k) or line_of("nodes", nid, "group"))
        for k, text in enumerate(spec.include or ()):
            where = line_of("nodes", nid, "group", "include", k) or line_of("nodes", nid, "group")
            try:
                conds = query.parse(text, names)
            except InputError as exc:
                raise WorkflowSchemaError(f"node '{nid}': group.include: {exc}", path, where) from None
            for c in conds:
                if not (c.field.startswith("params.") and c.field[7:] in names) and c.field != "member":
                    raise WorkflowSchemaError(
                        f"node '{nid}': group.include condition {c.text!r}: only the member's parameters and its "
                        "index ('member') are known when groups are formed; write e.g. 'seed<10'", path, where)

    # -- forming ---------------------------------------------------------------------------
    def _build(self) -> None:
        spec, space, n = self.spec, self.pn.space, self.size
        conds = [query.parse(t, set(space.names)) for t in spec.include or ()]
        if conds:
            def row(i: int) -> dict[str, Any]:
                return {"parameters": space.values_of(i), "member": i}

            chosen: Sequence[int] = [i for i in range(n) if any(query.matches(c, row(i)) for c in conds)]
        else:
            chosen = range(n)
        keys: list[tuple] | None = None
        if spec.sort_by:
            cols = [(space.values[name], space.strides[space.names.index(name)], space.combine == "zip")
                    for name in spec.sort_by]

            def key(i: int) -> tuple:
                return tuple(_sortable(vals[i if zipped else (i // stride) % len(vals)])
                             for vals, stride, zipped in cols)

            chosen = sorted(chosen, key=key, reverse=spec.reverse_sort)
            keys = [key(i) for i in chosen] if spec.split_by_sort_key else None
        starts = array("I")
        at = 0
        while at < len(chosen):
            end = min(at + self._step, len(chosen))
            if keys is not None:  # cut where the key changes (then by maximum_size)
                cut = at + 1
                while cut < end and keys[cut] == keys[at]:
                    cut += 1
                end = cut
            starts.append(at)
            at = end
        self._order = array("I", chosen)
        pos = array("i", [-1]) * n
        for p, i in enumerate(self._order):
            pos[i] = p
        self._pos, self._starts = pos, starts
        self._built = True

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
