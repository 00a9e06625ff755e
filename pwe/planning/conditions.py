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
characters, and one that would make Python's backtracking matcher slow (a repeat inside a
repeat, ``|`` under a repeat, a back-reference, more than two ``*``/``+``) is refused. ``T``,
``cpu``, ``rss`` and ``host`` come from the run's trace (:mod:`pwe.observe.trace`: the whole
journal is read); the other fields from the members' state.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..base.errors import InputError

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le, ">=": operator.ge, "!=": operator.ne, "<": operator.lt, ">": operator.gt, "=": operator.eq,
}
_COND = re.compile(r"\s*([A-Za-z_][\w.-]*)\s*(<=|>=|!=|==|=|<|>|~)(.*)", re.S)
#: the longest query taken (a query is typed or scripted: a few conditions)
MAX_QUERY = 4096
#: a ``~`` pattern is searched in the first this many characters of a field's text (an
#: output value may be long) ...
MAX_SUBJECT = 256
#: ... and has at most this many repeats of a variable count (``*``, ``+``, ``{m,n}``) and of
#: ``?``, none nested, no alternation under a repeat, no back-reference: Python's matcher
#: backtracks, so its time grows as the text's length to the power of the repeats (and
#: exponentially with nesting); these bounds keep every search in a member's row short
MAX_REPEATS, MAX_OPTIONAL = 2, 8
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
    pattern: re.Pattern | None = None
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
        raise InputError(f"query {text!r}: no condition; write e.g. 'state=failed; T>300; outputs.energy<1.5'")
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
            try:
                pattern = re.compile(raw)
            except (re.error, RecursionError, OverflowError) as exc:
                raise InputError(f"query condition {part.strip()!r}: not a regular expression ({exc})") from None
            why = _slow(raw)
            if why:
                raise InputError(f"query condition {part.strip()!r}: {why} makes its search slow on long "
                                 "text; write a simpler pattern") from None
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


def _slow(pattern: str) -> str | None:
    """What in a regular expression makes Python's backtracking matcher exponential (a
    repeat inside a repeat, an alternation or a back-reference under a repeat: ``(a+)+``,
    ``(a|a)*``, ``(a)\\1*``), said in words; None for a pattern without it."""
    try:
        from re import _parser as sre  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Python < 3.11
        import sre_parse as sre  # type: ignore[no-redef]
    from re import _constants as c  # type: ignore[attr-defined]

    repeats = (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None))
    count = [0, 0]

    def walk(items: Any, under: bool) -> str | None:
        for op, av in items:
            if op in repeats and op is not None:
                lo, hi, sub = av
                if under and hi != lo:
                    return "a repeat inside a repeat"
                if hi != lo:
                    count[hi - lo == 1] += 1
                    if count[0] > MAX_REPEATS:
                        return f"more than {MAX_REPEATS} repeats of a variable count (*, +, {{m,n}})"
                    if count[1] > MAX_OPTIONAL:
                        return f"more than {MAX_OPTIONAL} optional parts (?)"
                found = walk(sub, under or hi > 1)
                if found:
                    return found
            elif op is c.BRANCH:
                if under:
                    return "an alternation (|) under a repeat"
                for alt in av[1]:
                    found = walk(alt, under)
                    if found:
                        return found
            elif op in (c.SUBPATTERN, c.ATOMIC_GROUP) if hasattr(c, "ATOMIC_GROUP") else op is c.SUBPATTERN:
                found = walk(av[-1], under)
                if found:
                    return found
            elif op in (c.ASSERT, c.ASSERT_NOT):
                found = walk(av[1], under)
                if found:
                    return found
            elif op is c.GROUPREF or op is c.GROUPREF_EXISTS:
                return "a back-reference"
        return None

    try:
        return walk(sre.parse(pattern), False)
    except Exception:  # (compiled above: a form this walk does not know is let through)
        return None


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
