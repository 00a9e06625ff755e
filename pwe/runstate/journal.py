"""The journal: an append-only JSON-lines file, the run's one state store.

Exactly one process (the engine holding the run's lock) appends. Records are written in
batches with one ``write`` call; a crash can leave at most a torn last line, which
:func:`replay` drops (and :class:`Journal` truncates before appending again).

Each record carries its own checksum, so that damage anywhere (a bad block, a stray
write, a line of garbage) is found: a line stays one JSON object, with a last field
``"c"``, the CRC-32 (8 hex digits) of the line as it would be without that field:
``{"e":"end",...,"c":"1a2b3c4d"}``. :func:`replay` skips a damaged record with a warning
and goes on after it; what such a record said, the pilots' own files still say (the
engine reads them again: :func:`pwe.engine.recovery.recover`). Lines without a
checksum (a journal written by an earlier version of pwe) replay as they are.

Three forms are written compacted, since assigns, starts and ends are most of a big run's
journal (a million members made 310 bytes each of them):

- consecutive members handed to the same pilot in one pass are one ``assign`` with
  ``"len"`` (members ``m`` .. ``m+len-1``);
- a member whose start and end the engine takes in together has one ``end`` that carries
  its start (``"ran": 1``: it started at ``t - dt``, the pilot's own measure, and on
  ``"nodes"`` when they are not its pilot's host);
- ends written one after another, of the same node, attempt and pilot, each exit status 0
  with nothing but its times and usage (no outputs, no reason, no verdict), are one
  ``ends`` record of columns: ``{"e":"ends","n":..,"a":..,"p":..,"d":1,"m":[..],"t":[..],
  "dt":[..],"cpu":[..],"rss":[..],"ran":1}``. With ``"d":1`` (how pwe writes them) every
  column is whole numbers: ``t``, ``dt`` and ``cpu`` in milliseconds (the pilot measures
  them to the millisecond), and ``m``, ``t`` and ``rss`` each as its first value and then
  the difference from the row before; ``ran`` is 1 when every row carries its start. At a
  few dozen ends a round that is about a tenth of a byte a member for the record, and
  10 to 12 bytes a row (at 10^5 members the journal went from 90 to 24 bytes a member).
  Without ``d`` (earlier versions, or a row whose numbers are not all there) the columns
  are the values themselves and ``ran`` a list of 0 and 1.

:func:`unpack` gives a record back as the records it stands for; every reader of records
goes through it.

**The header.** The first line of a journal says its version (:data:`VERSION`, raised as
:data:`pilot.wire.VERSION` is, whenever a kind or a field changes meaning, is added or is
taken away; the changelog is beside it): ``{"e":"journal","v":2,"pwe":"0.1.0","c":..}``,
``pwe`` the version of the pwe that began it. It is no record of the run: :func:`replay`
reads it and applies nothing, :func:`unpack` gives it as no record. A journal without one
is of version 1 (begun by a pwe before the header) and is read as it is; a resumed run
keeps its journal's first line, so such a journal stays without one. A journal of a version
newer than this pwe's is refused in one line (:class:`pwe.base.errors.JournalTooNew`, exit
status 2) that names the pwe that began it: nothing of it is read, nothing appended.

Every record kind and the fields it may carry, besides ``e`` (its kind) and ``c`` (its
checksum); :data:`FIELDS` says the same to code. ``t`` is the time it was written (epoch
s) where there; ``n`` a node, ``m`` a member's index, ``a`` its attempt, ``p`` a pilot.

the journal, the run, its members, its pilots:

===============  =========================================================================
kind             fields
===============  =========================================================================
``journal``      ``v`` (its version), ``pwe`` (the version of the pwe that began it): the
                 header, the first line only (none in a journal of version 1); no record
                 of the run: applying it changes nothing
``run``          ``t``, ``pid`` (the engine's), ``checks`` [nodes checked by a Python
                 callable], ``by`` (who asked): an engine began the run
``resume``       as ``run``: an engine took the run up again (pwe resume, pwe retry)
``finish``       ``ok`` (every member done), ``t``: the run ended
``halt``         ``why`` (one line for pwe status), ``when`` (soon: members running
                 finish; now: they are stopped), ``node`` (the node whose budget it was,
                 absent: the run's), ``failed``, ``of``, ``budget``, ``t``: no new member
                 starts (the failure budget, or the core-hour budget: ``coreHours``)
``hold``         ``n``, ``param``, ``value`` (its text), ``failed``, ``t``: that value's
                 members of node ``n`` not yet started are held (``hold:``; the value had
                 ``failed`` members failed, none done); a ``retry`` lets them go
``set``          ``only`` {node: [[first, end], ...]} or null (every member), ``values``
                 {memoryPerMember, maxWallTimePerMember, threads, gpus, retries, env.NAME},
                 ``id`` (the request's), ``by``, ``t``: pwe set; every attempt built after it
                 asks for these (one running then keeps what it asked)
``stopped``      ``why``, ``t``: the engine stopped before the end (pwe resume goes on)
``cancel``       ``t``, ``by``: every member not ended is cancelled
``retry``        ``t``, ``by``, ``only`` {node: [[first, end], ...]} (pwe retry -q): failed
                 and skipped members wait again
``note``         ``what`` (one line for pwe events), ``t``; where it says so: ``p``,
                 ``node``, ``text``; of a host that refused a pilot job: ``lane``,
                 ``refused`` (how many in a row), ``retry_at``; of an edge event refused:
                 ``file``, ``pilot``, ``replay_of``, ``replays``
``edge``         ``id``, ``file`` (of edges/), ``pilot``, ``event``, ``job``, ``status``,
                 ``t``: a signed edge event of a batch job (:mod:`pwe.runstate.notify`)
``assign``       ``n``, ``m``, ``a``, ``p``, ``t``; ``len``: members ``m`` .. ``m+len-1``;
                 ``mem`` MB, ``wall`` min: what a retry asks for more of (retry.grow)
``start``        ``n``, ``m``, ``a``, ``p``, ``t``, ``pid``, ``nodes`` [names] (when not
                 its pilot's host)
``end``          ``n``, ``m``, ``a``, ``p``, ``t``, ``rc``, ``dt`` s, ``out`` {outputs},
                 ``why``, ``reason`` (pilot/wire.py REASONS: oom, walltime, straggler,
                 invalid...; absent: exit), ``cpu`` s, ``rss`` KB; ``ran`` 1 (it carries
                 its start) and ``nodes``; a check's verdict
                 (pwe/planning/trees.py): ``grow`` [children], ``conv`` 1, ``limit`` 1,
                 ``bad`` 1 (done, yet failed)
``ends``         ``n``, ``a``, ``p``, ``d``, and columns ``m``, ``t``, ``dt``, ``cpu``,
                 ``rss``, ``ran``: plain ends (see above)
``unassign``     ``n``, ``m``, ``a`` (absent in records of earlier versions), ``p``,
                 ``why``, ``t``; ``lost`` 1 (it was running when its pilot or node was
                 lost: counted against maxLosses), ``halted`` 1 (stopped by a halt):
                 a member queued or running is ready again (or quarantined)
``complete``     ``n``, ``r`` [[lo, hi], ...]: members found complete by their products
``reused``       ``n``, ``from`` (a run id), ``r`` [[lo, hi, from_lo], ...], ``out`` {member:
                 {outputs}}: members ``lo`` .. ``hi-1`` reused, done without running, from
                 members ``from_lo`` .. of run ``from`` (pwe.runstate.reusable), with their outputs
``pilot``        ``p``, ``host``, ``lane``, ``slots``, ``t``; ``pid`` and ``started`` (a
                 process and its start time, pilot/identity.py; none in older runs) or
                 ``job``, ``batch`` and ``wall`` (a batch job; its walltime, minutes:
                 the core-hour budget's commitment); pwe pilot add's ``added``,
                 ``serves``, ``lane_def``: a pilot started or submitted
``pilot_drain``  ``p``, ``req``, ``t``: pwe pilot drain asked it to leave
``node_lost``    ``p``, ``node``, ``why``, ``t``: a node of its allocation died
``pilot_gone``   ``p``, ``why``, ``t``: the pilot is gone
``offset``       ``p``, ``off`` (its transport's cursor), ``q`` (the last sequence number
                 applied), ``qs`` {transport: last seen} (absent: ``{"spool": q}``, a
                 pilot that only ever spoke through its spool)
``reject``       ``p``, ``why`` (forged, replayed, malformed, resent), ``k``, ``q``,
                 ``detail``, ``text``, ``t``: a pilot message refused, never applied
===============  =========================================================================

The figures records carry (``t``; an attempt's ``dt``, ``cpu``, ``rss``; a pilot's ``slots``,
``wall``) are read within :data:`pwe.base.numbers.RECORD_RANGES` (and the models' bounds) by
:func:`check`, which every reader goes through: a figure outside (1e308, -1, NaN, infinity:
Python's json reads and writes the last two, read here as no value) is taken as absent.

Every writer makes its records with :mod:`pwe.runstate.records` (a constructor per kind).

Why one module over 450 lines: half of it is this description of the format, which every
reader and writer needs in one place; the rest is that format's one reader and one
writer (the line with its checksum, the compacted forms made and unpacked, every record's
numbers checked, the header, replay, the :class:`Journal` with its batches held), which
share the forms' private helpers. The records themselves are made in
:mod:`pwe.runstate.records`; the state they make, in :mod:`pwe.runstate.state`.

A record of a kind not listed here is damaged: ``apply`` refuses it (``ValueError``:
:meth:`pwe.runstate.state.RunState.apply`), and :func:`replay` skips it as it skips one whose
checksum does not match.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from pilot import transport

from ..base.errors import JournalError, JournalTooNew, RunDamaged  # (JournalError: the run stops cleanly)
from ..base.numbers import COUNT_MOST, MINUTES_MOST, RECORD_RANGES, TIME_MOST, within
from ..base.regular import MAX_LINE, open_append, open_regular, take_line

#: The journal's version, in its header (its first line). Raised whenever a record kind or
#: a field changes meaning, is added or is taken away (as pilot/wire.py's VERSION), so that a
#: pwe never reads a journal it would misread.
#: 1: every journal without a header: what pwe wrote before it had one (records with or
#: without their checksum ``c``, ``ends`` with or without ``d``, ``unassign`` with or
#: without ``a``: all read as they are).
#: 2: the header, ``{"e":"journal","v":2,"pwe":..}``, the first line of a journal begun by
#: this pwe; a ``note`` of a refusing host may carry ``lane``, ``refused``, ``retry_at``
#: (written before as well, unlisted).
#: 3: the ``hold`` record (``n``, ``param``, ``value``, ``failed``, ``t``): a parameter value
#: whose members failed, none done, holds its members not yet started (state ``held``); the
#: ``set`` record (``only``, ``values``, ``id``, ``by``, ``t``): pwe set's changes to the
#: attempts not yet started.
VERSION = 3
#: the header's kind (its first line only; no record of the run)
HEADER = "journal"
#: what the header's line begins with (looked for before it is decoded)
_HEAD = b'{"e":"journal",'

# the run
RUN, RESUME, FINISH, STOPPED, CANCEL, RETRY, NOTE, EDGE, HALT = "run", "resume", "finish", "stopped", "cancel", \
    "retry", "note", "edge", "halt"
HOLD, SET = "hold", "set"
# members
ASSIGN, START, END, ENDS, UNASSIGN, COMPLETE, REUSED = "assign", "start", "end", "ends", "unassign", "complete", \
    "reused"
# pilots
PILOT, PILOT_DRAIN, NODE_LOST, PILOT_GONE, OFFSET, REJECT = "pilot", "pilot_drain", "node_lost", "pilot_gone", \
    "offset", "reject"

_BY_ENGINE = frozenset(("t", "pid", "checks", "by"))
_MEMBER = frozenset(("n", "m", "a", "p", "t"))
#: Every kind and the fields it may carry (besides ``e`` and ``c``), as the tables above say.
FIELDS: dict[str, frozenset[str]] = {
    HEADER: frozenset(("v", "pwe")),
    RUN: _BY_ENGINE,
    RESUME: _BY_ENGINE,
    FINISH: frozenset(("ok", "t")),
    HALT: frozenset(("why", "when", "node", "failed", "of", "budget", "coreHours", "t")),
    HOLD: frozenset(("n", "param", "value", "failed", "t")),
    SET: frozenset(("only", "values", "id", "by", "t")),
    STOPPED: frozenset(("why", "t")),
    CANCEL: frozenset(("t", "by")),
    RETRY: frozenset(("t", "by", "only")),
    NOTE: frozenset(("what", "t", "p", "node", "text", "lane", "refused", "retry_at", "file", "pilot", "replay_of",
                     "replays")),
    EDGE: frozenset(("id", "file", "pilot", "event", "job", "status", "t")),
    ASSIGN: _MEMBER | {"len", "mem", "wall"},
    START: _MEMBER | {"pid", "nodes"},
    END: _MEMBER | {"rc", "dt", "out", "why", "reason", "cpu", "rss", "ran", "nodes", "grow", "conv", "limit", "bad"},
    ENDS: frozenset(("n", "a", "p", "d", "m", "t", "dt", "cpu", "rss", "ran")),
    UNASSIGN: _MEMBER | {"why", "lost", "halted"},
    COMPLETE: frozenset(("n", "r")),
    REUSED: frozenset(("n", "r", "from", "out")),
    PILOT: frozenset(("p", "host", "lane", "slots", "t", "pid", "started", "job", "batch", "wall", "added",
                      "serves", "lane_def")),
    PILOT_DRAIN: frozenset(("p", "req", "t")),
    NODE_LOST: frozenset(("p", "node", "why", "t")),
    PILOT_GONE: frozenset(("p", "why", "t")),
    OFFSET: frozenset(("p", "off", "q", "qs")),
    REJECT: frozenset(("p", "why", "k", "q", "detail", "text", "t")),
}
_dumps = json.JSONEncoder(separators=(",", ":")).encode
#: NaN and infinity (JSON has neither; Python's json writes and reads them) are read as no
#: value: a figure of a damaged pilot message, never a number that poisons a sum or a rate
#: (the one reader of numbers: finite only). Called only for those words: no cost per record.
_loads = json.JSONDecoder(parse_constant=lambda word: None).decode
_CRC = b',"c":"'
_TAIL = len(b',"c":"00000000"}\n')
#: What apply() raises for a record it cannot understand: that record is damaged too.
_NOT_UNDERSTOOD = (KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError)


def header() -> dict[str, Any]:
    """The header of a journal this pwe begins: its version and the pwe's own."""
    # (pwe/__init__.py's __version__, read through sys.modules: the package is loaded before
    # any module of it, and importing it here would make a ring of imports through the engine)
    return {"e": HEADER, "v": VERSION, "pwe": str(getattr(sys.modules.get("pwe"), "__version__", "?"))}


