"""The Python API's runs: :func:`run_workflow` (a workflow run on this machine to its end)
and :func:`resume_workflow` (a run taken up again from Python), each an
:class:`~pwe.engine.loop.Engine` run to its end and read back as a
:class:`~pwe.observe.results.RunResult`; with the callables that check a node's members
(iteration until convergence) checked against the plan first."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..base.errors import InputError
from ..observe.results import RunResult
from ..planning.plan import Plan
from .loop import Engine


def run_workflow(workflow: str | Path, sets: dict[str, Any] | None = None, *, cores: int | None = None,
                 run_dir: str | Path | None = None,
                 checks: dict[str, Callable[[dict], Any]] | None = None) -> "RunResult":
    """Run a workflow on this machine to the end and return its results (the Python API).

    ``checks``: node id -> a callable that checks each member of that node once it
    succeeded (iteration until convergence, pwe/planning/trees.py). It gets the member (``node``,
    ``member``, ``parameters``, ``outputs``, ``parent``, ``iteration``) and returns None or
    ``[]`` (converged) or a list of dicts of parameter values, one per child (a name left
    out keeps the member's value)."""
    plan_checks = dict(checks or {})
    engine = Engine.create(workflow, sets, cores=cores, run_dir=run_dir)
    try:
        _check_callables(engine.plan, plan_checks)
    except InputError:
        import shutil

        shutil.rmtree(engine.dir, ignore_errors=True)  # (nothing half-made)
        raise
    engine.checks = plan_checks
    ok = engine.run()
    return RunResult(engine.dir, ok)


def resume_workflow(run_dir: str | Path, *, checks: dict[str, Callable[[dict], Any]] | None = None) -> "RunResult":
    """Resume a run (after any crash) to its end from Python, with the ``checks`` it was
    started with (the one way to resume a run whose nodes a callable checks)."""
    engine = Engine.open(Path(run_dir), reload_hosts=True)
    engine.checks = dict(checks or {})
    _check_callables(engine.plan, engine.checks)
    ok = engine.run()
    return RunResult(engine.dir, ok)


def _check_callables(plan: Plan, checks: dict[str, Any]) -> None:
    """``checks`` names nodes of the plan, each without a ``check`` of its own, with callables."""
    for nid, fn in checks.items():
        if nid not in plan.nodes:
            raise InputError(f"checks: the workflow has no node '{nid}' (its nodes: {', '.join(plan.nodes)})",
                             plan.file)
        if plan.nodes[nid].check is not None:
            raise InputError(f"checks: node '{nid}' has a 'check' in {plan.file.name} already; give one or the other",
                             plan.file, plan.nodes[nid].check_line)
        if not callable(fn):
            raise InputError(f"checks: the check of node '{nid}' is a {type(fn).__name__}, not a callable", plan.file)
