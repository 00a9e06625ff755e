"""Reading a run back: its members' states, attempts, exit statuses and outputs.

The Python API (:class:`RunResult` of ``pwe.run_workflow``) and ``pwe show`` / ``pwe
status`` use these. They need only the run's plan and its journal: they replay the
journal read-only, never take the run's lock, and start nothing (no engine, no
protocol, no connection to a host).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..runstate.state import DONE, FAILED, NAMES, RunState


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
        :mod:`pwe.observe.query`), as ``pwe show -q`` lists them; :class:`InputError` for a bad one."""
        from .query import select

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
    pn = state.plan.nodes[node]
    if pn.check is not None or node in state.api_checks:  # its place in its tree (pwe/planning/trees.py)
        rec["parent"] = pn.tree.parent_of(i)
        rec["iteration"] = pn.tree.depth_of(i)
        rec["verdict"] = pn.tree.verdict.get(i)
    if ns.complete and ns.state[i] == DONE and ns.is_complete(i):  # (pwe.planning.products)
        rec.update(exit_status=None, complete=True,
                   why="complete (products): found in the workspace, not made by this run")
    return rec
