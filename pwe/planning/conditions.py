"""The language of queries over a run's members: ``state=failed; T>300; outputs.energy<1.5``
(``pwe show -q``, :func:`pwe.observe.results.select`; a group's ``include``, :mod:`pwe.planning.groups`).

A query is conditions joined by ``;`` (all must hold), each ``FIELD OP VALUE`` with OP
one of ``= != < <= > >= ~`` (``~``: the value is a regular expression found in the
field's text). ``=`` and ``!=`` take alternatives separated by ``,``
(``state=failed,cancelled``). The fields:

==============================  ==========================================================
``state``                       waiting, ready, queued, running, done, failed, skipped,
                                cancelled
``node``, ``member``            the member's node and index
``attempts``                    attempts started so far
``exit`` (``rc``)               exit status of its last attempt (negative: a signal)
``why``                         why its last attempt ended (timeout, signal, ...)
``T`` (``duration``)            seconds its last attempt ran
``cpu``, ``rss``                CPU seconds, peak resident KB of its last attempt
``host``                        the host its last attempt ran on
``outputs.K`` (``out.K``)       an output it returned
``params.K`` (``p.K``) or ``K``  a parameter
==============================  ==========================================================

Numbers compare as numbers; ``<`` and friends need a number. A member without the
field (no output of that name, a parameter another node has) does not match. A query
holds at most 4096 characters; a ``~`` pattern is searched in a field's first 256
characters by RE2 (Google's engine, the ``google-re2`` package: its time grows with the
text's length, never exponentially, whatever the pattern), in RE2's syntax: Python's
without back-references (``\\1``), lookaround (``(?=``, ``(?!``, ``(?<=``, ``(?<!``),
atomic groups and possessive repeats, which are refused in one line. ``T``,
``cpu``, ``rss`` and ``host`` come from the run's trace (:mod:`pwe.observe.trace`: the whole
journal is read); the other fields from the members' state.
"""

from __future__ import annotations

import math
import operator
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..base.errors import InputError, OverBudget

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le, ">=": operator.ge, "!=": operator.ne, "<": operator.lt, ">": operator.gt, "=": operator.eq,
}
_COND = re.compile(r"\s*([A-Za-z_][\w.-]*)\s*(<=|>=|!=|==|=|<|>|~)(.*)", re.S)
#: the longest query taken (a query is typed or scripted: a few conditions)
MAX_QUERY = 4096
#: a ``~`` pattern is searched in the first this many characters of a field's text (an
#: output value may be long)
MAX_SUBJECT = 256
#: what RE2 says of the syntax it does not take (Python's ``re`` has it), said in words
_UNSUPPORTED = ((re.compile(r"invalid escape sequence: \\[1-9]"), "a back-reference (\\1)"),
                (re.compile(r"invalid perl operator: \(\?P(=|>|$)"), "a back-reference ((?P=NAME))"),
                (re.compile(r"invalid perl operator: \(\?(=|!|<=|<!)"), "lookaround ((?=, (?!, (?<=, (?<!)"),
                (re.compile(r"invalid perl operator: \(\?>"), "an atomic group ((?>...))"),
                (re.compile(r"bad repetition operator: "), "a possessive or stacked repeat (a++, a{2}{3})"))
_OP_CHARS = "<>=!~"
ALIASES = {"rc": "exit", "exit_status": "exit", "duration": "T", "attempt": "attempts", "index": "member"}
#: fields that need the trace (the whole journal), not only the state
TRACE_FIELDS = frozenset({"T", "cpu", "rss", "host"})
PLAIN = frozenset({"state", "node", "member", "attempts", "exit", "why"}) | TRACE_FIELDS


@dataclass(frozen=True)
class Cond:
    field: str  # a plain field, "outputs.K" or "params.K"
    op: str
    values: tuple[Any, ...]  # numbers where they read as numbers
    pattern: Any = None  # a compiled RE2 pattern (:func:`compile_pattern`)
    bare: bool = False  # a parameter written by its name alone (checked once the run is read)
    text: str = ""  # the condition as written

    def test(self, row: dict[str, Any]) -> bool:
        v = value_of(row, self.field)
        if v is None:
            return False
        if self.pattern is not None:
            return self.pattern.search(str(v)[:MAX_SUBJECT]) is not None
        v = number(v)
        if self.op in ("=", "!="):
            hit = any(_eq(v, w) for w in self.values)
            return hit if self.op == "=" else not hit
        if not isinstance(v, (int, float)):
            return False
        return _OPS[self.op](v, self.values[0])


def _eq(v: Any, w: Any) -> bool:
    if isinstance(v, (int, float)) and isinstance(w, (int, float)):
        return v == w
    return str(v) == str(w)