def check_header(rec: dict[str, Any], path: Any) -> None:
    """A journal's header read: :class:`JournalTooNew` when it is of a version this pwe does
    not know (a newer pwe's: which one began it, said in one line)."""
    v = rec.get("v")
    if type(v) is int and 1 <= v <= VERSION:
        return
    mine = header()["pwe"]
    by = str(rec.get("pwe"))[:40]
    raise JournalTooNew(f"{path} is a journal of version {str(v)[:20]}, begun by pwe {by}; this pwe ({mine}) reads "
                        f"journals up to version {VERSION}: use pwe {by} or later for this run")


def past_header(head: bytes) -> bytes:
    """The bytes of a journal's beginning after its header line, if it begins with one."""
    return head[head.find(b"\n") + 1:] if head.startswith(_HEAD) and b"\n" in head else head


def version_of(fh: Any, path: Any) -> int:
    """The version of the journal open in ``fh`` (at its start; left after its header, if
    any): 1 without a header. :class:`JournalTooNew` for a version newer than this pwe's."""
    first = fh.readline(4096)
    if first.startswith(_HEAD) and first.endswith(b"\n"):
        rec = decode(first)
        if rec is not None:
            check_header(rec, path)
            return rec["v"]
    fh.seek(0)
    return 1


def encode(record: dict[str, Any]) -> bytes:
    """One record as its journal line: compact JSON with its checksum as the last field."""
    body = _dumps(record).encode()
    return b"%s,\"c\":\"%08x\"}\n" % (body[:-1], zlib.crc32(body))


