"""The core-hour budget (``budget: {coreHours: N}`` of a workflow and of a host): spent
core-hours counted from the pilots' records, the same in the journal, state.json and `pwe
status`; a run that passes its budget halts with one line; a pilot that would carry the run
past it is never submitted; bad values of the hosts key refused. Budgets here are either so
small that even the fastest run passes them or so large that no run reaches them."""

from __future__ import annotations

import json
import os
import time

import pytest

from helpers import ROOT, no_traceback, read_journal, run_cli

from pwe.engine.budget import MIN_USE, project

LLEMU = ROOT / "tests" / "llemu"


def _spent_from_journal(run_dir, until: float) -> float:
    """Core-hours the journal's pilot records say the run held: slots x (gone - t), a pilot
    not gone counted until ``until``."""
    recs = read_journal(run_dir)
    gone = {r["p"]: r["t"] for r in recs if r["e"] == "pilot_gone"}
    return sum(r["slots"] * (gone.get(r["p"], until) - r["t"]) for r in recs if r["e"] == "pilot") / 3600


def _state(run_dir) -> dict:
    return json.loads((run_dir / "state.json").read_text())


# -- the projection, on fixed numbers --------------------------------------------------------

def test_projection_adds_the_rest_of_each_measured_node_scaled_by_the_pilots_use():
    # 100 members left of 36 s on 2 cores: 2 core-hours; pilots used half of what they held
    assert project(10.0, [(100, 36.0, 2)], used=50.0, held=100.0) == pytest.approx(10.0 + 2.0 / 0.5)
    # fully used pilots: the rest as measured; two nodes add up
    assert project(1.0, [(100, 36.0, 2), (10, 360.0, 1)], used=7.0, held=7.0) == pytest.approx(1.0 + 2.0 + 1.0)
    # an unmeasured node (mean None) and a node with nothing left add nothing
    assert project(3.0, [(50, None, 4), (0, 99.0, 8)], used=1.0, held=1.0) == pytest.approx(3.0)
    # nothing held yet: use counts as 1; barely used pilots: divided by MIN_USE at most
    assert project(0.0, [(3600, 1.0, 1)], used=0.0, held=0.0) == pytest.approx(1.0)
    assert project(0.0, [(3600, 1.0, 1)], used=0.0, held=10.0) == pytest.approx(1.0 / MIN_USE)
    # a use measured over 1 (members' time counted beside a pilot's start) counts as 1
    assert project(0.0, [(3600, 1.0, 1)], used=20.0, held=10.0) == pytest.approx(1.0)


# -- real runs through the CLI ---------------------------------------------------------------

SWEEP = """name: sweep
budget: {{coreHours: {budget}}}
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: sleep 0.2
"""


def test_a_budget_smaller_than_the_sweep_halts_and_status_agrees_with_the_journal(tmp_path, write):
    # 2 slots pass 0.0001 core-hours (0.36 core-seconds) in 0.18 s; the sweep needs 20 s
    wf = write(SWEEP.format(budget=0.0001, n=200))
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    no_traceback(err)
    assert rc == 1, err
    recs = read_journal(run)
    halts = [r for r in recs if r["e"] == "halt"]
    assert len(halts) == 1 and halts[0]["why"].startswith("halted: the rest needs ~"), halts
    assert "of the budget's 0.0001 are left" in halts[0]["why"] and halts[0]["coreHours"]["budget"] == 0.0001
    assert halts[0]["coreHours"]["spent"] >= 0.0001 or halts[0]["coreHours"]["projected"] > 0.0001
    ends = [r for r in recs if r["e"] == "end"]
    assert len(ends) < 200  # (the halt came before the sweep's end: no member starts after it)
    snap = _state(run)
    b = snap["budget"]
    assert b["limit"] == 0.0001 and b["spent"] >= 0.0001
    assert b["spent"] == pytest.approx(_spent_from_journal(run, b["at"]), abs=1e-6)
    assert b["projected"] >= b["spent"]
    rc, text, err = run_cli("status", run, cwd=tmp_path)
    assert rc == 0, err
    assert halts[0]["why"] in text
    assert "spent, ~" in text and "projected of a budget of 0.0001" in text
    rc, doc, err = run_cli("status", run, "--json", cwd=tmp_path)
    assert rc == 0, err
    assert json.loads(doc)["budget"]["spent"] == b["spent"]
    assert "then: pwe resume --budget LARGER" in text
    # a resume weighs the same budget again and halts at once; a bad --budget makes nothing
    rc, out, err = run_cli("resume", run, "--budget", "0", cwd=tmp_path)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--budget" in err and "give core-hours" in err, err
    rc, out, err = run_cli("resume", run, cwd=tmp_path)
    assert rc == 1 and "--budget LARGER" in err, err
    assert len([r for r in read_journal(run) if r["e"] == "halt"]) == 2
    # a larger one goes on to the end
    rc, out, err = run_cli("resume", run, "--budget", "10000", cwd=tmp_path)
    assert rc == 0, err
    assert _state(run)["budget"]["limit"] == 10000 and _state(run)["totals"]["done"] == 200


