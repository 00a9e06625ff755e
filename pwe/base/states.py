"""The states a member is in: their codes (one byte each in the engine's arrays,
:mod:`pwe.runstate.state`) and their names (what ``pwe status``, ``pwe show`` and the
queries of :mod:`pwe.planning.conditions` say). Here, below every room that speaks of them."""

WAITING, READY, ASSIGNED, RUNNING, DONE, FAILED, SKIPPED, CANCELLED, QUARANTINED, HELD = range(10)
NAMES = ["waiting", "ready", "queued", "running", "done", "failed", "skipped", "cancelled", "quarantined", "held"]
#: States a member stays in: QUARANTINED is a member that was running when its pilot or
#: node was lost ``maxLosses`` times (it is not run again; ``pwe retry -q`` releases it)
FINAL = (DONE, FAILED, SKIPPED, CANCELLED, QUARANTINED)
#: HELD is a member not yet started of a parameter value whose members fail and none is
#: done (``hold:``, pwe/engine/holds.py): it waits, not final, until ``pwe release`` (or
#: ``pwe retry``) lets it go
#: States ``pwe retry`` picks (members that did not end done)
AGAIN = (FAILED, SKIPPED, CANCELLED, QUARANTINED, HELD)
