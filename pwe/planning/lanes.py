"""Which lane a node's pilots come from (its host, or host/partition) and the size of one of
its nodes, from a run's recorded hosts (run.json ``lanes``): what ``pwe explain`` weighs a
member against, and what ``pwe set`` bounds a new request by. One reading, here; the
engine's own lanes are :func:`pwe.engine.handles.make_lanes` (the same partition_lanes)."""

from __future__ import annotations

from typing import Any

from .partitions import partition_lanes


def lane_of(recorded: dict[str, Any], plan: Any, node: str) -> tuple[str | None, dict[str, Any] | None]:
    """(lane, its node's size: ``name``, ``protocol``, ``cores_per_node``, ``memory_mb``,
    ``gpus_per_node``, ``tmp_mb``) of ``node``; (None, None) when the run recorded no host
    for it, or its record cannot be read."""
    from hostinfo.records import host as host_of

    try:
        hosts = {name: host_of(lane["host_def"]) for name, lane in (recorded or {}).items()}
        lanes = partition_lanes(plan, hosts) if hosts else {}
    except (KeyError, TypeError, ValueError):
        return None, None
    for key, (view, nids) in lanes.items():
        if node in nids:
            rec = recorded.get(view.name, {})
            cores = view.cores_per_node if view is not hosts.get(view.name) else (rec.get("cores")
                                                                                   or view.cores_per_node)
            return key, {"name": view.name, "protocol": view.protocol, "cores_per_node": cores,
                         "memory_mb": view.memory_per_node, "gpus_per_node": view.gpus_per_node or 0,
                         "tmp_mb": view.tmp_per_node}
    return None, None