def test_a_budget_that_fits_ends_ok_with_less_spent(tmp_path, write):
    wf = write(SWEEP.format(budget=10000, n=6))
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    assert not [r for r in read_journal(run) if r["e"] == "halt"]
    b = _state(run)["budget"]
    assert 0 < b["spent"] < 10000 and b["limit"] == 10000
    assert b["spent"] == pytest.approx(_spent_from_journal(run, b["at"]), abs=1e-6)
    rc, text, err = run_cli("status", run, cwd=tmp_path)
    assert "projected of a budget of 10,000" in text and "succeeded" in text


def test_a_hosts_budget_halts_the_run_with_the_hosts_name(tmp_path, write):
    write("hosts:\n  mine:\n    protocol: local\n    cores_per_node: 2\n    budget: {coreHours: 0.0001}\n",
          "hosts.yaml")
    wf = write("name: h\nnodes:\n  a:\n    parameters: {i: {range: [0, 200]}}\n    run: sleep 0.2\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--host", "mine", "--run-dir", run, cwd=tmp_path)
    no_traceback(err)
    assert rc == 1, err
    halt = next(r for r in read_journal(run) if r["e"] == "halt")
    assert "of the budget's 0.0001 on host 'mine' are left" in halt["why"] and halt["coreHours"]["host"] == "mine"
    b = _state(run)["budget"]
    assert b["limit"] is None and b["hosts"]["mine"]["limit"] == 0.0001


def _ll(tmp_path, budget: float, max_pilots: int = 1):
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  ll:\n    protocol: loadleveler\n    cores_per_node: 4\n"
                                         f"    max_nodes: 1\n    max_pilots: {max_pilots}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: llb\nbudget: {{coreHours: {budget}}}\nnodes:\n  a:\n    parameters: {{i: {{range: [0, 12]}}}}"
                  "\n    run: 'true'\n    scheduling: {maxWallTime: 5}\n")
    env = {"PATH": f"{LLEMU}{os.pathsep}{os.environ['PATH']}", "LLEMU_DIR": str(tmp_path / "llemu")}
    return run_cli("run", wf, "--host", "ll", "--run-dir", tmp_path / "run", cwd=tmp_path, env=env)


def test_a_batch_pilot_that_would_pass_the_budget_is_not_submitted(tmp_path):
    # a pilot job of 4 cores x 5 minutes costs 0.33 core-hours: more than the budget
    rc, out, err = _ll(tmp_path, 0.2)
    no_traceback(err)
    assert rc == 1, err
    recs = read_journal(tmp_path / "run")
    assert not [r for r in recs if r["e"] == "pilot"]
    notes = [r["what"] for r in recs if r["e"] == "note" and "no pilot is submitted on 'll'" in r["what"]]
    assert len(notes) == 1 and "it would cost 0.33 core-hours, 0.2 of the budget's 0.2 are left" in notes[0]
    halt = next(r for r in recs if r["e"] == "halt")
    assert halt["why"] == f"halted: {notes[0]}"
    rc, text, err = run_cli("status", tmp_path / "run", cwd=tmp_path)
    assert notes[0] in text


