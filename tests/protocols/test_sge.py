"""Grid Engine: the golden job script, recorded qstat -xml / qacct answers, $PE_HOSTFILE,
the checks before a run, and workflows through pilots on the real cell that
tests/cluster/sge.sh starts (sge_qmaster and one sge_execd here, parallel environment pwe)."""

import json
import os
import stat
import subprocess
import sys
from datetime import datetime

import pytest

from helpers import ROOT, TESTS, kill_pilot, ledger_counts, read_journal, run_cli, sample_pilot_job, wait_for
from hostinfo.model import Host
from protocols.base import JobState, SubmitError, get
from protocols.runner import CommandResult, CommandRunner, CommandTimeout, LocalRunner
from protocols.sge import job_state, parse_qacct, parse_qstat_xml

GOLDEN = TESTS / "golden"


def job(**kw):
    return sample_pilot_job(**{"parallel_environment": "mpi", **kw})


class Scripted(CommandRunner):
    """A scripted conversation: (argv prefix, stdout[, exit status[, stderr]]), in order;
    stdout "TIMEOUT" times out. ``seen`` keeps every argv run."""

    def __init__(self, steps):
        super().__init__()
        self.steps, self.seen = list(steps), []

    def _run(self, argv, timeout, input, cwd):
        self.seen.append(argv)
        prefix, out, status, err = (*self.steps.pop(0), 0, "")[:4]
        assert argv[: len(prefix)] == prefix, (argv, prefix)
        if out == "TIMEOUT":
            raise CommandTimeout(argv, timeout)
        return CommandResult(argv, status, out, err)


def sge(*steps, host=None):
    return get("sge", Scripted(steps), host)


# -- the job script ---------------------------------------------------------------------------

