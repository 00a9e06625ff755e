"""Batch protocols: golden job scripts, scripted scheduler conversations, and the real
SLURM (with its PBS front end) running workflows through pilots."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, SLURM_HOSTS, TESTS, ledger_counts, let_time_pass, output, read_journal, sample_pilot_job, wait_for
from protocols.base import JobState, get
from protocols.runner import CommandResult, CommandRunner, CommandTimeout

GOLDEN = TESTS / "golden"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


job = sample_pilot_job


@pytest.mark.parametrize("name", ["slurm", "pbs"])
def test_job_scripts_match_golden_files(name):
    text = get(name, CommandRunner()).render(job())
    golden = GOLDEN / f"{name}.sh"
    if os.environ.get("PWE_REGOLD"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_every_job_script_is_the_one_body_under_its_schedulers_header():
    """One body (protocols/templates/_body.j2), the TERM trap and the edge
    events in every script, each with its own scheduler's job id; only the header differs."""
    bodies = {}
    for name in ("slurm", "pbs", "loadleveler", "ssh"):
        protocol = get(name, CommandRunner())
        text = protocol.render(job())
        assert text.startswith("#!/bin/bash\n") and protocol.job_id
        assert ('pwe_notify() { pwe notify --run /runs/r1 --pilot p1 "$@"; }\n'
                f'pwe_notify started "{protocol.job_id}"\ntrap \'exit 143\' TERM\n'
                f'trap \'pwe_notify ended "{protocol.job_id}" $?\' EXIT\n') in text, text
        body = text[text.index("\nmodule load python\n"):]  # after the header and the line saying what it is
        bodies[name] = body.replace(protocol.job_id, "JOB_ID")
    assert len(set(bodies.values())) == 1, bodies


class Scripted(CommandRunner):
    """A scripted conversation: (argv prefix, stdout[, exit status[, stderr]]) steps,
    consumed in order; stdout "TIMEOUT" times out."""

    def __init__(self, steps):
        super().__init__()
        self.steps = list(steps)

    def _run(self, argv, timeout, input, cwd):
        step = self.steps.pop(0)
        prefix, out, status, err = (*step, *(0, "")[len(step) - 2:])
        assert argv[: len(prefix)] == prefix, (argv, prefix)
        if out == "TIMEOUT":
            raise CommandTimeout(argv, timeout)
        return CommandResult(argv, status, out, err)


def test_slurm_states_are_mapped_and_batched():
    r = Scripted([
        (["squeue"], "11 PENDING\n12 RUNNING\n13 TIMEOUT\n14 NODE_FAIL\n15 PREEMPTED\n16 OUT_OF_MEMORY\n"
                     "17 BOOT_FAIL\n18 CANCELLED+\n19 COMPLETED\n20 FAILED\n"),
        (["scontrol"], "JobId=21 JobState=COMPLETED Reason=None"),
    ])
    ids = [str(i) for i in range(11, 22)]
    states = get("slurm", r).status(ids)
    assert [states[i] for i in ids] == [
        JobState.PENDING, JobState.RUNNING, JobState.TIMEOUT, JobState.NODE_FAIL, JobState.PREEMPTED,
        JobState.OUT_OF_MEMORY, JobState.BOOT_FAIL, JobState.CANCELLED, JobState.COMPLETED, JobState.FAILED,
        JobState.COMPLETED]
    assert r.calls["squeue"] == 1  # one query, whatever the number of jobs
    assert JobState.TIMEOUT.finished  # a pilot's timeout is an end like any other (not a failure)


def test_a_scheduler_that_times_out_is_unknown_not_failed():
    states = get("slurm", Scripted([(["squeue"], "TIMEOUT")])).status(["5", "6"])
    assert states == {"5": JobState.UNKNOWN, "6": JobState.UNKNOWN}
    assert not JobState.UNKNOWN.finished


DOWN = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
INVALID = "slurm_load_jobs error: Invalid job id specified"