def decode(line: bytes) -> dict[str, Any] | None:
    """The record of one whole journal line; None when it is damaged."""
    if line[-_TAIL:-_TAIL + 6] == _CRC:
        body = line[:-_TAIL] + b"}"
        try:
            if int(line[-_TAIL + 6:-3], 16) != zlib.crc32(body):
                return None
            rec = _loads(body.decode())
        except ValueError:
            return None
    else:  # written before records had checksums
        try:
            rec = _loads(line.decode())
        except ValueError:
            return None
    return rec if isinstance(rec, dict) and "e" in rec else None


#: the keys of an end that an ``ends`` record holds (``ran`` besides, when there)
_PLAIN_END = frozenset(("e", "n", "m", "a", "p", "t", "rc", "dt", "cpu", "rss"))
_PLAIN_END_RAN = _PLAIN_END | {"ran"}
_COLUMNS = ("m", "t", "dt", "cpu", "rss")


def _deltas(values: list[int]) -> list[int]:
    """The first value, then each one's difference from the one before."""
    return [values[0]] + [b - a for a, b in zip(values, values[1:])] if values else []


def _sums(deltas: list[int]) -> list[int]:
    """The values :func:`_deltas` was given back (ValueError when they are not whole numbers)."""
    out, at = [], 0
    for d in deltas:
        if type(d) is not int:
            raise ValueError(f"ends column value {d!r}")
        at += d
        out.append(at)
    return out


