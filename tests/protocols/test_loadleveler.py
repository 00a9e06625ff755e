"""LoadLeveler: the golden command file, scripted llq/llsubmit conversations, and real
pilot runs through the command-level emulator in tests/llemu (llsubmit, llq, llcancel)."""

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import ROOT, TESTS, let_time_pass, read_journal, sample_pilot_job, wait_for
from protocols.base import JobState, PilotJob, SubmitError, get
from protocols.loadleveler import STATES
from protocols.runner import CommandResult, CommandRunner, CommandTimeout

GOLDEN = TESTS / "golden"
LLEMU = TESTS / "llemu"


job = sample_pilot_job


def test_command_file_matches_golden_file():
    text = get("loadleveler", CommandRunner()).render(job())
    golden = GOLDEN / "loadleveler.cmd"
    if os.environ.get("PWE_REGOLD"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_command_file_keywords():
    text = get("loadleveler", CommandRunner()).render(job(partition=None, account=None, walltime=0.5,
                                                          reservation="res.7", memory_mb=4000))
    head = text.split("# @ queue\n")[0]
    assert "# @ class" not in head and "# @ account_no" not in head
    assert "# @ wall_clock_limit = 0:00:30\n" in head
    assert "# @ ll_res_id = res.7\n" in head and "# @ node_resources = ConsumableMemory(4000 mb)\n" in head
    keywords = [line for line in text.splitlines() if line.startswith("# @")]
    assert keywords[-1] == "# @ queue"  # everything after it belongs to no step


class Scripted(CommandRunner):
    """A scripted conversation: (argv prefix, stdout[, exit status]), consumed in order."""

    def __init__(self, steps):
        super().__init__()
        self.steps = list(steps)

    def _run(self, argv, timeout, input, cwd):
        prefix, out, *status = self.steps.pop(0)
        assert argv[: len(prefix)] == prefix, (argv, prefix)
        if out == "TIMEOUT":
            raise CommandTimeout(argv, timeout)
        return CommandResult(argv, status[0] if status else 0, out, "")


def test_every_state_code_is_mapped_in_one_llq_call():
    expected = {
        "I": JobState.PENDING, "NQ": JobState.PENDING, "H": JobState.PENDING, "S": JobState.PENDING,
        "HS": JobState.PENDING, "D": JobState.PENDING, "P": JobState.PENDING, "ST": JobState.PENDING,
        "X": JobState.PENDING, "XP": JobState.PENDING, "E": JobState.PENDING, "MP": JobState.PENDING,
        "R": JobState.RUNNING, "CK": JobState.RUNNING, "EP": JobState.RUNNING, "CP": JobState.RUNNING,
        "RP": JobState.RUNNING, "VP": JobState.RUNNING,
        "C": JobState.COMPLETED, "TX": JobState.COMPLETED, "CA": JobState.CANCELLED, "NR": JobState.CANCELLED,
        "RM": JobState.TIMEOUT, "V": JobState.PREEMPTED, "SX": JobState.FAILED,
    }
    assert STATES == expected
    ids = [f"login1.example.com.{100 + i}.0" for i in range(len(expected))]
    out = "".join(f"{j}!{code}\n" for j, code in zip(ids, expected))
    r = Scripted([(["llq", "-r", "%id", "%st", *ids, "login1.example.com.99.0", "login1.example.com.7"],
                   out + "login1.example.com.7.0!ZZ\n")])
    states = get("loadleveler", r).status(ids + ["login1.example.com.99.0", "login1.example.com.7"])
    assert [states[j] for j in ids] == list(expected.values())
    assert states["login1.example.com.99.0"] == JobState.COMPLETED  # no longer listed: finished
    assert states["login1.example.com.7"] == JobState.UNKNOWN  # a job id finds its step; an unknown code
    assert r.calls["llq"] == 1
    assert {s for s in expected.values() if not s.finished} == {JobState.PENDING, JobState.RUNNING}


def test_llq_that_fails_or_times_out_is_unknown_and_an_empty_queue_is_finished():
    def ll(*steps):
        return get("loadleveler", Scripted(steps))

    assert ll((["llq"], "TIMEOUT")).status(["h.1.0"]) == {"h.1.0": JobState.UNKNOWN}
    down = "llq: 2512-301 An error occurred while receiving data from the LoadL_negotiator daemon.\n"
    assert ll((["llq"], down, 1)).status(["h.1.0"]) == {"h.1.0": JobState.UNKNOWN}
    empty = "llq: There is currently no job status to report.\n"
    assert ll((["llq"], empty)).status(["h.1.0", "h.2.0"]) == {"h.1.0": JobState.COMPLETED,
                                                               "h.2.0": JobState.COMPLETED}
    assert ll().status([]) == {}


def test_job_id_is_parsed_from_llsubmits_message():
    ll = get("loadleveler", CommandRunner())
    msg = 'llsubmit: Processed command file through Submit Filter: "/x/filter".\n' \
          'llsubmit: The job "host.example.com.123" has been submitted.\n'
    assert ll.parse_job_id(msg) == "host.example.com.123.0"
    with pytest.raises(SubmitError):
        ll.parse_job_id("llsubmit: 2512-051 This job has not been submitted to LoadLeveler.")


def test_submit_cancel_and_find_by_name():
    sent = "llcancel: Cancel command has been sent to the central manager.\n"
    r = Scripted([(["llsubmit", "/runs/r1/pilots/p1/job.sh"], 'llsubmit: The job "ll1.42" has been submitted.\n'),
                  (["llcancel", "ll1.42.0", "ll1.43.0"], sent),
                  (["llsubmit"], "", 1)])
    ll = get("loadleveler", r)
    assert ll.submit(job(), "/runs/r1/pilots/p1/job.sh") == "ll1.42.0"
    ll.cancel(["ll1.42.0", "ll1.43.0"])
    with pytest.raises(SubmitError):
        ll.submit(job(), "/runs/r1/pilots/p1/job.sh")
    # a submission that timed out is looked up by name (llq on %jn), never submitted twice
    r = Scripted([(["llsubmit"], "TIMEOUT"),
                  (["llq", "-r", "%id", "%jn"], "ll1.40.0!pwe-r0-p1\nll1.41.0!pwe-r1-p1\n")])
    assert get("loadleveler", r).submit(job(), "/runs/r1/pilots/p1/job.sh") == "ll1.41.0"
    assert r.calls["llsubmit"] == 1
    r = Scripted([(["llq"], "llq: There is currently no job status to report.\n")])
    assert get("loadleveler", r).find_by_name("pwe-r1-p1") is None


# -- against the emulator ------------------------------------------------------------------

@pytest.fixture
def emu(tmp_path, monkeypatch):
    """The emulator's commands first on PATH, its state in tmp_path; what it leaves is stopped."""
    monkeypatch.setenv("PATH", f"{LLEMU}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LLEMU_DIR", str(tmp_path / "llemu"))
    monkeypatch.setenv("LLEMU_GRACE", "1")
    from protocols.runner import LocalRunner

    ll = get("loadleveler", LocalRunner())
    yield ll
    subprocess.run(["llcancel", *[p.name[:-5] for p in (tmp_path / "llemu").glob("*.json")]],
                   capture_output=True)


def step_pids(step):
    sys.path.insert(0, str(LLEMU))
    try:
        import llemu
    finally:
        sys.path.remove(str(LLEMU))
    return llemu.step_pids(step)


def wait_finished(ll, jid, timeout=60.0):
    """Wait until the job has finished: (its final state, every state seen)."""
    seen = []

    def finished():
        state = ll.status([jid])[jid]
        if not seen or seen[-1] != state:
            seen.append(state)
        return state.finished
    try:
        wait_for(finished, timeout, f"{jid} to finish", step=0.2)
    except AssertionError:
        raise AssertionError(f"{jid} still {seen[-1]} after {timeout} s") from None
    return seen[-1], seen


def events(pilot_dir):
    p = Path(pilot_dir) / "events.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def pilot_job(tmp_path, tasks, stop=True, **kw):
    d = tmp_path / "pilot"
    d.mkdir()
    lines = [dict(k="task", n="sim", m=i, a=1, cmd=cmd, cwd=str(tmp_path / "members" / str(i)),
                  env={"PWE_MEMBER": str(i)}, ranks=1, threads=1) for i, cmd in enumerate(tasks)]
    lines += [{"k": "stop"}] if stop else []
    (d / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in lines))
    notify = tmp_path / "notify"
    notify.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "edges.log"}\n')
    notify.chmod(0o755)
    args = dict(pilot_id="p1", pilot_dir=str(d), job_name=f"pwe-t{os.getpid()}-p1", nodes=2, cores_per_node=2,
                walltime=5, python=sys.executable, pythonpath=str(ROOT), notify=[str(notify)],
                pilot_args=["--heartbeat", "1", "--idle-timeout", "30"])
    args.update(kw)
    return PilotJob(**args)


