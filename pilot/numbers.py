"""The one reader of numbers from outside (issue 45): a file, an option, a variable, a
record, a URL path. Standard library only (the pilot reads its indexes and settings with
it); :mod:`pwe.base.numbers` re-exports it for the rest of pwe.

A number from outside is taken only when its text is ASCII decimal digits (``str.isdigit``
and ``int()`` take ``²``, ``①``, Arabic-Indic digits, and ``int()`` blanks and ``_`` too),
of at most :data:`MAX_DIGITS` digits (Python refuses to convert more than 4,300, and a number
that long is no count of anything), finite, and inside the range its field documents,
checked before any arithmetic. Each refusal is a :class:`NumberError` (a ``ValueError``)
whose message says what was wrong, not where: the caller adds the file and line, the
option, the variable or the route.

The common case is cheap: a plain non-negative integer of at most 18 characters is one
``isascii``/``isdigit`` test and one ``int()`` (the journal's replay and the pilot's index
read millions).
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["MAX_DIGITS", "COUNT_MOST", "MINUTES_MOST", "NumberError", "read_int", "read_float",
           "whole", "finite", "bounded", "within", "digits_problem", "shown"]

#: The most digits a number from outside may have (a file's, an option's, a record's). Python
#: refuses to convert past 4,300; this leaves room for arithmetic on what is taken.
MAX_DIGITS = 1000
#: The largest count a workflow or hosts file may give (cores, nodes, members, MB, a priority):
#: far above any machine, far below where a product of two overflows a C long or a float.
COUNT_MOST = 10 ** 9
#: The longest time in minutes a workflow or hosts file may give (about 1.9 years).
MINUTES_MOST = 10 ** 6

_INT = re.compile(r"[-+]?[0-9]+\Z", re.ASCII)
_FLOAT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z", re.ASCII)


class NumberError(ValueError):
    """A number from outside that is not one, or not in its range: the message says what
    (the caller says where)."""


def shown(text: Any, most: int = 40) -> str:
    """``text`` as a message shows it: repr'd, at most ``most`` characters of it."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _int_shown(text)
    s = text if isinstance(text, str) else str(text) if isinstance(text, float) else repr(text)[:most + 1]
    if len(s) > most:
        s = s[:most] + f"... ({len(s):,} characters)"
    return repr(s) if isinstance(text, str) else s


def _int_shown(v: int) -> str:
    if -10 ** 18 < v < 10 ** 18:
        return str(v)
    return f"a number of {v.bit_length() * 0.30103:,.0f} digits"  # (no str() past 4,300 digits)


def digits_problem(text: str, most: int = MAX_DIGITS) -> str | None:
    """Why ``text`` (already matched as a number's form) has too many digits, or None."""
    count = sum(1 for c in text if "0" <= c <= "9")
    if count > most:
        return f"a number of {count:,} digits; at most {most:,} are read"
    return None


def _range_problem(v: int | float, lo: int | float | None, hi: int | float | None) -> str | None:
    if lo is not None and v < lo:
        return f"at least {lo}" if hi is None else f"{lo} to {hi}"
    if hi is not None and v > hi:
        return f"at most {hi}" if lo is None else f"{lo} to {hi}"
    return None


def read_int(text: Any, lo: int | None = None, hi: int | None = None, most: int = MAX_DIGITS) -> int:
    """``text`` as a whole number in ``lo``..``hi``: ASCII digits with an optional sign, at most
    ``most`` of them; else :class:`NumberError`."""
    if type(text) is str and 0 < len(text) <= 18 and text.isascii() and text.isdigit():
        v = int(text)  # (the fast path: a plain small count)
    else:
        if type(text) is not str or not _INT.match(text):
            raise NumberError(f"must be a whole number in ASCII digits (got {shown(text)})")
        problem = digits_problem(text, most)
        if problem:
            raise NumberError(problem)
        v = int(text)
    problem = _range_problem(v, lo, hi)
    if problem:
        raise NumberError(f"must be a whole number {problem} (got {_int_shown(v)})")
    return v


def read_float(text: Any, lo: float | None = None, hi: float | None = None, most: int = MAX_DIGITS) -> float:
    """``text`` as a finite number in ``lo``..``hi`` (decimal, an exponent allowed; no
    ``nan``, ``inf``, ``_`` or Unicode digits); else :class:`NumberError`."""
    if type(text) is not str or not _FLOAT.match(text):
        raise NumberError(f"must be a number in ASCII digits (got {shown(text)})")
    problem = digits_problem(text, most)
    if problem:
        raise NumberError(problem)
    return bounded(float(text), lo, hi)


def whole(v: Any, lo: int | None = None, hi: int | None = None) -> int:
    """A value read already (JSON, YAML) as a whole number in ``lo``..``hi``: an int, not a
    bool nor a float; else :class:`NumberError`."""
    if type(v) is not int:
        raise NumberError(f"must be a whole number (got {shown(v)})")
    problem = _range_problem(v, lo, hi)
    if problem:
        raise NumberError(f"must be a whole number {problem} (got {_int_shown(v)})")
    return v


def finite(v: Any) -> bool:
    """Whether ``v`` is a finite number (an int or float, not a bool; an int too large for a
    float is not: math.isfinite raises OverflowError for it)."""
    if type(v) is int:
        return -2 ** 1023 < v < 2 ** 1023
    return type(v) is float and math.isfinite(v)


def bounded(v: Any, lo: float | None = None, hi: float | None = None) -> float:
    """A value read already as a finite number in ``lo``..``hi``, as a float; else
    :class:`NumberError`."""
    if not finite(v):
        raise NumberError(f"must be a finite number (got {shown(v)})")
    problem = _range_problem(v, lo, hi)
    if problem:
        raise NumberError(f"must be a number {problem} (got {shown(v)})")
    return float(v)


def within(v: Any, lo: float, hi: float) -> Any:
    """A value read already (JSON: a record's, a snapshot's) when it is a number (an int or
    a float, not a bool) in ``lo``..``hi``, as it is; else None: taken as absent, never
    carried into arithmetic (NaN compares false, so it is outside every range; an int past
    a float's range is outside any finite ``hi``). One type test and one chained comparison:
    cheap enough for every record of a replay."""
    t = type(v)
    return v if (t is float or t is int) and lo <= v <= hi else None
