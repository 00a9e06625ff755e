"""When a lane may submit another pilot job: the one decision, as a function of plain
numbers, so that it is tested without a batch system (tests/engine/test_autoscale.py) and
:meth:`pwe.engine.pilots.PilotWork.may_submit` (which gathers the numbers) stays the one
place that asks it.

A host's limits (hosts.yaml): ``max_pilots`` (pilot jobs alive at once, queued and running
together), ``max_queued_pilots`` (of those, waiting in the batch queue), ``submit_rate``
(pilot jobs a minute: submissions are spaced ``60 / submit_rate`` s apart) and
``submit_failures`` (refused submissions in a row that stop the run; each one before is
followed by a back-off of :func:`backoff` seconds). Whether the lane's members want
another pilot at all (more ready than its live pilots take) is the feed's question
(:mod:`pwe.engine.feed`); this says whether one may go now, and when to look again.
"""

from __future__ import annotations

from typing import Any, NamedTuple

#: Seconds before the first retry of a refused submission; each further refusal doubles it.
BACKOFF_BASE_S = 2.0
#: The longest back-off between two refused submissions.
BACKOFF_MOST_S = 300.0
#: What the status line of a host in back-off starts with (pwe status prints it as it is).
REFUSED = "the batch system refused"


class Limits(NamedTuple):
    """A host's limits on its pilot jobs (see the module's docstring)."""

    max_pilots: int
    max_queued: int
    submit_rate: float  # pilot jobs a minute
    submit_failures: int

    @classmethod
    def of(cls, host: Any) -> "Limits":
        return cls(host.max_pilots, host.queued_most, float(host.submit_rate), host.submit_failures)

    @property
    def spacing(self) -> float:
        """Seconds between two submissions."""
        return 60.0 / self.submit_rate


class Decision(NamedTuple):
    """May a pilot be submitted now (``submit``); if not, ``why`` and ``next_at``: the
    earliest time the answer may change by the clock alone (0: only when a pilot starts
    or leaves)."""

    submit: bool
    why: str = ""
    next_at: float = 0.0


def backoff(failures: int) -> float:
    """Seconds to wait after ``failures`` refused submissions in a row (>= 1): 2, 4, 8, ...
    up to :data:`BACKOFF_MOST_S`."""
    return min(BACKOFF_MOST_S, BACKOFF_BASE_S * 2 ** (min(max(failures, 1), 64) - 1))  # (no 2 ** 10^9)


def decide(limits: Limits, alive: int, queued: int, last_submit: float | None, retry_at: float,
           now: float) -> Decision:
    """Whether the lane may submit a pilot job at ``now``: ``alive`` of its pilot jobs are
    queued or running (``queued`` of them waiting in the batch queue), the last was
    submitted at ``last_submit`` (None: none yet), and after refused submissions none goes
    before ``retry_at``."""
    if alive >= limits.max_pilots:
        return Decision(False, f"{alive} pilots alive, max_pilots {limits.max_pilots}")
    if queued >= limits.max_queued:
        return Decision(False, f"{queued} pilots queued, max_queued_pilots {limits.max_queued}")
    if now < retry_at:
        return Decision(False, "backing off after a refused submission", retry_at)
    if last_submit is not None and now < last_submit + limits.spacing:
        return Decision(False, f"submit_rate {limits.submit_rate:g} a minute", last_submit + limits.spacing)
    return Decision(True)