def test_a_controller_that_does_not_answer_is_unknown_never_an_end():
    """squeue and scontrol exit 1 both for jobs SLURM no longer knows (ended)
    and when its controller is down; only the first is an end. qstat over SLURM the same."""
    slurm = get("slurm", Scripted([(["squeue"], "", 1, DOWN)]))
    assert slurm.status(["5", "6"]) == {"5": JobState.UNKNOWN, "6": JobState.UNKNOWN}
    assert "Unable to contact slurm controller" in slurm.no_answer
    # squeue answers (it lists 5), then the controller goes away before scontrol is asked of 6
    slurm = get("slurm", Scripted([(["squeue"], "5 RUNNING\n"), (["scontrol"], "", 1, DOWN)]))
    assert slurm.status(["5", "6"]) == {"5": JobState.RUNNING, "6": JobState.UNKNOWN}
    assert slurm.no_answer is None
    # jobs neither squeue nor scontrol knows any more: they ended
    slurm = get("slurm", Scripted([(["squeue"], "", 1, INVALID), (["scontrol"], "", 1, INVALID)]))
    assert slurm.status(["7"]) == {"7": JobState.COMPLETED}
    pbs = get("pbs", Scripted([(["qstat"], "", 8, "Problem loading jobs.\n")]))
    assert pbs.status(["31"]) == {"31": JobState.UNKNOWN} and pbs.no_answer
    assert get("pbs", Scripted([(["qstat"], "", 153)])).status(["31"]) == {"31": JobState.COMPLETED}


def test_a_submission_the_controller_could_not_take_is_unreachable_not_refused():
    from pwe.base.errors import SchedulerUnreachable, SubmitError

    said = "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)"
    with pytest.raises(SchedulerUnreachable) as err:
        get("slurm", Scripted([(["sbatch"], "", 1, said)])).submit(job(), "/runs/r1/pilots/p1/job.sh")
    assert not err.value.maybe_ran and "Unable to contact slurm controller" in str(err.value)
    refused = "sbatch: error: Batch job submission failed: Invalid partition name specified"
    with pytest.raises(SubmitError):
        get("slurm", Scripted([(["sbatch"], "", 1, refused)])).submit(job(), "/runs/r1/pilots/p1/job.sh")
    # timed out, and the lookup by name cannot answer either: it may have taken
    r = Scripted([(["sbatch"], "TIMEOUT"), (["squeue"], "", 1, DOWN)])
    with pytest.raises(SchedulerUnreachable) as err:
        get("slurm", r).submit(job(), "/runs/r1/pilots/p1/job.sh")
    assert err.value.maybe_ran


def test_a_submission_that_timed_out_is_found_by_name_not_resubmitted():
    r = Scripted([(["sbatch"], "TIMEOUT"), (["squeue", "-h", "-t", "all", "-o", "%i", "-n"], "4242\n")])
    assert get("slurm", r).submit(job(), "/runs/r1/pilots/p1/job.sh") == "4242"
    assert r.calls["sbatch"] == 1


def test_pbs_states():
    out = ("Job ID                    Name             User            Time Use S Queue\n"
           "------------------------- ---------------- --------------- -------- - -----\n"
           "31.localhost              pwe-r1-p1        root            00:00:00 R debug\n"
           "32.localhost              pwe-r1-p2        root            0        Q debug\n")
    states = get("pbs", Scripted([(["qstat"], out)])).status(["31", "32", "33"])
    assert states == {"31": JobState.RUNNING, "32": JobState.PENDING, "33": JobState.COMPLETED}


# -- the real SLURM ---------------------------------------------------------------------------



def shim(tmp_path: Path) -> tuple[Path, Path]:
    """A bin directory whose sbatch/squeue/... log each call, then run the real command."""
    bindir, log = tmp_path / "shim", tmp_path / "calls.log"
    bindir.mkdir()
    for cmd in ("sbatch", "squeue", "scontrol", "scancel", "qsub", "qstat", "qdel"):
        real = subprocess.run(["which", cmd], capture_output=True, text=True).stdout.strip()
        if not real:
            continue
        p = bindir / cmd
        p.write_text(f'#!/bin/sh\necho {cmd} >> {log}\nexec {real} "$@"\n')
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return bindir, log


def run_on(host, tmp_path, members, payload, name="wf"):
    (tmp_path / "hosts.yaml").write_text(SLURM_HOSTS)
    wf = tmp_path / f"{name}.yaml"
    wf.write_text(f"name: {name}\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {members}]}}}}\n"
                  f"    run: {json.dumps(payload)}\n    scheduling: {{maxWallTime: 5}}\n")
    bindir, log = shim(tmp_path)
    env = dict(ENV, PATH=f"{bindir}:{os.environ['PATH']}")
    run_dir = tmp_path / f"run-{name}"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", host, "--run-dir", str(run_dir)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    calls = log.read_text().split() if log.exists() else []
    return proc, run_dir, calls


def outputs(run_dir):
    from pwe.observe.results import load_state, member_record

    _, st = load_state(run_dir)
    return [member_record(st, "m", i) for i in range(st.nodes["m"].size)]


