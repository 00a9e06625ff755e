"""Holding a failing value (``hold: {after: N}``, issue 48 item 1): when N members of one
parameter value failed and none of it is done, its members not yet started are held
(queued ones handed back by their pilot); ``pwe release -q`` lets them go. Real runs; the
members' own ledger and the pilots' own messages are the witnesses."""

from __future__ import annotations

import json
import os
import signal

import pytest

from helpers import (engine_pid, ledger_counts, no_traceback, one_line_error, read_journal, run_cli, start_run,
                     status, wait_for)

from pwe.planning.plan import plan_workflow
from pwe.runstate import records
from pwe.runstate.state import RunState
from pwe.base.states import HELD, NAMES, READY

WF = """\
name: holding
hold: {{after: 3}}
nodes:
  sim:
    parameters: {{mesh: [coarse, fine], seed: {{range: [0, 30]}}}}
    run: >-
      echo "start sim $PWE_MEMBER $PWE_ATTEMPT x" >> {ledger}; sleep 0.2;
      [ {{{{ mesh }}}} != fine ] || [ -e {fixed} ] || exit 3;
      echo "end sim $PWE_MEMBER $PWE_ATTEMPT x" >> {ledger}
"""


def _pilot_said(run):
    out = []
    for p in sorted((run / "pilots").iterdir()):
        f = p / "events.jsonl"
        if f.exists():
            out += [dict(json.loads(line), pilot=p.name) for line in f.read_text().splitlines()]
    return out


