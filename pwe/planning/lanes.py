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
            return key, _size(view, cores)
    return None, None


def _size(view: Any, cores: Any) -> dict[str, Any]:
    """The size of one node of ``view`` (a host as its lane shows it), as lane_of says it."""
    return {"name": view.name, "protocol": view.protocol, "cores_per_node": cores, "memory_mb": view.memory_per_node,
            "gpus_per_node": view.gpus_per_node or 0, "tmp_mb": view.tmp_per_node}


def whole_host(recorded: dict[str, Any], name: str | None) -> Any:
    """Host ``name`` as the run recorded it, with all its partitions; None where it did not."""
    from hostinfo.records import host as host_of

    try:
        return host_of(recorded[name]["host_def"]) if name else None
    except (KeyError, TypeError, ValueError):
        return None


def grown_lane(recorded: dict[str, Any], plan: Any, node: str, ask: dict[str, Any]
               ) -> tuple[str | None, dict[str, Any] | None, str]:
    """Where an attempt of ``node`` whose ``ask`` outgrew its lane's nodes goes, by the
    engine's rule (:func:`pwe.planning.partitions.partition_for`): (its lane, the size of one
    of its nodes, ''), or (None, None, the line why no node holds it, or '' where pwe cannot
    say)."""
    from hostinfo.records import host as host_of

    from .partitions import for_partition, partition_for, shows_partition

    _, size = lane_of(recorded, plan, node)
    whole = whole_host(recorded, size and size["name"])
    if whole is None:
        return None, None, ""
    part, why = partition_for(whole, plan.nodes[node].scheduling, ask)
    if part is None:
        return None, None, why
    view = for_partition(whole, part)
    hosts = {name: host_of(rec["host_def"]) for name, rec in recorded.items()}
    own = (k for k, (v, _) in partition_lanes(plan, hosts).items()  # (the run's own lane of it, if any)
           if shows_partition(v, whole.name, part.name))
    return next(own, f"{whole.name}/{part.name}"), _size(view, view.cores_per_node), ""
