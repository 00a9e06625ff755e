"""A process known by its pid AND its start time, never by a pattern over command lines.

A pid is recycled: the process that had it may have ended and another taken the number.
So whatever pwe started or adopted (a pilot, the service's worker and beat, an interactive
pilot on a login node) is recorded with the start time the kernel gives it
(``/proc/PID/stat`` field 22, clock ticks since boot, fixed at fork), and before pwe
signals or trusts that pid it reads the start time again: another value is another
process. A record of an older pwe without a start time is taken by pid alone, as
before (never by matching a command line).

Standard library only (the pilot is staged onto cluster nodes); :mod:`pwe` uses it too.
:func:`parse_stat` reads the same line when it comes from another machine
(``cat /proc/PID/stat`` through a command runner), :data:`STAT_WORDS` is the shell that
prints a process's ``PID.START`` there.
"""

from __future__ import annotations

import os

#: A POSIX shell fragment: with ``$p`` a pid, sets ``$st`` to its start time (empty when
#: there is no such process); the comm field may hold spaces and ')', so everything up to
#: the last ') ' is cut first (field 3 onwards is then plain words: field 22 is the 20th).
STAT_WORDS = 'st=$(cat "/proc/$p/stat" 2>/dev/null) && st=${st##*) } && set -- $st && st=${20}'


def parse_stat(text: str) -> tuple[int, str, int] | None:
    """(pid, state letter, start time) from one ``/proc/PID/stat`` line; None when the
    line is not one."""
    head, paren, rest = text.strip().rpartition(")")
    if not paren:
        return None
    fields = rest.split()
    pid = head.split("(", 1)[0].strip()
    if len(fields) < 20 or not pid.isascii() or not pid.isdigit() or not fields[19].isascii() \
            or not fields[19].isdigit() or len(fields[19]) > 20 or len(pid) > 10:
        return None
    return int(pid), fields[0], int(fields[19])


def stat_of(pid: int) -> tuple[int, str, int] | None:
    """(pid, state, start time) of a process of this machine, None when there is none (or
    no /proc)."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return parse_stat(fh.read(4096).decode("utf-8", "replace"))
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` of this machine (clock ticks since boot), None
    when it does not run (or there is no /proc)."""
    st = stat_of(pid)
    return st[2] if st is not None else None


def is_same(pid: int, started: int | None) -> bool:
    """Whether process ``pid`` of this machine runs (a zombie does not) and is the one
    recorded: its start time is ``started`` (None, a record of an older pwe: the pid
    alone, as before)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    st = stat_of(pid)
    if st is None:
        if os.path.isdir("/proc/self"):
            return False
        try:  # no /proc at all: the pid alone
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if st[1] in ("Z", "X"):
        return False
    return started is None or st[2] == started


def signal_same(pid: int, started: int | None, sig: int, group: bool = False) -> bool:
    """Send ``sig`` to process ``pid`` (its process group with ``group``) only while it is
    the one recorded (:func:`is_same`); whether it was sent."""
    if not is_same(pid, started):
        return False
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def job_word(pid: int, started: int | None) -> str:
    """A process as one word, ``PID.START`` (``PID`` alone without a start time): the
    interactive protocol's job id."""
    return f"{pid}.{started}" if started is not None else str(pid)


def split_word(word: str) -> tuple[int, int | None] | None:
    """(pid, start time or None) of a word :func:`job_word` made; None when it is not one."""
    pid, dot, started = str(word).partition(".")
    if not (pid.isascii() and pid.isdigit() and 0 < len(pid) <= 10):
        return None
    if not dot:
        return int(pid), None
    if not (started.isascii() and started.isdigit() and 0 < len(started) <= 20):
        return None
    return int(pid), int(started)