def _ms(values: list[Any]) -> list[int] | None:
    """Seconds (times, durations) as whole milliseconds; None when one is not a finite number
    (a damaged pilot message's, journaled as it came: the columns then stay values)."""
    if not all(type(v) is float or type(v) is int for v in values):
        return None
    try:
        return [round(v * 1000) for v in values]
    except (ValueError, OverflowError):
        return None


def _ends_line(run: dict[str, Any]) -> dict[str, Any]:
    """An ``ends`` record as it is written: its columns as whole numbers (``"d":1``, see the
    module's docstring) when every value is a number, else as they are."""
    t, dt, cpu, rss = _ms(run["t"]), _ms(run["dt"]), _ms(run["cpu"]), run["rss"]
    if t is None or dt is None or cpu is None or not all(type(v) is int for v in rss):
        return run
    ran = run["ran"]
    return {"e": ENDS, "n": run["n"], "a": run["a"], "p": run["p"], "d": 1, "m": _deltas(run["m"]), "t": _deltas(t),
            "dt": dt, "cpu": cpu, "rss": _deltas(rss), "ran": 1 if all(ran) else ran}


def _ends_columns(r: dict[str, Any]) -> list[list[Any]]:
    """The columns m, t, dt, cpu, rss, ran of an ``ends`` record, as values (either form)."""
    if r.get("d") != 1:
        return [r[k] for k in _COLUMNS] + [r["ran"]]
    m = _sums(r["m"])
    ran = [1] * len(m) if r["ran"] == 1 else r["ran"]
    if type(r["dt"]) is not list or type(r["cpu"]) is not list:
        raise ValueError("ends columns that are not lists")
    for col in (r["dt"], r["cpu"]):
        if not all(type(v) is int for v in col):
            raise ValueError("ends column values that are not whole milliseconds")
    return [m, [v / 1000 for v in _sums(r["t"])], [v / 1000 for v in r["dt"]], [v / 1000 for v in r["cpu"]],
            _sums(r["rss"]), ran]