def test_job_script_matches_golden_file():
    text = get("sge", CommandRunner()).render(job())
    golden = GOLDEN / "sge.sh"
    if os.environ.get("PWE_REGOLD"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_job_script_directives():
    render = get("sge", CommandRunner()).render
    head = render(job(nodes=1, cores_per_node=1)).split("# pwe pilot")[0]
    assert "#$ -pe" not in head  # one slot: no parallel environment asked for
    head = render(job(nodes=3, cores_per_node=4, partition=None, account=None, walltime=0.5)).split("# pwe pilot")[0]
    assert "#$ -pe mpi 12\n" in head and "#$ -l h_rt=0:00:30\n" in head
    assert "#$ -q" not in head and "#$ -A" not in head
    when = datetime(2031, 3, 4, 5, 6, 7).astimezone()
    assert "#$ -a 203103040506.07\n" in render(job(begin=when))  # [[CC]YY]MMDDhhmm[.SS], this machine's time
    assert all(line.startswith("#$ ") for line in head.splitlines()[1:]), head  # directives only


def test_the_body_is_the_one_every_scheduler_shares():
    text = get("sge", CommandRunner()).render(job())
    slurm = get("slurm", CommandRunner()).render(job())
    body = text[text.index("\nmodule load python\n"):]
    assert body == slurm[slurm.index("\nmodule load python\n"):].replace("$SLURM_JOB_ID", "$JOB_ID")
    assert 'started "$JOB_ID"' in body and "trap 'exit 143' TERM" in body


# -- qsub, qstat -xml, qacct, qdel ------------------------------------------------------------

RUNNING_PENDING_ERROR = """<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
    <job_list state="running">
      <JB_job_number>2</JB_job_number>
      <JAT_prio>0.50000</JAT_prio>
      <JB_name>pwe-r1-p1</JB_name>
      <JB_owner>root</JB_owner>
      <state>r</state>
      <JAT_start_time>2026-11-25T13:16:22</JAT_start_time>
      <queue_name>all.q@vm</queue_name>
      <slots>1</slots>
    </job_list>
  </queue_info>
  <job_info>
    <job_list state="pending">
      <JB_job_number>4</JB_job_number>
      <JAT_prio>0.50000</JAT_prio>
      <JB_name>pwe-r1-p3</JB_name>
      <JB_owner>root</JB_owner>
      <state>Eqw</state>
      <JB_submission_time>2026-11-25T13:16:22</JB_submission_time>
      <queue_name></queue_name>
      <slots>1</slots>
    </job_list>
    <job_list state="pending">
      <JB_job_number>3</JB_job_number>
      <JAT_prio>0.00000</JAT_prio>
      <JB_name>pwe-r1-p2</JB_name>
      <JB_owner>root</JB_owner>
      <state>hqw</state>
      <JB_submission_time>2026-11-25T13:16:22</JB_submission_time>
      <queue_name></queue_name>
      <slots>1</slots>
    </job_list>
    <job_list state="pending">
      <JB_job_number>5</JB_job_number>
      <JAT_prio>0.00000</JAT_prio>
      <JB_name>s30.sh</JB_name>
      <JB_owner>root</JB_owner>
      <state>qw</state>
      <JB_submission_time>2026-11-25T13:16:22</JB_submission_time>
      <queue_name></queue_name>
      <slots>1</slots>
      <tasks>1-4:1</tasks>
    </job_list>
  </job_info>
</job_info>
"""
EMPTY = """<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
  </queue_info>
  <job_info>
  </job_info>
</job_info>
"""
QACCT = "==============================================================\nqname        all.q\nhostname     vm\n" \
        "jobnumber    {job}\nfailed       {failed}\nexit_status  {status}\nru_wallclock 2.012\n"
DOWN = ("error: commlib error: got select error (Connection refused)\n"
        "error: unable to send message to qmaster using port 6444 on host \"vm\": got send error\n")


def test_recorded_qstat_xml_running_pending_error_and_empty():
    assert parse_qstat_xml(RUNNING_PENDING_ERROR) == {"2": "r", "4": "Eqw", "3": "hqw", "5": "qw"}
    assert parse_qstat_xml(EMPTY) == {}
    r = Scripted([(["qstat", "-xml"], RUNNING_PENDING_ERROR), (["qdel", "4"], "root has deleted job 4\n")])
    states = get("sge", r).status(["2", "3", "4", "5"])
    assert states == {"2": JobState.RUNNING, "3": JobState.PENDING, "4": JobState.FAILED, "5": JobState.PENDING}
    # one qstat for every job; the job in an error state (it never leaves it by itself) is deleted
    assert r.calls["qstat"] == 1 and r.seen[1] == ["qdel", "4"]


def test_a_job_qstat_no_longer_lists_is_asked_of_qacct_once():
    r = Scripted([(["qstat", "-xml"], EMPTY),
                  (["qacct", "-j", "7"], QACCT.format(job=7, failed=0, status=0)),
                  (["qacct", "-j", "8"], QACCT.format(job=8, failed=0, status=3)),
                  (["qacct", "-j", "9"], QACCT.format(job=9, failed="37  : qmaster enforced h_rt, h_cpu, or h_vmem "
                                                                    "limit", status="137 (Killed)")),
                  (["qacct", "-j", "10"], QACCT.format(job=10, failed="100 : assumedly after job",
                                                       status="137                  (Killed)")),
                  (["qacct", "-j", "11"], "", 1, "error: job id 11 not found\n"),
                  (["qacct", "-j", "12"], "TIMEOUT")])
    states = get("sge", r).status(["7", "8", "9", "10", "11", "12"])
    assert states == {"7": JobState.COMPLETED, "8": JobState.FAILED, "9": JobState.TIMEOUT, "10": JobState.CANCELLED,
                      "11": JobState.COMPLETED, "12": JobState.COMPLETED}
    assert r.calls["qstat"] == 1 and r.calls["qacct"] == 6 and not r.steps


def test_a_qmaster_that_does_not_answer_is_unknown_never_an_end():
    s = sge((["qstat"], "", 1, DOWN))
    assert s.status(["5", "6"]) == {"5": JobState.UNKNOWN, "6": JobState.UNKNOWN}
    assert "unable to send message to qmaster" in s.no_answer
    assert sge((["qstat"], "TIMEOUT")).status(["5"]) == {"5": JobState.UNKNOWN}
    assert sge((["qstat"], "not xml at all")).status(["5"]) == {"5": JobState.UNKNOWN}
    assert sge().status(["--help", "5;rm"]) == {"--help": JobState.UNKNOWN, "5;rm": JobState.UNKNOWN}  # never asked


def test_every_state_code():
    expected = {"qw": JobState.PENDING, "hqw": JobState.PENDING, "hRwq": JobState.PENDING, "w": JobState.PENDING,
                "r": JobState.RUNNING, "t": JobState.RUNNING, "Rr": JobState.RUNNING, "Rt": JobState.RUNNING,
                "dr": JobState.RUNNING, "dt": JobState.RUNNING, "s": JobState.PENDING, "ts": JobState.PENDING,
                "S": JobState.PENDING, "T": JobState.PENDING, "dS": JobState.PENDING, "Eqw": JobState.FAILED,
                "Ehqw": JobState.FAILED, "EhRqw": JobState.FAILED, "dqw": JobState.CANCELLED,
                "z": JobState.COMPLETED, "": JobState.UNKNOWN, "?": JobState.UNKNOWN}
    assert {code: job_state(code) for code in expected} == expected
    assert parse_qacct("error: job id 3 not found") is None


def test_qsub_terse_answers_and_the_commands_dir():
    s = get("sge", CommandRunner())
    assert s.parse_job_id("123\n") == "123" and s.parse_job_id("5.1-4:1\n") == "5"
    with pytest.raises(SubmitError):
        s.parse_job_id("Unable to run job: job rejected: no suitable queues.\n")
    host = Host(name="g", protocol="sge", commands_dir="/opt/sge/bin/lx-amd64/", parallel_environment="mpi")
    # (-o/-e /dev/null: the script writes its own job.out and job.err, test_scheduler_syntax.py)
    r = Scripted([(["/opt/sge/bin/lx-amd64/qsub", "-terse", "-o", "/dev/null", "-e", "/dev/null",
                   "/runs/r1/pilots/p1/job.sh"], "42\n"),
                  (["/opt/sge/bin/lx-amd64/qstat", "-xml"], EMPTY),
                  (["/opt/sge/bin/lx-amd64/qacct", "-j", "42"], "", 1, "error: job id 42 not found\n"),
                  (["/opt/sge/bin/lx-amd64/qdel", "42"], ""),
                  (["/opt/sge/bin/lx-amd64/qconf", "-spl"], "make\nmpi\n")])
    s = get("sge", r, host)
    assert s.submit(job(), "/runs/r1/pilots/p1/job.sh") == "42"
    assert s.status(["42"]) == {"42": JobState.COMPLETED}
    s.cancel(["42", "-x"])
    assert s.parallel_environments() == ["make", "mpi"]
    assert (r.calls["qsub"], r.calls["qstat"], r.calls["qdel"]) == (1, 1, 1)  # counted by name, wherever they are


def test_a_timed_out_submission_is_found_by_name():
    r = Scripted([(["qsub"], "TIMEOUT"), (["qstat", "-xml"], RUNNING_PENDING_ERROR)])
    assert get("sge", r).submit(job(job_name="pwe-r1-p2"), "/x/job.sh") == "3" and r.calls["qsub"] == 1


# -- the pilot in an SGE job -------------------------------------------------------------------

def test_pe_hostfile_gives_the_nodes_and_their_slots(tmp_path):
    from pilot.allocation import discover, pe_hostfile

    f = tmp_path / "pe_hostfile"
    f.write_text("node1.example.org 4 all.q@node1.example.org UNDEFINED\nnode2 2 all.q@node2 UNDEFINED\n"
                 "node2 1 long.q@node2 UNDEFINED\n")
    assert pe_hostfile(str(f)) == [("node1.example.org", 4), ("node2", 3)]
    alloc = discover(env={"PE_HOSTFILE": str(f), "JOB_ID": "42", "NSLOTS": "7"}, walltime_minutes=10, started=100)
    assert (alloc.kind, alloc.job_id, alloc.cores, alloc.end) == ("sge", "42", 7, 700)
    assert [(n.name, n.cores, n.local) for n in alloc.nodes] == [("node1.example.org", 4, False), ("node2", 3, False)]
    serial = discover(env={"JOB_ID": "43", "NSLOTS": "1", "SGE_ROOT": "/opt/sge"})  # no PE: one slot, here
    assert (serial.kind, serial.cores, serial.nodes[0].local) == ("sge", 1, True)
    f.write_text("-oProxyCommand=x 4 all.q@x UNDEFINED\n")
    with pytest.raises(ValueError):
        discover(env={"PE_HOSTFILE": str(f), "JOB_ID": "44"})  # never a launcher's option


def test_launchers_across_the_nodes_of_an_sge_job():
    from pilot.allocation import Node
    from pilot.launchers import choose

    here, there = Node("vm", 4, local=True), Node("node2", 4)
    assert choose("sge", [(here, 1)], 1) == "fork"
    assert choose("sge", [(there, 1)], 1) == "ssh"
    assert choose("sge", [(here, 2), (there, 2)], 4) == "mpiexec"


# -- before a run: the host's entry and its parallel environment -------------------------------

WF = "name: w\nnodes:\n  m:\n    parameters: {i: {range: [0, 4]}}\n    run: 'true'\n    scheduling: {maxWallTime: 5}\n"


def test_host_entries():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="absolute path"):
        Host(protocol="sge", commands_dir="bin/lx-amd64")
    with pytest.raises(ValidationError, match="one word"):
        Host(protocol="sge", parallel_environment="-notify")
    assert Host(protocol="sge", parallel_environment="mpi", commands_dir="/opt/sge/bin").parallel_environment == "mpi"


