"""``pwe plan --estimate``: the core-hours a run would need, estimated before it from a sample
of its members run here for real.

A scratch run of the workflow is made on this machine (``local``, in a temporary directory
removed afterwards) in which at most ``per_node`` members of each node are started (the
engine's feeder holds back the others: ``Feeder.sample``), and run until each node has had
``per_node`` attempts end (or all its members), or ``timeout`` seconds passed; then it is
cancelled. A node sampled enough has
its other members marked done without running (a ``complete`` record, as products do) so
that the nodes after it run theirs. Per node: members x the sample's mean duration (of the
members that succeeded; else of every attempt) x cores per member. The estimate counts the
members' own time only (a pilot's idle cores, its queue wait, retries and a cluster's
other speed are not in it), and a node with no member ended in the sample is
``unmeasured``. The members of the sample run as they would in the run: what they write
outside their own directory is written.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from ..base.states import DONE, FINAL
from ..runstate import records
from ..runstate import runs
from ..runstate.state import not_begun_runs
from .budget import ended_attempts
from .loop import Engine


def estimate(workflow: str | Path, sets: dict[str, Any] | None = None, hosts_file: str | Path | None = None,
             per_node: int = 2, timeout: float = 60.0, cores: int | None = None) -> dict[str, Any]:
    """The estimate (see the module's docstring): ``coreHours`` (of the measured nodes),
    per node ``members``, ``sampled`` (attempts ended), ``mean`` (s), ``cores``,
    ``coreHours``; ``unmeasured``; ``budget`` (the workflow's, or None); ``estimate``: True."""
    scratch = Path(tempfile.mkdtemp(prefix="pwe-estimate-"))
    engine = Engine.create(workflow, sets, host="local", cores=cores, run_dir=scratch / "run", hosts_file=hosts_file)
    # no more than ``per_node`` members of a node are started (a member of the sample is
    # retried as it would be in the run): the feeder holds back the rest
    engine.feeder.sample = {nid: per_node for nid in engine.plan.nodes}
    deadline = time.time() + timeout
    cancel = engine.dir / "control" / "cancel"

    def sampled(st: Any) -> bool:
        return all(ended_attempts(ns) >= min(per_node, ns.size) or ns.size == sum(ns.counts[c] for c in FINAL)
                   for ns in st.nodes.values())

    done_with: set[str] = set()

    def progress(st: Any) -> None:
        # a node sampled enough: its members not begun count as done (a ``complete``
        # record, as products do), so that the nodes after it get their turn
        for nid, ns in st.nodes.items():
            if nid not in done_with and ended_attempts(ns) >= min(per_node, ns.size):
                done_with.add(nid)
                spans = [list(r) for r in not_begun_runs(ns.state)]
                if spans:
                    engine.ledger.take(records.complete(nid, spans))
        if (sampled(st) or time.time() > deadline) and not cancel.exists():
            cancel.parent.mkdir(exist_ok=True)
            cancel.write_text("{}")  # (the engine's own way to stop: its next round cancels the run)

    try:
        engine.run(progress=progress)
        nodes, total, unmeasured = {}, 0.0, []
        for nid, ns in engine.state.nodes.items():
            n, cores_each = ns.size, engine.plan.nodes[nid].scheduling.cores_per_member()
            ended = ended_attempts(ns)
            ran = max(0, ns.counts[DONE] - ns.complete_count())  # (succeeded: their mean, else every attempt's)
            mean = ns.done_spent / ran if ran else ns.spent / ended if ended else None
            ch = n * mean * cores_each / 3600 if mean is not None else None
            nodes[nid] = {"members": n, "sampled": ended, "mean": None if mean is None else round(mean, 3),
                          "cores": cores_each, "coreHours": None if ch is None else round(ch, 6)}
            if ch is None:
                unmeasured.append(nid)
            else:
                total += ch
        budget = engine.plan.workflow.budget
        return {"estimate": True, "coreHours": round(total, 6), "nodes": nodes, "unmeasured": unmeasured,
                "budget": None if budget is None else budget.coreHours}
    finally:
        _pilots_gone(engine)
        runs.unmake(engine.dir)
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


def _pilots_gone(engine: Engine, wait: float = 30.0) -> None:
    """Wait (``wait`` s at most, all together) for the scratch run's local pilots to leave:
    each removes its node-local scratch as it goes, and nothing of the sample may be left
    behind (the engine ends its run without waiting for them)."""
    import subprocess

    deadline = time.time() + wait
    for p in engine.pilots.values():
        if p.popen is not None:
            try:
                p.popen.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
