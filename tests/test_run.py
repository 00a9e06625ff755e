"""End to end: `pwe run` and friends on this machine, with real processes.

Every test here starts the real engine (through the CLI in a subprocess, or the Python
API), which starts a real pilot process, which starts real member processes. Nothing is
mocked. Each run lives under the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from pathlib import Path

import pytest
import yaml

from conftest import (EXAMPLES, alive, by_key, cmdline, engine_pid, mdir, most_at_once, no_traceback, pids_matching,
                      pilot_pids, pwe, read_journal, run_cli, show, start_run, status, wait_for)


# -- 1. quickstart -------------------------------------------------------------------------


def test_quickstart_end_to_end(tmp_path):
    wf = EXAMPLES / "quickstart.yaml"
    rc, out, err = pwe("run", wf, cwd=tmp_path)
    assert rc == 0, f"quickstart run failed:\n{out}\n{err}"
    no_traceback(err)
    runs = [p for p in (tmp_path / "pwe-runs").iterdir()]
    assert len(runs) == 1, f"expected one run under ./pwe-runs, found {runs}"
    d = runs[0]
    run_id = d.name
    assert run_id.startswith("quickstart-")
    assert run_id in out + err

    # status, by run id (found under ./pwe-runs of the cwd)
    rc, out, err = pwe("status", run_id, "--json", cwd=tmp_path)
    assert rc == 0, err
    st = json.loads(out)
    assert st["totals"]["done"] == 14
    assert sum(v for k, v in st["totals"].items() if k != "done") == 0
    assert {n: c["done"] for n, c in st["nodes"].items()} == {"prepare": 1, "simulate": 12, "analyze": 1}
    assert st["phase"] == "succeeded"

    # show: members with parameters, state, attempts, exit status and outputs
    rc, out, err = pwe("show", run_id, "--json", cwd=tmp_path)
    assert rc == 0, err
    recs = json.loads(out)
    assert len(recs) == 14
    sims = [r for r in recs if r["node"] == "simulate"]
    assert len(sims) == 12
    seen = set()
    for r in sims:
        p = r["parameters"]
        T, seed = p["temperature"], p["seed"]
        seen.add((T, seed))
        assert r["state"] == "done" and r["attempts"] == 1 and r["exit_status"] == 0, r
        assert r["outputs"] == {"energy": str(T * 3 + seed)}, r
    assert seen == {(T, s) for T in (300, 350, 400) for s in range(4)}
    assert all(r["state"] == "done" for r in recs)

    # logs: that member's stdout
    rc, out, err = pwe("logs", run_id, "simulate[2]", cwd=tmp_path)
    assert rc == 0, err
    assert "T=300 seed=2 steps=1000" in out
    assert "seed=3" not in out and "seed=1" not in out
    rc, out, err = pwe("logs", run_id, "simulat:2", cwd=tmp_path)
    assert rc == 2 and err.strip() == (f"run {run_id} has no member output for node 'simulat' (did you mean "
                                       "'simulate'?); nodes with output: analyze, prepare, simulate"), err

    # the run directory keeps everything
    assert (d / "workflow.yaml").read_bytes() == wf.read_bytes()
    info = json.loads((d / "run.json").read_text())
    assert info["run_id"] == run_id
    journal = read_journal(d)
    assert sum(1 for r in journal if r["e"] == "end") == 14
    for name in ("tasks.jsonl", "events.jsonl", "pilot.log"):
        assert (d / "pilots" / "p1" / name).is_file(), f"pilots/p1/{name} missing"
    events = [json.loads(line) for line in (d / "pilots" / "p1" / "events.jsonl").read_text().splitlines()]
    assert sum(1 for e in events if e["k"] == "end") == 14
    for i in range(12):
        T, seed = (300, 350, 400)[i // 4], i % 4
        md = mdir(d, "simulate", i)
        assert (md / "stdout").read_text() == f"T={T} seed={seed} steps=1000\n"
        assert not (md / "stderr").exists(), "an empty stderr is not kept"
        assert (md / "outputs").read_text().strip() == f"energy={T * 3 + seed}"
    assert (mdir(d, "prepare", 0) / "stdout").read_text() == "preparing 1000 steps\n"
    assert (mdir(d, "analyze", 0) / "stdout").read_text() == "analyzing 1000 steps of 12 simulations\n"
    assert not (mdir(d, "analyze", 0) / "stderr").exists()


# -- 2. member environment -------------------------------------------------------------------

ENV_WF = """\
name: envcheck
nodes:
  probe:
    parameters:
      myName: ["hello world", plain]
      level: [1, 2]
    run: |
      env | grep -E '^(PWE_|OMP_NUM_THREADS)' | sort
      echo "CWD=$(pwd)"
      echo "me=$PWE_MEMBER" >> "$PWE_OUTPUTS"
    scheduling: {ranksPerMember: 1, threadsPerRank: 2, maxWallTimePerMember: 3}
