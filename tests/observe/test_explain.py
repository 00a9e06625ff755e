"""pwe explain RUN MEMBER: why a member is in its state, in layers (member, placement,
allocation), on real runs: a live run whose members wait on a gate (dependencies, running,
queued, ready, the pilot's slots), a halted run, a member whose grown request fits no node,
a skipped member, and the refusals (a member or node that does not exist, an ambiguous run)."""

from __future__ import annotations

import json

from helpers import ROOT, no_traceback, one_line_error, read_journal, run_cli, start_run, wait_for

GATED = """\
name: gated
nodes:
  prep:
    parameters: {{p: [0, 1]}}
    run: 'while [ ! -e {gate} ]; do sleep 0.05; done; echo prepared'
  sim:
    after: [prep]
    parameters: {{p: [0, 1], s: [0, 1, 2]}}
    run: 'true'
"""


def _explain(run, member, cwd, *more):
    rc, out, err = run_cli("explain", run, member, "--json", *more, cwd=cwd)
    assert rc == 0, err
    return json.loads(out)


def _said(doc, layer):
    return "\n".join(doc["layers"].get(layer) or [])


def test_a_live_run_says_what_each_member_waits_for(tmp_path, write):
    gate = tmp_path / "gate"
    wf = write(GATED.format(gate=gate))
    run = tmp_path / "run"
    proc = start_run(wf, tmp_path, "--cores", "1", "--run-dir", run)
    try:
        wait_for(lambda: (run / "journal.jsonl").exists()
                 and any(r["e"] == "start" for r in read_journal(run)), what="prep's first member to start")
        started = next(r for r in read_journal(run) if r["e"] == "start")
        first, other = f"prep:{started['m']}", f"prep:{1 - started['m']}"
        doc = _explain(run, first, tmp_path)
        assert doc["state"] == "running" and doc["engine"] is True
        assert "running on pilot p1 (attempt 1)" in _said(doc, "member"), doc["layers"]
        assert "pilot p1 (a process here" in _said(doc, "placement") and "holds it" in _said(doc, "placement")
        # the other prep member: one slot, taken: queued on the pilot or ready for it
        doc = _explain(run, other, tmp_path)
        assert doc["state"] in ("queued", "ready"), doc
        if doc["state"] == "ready":
            assert "every slot is taken (1 members queued or running on 1 slots)" in _said(doc, "placement") \
                or "could take it" in _said(doc, "placement"), doc["layers"]
        else:
            assert "queued on pilot p1" in _said(doc, "member")
        # a sim member waits for the prep member with its p, named with its state
        doc = _explain(run, f"sim:{started['m'] * 3 + 1}", tmp_path)
        assert doc["state"] == "waiting"
        pre = doc["prerequisites"]
        assert [(p["node"], p["kind"], p["of"], p["done"]) for p in pre] == [("prep", "matched", 1, 0)]
        assert pre[0]["not_done"] == [{"member": first, "state": "running"}]
        assert f"waits for 1 of prep: 0 done; not done: {first} running" in _said(doc, "member"), doc["layers"]
        # the asks against the host: one core; this machine's node
        assert doc["asks"]["cores"] == 1 and doc["host"]["name"] == "local" and doc["host_misfits"] == []
        text = run_cli("explain", run, first, cwd=tmp_path)[1]
        assert text.splitlines()[0].startswith(f"{first} of run ") and "\nmember:\n" in text, text
    finally:
        gate.write_text("")
        proc.wait(timeout=120)
    assert proc.returncode == 0
    doc = _explain(run, "sim:4", tmp_path)
    assert doc["state"] == "done" and _said(doc, "member") .startswith("done: exit 0 after 1 attempt")
    assert "placement" not in doc["layers"] and doc["allocation"] is None
    # the engine is gone: a member that is done needs no engine, and none is said to hold it
    assert "no engine" not in _said(doc, "member")