def test_workflow_runs_through_one_slurm_pilot(slurm_cluster, tmp_path):
    proc, run_dir, calls = run_on("cluster", tmp_path, 40, "echo job=$SLURM_JOB_ID >> $PWE_OUTPUTS")
    assert proc.returncode == 0, proc.stderr
    recs = outputs(run_dir)
    jobs = {r["outputs"]["job"] for r in recs}
    assert len(jobs) == 1 and all(r["state"] == "done" for r in recs)
    journal = read_journal(run_dir)
    pilots = [r for r in journal if r["e"] == "pilot"]
    assert [p["job"] for p in pilots] == list(jobs)
    assert calls.count("sbatch") == 1
    script = (run_dir / "pilots" / "p1" / "job.sh").read_text()
    assert "#SBATCH --partition=short" in script and "#SBATCH --time=0:05:00" in script


def test_members_run_as_srun_steps_inside_the_allocation(slurm_cluster, tmp_path):
    proc, run_dir, _ = run_on("cluster-srun", tmp_path, 12,
                              "echo job=$SLURM_JOB_ID >> $PWE_OUTPUTS; echo step=$SLURM_STEP_ID >> $PWE_OUTPUTS")
    assert proc.returncode == 0, proc.stderr
    recs = outputs(run_dir)
    steps = [r["outputs"]["step"] for r in recs]
    assert all(s.isdigit() for s in steps), steps
    assert len(set(steps)) == 12  # one job step per member
    assert len({r["outputs"]["job"] for r in recs}) == 1


def test_scheduler_calls_do_not_grow_with_members(slurm_cluster, tmp_path):
    counts = {}
    for n in (10, 200):
        (tmp_path / str(n)).mkdir()
        proc, _, calls = run_on("cluster", tmp_path / str(n), n, "true", name=f"w{n}")
        assert proc.returncode == 0, proc.stderr
        counts[n] = calls
    assert counts[10].count("sbatch") == counts[200].count("sbatch") == 1
    assert counts[200].count("squeue") <= counts[10].count("squeue") + 2


def test_pbs_front_end_runs_the_same_workflow(slurm_cluster, tmp_path):
    proc, run_dir, calls = run_on("torque", tmp_path, 20, "echo ok=1 >> $PWE_OUTPUTS")
    assert proc.returncode == 0, proc.stderr
    assert all(r["outputs"] == {"ok": "1"} for r in outputs(run_dir))
    assert calls.count("qsub") == 1 and "sbatch" not in calls
    assert (run_dir / "pilots" / "p1" / "job.out").exists()


def test_edge_events_are_authenticated_and_cover_a_killed_pilot_job(slurm_cluster, tmp_path):
    """scancel of a pilot's job mid-run: its 'ended' edge event (the job script's trap)
    reaches the engine, which reissues the members to a new pilot; a forged event is
    ignored."""

    (tmp_path / "hosts.yaml").write_text(SLURM_HOSTS)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: edge\nnodes:\n  m:\n    parameters: {i: {range: [0, 6]}}\n    run: sleep 3\n"
                  "    scheduling: {maxWallTime: 5}\n")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--host", "cluster", "--run-dir",
                             str(run_dir)], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        events = run_dir / "pilots" / "p1" / "events.jsonl"
        wait_for(lambda: events.exists() and b'"start"' in events.read_bytes(), 60, "a member to start", step=0.1)
        journal = [json.loads(l) for l in (run_dir / "journal.jsonl").read_text().splitlines()]
        job = next(r["job"] for r in journal if r["e"] == "pilot")
        forged = run_dir / "edges" / "p1-ended-1-1.json"
        forged.parent.mkdir(exist_ok=True)
        forged.write_text(json.dumps({"pilot": "p1", "event": "ended", "job": job, "status": 0, "t": 1,
                                      "mac": "0" * 64}))
        let_time_pass(1.5, "the engine would have acted on the forged edge by now")
        assert proc.poll() is None
        subprocess.run(["scancel", job], check=True)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    journal = read_journal(run_dir)
    assert any(r["e"] == "note" and "bad signature" in r["what"] for r in journal)
    ended = [r for r in journal if r["e"] == "edge" and r["event"] == "ended" and r["pilot"] == "p1"]
    assert ended and ended[0]["job"] == job
    gone = [r for r in journal if r["e"] == "pilot_gone" and r["p"] == "p1"]
    assert gone
    assert any(r["e"] == "pilot" and r["p"] == "p2" for r in journal)
    ends = [r for r in journal if r["e"] == "end" and r["rc"] == 0]
    assert sorted(r["m"] for r in ends) == list(range(6))


