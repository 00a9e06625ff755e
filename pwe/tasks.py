"""A member's task: the message that hands one attempt of it to a pilot.

Built once per attempt, on the dispatch path (thousands a second): plain dicts, the
environment's fixed part computed once per run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pilot.wire import TASK

from .plan import Plan
from .rundir import member_path
from .source import value_text


class TaskBuilder:
    """The ``task`` messages of one run's members (pilot/wire.py lists their fields)."""

    def __init__(self, plan: Plan, run_id: str, run_dir: Path, workspace: str | None = None):
        self.plan = plan
        self._env_base = {"PWE_RUN_ID": run_id}
        self._workspace = workspace  # (pwe.products; a run made before workspaces has none)
        if workspace:
            self._env_base["PWE_WORKSPACE"] = workspace
        self._members = str(run_dir / "members")
        self.setups = setup_sets(plan)  # setup_per_node: {id: lines}, sent to each pilot once
        self._setup = {nid: sid for sid, (lines, nids) in self.setups.items() for nid in nids}

    def build(self, nid: str, i: int, attempt: int) -> dict[str, Any]:
        """Member ``i`` of node ``nid``, attempt ``attempt``: its command, directory,
        environment and what it asks of a node. An earlier attempt's files are set aside."""
        pn = self.plan.nodes[nid]
        sched = pn.scheduling
        cwd = member_path(self._members, nid, i)
        if attempt > 1:
            _keep_previous_attempt(Path(cwd), attempt - 1)
        env = dict(self._env_base)
        ranks, threads = sched.ranksPerMember or 1, sched.threadsPerRank or 1
        env.update({
            "PWE_NODE": nid, "PWE_MEMBER": str(i), "PWE_ATTEMPT": str(attempt), "PWE_HOST": pn.host,
            "PWE_RANKS": str(ranks), "PWE_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
            "PWE_WALLTIME_MINUTES": _minutes(sched.maxWallTimePerMember or sched.maxWallTime),
        })
        for name, value in pn.space.values_of(i).items():
            env["PWE_PARAM_" + name.upper()] = value_text(value)
        if pn.tree is not None and i >= pn.space.size:  # a member a check grew: its place in its tree
            env["PWE_PARENT"], env["PWE_ITERATION"] = str(pn.tree.parent_of(i)), str(pn.tree.depth_of(i))
        elif pn.check is not None:
            env["PWE_ITERATION"] = "1"
        for name, value in pn.spec.env.items():
            env[name] = value_text(value)
        task = {"k": TASK, "n": nid, "m": i, "a": attempt, "cmd": self.plan.command(nid, i), "cwd": cwd,
                "env": env, "ranks": ranks, "threads": threads, "wall": sched.maxWallTimePerMember}
        if sched.ranksPerNode:
            task["rpn"] = sched.ranksPerNode  # its ranks this many to a node (pilot/packing.py)
        if sched.shareNodes is False:
            task["exclusive"] = True  # whole nodes, shared with no other member
        if sched.coreUsageRule:
            task["cap"] = sched.coreUsageRule  # most cores of a node this kind of member may use
        if sched.gpusPerMember:
            task["gpus"] = sched.gpusPerMember
        if sched.memoryPerMember:
            task["mem"] = sched.memoryPerMember
        if sched.tmpPerMember:
            task["tmp"] = sched.tmpPerMember  # MB of the node's tmp pool (pilot/packing.py packs it)
        setup = self._setup.get(nid)
        if setup:
            task["setup"] = setup  # (its nodes run this setup_per_node set first: pilot/nodesetup.py)
        if pn.products and self._workspace:
            task["prod"] = _products(self.plan, self._workspace, nid, i)
        return task


def setup_sets(plan: Plan) -> dict[str, tuple[list[str], list[str]]]:
    """The run's setup_per_node sets: {id: (lines, the nodes that need them)}; a node's own
    lines, else the defaults'. The id is a digest of the lines, so nodes with the same
    lines share one set (run once per pilot node for all of them)."""
    import hashlib

    out: dict[str, tuple[list[str], list[str]]] = {}
    for nid, pn in plan.nodes.items():
        lines = pn.spec.setup_per_node
        if lines is None:
            lines = plan.workflow.defaults.setup_per_node
        if lines:
            sid = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
            out.setdefault(sid, (list(lines), []))[1].append(nid)
    return out


def _products(plan: Plan, workspace: str, nid: str, i: int) -> list[str]:
    """The member's products, absolute: its pilot checks them once when it exits 0."""
    from .products import absolute

    return absolute(plan, workspace, nid, i)


def _minutes(v: float | None) -> str:
    return "" if v is None else f"{v:g}"


def _keep_previous_attempt(cwd: Path, attempt: int) -> None:
    """Rename the previous attempt's files so that the next one starts clean."""
    for name in ("stdout", "stderr", "outputs"):
        try:
            os.replace(cwd / name, cwd / f"{name}.{attempt}")
        except FileNotFoundError:
            pass
        except OSError as exc:  # the run's directory, not the member: the run stops
            from .journal import cannot_write

            raise cannot_write(cwd, exc) from None
