"""Every ``PWE_*`` variable pwe reads, declared once: its type, default, bounds and what it
does (:data:`SETTINGS`); and the variables pwe sets for what it starts (:data:`OUTPUTS`),
which are not settings. Standard library only: the pilot reads five of them on compute
nodes, and ``pwe.base.settings`` re-exports this module for the rest of pwe (as
``pwe.base.regular`` re-exports ``pilot.bounded``), whose CLI, engine and service read the
others. No other module reads a ``PWE_`` variable (tests/pilot/test_settings.py scans the source).

A value is read when it is used, never at import (:meth:`Setting.get`). An empty variable
is an unset one (and one of blanks, for a number or a flag). A bad value is
:class:`BadSetting`, a ValueError whose text is one line naming the variable, what is wrong
and what to do: the CLI says it and exits with status 2 (``pwe.base.settings``), the pilot
says it on stderr (its log) and exits with status 2. A path or a text is taken as given.

``python -m pilot.settings`` prints the reference tables; the docs' page of them
(docs/reference/environment.md) is made from the same functions at build time (docs/gen/hooks.py).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from .numbers import NumberError, read_float, read_int

#: the words a flag takes (any case); an empty variable is an unset one, so off
_ON, _OFF = ("1", "yes", "true", "on"), ("0", "no", "false", "off")


class BadSetting(ValueError):
    """A ``PWE_*`` variable whose value is not of its kind or outside its bounds; its text
    is one line: the variable, its value, what it must be, what to do."""


class Setting:
    """One variable: ``name``; ``kind`` (seconds, bytes, count, flag, path, text); its
    ``default`` (None: unset means something of its own, said in ``doc``); ``low``/``high``
    for numbers; ``reader`` (who reads it: cli, engine, service, pilot); ``doc`` (a line);
    ``internal``: set by pwe for its own processes, not meant to be set by hand."""

    __slots__ = ("name", "kind", "default", "low", "high", "reader", "doc", "internal")

    def __init__(self, name: str, kind: str, default: Any, doc: str, reader: str,
                 low: float | None = None, high: float | None = None, internal: bool = False):
        assert kind in _PARSERS or kind in _AS_GIVEN, kind
        self.name, self.kind, self.default, self.doc, self.reader = name, kind, default, doc, reader
        self.low, self.high, self.internal = low, high, internal

    def __repr__(self) -> str:
        return f"Setting({self.name})"

    def get(self, environ: Mapping[str, str] | None = None) -> Any:
        """Its value in ``environ`` (default: this process's environment), else its default;
        :class:`BadSetting` when the value is not one it takes."""
        given = (os.environ if environ is None else environ).get(self.name, "")
        if self.kind in _AS_GIVEN:
            return given or self.default
        if not given.strip():
            return self.default
        return _PARSERS[self.kind](self, given.strip())

    def bounds(self) -> str:
        """Its bounds in words ("" where it has none)."""
        if self.low is None and self.high is None:
            return ""
        unit = {"seconds": " s", "bytes": " bytes"}.get(self.kind, "")
        if self.high is None:
            return f"at least {self.low:g}{unit}"
        return f"{self.low:g} to {self.high:g}{unit}"

    def bad(self, given: str, must: str) -> BadSetting:
        shown = given if len(given) <= 60 else given[:57] + "..."
        return BadSetting(f"{self.name}={shown!r} is not {must}; set it to one, or unset it"
                          + (f" for the default ({self.shown_default()})" if self.default is not None else ""))

    def shown_default(self) -> str:
        if self.default is None:
            return "unset"
        if self.kind == "flag":
            return "off" if not self.default else "on"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


def _number(s: Setting, given: str, whole: bool) -> float | int:
    what = {"seconds": "a number of seconds", "bytes": "a whole number of bytes",
            "count": "a whole number"}[s.kind] + (f", {s.bounds()}" if s.bounds() else "")
    try:  # (the one reader: ASCII digits, bounded, finite; int() took '١٢', float() '1_0' and 'inf')
        return read_int(given, s.low, s.high) if whole else read_float(given, s.low, s.high)
    except NumberError:
        raise s.bad(given, what) from None


def _flag(s: Setting, given: str) -> bool:
    word = given.lower()
    if word in _ON or word in _OFF:
        return word in _ON
    raise s.bad(given, f"a flag ({'/'.join(_ON)} or {'/'.join(_OFF)})")


_PARSERS: dict[str, Callable[[Setting, str], Any]] = {
    "seconds": lambda s, given: _number(s, given, whole=False),
    "bytes": lambda s, given: _number(s, given, whole=True),
    "count": lambda s, given: _number(s, given, whole=True),
    "flag": _flag,
}
#: kinds taken as given (an empty variable unset): what they must be is said where they are
#: used, naming the variable (PWE_BROKER: pwe.service.daemon.check_broker, which never
#: shows a password; PWE_QUEUE: pwe.runstate.service_store.check_queue)
_AS_GIVEN = ("path", "text")

# -- the settings: the one table -----------------------------------------------------------

HOME = Setting("PWE_HOME", "path", None, reader="cli", doc=(
    "pwe's own directory: its state in PWE_HOME/state, its configuration (hosts.yaml) in "
    "PWE_HOME/config. Unset: $XDG_STATE_HOME/pwe and $XDG_CONFIG_HOME/pwe, else "
    "~/.local/state/pwe and ~/.config/pwe"))
BROKER = Setting("PWE_BROKER", "text", None, reader="cli", doc=(
    "the broker `pwe submit --service` sends to (redis://..., rediss://..., filesystem://), "
    "checked there (a bad one: one line naming PWE_BROKER, its password never shown); --broker "
    "wins. Unset: the service's config.json"))
QUEUE = Setting("PWE_QUEUE", "text", None, reader="cli", doc=(
    "the queue `pwe submit --service` sends to, checked there (1 to 100 letters, digits, '.', "
    "'_', '-'). Unset: the service's config.json"))
CHECKPOINT_EVERY = Setting("PWE_CHECKPOINT_EVERY", "seconds", 20.0, low=0, high=86400, reader="engine", doc=(
    "the least seconds between two checkpoints of a run's states (and 50 times what the last "
    "took); the tests take them often"))
SEAL_ABOVE = Setting("PWE_SEAL_ABOVE", "bytes", 8 << 20, low=0, reader="engine", doc=(
    "a left pilot's spool files are sealed (gzip) when together bigger than this, and each of its "
    "members' output streams when bigger than this; 0 seals every one"))
SPOOL_SEGMENT = Setting("PWE_SPOOL_SEGMENT", "bytes", 128 << 20, low=64 << 10, reader="pilot", doc=(
    "a spool file (a pilot's tasks or events) is rotated when it grows past this, and the "
    "engine seals (gzip) each part behind it as the run goes on: the run directory of a "
    "long-lived pilot stays small while it runs; at least 64 KiB"))
SERVICE_STALE = Setting("PWE_SERVICE_STALE", "seconds", 30.0, low=0.1, high=86400, reader="service", doc=(
    "seconds without a tick reaching the service's worker before its worker and beat are "
    "restarted; the tests make it short"))
SERVICE_DIR = Setting("PWE_SERVICE_DIR", "path", None, reader="service", internal=True, doc=(
    "the service's directory, set by the service for its worker and beat so that they never "
    "resolve it differently. Unset: state/service under pwe's state directory"))
SERVICE_WORKER = Setting("PWE_SERVICE_WORKER", "flag", False, reader="service", internal=True, doc=(
    "set by the service for its worker: pwe.service.app then makes the service's Celery app"))
ORPHAN_GRACE = Setting("PWE_ORPHAN_GRACE", "seconds", 5.0, low=0, high=3600, reader="pilot", doc=(
    "seconds the members a killed pilot left running are given to end on their own before its "
    "guardian kills them; 0 kills at once"))
NO_GUARDIAN = Setting("PWE_NO_GUARDIAN", "flag", False, reader="pilot", doc=(
    "on: the pilot runs without its guardian (the process that collects what a killed pilot left)"))
NO_CGROUPS = Setting("PWE_NO_CGROUPS", "flag", False, reader="pilot", doc=(
    "on: a member's memoryPerMember is enforced by watching its processes' resident memory, "
    "never by a cgroup of its own (pilot/memwatch.py), even where the node gives one"))
SPAWNERS = Setting("PWE_SPAWNERS", "count", None, low=0, high=256, reader="pilot", doc=(
    "local spawner processes that start a pilot's members on its node (0: the pilot starts "
    "them itself); --spawners wins. Unset: none below 8 slots, one per 8 slots above"))
OUTPUT_CAP = Setting("PWE_OUTPUT_CAP", "bytes", 8 << 20, low=1024, high=256 << 20, reader="pilot", doc=(
    "the most bytes of a member attempt's stdout, and of its stderr, kept in its pilot's "
    "output stream: the first and last half of it, and how many bytes were left out between"))

FAULT = Setting("PWE_FAULT", "text", None, reader="pilot", doc=(
    "WHO:WHAT:K (tests and bench/soak.py): the engine or the pilot (WHO) kills itself, as by kill -9, "
    "at its K-th write, tear (half a write), rename or fsync (WHAT) of its own files (pilot/faults.py)"))

#: every variable pwe reads, in the order the reference page lists them
SETTINGS: tuple[Setting, ...] = (HOME, BROKER, QUEUE, CHECKPOINT_EVERY, SEAL_ABOVE, SPOOL_SEGMENT, SERVICE_STALE,
                                 SERVICE_DIR, SERVICE_WORKER, ORPHAN_GRACE, NO_GUARDIAN, NO_CGROUPS, SPAWNERS,
                                 OUTPUT_CAP, FAULT)
#: the pilot's own (read on compute nodes; checked when the pilot starts)
PILOT_SETTINGS = tuple(s for s in SETTINGS if s.reader == "pilot")

#: What pwe sets for the commands it starts (members, checks, setup_per_node): outputs, not
#: settings; pwe never reads them as settings (the pilot and its guardian find their own
#: members by PWE_RUN_ID, PWE_NODE, PWE_MEMBER and PWE_ATTEMPT in /proc/PID/environ).
OUTPUTS: tuple[tuple[str, str], ...] = (
    ("PWE_RUN_ID", "the run's id"),
    ("PWE_NODE", "the member's node id"),
    ("PWE_MEMBER", "the member's index in its node"),
    ("PWE_ATTEMPT", "the attempt: 1, then 2, ... on each retry"),
    ("PWE_HOST", "the host the node runs on"),
    ("PWE_RANKS", "the member's MPI ranks"),
    ("PWE_THREADS", "threads per rank"),
    ("PWE_WALLTIME_MINUTES", "the member's wall time in minutes (empty: no limit)"),
    ("PWE_PARAM_<NAME>", "each parameter's value"),
    ("PWE_WORKSPACE", "the directory products are relative to, where the run has one"),
    ("PWE_OUTPUTS", "the file the member appends key=value lines to (its outputs)"),
    ("PWE_TMPDIR", "the member attempt's own temporary directory (TMPDIR too)"),
    ("PWE_GPUS", "the GPUs given to the member (CUDA_VISIBLE_DEVICES too)"),
    ("PWE_PARENT", "iteration until convergence: the member this one grew from"),
    ("PWE_ITERATION", "iteration until convergence: the member's depth (1 at the root)"),
    ("PWE_SETUP_NODE", "setup_per_node's command: the node it runs on"),
)


def check(settings: tuple[Setting, ...] = SETTINGS, environ: Mapping[str, str] | None = None) -> None:
    """:class:`BadSetting` for the first of ``settings`` whose value is bad."""
    for s in settings:
        s.get(environ)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def settings_table() -> str:
    """:data:`SETTINGS` as a markdown table (docs/reference/environment.md)."""
    lines = ["| Variable | Kind | Default | Bounds | Read by | What it does |", "|---|---|---|---|---|---|"]
    for s in SETTINGS:
        doc = ("*Set by pwe for its own processes.* " if s.internal else "") + s.doc
        lines.append(f"| `{s.name}` | {s.kind} | {s.shown_default()} | {s.bounds() or '-'} | {s.reader} "
                     f"| {_cell(doc)} |")
    return "\n".join(lines) + "\n"


def outputs_table() -> str:
    """:data:`OUTPUTS` as a markdown table (docs/reference/environment.md)."""
    lines = ["| Variable | What it holds |", "|---|---|"]
    lines += [f"| `{name}` | {_cell(doc)} |" for name, doc in OUTPUTS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(settings_table() + "\n" + outputs_table(), end="")
