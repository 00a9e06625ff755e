"""Cron schedules of triggers: which slots are due, in UTC, from an expression in a time zone.

croniter parses and steps the expression (five fields, or six with seconds last, as
croniter reads them); this module only maps its wall-clock slots to instants and decides
what fires. Everything kept is UTC (epoch seconds); the zone matters only here.

Daylight-saving changes follow Vixie cron (its ``cron.c``, "time has moved"):

- a **fixed-time** job (minute and hour fields both fixed, e.g. ``30 2 * * *``) whose slot
  falls in a skipped hour fires right after the change (at the transition instant); in a
  repeated hour it fires once, on the first pass;
- a **wildcard** job (minute or hour field starting with ``*``: ``*/15 * * * *``,
  ``0 * * * *``) runs by the new wall clock: no slot in a skipped hour, and a repeated
  hour's slots fire on both passes (they are real, distinct instants: an hourly job still
  runs every hour).

Missed slots (the service was down) follow an explicit catch-up flag, as Airflow's: one
evaluation fires **at most one run**: the latest slot that is on time, else, when slots
were missed and ``catchup`` is set, the latest missed slot, once; never a burst of every
missed slot. A slot is on time while ``now - slot`` is within :func:`grace` of it.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from ..base.errors import InputError, did_you_mean

UTC = _dt.timezone.utc
#: The most a slot may be late and still count as on time (a minute; less for schedules
#: faster than that: see grace()).
GRACE_MAX = 60.0
GRACE_MIN = 5.0
#: How far to look past a DST change on either side (no zone shifts by more than this).
_MARGIN = _dt.timedelta(hours=3)


def check_expression(expr: str) -> str:
    """The expression, checked by croniter; :class:`InputError` (one line) when bad."""
    from croniter import croniter

    text = " ".join(str(expr).split())
    fields = text.split(" ")
    shown = _shown(expr)
    if len(text) > 200 or len(fields) not in (5, 6) or not croniter.is_valid(text):
        raise InputError(f"--cron {shown}: not a cron expression (five fields: minute hour day month weekday, "
                         "or six with seconds last, e.g. '*/5 * * * *' or '* * * * * */10')")
    if _never(text):
        raise InputError(f"--cron {shown}: never fires (no such day: e.g. 30 February); give a schedule that does")
    return text


def _shown(value: object) -> str:
    """A value as a message shows it: quoted, escapes visible (no control character reaches
    the terminal), cut at 80 characters."""
    text = str(value)
    return repr(text if len(text) <= 80 else text[:80] + "...")


def _never(expr: str) -> bool:
    """Whether a valid expression never fires (croniter gives up: its search for the next
    date is bounded), so that no trigger waits for ever and no listing fails on it."""
    from croniter import CroniterBadDateError, croniter

    try:
        croniter(expr, _dt.datetime(2000, 1, 1)).get_next(_dt.datetime)
    except (CroniterBadDateError, ValueError, OverflowError):
        return True
    return False


def check_zone(name: str) -> ZoneInfo:
    """The time zone named (IANA, e.g. Europe/Paris); :class:`InputError` when unknown."""
    try:
        if not name or name.startswith(("/", ".")) or ".." in name:
            raise ValueError
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InputError(f"--tz {_shown(name)}: unknown time zone{did_you_mean(name[:80], available_timezones())}; "
                         "give an IANA name such as UTC, Europe/Paris or America/New_York") from None


def is_wildcard(expr: str) -> bool:
    """Vixie cron's wildcard job: its minute or hour field (or seconds, the sixth) starts with ``*``."""
    fields = expr.split()
    return fields[0].startswith("*") or fields[1].startswith("*") or (len(fields) == 6 and fields[5].startswith("*"))


