"""A rehearsal (``pwe run FILE --simulate``): the engine, the feed and the pilots run as in
a real run, and no payload does. Each member "runs" a ``sleep`` as long as its node's
members took in the newest earlier run of the workflow that measured them
(:func:`pwe.runstate.pressure.read_durations`), else ``--duration`` seconds, and fails
where a ``--fail QUERY[=P%]`` says (the members the query selects, or P% of them, chosen by
a hash of the run, node and member, so the same ones in every attempt): it writes one line
on stderr saying so and exits 1. So the user sees when a halt, a hold, a quarantine, retry
growth and the core-hour budget would act, and what the run would hold in core-hours,
before spending them on the payload.

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
_FAIL = re.compile(r"(?s)(.*?)(?:=(\d{1,12}(?:\.\d{1,6})?)%)?")


def fail_option(text: str, parameters: set[str] | frozenset[str] | None = None) -> list[Any]:
    """``--fail QUERY[=P%]`` as [query, percent]; :class:`InputError` (one line) for a bad
    query or a share outside (0, 100]."""
    m = _FAIL.fullmatch(text)
    query, pct = (m.group(1), float(m.group(2)) if m.group(2) else 100.0) if m else (text, 100.0)
    if not 0 < pct <= 100:
        raise InputError(f"--fail {text[:60]!r}: a share of members is over 0% and at most 100% (got {pct:g}%)")
    parse(query, parameters)  # (a bad query: one line)
    return [query, pct]


class Rehearsal:
    """What each member of a simulated run "runs" (see the module's docstring)."""

    def __init__(self, plan: Any, run_id: str, run_dir: Path, spec: dict[str, Any]):
        from ..runstate.pressure import read_durations

        self.plan = plan
        self.run_id = run_id
        self.earlier = read_durations(run_dir, plan.workflow.name)
        self.duration = float(spec.get("duration") or DEFAULT_DURATION)
        names = {n for pn in plan.nodes.values() for n in pn.space.names}
        self.fails = [(query, pct, parse(query, names)) for query, pct in spec.get("fail") or []]

    def seconds(self, nid: str) -> float:
        """How long a member of ``nid`` "runs": its node's mean in the newest earlier run that
        measured it, else the --duration."""
        return round(float(self.earlier.get(nid, self.duration)), 3)

    def failing(self, nid: str, i: int) -> str | None:
        """The ``--fail`` that makes member ``i`` of ``nid`` fail, or None."""
        if not self.fails:
            return None
        row = {"node": nid, "member": i, "parameters": self.plan.nodes[nid].space.values_of(i)}
        for query, pct, conds in self.fails:
            if not matches(conds, row):
                continue
            if pct >= 100 or _share(self.run_id, nid, i) < pct:
                return query
        return None

    def command(self, nid: str, i: int) -> str:
        """The shell command member ``i`` of ``nid`` runs instead of its payload."""
        sleep = f"sleep {self.seconds(nid):g}"
        query = self.failing(nid, i)
        if query is None:
            return sleep
        said = shlex.quote(f"pwe --simulate: this member fails (--fail {query})")
        return f"{sleep}; echo {said} >&2; exit 1"


def _share(run_id: str, nid: str, i: int) -> float:
    """A number in [0, 100) fixed by the run, node and member (the same in every attempt)."""
    digest = hashlib.blake2b(f"{run_id}\0{nid}\0{i}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % 10_000 / 100
