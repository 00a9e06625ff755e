"""Every ``PWE_*`` variable pwe reads, declared once in :mod:`pilot.settings` (standard
library only: the pilot reads four of them on compute nodes, and ``pilot`` is below
``pwe.base``) and re-exported here, as :mod:`pwe.base.regular` re-exports
:mod:`pilot.bounded`. A setting is read where it is used, with ``SETTING.get()`` (never at
import); a bad value is a :class:`BadSetting` (a ValueError) of one line naming it.

:func:`check` is what the command line does before any command: every setting read once,
a bad one an :class:`~pwe.base.errors.InputError` (one line, exit status 2), so that a bad
value is said at once rather than by an engine, a service or a pilot later.
"""

from __future__ import annotations

from pilot.settings import (BROKER, CHECKPOINT_EVERY, HOME, NO_GUARDIAN, ORPHAN_GRACE, OUTPUT_CAP, OUTPUTS,
                            PILOT_SETTINGS, QUEUE, SEAL_ABOVE, SERVICE_DIR, SERVICE_STALE, SERVICE_WORKER, SETTINGS,
                            SPAWNERS, SPOOL_SEGMENT, BadSetting, Setting, outputs_table, settings_table)

from .errors import InputError

__all__ = ["BROKER", "CHECKPOINT_EVERY", "HOME", "NO_GUARDIAN", "ORPHAN_GRACE", "OUTPUT_CAP", "OUTPUTS",
           "PILOT_SETTINGS", "QUEUE", "SEAL_ABOVE", "SERVICE_DIR", "SERVICE_STALE", "SERVICE_WORKER", "SETTINGS",
           "SPAWNERS", "SPOOL_SEGMENT", "BadSetting",
           "Setting", "check", "outputs_table", "settings_table"]


def check() -> None:
    """Every setting read from this process's environment: InputError (exit status 2) for
    the first bad one."""
    for setting in SETTINGS:
        try:
            setting.get()
        except BadSetting as exc:
            raise InputError(str(exc)) from None