def _packs(record: dict[str, Any]) -> bool:
    """Whether an end goes into an ``ends`` record (see the module's docstring)."""
    return record["rc"] == 0 and (record.keys() == _PLAIN_END or record.keys() == _PLAIN_END_RAN)


def packed(r: dict[str, Any]) -> bool:
    """Whether a record is one of the compacted forms (:func:`unpack` gives more than it)."""
    e = r["e"]
    return e == ENDS or e == ASSIGN and "len" in r or e == END and "ran" in r


#: the most attempts a member may have (its counter is 4 bytes: pwe/runstate/state.py)
MAX_ATTEMPT = (1 << 31) - 1
#: the records that name one member (``n``, ``m``; ``a``, its attempt, where there)
_OF_MEMBER = frozenset((ASSIGN, START, END, UNASSIGN, ENDS))
#: the fields of those records that are numbers when there (times, usage), with their ranges
#: (pwe.base.numbers.RECORD_RANGES: outside them, taken as absent)
_NUMBERS = tuple((k, *RECORD_RANGES[k]) for k in ("t", "dt", "cpu", "rss"))
#: a pilot record's figures the core-hour budget multiplies (slots, walltime minutes), their ranges
_PILOT_NUMBERS = (("slots", 0, COUNT_MOST), ("wall", 0, MINUTES_MOST))


def _index(value: Any, count: int | None, what: str) -> int:
    if type(value) is not int or value < 0 or count is not None and value >= count:
        raise ValueError(f"{what} {value!r} is not a member of the node ({count} members)")
    return value


def check(r: dict[str, Any], size: Callable[[str], int] | None) -> None:
    """Whether the numbers a record carries are what the plan allows, before anything is
    sized or indexed by them: ``size(node)``, the members the node has now (KeyError for
    a node the run does not have). Member indices in range, attempts whole numbers of at
    most :data:`MAX_ATTEMPT`, an assign's ``len`` within the node, the runs of a
    ``complete`` and a ``retry``'s ``only`` within their nodes. Else :class:`ValueError`:
    a damaged record. ``size`` None (a test's or a benchmark's own journal): types and
    signs only. The figures (a record's ``t``; a member's ``dt``, ``cpu``, ``rss``; a pilot's
    ``slots``, ``wall``) outside their ranges (:data:`pwe.base.numbers.RECORD_RANGES`) are
    set to None in ``r``: taken as absent by every reader, never carried into arithmetic."""
    e = r["e"]
    if e in _OF_MEMBER:
        _check_member(r, e, size)
        return
    if e == REUSED:
        _check_reused(r, None if size is None else size(r["n"]))
    elif e == COMPLETE or (e == RETRY or e == SET) and r.get("only") is not None:
        spans = [(r["n"], r["r"])] if e == COMPLETE else list(r["only"].items())
        for n, runs in spans:
            count = None if size is None else size(n)
            for lo, hi in runs:
                _index(lo, count, "member")
                if type(hi) is not int or hi < lo or count is not None and hi > count:
                    raise ValueError(f"members {lo!r}..{hi!r}")
    elif e == PILOT:
        _figures(r, _PILOT_NUMBERS)
    elif e == HOLD:
        _check_hold(r, size)
    if within(r.get("t"), 0, TIME_MOST) is None and r.get("t") is not None:
        r["t"] = None  # (a time outside RECORD_RANGES: none, as in a member's record)


def _check_member(r: dict[str, Any], e: str, size: Callable[[str], int] | None) -> None:
    """A member's record: its node, index, attempt and figures (see :func:`check`)."""
    n = r["n"]
    if type(n) is not str:
        raise ValueError(f"node {n!r}")
    count = None if size is None else size(n)
    if e != ENDS:
        _index(r["m"], count, "member")
        if "len" in r:
            _index(r["len"] - 1 if type(r["len"]) is int and r["len"] > 0 else -1,
                   None if count is None else count - r["m"], "len")
    if "a" in r or e != UNASSIGN:
        _index(r["a"], MAX_ATTEMPT + 1, "attempt")
    if e != ENDS:
        _figures(r, _NUMBERS)
        if e == END and type(r["rc"]) is not int:
            raise ValueError(f"exit status {r['rc']!r}")


def _check_hold(r: dict[str, Any], size: Callable[[str], int] | None) -> None:
    """A ``hold`` names a node the run has (KeyError), a parameter and a value as text."""
    if size is not None:
        size(r["n"])
    if type(r["param"]) is not str or type(r["value"]) is not str or type(r["failed"]) is not int:
        raise ValueError(f"hold of {r.get('param')!r}={r.get('value')!r}")


