"""The trace of a run: one record per member attempt, built from the run's journal.

Each record says which member and attempt, its parameters, where it ran (``host``: the
name of the host in pwe's registry; ``node_name``: the machine, as the pilot names it;
the pilot; its batch system and job), when (submitted to a pilot, started, ended: the pilot's clock,
epoch seconds), how it ended (exit status, why), what it cost (``cpu``: user+sys CPU
seconds of its process tree; ``rss``: peak resident KB of its largest process; both
measured by the pilot from the rusage of the reaped child) and its outputs.

Why from the journal and not a file of its own: the journal already holds every
``assign``, ``start`` and ``end`` record with these fields (the engine writes them as it
takes in the pilots' messages), so a second file would be a second record of the same
events that could disagree with the first, and would cost a write per member during
the run. The price is that the trace reads the whole journal (one replay,
:func:`pwe.runstate.journal.replay`): a trace is the whole history, so that is inherent.

Attempts that were handed back before they started (``back``) did not happen and are
not in the trace (but one taken back, by a halt ``now`` or with its pilot, whose start is
taken in after that is: its pilot started it before it heard); a member reused from an
earlier run is one record of attempt 0, ``state`` ``done``, ``reason`` ``reused``, ``why``
the run and member it came from; one taken back after it started (its pilot or node was lost) is,
with ``state`` ``lost`` (``reason`` ``lost``, or ``quarantined`` for the loss that made
its member reach maxLosses); one stopped by a halt ``now`` has ``state`` ``halted``; one
that was queued or running when the run was cancelled has ``state`` ``cancelled``.
``reason`` says why an attempt ended where not by its own exit (``oom``, ``walltime``,
``straggler``, ``invalid``: the pilot's word); ``asked_memory_mb`` and ``asked_walltime_min`` what the attempt asked
for (its node's memoryPerMember and maxWallTimePerMember, or more on a retry that grows
them: the ``assign`` record's ``mem``, ``wall``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from ..runstate.journal import (ASSIGN, CANCEL, END, FINISH, PILOT, PILOT_GONE, RESUME, REUSED, RUN, START, STOPPED,
                                UNASSIGN, each, replay)

#: The trace's columns, in order (``pwe trace --format tsv`` prints them as its header).
COLUMNS = ("node", "member", "attempt", "state", "exit_status", "why", "submit", "start", "end", "duration", "cpu",
           "rss_kb", "host", "node_name", "pilot", "batch", "job", "parameters", "outputs", "reason", "asked_memory_mb",
           "asked_walltime_min")


class Trace:
    """Attempts and pilots gathered from journal records (:meth:`take`, one per record)."""

    def __init__(self, plan: Any = None) -> None:
        #: the members each node has (the plan's, and those its check grew): every record's
        #: numbers are checked against them (pwe.runstate.journal.check); None: not checked
        self._sizes = {nid: pn.size for nid, pn in plan.nodes.items()} if plan is not None else None
        self._max_losses = {nid: pn.max_losses for nid, pn in plan.nodes.items()} if plan is not None else {}
        # (node, member, attempt) -> [submit, start, end, rc, why, dt, cpu, rss, out, pilot, nodes, ended, reason,
        # asked mem, asked wall] (ended: None, or how an attempt without an exit status ended: "lost",
        # "halted", "cancelled"; asked: what a retry that grows asked for, None: its node's)
        self.attempts: dict[tuple[str, int, int], list[Any]] = {}
        self.pilots: dict[str, dict[str, Any]] = {}
        self.first: float | None = None  # the first engine's start (epoch s)
        self.last: float | None = None  # the last engine's start or end
        self.grown: dict[str, list[dict[str, Any]]] = {}  # a check's members' values (pwe/planning/trees.py)
        self.losses: dict[tuple[str, int], int] = {}  # (node, member) -> attempts lost with their pilot or node
        #: attempts taken back before their start was taken in, with what took them back: one
        #: whose start comes after all is in the trace (:meth:`_started_after_all`)
        self.unstarted: dict[tuple[str, int, int], tuple[list[Any], dict[str, Any]]] = {}

    def size_of(self, nid: str) -> int:
        return self._sizes[nid] + len(self.grown.get(nid, ()))  # type: ignore[index]

    def take(self, r: dict[str, Any]) -> None:
        """Take one journal record; :class:`ValueError` (or KeyError) for one whose numbers
        the plan does not allow (a damaged record: the replay skips it)."""
        for one in each(r, None if self._sizes is None else self.size_of):  # (compacted: unpacked)
            self._take(one)

    def _take(self, r: dict[str, Any]) -> None:
        on = _ON.get(r["e"])  # (the kinds that say nothing of attempts, pilots or times: none)
        if on is not None:
            on(self, r)

    def _assign(self, r: dict[str, Any]) -> None:
        self.unstarted.pop((r["n"], r["m"], r["a"]), None)  # (the attempt's number given again: that one is this)
        self.attempts[(r["n"], r["m"], r["a"])] = [r.get("t"), None, None, None, None, None, None, None, None,
                                                    r["p"], None, None, None, r.get("mem"), r.get("wall")]

    def _start(self, r: dict[str, Any]) -> None:
        key = (r["n"], r["m"], r["a"])
        a = self.attempts.get(key)
        if a is None:
            a = self._started_after_all(key, r)
        if a is not None:
            a[1] = r.get("t")
            a[10] = r.get("nodes")

    def _started_after_all(self, key: tuple[str, int, int], r: dict[str, Any]) -> list[Any] | None:
        """An attempt taken back before its start was taken in (a halt ``now``, a pilot given
        up) whose pilot did start it (it had not heard yet): it is in the trace after all,
        ended as its taking back said (and as its end, when that comes, says)."""
        kept = self.unstarted.pop(key, None)
        if kept is None or kept[0][9] != r["p"]:
            return None
        a, taken = kept
        self.attempts[key] = a
        a[1] = r.get("t")
        self._taken_back(key, a, taken)
        return a

    def _end(self, r: dict[str, Any]) -> None:
        a = self.attempts.get((r["n"], r["m"], r["a"]))
        if a is None or a[3] is not None:
            return
        if r.get("grow"):  # (its children, in the order of their indices)
            self.grown.setdefault(r["n"], []).extend(r["grow"])
        a[2], a[3], a[4], a[5] = r.get("t"), r.get("rc"), r.get("why"), r.get("dt")
        a[6], a[7], a[8], a[12] = r.get("cpu"), r.get("rss"), r.get("out"), r.get("reason")

    def _unassign(self, r: dict[str, Any]) -> None:
        key = (r["n"], r["m"], r.get("a"))
        a = self.attempts.get(key)
        if a is not None and a[3] is None and a[11] is None:
            if a[1] is None:  # not started, as far as the journal says yet: no attempt spent,
                # unless its start comes after (:meth:`_started_after_all`)
                self.unstarted[key] = (self.attempts.pop(key), r)  # type: ignore[index]
            else:
                self._taken_back(key, a, r)  # type: ignore[arg-type]

    def _taken_back(self, key: tuple[str, int, int], a: list[Any], r: dict[str, Any]) -> None:
        """An attempt that started, taken back by ``r`` (an ``unassign``): halted, or lost."""
        if r.get("halted"):
            a[2], a[4], a[11], a[12] = r.get("t"), r.get("why") or "halted", "halted", "halted"
        else:
            a[2], a[4], a[11] = r.get("t"), r.get("why") or "handed back", "lost"
            if r.get("lost"):  # (counted against maxLosses: the last of them quarantined it)
                n = self.losses[key[:2]] = self.losses.get(key[:2], 0) + 1
                a[12] = "quarantined" if n >= self._max_losses.get(key[0], 2) else "lost"

    def _reused(self, r: dict[str, Any]) -> None:
        """Members reused from an earlier run (pwe.runstate.reusable): one record each, attempt 0
        (none ran here), ``state`` done, ``reason`` reused, ``why`` the run and member they came from."""
        outs = r.get("out") or {}
        for lo, hi, src in r["r"]:
            for i in range(lo, hi):
                self.attempts[(r["n"], i, 0)] = [None, None, None, None,
                                                 f"reused from run {r['from']} member {src + i - lo}", None, None,
                                                 None, outs.get(str(i)), None, None, "done", "reused", None, None]

    def _cancel(self, r: dict[str, Any]) -> None:
        """What was queued or running then ends here."""
        for a in self.attempts.values():
            if a[3] is None and a[11] is None:
                a[2], a[4], a[11] = (r.get("t") if a[1] is not None else None), "cancelled", "cancelled"

    def _pilot(self, r: dict[str, Any]) -> None:
        self.pilots[r["p"]] = {k: r.get(k) for k in ("host", "job", "batch", "lane", "slots", "pid", "t")}

    def _pilot_gone(self, r: dict[str, Any]) -> None:
        if r["p"] in self.pilots:
            self.pilots[r["p"]]["gone"] = r.get("why") or "gone"
            self.pilots[r["p"]]["gone_t"] = r.get("t")

    def _engine(self, r: dict[str, Any]) -> None:
        """An engine began, took up, finished or stopped the run: the trace's first and last times."""
        if r.get("t"):
            self.first = self.first or r["t"]
            self.last = r["t"]

    def records(self, plan: Any = None, now: float | None = None) -> Iterator[dict[str, Any]]:
        """The attempts as dicts with :data:`COLUMNS` as keys, by node, member, attempt.
        ``plan`` gives the members' parameters (none without it)."""
        spaces = {nid: pn.space for nid, pn in plan.nodes.items()} if plan is not None else {}
        asked = {nid: (pn.scheduling.memoryPerMember, pn.scheduling.maxWallTimePerMember)
                 for nid, pn in plan.nodes.items()} if plan is not None else {}
        for (nid, i, att), a in sorted(self.attempts.items()):
            submit, start, end, rc, why, dt, cpu, rss, out, pid, nodes, ended, reason, mem, wall = a
            p = self.pilots.get(pid, {})
            if ended:
                state = ended
            elif rc is not None:
                state = "done" if rc == 0 and not reason else "failed"
            else:
                state = "running" if start is not None else "queued"
            space = spaces.get(nid)
            yield {
                "node": nid, "member": i, "attempt": att, "state": state, "exit_status": rc, "why": why,
                "submit": submit, "start": start, "end": end,
                "duration": dt if dt is not None else (round(max(0.0, end - start), 3) if end and start else None),
                "cpu": cpu, "rss_kb": rss, "host": p.get("lane") or p.get("host"),
                # (a start without nodes ran on its pilot's host: pwe/engine/intake.py leaves them out)
                "node_name": nodes[0] if nodes else p.get("host") if start is not None else None,
                "pilot": pid, "batch": p.get("batch"), "job": p.get("job"),
                "parameters": {} if space is None else space.values_of(i) if i < space.size else
                self.grown[nid][i - space.size], "outputs": out or {},
                "reason": reason or ("exit" if rc is not None else None),
                "asked_memory_mb": mem if mem is not None else asked.get(nid, (None, None))[0],
                "asked_walltime_min": wall if wall is not None else asked.get(nid, (None, None))[1],
            }


