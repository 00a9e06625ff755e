"""The states a member is in: their codes (one byte each in the engine's arrays,
:mod:`pwe.runstate.state`) and their names (what ``pwe status``, ``pwe show`` and the
queries of :mod:`pwe.planning.conditions` say). Here, below every room that speaks of them."""

WAITING, READY, ASSIGNED, RUNNING, DONE, FAILED, SKIPPED, CANCELLED = range(8)
NAMES = ["waiting", "ready", "queued", "running", "done", "failed", "skipped", "cancelled"]
FINAL = (DONE, FAILED, SKIPPED, CANCELLED)
