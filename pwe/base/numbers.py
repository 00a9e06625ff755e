"""The one reader of numbers from outside, for pwe: :mod:`pilot.numbers` (standard library
only, which the pilot shares) re-exported, with the bounds the models give their numbers
(:data:`COUNT_MOST`, :data:`MINUTES_MOST`) and those of the figures records carry
(:data:`RECORD_RANGES`: times, durations, CPU seconds, peak memory).

A record's figure outside its range (1e308, -1, NaN, infinity) is taken as absent where
records are read (:func:`pwe.runstate.journal.check`, which every reader of the journal goes
through). Inside them a sum over 10^9 members stays far below a float's range, so what
is derived from them is bounded too; a duration shorter than :data:`DIVISOR_LEAST` (the
pilot measures to the millisecond: 1e-300 is no measure) divides nothing.
"""

from __future__ import annotations

from pilot.numbers import (COUNT_MOST, MAX_DIGITS, MINUTES_MOST, NumberError, bounded, digits_problem,
                           finite, read_float, read_int, shown, whole, within)

__all__ = ["COUNT_MOST", "CPU_MOST", "DIVISOR_LEAST", "MAX_DIGITS", "MINUTES_MOST", "RECORD_RANGES", "RSS_MOST",
           "SECONDS_MOST", "TIME_MOST", "NumberError", "bounded", "digits_problem", "finite", "read_float",
           "read_int", "shown", "whole", "within"]

#: A time a record carries (``t``, epoch seconds): 0 to 10^10 (the year 2286).
TIME_MOST = 1e10
#: A duration (``dt``, seconds): 0 to 10^8 (three years; the longest walltime a workflow may
#: ask, MINUTES_MOST, is 6 x 10^7 s).
SECONDS_MOST = 1e8
#: CPU seconds of one attempt (``cpu``, user+sys of its tree): 0 to 10^12 (10^4 cores busy
#: for SECONDS_MOST).
CPU_MOST = 1e12
#: Peak resident memory of one attempt (``rss``, KB): 0 to 10^13 (10 PB).
RSS_MOST = 1e13
#: Each figure of a record and its range (inclusive): outside it, taken as absent.
RECORD_RANGES = {"t": (0, TIME_MOST), "dt": (0, SECONDS_MOST), "cpu": (0, CPU_MOST), "rss": (0, RSS_MOST)}
#: The least duration (seconds) a figure is divided by: below it, no rate is derived.
DIVISOR_LEAST = 1e-3
