"""What one attempt of a member asks of a node: its cores, memory, GPUs, ``$TMPDIR`` and
walltime, with what a ``retry.grow`` adds after failed attempts. The engine's tasks
(:mod:`pwe.engine.tasks`) carry it to the pilots; ``pwe explain`` weighs it against the
pilots and hosts (:mod:`pwe.observe.explain`). One rule, here."""

from __future__ import annotations

import math
from typing import Any

#: The most a retry's growth asks for (a factor of 100 a hundred times over is no request a
#: node can hold: the pilot then says it cannot be placed, rather than the engine overflow)
MAX_MEMORY_MB, MAX_WALL_MIN = 2**40, 10**7


def _times(base: float, factor: float, n: int, cap: float) -> float:
    """``base * factor ** n``, at most ``cap``."""
    try:
        return min(base * factor ** n, cap)
    except OverflowError:
        return cap


def grown(pn: Any, retried: int, ceiling: dict[str, Any] | None = None) -> dict[str, Any]:
    """What an attempt of planned node ``pn``'s member after ``retried`` failed ones asks
    for, where the node's ``retry.grow`` makes it more: ``mem`` (MB, rounded up) and
    ``wall`` (minutes), each the first attempt's times its factor once per failed attempt.
    Only what grows; nothing where the node has no ``retry.grow``. ``ceiling``: the most
    memory (``memory_mb``) one node of the host has, which ``grow: {cap: true}`` holds the
    request to (:func:`pwe.planning.partitions.largest_node`)."""
    if not retried or pn.retry is None or pn.retry.grow is None:
        return {}
    grow, sched = pn.retry.grow, pn.scheduling
    out: dict[str, Any] = {}
    if grow.memoryPerMember and sched.memoryPerMember:
        most = MAX_MEMORY_MB
        if grow.cap and ceiling and ceiling.get("memory_mb"):
            most = max(sched.memoryPerMember, ceiling["memory_mb"])  # (never below what the node asked)
        out["mem"] = math.ceil(_times(sched.memoryPerMember, grow.memoryPerMember, retried, most))
    if grow.maxWallTimePerMember and sched.maxWallTimePerMember:
        wall = round(_times(sched.maxWallTimePerMember, grow.maxWallTimePerMember, retried, MAX_WALL_MIN), 3)
        out["wall"] = int(wall) if wall == int(wall) else wall  # (3, not 3.0: as a user writes it)
    return out


def asks(pn: Any, retried: int = 0, settings: dict[str, Any] | None = None,
         ceiling: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything one attempt asks of a node: ``cores``, ``memory_mb``, ``gpus``, ``tmp_mb``
    and ``walltime_min`` (None where the node does not say), grown per :func:`grown` (held
    to ``ceiling`` under ``grow: {cap: true}``), and ``settings`` (pwe set's values for the
    member: RunState.settings_for) over both."""
    sched = pn.scheduling
    more = grown(pn, retried, ceiling)
    said = settings or {}
    ranks = sched.ranksPerMember or 1
    return {"cores": ranks * said["threads"] if "threads" in said else sched.cores_per_member(),
            "memory_mb": said.get("memoryPerMember", more.get("mem", sched.memoryPerMember)),
            "gpus": said.get("gpus", sched.gpusPerMember or 0), "tmp_mb": sched.tmpPerMember,
            "walltime_min": said.get("maxWallTimePerMember", more.get("wall", sched.maxWallTimePerMember))}