def remote_hosts(tmp_path, known_hosts):
    (tmp_path / "hosts.yaml").write_text(f"""
hosts:
  remote:
    protocol: slurm
    contact: ssh://root@127.0.0.1:2222
    identity_file: /var/tmp/pwe-ssh/id_ed25519
    known_hosts: {known_hosts}
    cores_per_node: 8
    max_nodes: 1
""")


def test_same_slurm_workflow_through_an_ssh_contact(slurm_cluster, ssh_nodes, tmp_path):
    remote_hosts(tmp_path, "/var/tmp/pwe-ssh/known_hosts")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: remote\nnodes:\n  m:\n    parameters: {i: {range: [0, 30]}}\n"
                  "    run: echo job=$SLURM_JOB_ID >> $PWE_OUTPUTS\n    scheduling: {maxWallTime: 5}\n")
    run_dir = tmp_path / "run"
    home = tmp_path / "home"  # no ~/.ssh/known_hosts of the user's to lean on
    home.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "remote", "--run-dir",
                           str(run_dir)], cwd=tmp_path, env=dict(ENV, HOME=str(home)), capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    recs = outputs(run_dir)
    assert len({r["outputs"]["job"] for r in recs}) == 1 and len(recs) == 30


def test_a_head_node_with_an_unknown_host_key_is_refused(slurm_cluster, ssh_nodes, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    remote_hosts(tmp_path, empty)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: remote\nnodes:\n  m:\n    run: 'true'\n")
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "remote", "--run-dir",
                           str(tmp_path / "run")], cwd=tmp_path, env=dict(ENV, HOME=str(home)), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 3  # stopped, resumable once the host key is known
    last = proc.stderr.strip().splitlines()[-1]
    assert "cannot submit a pilot to host 'remote'" in last and "host key is not known" in last, proc.stderr
    assert "Traceback" not in proc.stderr
    journal = (tmp_path / "run" / "journal.jsonl").read_text()
    assert '"e":"pilot"' not in journal  # nothing was submitted


def test_interactive_ssh_protocol_runs_the_pilot_under_nohup_on_the_head_node(ssh_nodes, tmp_path):
    (tmp_path / "hosts.yaml").write_text("""
hosts:
  head:
    protocol: ssh
    contact: ssh://root@127.0.0.1:2222
    identity_file: /var/tmp/pwe-ssh/id_ed25519
    known_hosts: /var/tmp/pwe-ssh/known_hosts
    cores_per_node: 2
""")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: inter\nnodes:\n  m:\n    parameters: {i: {range: [0, 10]}}\n"
                  "    run: echo pid=$PPID >> $PWE_OUTPUTS\n    scheduling: {maxWallTime: 5}\n")
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "head", "--run-dir",
                           str(tmp_path / "run")], cwd=tmp_path, env=dict(ENV, HOME=str(home)), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    journal = read_journal(tmp_path / "run")
    pilot = next(r for r in journal if r["e"] == "pilot")
    pid, _, started = pilot["job"].partition(".")  # PID.START: its pid and start time there (pilot/identity.py)
    assert pilot["batch"] == "ssh" and pid.isdigit() and started.isdigit()
    up = json.loads((tmp_path / "run" / "pilots" / "p1" / "events.jsonl").read_text().splitlines()[0])
    assert up["k"] == "up"
    assert all(r["outputs"]["pid"] == str(up["pid"]) for r in outputs(tmp_path / "run"))


def test_max_members_splits_the_work_over_pilots(slurm_cluster, tmp_path):
    (tmp_path / "hosts.yaml").write_text(SLURM_HOSTS)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: mm\nnodes:\n  m:\n    parameters: {i: {range: [0, 20]}}\n    run: 'true'\n"
                  "    scheduling: {maxWallTime: 5, maxMembers: 8}\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "cluster", "--run-dir",
                           str(run_dir)], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    journal = read_journal(run_dir)
    pilots = [r["p"] for r in journal if r["e"] == "pilot"]
    assert len(pilots) == 3
    per_pilot = {p: sum(1 for r in journal if r["e"] == "assign" and r["p"] == p) for p in pilots}
    assert sorted(per_pilot.values()) == [4, 8, 8]


def test_a_member_longer_than_the_pilot_walltime_is_refused_at_plan_time(tmp_path):
    from helpers import run_cli

    (tmp_path / "hosts.yaml").write_text(SLURM_HOSTS)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  m:\n    run: 'true'\n    scheduling: {maxWallTime: 10, maxWallTimePerMember: 30}\n")
    status, _, err = run_cli("plan", wf, "--host", "cluster")
    assert status == 2 and "does not fit in a pilot's maxWallTime" in err


