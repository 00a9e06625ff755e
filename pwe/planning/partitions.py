"""Which partition of a host a node's pilots go to, chosen by what its members ask for
(walltime, GPUs, cores, memory, tmp), and the engine's lanes that follow from it: one per
host, or one per (host, partition) where a host's nodes need different partitions.
``pwe plan --host`` shows each choice and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.errors import InputError
from .plan import Plan


def choose_partition(sched: Any, host: Any) -> tuple[Any, str]:
    """The partition a node's pilots go to, and why (what ``pwe plan --host`` shows).

    ``queue`` in the profile wins. Else the first partition, in the host's priority
    order, whose ``max_walltime`` holds the pilot's walltime and whose nodes (its
    ``gpus_per_node``, ``cores_per_node``, ``memory_per_node``, ``tmp_per_node``, each
    falling back to the host's) hold one member. A member that asks for no GPU skips
    partitions with GPUs while one without fits (GPU nodes are scarce and often charged
    more); it goes to a GPU partition only when nothing else fits. (None, why) when the
    host lists no partitions, or none fits (then ``why`` says what each lacks)."""
    if sched.queue:
        return next((p for p in host.partitions if p.name == sched.queue), None), "queue in the scheduling profile"
    if not host.partitions:
        return None, "the host lists no partitions"
    walltime = float(sched.maxWallTime or 60)
    gpus = sched.gpusPerMember or 0
    fits, lacks = [], []
    for part in host.partitions:
        why = _partition_lacks(sched, host, part, walltime)
        (lacks.append(f"{part.name} ({why})") if why else fits.append(part))
    if not fits:
        return None, "no partition fits: " + "; ".join(lacks)
    if not gpus:
        no_gpu = [p for p in fits if not _part_value(p, host, "gpus_per_node")]
        if no_gpu:
            skipped = [p.name for p in fits[:fits.index(no_gpu[0])]]
            note = f"; {', '.join(skipped)} skipped: it has GPUs and the member asks for none" if skipped else ""
            return no_gpu[0], f"the first in priority order that fits walltime {walltime:g} min and no GPU{note}"
        return fits[0], f"the first that fits walltime {walltime:g} min; it has GPUs, but none without fits"
    return fits[0], f"the first in priority order that fits walltime {walltime:g} min and {gpus} GPU(s) per member"


def _part_value(part: Any, host: Any, key: str) -> Any:
    """A partition's resource: its own value, else the host's."""
    value = getattr(part, key)
    return getattr(host, key) if value is None else value


def _partition_lacks(sched: Any, host: Any, part: Any, walltime: float) -> str:
    """What a partition lacks for a node's pilot ('' when it fits)."""
    if part.max_walltime is not None and part.max_walltime < walltime:
        return f"max_walltime {part.max_walltime:g} < maxWallTime {walltime:g} min"
    gpus, has_gpus = sched.gpusPerMember or 0, _part_value(part, host, "gpus_per_node") or 0
    if gpus > has_gpus:
        return f"{has_gpus} GPUs per node < gpusPerMember {gpus}"
    threads = (sched.threadsPerRank or 1) * (1 if not (gpus or sched.memoryPerMember) else sched.ranksPerMember or 1)
    cores = _part_value(part, host, "cores_per_node")
    if cores and threads > cores:
        return f"{cores} cores per node < {threads} for one member on a node"
    for key, field in (("memory_per_node", "memoryPerMember"), ("tmp_per_node", "tmpPerMember")):
        want, has = getattr(sched, field, None) or 0, _part_value(part, host, key)
        if want and has and want > has:
            return f"{key} {has} MB < {field} {want} MB"
    return ""


def for_partition(host: Any, part: Any) -> Any:
    """The host as seen by the pilots of one of its partitions: the partition's own
    resources (where it states them) in place of the host's, and that partition alone."""
    update = {key: _part_value(part, host, key)
              for key in ("cores_per_node", "gpus_per_node", "memory_per_node", "tmp_per_node", "max_nodes")}
    return host.model_copy(update={**update, "partitions": [part]})


def partition_view(nid: str, pn: Any, host: Any, src: Path) -> Any:
    """The host as the node's chosen partition shows it (the checks below then hold its
    resources); one line naming node and host when it lists partitions and none fits."""
    part, why = choose_partition(pn.scheduling, host)
    if part is None and host.partitions and not pn.scheduling.queue:
        raise InputError(f"node '{nid}': host '{host.name}' has no partition for its pilots: {why}; add one to "
                         "the host's partitions (hosts.yaml) or set queue in the node's scheduling", src, pn.line)
    return host if part is None else for_partition(host, part)


