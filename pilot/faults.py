"""Fault points: a process of pwe dies, as by kill -9, at a chosen write of its own
(standard library only; issue 45).

SQLite is tested by stopping it at every write it makes; pwe's guarantees (nothing lost,
nothing run twice, nothing half made taken as whole) are tested the same way. With
``PWE_FAULT=WHO:WHAT:K`` (:data:`pilot.settings.FAULT`) the process of role ``WHO``
(``engine`` or ``pilot``) kills itself with SIGKILL at its ``K``-th fault point of kind
``WHAT``:

- ``write``: before an append to its journal or spool (the engine's journal and tasks,
  the pilot's events);
- ``tear``: in the middle of one: half its bytes written, then the kill (a torn line);
- ``rename``: before a file written whole is renamed into place (run.json, checkpoints,
  sealed parts);
- ``fsync``: before an fsync of an append.

Points are counted per kind from the process's :func:`arm`. Unset (the default), a point
costs one test of a module-level flag. tests/engine/test_harness.py and bench/soak.py use it.
"""

from __future__ import annotations

import os
import signal

from .settings import FAULT

#: the kinds of fault point
KINDS = ("write", "tear", "rename", "fsync")
#: the roles a process may have
ROLES = ("engine", "pilot")

ARMED = False
_what = ""
_at = 0
_counts: dict[str, int] = {}


def parse(value: str) -> tuple[str, str, int]:
    """``WHO:WHAT:K`` as (who, what, k); ValueError (one line) when it is none."""
    parts = value.split(":")
    if len(parts) != 3 or parts[0] not in ROLES or parts[1] not in KINDS or not (
            parts[2].isascii() and parts[2].isdigit() and 0 < len(parts[2]) <= 9 and int(parts[2]) >= 1):
        raise ValueError(f"PWE_FAULT={value[:60]!r} is not WHO:WHAT:K (WHO one of {', '.join(ROLES)}; WHAT one "
                         f"of {', '.join(KINDS)}; K a whole number from 1); unset it")
    return parts[0], parts[1], int(parts[2])


def arm(role: str) -> None:
    """This process has ``role``: its points count from now, and the one PWE_FAULT names
    kills it. ValueError (one line) for a PWE_FAULT that is not WHO:WHAT:K."""
    global ARMED, _what, _at
    value = FAULT.get()
    if not value:
        ARMED = False
        return
    who, what, k = parse(value)
    ARMED = who == role
    _what, _at = what, k
    _counts.clear()


def at(kind: str, fh=None, data: bytes = b"") -> None:
    """A fault point of ``kind``; for ``write``, also the point ``tear`` counts (``fh``,
    ``data``: the file and the bytes about to be appended, half of which a tear writes)."""
    if not ARMED:
        return
    for what in ((kind, "tear") if kind == "write" else (kind,)):
        if what != _what:
            continue
        _counts[what] = n = _counts.get(what, 0) + 1
        if n == _at:
            if what == "tear" and fh is not None and data:
                try:
                    fh.write(data[:max(1, len(data) // 2)])
                    fh.flush()
                except (OSError, ValueError):
                    pass
            os.kill(os.getpid(), signal.SIGKILL)
