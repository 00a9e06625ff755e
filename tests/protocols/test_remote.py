"""Runs staged to a login node (pwe/engine/remote.py, protocols/staging.py), for real.

The "workstation" is this machine in its own mount namespace with every scheduler
command masked (bind-mounted over by /dev/null) and no SLURM_CONF: from there `pwe run
--host remote` reaches the four-node cluster's login node pwe-n1 over ssh (paramiko,
host key checked against the test known_hosts), stages the workflow and its inputs,
submits, follows over the one connection and brings the results back. The members keep
their own ledger on the cluster's side; every claim is read from it, from the files
themselves, or from what pwe recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers import ROOT, run_cli, wait_for

PY = sys.executable
SCHEDULER_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun", "salloc", "sacct",
                      "qsub", "qstat", "qdel")
LOGIN_RUNS = Path("/var/tmp/pwe-login/runs")  # the remote host's remote_dir (tests/cluster/up.sh)

#: a member: reads a staged input, writes its product (renamed into place), an output,
#: and a line of its own ledger on the cluster's side
SIM = """#!/bin/sh
set -e
sum=$(sha256sum "$PWE_WORKSPACE/data/blob" | cut -c1-16)
scale=$(cat "$PWE_WORKSPACE/data/scale")
mkdir -p "$PWE_WORKSPACE/out"
echo "$(( $1 * scale )) $sum" > "$PWE_WORKSPACE/out/$1.txt.tmp"
mv "$PWE_WORKSPACE/out/$1.txt.tmp" "$PWE_WORKSPACE/out/$1.txt"
echo "y=$(( $1 * scale ))" >> "$PWE_OUTPUTS"
echo "sum=$sum" >> "$PWE_OUTPUTS"
echo "$PWE_MEMBER $PWE_ATTEMPT $(hostname)" >> "$PWE_WORKSPACE/ledger"
"""


def workstation(argv: list[str]) -> list[str]:
    """``argv`` run as on a workstation without a batch system: a private mount namespace
    where every scheduler command is /dev/null (not runnable)."""
    masks = [shutil.which(c) for c in SCHEDULER_COMMANDS]
    binds = "".join(f"mount --bind /dev/null {shlex.quote(p)} && " for p in masks if p)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", binds + 'exec "$@"', "sh", *argv]


def ws_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SGE_"))}
    env["PYTHONPATH"] = str(ROOT)
    return env


def pwe_ws(*args, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(workstation([PY, "-m", "pwe", *map(str, args)]), cwd=cwd, env=ws_env(),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def sweep(tmp_path: Path, n: int, blob: bytes) -> Path:
    ws = tmp_path / "ws"
    (ws / "bin").mkdir(parents=True)
    (ws / "data").mkdir()
    (ws / "bin" / "sim").write_text(SIM)
    (ws / "bin" / "sim").chmod(0o755)
    (ws / "data" / "scale").write_text("3\n")
    (ws / "data" / "blob").write_bytes(blob)
    (ws / "notes.txt").write_text("not an input: stays here\n")
    wf = ws / "wf.yaml"
    wf.write_text(f"name: staged\ninputs: [bin/sim, data]\ndefaults: {{host: remote}}\nnodes:\n  sim:\n"
                  f"    parameters: {{x: {{range: [0, {n}]}}}}\n"
                  "    run: '\"$PWE_WORKSPACE/bin/sim\" {{ x }}'\n"
                  "    products: ['out/{{ x }}.txt']\n")
    return wf


@pytest.fixture
def remote(slurm4):
    """The cluster and its `remote` host; staged runs left on the login node are removed."""
    before = set(LOGIN_RUNS.iterdir()) if LOGIN_RUNS.is_dir() else set()
    yield slurm4
    for d in (set(LOGIN_RUNS.iterdir()) if LOGIN_RUNS.is_dir() else set()) - before:
        shutil.rmtree(d, ignore_errors=True)


def test_the_workstation_has_no_batch_system():
    """What the tests below run in cannot submit anything itself."""
    p = subprocess.run(workstation(["sh", "-c", "sbatch --version; squeue; qsub -h"]), capture_output=True,
                       text=True, env=ws_env(), timeout=30)
    assert p.returncode != 0 and "Slurm" not in p.stdout, (p.stdout, p.stderr)


def test_a_sweep_staged_to_the_login_node_and_back(tmp_path, remote):
    """`pwe run --host remote` from the workstation: one connection, one status query per
    interval, every member ran once on the cluster, products and outputs came back."""
    n = 40
    blob = os.urandom(3_000_000)
    wf = sweep(tmp_path, n, blob)
    t0 = time.monotonic()
    p = pwe_ws("run", wf, "--hosts", remote.hosts, "--json", cwd=tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["totals"]["done"] == n
    run_id = out["run_id"]
    # one connection for stage, submit, every poll and the fetch; one query per 2 s
    assert out["ssh"]["connections"] == 1
    assert 1 <= out["ssh"]["status_queries"] <= took / 2.0 + 2
    # the cluster's side: the members' own ledger says each ran exactly once, on the nodes
    base = LOGIN_RUNS / run_id
    ledger = [line.split() for line in (base / "workspace" / "ledger").read_text().splitlines()]
    assert Counter(int(m) for m, _, _ in ledger) == Counter(range(n))
    assert {a for _, a, _ in ledger} == {"1"}
    assert {h for _, _, h in ledger} <= {"pwe-n1", "pwe-n2", "pwe-n3", "pwe-n4"}
    assert (base / "workspace" / "bin" / "sim").stat().st_mode & 0o111  # staged runnable
    assert not (base / "workspace" / "notes.txt").exists()  # not an input: not sent
    # back here: every declared product, whole, and nothing undeclared
    ws = tmp_path / "ws"
    want = hashlib.sha256(blob).hexdigest()[:16]
    for x in range(n):
        assert (ws / "out" / f"{x}.txt").read_text() == f"{3 * x} {want}\n"
    assert not (ws / "ledger").exists()
    assert not list(tmp_path.rglob("*.part"))
    # and the run reads here as any run: status, show (outputs), logs
    status, so, se = run_cli("status", run_id, "--json", cwd=tmp_path)
    assert status == 0, se
    assert json.loads(so)["phase"] == "succeeded"
    status, so, se = run_cli("show", run_id, "--json", "--limit", "0", cwd=tmp_path)
    members = json.loads(so)
    members = members["members"] if isinstance(members, dict) else members
    assert status == 0 and len(members) == n
    assert {m["outputs"]["sum"] for m in members} == {want}
    assert sorted(int(m["outputs"]["y"]) for m in members) == [3 * x for x in range(n)]
    info = json.loads((tmp_path / "pwe-runs" / run_id / "run.json").read_text())
    assert info["remote"]["run_dir"] == f"{base}/run"


def test_an_interrupted_staging_resumes_where_it_stopped(tmp_path, remote):
    """kill -9 of `pwe submit` in the middle of a large input: no half file under its
    name there; `pwe resume` sends only the rest (checked by size and hash), then runs."""
    blob = os.urandom(96 * 1024 * 1024)
    wf = sweep(tmp_path, 4, blob)
    proc = subprocess.Popen(workstation([PY, "-m", "pwe", "submit", wf, "--hosts", remote.hosts]), cwd=tmp_path,
                            env=ws_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    runs = tmp_path / "pwe-runs"
    wait_for(lambda: runs.is_dir() and any(runs.iterdir()), 60, "the run directory")
    run_id = next(runs.iterdir()).name
    part = LOGIN_RUNS / run_id / "workspace" / "data" / "blob.part"
    wait_for(lambda: part.is_file() and part.stat().st_size >= 16 * 1024 * 1024 or proc.poll() is not None,
             120, "16 MB of the input on the login node")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    arrived = part.stat().st_size
    assert 0 < arrived < len(blob), arrived
    assert not (LOGIN_RUNS / run_id / "workspace" / "data" / "blob").exists()  # never a half file in place
    assert not (LOGIN_RUNS / run_id / "run").exists()  # nothing submitted
    p = pwe_ws("resume", run_id, "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "resumed from where they stopped" in p.stderr
    remote_info = json.loads((runs / run_id / "remote.json").read_text())
    stage = [t for t in remote_info["transfers"] if t["step"] == "stage"]
    assert len(stage) == 1  # (the killed one never finished, so it recorded nothing)
    # the files sent whole before the kill (not yet renamed: a batch is checked at its end)
    # were resumed at their end, sending nothing; the large one from where it stopped
    (resumed,) = [r for r in stage[0]["resumed"] if r["path"].endswith("/workspace/data/blob")]
    assert all(r["sent"] == 0 for r in stage[0]["resumed"] if r is not resumed)
    assert stage[0]["sent"] - resumed["sent"] < 1024  # (and the small files not reached before the kill)
    assert resumed["from"] >= arrived - 4 * 1024 * 1024  # (what arrived, less a write still in flight)
    assert resumed["sent"] == len(blob) - resumed["from"]
    staged = (LOGIN_RUNS / run_id / "workspace" / "data" / "blob").read_bytes()
    assert hashlib.sha256(staged).digest() == hashlib.sha256(blob).digest()
    assert not part.exists()
    want = hashlib.sha256(blob).hexdigest()[:16]
    assert {(tmp_path / "ws" / "out" / f"{x}.txt").read_text().split()[1] for x in range(4)} == {want}


def test_status_of_a_staged_run_is_asked_there(tmp_path, remote):
    """`pwe submit` returns once the run runs there; `pwe status` asks the login node."""
    wf = sweep(tmp_path, 6, b"x")
    p = pwe_ws("submit", wf, "--hosts", remote.hosts, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    run_id = p.stdout.strip()
    p = pwe_ws("status", run_id, "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    snap = json.loads(p.stdout)
    assert snap["run_id"] == run_id and snap["remote_run_dir"] == f"{LOGIN_RUNS / run_id}/run"
    assert snap["phase"] in ("running", "succeeded")
    p = pwe_ws("resume", run_id, cwd=tmp_path)  # follows it to the end and fetches
    assert p.returncode == 0, p.stderr
    assert len(list((tmp_path / "ws" / "out").glob("*.txt"))) == 6


def test_a_wrong_remote_pwe_is_one_line_and_leaves_nothing(tmp_path, remote):
    hosts = tmp_path / "hosts.yaml"
    text = Path(remote.hosts).read_text()
    hosts.write_text(text.replace("remote_pwe: [", "remote_pwe: [/nonexistent/pwe, "))
    wf = sweep(tmp_path, 2, b"x")
    p = pwe_ws("run", wf, "--hosts", hosts, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = [x for x in p.stderr.splitlines() if not x.startswith(("run ", "staged"))]
    assert lines[-1].startswith("host 'remote': on remote") and "set remote_pwe" in lines[-1], p.stderr
    assert not list((tmp_path / "pwe-runs").iterdir())
    run_id = p.stderr.split()[1]
    assert not (LOGIN_RUNS / run_id).exists()


# -- without the cluster ------------------------------------------------------------------

def _hosts(tmp_path: Path, entry: str) -> Path:
    f = tmp_path / "hosts.yaml"
    f.write_text("hosts:\n  far:\n    protocol: slurm\n" + entry)
    return f


def test_an_unreachable_login_node_is_one_line_exit_2_and_nothing_made(tmp_path):
    hosts = _hosts(tmp_path, "    contact: ssh://root@127.0.0.1:1\n    shared_fs: false\n    connect_timeout: 3\n")
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a: {run: 'true'}\n")
    status, out, err = run_cli("run", tmp_path / "wf.yaml", "--host", "far", "--hosts", hosts, cwd=tmp_path)
    assert status == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("cannot reach") and "127.0.0.1" in last and "Traceback" not in err
    assert not list((tmp_path / "pwe-runs").iterdir())


def test_an_input_that_names_nothing_is_refused_before_anything(tmp_path):
    hosts = _hosts(tmp_path, "    contact: ssh://root@127.0.0.1:1\n    shared_fs: false\n")
    (tmp_path / "wf.yaml").write_text("name: w\ninputs: [data/*.csv]\nnodes:\n  a: {run: 'true'}\n")
    status, out, err = run_cli("run", tmp_path / "wf.yaml", "--host", "far", "--hosts", hosts, cwd=tmp_path)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "data/*.csv" in err, err
    assert not (tmp_path / "pwe-runs").exists() or not list((tmp_path / "pwe-runs").iterdir())


def test_a_staged_host_runs_the_whole_run(tmp_path):
    hosts = _hosts(tmp_path, "    contact: ssh://root@127.0.0.1:1\n    shared_fs: false\n")
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a: {run: 'true', host: far}\n  b: {run: 'true', "
                                      "host: local, after: [a]}\n")
    status, out, err = run_cli("run", tmp_path / "wf.yaml", "--hosts", hosts, cwd=tmp_path)
    assert status == 2 and "shared_fs: false" in err and "run there whole" in err, err
    assert len(err.strip().splitlines()) == 1


def test_shared_fs_false_needs_a_login_node(tmp_path):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  far:\n    protocol: slurm\n    shared_fs: false\n")
    status, out, err = run_cli("hosts", "list", "--hosts", hosts, cwd=tmp_path)
    assert status == 2 and "shared_fs: false needs a login node" in err and str(hosts) in err, err


def test_an_interrupted_fetch_goes_on_from_its_part_file(tmp_path, remote):
    """protocols.staging both ways over the real sshd of pwe-n1: a local .part that is a
    prefix is continued; one whose bytes differ is fetched again whole (the hash says so);
    a file already here with the same hash is not fetched at all."""
    from protocols.ssh import SshRunner
    from protocols.staging import Stager

    there = LOGIN_RUNS / "fetch-test"
    there.mkdir(parents=True, exist_ok=True)
    try:
        data = os.urandom(5_000_000)
        (there / "a.bin").write_bytes(data)
        runner = SshRunner("ssh://pwe-n1", ssh_config="/var/tmp/pwe-ssh/ssh_config")
        stager = Stager(runner)
        here = tmp_path / "a.bin"
        (tmp_path / "a.bin.part").write_bytes(data[:2_000_000])
        (moved,) = stager.get(tmp_path, [(f"{there}/a.bin", "a.bin")])
        assert (moved.resumed_at, moved.sent) == (2_000_000, 3_000_000) and here.read_bytes() == data
        assert here.stat().st_mode & 0o777 == 0o600  # owner-only here, whatever it was there
        (moved,) = stager.get(tmp_path, [(f"{there}/a.bin", "a.bin")])
        assert moved.skipped and moved.sent == 0
        here.unlink()
        (tmp_path / "a.bin.part").write_bytes(b"x" * 1_000_000)  # not a prefix of the file
        (moved,) = stager.get(tmp_path, [(f"{there}/a.bin", "a.bin")])
        assert moved.resumed_at == 0 and here.read_bytes() == data
        assert not (tmp_path / "a.bin.part").exists()
        assert runner.connects == 1
        runner.close()
    finally:
        shutil.rmtree(there, ignore_errors=True)


@pytest.mark.parametrize("option, phrase", [(["--reuse-from", "."], "--reuse-from"), (["--halt", "10%"], "--halt")])
def test_an_option_a_staged_run_cannot_take_is_refused_not_dropped(tmp_path, option, phrase):
    """A run staged to a login node reuses nothing (a directory of its own there) and is
    started there by `pwe submit`: --reuse-from and --halt would be dropped unsaid."""
    hosts = _hosts(tmp_path, "    contact: ssh://root@127.0.0.1:1\n    shared_fs: false\n    connect_timeout: 3\n")
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a: {run: 'true'}\n")
    for command in ("run", "submit"):
        status, out, err = run_cli(command, tmp_path / "wf.yaml", "--host", "far", "--hosts", hosts, *option,
                                   cwd=tmp_path)
        assert status == 2 and len(err.strip().splitlines()) == 1 and phrase in err and "far" in err, err
        assert "Traceback" not in err and "cannot reach" not in err  # (refused before any connection)
        assert not (tmp_path / "pwe-runs").exists() or not list((tmp_path / "pwe-runs").iterdir())


def test_a_staged_run_is_not_rehearsed_there(tmp_path):
    """pwe run --simulate of a workflow whose host stages its runs to a login node: one line,
    exit 2, nothing made (a rehearsal runs here: --host local)."""
    hosts = _hosts(tmp_path, "    contact: ssh://root@127.0.0.1:1\n    shared_fs: false\n")
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a: {run: 'true', host: far}\n")
    status, out, err = run_cli("run", tmp_path / "wf.yaml", "--hosts", hosts, "--simulate", cwd=tmp_path)
    assert status == 2 and "is not rehearsed there" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "pwe-runs").exists()