def _figures(r: dict[str, Any], ranges: tuple[tuple[str, float, float], ...]) -> None:
    """A record's figures read through the one reader of numbers (pilot.numbers.within), each
    in its range or taken as absent (None): 1e308, -1, NaN, infinity are never carried into
    a sum or a rate. A figure that is not a number at all (text, a list): ValueError, the
    record is damaged."""
    for k, lo, hi in ranges:
        v = r.get(k)
        if v is None:
            continue
        t = type(v)
        if (t is float or t is int) and lo <= v <= hi:  # (within's test, inline: every record of a replay)
            continue
        if t is not int and t is not float:
            raise ValueError(f"{k} {v!r} is not a number")
        r[k] = within(v, lo, hi)  # (None)


def _check_reused(r: dict[str, Any], count: int | None) -> None:
    """A ``reused`` record's runs within its node, its run id a string, its outputs mappings."""
    if type(r["from"]) is not str or not isinstance(r.get("out", {}), dict):
        raise ValueError(f"reused from {r['from']!r}")
    for lo, hi, src in r["r"]:
        _index(lo, count, "member")
        _index(src, None, "member")
        if type(hi) is not int or hi <= lo or count is not None and hi > count:
            raise ValueError(f"members {lo!r}..{hi!r}")
    for i, out in r.get("out", {}).items():
        if not (i.isascii() and i.isdigit() and len(i) <= 18) or count is not None and int(i) >= count \
                or not isinstance(out, dict):
            raise ValueError(f"outputs of member {i!r}")


def each(r: dict[str, Any], size: Callable[[str], int] | None = None) -> list[dict[str, Any]] | tuple[dict[str, Any]]:
    """The records one journal record stands for, each checked (:func:`check`): a compacted
    one unpacked, any other as it is. What a reader that takes records one by one calls
    (the trace, pwe failures' pass by host); ValueError or KeyError: damaged."""
    if packed(r):
        return unpack(r, size)
    check(r, size)
    return (r,)


def unpack(r: dict[str, Any], size: Callable[[str], int] | None = None) -> list[dict[str, Any]]:
    """The records one journal record stands for (see the module's docstring): an assign
    with ``len`` as one assign per member, an ``ends`` as its ends, an end carrying its
    start as that start and the end; any other record as itself; each checked against
    the plan first (:func:`check`, with ``size``). A ``len`` that is not a count of at
    least one within the node, columns of other lengths, a member index out of range:
    :class:`ValueError` (a damaged record)."""
    check(r, size)
    if r["e"] == ENDS:
        if type(r["m"]) is not list:
            raise ValueError("ends columns that are not lists")
        cols = _ends_columns(r)
        if not all(type(c) is list and len(c) == len(cols[0]) for c in cols):
            raise ValueError("ends columns of different lengths")
        out = []
        for m, t, dt, cpu, rss, ran in zip(*cols):
            end = {"e": END, "n": r["n"], "m": m, "a": r["a"], "p": r["p"], "t": t, "rc": 0, "dt": dt, "cpu": cpu,
                   "rss": rss}
            if ran:
                end["ran"] = 1
            out += unpack(end, size)
        return out
    if r["e"] == ASSIGN and "len" in r:
        one = {k: v for k, v in r.items() if k != "len"}
        return [{**one, "m": r["m"] + j} for j in range(r["len"])]
    if r["e"] == END and "ran" in r:
        t, dt = r.get("t"), r.get("dt")
        began = within(round(t - dt, 3), 0, TIME_MOST) if t is not None and dt is not None else t
        start = {"e": START, "n": r["n"], "m": r["m"], "a": r["a"], "p": r["p"], "t": began}
        if "nodes" in r:
            start["nodes"] = r["nodes"]
        return [start, {k: v for k, v in r.items() if k not in ("ran", "nodes")}]
    if r["e"] == HEADER:
        return []  # (the journal's, not the run's)
    return [r]


@dataclass
class Replayed:
    """What :func:`replay` found besides the records it applied."""

    path: Path
    damaged: list[int] = field(default_factory=list)  # line numbers of records skipped
    torn: bool = False  # the last line was cut short (a crash mid-write, or damage)
    applied: int = 0
    end: int = 0  # the byte offset after the last whole line read
    lines: int = 0  # how many whole lines the journal has up to ``end``

    def warnings(self) -> list[str]:
        """One line per damaged record (at most ten, then how many more)."""
        out = [f"{self.path} line {n} is damaged (checksum or format); skipped" for n in self.damaged[:10]]
        if len(self.damaged) > 10:
            out.append(f"{self.path}: {len(self.damaged) - 10} more damaged lines skipped")
        return out


