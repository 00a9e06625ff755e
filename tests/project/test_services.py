"""The test services (tests/services/setup.sh) are real and usable: a one-node SLURM cluster
with PBS-style qsub over it, SSH nodes in network namespaces sharing the filesystem, strict
host keys, and nodes that can die and come back."""
import socket
import subprocess
import time
import uuid

import pytest

from helpers import wait_for


def _cmdline(pid) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ")
    except OSError:
        return b""


def run(*cmd, timeout=60, **kw):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


# ---------------------------------------------------------------- SLURM / PBS

def test_sinfo_shows_localhost_idle_with_8_cpus(slurm_cluster):
    def sinfo():
        p = run("sinfo", "-h", "-N", "-n", "localhost", "-o", "%N %t %c")
        assert p.returncode == 0, p.stderr
        return p

    # the node may still be finishing jobs of earlier tests
    p = wait_for(lambda: (lambda p: p if p.stdout.split("\n")[0].split()[1] == "idle" else None)(sinfo()), 60,
                 "localhost to be idle", step=1)
    node, state, cpus = p.stdout.split("\n")[0].split()
    assert (node, state, cpus) == ("localhost", "idle", "8"), (p.stdout, run("squeue").stdout)
    assert slurm_cluster.cpus == 8
    assert slurm_cluster.partitions == ("debug", "short", "gpu")
    assert slurm_cluster.default_partition == "debug"
    assert slurm_cluster.time_limits == {"debug": None, "short": 10, "gpu": None}


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
        wait_for(lambda: any(b"sleep 300" in _cmdline(pid) for pid in run("ip", "netns", "pids", "pwe-n3").stdout.split()),
                 what="the sleep on pwe-n3 to start")
        with ssh_nodes.killed(3):
            assert run("ip", "netns", "pids", "pwe-n3").stdout.split() == []
            t0 = time.monotonic()
            p = ssh_nodes.ssh("pwe-n3", "true", timeout=30)
            assert p.returncode == 255, p.stderr
            assert time.monotonic() - t0 < 25  # (refused, not waited out: timeout=30)
            assert ssh_nodes.ssh("pwe-n2", "true").returncode == 0     # the others live on
        p = ssh_nodes.ssh("pwe-n3", "hostname")
        assert (p.returncode, p.stdout) == (0, "pwe-n3\n"), p.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


# ---------------------------------------------------------------- setup.sh leaves others' files alone
# The steps of tests/services/common.sh that edit system files, run against temporary files
# (nothing here starts, stops or changes a service).

def services_fn(call, *args, **env):
    """`. common.sh; CALL ARGS` in bash under setup.sh's own `set -uo pipefail`, without CI /
    PWE_TEST_OVERWRITE_SLURM unless given."""
    import os

    from helpers import SERVICES

    full = {k: v for k, v in os.environ.items() if k not in ("CI", "PWE_TEST_OVERWRITE_SLURM")}
    full.update(env)
    return run("bash", "-c", f'set -uo pipefail; . "$0" && {call} "$@"', str(SERVICES / "common.sh"), *map(str, args), env=full)


FOREIGN_CONF = "# my site's cluster\nClusterName=prod\nSlurmctldHost=head1\n"


def test_setup_refuses_to_replace_a_slurm_conf_it_did_not_write(tmp_path):
    from helpers import service_up

    conf = tmp_path / "slurm.conf"
    conf.write_text(FOREIGN_CONF)
    p = services_fn("may_write_slurm_conf", conf)
    assert p.returncode != 0
    lines = (p.stdout + p.stderr).splitlines()
    assert len(lines) == 1 and str(conf) in lines[0] and "PWE_TEST_OVERWRITE_SLURM=1" in lines[0], lines
    assert conf.read_text() == FOREIGN_CONF and sorted(tmp_path.iterdir()) == [conf]
    # that line tells the fixtures SLURM is not up: its tests are skipped (failed only under CI)
    assert not service_up(p.stdout + p.stderr, "slurm:")


@pytest.mark.parametrize("env", [{"PWE_TEST_OVERWRITE_SLURM": "1"}, {"CI": "true"}])
def test_setup_replaces_a_foreign_slurm_conf_when_told_and_keeps_it(tmp_path, env):
    conf = tmp_path / "slurm.conf"
    conf.write_text(FOREIGN_CONF)
    p = services_fn("may_write_slurm_conf", conf, **env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "slurm.conf.before-pwe").read_text() == FOREIGN_CONF


def test_setup_rewrites_its_own_slurm_conf(tmp_path):
    conf = tmp_path / "slurm.conf"
    written = services_fn("slurm_conf_text").stdout
    conf.write_text(written.replace("CPUs=8", "CPUs=4"))      # an older one of ours
    p = services_fn("may_write_slurm_conf", conf)
    assert (p.returncode, p.stdout + p.stderr) == (0, "")
    p = services_fn("may_write_slurm_conf", tmp_path / "none.conf")  # none yet
    assert (p.returncode, p.stdout + p.stderr) == (0, "")


def test_setup_only_adds_a_marked_block_to_etc_hosts(tmp_path):
    hosts = tmp_path / "hosts"
    mine = ("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n\n# site hosts\n"
            "10.0.0.5 fileserver\n")
    hosts.write_text(mine)
    p = services_fn("write_etc_hosts", PWE_ETC_HOSTS=hosts)
    assert p.returncode == 0, p.stderr
    text = hosts.read_text()
    assert text.startswith(mine), text
    added = text[len(mine):].splitlines()
    assert added[0].startswith("# >>> pwe test nodes") and added[-1] == "# <<< pwe test nodes", added
    assert "10.233.1.2 pwe-n1" in added
    p = services_fn("write_etc_hosts", PWE_ETC_HOSTS=hosts)       # again: no second block
    assert p.returncode == 0 and hosts.read_text() == text
    p = services_fn("remove_etc_hosts", PWE_ETC_HOSTS=hosts)      # teardown.sh: back as it was
    assert p.returncode == 0 and hosts.read_text() == mine