def _utc(t: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(t, UTC)


def _instants(naive: _dt.datetime, zone: ZoneInfo, wildcard: bool) -> list[float]:
    """The instants (epoch seconds) at which a wall-clock slot fires (Vixie rules above)."""
    first = naive.replace(tzinfo=zone, fold=0)
    second = naive.replace(tzinfo=zone, fold=1)
    t0, t1 = first.timestamp(), second.timestamp()
    if t0 == t1:
        return [t0]  # an ordinary time
    if t0 < t1:  # a repeated hour (fall back): the first pass, or both for a wildcard job
        return [t0, t1] if wildcard else [t0]
    # a skipped hour (spring forward): the wall time never shows. t1 < transition <= t0.
    if wildcard:
        return []
    lo, hi = t1, t0  # the transition: the first instant whose offset is the new one
    off_new = second.utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _utc(mid).astimezone(zone).utcoffset() == off_new:
            hi = mid
        else:
            lo = mid
    return [float(hi)]


def slots(expr: str, zone: ZoneInfo, after: float, upto: float, limit: int = 10_000) -> list[float]:
    """The firing instants in ``(after, upto]`` (epoch seconds), oldest first, at most the
    ``limit`` newest of them (a long outage with a per-second schedule is not walked whole)."""
    from croniter import croniter

    wildcard = is_wildcard(expr)
    start = _utc(upto).astimezone(zone).replace(tzinfo=None) + _MARGIN
    stop = _utc(after).astimezone(zone).replace(tzinfo=None) - _MARGIN
    it = croniter(expr, start)
    out: list[float] = []
    from croniter import CroniterBadDateError

    while len(out) < limit:
        try:
            naive = it.get_prev(_dt.datetime)
        except CroniterBadDateError:  # (never fires)
            break
        if naive < stop:
            break
        out.extend(t for t in _instants(naive, zone, wildcard) if after < t <= upto)
    return sorted(set(out))[-limit:]


def grace(expr: str, zone: ZoneInfo, slot: float) -> float:
    """How late a slot may be and still be on time: its schedule's period (the gap to the
    slot before it), at least GRACE_MIN and at most GRACE_MAX seconds."""
    before = slots(expr, zone, slot - GRACE_MAX - 1, slot - 0.5, limit=1)
    period = slot - before[-1] if before else GRACE_MAX
    return max(GRACE_MIN, min(GRACE_MAX, period))


@dataclass
class Decision:
    """What one evaluation of a cron trigger does: ``fire`` (a slot, epoch seconds, or
    None), whether it is a catch-up, and the slots passed over (``missed``: late and not
    caught up, or caught up by the one run; ``coalesced``: on time but not the latest)."""

    fire: float | None = None
    catchup: bool = False
    missed: list[float] = field(default_factory=list)
    coalesced: list[float] = field(default_factory=list)


def decide(expr: str, zone: ZoneInfo, last: float, now: float, catchup: bool) -> Decision:
    """The decision for slots in ``(last, now]`` (see the module's rules)."""
    due = slots(expr, zone, last, now)
    d = Decision()
    if not due:
        return d
    late_after = grace(expr, zone, due[-1])  # (a schedule's period is one for all its slots)
    late = [t for t in due if now - t > late_after]
    on_time = [t for t in due if t not in late]
    if on_time:
        d.fire, d.coalesced = on_time[-1], on_time[:-1]
        d.missed = late
    elif catchup:
        d.fire, d.catchup, d.missed = late[-1], True, late[:-1]
    else:
        d.missed = late
    return d


def next_slot(expr: str, zone: ZoneInfo, now: float) -> float | None:
    """The next firing instant after ``now`` (for listings), None when none within a year."""
    from croniter import croniter

    from croniter import CroniterBadDateError

    wildcard = is_wildcard(expr)
    it = croniter(expr, _utc(now).astimezone(zone).replace(tzinfo=None) - _MARGIN)
    for _ in range(10_000):
        try:
            naive = it.get_next(_dt.datetime)
        except CroniterBadDateError:  # (a schedule stored before never-firing ones were refused)
            return None
        later = [t for t in _instants(naive, zone, wildcard) if t > now]
        if later:
            return min(later)
        if naive.timestamp() - now > 400 * 86400 + 86400:
            break
    return None


def iso(t: float | None) -> str | None:
    """An instant as ISO-8601 UTC text (``2026-11-23T01:00:00Z``), what workflows are given."""
    if t is None:
        return None
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%S") + (f".{int(round(t % 1 * 1000)):03d}Z" if t % 1 else "Z")
