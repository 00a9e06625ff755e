"""The ``pwe`` program's front door: what runs before click is imported.

``pwe run FILE`` (local: no ``--host``, or ``--host local``) starts its pilot's interpreter
here (:func:`protocols.warmpilot.prestart`), before the command line's own imports (click
alone is ~2x ``python -c pass``), the engine's and the planning: the pilot's start-up then
overlaps all of them, not only the last. Nothing is parsed here: the argument list is only
looked at, and a guess that is wrong costs an interpreter that leaves unused once this
process exits (the run's own parse, by click, decides everything). Then :func:`pwe.cli.main.console`.
"""

from __future__ import annotations

import sys


def pilot_ahead(args: list[str]) -> bool:
    """Whether ``pwe ARGS`` is likely a local ``pwe run`` (a pilot started now would be used)."""
    if args[:1] != ["run"] or "-h" in args or "--help" in args:
        return False
    host = None
    for i, word in enumerate(args):
        if word == "--host" and i + 1 < len(args):
            host = args[i + 1]
        elif word.startswith("--host="):
            host = word[len("--host="):]
    return host in (None, "local")


def console() -> None:
    """The ``pwe`` console script and ``python -m pwe``."""
    if pilot_ahead(sys.argv[1:]):
        from protocols.warmpilot import prestart

        prestart()
    from .main import console as _console

    _console()
