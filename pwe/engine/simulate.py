"""A rehearsal (``pwe run FILE --simulate``): the engine, the feed and the pilots run as in
a real run, and no payload does. Each member "runs" a ``sleep`` as long as its node's
members took in the newest earlier run of the workflow that measured them
(:func:`pwe.runstate.pressure.read_durations`), else ``--duration`` seconds, and fails
where a ``--fail QUERY[=P%][@REASON]`` says (the members the query selects, or P% of them,
chosen by a hash of the run, node and member, so the same ones in every attempt): it writes
one line on stderr saying so and exits 1, and its pilot ends it with that reason: ``exit``
(the default), ``oom`` or ``walltime`` (the task's ``sim``: pilot/agent.py), so that a
``retry`` on ``oom`` and its ``grow`` act as they would. So the user sees when a halt, a
hold, a quarantine, retry growth and the core-hour budget would act, and what the run would
hold in core-hours, before spending them on the payload. (A simulated ``walltime`` failure
takes its node's duration, not the member's walltime: a rehearsal is meant to be quick.)

A simulated run is marked as such (run.json's ``simulate``; ``pwe status`` and ``pwe runs``
say it), begins fresh (it reuses nothing), makes no product (a member's products are not
checked), and lends nothing to later runs nor records its durations for their estimates.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path
from typing import Any

from ..base.errors import InputError
from ..planning.conditions import matches, parse

#: the duration of a member whose node no earlier run measured, without --duration (s)
DEFAULT_DURATION = 1.0
#: the reasons a simulated failure may be given (--fail QUERY@REASON)
SIM_REASONS = ("exit", "oom", "walltime")
_FAIL = re.compile(r"(?s)(.*?)(?:=(\d{1,12}(?:\.\d{1,6})?)%)?(?:@([A-Za-z]{1,20}))?")


def fail_option(text: str, parameters: set[str] | frozenset[str] | None = None) -> list[Any]:
    """``--fail QUERY[=P%][@REASON]`` as [query, percent, reason]; :class:`InputError` (one
    line) for a bad query or a share outside (0, 100]."""
    m = _FAIL.fullmatch(text)
    query, pct, reason = (m.group(1), float(m.group(2)) if m.group(2) else 100.0, m.group(3) or "exit") if m \
        else (text, 100.0, "exit")
    if not 0 < pct <= 100:
        raise InputError(f"--fail {text[:60]!r}: a share of members is over 0% and at most 100% (got {pct:g}%)")
    if reason not in SIM_REASONS:  # (a word after the last '@' is a reason: QUERY@oom)
        raise InputError(f"--fail {text[:60]!r}: a simulated failure's reason is one of {', '.join(SIM_REASONS)}, "
                         f"not {reason!r}")
    parse(query, parameters)  # (a bad query: one line)
    return [query, pct, reason]


class Rehearsal:
    """What each member of a simulated run "runs" (see the module's docstring)."""

    def __init__(self, plan: Any, run_id: str, run_dir: Path, spec: dict[str, Any]):
        from ..runstate.pressure import read_durations

        self.plan = plan
        self.run_id = run_id
        self.earlier = read_durations(run_dir, plan.workflow.name)
        self.duration = float(spec.get("duration") or DEFAULT_DURATION)
        names = {n for pn in plan.nodes.values() for n in pn.space.names}
        # (run.json's [query, percent] of a run made before reasons: exit)
        self.fails = [(f[0], f[1], parse(f[0], names), f[2] if len(f) > 2 else "exit") for f in spec.get("fail") or []]

    def seconds(self, nid: str) -> float:
        """How long a member of ``nid`` "runs": its node's mean in the newest earlier run that
        measured it, else the --duration."""
        return round(float(self.earlier.get(nid, self.duration)), 3)

    def failing(self, nid: str, i: int) -> tuple[str, str] | None:
        """The ``--fail`` that makes member ``i`` of ``nid`` fail, and the reason it gives; or None."""
        if not self.fails:
            return None
        row = {"node": nid, "member": i, "parameters": self.plan.nodes[nid].space.values_of(i)}
        for query, pct, conds, reason in self.fails:
            if not matches(conds, row):
                continue
            if pct >= 100 or _share(self.run_id, nid, i) < pct:
                return query, reason
        return None

    def task(self, nid: str, i: int) -> dict[str, str]:
        """What member ``i`` of ``nid`` runs instead of its payload: its ``cmd``, and where it
        fails for a reason other than its exit status, ``sim`` (its pilot ends it so)."""
        sleep = f"sleep {self.seconds(nid):g}"
        failing = self.failing(nid, i)
        if failing is None:
            return {"cmd": sleep}
        query, reason = failing
        said = shlex.quote(f"pwe --simulate: this member fails (--fail {query}" + (f"@{reason})" if reason != "exit"
                                                                                 else ")"))
        return {"cmd": f"{sleep}; echo {said} >&2; exit 1", **({"sim": reason} if reason != "exit" else {})}


def _share(run_id: str, nid: str, i: int) -> float:
    """A number in [0, 100) fixed by the run, node and member (the same in every attempt)."""
    digest = hashlib.blake2b(f"{run_id}\0{nid}\0{i}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % 10_000 / 100
