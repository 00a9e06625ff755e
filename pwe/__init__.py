"""pwe: a parameterized DAG workflow engine for HPC clusters, with glide-in pilots.

The Python API::

    import pwe
    plan = pwe.plan_workflow("examples/quickstart.yaml", {"nsteps": 10})
    plan.total_members                 # members over all nodes
    plan.render("simulate", 0)         # the command member 0 of 'simulate' runs
"""

from .errors import InputError, PweError
from .plan import Plan, plan_workflow

__all__ = ["InputError", "Plan", "PweError", "plan_workflow"]
__version__ = "0.1.0"
