"""The one reader of numbers from outside, for pwe: :mod:`pilot.numbers` (standard library
only, which the pilot shares) re-exported, with the bounds the models give their numbers
(:data:`COUNT_MOST`, :data:`MINUTES_MOST`)."""

from __future__ import annotations

from pilot.numbers import (COUNT_MOST, MAX_DIGITS, MINUTES_MOST, NumberError, bounded, digits_problem,
                           finite, read_float, read_int, shown, whole)

__all__ = ["COUNT_MOST", "MAX_DIGITS", "MINUTES_MOST", "NumberError", "bounded", "digits_problem", "finite",
           "read_float", "read_int", "shown", "whole"]