def submit(ll, pj):
    script = Path(pj.pilot_dir) / "job.sh"
    script.write_text(ll.render(pj))
    return ll.submit(pj, str(script))


def test_a_pilot_runs_its_members_inside_an_emulated_allocation(emu, tmp_path, monkeypatch):
    monkeypatch.setenv("LLEMU_PROBE", "copied")  # environment = COPY_ALL
    gate = tmp_path / "gate"  # members wait for it, so the step is provably live when first polled
    pj = pilot_job(tmp_path, [f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.05; done; "
                              "printf 'probe=%s\\nstep=%s\\n' $LLEMU_PROBE $LOADL_STEP_ID >> $PWE_OUTPUTS"] * 6,
                   partition="short", account="abc123")
    jid = submit(emu, pj)
    host = socket.gethostname()
    assert jid == f"{host}.1.0"
    assert emu.find_by_name(pj.job_name) == jid
    row = subprocess.run(["llq", "-r", "%id", "%jn", "%c", "%a", jid], capture_output=True, text=True).stdout
    assert row.strip() == f"{jid}!{pj.job_name}!short!abc123"
    assert emu.status([jid])[jid] in (JobState.PENDING, JobState.RUNNING)
    gate.touch()
    state, seen = wait_finished(emu, jid)
    assert state == JobState.COMPLETED, seen
    evs = events(pj.pilot_dir)
    up = next(e for e in evs if e["k"] == "up")
    assert up["allocation"] == "loadleveler" and up["job"] == jid
    assert up["nodes"] == {host: 4}  # LOADL_HOSTFILE: node x tasks_per_node lines of this host
    ends = {e["m"]: e for e in evs if e["k"] == "end"}
    assert sorted(ends) == list(range(6)) and all(e["rc"] == 0 for e in ends.values()), ends
    assert all(e["out"] == {"probe": "copied", "step": jid} for e in ends.values())
    assert evs[-1]["k"] == "down" and evs[-1]["why"] == "stop"
    edges = (tmp_path / "edges.log").read_text().splitlines()
    assert edges == [f"started {jid}", f"ended {jid} 0"]  # the command file's user-exit calls
    # a finished step stays listed for LLEMU_FORGET s, then llq forgets it: still finished
    assert "!C" in subprocess.run(["llq", "-r", "%id", "%st"], capture_output=True, text=True).stdout
    monkeypatch.setenv("LLEMU_FORGET", "0")
    out = subprocess.run(["llq", "-r", "%id", "%st", jid], capture_output=True, text=True).stdout
    assert out == "llq: There is currently no job status to report.\n"
    assert emu.status([jid]) == {jid: JobState.COMPLETED}


