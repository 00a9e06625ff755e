"""A member's task: the message that hands one attempt of it to a pilot.

Built once per attempt, on the dispatch path (thousands a second): plain dicts. What a
node's members share of their environment (the run, the node, the host, ranks and
threads, the node's own ``env``) is made once per node and sent to each pilot once, as an
``env`` message that each task names (``eb``); a task carries only its member's own part
(its index, attempt and parameters): a third of the bytes in the pilot's tasks file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pilot.wire import TASK

from ..planning.asks import grown
from .environs import container_task, setup_lines
from ..planning.plan import Plan
from ..runstate.rundir import member_path, node_path
from ..base.source import value_text


class TaskBuilder:
    """The ``task`` messages of one run's members (pilot/wire.py lists their fields)."""

    def __init__(self, plan: Plan, run_id: str, run_dir: Path, workspace: str | None = None,
                 rehearsal: Any = None):
        self.plan = plan
        #: a simulated run's (pwe/engine/simulate.py): what each member runs instead of its payload
        self.rehearsal = rehearsal
        #: pwe set's values for a member (the run's state: RunState.settings_for), set by the engine
        self.overrides: Any = None
        #: per node with ``grow: {cap: true}``: its host's largest node, which a grown request is held to
        #: (pwe/engine/sizing.py)
        self.ceiling: dict[str, dict[str, Any]] = {}
        self._env_base = {"PWE_RUN_ID": run_id}
        self._workspace = workspace  # (pwe.planning.products; a run made before workspaces has none)
        if workspace:
            self._env_base["PWE_WORKSPACE"] = workspace
        self._members = str(run_dir / "members")
        self._run_dir = os.path.abspath(run_dir)  # (a container mounts it: pwe/engine/environs.py)
        self.envs: dict[str, dict[str, str]] = {}  # eb -> a node's shared environment (an ``env`` message)
        # node -> (eb, the names its own env sets, the fields its scheduling adds to each task, the directory
        # its members run in, None: each its own): _node_parts
        self._node: dict[str, tuple[str, frozenset[str], dict[str, Any], str | None]] = {}
        self.setups = setup_sets(plan)  # setup_per_node: {id: lines}, sent to each pilot once
        self._setup = {nid: sid for sid, (lines, nids) in self.setups.items() for nid in nids}

    def build(self, nid: str, i: int, attempt: int, retried: int = 0) -> dict[str, Any]:
        """Member ``i`` of node ``nid``, attempt ``attempt``: its command, directory,
        environment and what it asks of a node. An earlier attempt's files are set aside.
        ``retried``: its failed attempts so far; where its node's ``retry`` grows the
        request, this attempt asks for that much more (:meth:`grown`)."""
        pn = self.plan.nodes[nid]
        eb, own, fixed, cwd = self._node.get(nid) or self._node_parts(nid)
        if cwd is None:  # (a directory of its own)
            cwd = member_path(self._members, nid, i)
            if attempt > 1:
                _keep_previous_attempt(Path(cwd), attempt - 1)
        env = {"PWE_MEMBER": str(i), "PWE_ATTEMPT": str(attempt)}
        values = pn.space.values_of(i)
        for name, value in values.items():
            env["PWE_PARAM_" + name.upper()] = value_text(value)
        if pn.tree is not None and i >= pn.space.size:  # a member a check grew: its place in its tree
            env["PWE_PARENT"], env["PWE_ITERATION"] = str(pn.tree.parent_of(i)), str(pn.tree.depth_of(i))
        elif pn.check is not None:
            env["PWE_ITERATION"] = "1"
        if own:  # the node's own env has the last word, as it had when all was one dict
            env = {k: v for k, v in env.items() if k not in own}
        task = {"k": TASK, "n": nid, "m": i, "a": attempt, "cmd": self.plan.command(nid, i), "cwd": cwd,
                "env": env, "eb": eb}
        if fixed:
            task.update(fixed)
        if retried and pn.retry is not None and pn.retry.grow is not None:
            more = self.grown(nid, retried)
            task.update(more)
            if "wall" in more:
                env["PWE_WALLTIME_MINUTES"] = _minutes(more["wall"])
        if self.overrides is not None:
            said = self.overrides(nid, i)
            if said:
                _override(task, env, said)
        if self.rehearsal is not None:  # (pwe run --simulate: no payload runs, no product is made)
            task.update(self.rehearsal.task(nid, i))  # (cmd; sim: the reason a simulated failure gives)
        elif pn.products and self._workspace:
            task["prod"] = _products(self.plan, self._workspace, nid, i)
        if pn.spec.python is not None and self.rehearsal is None:
            task.update(self._call(nid, i, values))
        return task

    def _call(self, nid: str, i: int, values: dict[str, Any]) -> dict[str, Any]:
        """A function member's fields: its function, called with its parameters as they are
        typed (pilot/pyworkers.py), and its node's validate, which its worker runs after the
        call returns (pilot/pyworker.py)."""
        out = {"py": self.plan.nodes[nid].spec.python, "kw": values}
        validate = self.plan.validate_command(nid, i)
        if validate is not None:
            out["vd"] = validate
        return out

    def grown(self, nid: str, retried: int) -> dict[str, Any]:
        """What an attempt after ``retried`` failed ones asks for, where the node's
        ``retry.grow`` makes it more (:func:`pwe.planning.asks.grown`: the one rule)."""
        return grown(self.plan.nodes[nid], retried, self.ceiling.get(nid))

    def _node_parts(self, nid: str) -> tuple[str, frozenset[str], dict[str, Any], str | None]:
        """What every task of node ``nid`` has alike, made once: its shared environment's id
        (a digest of it, so nodes that share all of it share one message), the names the
        node's own ``env`` sets, the fields its scheduling profile adds to each task, and the
        directory its members run in (:func:`node_path`; None where each runs in its own:
        :func:`directory_of`)."""
        pn = self.plan.nodes[nid]
        sched = pn.scheduling
        ranks, threads = sched.ranksPerMember or 1, sched.threadsPerRank or 1
        env = dict(self._env_base)
        env.update({
            "PWE_NODE": nid, "PWE_HOST": pn.host, "PWE_RANKS": str(ranks), "PWE_THREADS": str(threads),
            "OMP_NUM_THREADS": str(threads),
            "PWE_WALLTIME_MINUTES": _minutes(sched.maxWallTimePerMember or sched.maxWallTime),
        })
        own = {name: value_text(value) for name, value in pn.spec.env.items()}
        env.update(own)
        eb = hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:12]
        self.envs[eb] = env
        fixed: dict[str, Any] = {}  # (in this order: a task's fields as they always were)
        if ranks != 1:
            fixed["ranks"] = ranks
        if threads != 1:
            fixed["threads"] = threads
        if sched.maxWallTimePerMember is not None:
            fixed["wall"] = sched.maxWallTimePerMember
        if sched.ranksPerNode:
            fixed["rpn"] = sched.ranksPerNode  # its ranks this many to a node (pilot/packing.py)
        if sched.shareNodes is False:
            fixed["exclusive"] = True  # whole nodes, shared with no other member
        if sched.coreUsageRule:
            fixed["cap"] = sched.coreUsageRule  # most cores of a node this kind of member may use
        if sched.gpusPerMember:
            fixed["gpus"] = sched.gpusPerMember
        if sched.memoryPerMember:
            fixed["mem"] = sched.memoryPerMember
        if sched.tmpPerMember:
            fixed["tmp"] = sched.tmpPerMember  # MB of the node's tmp pool (pilot/packing.py packs it)
        if self._setup.get(nid):
            fixed["setup"] = self._setup[nid]  # (its nodes run this setup_per_node set first: pilot/nodesetup.py)
        if pn.products_least and self._workspace and self.rehearsal is None:
            fixed["pmin"] = pn.products_least  # (beside its ``prod``: the fewest bytes each must hold)
        ctr = None if self.rehearsal is not None else container_task(self.plan, nid, [self._workspace or "",
                                                                                     self._run_dir])
        if ctr is not None:
            fixed["ctr"] = ctr  # (each member runs inside it: pilot/containers.py)
        shared: str | None = None
        if directory_of(pn) == "own":
            fixed["own"] = 1  # (the pilot makes it before the member starts, tidies it after: pilot/spawn.py)
        else:
            shared = node_path(self._members, nid)
        self._node[nid] = (eb, frozenset(own), fixed, shared)
        return self._node[nid]


