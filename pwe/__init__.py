"""pwe: a parameterized DAG workflow engine for HPC clusters, with glide-in pilots.

The Python API::

    import pwe
    plan = pwe.plan_workflow("examples/quickstart.yaml", {"nsteps": 10})
    plan.total_members                 # members over all nodes
    plan.render("simulate", 0)         # the command member 0 of 'simulate' runs
    result = pwe.sweep(mymod.fit, {"x": [1, 2, 3], "seed": {"range": [0, 10]}}, cores=4)
    result.members("fit")              # each call's parameters, state and outputs (its return value)
"""

from .base.errors import InputError, PweError

__all__ = ["Engine", "InputError", "Plan", "PweError", "RunResult", "plan_workflow", "resume_workflow",
           "run_workflow", "sweep"]
__version__ = "0.1.0"


def __getattr__(name):
    # imported on first use: `pwe status` must not pay for pydantic and jinja2
    if name in ("Plan", "plan_workflow"):
        from .planning import plan

        return getattr(plan, name)
    if name == "Engine":
        from .engine.loop import Engine

        return Engine
    if name in ("run_workflow", "resume_workflow"):
        from .engine import api

        return getattr(api, name)
    if name == "sweep":  # function members from Python (pwe/engine/sweep.py)
        from .engine.sweep import sweep

        return sweep
    if name == "RunResult":
        from .observe.results import RunResult

        return RunResult
    raise AttributeError(name)
