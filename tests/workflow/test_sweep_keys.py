"""The keys of a big sweep (halt, budget, retry, maxLosses): each bad value is one line
naming file:line and what to give, exit status 2, nothing made; the XML form says the
same as the YAML form; retry by why an attempt ended, each retry asking for more."""

from __future__ import annotations

import pytest

from helpers import call_cli, no_traceback, pwe, read_journal, run_cli, show

BAD = [
    # (the YAML under the workflow, the line it is on, a phrase of the message)
    ("halt: {failed: 150%}", 2, "at most 100%"),
    ("halt: {failed: 0%}", 2, "over 0%"),
    ("halt: {failed: -4}", 2, "give 1 or more"),
    ("halt: {failed: .nan}", 2, "a percentage"),
    ("halt: {failed: ten}", 2, "a percentage"),
    ("halt: {failed: 5, when: later}", 2, "'soon' or 'now'"),
    ("budget: {coreHours: 0}", 2, "over 0"),
    ("budget: {coreHours: -5}", 2, "over 0"),
    ("budget: {coreHours: .nan}", 2, "over 0"),
    ("budget: {coreHours: .inf}", 2, "over 0"),
    ("defaults:\n  retry: {attempts: 0}", 3, "at least 1"),
    ("defaults:\n  retry: {attempts: 3, on: [oom, nonsense]}", 3, "oom, walltime, straggler, exit"),
    ("defaults:\n  retry: {attempts: 3, on: [256]}", 3, "0-255"),
    ("defaults:\n  retry: {attempts: 3, on: [-1]}", 3, "0-255"),
    ("defaults:\n  retry: {attempts: 3, grow: {memoryPerMember: 1}}", 3, "over 1"),
    ("defaults:\n  retry: {attempts: 3, grow: {memoryPerMember: 0.5}}", 3, "over 1"),
    ("defaults:\n  retry: {attempts: 3, grow: {memoryPerMember: 1e300}}", 3, "at most 100"),
    ("defaults:\n  retry: {attempts: 1000000000000}", 3, "must be at most 100"),
    ("defaults:\n  retry: {attempts: 3, grow: {maxWallTimePerMember: -2}}", 3, "over 1"),
    ("defaults:\n  retry: {attempts: 3, grow: {maxWallTimePerMember: .nan}}", 3, "over 1"),
    ("defaults:\n  retry: {attempts: 3, grow: {cores: 2}}", 3, "cores"),
    ("defaults:\n  retries: 1\n  retry: {attempts: 2}", 4, "both 'retries' and 'retry'"),
]


@pytest.mark.parametrize("text, line, phrase", BAD, ids=[b[0].replace("\n", " ") for b in BAD])
def test_bad_value_is_one_line(tmp_path, write, text, line, phrase):
    wf = write(f"name: keys\n{text}\nnodes:\n  a: {{run: 'true'}}\n")
    for command in (["validate", wf], ["run", wf, "--run-dir", tmp_path / "run"]):
        rc, out, err = call_cli(*command, cwd=tmp_path)
        assert rc == 2, (command, err)
        no_traceback(err)
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"{wf}:{line}:") and phrase in err, err
    assert not (tmp_path / "run").exists(), "a refused workflow must leave no run directory"


XML = """\
<workflow name="keys">
  <defaults maxLosses="3">
    <retry attempts="3" on="oom walltime 75"><grow memoryPerMember="2" maxWallTimePerMember="1.5"/></retry>
  </defaults>
  <halt failed="10%" when="now"/>
  <budget coreHours="500"/>
  <node id="a" maxLosses="1">
    <run>true</run>
    <retry attempts="2" on="exit"/>
    <halt failed="4"/>
  </node>
</workflow>
"""
YAML = """\
name: keys
defaults:
  maxLosses: 3
  retry: {attempts: 3, on: [oom, walltime, 75], grow: {memoryPerMember: 2, maxWallTimePerMember: 1.5}}
halt: {failed: 10%, when: now}
budget: {coreHours: 500}
nodes:
  a:
    run: 'true'
    maxLosses: 1
    retry: {attempts: 2, on: [exit]}
    halt: {failed: 4}
"""


def test_the_xml_form_says_what_the_yaml_form_says(write):
    from pwe.workflow.load import load_workflow

    x = load_workflow(write(XML, "wf.xml"))[0]
    y = load_workflow(write(YAML, "wf.yaml"))[0]
    assert x == y
    assert x.halt.limit(1000) == 100 and x.nodes["a"].halt.limit(7) == 4
    assert x.defaults.retry.retries("exit", 75) and not x.defaults.retry.retries("exit", 3)
    assert x.nodes["a"].retry.retries("exit", 3) and not x.nodes["a"].retry.retries("oom", 137)


def test_a_percentage_rounds_up_and_is_at_least_one():
    from pwe.workflow.model import Halt

    assert Halt(failed="5%").limit(1000) == 50
    assert Halt(failed="5%").limit(1001) == 51
    assert Halt(failed="0.1%").limit(10) == 1
    assert Halt(failed="100%").limit(7) == 7
    assert Halt(failed=3).limit(2) == 3