def test_several_pilots_at_once_when_the_host_allows(slurm_cluster, tmp_path):
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  small:\n    protocol: slurm\n    cores_per_node: 2\n    max_nodes: 1\n    max_pilots: 3\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: many\nnodes:\n  m:\n    parameters: {i: {range: [0, 18]}}\n    run: sleep 1\n"
                  "    scheduling: {maxWallTime: 5}\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "small", "--run-dir",
                           str(run_dir)], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    journal = read_journal(run_dir)
    pilots = [r["p"] for r in journal if r["e"] == "pilot"]
    assert 2 <= len(pilots) <= 3
    # members of different pilots ran at the same time
    spans = {}
    for p in pilots:
        ev = [json.loads(l) for l in (run_dir / "pilots" / p / "events.jsonl").read_text().splitlines()]
        starts = [e["t"] for e in ev if e["k"] == "start"]
        ends = [e["t"] for e in ev if e["k"] == "end"]
        if starts:
            spans[p] = (min(starts), max(ends))
    (a0, a1), (b0, b1) = sorted(spans.values())[:2]
    assert b0 < a1, spans
    assert sorted(r["m"] for r in journal if r["e"] == "end" and r["rc"] == 0) == list(range(18))


def test_one_workflow_over_two_hosts_this_machine_and_slurm(slurm_cluster, tmp_path):
    """A pipeline whose middle node names the SLURM host: prepare and summarize run on this
    machine's pilot, the sweep in one SLURM pilot job, matched member by member."""
    (tmp_path / "hosts.yaml").write_text(SLURM_HOSTS)
    wf = tmp_path / "mixed.yaml"
    wf.write_text("""\
name: mixed
nodes:
  prep:
    parameters: {k: {range: [0, 6]}}
    run: echo "job=${SLURM_JOB_ID:-none}" >> $PWE_OUTPUTS
  sim:
    host: cluster
    after: [prep]
    parameters: {k: {range: [0, 6]}}
    run: echo "job=${SLURM_JOB_ID:-none}" >> $PWE_OUTPUTS
    scheduling: {maxWallTime: 5}
  post:
    after: [sim]
    parameters: {k: {range: [0, 6]}}
    run: echo "job=${SLURM_JOB_ID:-none}" >> $PWE_OUTPUTS
""")
    bindir, log = shim(tmp_path)
    env = dict(ENV, PATH=f"{bindir}:{os.environ['PATH']}")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(run_dir)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    from pwe.observe.results import load_state, member_record

    _, st = load_state(run_dir)
    jobs = {nid: {member_record(st, nid, k)["outputs"]["job"] for k in range(6)} for nid in ("prep", "sim", "post")}
    assert jobs["prep"] == jobs["post"] == {"none"}  # this machine, no batch job
    assert len(jobs["sim"]) == 1 and "none" not in jobs["sim"]  # all six in one SLURM pilot job
    journal = read_journal(run_dir)
    lanes = {r["p"]: r["lane"] for r in journal if r["e"] == "pilot"}
    assert sorted(lanes.values()) == ["cluster", "local"], lanes
    on = {(r["n"], lanes[r["p"]]) for r in journal if r["e"] == "assign"}
    assert on == {("prep", "local"), ("sim", "cluster"), ("post", "local")}
    # each sim member started after its own prep member ended, and before post's
    order = [r for r in journal if r["e"] in ("start", "end")]
    pos = {(r["n"], r["m"], r["e"]): i for i, r in enumerate(order)}
    for k in range(6):
        assert pos[("prep", k, "end")] < pos[("sim", k, "start")] and pos[("sim", k, "end")] < pos[("post", k, "start")]
    assert log.read_text().split().count("sbatch") == 1


def test_hybrid_example_runs_here_and_on_slurm(slurm_cluster, tmp_path):
    from helpers import EXAMPLES

    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(EXAMPLES / "hybrid.yaml"), "--run-dir",
                           str(run_dir)], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    from pwe.observe.results import load_state, member_record

    _, st = load_state(run_dir)
    jobs = {member_record(st, "sweep", k)["outputs"]["job"] for k in range(8)}
    assert len(jobs) == 1 and jobs != {""}, jobs  # the whole sweep in one SLURM job
    assert (run_dir / "members" / "prepare" / "0" / "3" / "input.txt").read_text() == "input 3\n"
    assert output(run_dir, "summarize", 0) == "summarized\n"


