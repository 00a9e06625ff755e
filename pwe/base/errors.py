"""The errors pwe raises, drawn as one tree: every exception that pwe, protocols and
hostinfo raise to a user is one of these (tests/cli/test_errors.py walks those packages and
this drawing, so neither can drift).

    class                         exit  what                                          raised in (pwe.*, then the others)
    PweError                       1    anything pwe reports to a user                runstate (rundir, notify), cli
     +-- RunStopped                3    stopped early, state intact: resumable        engine.loop
     |    +-- JournalError         3    cannot write the run directory (disk full)    runstate.journal, engine.loop
     +-- RunDamaged                2    a file of the run directory damaged or gone   runstate (runs, journal), engine
     +-- RunTaken                  2    another engine holds the run: who, since when runstate.locks, engine.control
     +-- JournalTooNew             2    a journal begun by a newer pwe: which to use  runstate.journal
     +-- NoLocks                   1    the filesystem refuses flock (Lustre)         runstate.locks
     +-- BadTransition             1    a defect: a pilot's stage moved against its table engine.handles
     +-- Underivable               1    a defect: a model the checker's table cannot take base.derive
     +-- InputError                2    bad input, found before anything ran          pwe.* and hostinfo.registry
     |    +-- WorkflowSyntaxError  2    not well-formed YAML / XML / UTF-8 text       the readers (base, workflow)
     |    +-- WorkflowSchemaError  2    well-formed, but breaks the model or the XSD  workflow.load, planning.plan
     |    +-- WorkflowGraphError   2    a cycle, an unknown or self dependency        planning.plan
     |    +-- TemplateError        2    a payload that cannot compile or render       planning.plan, planning.products
     |    |    +-- TemplateSyntax  2    a template jinja2 cannot compile              workflow.sandbox
     |    +-- HostsFileError       2    a hosts file unreadable or against the model  hostinfo.registry
     |    +-- UnknownProtocol      2    a protocol name not in the one list           protocols.registry
     |    +-- RunNotFound          2    no run by that id or directory                runstate.rundir
     |    +-- Unconfined           2    a name from elsewhere leads out of its place  base.confine
     |    +-- OverBudget           2    a query past its time budget (the dashboard)  planning.conditions
     |    +-- Refused              2    the checker cannot vouch: pydantic words it   base.checker (never shown)
     +-- HostError                 1    a host did not do what was asked (a base)     -
          +-- SubmitError          1    the batch system refused a pilot job          protocols.base, protocols.*
          +-- CommandTimeout       1    a command did not answer in time              protocols.runner, protocols.ssh
          +-- ContactError         1    the host cannot be reached                    protocols.ssh
          +-- SchedulerUnreachable 1    the batch system did not answer: ask later    protocols.base
          +-- StagingError         1    a file staged or fetched did not arrive whole protocols.staging

A HostError keeps the command, its exit status and its stderr as attributes, and its
``str()`` is one line carrying the host's own answer. The engine stops a run on a pilot
submission's SubmitError or ContactError with RunStopped (exit status 3, chained to it);
a status query's CommandTimeout or ContactError makes the jobs UNKNOWN, never "failed".
A submission the batch system could not take because its controller did not answer
(SchedulerUnreachable) is tried again later, with back-off: it does not stop the run.

This is the one module of pwe that the layers below the engine (``protocols``,
``hostinfo``) may import: it uses the standard library only and imports nothing else of
pwe, and importing it does not import the engine (``pwe/__init__`` loads its public
names lazily). The pilot package imports none of it: it is standard library only and
reports its failures over the wire (events), not as exceptions.

Backend exceptions are mapped into this tree once, at the boundary where they are
raised: PyYAML in pwe.base.yaml_reader, lxml in pwe.workflow.xml_reader, pydantic in pwe.workflow.load (a
workflow) and hostinfo.registry (a hosts file), jinja2 in pwe.planning.plan, subprocess in
protocols.runner, paramiko and the socket in protocols.ssh, OSError where a file is
read or written (the readers, pwe.runstate.journal, pwe.runstate.rundir, pwe.runstate.notify). So the CLI prints
one line and never a traceback. Every InputError carries the file and, where the file
has one, the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence


def one_line(text: object) -> str:
    """``text`` folded onto one line: its non-blank lines, stripped, joined by `` / ``."""
    return " / ".join(line.strip() for line in str(text).splitlines() if line.strip())


class PweError(Exception):
    """Base of everything pwe reports to a user."""

    exit_status = 1


class RunStopped(PweError):
    """The run stopped before its end for a cause outside its members (a batch system
    refused a pilot, the disk filled, pilots kept breaking). Its state is intact: fix the
    cause, then ``pwe resume RUN``. Exit status 3, so scripts can tell it from failed
    members (1) and bad input (2)."""

    exit_status = 3


class JournalError(RunStopped):
    """The journal cannot be written (disk full, permissions): the run stops cleanly."""


class RunDamaged(PweError):
    """A file the run directory needs is damaged or missing (``run.json``, the workflow's
    copy, the journal): says which, and what repairs it or what can still be done. Exit
    status 2, as bad input: found before anything ran, and running it again as it is
    cannot help."""

    exit_status = 2


class RunTaken(PweError):
    """Another engine holds the run (``engine.lock``): it says which (pid, host, since
    when, from the holder's own record) and what to do (``pwe status``, wait, ``pwe
    cancel``). Exit status 2: nothing was done."""

    exit_status = 2


class JournalTooNew(PweError):
    """The run's journal is of a version this pwe does not know (its header, the first
    line: :data:`pwe.runstate.journal.VERSION`): begun by a newer pwe, which it names.
    Exit status 2: nothing was read or written; that pwe, or a later one, reads it."""

    exit_status = 2


class BadTransition(PweError):
    """A pilot asked to make a transition its stage does not allow
    (pwe.engine.handles.TRANSITIONS): a defect of the engine, to be reported, never the
    user's input."""