def number(v: Any) -> Any:
    """``v`` as an int or float when it reads as one (outputs are text), else as it is."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            try:
                return float(v)
            except ValueError:
                return v
    return v


def value_of(row: dict[str, Any], field: str) -> Any:
    if field.startswith("outputs."):
        return (row.get("outputs") or {}).get(field[8:])
    if field.startswith("params."):
        return (row.get("parameters") or {}).get(field[7:])
    return row.get(field)


def parse(text: str, parameters: set[str] | frozenset[str] | None = frozenset()) -> list[Cond]:
    """The conditions of a query; :class:`InputError` (one line: which condition, what is
    wrong, what to write) for a bad one. ``parameters``: the run's parameter names, which
    may be written bare (None: not known yet; a bare name is taken as a parameter)."""
    conds = []
    if len(text) > MAX_QUERY:
        raise InputError(f"query of {len(text):,} characters: at most {MAX_QUERY:,}; write fewer conditions")
    bad = next((c for c in text if (ord(c) < 32 and c not in "\t\n") or ord(c) == 127), None)
    if bad is not None:
        raise InputError(f"query: a control character ({ord(bad):#04x}); write FIELD OP VALUE in plain text")
    parts = [p for p in text.split(";") if p.strip()]
    if not parts:
        raise InputError(f"query {text!r}: no condition (an empty query selects nothing); write e.g. "
                         "'state=failed; T>300; outputs.energy<1.5'")
    for part in parts:
        m = _COND.fullmatch(part)
        raw = m.group(3).strip() if m else ""
        if not m or not raw:
            raise InputError(f"query condition {part.strip()!r}: write FIELD OP VALUE with OP one of "
                             "= != < <= > >= ~, e.g. 'T>300'")
        name, op = m.group(1), m.group(2)
        if raw[0] in _OP_CHARS and op != "~":
            raise InputError(f"query condition {part.strip()!r}: no operator '{op}{raw[0]}'; OP is one of "
                             "= != < <= > >= ~, e.g. 'T>300'")
        op = "=" if op == "==" else op
        bare = parameters is None and ALIASES.get(name, name) not in PLAIN and "." not in name
        field = f"params.{name}" if bare else field_named(name, parameters or frozenset(), part)
        pattern = None
        if op == "~":
            pattern = compile_pattern(raw, part.strip())
            values: tuple[Any, ...] = (raw,)
        elif op in ("=", "!="):
            values = tuple(number(v.strip()) for v in raw.split(","))
        else:
            v = number(raw)
            if not isinstance(v, (int, float)):
                raise InputError(f"query condition {part.strip()!r}: {op} needs a number, not {raw!r}")
            values = (v,)
            if isinstance(v, float) and not math.isfinite(v):
                raise InputError(f"query condition {part.strip()!r}: {raw!r}: {op} needs a finite number")
        if field == "state" and op != "~":
            from ..base.states import NAMES

            bad = [v for v in values if str(v) not in NAMES]
            if bad:
                raise InputError(f"query condition {part.strip()!r}: no state {bad[0]!r}; one of {', '.join(NAMES)}")
        conds.append(Cond(field, op, values, pattern, bare, part.strip()))
    return conds


def compile_pattern(text: str, where: str) -> Any:
    """``text`` compiled by RE2 (matching in time linear in the text, whatever the pattern);
    :class:`InputError` (one line naming ``where``, the condition) for a pattern RE2 does
    not take: not a regular expression, or syntax only a backtracking matcher has."""
    import re2  # (here: a workflow without a ~ condition does not load it)

    options = re2.Options()
    options.log_errors = False  # (RE2 would print its own lines on stderr)
    try:
        return re2.compile(text, options)
    except re2.error as exc:
        said = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        why = next((w for form, w in _UNSUPPORTED if form.match(said)), None)
        if why:
            raise InputError(f"query condition {where!r}: {why} is not supported: ~ matches with RE2 "
                             "(linear time), which has no back-references, lookaround or atomic groups; write "
                             "the pattern without it") from None
        raise InputError(f"query condition {where!r}: not a regular expression ({said})") from None


class Budget:
    """A time budget for a query's evaluation (the dashboard's requests: a query over a
    million members is cut short rather than holding a thread for minutes). ``check()``
    raises :class:`OverBudget` once ``seconds`` have passed since it was made; it looks
    at the clock only every :data:`EVERY` calls."""

    EVERY = 1024

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.calls = 0

    def left(self) -> float:
        """Seconds left (0 when none)."""
        return max(0.0, self.deadline - time.monotonic())

    def check(self) -> None:
        self.calls += 1
        if self.calls % self.EVERY == 0 and time.monotonic() > self.deadline:
            raise self.over()

    def over(self) -> OverBudget:
        return OverBudget(f"the query took over {self.seconds:g} s; narrow it (state=, node=, a parameter) or "
                          "use pwe show -q, which has no time limit")


def field_named(name: str, parameters: set[str] | frozenset[str], part: str) -> str:
    """The field a name in a query means; :class:`InputError` when it means none."""
    name = ALIASES.get(name, name)
    if name in PLAIN:
        return name
    head, dot, key = name.partition(".")
    if dot and key:
        if head in ("outputs", "out"):
            return f"outputs.{key}"
        if head in ("params", "p", "parameters"):
            return f"params.{key}"
    if not dot and name in parameters:
        return f"params.{name}"
    from ..base.errors import did_you_mean

    raise InputError(f"query condition {part.strip()!r}: no field '{name}'"
                     f"{did_you_mean(name, sorted(PLAIN | set(parameters)))}; fields: {', '.join(sorted(PLAIN))}, "
                     "outputs.NAME, params.NAME or a parameter's name")


def needs_trace(conds: list[Cond]) -> bool:
    return any(c.field in TRACE_FIELDS for c in conds)


def matches(conds: list[Cond], row: dict[str, Any]) -> bool:
    return all(c.test(row) for c in conds)