def directory_of(pn: Any) -> str:
    """Where the members of planned node ``pn`` run: ``own`` or ``shared``, as the node
    says (``directory:``), else ``own`` for a node with products and ``shared`` for the
    others (measured: bench/BENCHMARKS.md, "A member's own directory only when it needs
    one"): the members' stdout and stderr are in their pilot's streams (pilot.streams),
    so members that share a directory share no file of pwe's."""
    if pn.spec.directory is not None:
        return pn.spec.directory
    return "own" if pn.products else "shared"


def setup_sets(plan: Plan) -> dict[str, tuple[list[str], list[str]]]:
    """The run's setup_per_node sets: {id: (lines, the nodes that need them)}; a node's own
    lines, else the defaults', then those that load its modules and check its container
    (:func:`pwe.engine.environs.setup_lines`). The id is a digest of the lines, so nodes
    with the same lines share one set (run once per pilot node for all of them)."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for nid in plan.nodes:
        lines = setup_lines(plan, nid)
        if lines:
            sid = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
            out.setdefault(sid, (list(lines), []))[1].append(nid)
    return out


def _products(plan: Plan, workspace: str, nid: str, i: int) -> list[str]:
    """The member's products, absolute: its pilot checks them once when it exits 0."""
    from ..planning.products import absolute

    return absolute(plan, workspace, nid, i)


#: pwe set's keys (its record's ``values``) -> the task's field
SET_FIELDS = {"memoryPerMember": "mem", "maxWallTimePerMember": "wall", "threads": "threads", "gpus": "gpus"}


def _override(task: dict[str, Any], env: dict[str, str], said: dict[str, Any]) -> None:
    """pwe set's values over what the node (and a retry's growth) asks: the task's fields
    and the member's environment (``PWE_WALLTIME_MINUTES``, ``PWE_THREADS``, ``env``)."""
    for key, field in SET_FIELDS.items():
        if key in said:
            task[field] = said[key]
    if "maxWallTimePerMember" in said:
        env["PWE_WALLTIME_MINUTES"] = _minutes(said["maxWallTimePerMember"])
    if "threads" in said:
        env["PWE_THREADS"] = env["OMP_NUM_THREADS"] = str(said["threads"])
    env.update(said.get("env") or {})


def _minutes(v: float | None) -> str:
    return "" if v is None else f"{v:g}"


def _keep_previous_attempt(cwd: Path, attempt: int) -> None:
    """Rename the previous attempt's files in a member's own directory so that the next one
    starts clean (a member without a directory of its own has none there: its outputs are
    named by attempt, pilot.members.outputs_path)."""
    for name in ("stdout", "stderr", "outputs"):
        try:
            os.replace(cwd / name, cwd / f"{name}.{attempt}")
        except FileNotFoundError:
            pass
        except OSError as exc:  # the run's directory, not the member: the run stops
            from ..runstate.journal import cannot_write

            raise cannot_write(cwd, exc) from None