"""


def test_member_environment(tmp_path, write):
    wf = write(ENV_WF)
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    run_id = json.loads((run / "run.json").read_text())["run_id"]
    expected = [("hello world", 1), ("hello world", 2), ("plain", 1), ("plain", 2)]
    cwds = set()
    recs = by_key(show(run))
    for i, (name, level) in enumerate(expected):
        md = mdir(run, "probe", i).resolve()
        env = dict(line.split("=", 1) for line in (md / "stdout").read_text().splitlines() if "=" in line)
        assert env.get("PWE_RUN_ID") == run_id
        assert env.get("PWE_NODE") == "probe"
        assert env.get("PWE_MEMBER") == str(i)
        assert env.get("PWE_PARAM_MYNAME") == name, env
        assert env.get("PWE_PARAM_LEVEL") == str(level), env
        outputs = Path(env["PWE_OUTPUTS"])
        assert outputs.is_absolute() and outputs.resolve().parent == md, f"PWE_OUTPUTS {outputs} not in {md}"
        assert env.get("PWE_HOST") == "local"
        assert env.get("PWE_RANKS") == "1"
        assert env.get("PWE_THREADS") == "2"
        assert env.get("OMP_NUM_THREADS") == "2"
        assert env.get("PWE_WALLTIME_MINUTES") == "3"
        assert env.get("PWE_ATTEMPT") == "1"
        assert Path(env["CWD"]).resolve() == md, f"member {i} ran in {env['CWD']}, not its own directory {md}"
        cwds.add(env["CWD"])
        assert recs[("probe", i)]["outputs"] == {"me": str(i)}
    assert len(cwds) == 4


# -- 3. the wide graph: every member once, every dependency respected ---------------------------

LEDGER_PAYLOAD = (
    's=$EPOCHREALTIME; echo "$PWE_NODE $PWE_MEMBER ${PWE_PARAM_I:--} ${PWE_PARAM_REP:--} $s $EPOCHREALTIME"'
    " >> {{ ledger }}"
)


def test_wide_graph_order(tmp_path):
    doc = yaml.safe_load((EXAMPLES / "wide.yaml").read_text())
    for node in doc["nodes"].values():
        node["run"] = LEDGER_PAYLOAD
    wf = tmp_path / "wide.yaml"
    wf.write_text(yaml.safe_dump(doc, sort_keys=False))
    ledger = tmp_path / "ledger.txt"
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--set", f"ledger={ledger}", "--run-dir", run, cwd=tmp_path, timeout=60)
    assert rc == 0, err
    rows = [line.split() for line in ledger.read_text().splitlines()]
    assert len(rows) == 2804, f"{len(rows)} member records, expected 2804"
    recs: dict[tuple[str, int], tuple[str, str, float, float]] = {}
    for node, m, i, rep, s, e in rows:
        key = (node, int(m))
        assert key not in recs, f"{node}[{m}] ran more than once"
        recs[key] = (i, rep, float(s), float(e))
    counts: dict[str, int] = {}
    for node, _ in recs:
        counts[node] = counts.get(node, 0) + 1
    assert counts == {"start": 1, "prep": 700, "sim": 1400, "post": 700, "reduce": 2, "final": 1}

    # by parameter values, independently of how pwe numbers members
    by = {}
    for (node, _m), (i, rep, s, e) in recs.items():
        by[(node, i, rep)] = (s, e)
    assert {k for k in by if k[0] == "sim"} == {("sim", str(i), str(r)) for i in range(700) for r in (0, 1)}
    start_end = by[("start", "-", "-")][1]
    bad = []
    for i in range(700):
        si = str(i)
        prep_s, prep_e = by[("prep", si, "-")]
        if prep_s < start_end:
            bad.append(f"prep[i={i}] started before start ended")
        sims = [by[("sim", si, r)] for r in ("0", "1")]
        for r, (s, _) in enumerate(sims):
            if s < prep_e:
                bad.append(f"sim[i={i},rep={r}] started before prep[i={i}] ended")
        post_s, _ = by[("post", si, "-")]
        if post_s < max(e for _, e in sims):
            bad.append(f"post[i={i}] started before both sim[i={i}] ended")
    last_post = max(e for (n, _, _), (_, e) in by.items() if n == "post")
    reduce = [(s, e) for (n, _, _), (s, e) in by.items() if n == "reduce"]
    for s, _ in reduce:
        if s < last_post:
            bad.append("a reduce member started before every post ended")
    final_s = by[("final", "-", "-")][0]
    if final_s < max(e for _, e in reduce):
        bad.append("final started before both reduce ended")
    assert not bad, f"{len(bad)} dependency violations, first: {bad[:5]}"
    st = status(run)
    assert st["totals"]["done"] == 2804 and st["phase"] == "succeeded"


# -- 4. failure isolation --------------------------------------------------------------------

ISOLATION_WF = """\
name: isolation
nodes:
  A:
    parameters: {k: {range: [0, 4]}}
    run: if [ {{ k }} = 2 ]; then echo failing >&2; exit 3; fi; echo a {{ k }}
  B:
    after: [A]
    parameters: {k: {range: [0, 4]}}
    run: echo b {{ k }}
  C:
    after: [B]
    run: echo c
  D:
    run: sleep 0.5; echo d
  E:
    after: [D]
    run: echo e
"""


def test_failure_isolation(tmp_path, write):
    wf = write(ISOLATION_WF)
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 1, f"a failed member must make `pwe run` exit 1, got {rc}\n{err}"
    no_traceback(err)
    recs = by_key(show(run))
    assert recs[("A", 2)]["state"] == "failed" and recs[("A", 2)]["exit_status"] == 3
    for k in (0, 1, 3):
        assert recs[("A", k)]["state"] == "done"
        assert recs[("B", k)]["state"] == "done", recs[("B", k)]
    assert recs[("B", 2)]["state"] == "skipped"
    assert recs[("C", 0)]["state"] == "skipped"
    assert recs[("D", 0)]["state"] == "done" and recs[("E", 0)]["state"] == "done"
    assert not (mdir(run, "B", 2)).exists(), "a skipped member must not run"
    assert not (mdir(run, "C", 0)).exists(), "a skipped member must not run"

    rc, out, err = pwe("show", run, "--state", "failed", "--json", cwd=tmp_path)
    assert rc == 0, err
    failed = json.loads(out)
    assert [(r["node"], r["member"], r["exit_status"]) for r in failed] == [("A", 2, 3)]
    st = status(run)
    assert st["totals"]["failed"] == 1 and st["totals"]["skipped"] == 2 and st["totals"]["done"] == 8
    assert st["phase"] == "finished with failures"


# -- 5. retries ------------------------------------------------------------------------------

RETRY_WF = """\
name: retries
nodes:
  flaky:
    retries: 2
    run: echo "attempt $PWE_ATTEMPT"; echo "err $PWE_ATTEMPT" >&2; test "$PWE_ATTEMPT" = 3
  hopeless:
    retries: 1
    run: echo "try $PWE_ATTEMPT"; exit 5
