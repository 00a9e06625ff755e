"""``requestedStart``: the earliest time a node's pilot jobs may start, as every batch
system here writes it.

A workflow gives it in these forms, whatever the host: an ISO 8601 date or time
(``2030-01-01``, ``2030-01-01T08:00``, ``2030-01-01T08:00+02:00``, ``...Z``), the original
PWE's own form ``yyyy/MM/dd HH:mm:ss`` (``2030/01/01 08:00:00``; also without seconds, or
a date alone), or a delay from when the run is made (``now+90s``, ``now+30min``,
``now+2h``, ``now+1d``). A time that names no zone (the PWE form never does) is read in
the time zone of the machine that reads it (``TZ``, else ``/etc/localtime``): the one
``pwe validate`` runs on, and the engine's, which parses it again for each pilot job.

pwe turns it into an instant, and the job script writes that in the scheduler's own words
(``protocols.base.BEGIN_FORMS``): SLURM's ``--begin=YYYY-MM-DDTHH:MM:SS``, PBS's ``-a
CCYYMMDDhhmm.SS``, LoadLeveler's ``startdate = MM/DD/YYYY HH:MM:SS``. Those forms have no
time zone: they are written in the engine's local time, which is the cluster's when the
engine runs on its login node (the usual case); a workflow that runs from elsewhere gives
an offset and should mind the difference.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

_DELAY = re.compile(r"now\s*\+\s*(\d{1,7})\s*(s|sec|seconds?|m|min|minutes?|h|hours?|d|days?)", re.I)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: The original PWE's form, yyyy/MM/dd HH:mm:ss (seconds, or the whole time, may be left out).
_PWE = re.compile(r"(\d{4})/(\d{2})/(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2}))?)?")

HOW = ("write ISO 8601 (2030-01-01T08:00, with +02:00 or Z for a zone other than this machine's), "
       "yyyy/MM/dd HH:mm:ss (2030/01/01 08:00:00, this machine's zone) or a delay now+N with N in s, min, h "
       "or d (now+2h)")


def parse(text: str, now: datetime | None = None) -> datetime:
    """The instant ``text`` names, as an aware local datetime; ValueError (with what to
    write instead) for anything else. ``now``: when a ``now+`` delay counts from."""
    s = text.strip()
    m = _DELAY.fullmatch(s)
    if m:
        base = now or datetime.now().astimezone()
        return base + timedelta(seconds=int(m.group(1)) * _UNIT[m.group(2)[0].lower()])
    pwe = _PWE.fullmatch(s)
    try:
        if pwe:
            y, mo, d, h, mi, sec = (int(g) if g else 0 for g in pwe.groups())
            when = datetime(y, mo, d, h, mi, sec)
        elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", s):
            when = datetime.combine(date.fromisoformat(s), datetime.min.time())
        else:
            when = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        raise ValueError(f"not a time; {HOW}") from None
    return when.astimezone()  # (a naive time is read in this machine's zone)