def test_a_multi_node_sge_host_without_a_pe_is_refused_and_a_one_slot_one_warned(tmp_path):
    (tmp_path / "wf.yaml").write_text(WF)
    (tmp_path / "hosts.yaml").write_text("hosts:\n  g:\n    protocol: sge\n    cores_per_node: 4\n"
                                         "  one:\n    protocol: sge\n    cores_per_node: 4\n    max_nodes: 1\n")
    rc, out, err = run_cli("plan", tmp_path / "wf.yaml", "--host", "g", cwd=tmp_path)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "host 'g' (sge) names no parallel_environment" in err and "max_nodes: 1" in err
    rc, out, err = run_cli("plan", tmp_path / "wf.yaml", "--host", "one", cwd=tmp_path)
    assert rc == 0, err
    assert "each pilot job gets one slot and runs one member at a time" in out + err
    assert "#$ -pe" not in out


# -- the real cell -----------------------------------------------------------------------------

def hosts_yaml(tmp_path, cell, commands_dir=None, pe=None):
    (tmp_path / "hosts.yaml").write_text(f"""
hosts:
  sge:
    protocol: sge
    commands_dir: {commands_dir or cell["SGE_BIN"]}
    parallel_environment: {pe or cell["SGE_PE"]}
    cores_per_node: 4
    max_nodes: 1
""")