"""


def test_retries_keep_earlier_attempts(tmp_path, write):
    wf = write(RETRY_WF)
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 1, err  # 'hopeless' never succeeds
    recs = by_key(show(run))
    flaky = recs[("flaky", 0)]
    assert flaky["state"] == "done" and flaky["attempts"] == 3 and flaky["exit_status"] == 0, flaky
    md = mdir(run, "flaky", 0)
    assert (md / "stdout.1").read_text() == "attempt 1\n"
    assert (md / "stdout.2").read_text() == "attempt 2\n"
    assert (md / "stdout").read_text() == "attempt 3\n"
    assert (md / "stderr.1").read_text() == "err 1\n"
    assert (md / "stderr").read_text() == "err 3\n"
    assert not (md / "stdout.3").exists()
    hopeless = recs[("hopeless", 0)]
    assert hopeless["state"] == "failed" and hopeless["attempts"] == 2 and hopeless["exit_status"] == 5, hopeless
    hd = mdir(run, "hopeless", 0)
    assert (hd / "stdout.1").read_text() == "try 1\n" and (hd / "stdout").read_text() == "try 2\n"


# -- 6. pwe retry ----------------------------------------------------------------------------

RERUN_WF = """\
name: rerun
properties: {counts: /nonexistent, marker: /nonexistent}
nodes:
  A:
    parameters: {k: {range: [0, 3]}}
    run: echo x >> {{ counts }}/A.{{ k }}; if [ {{ k }} = 1 ]; then test -e {{ marker }}; fi
  B:
    after: [A]
    parameters: {k: {range: [0, 3]}}
    run: echo x >> {{ counts }}/B.{{ k }}
  C:
    after: [B]
    run: echo x >> {{ counts }}/C
  D:
    run: echo x >> {{ counts }}/D
"""


def test_pwe_retry_reruns_only_failed(tmp_path, write):
    wf = write(RERUN_WF)
    counts = tmp_path / "counts"
    counts.mkdir()
    marker = tmp_path / "marker"
    run = tmp_path / "run"

    def tally():
        return {p.name: len(p.read_text().splitlines()) for p in counts.iterdir()}

    rc, out, err = pwe("run", wf, "--set", f"counts={counts}", "--set", f"marker={marker}", "--run-dir", run,
                       cwd=tmp_path)
    assert rc == 1, err
    assert tally() == {"A.0": 1, "A.1": 1, "A.2": 1, "B.0": 1, "B.2": 1, "D": 1}
    marker.touch()
    rc, out, err = pwe("retry", run, cwd=tmp_path)
    assert rc == 0, f"pwe retry after fixing the cause must succeed:\n{out}\n{err}"
    no_traceback(err)
    assert tally() == {"A.0": 1, "A.1": 2, "A.2": 1, "B.0": 1, "B.1": 1, "B.2": 1, "C": 1, "D": 1}
    recs = show(run)
    assert all(r["state"] == "done" for r in recs), [r for r in recs if r["state"] != "done"]
    assert status(run)["phase"] == "succeeded"


# -- 7. payloads that cannot start -----------------------------------------------------------


def test_payload_not_executable_or_missing(tmp_path, write):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho should not run\n")
    script.chmod(0o644)
    wf = write(f"""\
name: noexec
nodes:
  direct:
    parameters:
      prog: [{script}, ./nope]
    run: "{{{{ prog }}}}"
  viashell:
    parameters:
      prog: [{script}, ./nope]
    run: echo trying; {{{{ prog }}}} --flag "x y"
  fine:
    run: echo fine
""")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 1, err
    no_traceback(err)
    recs = by_key(show(run))
    assert recs[("fine", 0)]["state"] == "done"
    for node in ("direct", "viashell"):
        for i, (code, name, reason) in enumerate(((126, "script.sh", "permission denied"),
                                                   (127, "nope", "no such file"))):
            r = recs[(node, i)]
            assert r["state"] == "failed" and r["exit_status"] == code, r
            rc, out, err = pwe("logs", run, f"{node}[{i}]", cwd=tmp_path)
            assert rc == 0, err
            stderr_part = out.split("stderr (", 1)[1]
            assert name in stderr_part and reason in stderr_part.lower(), \
                f"{node}[{i}]: its stderr does not say why it could not start:\n{out}"
    assert "should not run" not in (mdir(run, "direct", 0) / "stdout").read_text()


# -- 8. a run directory that cannot be made --------------------------------------------------


def test_run_dir_cannot_be_created(tmp_path, write):
    wf = write("name: x\nnodes:\n  a:\n    run: echo hi\n")
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    target = blocker / "run"
    rc, out, err = pwe("run", wf, "--run-dir", target, cwd=tmp_path)
    assert rc == 2, f"exit {rc}\n{err}"
    no_traceback(err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert str(target) in lines[0]
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before, "a failed run left files behind"
    assert blocker.read_text() == "not a directory\n"


# -- 9. shell safety end to end ----------------------------------------------------------------

NASTY = ["a b", "it's", "x; touch PWNED", "$(touch PWNED)", "`touch PWNED`", 'say "hi"', "back\\slash", "*",
         "-n", "{{ 7*7 }}", "$HOME", "", "two\nlines", "tab\there", "ünï ☃", "> PWNED", "| touch PWNED &"]


def test_shell_safety_end_to_end(tmp_path, write):
    doc = {
        "name": "nasty",
        "properties": {"evil": "safe"},
        "nodes": {
            "echoer": {
                "parameters": {"v": NASTY},
                "run": "printf '%s' {{ v }} > got; printf '%s' \"$PWE_PARAM_V\" > env; printf '%s' {{ evil }} > prop",
            }
        },
    }
    wf = write(yaml.safe_dump(doc, allow_unicode=True))
    run = tmp_path / "run"
    evil = "'; touch PWNED; '$(touch PWNED)"
    rc, out, err = pwe("run", wf, "--set", f"evil={evil}", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    for i, v in enumerate(NASTY):
        md = mdir(run, "echoer", i)
        assert (md / "got").read_text(encoding="utf-8") == v, f"member {i}: {v!r} did not arrive as one literal"
        assert (md / "env").read_text(encoding="utf-8") == v
        assert (md / "prop").read_text(encoding="utf-8") == evil
    pwned = list(tmp_path.rglob("PWNED"))
    assert not pwned, f"a value was run as shell code: {pwned}"


# -- 10. no oversubscription -----------------------------------------------------------------


def _packing_run(tmp_path, write, threads: int, cores: int) -> list[tuple[float, float]]:
    ledger = tmp_path / f"ledger-{threads}.txt"
    wf = write(f"""\