def test_a_value_that_only_fails_is_held_and_released(tmp_path, write):
    ledger, fixed = tmp_path / "ledger", tmp_path / "fixed"
    wf = write(WF.format(ledger=ledger, fixed=fixed))
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    no_traceback(err)
    st = status(run)
    t = st["totals"]
    held = t["held"]
    assert held > 0 and t["done"] == 30 and t["failed"] + held == 30, t  # (every coarse done; fine failed or held)
    assert f"held: {held:,} members of sim with mesh=fine (3 failed, none done)" in err, err
    recs = read_journal(run)
    hold = [r for r in recs if r["e"] == "hold"]
    assert [(r["n"], r["param"], r["value"], r["failed"]) for r in hold] == [("sim", "mesh", "fine", 3)]
    assert not [r for r in recs if r["e"] == "halt"], "a held member is not a failure"
    # the pilots' own word: no fine member started after its pilot handed the held back
    said = _pilot_said(run)
    backs = [m for m in said if m["k"] == "back" and str(m.get("why", "")).startswith("held: mesh=fine")]
    fine = range(30, 60)
    for pilot in {m["pilot"] for m in backs}:
        first = min(m["q"] for m in backs if m["pilot"] == pilot)
        assert not [m for m in said if m["pilot"] == pilot and m["k"] == "start" and m["m"] in fine
                    and m["q"] > first], pilot
    starts, _ = ledger_counts(ledger)
    assert sum(n for (node, m, a), n in starts.items() if int(m) in fine) == 30 - held
    assert all(n == 1 for n in starts.values())
    # explain says why a held member waits, and how to let it go
    rc, out, err = run_cli("show", run, "--state", "held", "--json", cwd=tmp_path)
    member = json.loads(out)[0]["member"]
    rc, out, err = run_cli("explain", run, f"sim:{member}", cwd=tmp_path)
    assert "held: mesh=fine had 3 failed, none done (hold: after 3)" in out and "pwe release" in out, out
    rc, out, err = run_cli("status", run, cwd=tmp_path)
    assert "held: sim mesh=fine (3 failed, none done)" in out, out
    # released (after the cause is fixed): each held member runs once, and is done
    assert "selects no held member" in one_line_error(*run_cli("release", run, "-q", "mesh=coarse", cwd=tmp_path))
    fixed.write_text("")
    rc, out, err = run_cli("release", run, "-q", "mesh=fine", cwd=tmp_path, timeout=300)
    assert rc == 1, err  # (the fine members that failed before the hold stay failed)
    t = status(run)["totals"]
    assert t["held"] == 0 and t["done"] == 30 + held and t["failed"] == 30 - held, t
    starts, ends = ledger_counts(ledger)
    assert all(n == 1 for n in starts.values()) and sum(starts.values()) == 60, starts
    # the value let go is not held again: a retry of the failed runs them all
    rc, out, err = run_cli("retry", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    assert status(run)["totals"]["done"] == 60


def test_an_engine_killed_after_a_hold_resumes_with_its_members_held(tmp_path, write):
    ledger, fixed = tmp_path / "ledger", tmp_path / "fixed"
    wf = write(WF.format(ledger=ledger, fixed=fixed).replace("sleep 0.2", "sleep 0.5"))
    run = tmp_path / "run"
    proc = start_run(wf, tmp_path, "--cores", "2", "--run-dir", run)
    try:
        wait_for(lambda: (run / "journal.jsonl").exists() and b'"e":"hold"' in (run / "journal.jsonl").read_bytes(),
                 timeout=120, what="the hold record")
        os.kill(engine_pid(run), signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    rc, out, err = run_cli("resume", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    t = status(run)["totals"]
    assert t["held"] > 0 and t["done"] == 30 and t["failed"] + t["held"] == 30, t
    starts, _ = ledger_counts(ledger)
    assert all(n == 1 for n in starts.values()), [k for k, n in starts.items() if n > 1]


@pytest.mark.parametrize("value, said", [("{after: 0}", "at least 1"), ("{after: -1}", "at least 1"),
                                         ("{after: 1000000000000}", "after"), ("{after: x}", "whole number"),
                                         ("{}", "after"), ("{after: 2, more: 1}", "more")])
def test_a_bad_hold_is_one_line_at_validate(tmp_path, write, value, said):
    wf = write(f"name: bad\nhold: {value}\nnodes:\n  a:\n    run: 'true'\n")
    err = one_line_error(*run_cli("validate", wf, cwd=tmp_path))
    assert err.startswith(f"{wf}:2:") and said in err, err


def test_the_state_holds_what_has_not_started_and_what_comes_back(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: s\nnodes:\n  a:\n    parameters: {v: [x, y], i: [0, 1, 2]}\n    run: 'true'\n")
    st = RunState(plan_workflow(wf))
    ns = st.nodes["a"]
    st.apply(records.assign("a", 0, 1, "p1", 1.0))  # (x, 0): queued on a pilot
    assert st.apply(records.hold("a", "v", "x", 3, 2.0)) == 2  # (x, 1) and (x, 2): held; (x, 0) is queued
    assert [NAMES[c] for c in ns.state] == ["queued", "held", "held", "ready", "ready", "ready"]
    st.apply(records.unassign("a", 0, "p1", 1, "held: v=x", 3.0))  # handed back: its value is held
    assert ns.state[0] == HELD and ns.counts[HELD] == 3 and ns.counts[READY] == 3
    st.apply(records.retry(4.0, "someone", {"a": [[1, 2]]}))  # one let go
    assert ns.state[1] == READY and ns.state[0] == HELD and st.holds and not st.released
    st.apply(records.retry(5.0, "someone", None))  # all let go: the value is released
    assert ns.counts[HELD] == 0 and st.holds == [] and st.released == {("a", "v", "x")}
    with pytest.raises((ValueError, KeyError)):
        st.apply(records.hold("a", "nope", "x", 3, 6.0))


def test_a_value_written_twice_in_a_list_is_one_value(tmp_path):
    """The hold weighs a value by its text (as the hold record and pwe failures say it):
    members of 'x' at two places of a list count together."""
    from types import SimpleNamespace

    from pwe.engine.holds import Holds

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: s\nhold: {after: 2}\nnodes:\n  a:\n    parameters: {v: [x, y, x], i: [0, 1]}\n"
                  "    run: 'true'\n")
    plan = plan_workflow(wf)
    st = RunState(plan)
    ledger = SimpleNamespace(state=st, take=st.apply)
    holds = Holds(plan, ledger, {})
    for m in (0, 5):  # v=x at the list's first place (i=0) and at its third (i=1)
        st.apply(records.assign("a", m, 1, "p1", 1.0))
        assert st.apply(records.end("a", m, 1, "p1", 2.0, 3, 1.0)) is not None
        holds.ended("a", m, st.nodes["a"].state[m])
    assert [(h["param"], h["value"], h["failed"]) for h in st.holds] == [("v", "x", 2)]
    assert [NAMES[c] for c in st.nodes["a"].state] == ["failed", "held", "ready", "ready", "held", "failed"]