RETRY = """\
name: retried
properties: {{ledger: {ledger}}}
nodes:
  sweep:
    parameters: {{i: [0, 1]}}
    scheduling: {{memoryPerMember: 10, maxWallTimePerMember: 2}}
    retry: {{attempts: 3, on: [75], grow: {{memoryPerMember: 2, maxWallTimePerMember: 1.5}}}}
    run: |
      echo "start sweep $PWE_MEMBER $PWE_ATTEMPT $PWE_WALLTIME_MINUTES" >> {{{{ ledger }}}}
      if [ $PWE_MEMBER -eq 0 ] && [ $PWE_ATTEMPT -lt 3 ]; then exit 75; fi
      if [ $PWE_MEMBER -eq 1 ]; then exit 3; fi
"""


def test_retry_on_an_exit_status_asks_for_more_each_time(tmp_path, write):
    ledger = tmp_path / "ledger"
    run = tmp_path / "run"
    rc, out, err = pwe("run", write(RETRY.format(ledger=ledger)), "--cores", "1", "--run-dir", run, cwd=tmp_path)
    assert rc == 1, err
    starts = sorted(tuple(line.split()[1:4]) for line in ledger.read_text().splitlines())
    # member 0 exits 75 (listed): retried up to 3 attempts, the third succeeds; member 1 exits 3 (not listed): once
    assert starts == [("sweep", "0", "1"), ("sweep", "0", "2"), ("sweep", "0", "3"), ("sweep", "1", "1")]
    walls = {line.split()[3]: line.split()[4] for line in ledger.read_text().splitlines() if line.split()[2] == "0"}
    assert walls == {"1": "2", "2": "3", "3": "4.5"}, walls
    assigns = [r for r in read_journal(run) if r["e"] == "assign" and r["m"] == 0]
    assert [(r["a"], r.get("mem"), r.get("wall")) for r in assigns] == [(1, None, None), (2, 20, 3), (3, 40, 4.5)]
    members = {r["member"]: r for r in show(run)}
    assert members[0]["state"] == "done" and members[0]["attempts"] == 3
    assert members[1]["state"] == "failed" and members[1]["attempts"] == 1
    rc, out, err = pwe("trace", run, "--format", "tsv", cwd=tmp_path)
    rows = [dict(zip(out.splitlines()[0].split("\t"), line.split("\t"))) for line in out.splitlines()[1:]]
    asked = [(r["attempt"], r["asked_memory_mb"], r["asked_walltime_min"]) for r in rows if r["member"] == "0"]
    assert asked == [("1", "10", "2"), ("2", "20", "3"), ("3", "40", "4.5")], asked


OOM = """\
name: grows
properties: {{ledger: {ledger}}}
nodes:
  big:
    scheduling: {{memoryPerMember: 100}}
    retry: {{attempts: 2, on: [oom], grow: {{memoryPerMember: 2}}}}
    run: |
      set -e
      echo "start big $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}
      python3 -c "
      import time
      held = []
      for _ in range(15):  # 150 MB in steps, each page touched: past 100 MB, within 200
          held.append(bytearray(10 << 20))
          held[-1][::4096] = b'x' * len(range(0, 10 << 20, 4096))
          time.sleep(0.1)
      time.sleep(1)
      "
      echo "end big $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}
"""


@pytest.mark.parametrize("how", ["as the node gives", "watched"])
def test_a_member_killed_for_memory_is_retried_asking_twice_as_much_and_completes(tmp_path, write, how):
    """Killed past its memoryPerMember (in a cgroup of its own where this machine gives
    one, else watched; PWE_NO_CGROUPS=1: watched), with reason oom; its retry asks twice
    as much and completes."""
    ledger = tmp_path / "ledger"
    run = tmp_path / "run"
    env = {"PWE_NO_CGROUPS": "1"} if how == "watched" else {}
    rc, out, err = run_cli("run", write(OOM.format(ledger=ledger)), "--cores", "1", "--run-dir", run, cwd=tmp_path,
                           timeout=300, env=env)
    assert rc == 0, err
    lines = [line.split() for line in ledger.read_text().splitlines()]
    assert [w for w in lines if w[0] == "start"] == [["start", "big", "0", "1"], ["start", "big", "0", "2"]]
    assert [w for w in lines if w[0] == "end"] == [["end", "big", "0", "2"]]  # (the first never got there)
    recs = read_journal(run)
    ends = [r for r in recs if r["e"] == "end"]
    assert ends[0]["a"] == 1 and ends[0]["reason"] == "oom" and ends[0]["rc"] != 0, ends[0]
    assert ends[1]["a"] == 2 and ends[1]["rc"] == 0 and "reason" not in ends[1], ends[1]
    assigns = [r for r in recs if r["e"] == "assign"]
    assert [(r["a"], r.get("mem")) for r in assigns] == [(1, None), (2, 200)]
    rc, out, err = pwe("trace", run, "--format", "json", cwd=tmp_path)
    import json

    attempts = [json.loads(line) for line in out.splitlines()]
    assert [(r["attempt"], r["reason"], r["asked_memory_mb"]) for r in attempts] == [(1, "oom", 100), (2, "exit", 200)]