def test_llcancel_of_a_running_pilot_is_cancelled(emu, tmp_path):
    pj = pilot_job(tmp_path, ["sleep 300"], stop=False)
    jid = submit(emu, pj)
    wait_for(lambda: any(e["k"] == "start" for e in events(pj.pilot_dir)), 30, "the member to start", step=0.1)
    assert emu.status([jid]) == {jid: JobState.RUNNING}
    emu.cancel([jid])
    state, seen = wait_finished(emu, jid)
    assert state == JobState.CANCELLED, seen
    assert not step_pids(jid)  # the pilot and its member (in its own session) are gone
    assert events(pj.pilot_dir)[-1]["k"] == "down"  # SIGTERM first: the pilot stopped its members and said so


def test_llcancel_before_dispatch_and_a_held_step(emu, tmp_path):
    cmd = tmp_path / "held.cmd"
    cmd.write_text("# @ job_name = held\n# @ hold = user\n# @ queue\ntouch ran\n")
    jid = emu.submit(job(pilot_dir=str(tmp_path)), str(cmd))
    let_time_pass(0.6, "past the start delay: a held step is not dispatched")
    assert subprocess.run(["llq", "-r", "%st", jid], capture_output=True, text=True).stdout == "H\n"
    assert emu.status([jid]) == {jid: JobState.PENDING}
    emu.cancel([jid])
    assert emu.status([jid]) == {jid: JobState.CANCELLED}
    assert not (tmp_path / "ran").exists()


def test_a_pilot_over_its_wall_clock_limit_is_removed_as_timeout(emu, tmp_path):
    # the pilot itself drains before its walltime; a setup line that hangs overruns it
    pj = pilot_job(tmp_path, ["true"], walltime=0.05, setup=["sleep 300"])
    assert "# @ wall_clock_limit = 0:00:03\n" in emu.render(pj)
    jid = submit(emu, pj)
    t0 = time.time()
    state, seen = wait_finished(emu, jid)
    assert state == JobState.TIMEOUT and JobState.RUNNING in seen, seen
    assert 2.5 < time.time() - t0 < 120  # (removed at its limit, not after its setup's 300 s)
    assert subprocess.run(["llq", "-r", "%st", jid], capture_output=True, text=True).stdout == "RM\n"
    assert not step_pids(jid)
    assert not events(pj.pilot_dir)  # the pilot never came up


