"""pwe set RUN [-q QUERY] KEY=VALUE (issue 48 item 2): what members ask for from their next
attempt on. On a live run (its engine takes the request in at once) and on one whose engine
is gone (the next engine takes it before it hands out a member). The members' own ledger
shows what each attempt ran with."""

from __future__ import annotations

import json

import pytest

from helpers import no_traceback, one_line_error, read_journal, run_cli, start_run, status, wait_for

GATED = """\
name: setting
nodes:
  sim:
    parameters: {{i: {{range: [0, 6]}}}}
    scheduling: {{memoryPerMember: 100, maxWallTimePerMember: 10}}
    run: >-
      echo "start sim $PWE_MEMBER $PWE_ATTEMPT FOO=$FOO WALL=$PWE_WALLTIME_MINUTES" >> {ledger};
      while [ ! -e {gate} ]; do sleep 0.05; done
"""


def _said(ledger):
    return {int(w[2]): dict(x.split("=", 1) for x in w[4:]) for w in map(str.split, ledger.read_text().splitlines())}


def test_a_live_run_takes_the_change_for_what_has_not_started(tmp_path, write):
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    wf = write(GATED.format(ledger=ledger, gate=gate))
    run = tmp_path / "run"
    proc = start_run(wf, tmp_path, "--cores", "1", "--run-dir", run)
    try:
        wait_for(lambda: ledger.exists() and ledger.read_text().count("start") >= 1, what="the first member")
        first = int(ledger.read_text().split()[2])
        rc, out, err = run_cli("set", run, "env.FOO=bar", "maxWallTimePerMember=7", "--json", cwd=tmp_path)
        assert rc == 0, err
        said = json.loads(out)
        # (one core: one runs; the rest queued on the pilot or waiting: the queued ones were
        # handed to it with their tasks already, so they keep what they asked too)
        assert said["taken"] is True and said["running"] >= 1 and said["running"] + said["later"] == 6, said
        gate.write_text("")
        proc.wait(timeout=120)
    finally:
        gate.write_text("")
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    got = _said(ledger)
    assert got[first] == {"FOO": "", "WALL": "10"}  # started before the set: kept what it asked
    changed = [i for i, env in got.items() if env == {"FOO": "bar", "WALL": "7"}]
    assert len(changed) == said["later"] and set(got) == set(range(6)), got
    rec = next(r for r in read_journal(run) if r["e"] == "set")
    assert rec["values"] == {"env": {"FOO": "bar"}, "maxWallTimePerMember": 7.0} and rec["only"] is None
    rc, out, err = run_cli("trace", run, "--format", "json", cwd=tmp_path)
    walls = {json.loads(line)["member"]: json.loads(line)["asked_walltime_min"] for line in out.splitlines()}
    assert walls[first] == 10 and all(walls[i] == 7.0 for i in changed)


