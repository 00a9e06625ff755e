"""Iteration until convergence (subway's trees of jobs): the members of a checked node grow.

A node with a ``check`` (a payload template; or a Python callable given to
``pwe.run_workflow(checks=...)``) is checked after each of its members succeeds. The check
says the member converged, or names the parameter values of its children: new members of
the same node, with the member as their ``parent``. The members a node's parameters give
are the roots; each root grows a tree, at most ``max_iterations`` members deep.

The payload check runs in the member's own slot, right after it (:func:`with_check`: one
shell command, so the pilot needs nothing new), in its directory, with its environment and
its ``$PWE_OUTPUTS``, to which it appends either::

    converged=true                  # this member is a leaf of its tree
    next.x=1.25                     # one child: the member's values with x changed
    next.1.x=0.5  next.2.x=0.75     # several children, ordered by their label (1, 2)

The engine reads those lines from the member's ``end`` (:func:`decide`) and writes its
verdict into the same journal record as the end itself: ``grow`` (the children's values),
``conv``, ``limit`` (children asked at the depth bound) or ``bad`` (a check that failed or
wrote neither). So the children exist in the journal before they are fed, in the one
record that ends their parent: a resumed engine, ``pwe show`` and the checkpoint rebuild
exactly the same members, with the same indices (appended after the node's others, in
order), and a callable check is never asked twice about one member.

Dependents wait for whole trees: a member downstream of a checked node waits, per root it
matches (the usual member matching, on the roots' values), until every member of that
root's tree has ended. A tree that reached ``max_iterations`` without converging is not
a success: its dependents are skipped and the run ends unsuccessful (exit 1). The DAG of
nodes stays acyclic; only the members of one node grow.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping

#: a member's verdict (``Tree.verdict``)
CONVERGED, GREW, LIMIT = "converged", "grew", "max_iterations"
#: what a failed payload check leaves in the member's outputs (its exit status)
CHECK_EXIT = "_pwe_check"
_NEXT = re.compile(r"^next\.(?:(\d+)\.)?([A-Za-z_][A-Za-z0-9_]*)$")


class Tree:
    """The trees of one node's members: for each grown member (index ``base + k``) its
    parameter values, parent, depth and root; per member its verdict; per root still
    growing the members of its tree that have not ended done. Owned by the run's state;
    ``values`` is also the node's ``ParameterSpace.grown`` (so every reader renders and
    shows a grown member from its journaled values)."""

    def __init__(self, base: int):
        self.base = base
        self.values: list[dict[str, Any]] = []
        self.parent: list[int] = []
        self.depth: list[int] = []
        self.root: list[int] = []
        self.verdict: dict[int, str] = {}
        #: root -> members of its tree not yet done, only while the tree grows (absent: settled)
        self.open: dict[int, int] = {}
        self._limited: set[int] = set()  # roots with a member whose verdict is LIMIT

    def judge(self, i: int, verdict: str) -> None:
        self.verdict[i] = verdict
        if verdict == LIMIT:
            self._limited.add(self.root_of(i))

    def parent_of(self, i: int) -> int | None:
        return None if i < self.base else self.parent[i - self.base]

    def depth_of(self, i: int) -> int:
        """The member's iteration: 1 for a root, its parent's plus one for a child."""
        return 1 if i < self.base else self.depth[i - self.base]

    def root_of(self, i: int) -> int:
        return i if i < self.base else self.root[i - self.base]

    def grow(self, parent: int, kids: list[dict[str, Any]]) -> range:
        """Append ``parent``'s children; returns their indices."""
        first = self.base + len(self.values)
        root, depth = self.root_of(parent), self.depth_of(parent) + 1
        for values in kids:
            self.values.append(dict(values))
            self.parent.append(parent)
            self.depth.append(depth)
            self.root.append(root)
        return range(first, first + len(kids))

    def unconverged(self) -> set[int]:
        """Roots whose tree reached ``max_iterations`` with a member still asking for children."""
        return self._limited

    def children(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for k, p in enumerate(self.parent):
            out.setdefault(p, []).append(self.base + k)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "values": self.values, "parent": self.parent, "depth": self.depth,
                "root": self.root, "verdict": list(self.verdict.items()), "open": list(self.open.items())}

    def load_json(self, d: Mapping[str, Any]) -> None:
        """Fill from :meth:`to_json` (in place: ``values`` stays the space's list)."""
        self.values[:] = d["values"]
        self.parent, self.depth, self.root = list(d["parent"]), list(d["depth"]), list(d["root"])
        self.verdict = {int(i): str(v) for i, v in d["verdict"]}
        self.open = {int(i): int(n) for i, n in d["open"]}
        self._limited = {self.root_of(i) for i, v in self.verdict.items() if v == LIMIT}