def test_a_refused_pilot_stops_the_run_and_resume_uses_the_fixed_host(slurm_cluster, tmp_path):
    """On the real SLURM: sbatch refuses the pilot job (a walltime over its
    partition's limit: short allows 10 min; a partition that does not exist, or more nodes,
    cores or memory than it has, is refused before the run is made: pwe/planning/sitecheck.py).
    The run stops with one line carrying sbatch's own answer, exit status 3, and
    `pwe status` says why. The host is fixed in hosts.yaml; `pwe resume` submits with the
    fixed definition and every member runs once."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  cl:\n    protocol: slurm\n    cores_per_node: 8\n    max_nodes: 1\n"
                     "    partitions: [{name: short}]\n")
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: refused\nnodes:\n  m:\n    parameters: {i: {range: [0, 5]}}\n"
                  f"    run: echo $PWE_MEMBER >> {ledger}\n    scheduling: {{maxWallTime: 30}}\n")
    run = tmp_path / "run"

    def pwe(*args):
        return subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], cwd=tmp_path, env=ENV,
                              capture_output=True, text=True, timeout=180)

    first = pwe("run", wf, "--host", "cl", "--run-dir", run)
    assert first.returncode == 3, first.stderr
    assert "Traceback" not in first.stderr
    last = first.stderr.strip().splitlines()[-1]
    assert "the batch system refused a pilot job for host 'cl': sbatch failed: sbatch: error:" in last, last
    assert "partition" in last.lower() and last.endswith(f"then: pwe resume {run}"), last
    st = json.loads(pwe("status", run, "--json").stdout)
    assert st["phase"].startswith("stopped: the batch system refused"), st
    hosts.write_text(hosts.read_text().replace("short", slurm_cluster.default_partition))
    second = pwe("resume", run)
    assert second.returncode == 0, second.stderr
    assert sorted(ledger.read_text().split()) == [str(i) for i in range(5)]
    script = (run / "pilots" / "p1" / "job.sh").read_text()
    assert f"#SBATCH --partition={slurm_cluster.default_partition}" in script
    notes = [r for r in read_journal(run) if r["e"] == "note"]
    assert any("host 'cl' is defined differently" in r["what"] for r in notes), notes


def test_a_replayed_edge_event_is_journaled_once(tmp_path):
    """An edge event is journaled once, by its id; the same signed event again
    (copied back under another name, delivered twice), to this engine or a resumed one, is
    ignored, and each replay is counted in a journal note."""
    import shutil

    from pwe.engine.loop import Engine
    from pwe.runstate.notify import send

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: e\nnodes:\n  m:\n    run: 'true'\n")
    engine = Engine.create(wf, run_dir=tmp_path / "run")
    engine._load()
    sent = send(engine.dir, "p1", "started", "123")
    engine.work.take_edges()
    shutil.copy(sent, sent.with_name("p1-started-1-1.json"))
    engine.work.take_edges()
    engine.work.take_edges()
    engine.journal.close()
    resumed = Engine.open(engine.dir)
    resumed._load()
    shutil.copy(sent, sent.with_name("p1-started-2-2.json"))
    resumed.work.take_edges()
    resumed.journal.close()
    journal = read_journal(engine.dir)
    edges = [r for r in journal if r["e"] == "edge"]
    assert len(edges) == 1 and edges[0]["id"] and edges[0]["file"] == sent.name, edges
    replays = [r for r in journal if r["e"] == "note" and r.get("replay_of")]
    assert [(r["replay_of"], r["replays"]) for r in replays] == [(edges[0]["id"], 1), (edges[0]["id"], 2)], replays


def test_the_silence_that_gives_a_pilot_up_is_many_heartbeats(tmp_path):
    """lost_after is max(120 s, 24 heartbeats) unless the run says otherwise."""
    from pwe.engine.loop import Engine

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: e\nnodes:\n  m:\n    run: 'true'\n")
    for heartbeat, options, lost_after in ((5.0, {}, 120.0), (10.0, {}, 240.0), (1.0, {"lost_after": 4}, 4.0)):
        engine = Engine.create(wf, run_dir=tmp_path / f"run{heartbeat}", heartbeat=heartbeat, **options)
        assert engine.lost_after == lost_after and engine.end_wait >= 60


ENGINE = """
import sys
from pwe.engine.loop import Engine
engine = Engine.create(sys.argv[1], host="cluster", run_dir=sys.argv[2], **eval(sys.argv[3]))
sys.exit(0 if engine.run() else 1)
"""


def start_engine(tmp_path, members, script, options, env=None):
    """A run of `members` members of `script` (sh, $PWE_MEMBER) on host cluster, its engine
    in the background with engine options (a short heartbeat...): (process, run dir, ledger)."""
    (tmp_path / "hosts.yaml").write_text(SLURM_HOSTS)
    (tmp_path / "member.sh").write_text(script)
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: faults\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {members}]}}}}\n"
                  f"    run: sh {tmp_path / 'member.sh'}\n    scheduling: {{maxWallTime: 5}}\n")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", ENGINE, str(wf), str(run_dir), repr(options)], cwd=tmp_path,
                            env=env or ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, run_dir, tmp_path / "ledger"


def journal_now(run_dir):
    try:
        lines = (run_dir / "journal.jsonl").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # (a line being written)
    return out


def pwe_status(run_dir):
    proc = subprocess.run([sys.executable, "-m", "pwe", "status", str(run_dir), "--json"], env=ENV,
                          capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout) if proc.returncode == 0 else {}


def test_a_slurm_controller_down_for_a_minute_mid_run_loses_nothing(slurm_cluster, tmp_path):
    """On the real SLURM (run under flock /tmp/pwe-slurm.lock: it stops slurmctld).
    Mid-run the controller stops for a minute: squeue and scontrol fail. The engine reads
    that as no answer, never as an end: it keeps the pilot (whose job slurmd runs on),
    takes in its members' ends, says in `pwe status` that the host's batch system does not
    answer, submits nothing, and goes on when the controller is back. Every member runs
    exactly once (its own ledger), in one pilot job."""
    import time

    script = (f'echo "start m $PWE_MEMBER $PWE_ATTEMPT" >> {tmp_path}/ledger\nsleep $((1 + PWE_MEMBER % 3))\n'
              f'if [ "$PWE_MEMBER" -ge 32 ]; then while [ ! -e {tmp_path}/gate ]; do sleep 0.2; done; fi\n'
              f'echo "end m $PWE_MEMBER $PWE_ATTEMPT" >> {tmp_path}/ledger\n')
    bindir, calls = shim(tmp_path)
    env = dict(ENV, PATH=f"{bindir}:{os.environ['PATH']}")
    began = time.time()
    proc, run_dir, ledger = start_engine(tmp_path, 40, script, {"status_every": 2}, env)
    try:
        wait_for(lambda: ledger.exists() and sum(ledger_counts(ledger)[0].values()) >= 8, 90, "members running")
        down_at = time.time()
        with slurm_cluster.controller_down():
            wait_for(lambda: "cluster" in (pwe_status(run_dir).get("unreachable") or {}), 55,
                       "pwe status saying the batch system does not answer")
            text = subprocess.run([sys.executable, "-m", "pwe", "status", str(run_dir)], env=ENV,
                                  capture_output=True, text=True, timeout=60).stdout
            assert "host 'cluster': its batch system does not answer" in text, text
            let_time_pass(max(0.0, down_at + 60 - time.time()), "a minute with the controller down: the engine waits")
            assert proc.poll() is None, proc.communicate()
            assert calls.read_text().split().count("sbatch") == 1
        wait_for(lambda: any("answers again" in r.get("what", "") for r in journal_now(run_dir)), 90,
                   "the engine hearing the controller again")
        assert not pwe_status(run_dir).get("unreachable")
        (tmp_path / "gate").touch()
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    print(f"outage test: {time.time() - began:.0f} s in all, the controller down {60} s")
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    assert starts == ends == {("m", str(i)): 1 for i in range(40)}, (starts, ends)
    journal = read_journal(run_dir)
    assert len([r for r in journal if r["e"] == "pilot"]) == 1
    assert not [r for r in journal if r["e"] == "pilot_gone"]
    assert calls.read_text().split().count("sbatch") == 1


def test_a_submission_while_the_controller_is_down_waits_for_it(slurm_cluster, tmp_path):
    """sbatch cannot reach the controller ("Unable to contact slurm controller"):
    not a refusal that stops the run, but a wait; `pwe status` says so, and the submission
    is tried again (with back-off) until the controller answers. One pilot job."""
    script = f'echo "start m $PWE_MEMBER $PWE_ATTEMPT" >> {tmp_path}/ledger\necho "end m $PWE_MEMBER $PWE_ATTEMPT" >> {tmp_path}/ledger\n'
    bindir, calls = shim(tmp_path)
    env = dict(ENV, PATH=f"{bindir}:{os.environ['PATH']}")
    with slurm_cluster.controller_down():
        proc, run_dir, ledger = start_engine(tmp_path, 6, script, {"status_every": 2}, env)
        try:
            wait_for(lambda: "cluster" in (pwe_status(run_dir).get("unreachable") or {}), 60,
                       "pwe status saying the batch system does not answer")
            assert proc.poll() is None, proc.communicate()
        except BaseException:
            proc.kill()
            raise
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    assert starts == ends == {("m", str(i)): 1 for i in range(6)}
    journal = read_journal(run_dir)
    assert [r["p"] for r in journal if r["e"] == "pilot"] == ["p1"]
    notes = [r["what"] for r in journal if r["e"] == "note"]
    assert any("does not answer" in n and "Unable to contact slurm controller" in n for n in notes), notes
    assert calls.read_text().split().count("sbatch") >= 2


def test_a_frozen_pilot_is_given_up_only_once_its_job_has_ended(slurm_cluster, tmp_path):
    """On the real SLURM: the pilot process is stopped (SIGSTOP) past the silence
    limit, its members finishing meanwhile. The engine cancels its job and hands its
    members on only once the job has ended and every event the pilot wrote (it writes the
    ends when SLURM continues it to end it) is taken in: no member runs to completion
    twice, and none it finished runs again."""
    import signal

    # "end" only when the sleep ran out: SLURM's proctrack/linuxproc signals a cancelled
    # job's processes one at a time, so a member's `sleep` may die before its shell, which
    # would then write "end" for work that was cut short, and be killed itself after; the
    # pilot rightly runs such a member again (killed by the batch system: not its fault)
    script = (f'echo "start m $PWE_MEMBER $PWE_ATTEMPT" >> {tmp_path}/ledger\n'
              f'sleep 3 && echo "end m $PWE_MEMBER $PWE_ATTEMPT" >> {tmp_path}/ledger\n')
    proc, run_dir, ledger = start_engine(tmp_path, 24, script, {"heartbeat": 1, "lost_after": 4,
                                                                "status_every": 1})
    events = run_dir / "pilots" / "p1" / "events.jsonl"
    try:
        wait_for(lambda: ledger.exists() and sum(ledger_counts(ledger)[0].values()) >= 8, 90, "members running")
        pid = json.loads(events.read_text().splitlines()[0])["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: any(r.get("p") == "p1" and r["e"] in ("note", "pilot_gone")
                                   for r in journal_now(run_dir)), 90, "the engine giving the pilot up")
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        out, err = proc.communicate(timeout=150)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    assert ends == {("m", str(i)): 1 for i in range(24)}, ends  # every member ran to completion, once
    finished_by_p1 = {e["m"] for e in map(json.loads, events.read_text().splitlines())
                      if e["k"] == "end" and e["rc"] == 0}
    assert finished_by_p1 and all(starts[("m", str(m))] == 1 for m in finished_by_p1), (finished_by_p1, starts)
    journal = read_journal(run_dir)
    assert any(r["e"] == "pilot_gone" and r["p"] == "p1" and "silent" in r["why"] for r in journal)
    assert any(r["e"] == "pilot" and r["p"] == "p2" for r in journal)


def test_why_a_job_waits_in_each_batch_systems_words():
    """pwe explain's allocation layer asks once, on demand; a job the batch system says
    nothing of is left out; no answer is nothing, with the protocol's no_answer said. (The
    real SLURM's words: tests/observe/test_explain.py.)"""
    r = Scripted([(["squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "-j", "11,12,13"],
                   "11|PENDING|Resources\n12|RUNNING|None\n13|PENDING|QOSMaxJobsPerUserLimit\n")])
    assert get("slurm", r).why_pending(["11", "12", "13"]) == {
        "11": "PENDING: Resources", "13": "PENDING: QOSMaxJobsPerUserLimit"}
    r = Scripted([(["qstat", "-f", "7.server"], "Job Id: 7.server\n    job_state = Q\n"
                   "    comment = Not Running: Insufficient amount of resource: ncpus\n")])
    assert get("pbs", r).why_pending(["7.server"]) == {"7.server": "Not Running: Insufficient amount of resource: ncpus"}
    r = Scripted([(["qstat", "-j", "42"], "==============\njob_number:                 42\nowner: root\n"
                   "scheduling info:            queue instance \"all.q@n1\" dropped because it is full\n"
                   "                            (-l h_vmem=100G) cannot run in queue \"all.q\"\n")])
    assert get("sge", r).why_pending(["42"]) == {
        "42": 'queue instance "all.q@n1" dropped because it is full; (-l h_vmem=100G) cannot run in queue "all.q"'}
    p = get("slurm", Scripted([(["squeue"], "TIMEOUT")]))
    assert p.why_pending(["11"]) == {} and p.no_answer
    assert get("slurm", Scripted([])).why_pending(["not a job id; rm -rf"]) == {}  # (never asked)
    assert get("local", Scripted([])).why_pending(["123"]) == {}  # (a process: nothing waits in a queue)