name: packing
nodes:
  s:
    parameters: {{k: {{range: [0, 8]}}}}
    run: s=$EPOCHREALTIME; sleep 0.3; echo "$PWE_MEMBER $s $EPOCHREALTIME" >> {ledger}
    scheduling: {{ranksPerMember: 1, threadsPerRank: {threads}}}
""", name=f"pack{threads}.yaml")
    rc, out, err = pwe("run", wf, "--cores", str(cores), "--run-dir", tmp_path / f"run{threads}", cwd=tmp_path)
    assert rc == 0, err
    rows = [line.split() for line in ledger.read_text().splitlines()]
    assert sorted(int(r[0]) for r in rows) == list(range(8))
    return [(float(s), float(e)) for _, s, e in rows]


def test_no_oversubscription(tmp_path, write):
    two = most_at_once(_packing_run(tmp_path, write, threads=2, cores=4))
    assert two <= 2, f"{two} members of 2 threads ran at once on 4 cores"
    assert two == 2, "members of 2 threads on 4 cores never ran two at a time"
    one = most_at_once(_packing_run(tmp_path, write, threads=1, cores=4))
    assert one <= 4, f"{one} members of 1 thread ran at once on 4 cores"
    assert one >= 2, "members of 1 thread on 4 cores never overlapped: packing is broken"


GPU_HOST = "hosts:\n  local: {protocol: local, cores_per_node: 4, gpus_per_node: 2, memory_per_node: 1000}\n"


@pytest.mark.parametrize("visible, devices", [(None, ("0", "1")), ("5,7", ("5", "7"))])
def test_gpus_and_memory_limit_packing(tmp_path, write, visible, devices):
    """4 cores, 2 GPUs, 1000 MB (hosts.yaml beside the workflow): members of one GPU run
    two at a time, each on its own GPU; members of 400 MB run two at a time. Both nodes
    run side by side, so the cores alone would have let four of each run. When the
    allocation's GPUs are named (CUDA_VISIBLE_DEVICES=5,7), members get those names."""
    (tmp_path / "hosts.yaml").write_text(GPU_HOST)
    ledger = tmp_path / "ledger"
    wf = write(f"""\
name: gpus
nodes:
  g:
    parameters: {{k: {{range: [0, 6]}}}}
    run: s=$EPOCHREALTIME; sleep 0.4; echo "g ${{CUDA_VISIBLE_DEVICES:-none}} ${{PWE_GPUS:-none}} $s $EPOCHREALTIME" >> {ledger}
    scheduling: {{gpusPerMember: 1}}
  m:
    parameters: {{k: {{range: [0, 6]}}}}
    run: s=$EPOCHREALTIME; sleep 0.4; echo "m ${{CUDA_VISIBLE_DEVICES:-none}} - $s $EPOCHREALTIME" >> {ledger}
    scheduling: {{memoryPerMember: 400}}
""")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path,
                           env={"CUDA_VISIBLE_DEVICES": visible} if visible else None)
    assert rc == 0, err
    rows = [line.split() for line in ledger.read_text().splitlines()]
    g = [(r[1], r[2], float(r[3]), float(r[4])) for r in rows if r[0] == "g"]
    m = [(float(r[3]), float(r[4])) for r in rows if r[0] == "m"]
    assert len(g) == 6 and len(m) == 6
    assert all(dev in devices and dev == same for dev, same, _, _ in g), g
    assert most_at_once([(s, e) for _, _, s, e in g]) == 2, g
    for dev, _, s, e in g:  # two members at once never share a GPU
        assert not [d for d, _, s2, e2 in g if d == dev and (s2, e2) != (s, e) and s2 < e and s < e2], g
    assert most_at_once(m) == 2, m
    if not visible:
        assert all(r[1] == "none" for r in rows if r[0] == "m")  # no GPU asked, none given