#: What each journal record kind is to the trace (kinds not here say nothing of it).
_ON: dict[str, Callable[[Trace, dict[str, Any]], None]] = {
    ASSIGN: Trace._assign, START: Trace._start, END: Trace._end, UNASSIGN: Trace._unassign, CANCEL: Trace._cancel,
    PILOT: Trace._pilot, PILOT_GONE: Trace._pilot_gone, REUSED: Trace._reused,
    RUN: Trace._engine, RESUME: Trace._engine, FINISH: Trace._engine, STOPPED: Trace._engine,
}


def load(run_dir: Path, with_state: bool = True) -> tuple[dict[str, Any], Any, Any, Trace]:
    """(run.json, plan, state or None, trace) of a run, from one replay of its journal
    (read-only: no lock taken). A damaged record is skipped with a warning on stderr,
    as every reader skips it."""
    from ..runstate.runs import check_journal, read

    info, plan = read(run_dir)
    tr = Trace(plan)
    state = None
    if with_state:
        from ..runstate.state import RunState

        state = RunState(plan)
        st_apply, take = state.apply, tr.take

        def apply(r: dict[str, Any]) -> None:
            st_apply(r)
            take(r)
    else:
        apply = tr.take  # type: ignore[assignment]
    check_journal(run_dir)
    for line in replay(run_dir / "journal.jsonl", apply).warnings():
        print(f"warning: {line}", file=sys.stderr)
    return info, plan, state, tr


def tsv_value(v: Any) -> str:
    """A field as TSV text: dicts as compact JSON, nothing as empty; tabs and newlines
    in text become spaces (a TSV row is one line), other control characters are written
    visibly (:func:`pwe.base.text.shown`)."""
    if v is None:
        return ""
    if isinstance(v, dict):
        v = json.dumps(v, separators=(",", ":"), sort_keys=True)
    from ..base.text import shown  # (what members said: no escape sequence of theirs reaches a terminal)

    return shown(str(v).replace("\t", " ").replace("\n", " ").replace("\r", " "))
