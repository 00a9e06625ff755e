"""A workflow seen before it runs: what ``pwe validate`` and ``pwe plan`` show, worked out
the way the engine checks a run before it makes anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def check(file: str, sets: tuple[str, ...], host: str | None, hosts_file: str | None,
          workspace: str | None = None):
    """(plan, hosts used by name, warnings) of ``file`` with ``--set`` texts ``sets``; its
    workspace (``--workspace``, else its ``workspace:``) a directory, as a run needs it."""
    from ..workflow.load import parse_sets
    from ..planning import products
    from ..planning.placement import plan_for_hosts

    planned = plan_for_hosts(file, parse_sets(sets), host=host, hosts_file=hosts_file)
    products.workspace(planned[0], workspace)
    return planned


def param_summary(plan: Any, nid: str) -> str:
    """A node's parameters and their counts: ``T(3) x seed(4)``, ``-`` for none."""
    space = plan.nodes[nid].space
    if not space.names:
        return "-"
    sep = " x " if space.combine == "product" else " zip "
    return sep.join(f"{n}({len(space.values[n])})" for n in space.names)


def summary(plan: Any, warnings: list[str]) -> dict[str, Any]:
    """What ``pwe validate --json`` prints: nodes, members, edges, critical path, warnings."""
    path, length = plan.critical_path()
    return {
        "workflow": plan.workflow.name,
        "file": str(plan.file),
        "total_members": plan.total_members,
        "nodes": [
            {
                "id": nid,
                "members": n.size,
                "parameters": {p: len(n.space.values[p]) for p in n.space.names},
                "combine": n.space.combine,
                "host": n.host,
                "after": list(n.spec.after),
                "retries": n.retries,
                "cores_per_member": n.scheduling.cores_per_member(),
                # a checked node: its members are the roots of trees that grow (pwe/planning/trees.py)
                **({"check": {"max_iterations": n.max_iterations}} if n.check is not None else {}),
            }
            for nid, n in plan.nodes.items()
        ],
        "edges": [
            {"from": e.src, "to": e.dst, "matching": "barrier" if e.barrier else "matched", "on": list(e.shared)}
            for e in plan.edges
        ],
        "critical_path": path,
        "critical_path_minutes": length,
        "warnings": warnings,
    }


def preview(plan: Any, hosts: dict[str, Any], warnings: list[str], show: int) -> dict[str, Any]:
    """What ``pwe plan --json`` prints: the summary, each node with its first ``show``
    members (and its last) and their commands and its scheduling, and the first pilot
    job's script of each batch host."""
    from ..planning.partitions import partition_choices, partition_lanes
    from ..planning.placement import preview_pilot_script

    # one script per lane: a host, or each partition of a host whose nodes need several
    scripts = {key: script for key, (h, nids) in partition_lanes(plan, hosts).items()
               if (script := preview_pilot_script(plan, h, nids[0] if nids else None)) is not None}
    partitions = partition_choices(plan, hosts)
    shown: dict[str, list[dict[str, Any]]] = {}
    for nid, n in plan.nodes.items():
        idx = list(range(min(show, n.size)))
        if n.size > show:
            idx.append(n.size - 1)
        shown[nid] = [{"member": i, "parameters": n.space.values_of(i), "command": plan.command(nid, i)} for i in idx]
    out = summary(plan, warnings)
    for node in out["nodes"]:
        node["members_shown"] = shown[node["id"]]
        node["scheduling"] = plan.nodes[node["id"]].scheduling.model_dump(exclude_none=True)
        node["partition"] = partitions[node["id"]]  # the partition its pilots go to, and why
        if plan.nodes[node["id"]].spec.group is not None:  # (count and sizes: pwe/planning/groups.py)
            from ..planning.groups import Groups

            node["groups"] = Groups(plan.nodes[node["id"]]).summary()
    out["pilot_scripts"] = scripts
    out.update(order_and_limits(plan, hosts))
    return out


