"""Reading a run back: its members' states, attempts, exit statuses and outputs, and the
members a query selects (:func:`select`, in the language of :mod:`pwe.planning.conditions`).

The Python API (:class:`RunResult` of ``pwe.run_workflow``) and ``pwe show`` / ``pwe
status`` use these. They need only the run's plan and its journal: they replay the
journal read-only, never take the run's lock, and start nothing (no engine, no
protocol, no connection to a host).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..base.errors import InputError
from ..planning.conditions import Budget, field_named, matches, needs_trace, parse
from ..base.states import DONE, FAILED, NAMES
from ..runstate.state import RunState


class RunResult:
    """A finished (or interrupted) run, read back from its run directory."""

    def __init__(self, run_dir: Path, ok: bool | None = None):
        self.dir = Path(run_dir)
        self.ok = ok
        self._state: RunState | None = None

    @property
    def state(self) -> RunState:
        if self._state is None:
            self._state = load_state(self.dir)[1]
        return self._state

    def members(self, node: str) -> list[dict[str, Any]]:
        """Every member of ``node``: index, parameters, state, attempts, exit status, outputs."""
        return [member_record(self.state, node, i) for i in range(self.state.nodes[node].size)]

    def query(self, query: str, node: str | None = None, limit: int = 0) -> list[dict[str, Any]]:
        """The members that match ``query`` (``'state=failed; T>300; outputs.energy<1.5'``,
        :mod:`pwe.planning.conditions`), as ``pwe show -q`` lists them; :class:`InputError` for a bad one."""
        return select(self.dir, query, node, None, limit)


def load_state(run_dir: Path) -> tuple[dict[str, Any], RunState]:
    """A run's run.json and its state, from its journal (read-only; no lock taken). A
    damaged journal line is skipped with a warning on stderr, as the engine skips it."""
    from ..runstate.runs import check_journal, read

    from ..runstate.checkpoint import load

    info, plan = read(run_dir)
    check_journal(run_dir)
    state, replayed, unusable = load(run_dir, plan)  # the checkpoint, then the journal's tail
    for line in unusable + replayed.warnings():
        print(f"warning: {line}", file=sys.stderr)
    return info, state


def member_record(state: RunState, node: str, i: int) -> dict[str, Any]:
    ns = state.nodes[node]
    rec = {
        "node": node, "member": i, "parameters": state.plan.nodes[node].space.values_of(i),
        "state": NAMES[ns.state[i]], "attempts": ns.attempt[i],
        "exit_status": ns.rc.get(i, 0) if ns.state[i] in (DONE, FAILED) else None,
        "outputs": ns.outputs.get(i, {}),
    }
    if i in ns.why:
        rec["why"] = ns.why[i]
    if i in ns.reason:  # why its last attempt ended, where not by its own exit: oom, walltime, halted, quarantined
        rec["reason"] = ns.reason[i]
    if state.sets:  # (pwe set: what its attempts ask for from then on)
        said = state.settings_for(node, i)
        if said:
            rec["set"] = said
    pn = state.plan.nodes[node]
    if pn.check is not None or node in state.api_checks:  # its place in its tree (pwe/planning/trees.py)
        rec["parent"] = pn.tree.parent_of(i)
        rec["iteration"] = pn.tree.depth_of(i)
        rec["verdict"] = pn.tree.verdict.get(i)
    if ns.complete and ns.state[i] == DONE and ns.is_complete(i):  # (pwe.planning.products)
        rec.update(exit_status=None, complete=True,
                   why="complete (products): found in the workspace, not made by this run")
    elif ns.reused and ns.state[i] == DONE and (came := ns.reused_from(i)) is not None:  # (pwe.runstate.reusable)
        rec.update(exit_status=None, reason="reused", reused_from={"run": came[0], "member": came[1]},
                   why=f"reused: from run {came[0]} member {came[1]} (unchanged: same key), not run here")
    return rec


def select(run_dir: Any, query: str | None = None, node: str | None = None, state: str | None = None,
           limit: int = 0, offset: int = 0, loaded: tuple[Any, Any] | None = None,
           budget: Budget | None = None) -> list[dict[str, Any]]:
    """The members of a run that match ``query`` (and are of ``node``, in ``state`` when
    given), at most ``limit`` (0: all), as :func:`pwe.observe.results.member_record` gives them;
    with ``T``, ``cpu``, ``rss`` and ``host`` of the last attempt when the query asks for
    one of them (then the whole journal is read: :mod:`pwe.observe.trace`). The Python API's
    ``RunResult.query`` and ``pwe show -q``. A bad query is :class:`InputError`, said
    before the run is read when its form is wrong. ``offset``: leave out the first that
    many matches (a page of them: the dashboard, pwe.ui). ``loaded``: (state, trace or
    None) already read (the dashboard keeps them up to date), instead of reading them here.
    ``budget``: a :class:`~pwe.planning.conditions.Budget` checked for each member looked at
    (the dashboard's: :class:`~pwe.base.errors.OverBudget` past it). A query that is given but
    empty or blank selects nothing: :class:`InputError`, never every member."""
    conds = parse(query, None) if query is not None else []
    want = None if state is None else state.lower()
    if want is not None and want not in NAMES:
        raise InputError(f"--state: one of {', '.join(NAMES)}")
    st, plan, last, pilots = _read_for(run_dir, conds, loaded)
    if node is not None and node not in st.nodes:
        from ..base.errors import did_you_mean

        raise InputError(f"run {run_dir.name} has no node '{node}'{did_you_mean(node, st.nodes)}")
    _check_fields(conds, plan)
    # conditions on the state and the node are tested on the state's arrays first: a
    # member's full record (its parameters) is made only for those that pass them
    quick = [c for c in conds if c.field in ("state", "node")]
    conds = [c for c in conds if c.field not in ("state", "node")]
    out: list[dict[str, Any]] = []
    for nid, ns in st.nodes.items():
        if node and nid != node:
            continue
        wanted = bytes(k for k, name in enumerate(NAMES) if (want is None or name == want)
                       and all(c.test({"state": name, "node": nid}) for c in quick))
        if not wanted:
            continue
        states = ns.state
        start = 0
        if not conds and offset:  # (a page far down: counted on the state's arrays, no record made)
            start, offset = _page_start(ns, wanted, offset)
            if start is None:
                continue
        for i in range(start, ns.size):
            if budget is not None:
                budget.check()
            if states[i] not in wanted:
                continue
            if not conds and offset:
                offset -= 1
                continue
            rec = _queried_record(st, nid, i, last, pilots)
            if conds and not matches(conds, rec):
                continue
            if offset:
                offset -= 1
                continue
            del rec["exit"]
            out.append(rec)
            if limit and len(out) >= limit:
                return out
    return out


def _read_for(run_dir: Any, conds: list, loaded: tuple[Any, Any] | None) -> tuple[
        RunState, Any, dict[tuple[str, int], list[Any]], dict[str, dict[str, Any]]]:
    """What a query needs of a run: (its state, its plan, the last attempt of each member
    and the pilots, from the trace: both empty unless a condition asks for ``T``, ``cpu``,
    ``rss`` or ``host``), from ``loaded`` where it holds them, else read here."""
    last: dict[tuple[str, int], list[Any]] = {}
    pilots: dict[str, dict[str, Any]] = {}
    traced = needs_trace(conds)
    if loaded is not None and (loaded[1] is not None or not traced):
        st, tr = loaded
        plan = st.plan
        if tr is None or not traced:
            return st, plan, last, pilots
    elif traced:
        from .trace import load

        _, plan, st, tr = load(run_dir)
    else:
        _, st = load_state(run_dir)
        return st, st.plan, last, pilots
    for (nid, i, _a), a in sorted(tr.attempts.items()):
        last[(nid, i)] = a
    return st, plan, last, tr.pilots


def _check_fields(conds: list, plan: Any) -> None:
    """InputError for a bare field name (``energy<1``) that is no parameter of the run."""
    names = {n for pn in plan.nodes.values() for n in pn.space.names}
    for c in conds:
        if c.bare and c.field[7:] not in names:
            field_named(c.field[7:], names, c.text)  # (raises: no such field)


def _page_start(ns: Any, wanted: bytes, offset: int) -> tuple[int | None, int]:
    """(where to start among a node's members, the offset left after it), counted on the
    state's arrays (no record made); None to start: all the node's wanted members are
    within the offset."""
    if len(wanted) == len(NAMES):
        skip = min(offset, ns.size)
        return skip, offset - skip
    here = sum(ns.counts[k] for k in wanted)
    if here <= offset:
        return None, offset - here
    return 0, offset


def _queried_record(st: RunState, nid: str, i: int, last: dict[tuple[str, int], list[Any]],
                    pilots: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A member's record as a query tests it: with ``exit`` (the exit status) and, when the
    trace was read, ``T``, ``cpu``, ``rss`` and ``host`` of its last attempt."""
    rec = member_record(st, nid, i)
    rec["exit"] = rec["exit_status"]
    a = last.get((nid, i))
    if a is None:
        return rec
    rec["T"] = a[5] if a[5] is not None else (round(a[2] - a[1], 3) if a[2] and a[1] else None)
    rec["cpu"], rec["rss"] = a[6], a[7]
    p = pilots.get(a[9], {})
    rec["host"] = p.get("lane") or p.get("host")  # (the registry's name of the host, as the trace)
    return rec
