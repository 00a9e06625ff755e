"""From a checked workflow to a plan: parameters and their expansion (params.py), the DAG
(dag.py), the plan itself (plan.py), groups, products, limits, trees of checked nodes, the
conditions of ``where``-style queries (conditions.py), and where it runs: host fit,
partitions, pilot sizing (placement.py, partitions.py, sitecheck.py)."""
