"""The test services (tests/services/setup.sh) are real and usable: a one-node SLURM cluster
with PBS-style qsub over it, SSH nodes in network namespaces sharing the filesystem, strict
host keys, and nodes that can die and come back."""
import socket
import subprocess
import time
import uuid

import pytest


def run(*cmd, timeout=60, **kw):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


# ---------------------------------------------------------------- SLURM / PBS

def test_sinfo_shows_localhost_idle_with_8_cpus(slurm_cluster):
    deadline = time.monotonic() + 60          # the node may still be finishing jobs of earlier tests
    while True:
        p = run("sinfo", "-h", "-N", "-n", "localhost", "-o", "%N %t %c")
        assert p.returncode == 0, p.stderr
        node, state, cpus = p.stdout.split("\n")[0].split()
        if state == "idle" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert (node, state, cpus) == ("localhost", "idle", "8"), (p.stdout, run("squeue").stdout)
    assert slurm_cluster.cpus == 8
    assert slurm_cluster.partitions == ("debug", "short")
    assert slurm_cluster.default_partition == "debug"
    assert slurm_cluster.time_limits == {"debug": None, "short": 10}


def test_sbatch_job_with_srun_step_completes(slurm_cluster, tmp_path):
    p = run("sbatch", "--parsable", "-D", str(tmp_path), "-o", str(tmp_path / "out.txt"),
            "--wrap", "srun --exact -n1 -c1 hostname")
    assert p.returncode == 0, p.stderr
    job_id = p.stdout.strip().split(";")[0]
    assert slurm_cluster.wait_job(job_id, timeout=60) == "COMPLETED", slurm_cluster.job(job_id)
    assert slurm_cluster.job(job_id)["ExitCode"] == "0:0"
    assert (tmp_path / "out.txt").read_text().strip() == socket.gethostname()


def test_short_partition_takes_jobs(slurm_cluster, tmp_path):
    p = run("sbatch", "--parsable", "-p", "short", "-t", "1", "-D", str(tmp_path), "-o", str(tmp_path / "o"),
            "--wrap", "echo short-ok")
    assert p.returncode == 0, p.stderr
    job_id = p.stdout.strip().split(";")[0]
    assert slurm_cluster.wait_job(job_id, timeout=60) == "COMPLETED"
    assert slurm_cluster.job(job_id)["Partition"] == "short"
    assert (tmp_path / "o").read_text() == "short-ok\n"
    # over the partition's 10-minute limit: refused at submission
    p = run("sbatch", "-p", "short", "-t", "11", "--wrap", "true")
    assert p.returncode != 0 and "time limit" in p.stderr.lower(), p.stderr


def test_qsub_runs_a_pbs_script(slurm_cluster, tmp_path):
    script = tmp_path / "job.sh"
    marker = tmp_path / "marker"
    script.write_text(f"#!/bin/bash\necho pbs-ok $SLURM_JOB_ID > {marker}\necho on-stdout\n")
    p = run("qsub", str(script), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    job_id = p.stdout.strip().split(".")[0]
    assert job_id.isdigit(), p.stdout
    assert slurm_cluster.wait_job(job_id, timeout=60) == "COMPLETED"
    assert marker.read_text() == f"pbs-ok {job_id}\n"
    assert (tmp_path / f"job.sh.o{job_id}").read_text() == "on-stdout\n"
    q = run("qstat", job_id)
    assert q.returncode == 0 and job_id in q.stdout, q.stdout + q.stderr


# ---------------------------------------------------------------- SSH nodes

@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ssh_command_runs_inside_the_nodes_namespace(ssh_nodes, n):
    name, addr = ssh_nodes[n - 1]
    assert (name, addr) == (f"pwe-n{n}", f"10.233.{n}.2")
    p = ssh_nodes.ssh(name, "ip -4 addr show; hostname")
    assert p.returncode == 0, p.stderr
    assert f"inet {addr}/" in p.stdout
    others = [a for nm, a in ssh_nodes if nm != name]
    assert not any(f"inet {a}/" in p.stdout for a in others)
    assert "10.233.0.1/" not in p.stdout                  # not the root namespace's bridge
    assert p.stdout.split()[-1] == name                    # its own hostname


def test_paths_and_local_sshd(ssh_nodes):
    for path in (ssh_nodes.ssh_config, ssh_nodes.known_hosts, ssh_nodes.identity):
        assert path.is_file(), path
    p = ssh_nodes.ssh("pwe-local", "echo local-ok; ip -4 addr show lo")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("local-ok\n") and "inet 127.0.0.1/" in p.stdout


def test_node_reaches_another_node_by_name(ssh_nodes):
    p = ssh_nodes.ssh("pwe-n1", f"ssh -F {ssh_nodes.ssh_config} pwe-n2 hostname")
    assert (p.returncode, p.stdout) == (0, "pwe-n2\n"), p.stderr


def test_filesystem_is_shared_with_the_nodes(ssh_nodes, tmp_path):
    token = uuid.uuid4().hex
    target = tmp_path / "from-n2"
    p = ssh_nodes.ssh("pwe-n2", f"echo {token} > {target}")
    assert p.returncode == 0, p.stderr
    assert target.read_text() == token + "\n"


def test_wrong_host_key_is_refused(ssh_nodes, tmp_path):
    keys = ssh_nodes.known_hosts.read_text().splitlines()
    n2_key = next(line for line in keys if line.startswith("10.233.2.2,")).split(None, 1)[1]
    bad = tmp_path / "known_hosts"
    bad.write_text(f"10.233.1.2,pwe-n1 {n2_key}\n")        # pwe-n1 "should" have pwe-n2's key
    p = run(*ssh_nodes.ssh_args("pwe-n1"), "-o", f"UserKnownHostsFile={bad}", "true")
    assert p.returncode == 255
    assert "Host key verification failed" in p.stderr, p.stderr
    ok = ssh_nodes.ssh("pwe-n1", "true")
    assert ok.returncode == 0, ok.stderr


def test_killed_node_is_unreachable_until_revived(ssh_nodes):
    assert ssh_nodes.ssh("pwe-n3", "true").returncode == 0
    sleeper = subprocess.Popen(ssh_nodes.ssh_args("pwe-n3") + ["sleep 300"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        with ssh_nodes.killed(3):
            assert run("ip", "netns", "pids", "pwe-n3").stdout.split() == []
            t0 = time.monotonic()
            p = ssh_nodes.ssh("pwe-n3", "true", timeout=30)
            assert p.returncode == 255, p.stderr
            assert time.monotonic() - t0 < 10
            assert ssh_nodes.ssh("pwe-n2", "true").returncode == 0     # the others live on
        p = ssh_nodes.ssh("pwe-n3", "hostname")
        assert (p.returncode, p.stdout) == (0, "pwe-n3\n"), p.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