def test_a_halted_run_a_failed_member_and_a_skipped_one(tmp_path, write):
    wf = write("""\
name: halting
halt: {failed: 1}
nodes:
  a:
    parameters: {i: [0, 1, 2, 3]}
    run: '[ {{ i }} -ne 0 ] || { echo "bad mesh /tmp/x.h5" >&2; exit 4; }'
  b:
    after: [a]
    parameters: {i: [0, 1, 2, 3]}
    run: 'true'
""")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "1", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    doc = _explain(run, "a:0", tmp_path)
    assert doc["state"] == "failed" and doc["exit_status"] == 4
    said = _said(doc, "member")
    assert "failed for good: exit 4, after 1 attempt (retries 0)" in said, said
    assert "its last line on stderr: bad mesh /tmp/x.h5" in said
    doc = _explain(run, "b:0", tmp_path)
    assert doc["state"] == "skipped"
    assert "skipped: it can never run, what it waits for did not succeed: a:0 (failed)" in _said(doc, "member")
    # a member the halt kept from starting: held by it, and by no engine running the run
    states = {f"{n}:{m}": _explain(run, f"{n}:{m}", tmp_path) for n in "ab" for m in range(1, 4)}
    held = [d for d in states.values() if d["state"] in ("waiting", "ready")]
    assert held, "the halt after the first failure kept some member from starting"
    said = _said(held[0], "member")
    assert "held: halted: 1 of 8 failed, budget 1" in said and "held: no engine runs this run" in said, said


def test_a_grown_request_that_fits_no_node_names_the_numbers(tmp_path, write):
    # each attempt fails (exit 3) and the next asks 100 times the memory: 64 MB, 6,400 MB,
    # then 640,000 MB, which no node of this machine holds: the pilot says it cannot be placed
    wf = write("""\
name: grows
nodes:
  a:
    scheduling: {memoryPerMember: 64}
    retry: {attempts: 3, on: [3], grow: {memoryPerMember: 100}}
    run: exit 3
""")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    doc = _explain(run, "a:0", tmp_path)
    assert doc["state"] == "failed" and doc["attempts"] == 3
    assert doc["asks"]["memory_mb"] == 640_000, doc["asks"]
    mb = doc["host"]["memory_mb"]
    assert doc["host_misfits"] == [f"memory: asks {doc['asks']['memory_mb']:,} MB, a node of local has {mb:,} MB"]
    assert "cannot be placed" in _said(doc, "member")
    assert f"does not fit any node: memory: asks {doc['asks']['memory_mb']:,} MB" in _said(doc, "placement")


def test_bad_input_is_one_line(tmp_path, write):
    wf = write("name: tiny\nnodes:\n  a:\n    parameters: {i: [0, 1]}\n    run: 'true'\n")
    for _ in range(2):
        rc, out, err = run_cli("run", wf, cwd=tmp_path, timeout=300)
        assert rc == 0, err
    assert "no such member (a has 2, 0 to 1)" in one_line_error(*run_cli("explain", "tiny", "a:7", cwd=tmp_path)) \
        or "give more of the id" in one_line_error(*run_cli("explain", "tiny", "a:7", cwd=tmp_path))
    # an ambiguous prefix: two runs of tiny
    assert "give more of the id" in one_line_error(*run_cli("explain", "tiny", "a:0", cwd=tmp_path))
    rc, out, err = run_cli("runs", "--json", cwd=tmp_path)
    run = json.loads(out)[0]["run_id"]
    assert "no such member (a has 2, 0 to 1)" in one_line_error(*run_cli("explain", run, "a:7", cwd=tmp_path))
    assert "has no node 'b'" in one_line_error(*run_cli("explain", run, "b:0", cwd=tmp_path))
    for bad in ("a:x", "a:" + "9" * 40, "a:\u0663", "\x1b[31m:1"):
        err = one_line_error(*run_cli("explain", run, bad, cwd=tmp_path))
        assert "NODE:INDEX" in err and "\x1b" not in err, err
    no_traceback(err)