def test_batch_pilots_within_the_budget_run_the_sweep(tmp_path):
    # room for one pilot job (0.33 core-hours) and not two, whatever the feed asks for
    rc, out, err = _ll(tmp_path, 0.5, max_pilots=3)
    assert rc == 0, err
    recs = read_journal(tmp_path / "run")
    pilots = [r for r in recs if r["e"] == "pilot"]
    assert pilots and sum(p["slots"] * p["wall"] / 60 for p in pilots) <= 0.5
    b = _state(tmp_path / "run")["budget"]
    assert b["committed"] <= 0.5 and b["spent"] < 0.5


# -- the submission check as a unit over the real lanes and ledger ---------------------------

def test_allows_counts_a_live_batch_pilot_for_its_walltime_and_a_gone_one_for_its_time(tmp_path, write):
    from pwe.engine.loop import Engine
    from pwe.runstate.journal import Journal
    from pwe.runstate.state import RunState

    write("hosts:\n  ll:\n    protocol: loadleveler\n    cores_per_node: 4\n    max_nodes: 1\n"
          "    budget: {coreHours: 3}\n", "hosts.yaml")
    wf = write("name: u\nbudget: {coreHours: 2}\nnodes:\n  a:\n    run: 'true'\n")
    engine = Engine.create(wf, host="ll", run_dir=tmp_path / "run", hosts_file=tmp_path / "hosts.yaml")
    engine.ledger.open(RunState(engine.plan), Journal(tmp_path / "run" / "journal.jsonl"))
    budget, lane = engine.budget, engine.lanes["ll"]
    record, now = engine.ledger.take, time.time()
    assert budget.allows(lane, 2.0) and not budget.allows(lane, 2.01)
    # a live pilot of 4 slots, 15 minutes of walltime, submitted 3 minutes ago: 1 core-hour committed
    record({"e": "pilot", "p": "p1", "job": "j1", "host": "ll", "lane": "ll", "slots": 4, "batch": "loadleveler",
            "wall": 15.0, "t": now - 180})
    assert budget.allows(lane, 1.0) and not budget.allows(lane, 1.01)
    engine.journal.flush()
    notes = [r["what"] for r in read_journal(tmp_path / "run") if r["e"] == "note"]
    assert len(notes) == 2 and "2.0 of the budget's 2 are left (0 held" in notes[0], notes  # (each refusal once)
    assert "it would cost 1.0 core-hours, 1.0 of the budget's 2 are left (1.0 held or committed)" in notes[1], notes
    # gone after 6 minutes: it held 0.4 core-hours
    record({"e": "pilot_gone", "p": "p1", "why": "exited", "t": now - 180 + 360})
    assert budget.allows(lane, 1.6) and not budget.allows(lane, 1.61)
    spent, committed = budget.held(now)
    assert spent[""] == pytest.approx(4 * 360) and committed["ll"] == pytest.approx(4 * 360)
    figures = budget.figures(now)
    assert figures["spent"] == pytest.approx(0.4) and figures["hosts"]["ll"]["limit"] == 3
    engine.journal.close()


# -- bad input of the hosts key --------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", ".nan", ".inf", "1e400", "'x'", "{}", "[1]", "0.0"])
def test_a_bad_hosts_budget_is_one_line_naming_the_hosts_file(tmp_path, write, value):
    write(f"hosts:\n  h:\n    protocol: local\n    budget:\n      coreHours: {value}\n", "hosts.yaml")
    wf = write("name: w\nnodes:\n  a:\n    run: 'true'\n")
    for cmd in (["validate", wf], ["run", wf, "--host", "h"]):
        rc, out, err = run_cli(*cmd, "--hosts", tmp_path / "hosts.yaml", cwd=tmp_path)
        no_traceback(err)
        assert rc == 2, (cmd, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "hosts.yaml:5" in lines[0] and "coreHours" in lines[0], err
    assert not (tmp_path / "pwe-runs").exists() or not any((tmp_path / "pwe-runs").iterdir())


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "x", "1e400", ""])
def test_a_bad_budget_option_is_one_line(tmp_path, value):
    for cmd in ("resume", "retry"):
        rc, out, err = run_cli(cmd, "no-such-run", "--budget", value, cwd=tmp_path)
        no_traceback(err)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "--budget" in err, err