def with_check(cmd: str, check: str) -> str:
    """One shell command: the member's payload, then (if it succeeded) its check, each in
    a subshell of its own (an ``exit`` in one ends only it). A check that fails leaves its
    exit status in ``$PWE_OUTPUTS`` (``_pwe_check``) and a line in the member's stderr, so
    the member's failure names its cause."""
    return (f"(\n{cmd}\n)\nrc=$?\nif [ $rc -ne 0 ]; then exit $rc; fi\n(\n{check}\n)\nrc=$?\n"
            f'if [ $rc -ne 0 ]; then echo "{CHECK_EXIT}=$rc" >> "$PWE_OUTPUTS"; '
            'echo "pwe: the check exited $rc" >&2; fi\nexit $rc')


def parse(outputs: Mapping[str, str], names: list[str]) -> list[dict[str, Any]]:
    """The children a payload check named in ``outputs`` (``[]``: converged); raises
    :class:`ValueError` (why) for lines that are not a verdict."""
    kids: dict[int, dict[str, Any]] = {}
    for key, text in outputs.items():
        m = _NEXT.match(key)
        if m is None:
            continue
        if m.group(2) not in names:
            raise ValueError(f"the check wrote '{key}', but the node has no parameter '{m.group(2)}' "
                              f"(its parameters: {', '.join(names)})")
        kids.setdefault(int(m.group(1) or -1), {})[m.group(2)] = _value(text)
    converged = str(outputs.get("converged", "")).strip().lower()
    if converged in ("true", "yes", "1"):
        if kids:
            raise ValueError("the check wrote converged=true and next.* lines; write one or the other")
        return []
    if not kids:
        raise ValueError("the check wrote neither converged=true nor next.NAME=VALUE to $PWE_OUTPUTS")
    return [kids[k] for k in sorted(kids)]


def _value(text: str) -> Any:
    """A parameter value from a check's text: an integer, a finite number, true/false, or
    the text itself."""
    t = text.strip()
    try:
        return int(t)
    except ValueError:
        pass
    try:
        f = float(t)
        if math.isfinite(f):
            return f
    except ValueError:
        pass
    if t in ("true", "false"):
        return t == "true"
    return text


def _checked_values(kids: Any, names: list[str]) -> list[dict[str, Any]]:
    """What a callable check returned, checked: a list of dicts of this node's parameters."""
    if kids is None:
        return []
    if isinstance(kids, Mapping) or not isinstance(kids, (list, tuple)):
        raise ValueError(f"the check returned {type(kids).__name__}; return None (converged) or a list of "
                          "dicts of parameter values")
    out = []
    for k in kids:
        if not isinstance(k, Mapping):
            raise ValueError(f"the check returned a list holding {type(k).__name__}; each child is a dict")
        for name, v in k.items():
            if name not in names:
                raise ValueError(f"the check named '{name}', but the node has no such parameter "
                                  f"(its parameters: {', '.join(names)})")
            if not isinstance(v, (bool, int, float, str)) or (isinstance(v, float) and not math.isfinite(v)):
                raise ValueError(f"the check gave {name}={v!r}; a value is a finite number, a bool or a string")
        out.append(dict(k))
    return out


def _ask(check: Callable[[dict], Any], member: dict[str, Any]) -> Any:
    """A callable check's answer; ValueError (why) when it raised: the member's failure."""
    try:
        return check(member)
    except Exception as exc:  # noqa: BLE001 - the user's code: whatever it raises fails the member
        raise ValueError(f"the check raised {type(exc).__name__}: {exc}") from None


def decide(plan: Any, state: Any, checks: Mapping[str, Callable[[dict], Any]], rec: dict[str, Any]) -> None:
    """Judge the ``end`` record ``rec`` of a member of a checked node, before it is
    journaled and applied: add ``grow``, ``conv``, ``limit`` or ``bad`` (with ``why``).
    Nothing for other nodes, failed members, or an end the state would ignore (stale)."""
    nid, i = rec.get("n"), rec.get("m")
    pn = plan.nodes.get(nid)
    if pn is None or (pn.check is None and nid not in checks):
        return
    ns = state.nodes[nid]
    if not isinstance(i, int) or not 0 <= i < ns.size or ns.attempt[i] != rec.get("a") or \
            ns.pilot.get(i) != rec.get("p"):
        return  # (state.apply ignores it: no verdict, and a callable is not asked)
    out = rec.get("out") or {}
    if rec.get("rc") != 0:
        if CHECK_EXIT in out:
            rec["why"] = f"the check exited {out[CHECK_EXIT]}"
        return
    names = pn.space.names
    parent = pn.space.values_of(i)
    try:
        if nid in checks:
            member = {"node": nid, "member": i, "parameters": parent, "outputs": dict(out),
                      "parent": pn.tree.parent_of(i), "iteration": pn.tree.depth_of(i)}
            kids = _checked_values(_ask(checks[nid], member), names)
        else:
            kids = parse(out, names)
    except ValueError as exc:  # (a check that failed, or said something that is not a verdict)
        rec["bad"] = 1
        rec["why"] = str(exc)[:500]
        return
    if not kids:
        rec["conv"] = 1
    elif pn.tree.depth_of(i) >= pn.max_iterations:
        rec["limit"] = 1
        rec["why"] = f"max_iterations ({pn.max_iterations}) reached: the check still asked for {len(kids)} " \
                     "child(ren)"
    else:
        rec["grow"] = [{**parent, **k} for k in kids]