def test_a_pilot_job_the_batch_system_holds_is_explained_in_its_words(slurm_cluster, tmp_path):
    """A run on the real SLURM whose start is an hour away: its pilot job pends for
    BeginTime; explain's allocation layer says so in SLURM's words (squeue's %r), and its
    placement layer that the pilot cannot take the member while its job is queued."""
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  cluster: {protocol: slurm, cores_per_node: 8, max_nodes: 1, partitions: [{name: debug}]}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: later\nnodes:\n  m:\n    parameters: {i: {range: [0, 3]}}\n    run: 'true'\n"
                  "    scheduling: {maxWallTime: 5, requestedStart: now+1h}\n")
    run = tmp_path / "run"
    proc = start_run(wf, tmp_path, "--host", "cluster", "--hosts", tmp_path / "hosts.yaml", "--run-dir", run)
    try:
        job = wait_for(lambda: next((r["job"] for r in (read_journal(run) if (run / "journal.jsonl").exists()
                                                         else []) if r["e"] == "pilot" and r.get("job")), None),
                       timeout=60, what="the pilot job's submission")
        wait_for(lambda: (f := slurm_cluster.job(job)) and f.get("Reason") == "BeginTime", timeout=30,
                 what="SLURM to hold the job for its begin time")
        doc = _explain(run, "m:1", tmp_path)
        assert doc["state"] in ("ready", "queued"), doc
        assert doc["allocation"]["pending"] == {job: "PENDING: BeginTime"}, doc["allocation"]
        assert f"job {job} waits: PENDING: BeginTime (the batch system's words)" in _said(doc, "allocation")
        lane = doc["allocation"]["lane"]
        assert lane["batch"] is True and lane["alive"] == 1 and lane["queued"] == 1, lane
        # (handed to p1 ahead of its start, or not yet: either way its job waits in the queue)
        assert (f"pilot p1 (job {job}) holds it; its job is still in the batch queue" if doc["state"] == "queued" else
                f"pilot p1 (job {job}) cannot take it: its job is still in the batch queue") in _said(doc, "placement")
        # --no-ask: the batch system is not asked
        doc = _explain(run, "m:1", tmp_path, "--no-ask")
        assert doc["allocation"]["pending"] == {} and "BeginTime" not in _said(doc, "allocation")
    finally:
        run_cli("cancel", run, cwd=tmp_path)
        proc.wait(timeout=120)
    wait_for(lambda: slurm_cluster.job_state(job) in (None, "CANCELLED") or not slurm_cluster.job(job),
             timeout=60, what="the pilot job to be cancelled")


def test_a_member_run_again_names_the_change(tmp_path, write):
    """The second run of a workflow whose input file changed: each member ran again, and
    explain names the file (the keys' parts: pwe/runstate/rerun_why.py); one left as it
    was is reused, and says from where."""
    (tmp_path / "mesh.txt").write_text("one\n")
    wf = write("name: rerun\nnodes:\n  a:\n    parameters: {i: [0, 1]}\n    inputs: [mesh.txt]\n"
               "    run: cat \"$PWE_WORKSPACE/mesh.txt\"\n  b:\n    parameters: {j: [0, 1]}\n    run: 'true'\n")
    for name in ("r1", "r2"):
        if name == "r2":
            (tmp_path / "mesh.txt").write_text("two\n")
        rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "pwe-runs" / name, cwd=tmp_path, timeout=300)
        assert rc == 0, err
    doc = _explain(tmp_path / "pwe-runs" / "r2", "a:1", tmp_path)
    assert doc["rerun"] == ["input mesh.txt changed"], doc["rerun"]
    assert "ran (not reused) because: input mesh.txt changed" in _said(doc, "member")
    doc = _explain(tmp_path / "pwe-runs" / "r2", "b:0", tmp_path)
    assert doc["rerun"] is None and doc["reused_from"]["member"] == 0
    assert _said(doc, "member").startswith("done: reused from run ")
    # the first run had nothing earlier to compare with: nothing said of why it ran
    assert _explain(tmp_path / "pwe-runs" / "r1", "a:1", tmp_path)["rerun"] is None


def test_what_members_and_users_made_is_shown_as_text_and_a_closed_pipe_is_quiet(tmp_path, write):
    import os
    import subprocess
    import sys

    wf = write("name: esc\nnodes:\n  a:\n    parameters: {v: [\"\\e]0;owned\\a\\e[31mred\"]}\n"
               "    run: printf '\\033[2J wiped\\n' >&2; exit 5\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    rc, out, err = run_cli("explain", run, "a:0", cwd=tmp_path)
    assert rc == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[31mred" in out and "wiped" in out, out
    p = subprocess.run(f"{sys.executable} -m pwe explain {run} a:0 --json | head -c1", shell=True, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.stdout == "{" and "Traceback" not in p.stderr, p.stderr