def replay(path: Path, apply: Callable[[dict[str, Any]], Any], start: int = 0, lines: int = 0) -> Replayed:
    """Apply every whole, undamaged record of the journal at ``path``, in order. The one
    replay: the engine's and every reader's (``pwe show``, ``pwe status``, the API).
    ``start``: from this byte offset on (the tail after a checkpoint, :mod:`pwe.runstate.checkpoint`),
    whose first line is line ``lines + 1``; ``Replayed.end`` and ``.lines`` say where it stopped.

    A damaged record (its checksum does not match, it is not JSON, or ``apply`` cannot
    understand it) is skipped and replay goes on with the next line; a torn last line
    was never acted on and is dropped. Both are reported in what is returned. A journal
    of which no line can be read is :class:`RunDamaged`: replaying nothing would run
    every member again. Its header (its first line, if it has one) is read whatever
    ``start``, and applied to nothing: a journal of a newer version is
    :class:`JournalTooNew`, nothing of it read."""
    done = Replayed(Path(path))
    try:
        fh = open_regular(path, "rb", within=Path(path).parent)
    except FileNotFoundError:
        return done
    except OSError as exc:  # (a FIFO or a device put there: never opened for a blocking read)
        raise RunDamaged(f"{path} cannot be read ({exc.strerror or exc}): put the run's journal back, then give this "
                         "command again") from None
    with fh:
        done.end, done.lines = start, lines
        number = lines
        if version_of(fh, path) > 1 and not start:  # (the header: read, never applied)
            done.end, done.lines = fh.tell(), 1
            number = 1
        fh.seek(done.end)
        while True:
            line, size, ended = take_line(fh, MAX_LINE)
            if not size:
                break
            number += 1
            if line is None:  # (longer than any record: skipped to its end, never held whole)
                if not ended:
                    done.torn = True
                    break
                done.end += size
                done.lines = number
                done.damaged.append(number)
                continue
            if not ended:
                done.torn = True  # (only the last line can be)
                break
            done.end += len(line)
            done.lines = number
            rec = decode(line)
            if rec is None:
                if line.strip():
                    done.damaged.append(number)
                continue
            try:
                apply(rec)
                done.applied += 1
            except _NOT_UNDERSTOOD:
                done.damaged.append(number)
    if done.damaged and not done.applied and not start:
        raise RunDamaged(f"{path} is damaged: none of its {len(done.damaged)} lines can be read, so the run's record "
                         "of its members is lost (resuming would run every member again); put a good copy back, or "
                         "start a new run; `pwe status` still shows the last counts, `pwe logs` the members' output")
    return done


def append_whole(fh, data: bytes, path: Path, fsync: bool = False) -> None:
    """Append ``data`` (whole JSON lines) to a file with one writer, or none of it.

    On a write error (disk full, quota) whatever part got written is cut back, so a
    reader never meets a torn line followed by the next writer's lines; then
    :class:`JournalError` says what to do.
    """
    try:
        transport.append_whole(fh, data, fsync)
    except OSError as exc:
        raise cannot_write(path, exc) from None


#: what a filesystem says when it takes no more (full, a quota of bytes or of inodes, a file
#: too big), and when it takes nothing (read-only, permissions)
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
REFUSALS = (*FULL, errno.EROFS, errno.EACCES, errno.EPERM)


def remedy(full: bool) -> str:
    """What to do about a filesystem that refused a file: full (:data:`FULL`), or not."""
    return "free space" if full else "make it writable"


def cannot_write(where: Any, exc: OSError) -> JournalError:
    """The error that stops a run whose files the disk refuses, with what to do."""
    return JournalError(f"cannot write {where}: {exc.strerror}: {remedy(exc.errno in FULL)}")


def refused_within(exc: BaseException, directory: Path) -> str | None:
    """The file under ``directory`` that its filesystem refused (:data:`REFUSALS`) in
    ``exc``, else None (a refusal elsewhere, or an error without a file, is not this
    directory's). Of an error with two files (a copy, a rename), the second, where it was
    writing, is looked at too: a copy into a full disk names the file it read first."""
    if not isinstance(exc, OSError) or exc.errno not in REFUSALS:
        return None
    top = os.path.abspath(directory)
    for name in (exc.filename2, exc.filename):
        if name:
            where = os.path.abspath(os.fsdecode(name))
            if where == top or where.startswith(top.rstrip(os.sep) + os.sep):
                return where
    return None


@contextmanager
def disk_refusals(directory: Path) -> Iterator[None]:
    """The run's files refused by their filesystem anywhere inside (a full disk, an inode
    quota, a read-only mount), as :func:`cannot_write`'s JournalError: the run stops with
    its state intact and one line, wherever the refusal came (the journal, a pilot's new
    directory, the checkpoint), instead of a traceback. Any other error passes as it is:
    a defect is not hidden behind "free space"."""
    try:
        yield
    except OSError as exc:
        where = refused_within(exc, directory)
        if where:
            raise cannot_write(where, exc) from None
        raise


