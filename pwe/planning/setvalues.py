"""What ``pwe set RUN [-q QUERY] KEY=VALUE ...`` may change for the attempts not yet started,
each value read through the one reader of numbers and bounded by the hosts the run
recorded: one line (exit 2) for anything else, before anything is written.

Keys: ``memoryPerMember`` (MB), ``maxWallTimePerMember`` (minutes), ``threads`` (or
``cores``: threads per rank of a member), ``gpus``, ``retries`` (reruns of a failed member,
whatever its failure), ``priority`` (0-1000: members of a higher one go to their pilots
before the rest of their lane, the highest first; 0, as their node's order says) and
``env.NAME`` (a variable of the member's environment). The engine
checks them again when it journals them (:func:`checked`)."""

from __future__ import annotations

import re
from typing import Any

from pilot.numbers import COUNT_MOST, MINUTES_MOST, NumberError, read_float, read_int

from ..base.errors import InputError

KEYS = ("memoryPerMember", "maxWallTimePerMember", "threads", "cores", "gpus", "retries", "priority", "env.NAME")
#: the highest priority pwe set gives
PRIORITY_MOST = 1000
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: the longest value an env.NAME may be given (characters)
ENV_VALUE_MOST = 64 * 1024


def parse(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` words as the ``values`` of a set record; :class:`InputError` (one line)."""
    if not pairs:
        raise InputError(f"pwe set: give at least one KEY=VALUE ({', '.join(KEYS)})")
    values: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq:
            raise InputError(f"pwe set: {_said(pair)}: write KEY=VALUE (keys: {', '.join(KEYS)})")
        one(values, key.strip(), text)
    return values


def one(values: dict[str, Any], key: str, text: str) -> None:
    """One KEY=VALUE into ``values``."""
    try:
        if key == "memoryPerMember":
            values[key] = read_int(text.strip(), 1, COUNT_MOST)
        elif key == "maxWallTimePerMember":
            values[key] = read_float(text.strip(), 1e-3, MINUTES_MOST)
        elif key in ("threads", "cores"):
            values["threads"] = read_int(text.strip(), 1, 100_000)
        elif key == "gpus":
            values[key] = read_int(text.strip(), 0, 100_000)
        elif key == "retries":
            values[key] = read_int(text.strip(), 0, 1000)
        elif key == "priority":
            values[key] = read_int(text.strip(), 0, PRIORITY_MOST)
        elif key.startswith("env."):
            name = key[4:]
            if not _ENV_NAME.fullmatch(name):
                raise InputError(f"pwe set: {_said(key)}: an environment variable's name is letters, digits and '_', "
                                 "not beginning with a digit")
            if "\0" in text or len(text) > ENV_VALUE_MOST:
                raise InputError(f"pwe set: {key}: a value of at most {ENV_VALUE_MOST:,} characters, without NUL")
            values.setdefault("env", {})[name] = text
        else:
            from ..base.source import did_you_mean

            raise InputError(f"pwe set: no key {_said(key)}{did_you_mean(key, KEYS)}; keys: {', '.join(KEYS)}")
    except NumberError as exc:
        raise InputError(f"pwe set: {key}: {exc}") from None


def within_hosts(values: dict[str, Any], info: dict[str, Any], plan: Any, nodes: list[str]) -> None:
    """A value no node of the selected nodes' hosts could hold, in any of its partitions (a
    member asking more than its own partition's nodes have goes to one whose nodes hold it:
    pwe/engine/sizing.py): :class:`InputError`."""
    from .lanes import lane_of, whole_host
    from .partitions import for_partition

    for nid in nodes:
        _, host = lane_of(info.get("lanes") or {}, plan, nid)
        if host is None:
            continue
        whole = whole_host(info.get("lanes") or {}, host["name"])
        views = [for_partition(whole, p) for p in whole.partitions] if whole is not None and whole.partitions else []
        ranks = plan.nodes[nid].scheduling.ranksPerMember or 1
        for key, field, most, what in (("memoryPerMember", "memory_per_node", host["memory_mb"], "MB of memory"),
                                       ("threads", "cores_per_node", host["cores_per_node"], "cores"),
                                       ("gpus", "gpus_per_node", host["gpus_per_node"], "GPUs")):
            said = [getattr(v, field) for v in views]
            if views and None not in said:
                most = max(said)
            if key == "threads" and most is not None:
                most = most // ranks if ranks == 1 else None
            if key in values and most is not None and values[key] > most:
                where = "any node" if len(views) > 1 else "a node"
                raise InputError(f"pwe set: {key}={values[key]:,}: {where} of host '{host['name']}' (node {nid}'s) "
                                 f"has {most:,} {what} at most; give at most {most:,}")


def checked(plan: Any, values: Any) -> dict[str, Any]:
    """A set request's ``values`` as the engine journals them: every key known, every value
    of its type and range (:func:`parse`'s rules); ValueError else."""
    if not isinstance(values, dict) or not values:
        raise ValueError("a set request without values")
    out: dict[str, Any] = {}
    try:
        for key, v in values.items():
            if key == "env":
                if not isinstance(v, dict):
                    raise ValueError("env is not a mapping")
                for name, text in v.items():
                    one(out, f"env.{name}", text if isinstance(text, str) else "\0")
            else:
                one(out, key, str(v) if type(v) in (int, float) else "\0")
    except InputError as exc:
        raise ValueError(str(exc)) from None
    return out


def _said(text: str) -> str:
    from ..base.text import shown

    return repr(shown(text[:60]))
