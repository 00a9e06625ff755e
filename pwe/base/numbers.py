"""The one reader of numbers from outside, for pwe (:mod:`pilot.numbers`, which the pilot
shares: standard library only), and the bounds the models give their numbers.

:func:`option` reads a command line option's or a variable's text and raises
:class:`~pwe.base.errors.InputError` naming it; :func:`clamp` keeps a derived figure (a
rate, an ETA, a back-off, a share) finite and inside its range whatever it was computed from.
"""

from __future__ import annotations

import math

from pilot.numbers import (COUNT_MOST, MAX_DIGITS, MINUTES_MOST, NumberError, bounded, digits_problem,
                           finite, read_float, read_int, shown, whole)

from .errors import InputError

__all__ = ["COUNT_MOST", "MAX_DIGITS", "MINUTES_MOST", "NumberError", "bounded", "digits_problem", "finite",
           "read_float", "read_int", "shown", "whole", "option", "clamp", "ratio"]


def option(text: str, name: str, lo: int | None = None, hi: int | None = None) -> int:
    """An option's (or a variable's, a member spec's) whole number, or one line naming ``name``."""
    try:
        return read_int(text, lo, hi)
    except NumberError as exc:
        raise InputError(f"{name}: {exc}") from None


def clamp(v: float, lo: float, hi: float) -> float:
    """``v`` inside ``lo``..``hi``; NaN is ``lo`` (a figure computed from nothing)."""
    if v != v:
        return lo
    return lo if v < lo else hi if v > hi else v


def ratio(a: float, b: float, most: float = 1e15) -> float:
    """``a / b`` kept finite and at most ``most`` in size (0 for 0/0 or a non-finite input):
    a rate of 1e-300 or a figure of 1e308 never overflows what is derived from it."""
    try:
        v = a / b
    except (ZeroDivisionError, OverflowError):
        return 0.0 if a == 0 or b != b else math.copysign(most, a) * (1 if b >= 0 else -1)
    if v != v:
        return 0.0
    return max(-most, min(most, v))
