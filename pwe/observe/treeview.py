"""The trees of a run's checked nodes as ``pwe show RUN --tree`` draws them (and ``--json``
gives them): each root with its children, their parameters, state and verdict
(pwe/planning/trees.py). Read-only: the run's state from its checkpoint and journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.errors import InputError
from ..base.states import NAMES
from ..runstate.state import RunState


def checked_nodes(st: RunState) -> list[str]:
    return [nid for nid, pn in st.plan.nodes.items() if pn.check is not None or nid in st.api_checks]


def trees(st: RunState, node: str | None = None) -> dict[str, Any]:
    """Per checked node: its trees, each a nested ``{member, parameters, state, verdict,
    outputs, children: [...]}``, with each tree's outcome (``converged``, ``unconverged``:
    max_iterations reached, ``failed``, ``growing``)."""
    nodes = checked_nodes(st)
    if node is not None:
        if node not in st.nodes:
            from ..base.source import did_you_mean

            raise InputError(f"the run has no node '{node}'{did_you_mean(node, st.nodes)}")
        if node not in nodes:
            raise InputError(f"node '{node}' has no check: its members grow no trees")
        nodes = [node]
    out: dict[str, Any] = {}
    for nid in nodes:
        ns = st.nodes[nid]
        tree = st.plan.nodes[nid].tree
        pn = st.plan.nodes[nid]
        # every member's entry, then each linked under its parent (no recursion: a tree may
        # be max_iterations deep)
        entry = [{"member": i, "parameters": pn.space.values_of(i), "state": NAMES[ns.state[i]],
                  "verdict": tree.verdict.get(i), "outputs": ns.outputs.get(i, {}), "children": []}
                 for i in range(ns.size)]
        for i in range(tree.base, ns.size):
            entry[tree.parent_of(i)]["children"].append(entry[i])
        roots = []
        for r in range(tree.base):
            entry[r]["outcome"] = _outcome(st, nid, r)
            roots.append(entry[r])
        out[nid] = {"max_iterations": st.plan.nodes[nid].max_iterations, "members": ns.size, "trees": roots}
    return out


def _outcome(st: RunState, nid: str, root: int) -> str:
    tree = st.plan.nodes[nid].tree
    ns = st.nodes[nid]
    members = [root] + [tree.base + k for k, r in enumerate(tree.root) if r == root]
    if root in tree.unconverged():
        return "unconverged"
    states = {ns.state[i] for i in members}
    if states & {NAMES.index("failed"), NAMES.index("skipped"), NAMES.index("cancelled")}:
        return "failed"
    if root in tree.open or states != {NAMES.index("done")}:
        return "growing"
    return "converged"


def tree_lines(data: dict[str, Any]) -> list[str]:
    """The drawing: one line per member, indented under its parent."""
    lines: list[str] = []
    for nid, d in data.items():
        lines.append(f"{nid} (max_iterations {d['max_iterations']}, {d['members']} members)")

        todo = [(t, "", k == len(d["trees"]) - 1, True) for k, t in enumerate(d["trees"])][::-1]
        while todo:  # (depth first, without recursion)
            t, prefix, last, top = todo.pop()
            params = " ".join(f"{k}={v}" for k, v in t["parameters"].items())
            verdict = f" {t['verdict']}" if t.get("verdict") else ""
            outcome = f"  => {t['outcome']}" if top else ""
            lines.append(f"{prefix}{'`-- ' if last else '|-- '}[{t['member']}] {params}  {t['state']}{verdict}"
                         f"{outcome}")
            below = prefix + ("    " if last else "|   ")
            kids = t["children"]
            todo.extend((c, below, k == len(kids) - 1, False) for k, c in reversed(list(enumerate(kids))))
    return lines


def show_trees(run_dir: Path, node: str | None = None) -> dict[str, Any]:
    from .results import load_state

    return trees(load_state(run_dir)[1], node)


def unconverged_lines(st: RunState, ref: str) -> list[str]:
    """What ``pwe run`` says of trees that reached max_iterations without converging."""
    lines = []
    for nid, roots in st.unconverged().items():
        shown = ", ".join(str(r) for r in roots[:5]) + (", ..." if len(roots) > 5 else "")
        lines.append(f"node '{nid}': {len(roots)} tree(s) reached max_iterations "
                     f"({st.plan.nodes[nid].max_iterations}) without converging (roots {shown}); "
                     f"their dependents were skipped. see: pwe show {ref} --tree")
    return lines