@pytest.mark.parametrize("text", ["    budget: 5\n", "    budget: {coreHour: 5}\n", "    budget: {coreHours: 5, x: 1}\n"])
def test_a_hosts_budget_of_the_wrong_shape_is_refused(tmp_path, write, text):
    write("hosts:\n  h:\n    protocol: local\n" + text, "hosts.yaml")
    wf = write("name: w\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("validate", wf, "--hosts", tmp_path / "hosts.yaml", cwd=tmp_path)
    no_traceback(err)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "hosts.yaml:4" in err and "budget" in err, err


# -- pwe plan --estimate ----------------------------------------------------------------------

def test_plan_estimate_runs_a_sample_of_each_node_and_leaves_nothing(tmp_path, write):
    wf = write("name: est\nbudget: {coreHours: 100}\nnodes:\n  a:\n    parameters: {i: {range: [0, 40]}}\n"
               "    run: sleep 0.05\n  b:\n    after: [a]\n    parameters: {i: {range: [0, 40]}}\n"
               "    run: 'true'\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    rc, out, err = run_cli("plan", wf, "--estimate", "--sample", "2", "--sample-timeout", "300", "--json",
                           cwd=tmp_path, env={"TMPDIR": str(scratch)})
    assert rc == 0, err
    est = json.loads(out)["estimate"]
    assert est["estimate"] is True and est["budget"] == 100 and est["unmeasured"] == []
    assert all(n["sampled"] >= 2 and n["members"] == 40 and n["cores"] == 1 for n in est["nodes"].values()), est
    a = est["nodes"]["a"]
    # (the mean is shown rounded to the millisecond, the core-hours from the mean itself)
    assert a["coreHours"] == pytest.approx(40 * a["mean"] / 3600, abs=40 * 0.0005 / 3600 + 1e-6) and a["mean"] >= 0.05
    assert est["coreHours"] == pytest.approx(sum(n["coreHours"] for n in est["nodes"].values()), abs=1e-5)
    assert list(scratch.iterdir()) == [] and not (tmp_path / "pwe-runs").exists()  # (the scratch run removed)
    rc, text, err = run_cli("plan", wf, "--estimate", "--members", "0", cwd=tmp_path, env={"TMPDIR": str(scratch)})
    assert rc == 0 and "estimate (not a measurement" in text and "of a budget of 100" in text, err


def test_plan_estimate_starts_only_the_sample_of_each_node(tmp_path, write):
    # --sample N runs N members of a node, not the node: every member appends to a ledger
    # outside the scratch run; each node of 30 shows exactly its 3 there
    ledger = tmp_path / "ledger"
    wf = write("name: est\nproperties: {ledger: '%s'}\nnodes:\n  a:\n    parameters: {i: {range: [0, 30]}}\n"
               "    run: echo \"$PWE_NODE $PWE_MEMBER\" >> {{ ledger }}\n  b:\n    after: [a]\n"
               "    parameters: {i: {range: [0, 30]}}\n    run: echo \"$PWE_NODE $PWE_MEMBER\" >> {{ ledger }}\n"
               % ledger)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    rc, out, err = run_cli("plan", wf, "--estimate", "--sample", "3", "--sample-timeout", "300", "--json",
                           cwd=tmp_path, env={"TMPDIR": str(scratch)})
    assert rc == 0, err
    est = json.loads(out)["estimate"]
    lines = ledger.read_text().splitlines()
    ran = {n: sorted(int(ln.split()[1]) for ln in lines if ln.split()[0] == n) for n in ("a", "b")}
    assert {n: len(set(ms)) for n, ms in ran.items()} == {"a": 3, "b": 3} and len(lines) == 6, lines
    assert all(n["sampled"] == 3 and n["members"] == 30 for n in est["nodes"].values()), est
    assert est["unmeasured"] == []


@pytest.mark.parametrize("opt", [["--sample", "0"], ["--sample", "-1"], ["--sample", "1e12"], ["--sample", "x"],
                                 ["--sample-timeout", "nan"], ["--sample-timeout", "0"], ["--sample-timeout", "inf"]])
def test_plan_estimate_refuses_bad_sizes_in_one_line(tmp_path, write, opt):
    wf = write("name: est\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("plan", wf, "--estimate", *opt, cwd=tmp_path)
    no_traceback(err)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and opt[0] in err, err
    assert not (tmp_path / "pwe-runs").exists()