def test_llsubmit_rejects_a_command_file_without_queue(emu, tmp_path):
    cmd = tmp_path / "noqueue.cmd"
    cmd.write_text("#!/bin/bash\n# @ job_name = x\n# @ wall_clock_limit = 0:01:00\necho hi\n")
    proc = subprocess.run(["llsubmit", str(cmd)], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert 'does not contain a "queue" keyword' in proc.stderr
    assert proc.stderr.rstrip().endswith("llsubmit: 2512-051 This job has not been submitted to LoadLeveler.")
    with pytest.raises(SubmitError, match="2512-051"):
        emu.submit(job(pilot_dir=str(tmp_path)), str(cmd))
    cmd.write_text("# @ job_nmae = x\n# @ queue\n")  # a misspelt keyword is refused too
    assert subprocess.run(["llsubmit", str(cmd)], capture_output=True, text=True).returncode == 1


def test_engine_runs_a_workflow_through_loadleveler_pilots(tmp_path):
    """The whole path: pwe run on a loadleveler host, llsubmit/llq of the emulator."""
    _os, _sp, _sys = os, subprocess, sys
    root = ROOT
    (tmp_path / "hosts.yaml").write_text("hosts:\n  ll:\n    protocol: loadleveler\n    cores_per_node: 4\n"
                                         "    max_nodes: 1\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: llwf\nnodes:\n  a:\n    parameters: {i: {range: [0, 20]}}\n"
                  "    run: echo step=$LOADL_STEP_ID >> $PWE_OUTPUTS\n    scheduling: {maxWallTime: 5}\n"
                  "  b:\n    after: [a]\n    run: 'true'\n")
    env = dict(_os.environ, PYTHONPATH=str(root), PATH=f"{root / 'tests' / 'llemu'}:{_os.environ['PATH']}",
               LLEMU_DIR=str(tmp_path / "llemu"))
    proc = _sp.run([_sys.executable, "-m", "pwe", "run", str(wf), "--host", "ll", "--run-dir", str(tmp_path / "run")],
                   cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    journal = read_journal(tmp_path / "run")
    pilots = [r for r in journal if r["e"] == "pilot"]
    assert pilots and pilots[0]["batch"] == "loadleveler"
    steps = {r["out"]["step"] for r in journal if r["e"] == "end" and r.get("out")}
    assert steps == {pilots[0]["job"]}


def test_a_missing_llsubmit_stops_the_run_resumably(tmp_path):
    """A pilot submission that fails (here llsubmit is not installed) stops the
    run with one line saying what the batch system answered, exit status 3, the run kept;
    once the host works (the emulator on PATH), `pwe resume` runs every member once."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  ll:\n    protocol: loadleveler\n    cores_per_node: 4\n"
                                         "    max_nodes: 1\n")
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: llmiss\nnodes:\n  a:\n    parameters: {i: {range: [0, 6]}}\n"
                  f"    run: echo $PWE_MEMBER >> {ledger}\n    scheduling: {{maxWallTime: 5}}\n")
    base = dict(os.environ, PYTHONPATH=str(ROOT), LLEMU_DIR=str(tmp_path / "llemu"))
    run = tmp_path / "run"

    def pwe(*args, path=os.environ["PATH"]):
        return subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], cwd=tmp_path,
                              env=dict(base, PATH=path), capture_output=True, text=True, timeout=120)

    first = pwe("run", wf, "--host", "ll", "--run-dir", run)
    assert first.returncode == 3, first.stderr
    last = first.stderr.strip().splitlines()[-1]
    assert "Traceback" not in first.stderr
    assert "stopped with its state intact: the batch system refused a pilot job for host 'll'" in last, last
    assert "llsubmit: command not found" in last and last.endswith(f"then: pwe resume {run}"), last
    status = json.loads(pwe("status", run, "--json").stdout)
    assert status["phase"].startswith("stopped: the batch system refused a pilot job"), status
    assert status["totals"]["done"] == 0 and not ledger.exists()
    second = pwe("resume", run, path=f"{LLEMU}:{os.environ['PATH']}")
    assert second.returncode == 0, second.stderr
    assert sorted(ledger.read_text().split()) == [str(i) for i in range(6)]
    assert json.loads(pwe("status", run, "--json").stdout)["phase"] == "succeeded"
