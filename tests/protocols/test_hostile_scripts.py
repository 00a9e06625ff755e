"""Hostile values in job scripts: inert in the real rendered script, as bash runs it (issue 31.2).

For each scheduler (slurm, pbs, sge, loadleveler, and ssh's nohup script) the real pilot
job (pwe.planning.placement.pilot_job) is rendered by the real protocol with a run
directory, a scratch directory, an env value, a Python and a PYTHONPATH whose names hold
``$(touch PWNED)``, backquotes, quotes, ``;``, ``#``, ``%`` and spaces; the script is then
run with bash, as the compute node would (the directive lines are comments to bash). The
pilot and ``pwe notify`` it calls are stubs first on that PYTHONPATH that record their
argv: each got its arguments intact, and no PWNED file appeared anywhere. A line break in
such a path is refused in one line before anything is written. Then for real: a SLURM run
(the one-node test cluster) whose run directory and workspace hold the same, and a run
staged to an ssh login node whose ``remote_dir`` does.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

PY = sys.executable
#: every shell context at once: a command substitution, backquotes, both quotes, a ';', a
#: '#' (a comment to a shell, a directive's end to a scheduler), sbatch's '%j', spaces
HOSTILE = "h $(touch PWNED) `touch PWNED2` ' \" ; #x %j"
SCHEDULERS = ["slurm", "pbs", "sge", "loadleveler", "ssh"]
JOB_ID = "4242"

#: a stub package (pilot, or pwe) that records how it was called, and the environment's ODD
RECORDER = ("import json, os, sys\n"
            "with open(os.environ['RECORD'], 'a') as fh:\n"
            "    fh.write(json.dumps([{name!r}, sys.argv[1:], os.environ.get('ODD')]) + '\\n')\n")


def pwned(*roots: Path) -> list[Path]:
    return [p for root in roots for p in Path(root).rglob("PWNED*")]


def hostile_job(tmp_path: Path, protocol: str, run_dir: Path):
    """The real pilot job of a tiny plan on a host of ``protocol``, every path hostile."""
    from hostinfo.model import Host
    from pwe.planning.placement import pilot_args_for, pilot_job
    from pwe.planning.plan import plan_workflow

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: hostile\nnodes:\n  a:\n    parameters: {i: [1, 2]}\n    run: 'true'\n")
    plan = plan_workflow(wf)
    odd = f"{HOSTILE}\nsecond line"
    host = Host.model_validate({"name": "h", "protocol": protocol, "cores_per_node": 2, "env": {"ODD": odd},
                                "scratch": str(tmp_path / HOSTILE / "scratch"), "parallel_environment": "pe"})
    job = pilot_job(plan, host, [("a", 0), ("a", 1)], str(run_dir), "hostile-20260101-000000-abcd", "p1",
                    pilot_args_for(host), heartbeat=5.0, idle_timeout=60)
    stubs = tmp_path / HOSTILE / "stubs"
    for name in ("pilot", "pwe"):
        (stubs / name).mkdir(parents=True, exist_ok=True)
        (stubs / name / "__init__.py").write_text("")
        (stubs / name / "__main__.py").write_text(RECORDER.format(name=name))
    job.pythonpath = str(stubs)
    python = tmp_path / HOSTILE / "python3"
    python.symlink_to(PY)
    job.python = str(python)
    return job, odd


@pytest.mark.parametrize("protocol", SCHEDULERS)
def test_the_rendered_job_script_keeps_hostile_values_inert(tmp_path, protocol):
    from protocols.registry import get
    from protocols.runner import LocalRunner

    run_dir = tmp_path / HOSTILE / "run"
    job, odd = hostile_job(tmp_path, protocol, run_dir)
    proto = get(protocol, LocalRunner())
    script = Path(job.pilot_dir) / "job.sh"
    script.parent.mkdir(parents=True)
    script.write_text(proto.render(job))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    record = tmp_path / "record.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PWE_HOME")}
    env.update(RECORD=str(record), SLURM_JOB_ID=JOB_ID, PBS_JOBID=JOB_ID, JOB_ID=JOB_ID, LOADL_STEP_ID=JOB_ID)
    p = subprocess.run(["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert pwned(tmp_path, cwd) == [], script.read_text()
    assert p.returncode == 0, (p.stderr, script.read_text())
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    # the pilot: its argv exactly as the engine gave it, the host's env value whole
    (pilot,) = [c for c in calls if c[0] == "pilot"]
    assert pilot[1][:2] == ["--dir", job.pilot_dir] and pilot[1][4:] == job.pilot_args, pilot
    assert pilot[2] == odd
    # pwe notify: started, then ended with the exit status, the run directory intact
    notes = [c[1] for c in calls if c[0] == "pwe"]
    head = ["notify", "--run", str(run_dir), "--pilot", "p1"]
    assert [n[:5] for n in notes] == [head, head] and [n[5] for n in notes] == ["started", "ended"], notes
    ids = {n[6] for n in notes}
    assert ids == ({JOB_ID} if protocol != "ssh" else ids) and all(i.isdigit() for i in ids)
    assert notes[1][7:] == ["0"]
    # no directive line carries a path: the output files go on the submit command line, as
    # argv, or by their names in the pilot's directory (LoadLeveler's output keyword)
    directives = [line for line in script.read_text().splitlines() if line.startswith(("#SBATCH", "#PBS", "#$"))]
    assert not any(HOSTILE in line for line in directives), directives
    assert not any(HOSTILE in line for line in script.read_text().splitlines() if line.startswith("# @"))
    out = f"{job.pilot_dir}/job.out"
    if protocol == "slurm":  # (argv: the whole path, sbatch's % doubled)
        assert proto.submit_args(job)[0] == "--output=" + out.replace("%", "%%")
    if protocol == "sge":  # (Grid Engine reads -o as [host:]path with $JOB_ID...: the script writes its own)
        assert proto.submit_args(job) == ["-o", "/dev/null", "-e", "/dev/null"]
        assert f"exec >>{shlex.quote(out)} " in script.read_text()
    if protocol == "pbs":  # (names in the pilot's directory, where qsub runs: a front end pasting its
        # arguments into a shell line, as slurm-wlm-torque's does, never sees the path)
        # (but not a directory holding '%', as this one: SLURM under the front end joins the names
        # to it and reads its %j; then /dev/null, and the script writes its own)
        assert proto.submit_args(job) == ["-o", "/dev/null", "-e", "/dev/null"]
        assert f"exec >>{shlex.quote(out)} " in script.read_text()
        assert proto.script_word(job, str(script)) == "job.sh"


@pytest.mark.parametrize("protocol", SCHEDULERS)
def test_a_line_break_in_a_path_of_a_job_script_is_refused_in_one_line(tmp_path, protocol):
    from pwe.base.errors import InputError
    from protocols.registry import get
    from protocols.runner import LocalRunner

    job, _ = hostile_job(tmp_path, protocol, tmp_path / "run\ntouch PWNED")
    with pytest.raises(InputError) as caught:
        get(protocol, LocalRunner()).render(job)
    said = str(caught.value)
    assert "\n" not in said and "line break" in said and "pilot p1" in said, said
    assert caught.value.exit_status == 2


def test_pwe_run_refuses_a_run_directory_with_a_line_break_before_making_it(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    run: 'true'\n")
    run_dir = tmp_path / "r\ntouch PWNED"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([PY, "-m", "pwe", "run", str(wf), "--run-dir", str(run_dir)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--run-dir" in lines[0] and "line break" in lines[0], p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["wf.yaml"]


# -- for real -------------------------------------------------------------------------------------

LEDGER = 'printf "%s|%s\\n" "$PWE_MEMBER" "$PWE_WORKSPACE" >> {{ ledger }}'
PRODUCT = '; mkdir -p "$PWE_WORKSPACE/out" && echo {{ i }} > "$PWE_WORKSPACE"/out/{{ i }}.txt'


@pytest.mark.parametrize("protocol", ["slurm", "pbs"])
def test_a_batch_run_in_a_hostile_directory_runs_its_members_and_nothing_else(slurm_cluster, tmp_path, protocol):
    """The one-node SLURM cluster, by sbatch and by its PBS front end (qsub): the script and
    the output files are taken, the job runs it, the members run, pwe notify's edge events
    arrive; nothing was executed. (Not '%' through the PBS front end: slurm-wlm-torque's qsub
    hands the output files to SLURM, which reads '%j' in them as the job id, unescapable
    from PBS's words.)"""
    base = tmp_path / (HOSTILE if protocol == "slurm" else HOSTILE.replace(" %j", ""))
    base.mkdir()
    run_dir, ws = base / "run", base / "ws"
    ws.mkdir()
    ledger = tmp_path / "ledger"
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  cluster:\n    protocol: {protocol}\n    cores_per_node: "
                                         f"{max(2, min(slurm_cluster.cpus, 4))}\n    max_nodes: 1\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: hostile\nproperties: {{ledger: {json.dumps(str(ledger))}}}\ndefaults: {{host: cluster}}\n"
                  f"nodes:\n  a:\n    parameters: {{i: {{range: [0, 3]}}}}\n    run: {json.dumps(LEDGER)}\n"
                  "    scheduling: {maxWallTime: 5}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([PY, "-m", "pwe", "run", str(wf), "--hosts", str(tmp_path / "hosts.yaml"), "--run-dir",
                        str(run_dir), "--workspace", str(ws)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert pwned(tmp_path) == [] and not (Path.home() / "PWNED").exists()
    rows = sorted(line.split("|", 1) for line in ledger.read_text().splitlines())
    assert rows == [[str(i), str(ws)] for i in range(3)], rows
    pilot = run_dir / "pilots" / "p1"
    assert (pilot / "job.out").is_file()  # sbatch --output=... as argv: the whole path, % and all
    from helpers import read_journal

    # pwe notify, called by the script with the hostile run directory, reached the run
    taken = [r.get("event") for r in read_journal(run_dir) if r.get("e") == "edge"]
    waiting = [f.name for f in (run_dir / "edges").glob("p1-started-*")] if (run_dir / "edges").is_dir() else []
    assert "started" in taken or waiting, (taken, p.stderr)


def test_a_hostile_remote_dir_on_the_login_node_runs_nothing(ssh_nodes, tmp_path):
    """A staged run (shared_fs: false) to the ssh login node pwe-n1, whose remote_dir holds
    every shell context: the engine there runs the members through its nohup script, the
    results come back, nothing was executed on either side."""
    remote_dir = tmp_path / HOSTILE / "login"
    ws = tmp_path / "ws"
    ws.mkdir()
    ledger = tmp_path / "ledger"
    (tmp_path / "hosts.yaml").write_text(json.dumps({"hosts": {"far": {
        "protocol": "ssh", "contact": "ssh://pwe-n1", "ssh_config": str(ssh_nodes.ssh_config), "shared_fs": False,
        "remote_dir": str(remote_dir), "cores_per_node": 2,
        "remote_pwe": ["env", f"PYTHONPATH={ROOT}", PY, "-m", "pwe"]}}}))
    (ws / "data").write_text("staged\n")
    wf = ws / "wf.yaml"
    wf.write_text(f"name: far\ninputs: [data]\nproperties: {{ledger: {json.dumps(str(ledger))}}}\n"
                  "defaults: {host: far}\n"
                  f"nodes:\n  a:\n    parameters: {{i: {{range: [0, 3]}}}}\n    run: {json.dumps(LEDGER + PRODUCT)}\n"
                  "    products: ['out/{{ i }}.txt']\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([PY, "-m", "pwe", "run", str(wf), "--hosts", str(tmp_path / "hosts.yaml"), "--json"],
                       cwd=ws, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (p.stdout, p.stderr)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["totals"]["done"] == 3, out
    assert pwned(tmp_path) == [] and not (Path.home() / "PWNED").exists()
    base = remote_dir / out["run_id"]
    rows = sorted(line.split("|", 1) for line in ledger.read_text().splitlines())
    assert rows == [[str(i), str(base / "workspace")] for i in range(3)], rows
    # the products came back into the workspace here (fetched, each name confined to it)
    assert [(ws / "out" / f"{i}.txt").read_text() for i in range(3)] == ["0\n", "1\n", "2\n"]