def order_and_limits(plan: Any, hosts: dict[str, Any]) -> dict[str, Any]:
    """The order ready members go out in, each node's pressure as estimated before the
    run (an earlier run's durations are the engine's, under its run root), and the limits
    on user-defined resources: the run's, each host's, what each node asks for."""
    from ..planning.limits import limit_lines
    from ..runstate.pressure import Pressure

    press = Pressure(plan)
    return {"order": plan.workflow.order,
            "pressure": press.describe() if plan.workflow.order == "pressure" else [],
            "limits": limit_lines(plan, hosts)}


def add_products(out: dict[str, Any], plan: Any, workspace: str | None) -> None:
    """When a node names products (:mod:`pwe.planning.products`): each node's ``complete``,
    ``eligible`` and ``waiting`` members as a run into the workspace would begin now,
    and the workspace with the directories listed to know it."""
    from ..planning import products

    root = products.workspace(plan, workspace)
    if not any(n.products for n in plan.nodes.values()):
        return
    found = products.scan(plan, root)
    counts = plan_counts(plan, found)
    for node in out["nodes"]:
        node.update(counts[node["id"]])
        node["products"] = [t.source for t in plan.nodes[node["id"]].products]
    out["workspace"] = str(root)
    out["dirs_listed"] = found.dirs_listed


def plan_counts(plan: Any, found: Any) -> dict[str, dict[str, int]]:
    """Per node what ``pwe plan`` says before a run: ``complete`` (products all there),
    ``eligible`` (ready to run now: nothing it waits for is missing) and ``waiting`` (on
    members upstream), worked out by the state's own rules with the complete members done."""
    from ..planning.products import complete_runs
    from ..base.states import READY, WAITING
    from ..runstate.records import complete
    from ..runstate.state import RunState

    st = RunState(plan)
    for nid, runs in complete_runs(found):
        st.apply(complete(nid, runs))
    return {nid: {"complete": found.count(nid), "eligible": ns.counts[READY], "waiting": ns.counts[WAITING]}
            for nid, ns in st.nodes.items()}


def add_reuse(out: dict[str, Any], plan: Any, workspace: str | None, reuse_from: str | None = None,
              fresh: bool = False, explain: bool = False) -> None:
    """Per node what a run beginning now would reuse from earlier runs of the workflow
    (:mod:`pwe.runstate.reusable`: the runs root ./pwe-runs, or ``reuse_from``) and would
    run: ``reused`` and ``run``; with ``explain``, per node why the others run (``why``:
    {reason: [[lo, hi], ...]}; ``changes``: the change named, counted,
    :meth:`pwe.runstate.rerun_why.Why.node`, and ``members_why``: each member's reasons
    where few run) and, for the run, the earlier runs that lend nothing and why
    (``not_lending``). Nothing with ``fresh`` (a run with --fresh reuses nothing)."""
    from ..planning import products
    from ..planning.reuse import reusable as may_reuse
    from ..runstate import reusable, rundir

    if fresh:
        out["reuse"] = {"fresh": True}
        return
    if not any(may_reuse(plan, nid) for nid in plan.nodes):
        return
    root = Path(reuse_from).expanduser() if reuse_from else rundir.DEFAULT_ROOT
    found, notes = reusable.lenders(root, plan.workflow.name, named=bool(reuse_from))
    ws = str(products.workspace(plan, workspace))
    if explain:
        from ..runstate.rerun_why import Why

        why = Why(plan, ws, found, notes)
        decision = why.decision
    else:
        decision = reusable.decide(plan, ws, found, notes)
    out["reuse"] = {"from": str(root.resolve()), "runs": [lender.run for lender in found]}
    if explain:
        out["reuse"]["not_lending"] = notes
    for node in out["nodes"]:
        nid = node["id"]
        node["reused"] = decision.count(nid)
        node["run"] = plan.nodes[nid].size - node["reused"]
        if explain:
            node["why"] = {reason: runs for reason, runs in decision.why.get(nid, {}).items() if runs}
            named = why.node(nid)
            node["changes"] = named["changes"]
            if "members" in named:
                node["members_why"] = [{"member": d["member"], "parameters": d["parameters"],
                                        "reasons": [r["text"] for r in d["reasons"]]} for d in named["members"]]
