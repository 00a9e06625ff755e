"""pwe run FILE --simulate (issue 48 item 3): the engine, the feed and the pilots run, no
payload does. The members' own ledger stays empty; the halt the run would reach is
reached and said; durations come from the newest earlier run that measured them; a
rehearsal lends nothing and records no durations."""

from __future__ import annotations

import json

import pytest

from helpers import no_traceback, one_line_error, read_journal, run_cli, status

from pwe.engine.simulate import Rehearsal, _share, fail_option
from pwe.base.errors import InputError

WF = """\
name: rehearse
halt: {{failed: 4}}
nodes:
  sim:
    parameters: {{mesh: [coarse, fine], seed: {{range: [0, 10]}}}}
    products: ["out/{{{{ mesh }}}}-{{{{ seed }}}}.txt"]
    run: >-
      echo "start sim $PWE_MEMBER" >> {ledger}; mkdir -p "$PWE_WORKSPACE/out";
      touch "$PWE_WORKSPACE"/out/{{{{ mesh }}}}-{{{{ seed }}}}.txt
"""


def test_a_rehearsal_runs_no_payload_and_reaches_the_halt_it_would(tmp_path, write):
    ledger = tmp_path / "ledger"
    wf = write(WF.format(ledger=ledger))
    run = tmp_path / "pwe-runs" / "sim1"
    rc, out, err = run_cli("run", wf, "--simulate", "--duration", "0.05", "--fail", "mesh=fine", "--cores", "2",
                           "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    no_traceback(err)
    assert not ledger.exists() and not (tmp_path / "out").exists(), "no payload may run in a rehearsal"
    assert "(simulated: no payload ran)" in out and "halted: 4 of 20 failed, budget 4" in err, (out, err)
    assert "pwe --simulate: this member fails (--fail mesh=fine)" in err
    st = status(run)
    assert st["phase"].startswith("simulated: halted: 4 of 20 failed") and st["simulated"]["fail"] == [["mesh=fine",
                                                                                                        100.0, "exit"]]
    assert st["totals"]["done"] >= 1  # (coarse members: their products are not looked for)
    rc, out, err = run_cli("runs", "--json", cwd=tmp_path)
    assert json.loads(out)[0]["state"].startswith("simulated: ")
    # it lends nothing, and leaves no durations for later runs' estimates
    assert not (run / "reusable.json").exists() and not (run / "durations.json").exists()
    # a real run after it reuses nothing of it, and runs its payload
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "pwe-runs" / "real", cwd=tmp_path,
                           timeout=300)
    assert rc == 0, err
    assert len(ledger.read_text().splitlines()) == 20
    assert not [r for r in read_journal(tmp_path / "pwe-runs" / "real") if r["e"] == "reused"]


def test_durations_come_from_the_newest_earlier_run_that_measured_them(tmp_path, write):
    wf = write("name: timed\nnodes:\n  a:\n    parameters: {i: [0, 1]}\n    run: sleep 0.3\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "pwe-runs" / "r1", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    from pwe.planning.plan import plan_workflow

    plan = plan_workflow(wf)
    r = Rehearsal(plan, "x", tmp_path / "pwe-runs" / "r2", {"duration": 7, "fail": []})
    assert 0.3 <= r.seconds("a") < 2.0, r.earlier  # (measured: about 0.3 s, not the --duration)
    assert r.task("a", 0) == {"cmd": f"sleep {r.seconds('a'):g}"}


def test_a_share_fails_the_same_members_every_time():
    plan = type("P", (), {"nodes": {"a": type("N", (), {"space": type("S", (), {
        "names": ["i"], "values_of": staticmethod(lambda i: {"i": i})})()})()}, "workflow": type("W", (), {
            "name": "w"})()})()
    r = Rehearsal.__new__(Rehearsal)
    r.plan, r.run_id, r.earlier, r.duration = plan, "run-1", {}, 1.0
    r.fails = [("i>=0", 30.0, __import__("pwe.planning.conditions", fromlist=["parse"]).parse("i>=0", {"i"}), "exit")]
    chosen = [i for i in range(2000) if r.failing("a", i)]
    assert 450 <= len(chosen) <= 750  # (30% of 2,000, give or take)
    assert chosen == [i for i in range(2000) if r.failing("a", i)]  # the same ones again
    assert all(0 <= _share("run-1", "a", i) < 100 for i in range(100))


@pytest.mark.parametrize("args, said", [
    (["--fail", "mesh=fine"], "give --simulate too"), (["--duration", "2"], "give --simulate too"),
    (["--simulate", "--fail", "mesh=fine=0%"], "over 0%"), (["--simulate", "--fail", "mesh=fine=101%"], "at most 100%"),
    (["--simulate", "--fail", ""], "no condition"), (["--simulate", "--fail", "nope=3"], "no field 'nope'"),
    (["--simulate", "--duration", "-1"], "--duration"), (["--simulate", "--duration", "nan"], "--duration"),
    (["--simulate", "--reuse-from", "."], "reuses nothing"),
    (["--simulate", "--fail", "mesh=fine@segv"], "one of exit, oom, walltime, not 'segv'"),
])
def test_bad_rehearsal_options_are_one_line_and_make_no_run(tmp_path, write, args, said):
    wf = write("name: bad\nnodes:\n  sim:\n    parameters: {mesh: [a, fine]}\n    run: 'true'\n")
    err = one_line_error(*run_cli("run", wf, *args, cwd=tmp_path))
    assert said in err, err
    assert not (tmp_path / "pwe-runs").exists() or not any((tmp_path / "pwe-runs").iterdir())


def test_the_fail_option_reads_its_share_and_reason():
    assert fail_option("mesh=fine") == ["mesh=fine", 100.0, "exit"]
    assert fail_option("mesh=fine=25%") == ["mesh=fine", 25.0, "exit"]
    assert fail_option("T>3; node=a=0.5%") == ["T>3; node=a", 0.5, "exit"]
    assert fail_option("mesh=fine=25%@oom") == ["mesh=fine", 25.0, "oom"]
    assert fail_option("mesh=fine@walltime") == ["mesh=fine", 100.0, "walltime"]
    with pytest.raises(InputError):
        fail_option("mesh=fine=1000%")


def test_a_simulated_oom_is_retried_with_more_memory_as_a_real_one_would_be(tmp_path, write):
    """--fail 'mesh=fine@oom': the fine members end with reason oom (no payload ran), so
    retry: {on: [oom], grow: ...} acts: each retry asks twice the memory (the trace), and
    they fail for good after three attempts; the coarse ones are done."""
    ledger = tmp_path / "ledger"
    wf = write("name: rehearse\nnodes:\n  sim:\n    parameters: {mesh: [coarse, fine]}\n"
               f"    run: echo ran >> {ledger}\n"
               "    scheduling: {memoryPerMember: 100}\n"
               "    retry: {attempts: 3, on: [oom], grow: {memoryPerMember: 2}}\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--simulate", "--duration", "0.05", "--fail", "mesh=fine@oom", "--run-dir", run,
                           cwd=tmp_path, timeout=300)
    assert rc == 1, err
    assert not ledger.exists()
    ends = [r for r in read_journal(run) if r["e"] == "end" and r["m"] == 1]
    assert [r.get("reason") for r in ends] == ["oom"] * 3, ends
    assert all("a simulated oom" in r["why"] for r in ends)
    asked = [r.get("mem", 100) for r in read_journal(run) if r["e"] == "assign" and r["m"] == 1]
    assert asked == [100, 200, 400], asked
    assert [r["rc"] for r in read_journal(run) if r["e"] == "end" and r["m"] == 0] == [0]