def test_a_change_left_while_no_engine_runs_is_taken_by_the_next(tmp_path, write):
    ledger = tmp_path / "ledger"
    wf = write(f"""\
name: offline
nodes:
  sim:
    parameters: {{mesh: [coarse, fine], seed: [0, 1, 2]}}
    scheduling: {{memoryPerMember: 64}}
    run: >-
      echo "start sim $PWE_MEMBER $PWE_ATTEMPT FOO=$FOO" >> {ledger};
      [ {{{{ mesh }}}} != fine ] || [ "$FOO" = fixed ] || exit 3
""")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    rc, out, err = run_cli("set", run, "-q", "mesh=fine", "env.FOO=fixed", "memoryPerMember=128", cwd=tmp_path)
    assert rc == 0 and "no engine runs it; the change waits" in out, (out, err)
    rc, out, err = run_cli("retry", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    assert status(run)["totals"]["done"] == 6
    rc, out, err = run_cli("show", run, "-q", "mesh=fine", "--json", cwd=tmp_path)
    assert all(m["set"] == {"env": {"FOO": "fixed"}, "memoryPerMember": 128} for m in json.loads(out))
    rc, out, err = run_cli("explain", run, "sim:4", "--json", cwd=tmp_path)
    assert json.loads(out)["asks"]["memory_mb"] == 128
    assert not list((run / "control").glob("pilot-*.json")), "the request, taken, is gone"
    # what ran with a value pwe set gave its environment is lent to no later run (its key does
    # not say it); the rest is
    before = len(ledger.read_text().splitlines())
    rc, out, err = run_cli("run", wf, "--reuse-from", run, "--run-dir", tmp_path / "again", cwd=tmp_path, timeout=300)
    assert rc == 1, err
    again = [w for w in map(str.split, ledger.read_text().splitlines()[before:])]
    assert sorted(int(w[2]) for w in again) == [3, 4, 5], again  # the fine ones ran (and fail without FOO)
    rec = next(r for r in read_journal(tmp_path / "again") if r["e"] == "reused")
    assert rec["r"] == [[0, 3, 0]], rec


@pytest.mark.parametrize("args, said", [
    ([], "at least one KEY=VALUE"), (["memory=3"], "no key 'memory'"), (["memoryPerMember=0"], "memoryPerMember"),
    (["memoryPerMember=1e9"], "ASCII digits"), (["memoryPerMember=99999999"], "has"),
    (["threads=-1"], "threads"), (["gpus=nan"], "gpus"), (["maxWallTimePerMember=inf"], "maxWallTimePerMember"),
    (["env.1X=a"], "name is letters"), (["env.X=" + "a" * 70_000], "at most 65,536 characters"), (["novalue"], "write KEY=VALUE"),
    (["-q", "", "gpus=0"], "no condition"), (["-q", "node=zzz", "gpus=0"], "selects no member"),
    (["retries=100000000000000000000000"], "retries"),
])
def test_bad_input_is_one_line_and_nothing_is_left(tmp_path, write, args, said):
    wf = write("name: bad\nnodes:\n  a:\n    parameters: {i: [0, 1]}\n    run: 'true'\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    err = one_line_error(*run_cli("set", tmp_path / "run", *args, cwd=tmp_path))
    assert said in err, err
    no_traceback(err)
    assert not (tmp_path / "run" / "control").exists() or not list((tmp_path / "run" / "control").iterdir())


def test_the_engine_checks_a_requests_values_again():
    from pwe.planning.setvalues import checked

    assert checked(None, {"memoryPerMember": 200, "env": {"A": "b"}, "maxWallTimePerMember": 7.5}) == {
        "memoryPerMember": 200, "env": {"A": "b"}, "maxWallTimePerMember": 7.5}
    for bad in ({}, None, [], {"memoryPerMember": "200"}, {"memoryPerMember": True}, {"env": {"A": 3}},
                {"env": {"1A": "x"}}, {"env": {"A": "x\x00"}}, {"nope": 1}, {"gpus": float("nan")},
                {"retries": 10 ** 30}):
        with pytest.raises(ValueError):
            checked(None, bad)


def test_priority_sends_the_members_it_names_first(tmp_path, write):
    """Eight members fail their first attempt; pwe set gives member 3 priority 9 and members
    6 and 7 priority 5; pwe retry runs the eight again on one slot. They start in that
    order: 3, then 6 and 7, then the rest in their node's order (the members' own ledger)."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  one:\n    protocol: local\n    cores_per_node: 1\n")
    ledger = tmp_path / "ledger"
    wf = write("name: prio\ndefaults: {host: one}\nnodes:\n  a:\n    parameters: {i: {range: [0, 8]}}\n"
               f"    run: 'echo \"$PWE_MEMBER $PWE_ATTEMPT\" >> {ledger}; [ $PWE_ATTEMPT -gt 1 ]'\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--hosts", tmp_path / "hosts.yaml", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    for query, p in (("i>=6", "5"), ("i==3", "9")):
        rc, out, err = run_cli("set", run, "-q", query, f"priority={p}", cwd=tmp_path)
        assert rc == 0, err
    rc, out, err = run_cli("retry", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    second = [int(w[0]) for w in map(str.split, ledger.read_text().splitlines()) if w[1] == "2"]
    assert second == [3, 6, 7, 0, 1, 2, 4, 5], second


@pytest.mark.parametrize("value", ["-1", "1001", "x", "1.5", "", "\u00b2", "9" * 5000, "nan"])
def test_a_priority_out_of_range_is_one_line(tmp_path, write, value):
    wf = write("name: bad\nnodes:\n  a:\n    parameters: {i: [0, 1]}\n    run: 'true'\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    err = one_line_error(*run_cli("set", tmp_path / "run", f"priority={value}", cwd=tmp_path))
    assert "priority" in err, err