def shim(tmp_path, cell):
    """A commands_dir whose qsub/qstat/... log each call, then run the cell's own."""
    bindir, log = tmp_path / "shim", tmp_path / "calls.log"
    bindir.mkdir()
    for cmd in ("qsub", "qstat", "qdel", "qacct", "qconf"):
        p = bindir / cmd
        p.write_text(f'#!/bin/sh\necho {cmd} >> {log}\nexec {cell["SGE_BIN"]}/{cmd} "$@"\n')
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return bindir, log


def env_of(cell):
    return dict(os.environ, PYTHONPATH=str(ROOT), **{k: v for k, v in cell.items() if k.startswith("SGE_")})


def pwe(cell, *args, cwd, timeout=180):
    return subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], cwd=cwd, env=env_of(cell),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def ledger_workflow(tmp_path, members=6, sleep=1):
    wf = tmp_path / "wf.yaml"
    ledger = tmp_path / "ledger"
    wf.write_text(f"name: sgeledger\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {members}]}}}}\n"
                  f"    run: echo \"start m $PWE_MEMBER $JOB_ID\" >> {ledger}; sleep {sleep}; "
                  f"echo \"end m $PWE_MEMBER $JOB_ID\" >> {ledger}\n    scheduling: {{maxWallTime: 5}}\n")
    return wf, ledger


