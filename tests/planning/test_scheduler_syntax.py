"""Values a batch system parses as more than text (issue 45, part 3): passed literally or refused.

Grid Engine reads ``-o``/``-e`` as ``[host:]path`` and expands ``$HOME``, ``$JOB_ID``... in
them (and in ``-cwd``'s directory); LoadLeveler substitutes ``$(...)`` in a keyword's value;
SLURM reads ``%j`` in an output path and drops every backslash of one that holds one (the
job's working directory included, which is how the PBS front end's relative names go wrong).
A run directory holding these must change nothing: the real SLURM (sbatch and its PBS front
end), the real Grid Engine cell and the LoadLeveler emulator each run a workflow whose run
directory holds them all, and the pilot's output lands in its directory and nowhere else.
Values of directive lines are escaped where the batch system reads escapes (sbatch) and
refused in one line, exit 2, nothing written, where it reads none (Grid Engine, LoadLeveler).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, call_cli, read_journal, sample_pilot_job

PY = sys.executable
LLEMU = ROOT / "tests" / "llemu"
#: every batch system's syntax in one directory name: Grid Engine's host part and pseudo
#: variables, LoadLeveler's $(...), SLURM's %j and backslash, a comment, parentheses, spaces
DIRT = "d a:b $HOME $JOB_ID %j $(jobid) (x) #y \\z"
#: the same without a backslash (SLURM then takes the whole path, its '%' doubled)
NO_BACKSLASH = DIRT.replace(" \\z", "")


def directives(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith(("#SBATCH", "#PBS", "#$", "# @"))]


def render(protocol: str, pilot_dir: str, **kw):
    from protocols.registry import get
    from protocols.runner import LocalRunner

    proto = get(protocol, LocalRunner())
    job = sample_pilot_job(pilot_dir=pilot_dir, parallel_environment="pe", **kw)
    return proto, job, proto.render(job)


@pytest.mark.parametrize("protocol,base,args,redirect", [
    ("sge", "/runs/plain", ["-o", "/dev/null", "-e", "/dev/null"], True),
    ("sge", f"/runs/{NO_BACKSLASH}", ["-o", "/dev/null", "-e", "/dev/null"], True),
    ("slurm", f"/runs/{NO_BACKSLASH}", [f"--output=/runs/{NO_BACKSLASH.replace('%', '%%')}/pilots/p1/job.out",
                                        f"--error=/runs/{NO_BACKSLASH.replace('%', '%%')}/pilots/p1/job.err"], False),
    ("slurm", f"/runs/{DIRT}", ["--output=/dev/null", "--error=/dev/null"], True),
    ("pbs", "/runs/plain $HOME:x", ["-o", "job.out", "-e", "job.err"], False),
    ("pbs", "/runs/a%jb", ["-o", "/dev/null", "-e", "/dev/null"], True),
    ("pbs", "/runs/a\\b", ["-o", "/dev/null", "-e", "/dev/null"], True),
    ("loadleveler", f"/runs/{DIRT}", [], False),
])
def test_the_output_files_reach_the_batch_system_only_in_words_it_reads_literally(protocol, base, args, redirect):
    import shlex

    pilot = f"{base}/pilots/p1"
    proto, job, script = render(protocol, pilot)
    assert proto.submit_args(job) == args
    said = [line for line in script.splitlines() if line.startswith("exec ")]
    assert said == ([f"exec >>{shlex.quote(pilot + '/job.out')} 2>>{shlex.quote(pilot + '/job.err')} || exit 1"]
                    if redirect else []), script
    assert not any(base in line for line in directives(script)), script
    if protocol == "loadleveler":  # (relative to initialdir: where llsubmit ran, the pilot's directory)
        assert "# @ output = job.out" in script and "# @ error = job.err" in script


STUB = "#!/bin/sh\necho pilot-out \"$@\"\necho pilot-err >&2\n"


@pytest.mark.parametrize("protocol,name", [("sge", NO_BACKSLASH), ("slurm", DIRT), ("pbs", DIRT)])
def test_a_script_given_dev_null_sends_its_own_output_to_the_pilot_directory(tmp_path, protocol, name):
    """The rendered script, run by bash as the node would: the setup lines' and the pilot's
    output land in the pilot directory's job.out and job.err, whatever its name."""
    pilot = tmp_path / name / "pilots" / "p1"
    pilot.mkdir(parents=True)
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    _, job, script = render(protocol, str(pilot), python=str(stub), notify=None, setup=["echo setup-here"])
    (pilot / "job.sh").write_text(script)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    p = subprocess.run(["bash", str(pilot / "job.sh")], cwd=cwd, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and p.stdout == "", (p.stdout, p.stderr)
    assert (pilot / "job.out").read_text() == f"setup-here\npilot-out -m pilot --dir {pilot} --walltime 90 " \
                                              "--heartbeat 5\n"
    assert (pilot / "job.err").read_text() == "pilot-err\n"
    assert sorted(x.name for x in cwd.iterdir()) == []


def test_directive_values_are_escaped_so_that_sbatch_reads_them_back_whole(slurm_cluster, tmp_path, monkeypatch):
    """The real sbatch (and its PBS front end) reads #SBATCH / #PBS lines as shell-like words:
    an account holding a '#', quotes and a backslash reaches SLURM whole (accounting is off
    in the test cluster, so any account is taken). The jobs are held and cancelled."""
    from protocols.registry import get
    from protocols.runner import LocalRunner

    monkeypatch.setenv("SBATCH_HOLD", "1")
    account = "a#b'c\"d\\e$home%j(x)"  # (SLURM keeps account names in lower case)
    for protocol in ("slurm", "pbs"):
        pilot = tmp_path / protocol
        pilot.mkdir()
        proto = get(protocol, LocalRunner())
        job = sample_pilot_job(pilot_dir=str(pilot), nodes=1, cores_per_node=1, partition=None, account=account,
                               walltime=1)
        (pilot / "job.sh").write_text(proto.render(job))
        job_id = proto.submit(job, str(pilot / "job.sh"))
        try:
            assert slurm_cluster.job(job_id).get("Account") == account, slurm_cluster.job(job_id)
        finally:
            subprocess.run(["scancel", job_id], timeout=30)


@pytest.mark.parametrize("protocol,field,value,char,system", [
    ("sge", "account", "ab#c", "#", "Grid Engine"),
    ("sge", "account", "it's", "'", "Grid Engine"),
    ("loadleveler", "account", "a$(host)", "$", "LoadLeveler"),
    ("loadleveler", "queue", "q$(jobid)", "$", "LoadLeveler"),
])
@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_directive_value_with_no_literal_form_is_refused_in_one_line(tmp_path, protocol, field, value, char,
                                                                        system, command):
    (tmp_path / "hosts.yaml").write_text(json.dumps({"hosts": {"h": {
        "protocol": protocol, "cores_per_node": 1, "max_nodes": 1,
        **({"account": value} if field == "account" else {})}}}))
    sched = {"maxWallTime": 5, **({"queue": value} if field == "queue" else {})}
    (tmp_path / "wf.yaml").write_text(f"name: w\ndefaults: {{host: h}}\nnodes:\n  a:\n    run: 'true'\n"
                                      f"    scheduling: {json.dumps(sched)}\n")
    before = sorted(x.name for x in tmp_path.iterdir())
    rc, out, err = call_cli(command, "wf.yaml", "--hosts", "hosts.yaml", cwd=tmp_path,
                            env={"PATH": f"{LLEMU}:{os.environ['PATH']}", "LLEMU_DIR": str(tmp_path / "llemu")})
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert repr(char) in lines[0] and system in lines[0] and repr(value) in lines[0], lines[0]
    where = "hosts.yaml:1" if field == "account" else "wf.yaml:6"
    assert where in lines[0], lines[0]
    assert sorted(x.name for x in tmp_path.iterdir()) == before


# -- for real ---------------------------------------------------------------------------------------

LEDGER = 'echo "$PWE_MEMBER" >> {{ ledger }}'


def workflow(tmp_path: Path, host: str, members: int = 3) -> tuple[Path, Path]:
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: syntax\nproperties: {{ledger: {json.dumps(str(ledger))}}}\ndefaults: {{host: {host}}}\n"
                  f"nodes:\n  a:\n    parameters: {{i: {{range: [0, {members}]}}}}\n    run: {json.dumps(LEDGER)}\n"
                  "    scheduling: {maxWallTime: 5}\n")
    return wf, ledger