class InputError(PweError):
    """Input a user must fix. Renders as ``FILE:LINE: message``, one line whatever the
    message holds: a control character of a value put into it (a newline of an XML
    attribute's ``&#10;``, a file name's) is written visibly (:func:`pwe.base.text.shown`)."""

    exit_status = 2

    def __init__(self, message: str, file: str | Path | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        from .text import shown

        return shown(f"{where}{self.message}")


class WorkflowSyntaxError(InputError):
    """The file cannot be read as YAML / XML at all."""


class WorkflowSchemaError(InputError):
    """The document is well-formed but does not describe a valid workflow."""


class WorkflowGraphError(InputError):
    """The nodes do not form a DAG: a cycle, an unknown or self dependency."""


class TemplateError(InputError):
    """A payload template is malformed, names something undefined, or cannot render."""


class HostsFileError(InputError):
    """A hosts file cannot be read, or does not describe valid hosts."""


class UnknownProtocol(InputError):
    """A protocol name that is not in ``protocols.registry``'s one list."""


class RunNotFound(InputError):
    """No run by that id or path."""


class Unconfined(InputError):
    """A name received from elsewhere (a login node's listing, a file of a run directory,
    a user) that is not a plain relative path, or leads out of the directory it is joined
    to (pwe.base.confine.inside): refused before anything is read or written."""


class OverBudget(InputError):
    """A query that ran past its time budget (the dashboard's requests: HTTP 503); the
    command line's ``pwe show -q`` has none."""


class HostError(PweError):
    """A host (its head node, its batch system) did not do what was asked.

    ``command`` (the argv run, when there was one), ``status`` (its exit status, when it
    ended) and ``stderr`` are kept as attributes; ``str()`` is one line that carries what
    the user needs, the host's own answer included."""

    def __init__(self, message: str, command: Sequence[str] | None = None, status: int | None = None,
                 stderr: str = ""):
        super().__init__(message)
        self.message = message
        self.command = list(command) if command is not None else None
        self.status = status
        self.stderr = stderr

    def __str__(self) -> str:
        return one_line(self.message)


class SubmitError(HostError):
    """The batch system refused a pilot job, or its answer names no job id."""


class CommandTimeout(HostError):
    """A command did not answer within its timeout. For a status query that means
    UNKNOWN (ask again later), never "failed"."""

    def __init__(self, command: Sequence[str], timeout: float):
        super().__init__(f"{command[0]} did not answer within {timeout:g} s", command)
        self.timeout = timeout


class ContactError(HostError):
    """A host could not be reached: nothing listens, its host key is unknown or changed,
    authentication failed, or the connection dropped. Carries the host and the reason.

    ``maybe_ran`` is False when the command certainly did not start (no connection was
    made), so a submission need not be looked up by name before it is reported."""

    def __init__(self, host: str, reason: str, command: Sequence[str] | None = None, maybe_ran: bool = True):
        super().__init__(f"cannot reach {host}: {reason}", command)
        self.host, self.reason = host, reason
        self.maybe_ran = maybe_ran


class SchedulerUnreachable(HostError):
    """The batch system's controller did not answer (down, restarting, overloaded): its
    commands ran on the head node and said so, or timed out. Nothing is known, nothing is
    refused: ask again later.

    ``maybe_ran`` is True when a submission may have taken all the same (it timed out and
    the lookup by name could not answer either): look it up by name before submitting
    again."""

    def __init__(self, message: str, command: Sequence[str] | None = None, status: int | None = None,
                 stderr: str = "", maybe_ran: bool = False):
        super().__init__(message, command, status, stderr)
        self.maybe_ran = maybe_ran


#: pydantic's error types said as a workflow's and a hosts file's errors say them
_PLAIN = {
    "dict_type": "must be a mapping (key: value lines)",
    "model_type": "must be a mapping (key: value lines)",
    "model_attributes_type": "must be a mapping (key: value lines)",
    "list_type": "must be a list",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "too_short": "must not be empty",
    "too_long": "has too many items",
}
_BOUNDS = {"greater_than": ("gt", "greater than"), "greater_than_equal": ("ge", "at least"),
           "less_than": ("lt", "less than"), "less_than_equal": ("le", "at most")}


def plain_message(err: dict) -> str:
    """What one of pydantic's errors (an item of ``ValidationError.errors()``) says is wrong,
    in the words pwe's other input errors use (``must be at least 1``, not ``Input should
    be greater than or equal to 1``); a validator's own message as it is."""
    kind = err["type"]
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return f"must be {words} {(err.get('ctx') or {}).get(key)}"
    return _PLAIN.get(kind) or err["msg"].removeprefix("Value error, ")


def shown_value(v: Any) -> str:
    """A value as an input error shows it after ``got``: its repr, cut at 60 characters, a
    URL's password as ``***``; a mapping, a list or nothing by its kind."""
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "nothing"
    if isinstance(v, str) and "://" in v:
        from pilot.broker import redact

        v = redact(v)
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def wrong_value(err: dict) -> str:
    """:func:`plain_message` and the value it was given (``must be at least 1 (got 0)``): one
    wording for a workflow's and a hosts file's bad values. A validator's own message about a
    list or a mapping, or one that shows the value already (whole or without its password),
    is left as it is."""
    text, given = plain_message(err), err.get("input")
    got = shown_value(given)
    if err["type"] == "value_error" and (got in ("a list", "a mapping") or got in text or
                                         (isinstance(given, str) and repr(given) in text)):
        return text
    return f"{text} (got {got})"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a close choice exists, else ``''``: the hint every
    "unknown name" message carries, here so that the lower layers may give it too."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class StagingError(HostError):
    """A file sent to a login node or brought back from one did not arrive whole (its copy
    does not hash as the source does, or the source is gone): protocols.staging."""