def qstat_jobs(cell):
    out = subprocess.run([f"{cell['SGE_BIN']}/qstat", "-xml"], env=env_of(cell), capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return parse_qstat_xml(out)


def test_workflow_runs_in_one_sge_pilot_through_its_parallel_environment(sge_cell, tmp_path):
    from pwe.runstate.notify import receive

    bindir, calls = shim(tmp_path, sge_cell)
    hosts_yaml(tmp_path, sge_cell, commands_dir=bindir)
    wf, ledger = ledger_workflow(tmp_path)
    run = tmp_path / "run"
    proc = pwe(sge_cell, "run", wf, "--host", "sge", "--run-dir", run, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    starts, ends = ledger_counts(ledger)
    jobs = {w.split()[3] for w in ledger.read_text().splitlines()}
    assert starts == ends == {("m", str(i)): 1 for i in range(6)}, (starts, ends)  # each member once
    journal = read_journal(run)
    pilots = [r for r in journal if r["e"] == "pilot"]
    assert [p["job"] for p in pilots] == list(jobs) and jobs != {""}  # one SGE job: $JOB_ID in every member
    assert f"#$ -pe {sge_cell['SGE_PE']} 4\n" in (run / "pilots" / "p1" / "job.sh").read_text()
    assert calls.read_text().split().count("qsub") == 1
    status = json.loads(pwe(sge_cell, "status", run, "--json", cwd=tmp_path).stdout)
    assert status["totals"]["done"] == 6 and status["finished_ok"] and status["pilots"]["p1"]["batch"] == "sge"
    # the job's edge events (pwe notify from the job script): "started" taken in by the engine,
    # "ended" (after the pilot, when the engine had finished) signed in edges/ with status 0
    edges = [r for r in journal if r["e"] == "edge"]
    assert [(r["event"], r["job"], r["pilot"]) for r in edges] == [("started", pilots[0]["job"], "p1")], edges
    def edge_events():
        return sorted((m["event"], m["job"], m.get("status"), ok) for m, ok in receive(run, set()))

    # (the trap runs once the pilot has left: maybe after `pwe run` returned)
    wait_for(lambda: len(edge_events()) == 2, 60, "the job's ended edge event")
    assert edge_events() == [("ended", pilots[0]["job"], 0, True), ("started", pilots[0]["job"], None, True)]


def test_a_killed_sge_pilot_says_ended_and_its_members_go_to_another(sge_cell, tmp_path):
    """kill -9 of the pilot inside its SGE job: the job script's EXIT trap sends the "ended"
    edge event (status 137), the engine takes it in, gives the pilot up and starts p2, which
    runs the members p1 had. (SGE kills only the job's process group when its script ends:
    the members the dead pilot started, each in its own session, run on to their end, so
    those end twice in the ledger; every member ends at least once and the run is done.)"""
    hosts_yaml(tmp_path, sge_cell)
    wf, ledger = ledger_workflow(tmp_path, members=8, sleep=2)
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--host", "sge", "--run-dir", str(run)],
                            cwd=tmp_path, env=env_of(sge_cell), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        events = run / "pilots" / "p1" / "events.jsonl"
        wait_for(lambda: events.exists() and b'"start"' in events.read_bytes(), 60, "p1's first member")
        kill_pilot(events)
        out, err = proc.communicate(timeout=150)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    journal = read_journal(run)
    job1 = next(r["job"] for r in journal if r["e"] == "pilot" and r["p"] == "p1")
    ended = [r for r in journal if r["e"] == "edge" and r["event"] == "ended" and r["pilot"] == "p1"]
    assert ended and ended[0]["job"] == job1 and ended[0]["status"] == 137, ended
    assert any(r["e"] == "pilot_gone" and r["p"] == "p1" for r in journal)
    assert any(r["e"] == "pilot" and r["p"] == "p2" for r in journal)
    _, ends = ledger_counts(ledger)
    assert set(ends) == {("m", str(i)) for i in range(8)}, ends
    status = json.loads(pwe(sge_cell, "status", run, "--json", cwd=tmp_path).stdout)
    assert status["totals"]["done"] == 8 and status["finished_ok"], status


def test_submit_then_cancel_ends_the_sge_job(sge_cell, tmp_path):
    hosts_yaml(tmp_path, sge_cell)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: slow\nnodes:\n  m:\n    parameters: {i: {range: [0, 4]}}\n    run: sleep 120\n"
                  "    scheduling: {maxWallTime: 5}\n")
    run = tmp_path / "run"
    sub = pwe(sge_cell, "submit", wf, "--host", "sge", "--run-dir", run, cwd=tmp_path)
    assert sub.returncode == 0, sub.stderr

    def job_id():
        return next((r["job"] for r in read_journal(run) if r["e"] == "pilot"), None) \
            if (run / "journal.jsonl").exists() else None

    wait_for(lambda: job_id() is not None, 60, "the pilot's submission")
    jid = job_id()
    wait_for(lambda: qstat_jobs(sge_cell).get(jid) == "r", 60, f"SGE job {jid} running")
    cancel = pwe(sge_cell, "cancel", run, cwd=tmp_path)
    assert cancel.returncode == 0, cancel.stderr
    wait_for(lambda: jid not in qstat_jobs(sge_cell), 90, f"SGE job {jid} gone from qstat")
    status = json.loads(pwe(sge_cell, "status", run, "--json", cwd=tmp_path).stdout)
    assert status["cancelled"] and status["totals"]["cancelled"] == 4 and status["totals"]["done"] == 0, status
    assert status["pilots"]["p1"]["job"] == jid


def test_a_parallel_environment_the_cell_lacks_is_refused_in_one_line(sge_cell, tmp_path):
    hosts_yaml(tmp_path, sge_cell, pe="nosuchpe")
    wf, _ = ledger_workflow(tmp_path)
    run = tmp_path / "run"
    for args in (("run", wf, "--host", "sge", "--run-dir", run), ("plan", wf, "--host", "sge")):
        proc = pwe(sge_cell, *args, cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"{tmp_path / 'hosts.yaml'}:6: host 'sge': parallel environment 'nosuchpe' does not exist" in lines[0]
        assert "qconf -spl lists: " in lines[0] and sge_cell["SGE_PE"] in lines[0].split("lists: ")[1]
    assert not run.exists() and not (tmp_path / "pwe-runs").exists()  # nothing made


def test_real_qstat_and_qacct_say_running_then_cancelled(sge_cell, tmp_path, monkeypatch):
    """The protocol against the cell itself: a job running, then deleted (qacct: killed)."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsleep 60\n")
    host = Host(name="sge", protocol="sge", commands_dir=sge_cell["SGE_BIN"])
    for k, v in sge_cell.items():
        monkeypatch.setenv(k, v)  # (the commands read SGE_ROOT and the ports from the environment)
    protocol = get("sge", LocalRunner(), host)
    res = protocol.runner.run(["qsub", "-terse", "-o", str(tmp_path), "-e", str(tmp_path), str(script)])
    jid = protocol.parse_job_id(res.stdout)
    assert protocol.parallel_environments() and sge_cell["SGE_PE"] in protocol.parallel_environments()
    wait_for(lambda: protocol.status([jid])[jid] is JobState.RUNNING, 60, f"job {jid} running")
    protocol.cancel([jid])
    wait_for(lambda: protocol.status([jid])[jid].finished, 60, f"job {jid} ended")
    wait_for(lambda: protocol.status([jid])[jid] is JobState.CANCELLED, 30, "qacct's record of the kill")