def test_memory_per_member_on_a_host_that_states_no_memory_is_reported(tmp_path, write):
    (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {protocol: local, cores_per_node: 2}\n")
    wf = write("name: m\nnodes:\n  a:\n    host: box\n    run: 'true'\n"
               "    scheduling: {memoryPerMember: 100, account: abc}\n")
    rc, out, err = pwe("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    assert ("warning: node 'a': host 'box' has no batch system; scheduling account not used; it states no "
            "memory_per_node; memoryPerMember not used\n") in err, err


@pytest.mark.parametrize("sched, phrase", [
    ("gpusPerMember: 3", "a member needs 3 GPUs (gpusPerMember) but host 'local' has 2 per node"),
    ("memoryPerMember: 2000", "a member needs 2000 MB (memoryPerMember) but host 'local' has 1000 MB per node"),
    ("gpusPerMember: 1, ranksPerMember: 2, threadsPerRank: 4",
     "a member that asks for GPUs or memory runs on one node, but it needs 8 cores and host 'pair' has nodes of 4"),
])
def test_gpus_or_memory_no_node_has_are_refused_at_plan_time(tmp_path, write, sched, phrase):
    # 'pair': two nodes of 4 cores and 1 GPU (never contacted: this is refused at plan time)
    (tmp_path / "hosts.yaml").write_text(GPU_HOST + "  pair: {protocol: local, nodes: [n1, n2], cores_per_node: 4, "
                                         "gpus_per_node: 1}\n")
    host = "pair" if "ranksPerMember" in sched else "local"
    wf = write(f"name: big\nnodes:\n  a:\n    run: 'true'\n    host: {host}\n    scheduling: {{{sched}}}\n")
    rc, out, err = pwe("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 2 and phrase in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_nodes_on_two_hosts_each_get_their_own_pilot(tmp_path, write):
    """Node 'a' names a one-core host, node 'b' this machine: both run at once, each in a
    pilot of its own host, and 'a' never runs two members at a time."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  small: {protocol: local, cores_per_node: 1}\n"
                                         "  twin: {protocol: local, cores_per_node: 2}\n")
    ledger = tmp_path / "ledger"
    wf = write(f"""\
name: lanes
nodes:
  a:
    host: small
    parameters: {{k: {{range: [0, 4]}}}}
    run: s=$EPOCHREALTIME; sleep 0.3; echo "a $s $EPOCHREALTIME" >> {ledger}
  b:
    host: twin
    parameters: {{j: {{range: [0, 4]}}}}
    run: s=$EPOCHREALTIME; sleep 0.3; echo "b $s $EPOCHREALTIME" >> {ledger}
  c:
    after: [a, b]
    host: small
    run: echo done
""")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    rows = [line.split() for line in ledger.read_text().splitlines()]
    spans = {n: [(float(s), float(e)) for m, s, e in rows if m == n] for n in "ab"}
    assert most_at_once(spans["a"]) == 1 and most_at_once(spans["b"]) == 2, spans
    assert most_at_once(spans["a"] + spans["b"]) == 3, "the two hosts' pilots did not run side by side"
    journal = read_journal(run)
    lanes = {r["p"]: (r["lane"], r["slots"]) for r in journal if r["e"] == "pilot"}
    assert sorted(lanes.values()) == [("small", 1), ("twin", 2)], lanes
    assert {(r["n"], lanes[r["p"]][0]) for r in journal if r["e"] == "assign"} == \
        {("a", "small"), ("b", "twin"), ("c", "small")}
    assert all(r["state"] == "done" for r in show(run))


# -- 11. a member wider than the machine -------------------------------------------------------


def test_member_needs_more_cores_than_host(tmp_path, write):
    wf = write("""\
name: toobig
nodes:
  small:
    run: echo small
  big:
    parameters: {k: [1, 2]}
    run: echo big
    scheduling: {ranksPerMember: 2, threadsPerRank: 2}
""")
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 2, f"exit {rc}\n{err}"
    no_traceback(err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "big" in lines[0] and "needs 4 cores" in lines[0], lines[0]
    assert not (tmp_path / "run").exists(), "nothing may be run (or left behind) for an impossible workflow"


# -- 12. submit, status, cancel ------------------------------------------------------------------


def test_submit_returns_at_once_then_succeeds(tmp_path, write, reaper):
    wf = write("name: later\nnodes:\n  nap:\n    run: sleep 3; echo woke\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    run_id = out.strip()
    assert run_id == json.loads((run / "run.json").read_text())["run_id"]
    # it returned once its engine held the run, not once the run (a member of 3 s) ended
    reaper(run, engine_pid(run))
    out_file = mdir(run, "nap", 0) / "stdout"
    assert status(run)["phase"] == "running" and not (out_file.exists() and out_file.read_text())
    st = wait_for(lambda: (lambda s: s if s["phase"] == "succeeded" else None)(status(run)),
                  what="the submitted run to succeed")
    assert st["totals"]["done"] == 1
    assert (mdir(run, "nap", 0) / "stdout").read_text() == "woke\n"


def test_status_and_cancel_just_after_submit_find_the_engine(tmp_path, write, reaper):
    # pwe submit used to return before its engine had taken the run: a status typed at
    # once said "stopped", and a cancel then cancelled the run beside the starting engine
    wf = write("name: quick\nnodes:\n  nap:\n    parameters: {k: {range: [0, 4]}}\n    run: sleep 20\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--cores", "1", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    pid = engine_pid(run)
    assert pid, "pwe submit returned before its engine held the run"
    reaper(run, pid)
    assert status(run)["phase"] == "running"
    rc, out, err = pwe("cancel", run, "--json", cwd=tmp_path, timeout=120)
    assert rc == 0 and json.loads(out)["cancelled"] is True, (out, err)
    assert not engine_pid(run)
    st = status(run)
    assert st["phase"] == "cancelled" and st["totals"]["done"] == 0, st


def test_cancel_stops_a_submitted_run(tmp_path, write, reaper):
    marker = f"30.{secrets.randbelow(10**9):09d}7"  # a unique `sleep` argument: finds our members, only ours
    wf = write("name: long\nnodes:\n  nap:\n    parameters: {k: {range: [0, 6]}}\n    run: sleep {{ t }}\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--set", f"t={marker}", "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    reaper(run, wait_for(lambda: engine_pid(run), what="the engine's lock"))
    try:
        wait_for(lambda: len(pids_matching(marker)) >= 2, what="the submitted members to start")
        pilots = pilot_pids(run)
        reaper(run, *pilots)
        rc, out, err = pwe("cancel", run, cwd=tmp_path, timeout=120)
        assert rc == 0, err
        no_traceback(err)
        st = status(run)
        assert st["phase"] == "cancelled", st
        assert st["totals"]["done"] == 0 and st["totals"]["cancelled"] >= 4, st
        wait_for(lambda: not pids_matching(marker), what="the member processes to end after cancel")
        wait_for(lambda: not any(alive(p) for p in pilots), what="the pilot to end after cancel")
    finally:
        for p in pids_matching(marker):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- 13. the Python API -----------------------------------------------------------------------


def test_python_api_run_workflow(tmp_path):
    import pwe as api
    from pwe.observe.results import load_state

    res = api.run_workflow(EXAMPLES / "quickstart.yaml", {"nsteps": 5}, run_dir=tmp_path / "run")
    assert res.ok is True
    sims = res.members("simulate")
    assert len(sims) == 12
    for r in sims:
        T, seed = r["parameters"]["temperature"], r["parameters"]["seed"]
        assert r["state"] == "done" and r["attempts"] == 1 and r["exit_status"] == 0
        assert r["outputs"] == {"energy": str(T * 3 + seed)}
    assert (mdir(res.dir, "prepare", 0) / "stdout").read_text() == "preparing 5 steps\n"
    assert "steps=5" in (mdir(res.dir, "simulate", 0) / "stdout").read_text()
    _, state = load_state(res.dir)
    assert state.finished_ok is True
    assert state.totals()[4] == 14


# -- beyond the list: the fast path, walltimes, Ctrl-C, crashes ---------------------------------


def test_direct_exec_of_script_without_shebang(tmp_path, write):
    """The pilot execs a plain payload directly instead of through bash: that must not
    change what it does. bash runs an executable file without a #! line as a shell script."""
    script = tmp_path / "noshebang"
    script.write_text("echo ran without shebang\n")
    script.chmod(0o755)
    wf = write(f"""\
name: fastpath
nodes:
  plain:
    run: {script}
  quoted:
    run: {script} 'x'
""")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    recs = by_key(show(run))
    # through bash (the quoted argument forces it) the script runs
    assert recs[("quoted", 0)]["state"] == "done", recs[("quoted", 0)]
    assert (mdir(run, "quoted", 0) / "stdout").read_text() == "ran without shebang\n"
    assert recs[("plain", 0)]["state"] == "done", (
        "BUG pilot/agent.py PilotAgent.launch: an executable script without a #! line, run as a plain payload, "
        f"fails with {recs[('plain', 0)]} (posix_spawn ENOEXEC) where `bash -c` runs it as a shell script")
    assert (mdir(run, "plain", 0) / "stdout").read_text() == "ran without shebang\n"
    assert rc == 0, err


def test_direct_exec_of_colon_builtin(tmp_path, write):
    """`:` is made of plain characters but is a shell builtin, not a program."""
    wf = write('name: colon\nnodes:\n  noop:\n    run: ": nothing to do"\n  bare:\n    run: ":"\n')
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    recs = by_key(show(run))
    for node in ("noop", "bare"):
        assert recs[(node, 0)]["state"] == "done", (
            "BUG pilot/agent.py _BUILTINS lacks ':': the payload is exec'd directly as a program named ':' "
            f"and fails: {recs[(node, 0)]}; bash's `:` builtin succeeds")
    assert rc == 0, err


def test_walltime_per_member_kills_the_member(tmp_path, write):
    marker = f"30.{secrets.randbelow(10**9):09d}7"
    wf = write("""\
name: walltime
nodes:
  slow:
    parameters: {how: [plain, stubborn]}
    run: if [ {{ how }} = stubborn ]; then trap '' TERM; fi; sleep {{ t }}; echo finished
    scheduling: {maxWallTimePerMember: 0.02}
  quick:
    run: sleep 0.1
    scheduling: {maxWallTimePerMember: 0.02}
""")
    run = tmp_path / "run"
    t0 = time.time()
    try:
        rc, out, err = pwe("run", wf, "--set", f"t={marker}", "--cores", "3", "--run-dir", run, cwd=tmp_path,
                           timeout=120)
        took = time.time() - t0
        assert rc == 1, err
        recs = by_key(show(run))
        assert recs[("quick", 0)]["state"] == "done"
        for i in (0, 1):
            r = recs[("slow", i)]
            assert r["state"] == "failed" and r.get("why") == "timeout", r
            out_file = mdir(run, "slow", i) / "stdout"  # (not kept when it stayed empty)
            assert not out_file.exists() or "finished" not in out_file.read_text()
        assert took < 25, f"a 1.2 s walltime took {took:.1f} s to enforce (the members sleep 30 s)"
        wait_for(lambda: not pids_matching(marker), what="the timed-out members to end")
    finally:
        for p in pids_matching(marker):
            os.kill(p, signal.SIGKILL)


def test_ctrl_c_cancels_then_retry_finishes(tmp_path, write):
    marker = f"30.{secrets.randbelow(10**9):09d}7"
    go = tmp_path / "go"
    wf = write("""\
name: interrupted
nodes:
  s:
    parameters: {k: {range: [0, 4]}}
    run: if [ -e {{ go }} ]; then echo quick; exit 0; fi; sleep {{ t }}
  after:
    after: [s]
    run: echo after
""")
    run = tmp_path / "run"
    proc = start_run(wf, tmp_path, "--set", f"t={marker}", "--set", f"go={go}", "--cores", "2", "--run-dir", run)
    try:
        wait_for(lambda: len(pids_matching(f"sleep {marker}")) >= 2, what="two members to start")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, f"exit {proc.returncode}\n{err}"
        no_traceback(err)
        assert "pwe retry" in err
        wait_for(lambda: not pids_matching(marker), what="the members to end after Ctrl-C")
        assert status(run)["phase"] == "cancelled"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in pids_matching(marker):
            os.kill(p, signal.SIGKILL)
    go.touch()
    rc, out, err = pwe("retry", run, cwd=tmp_path)
    assert rc == 0, err
    assert all(r["state"] == "done" for r in show(run))
    assert (mdir(run, "after", 0) / "stdout").read_text() == "after\n"


RESUME_WF = """\
name: crashy
nodes:
  s:
    parameters: {k: {range: [0, 8]}}
    run: '[ {{ k }} -lt 2 ] || until [ -e {{ gate }} ]; do sleep 0.05; done; echo x >> {{ counts }}/s.$PWE_MEMBER'
  fin:
    after: [s]
    run: echo x >> {{ counts }}/fin
"""


def test_engine_killed_then_resume(tmp_path, write, reaper):
    wf = write(RESUME_WF)
    counts = tmp_path / "counts"
    counts.mkdir()
    run = tmp_path / "run"
    gate = tmp_path / "gate"  # (members 2.. wait for it: the run cannot end before its engine is killed)
    rc, out, err = pwe("submit", wf, "--set", f"counts={counts}", "--set", f"gate={gate}", "--cores", "2",
                       "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    pid = wait_for(lambda: engine_pid(run), what="an engine.lock after pwe submit")
    wait_for(lambda: any(counts.iterdir()), what="a member to finish")
    reaper(run, *pilot_pids(run))
    assert str(run) in cmdline(pid), "engine.lock does not name this run's engine"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), what="the killed engine to be gone")
    assert not (counts / "fin").exists(), "the run finished before its engine was killed: nothing left to resume"
    assert status(run)["phase"].startswith("stopped"), status(run)
    gate.touch()
    rc, out, err = pwe("resume", run, cwd=tmp_path, timeout=120)
    assert rc == 0, f"resume after the engine was killed failed:\n{out}\n{err}"
    tally = {p.name: len(p.read_text().splitlines()) for p in counts.iterdir()}
    assert tally == {**{f"s.{i}": 1 for i in range(8)}, "fin": 1}, f"members ran more or less than once: {tally}"
    assert status(run)["phase"] == "succeeded"


def test_pilot_killed_midrun_is_replaced(tmp_path, write, reaper):
    marker = f"0.7{secrets.randbelow(10**9):09d}7"
    wf = write("""\
name: pilotcrash
nodes:
  s:
    parameters: {k: {range: [0, 6]}}
    run: sleep {{ t }}; echo x >> {{ counts }}/s.$PWE_MEMBER
""")
    counts = tmp_path / "counts"
    counts.mkdir()
    run = tmp_path / "run"
    proc = start_run(wf, tmp_path, "--set", f"t={marker}", "--set", f"counts={counts}", "--cores", "2",
                     "--run-dir", run)
    try:
        wait_for(lambda: len(pids_matching(f"sleep {marker}")) >= 2, what="two members to start")
        wait_for(lambda: status(run)["totals"].get("running", 0) >= 2, what="the engine to take in their starts")
        pilots = pilot_pids(run)
        assert len(pilots) == 1
        reaper(run, *pilots)
        assert os.readlink(f"/proc/{pilots[0]}/cwd").startswith(os.path.realpath(run)), "that pid is not this run's pilot"
        os.kill(pilots[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{err}"
        reaper(run, *pilot_pids(run))
        assert len(pilot_pids(run)) == 2, "no second pilot was started"
        tally = {p.name: len(p.read_text().splitlines()) for p in counts.iterdir()}
        assert tally == {f"s.{i}": 1 for i in range(6)}, f"members completed more or less than once: {tally}"
        assert all(r["state"] == "done" for r in show(run))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in pids_matching(marker):
            os.kill(p, signal.SIGKILL)


def test_cancel_of_a_finished_run_keeps_its_outcome(tmp_path, write):
    wf = write("name: done\nnodes:\n  a:\n    parameters: {k: [1, 2]}\n    run: echo {{ k }}\n")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    assert status(run)["phase"] == "succeeded"
    rc, out, err = pwe("cancel", run, cwd=tmp_path)
    no_traceback(err)
    st = status(run)
    assert st["phase"] == "succeeded" and st["finished_ok"] is True, (
        "BUG pwe cancel on a run that already succeeded rewrites its outcome: "
        f"phase {st['phase']!r}, finished_ok {st['finished_ok']!r} (pwe/engine/loop.py Engine.run(cancel=True) journals "
        "'cancel' then 'finish ok=false'; pwe/runstate/state.py apply('cancel') sets cancelled even when nothing was left)")
    assert all(r["state"] == "done" for r in show(run))


def test_hints_printed_by_run_work_with_run_dir(tmp_path, write):
    """`pwe run` ends a failed run with `see: pwe show RUN-ID --state failed`; that
    command, typed as printed from the same directory, must work."""
    wf = write("name: hint\nnodes:\n  a:\n    parameters: {i: [1, 2]}\n"
               "    run: |\n      echo warming up >&2\n      echo 'no such input: x'{{ i }} >&2\n      exit {{ i }}\n")
    rc, out, err = pwe("run", wf, "--run-dir", tmp_path / "elsewhere" / "r1", cwd=tmp_path)
    assert rc == 1, err
    # the first failed members, each with its exit status and the last line of its stderr
    assert "  a[0] failed: exit 1  | no such input: x1\n  a[1] failed: exit 2  | no such input: x2\n" in err, err
    hints = [line for line in err.splitlines() if line.startswith("see: pwe ")]
    assert [h.split()[2] for h in hints] == ["show", "logs"], f"hints on stderr:\n{err}"
    for hint in hints:
        words = hint.split()[2:]  # after "see: pwe"
        rc, out, err = pwe(*words, cwd=tmp_path)
        assert rc == 0, (
            f"BUG pwe/cli/main.py _follow prints `{hint[5:]}` but that fails (exit {rc}): {err.strip()} -- the run id is "
            "looked up only under ./pwe-runs (rundir.find); print the run directory when --run-dir put it elsewhere")
        assert ("exit=1" in out) if words[0] == "show" else ("no such input: x1" in out), out


def test_run_dir_already_used(tmp_path, write):
    wf = write("name: twice\nnodes:\n  a:\n    run: echo once >> ../../../../../count\n")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    journal = (run / "journal.jsonl").read_bytes()
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 2, err
    no_traceback(err)
    assert len(err.strip().splitlines()) == 1 and str(run) in err
    assert (run / "journal.jsonl").read_bytes() == journal, "a refused run touched the existing run"
    assert (tmp_path / "count").read_text() == "once\n"


def test_scheduling_stdio_not_silently_dropped(tmp_path, write):
    """DESIGN.md: scheduling names are "accepted and passed on or reported as unsupported,
    never silently dropped". On the local host `stdin`/`stdout` must either take effect
    or `pwe run` must say they do not."""
    (tmp_path / "in.txt").write_text("INPUT\n")
    wf = write(f"""\
name: stdio
nodes:
  a:
    run: cat
    scheduling: {{stdin: {tmp_path / "in.txt"}, stdout: my.out}}
""")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    md = mdir(run, "a", 0)
    produced = "".join(p.read_text() for p in (md.iterdir() if md.is_dir() else ())  # (nothing kept: it wrote nothing)
                       if p.is_file() and p.name.startswith(("stdout", "my.out")))
    honoured = "INPUT" in produced
    reported = "stdin" in err and "stdout" in err
    assert honoured or reported, (
        "BUG scheduling stdin/stdout are silently dropped on host 'local': the member read /dev/null and wrote "
        f"members/.../stdout, and `pwe run` said nothing about it (stderr: {err.strip()!r}); pwe/engine/loop.py "
        "Engine._task passes only ranksPerMember/threadsPerRank/walltime to the pilot")


def test_retry_after_cancel_reruns_the_cancelled_members(tmp_path, write, reaper):
    """Issue 8.3: `pwe retry` after `pwe cancel` cancelled again at once (the engine never
    cleared control/cancel). The members wait on a gate; the run is cancelled while they
    wait, the gate opens, and `pwe retry` runs every member to the end, each exactly once
    to completion (the members' own ledger)."""
    gate, ledger = tmp_path / "gate", tmp_path / "ledger"
    wf = write("name: again\nnodes:\n  a:\n    parameters: {k: {range: [0, 4]}}\n"
               # (bounded: a member left behind by a failed test ends by itself within 60 s)
               f"    run: for i in $(seq 1200); do [ -e {gate} ] && break; sleep 0.05; done; "
               f"echo $PWE_MEMBER >> {ledger}\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    reaper(run, wait_for(lambda: engine_pid(run), what="the engine's lock"))
    wait_for(lambda: status(run)["totals"].get("running", 0) >= 2, what="two members running")
    reaper(run, *pilot_pids(run))
    rc, out, err = pwe("cancel", run, cwd=tmp_path, timeout=120)
    assert rc == 0, err
    assert status(run)["phase"] == "cancelled"
    gate.touch()
    rc, out, err = pwe("retry", run, cwd=tmp_path, timeout=60)
    assert rc == 0, err
    no_traceback(err)
    st = status(run)
    assert st["phase"] == "succeeded" and st["totals"]["done"] == 4, st
    assert sorted(ledger.read_text().split()) == ["0", "1", "2", "3"]
    assert not (run / "control" / "cancel").exists()


def test_status_tells_each_pilots_state_the_same_in_text_and_json(tmp_path, write, reaper):
    """Issue 8.6: after kill -9 of the engine, `pwe status` said `p1 released` while that
    pilot still ran members, and `--json` said alive while the text said released. Now one
    function decides each pilot's state for both: up while it runs, gone once it is."""
    gate = tmp_path / "gate"
    wf = write("name: orphaned\nnodes:\n  a:\n    parameters: {k: {range: [0, 4]}}\n"
               f"    run: for i in $(seq 1200); do [ -e {gate} ] && break; sleep 0.05; done\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    engine = wait_for(lambda: engine_pid(run), what="the engine's lock")
    reaper(run, engine)
    wait_for(lambda: status(run)["totals"].get("running", 0) >= 2, what="two members running")
    pilot = pilot_pids(run)[0]
    reaper(run, pilot)

    def both():
        rc, text, err = pwe("status", run, cwd=tmp_path)
        assert rc == 0, err
        line = next(l for l in text.splitlines() if l.startswith("pilots:"))
        return line, status(run)["pilots"]["p1"]

    line, p1 = both()
    assert line.startswith("pilots: p1 up") and p1["state"] == "up" and p1["alive"] is True, (line, p1)
    os.kill(engine, signal.SIGKILL)
    wait_for(lambda: not alive(engine), what="the killed engine to be gone")
    line, p1 = both()  # no engine; the pilot runs on with its members
    assert line.startswith("pilots: p1 up") and p1["state"] == "up" and p1["alive"] is True, (line, p1)
    os.kill(pilot, signal.SIGKILL)
    wait_for(lambda: not alive(pilot), what="the killed pilot to be gone")
    line, p1 = both()
    assert line.startswith("pilots: p1 gone") and p1["state"] == "gone" and p1["alive"] is False, (line, p1)
    gate.touch()  # its orphaned members leave; resume runs them again and finishes
    rc, out, err = pwe("resume", run, cwd=tmp_path, timeout=60)
    assert rc == 0, err
    pilots = status(run)["pilots"]
    assert pilots["p1"]["state"] == "gone" and pilots["p2"]["state"] in ("up", "gone"), pilots


def test_logs_names_a_member_that_does_not_exist(tmp_path, write):
    """`pwe logs RUN simulate[99]` on a node of 12 members: no such member (exit 2), not
    "has not run yet"; a member that exists but never ran still says "has not run yet"."""
    wf = write("name: lg\nnodes:\n  simulate:\n    parameters: {T: [1, 2, 3], seed: {range: [0, 4]}}\n"
               "    run: echo T={{ T }} seed={{ seed }}\n"
               "  bad:\n    run: exit 3\n  after_bad:\n    after: [bad]\n    run: echo never\n")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 1, err
    for ask in ("simulate[99]", "simulate:12"):
        rc, out, err = pwe("logs", run, ask, cwd=tmp_path)
        no_traceback(err)
        assert (rc, err.strip()) == (2, f"{ask}: no such member (simulate has 12)"), (rc, err)
    rc, out, err = pwe("logs", run, "simulate:11", cwd=tmp_path)
    assert rc == 0 and "T=3 seed=3" in out, err
    # after_bad exists (1 member) but was skipped: it has not run, and its node has no output at all
    rc, out, err = pwe("logs", run, "after_bad:0", cwd=tmp_path)
    assert rc == 1 and err.startswith("after_bad[0] has not run yet"), (rc, err)
    rc, out, err = pwe("logs", run, "after_bad:1", cwd=tmp_path)
    assert (rc, err.strip()) == (2, "after_bad:1: no such member (after_bad has 1)"), (rc, err)
    # without state.json (an engine killed before its first snapshot) the plan answers
    (run / "state.json").unlink()
    rc, out, err = pwe("logs", run, "simulate[99]", cwd=tmp_path)
    assert (rc, err.strip()) == (2, "simulate[99]: no such member (simulate has 12)"), (rc, err)