class Journal:
    def __init__(self, path: Path, fsync: bool = False):
        self.path = path
        self.fsync = fsync
        self._buf: list[bytes] = []
        self._run: dict[str, Any] | None = None  # an assign (``len``) or ``ends`` still growing, not yet encoded
        #: while a batch of a pilot's messages is taken in (:meth:`hold`): its starts, by (node, member, attempt)
        self._held: dict[tuple[Any, Any, Any], dict[str, Any]] | None = None
        self._trim_torn_tail()
        self._fh = open_append(path, within=Path(path).parent)  # (a FIFO put there: refused, never waited on)
        #: bytes written (and flushed) so far: what a checkpoint covers (:mod:`pwe.runstate.checkpoint`)
        self.offset = os.fstat(self._fh.fileno()).st_size
        #: whole lines so far, when the opener says how many it replayed (``lines``)
        self.lines = 0
        if self.offset:  # (one a newer pwe began: refused before anything is appended)
            with open_regular(path, "rb", within=Path(path).parent) as fh:
                version_of(fh, path)

    def _trim_torn_tail(self) -> None:
        try:
            with open_regular(self.path, "rb+", within=Path(self.path).parent) as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                if size == 0:
                    return
                back = min(size, 1 << 16)
                fh.seek(size - back)
                tail = fh.read()
                if tail.endswith(b"\n"):
                    return
                cut = tail.rfind(b"\n")
                fh.truncate(size - back + cut + 1 if cut >= 0 else 0)
        except FileNotFoundError:
            pass

    @property
    def pending(self) -> int:
        """Records appended but not yet written (flush writes them)."""
        return len(self._buf) + (self._run is not None) + len(self._held or ())

    def hold(self) -> None:
        """A batch of one pilot's messages begins: its starts are held (appended, not yet
        encoded) until :meth:`release`; a start whose end comes in the batch is written as
        that end, carrying it (``ran``: the compacted form, see the module's docstring); one
        whose member is handed back in the batch is written just before that ``unassign``.
        (Within a batch held already, as when a pilot is given up while its batch is read,
        the batch goes on: the first :meth:`release` writes what is held.)"""
        if self._held is None:
            self._held = {}

    def release(self) -> None:
        """The batch's end: the starts held whose end did not come, written in their order
        (before the batch's ``offset``, which the caller appends next)."""
        held, self._held = self._held, None
        if held:
            for start in held.values():
                self.append(start)

    def append(self, record: dict[str, Any]) -> None:
        """Add a record to the next write, compacted (see the module's docstring): an
        assign of the member after the last one assigned, of the same node, attempt, pilot
        and time, lengthens that one (its ``len``): a pass of the feed is one line, not one
        a member; a plain end after another of the same node, attempt and pilot joins it
        in an ``ends`` record: a batch of the pilot's events is one line; while a batch is
        held (:meth:`hold`), an end carries its start. ``record`` is not changed."""
        e = record["e"]
        held = self._held
        if held is not None:
            if e == START:
                held[(record["n"], record["m"], record["a"])] = record
                return
            if held and (e == END or e == UNASSIGN):
                start = held.pop((record["n"], record["m"], record.get("a")), None)
                if start is not None and e == END:  # (it began at t - dt: unpack)
                    record = {**record, "ran": 1, "nodes": start["nodes"]} if "nodes" in start else \
                        {**record, "ran": 1}
                elif start is not None:  # (handed back after it started: in that order)
                    self._held = None
                    self.append(start)
                    self._held = held
        run = self._run
        if run is not None:
            if e == ASSIGN and run["e"] == ASSIGN and record["m"] == run["m"] + run.get("len", 1) \
                    and record.keys() == run.keys() - {"len"} and all(record[k] == run[k] for k in record if k != "m"):
                run["len"] = run.get("len", 1) + 1
                return
            if e == END and run["e"] in (END, ENDS) and _packs(record) and record["n"] == run["n"] \
                    and record["a"] == run["a"] and record["p"] == run["p"]:
                if run["e"] == END:  # (its first end becomes the first row of the columns)
                    first = run
                    run = self._run = {"e": ENDS, "n": first["n"], "a": first["a"], "p": first["p"],
                                       **{k: [first[k]] for k in _COLUMNS}, "ran": [first.get("ran", 0)]}
                for k in _COLUMNS:
                    run[k].append(record[k])
                run["ran"].append(record.get("ran", 0))
                return
            self._buf.append(encode(_ends_line(run) if run["e"] == ENDS else run))
            self._run = None
        if e == ASSIGN or e == END and _packs(record):
            self._run = dict(record)
        else:
            self._buf.append(encode(record))

    def flush(self) -> None:
        if self._held is not None:  # (a batch cut short: what it held, written)
            self.release()
        if self._run is not None:
            run = self._run
            self._buf.append(encode(_ends_line(run) if run["e"] == ENDS else run))
            self._run = None
        if not self._buf:
            return
        if not self.offset and not self._buf[0].startswith(_HEAD):  # a new journal: its header first
            self._buf.insert(0, encode(header()))
        data = b"".join(self._buf)
        append_whole(self._fh, data, self.path, self.fsync)
        self.offset += len(data)
        self.lines += len(self._buf)
        self._buf.clear()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._fh.close()