def test_installed_packages_are_never_read_as_missing(podman):
    """setup.sh asks dpkg which of its packages are missing. podman's entry is 6.7 KB: piped to
    `grep -q` under pipefail, dpkg died of SIGPIPE about one time in two and podman read as
    missing, so a CI machine with every package installed failed setup (stop 52). Asked 20
    times, every package is present each time; a name not installed is the one missing."""
    for _ in range(20):
        p = services_fn("missing_packages")
        assert (p.returncode, p.stdout, p.stderr) == (0, "", ""), p
    p = services_fn('PWE_PACKAGES+=(pwe-no-such-package); missing_packages')
    assert p.stdout == "pwe-no-such-package ", p


def test_a_pid_file_older_than_its_process_names_another_process(tmp_path):
    """The pid of a daemon killed without its teardown is handed to a later process, often one
    of the same name: pwe-n4's stale slurmd.pid named pwe-n1's slurmd, so up.sh never started
    pwe-n4's and the node stayed "idle*" (CI of 2026-11-29), and stop_pidfile would have killed
    pwe-n1's. A pid file written before its process started names another process: alive says
    no and stop_pidfile removes the file and leaves that process running. One written after it
    started is the daemon's; a zombie is not running."""
    import os

    from pilot.identity import stat_of

    pidfile = tmp_path / "daemon.pid"
    other = subprocess.Popen(["sleep", "300"])
    try:
        pidfile.write_text(f"{other.pid}\n")
        assert services_fn("alive", pidfile, "sleep").returncode == 0
        assert services_fn("alive", pidfile, "sleepy").returncode == 1   # another name
        old = time.time() - 3600                                          # the stale file
        os.utime(pidfile, (old, old))
        assert services_fn("alive", pidfile, "sleep").returncode == 1
        p = services_fn("stop_pidfile", pidfile, "sleep")
        assert p.returncode == 0 and not pidfile.exists(), p
        assert other.poll() is None, "stop_pidfile killed a process its stale pid file named"
        pidfile.write_text(f"{other.pid}\n")                             # the daemon's own
        p = services_fn("stop_pidfile", pidfile, "sleep")
        assert p.returncode == 0 and not pidfile.exists(), p
        assert other.wait(timeout=10) == -15
    finally:
        other.kill()
        other.wait()
    zombie = subprocess.Popen(["sleep", "0"])
    try:
        wait_for(lambda: stat_of(zombie.pid)[1] == "Z", 10, "sleep 0 to end (not reaped: a zombie)", step=0.05)
        pidfile.write_text(f"{zombie.pid}\n")
        assert services_fn("alive", pidfile, "sleep").returncode == 1
    finally:
        zombie.wait()


def test_up_starts_a_node_whose_stale_pid_file_names_another_nodes_slurmd(slurm4):
    """The fault of CI on 2026-11-29, for real: pwe-n4's slurmd is gone (kill -9, as a machine
    that stops leaves it), and its pid file, written before pwe-n1's slurmd started, names it.
    up.sh starts pwe-n4's slurmd in pwe-n4's namespace, leaves pwe-n1's alone, and SLURM has
    all four nodes idle. (Before, up.sh took pwe-n1's slurmd for pwe-n4's and started none.)"""
    import os
    import signal
    from pathlib import Path

    from helpers import CLUSTER

    run_dir = slurm4.conf.parent / "run"
    pidfile = run_dir / "slurmd-pwe-n4.pid"

    def slurmd_of(node: str) -> int | None:
        """The pid in NODE's pid file when that is a slurmd in NODE's namespace."""
        try:
            pid = int((run_dir / f"slurmd-{node}.pid").read_text())
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, ValueError):
            return None
        where = run("ip", "netns", "identify", str(pid)).stdout.strip()
        return pid if (comm, where) == ("slurmd", node) else None

    n1, n4 = slurmd_of("pwe-n1"), slurmd_of("pwe-n4")
    assert n1 and n4, (n1, n4)
    try:
        os.kill(n4, signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{n4}"), 30, "pwe-n4's slurmd to end", step=0.05)
        pidfile.write_text(f"{n1}\n")
        # written an hour before pwe-n1's slurmd started (which may have run for hours itself)
        running = int(run("ps", "-o", "etimes=", "-p", str(n1)).stdout)
        stale = time.time() - running - 3600
        os.utime(pidfile, (stale, stale))
        p = run("bash", str(CLUSTER / "up.sh"), timeout=300)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
        assert slurmd_of("pwe-n1") == n1, "up.sh restarted or killed pwe-n1's slurmd"
        new4 = slurmd_of("pwe-n4")
        assert new4 and new4 != n1, f"pwe-n4 has no slurmd of its own: its pid file says {pidfile.read_text()!r}"
        states = slurm4.node_states()
        assert all(states.get(n) == "idle" for n in slurm4.nodes), states
    finally:
        if slurmd_of("pwe-n4") in (None, n1):   # (the old up.sh left it dead: give it back)
            pidfile.unlink(missing_ok=True)
            slurm4.revive("pwe-n4")