def run_in_dirt(tmp_path: Path, host: str, env: dict, name: str = DIRT) -> Path:
    """pwe run of the ledger workflow with its run directory under ``name``; checks that it
    succeeded, each member ran once, and the pilot's job.out and job.err are in its directory
    and nowhere else (not under a name the batch system made of the path)."""
    wf, ledger = workflow(tmp_path, host)
    run_dir = tmp_path / name / "run"
    p = subprocess.run([PY, "-m", "pwe", "run", str(wf), "--hosts", str(tmp_path / "hosts.yaml"), "--run-dir",
                        str(run_dir)], cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                       text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert sorted(ledger.read_text().split()) == ["0", "1", "2"]
    pilots = sorted({r["p"] for r in read_journal(run_dir) if r.get("e") == "pilot"})
    assert pilots, p.stderr
    for which in ("job.out", "job.err"):
        found = sorted(tmp_path.rglob(which))
        assert found == sorted(run_dir / "pilots" / pid / which for pid in pilots), found
    made = {x.name for x in tmp_path.iterdir()} - {".pwe"}  # (.pwe: the workspace's own, pwe's)
    assert made == {"hosts.yaml", "wf.yaml", "ledger", name}, made
    assert [x.name for x in (tmp_path / name).iterdir()] == ["run"]
    return run_dir


@pytest.mark.parametrize("protocol,name", [("slurm", DIRT), ("slurm", NO_BACKSLASH), ("pbs", DIRT)])
def test_a_slurm_or_pbs_run_in_a_directory_of_scheduler_syntax(slurm_cluster, tmp_path, protocol, name):
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  cluster:\n    protocol: {protocol}\n    cores_per_node: 2\n"
                                         "    max_nodes: 1\n")
    run_in_dirt(tmp_path, "cluster", dict(os.environ), name)


def test_a_grid_engine_run_in_a_directory_of_scheduler_syntax(sge_cell, tmp_path):
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  sge:\n    protocol: sge\n    commands_dir: {sge_cell['SGE_BIN']}\n"
                                         f"    parallel_environment: {sge_cell['SGE_PE']}\n    cores_per_node: 2\n"
                                         "    max_nodes: 1\n")
    env = dict(os.environ, **{k: v for k, v in sge_cell.items() if k.startswith("SGE_")})
    run_in_dirt(tmp_path, "sge", env)


def test_a_loadleveler_run_in_a_directory_of_scheduler_syntax(tmp_path):
    wf_root = tmp_path / "t"
    wf_root.mkdir()
    (wf_root / "hosts.yaml").write_text("hosts:\n  ll:\n    protocol: loadleveler\n    cores_per_node: 2\n"
                                         "    max_nodes: 1\n")
    env = dict(os.environ, PATH=f"{LLEMU}:{os.environ['PATH']}", LLEMU_DIR=str(tmp_path / "llemu-state"))
    run_in_dirt(wf_root, "ll", env)