def partition_choices(plan: Plan, hosts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per node: the partition its pilots go to and why (``pwe plan --host``, and --json);
    null where its host lists no partitions."""
    out = {}
    for nid, pn in plan.nodes.items():
        host = hosts[pn.host]
        part, why = choose_partition(pn.scheduling, host)
        name = part.name if part is not None else pn.scheduling.queue
        view = host if part is None else for_partition(host, part)
        out[nid] = {"host": host.name, "partition": name, "why": why,
                    "gpus_per_node": view.gpus_per_node, "cores_per_node": view.cores_per_node}
    return out


def partition_lanes(plan: Plan, hosts: dict[str, Any]) -> dict[str, tuple[Any, list[str]]]:
    """The engine's lanes: one per host, or, where a host's nodes go to different
    partitions, one per (host, partition), named ``host/partition``, since one pilot job
    has one partition. Each: (the host as its partition shows it, its nodes). A node whose
    host is not in ``hosts`` goes with the first host (as the engine has always done)."""
    first = next(iter(hosts))
    groups: dict[str, dict[str | None, list[str]]] = {name: {} for name in hosts}
    for nid, pn in plan.nodes.items():
        name = pn.host if pn.host in hosts else first
        part, _ = choose_partition(pn.scheduling, hosts[name])
        # (a queue the host does not list is a partition of its own, with the host's resources)
        groups[name].setdefault(part.name if part is not None else pn.scheduling.queue, []).append(nid)
    lanes: dict[str, tuple[Any, list[str]]] = {}
    for name, host in hosts.items():
        by_part = groups[name] or {None: []}
        for part_name, nids in by_part.items():
            part = next((p for p in host.partitions if p.name == part_name), None)
            key = name if len(by_part) == 1 else f"{name}/{part_name}"
            lanes[key] = (host if part is None else for_partition(host, part), nids)
    return lanes


# -- an attempt that asks for more than its node's lane holds (retry.grow, pwe set) ----------

def grown_scheduling(sched: Any, ask: dict[str, Any]) -> Any:
    """The scheduling profile as one attempt asks it (:func:`pwe.planning.asks.asks`: grown
    by a retry, or by pwe set), for :func:`choose_partition` to weigh."""
    ranks = sched.ranksPerMember or 1
    update = {"memoryPerMember": ask.get("memory_mb"), "gpusPerMember": ask.get("gpus") or None}
    if ask.get("cores") and ask["cores"] != sched.cores_per_member():
        update["threadsPerRank"] = max(1, ask["cores"] // ranks)
    return sched.model_copy(update=update)


def node_lacks(view: Any, ask: dict[str, Any]) -> str:
    """What one node of ``view`` (a host, or a host as its partition shows it) lacks for one
    attempt's ``ask``: '' when it holds it, or when the host does not say (memory it does
    not state is not weighed: its pilots say)."""
    for key, field, unit in (("memory_per_node", "memory_mb", " MB of memory"),
                             ("tmp_per_node", "tmp_mb", " MB of tmp"), ("gpus_per_node", "gpus", " GPUs"),
                             ("cores_per_node", "cores", " cores")):
        want, has = ask.get(field) or 0, getattr(view, key, None)
        if want and has is not None and want > has:
            return f"{has:,}{unit} per node < {want:,}"
    return ""


def shows_partition(view: Any, host_name: str, part_name: str) -> bool:
    """Whether ``view`` (a lane's host) is host ``host_name`` as its partition ``part_name``
    shows it (:func:`for_partition`): the lane of that partition."""
    return view.name == host_name and [p.name for p in view.partitions] == [part_name]


def partition_for(whole: Any, sched: Any, ask: dict[str, Any]) -> tuple[Any, str]:
    """Where one attempt whose ``ask`` (:func:`pwe.planning.asks.asks`) outgrew its lane's
    nodes goes on host ``whole``: (the first partition, in the host's priority order, whose
    node holds it, ''), or (None, the one line why none does), or (None, '') where that is
    not for pwe to say (a queue the profile names; a node whose needs the host does not
    state: its pilots say). The engine's rule (pwe/engine/sizing.py), and pwe explain's."""
    if sched.queue:
        return None, ""
    part, _ = choose_partition(grown_scheduling(sched, ask), whole)
    if part is not None and not node_lacks(for_partition(whole, part), ask):
        return part, ""
    big = largest_node(whole)
    lacks = node_lacks(big["view"], ask)
    if not lacks:  # (no partition took it for another reason, its walltime: its pilots say)
        return None, ""
    where = f" ({big['where']})" if big["where"] else ""
    return None, (f"cannot be placed: this attempt asks more than any node of host '{whole.name}' has: its largest "
                  f"node{where}: {lacks}; lower the request (retry.grow, pwe set), or let retry: {{grow: {{cap: "
                  "true}} hold it to the largest node")


def largest_node(host: Any) -> dict[str, Any]:
    """The largest node of ``host`` over all its partitions, by memory first: ``memory_mb``,
    ``where`` (``partition NAME``, or '' for a host without partitions) and ``view`` (the
    host as that partition shows it). What a ``grow: {cap: true}`` request is held to, and
    what the line of a request that fits nowhere names."""
    views = [(for_partition(host, p), f"partition {p.name}") for p in host.partitions] or [(host, "")]
    view, where = max(views, key=lambda v: (v[0].memory_per_node or 0, v[0].tmp_per_node or 0))
    return {"memory_mb": view.memory_per_node, "where": where, "view": view}
