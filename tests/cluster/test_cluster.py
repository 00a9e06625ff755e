"""One pilot across a real four-node SLURM allocation (tests/cluster/up.sh).

The nodes pwe-n1..pwe-n4 are network namespaces with their own slurmd, address and host
name; the members write their own ledger (a line as each starts and as each ends, with
the host name it ran on), and every claim below is read from that ledger, the run's
journal, or SLURM itself: members spread over every node, each ran to its end once, one
sbatch, squeue asked O(1) times per interval; MPI members span nodes under real Open MPI;
a node killed mid-run has its members run again on the others in the same allocation; a
whole allocation cancelled gets a new pilot.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers import ROOT, output, read_journal, wait_for

PY = sys.executable

#: A member that writes its own ledger: start (with where it runs), and end only when its
#: work (the sleep) ran to its end (SLURM signals a cancelled job's processes one by one,
#: and `sleep; echo end` would write 'end' for work cut short).
LEDGER_RUN = ('echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT $(hostname)" >> {{ ledger }}; '
              'sleep {{ pause }} && echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT $(hostname)" >> {{ ledger }}')


def ledger_workflow(tmp_path: Path, n: int, pause: float, host: str = "slurm4") -> Path:
    wf = tmp_path / "wf.yaml"
    wf.write_text(
        f"name: fan\nproperties: {{ledger: {tmp_path / 'ledger'}, pause: {pause}}}\ndefaults: {{host: {host}}}\n"
        f"nodes:\n  a:\n    parameters: {{i: {{range: [0, {n}]}}}}\n    run: {json.dumps(LEDGER_RUN)}\n")
    return wf


def read_ledger(tmp_path: Path) -> tuple[list[list[str]], list[list[str]]]:
    lines = [line.split() for line in (tmp_path / "ledger").read_text().splitlines()]
    return [x for x in lines if x[0] == "start"], [x for x in lines if x[0] == "end"]


def counting_path(tmp_path: Path, slurm4) -> tuple[dict, Path]:
    """An environment whose sbatch and squeue are the real ones, each call written to a
    file first: how many the engine made, counted outside it."""
    shims, calls = tmp_path / "shims", tmp_path / "calls"
    shims.mkdir()
    for name in ("sbatch", "squeue", "scancel", "qsub", "srun"):
        real = shutil.which(name)
        (shims / name).write_text(f'#!/bin/sh\necho "$(date +%s.%N) {name} $*" >> {calls}\nexec {real} "$@"\n')
        (shims / name).chmod(0o755)
    env = {**os.environ, **slurm4.env, "PYTHONPATH": str(ROOT), "PATH": f"{shims}:{os.environ['PATH']}"}
    return env, calls


def calls_of(calls: Path) -> Counter:
    return Counter(line.split()[1] for line in calls.read_text().splitlines()) if calls.exists() else Counter()


def pwe(*args, env, cwd, timeout=300):
    return subprocess.run([PY, "-m", "pwe", *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def start_run(wf: Path, slurm4, run_dir: Path, env: dict) -> subprocess.Popen:
    """`pwe run` of the workflow on the four-node cluster's hosts, in the background."""
    return subprocess.Popen([PY, "-m", "pwe", "run", wf, "--hosts", slurm4.hosts, "--run-dir", run_dir],
                            cwd=run_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ends_by_member(run_dir: Path) -> Counter:
    """Successful ends per member in the journal: what the run recorded as done."""
    return Counter(r["m"] for r in read_journal(run_dir) if r.get("e") == "end" and r.get("rc") == 0)


@pytest.mark.parametrize("host,n", [("slurm4", 2000), ("slurm4-ssh", 400)])
def test_one_pilot_fans_members_over_four_nodes(slurm4, tmp_path, host, n):
    env, calls = counting_path(tmp_path, slurm4)
    wf = ledger_workflow(tmp_path, n, 0, host)
    run_dir = tmp_path / "run"
    t0 = time.time()
    proc = pwe("run", wf, "--hosts", slurm4.hosts, "--run-dir", run_dir, env=env, cwd=tmp_path)
    wall = time.time() - t0
    assert proc.returncode == 0, proc.stderr
    starts, ends = read_ledger(tmp_path)
    # each member started once and ran to its end once (the members' own word)
    assert sorted(int(x[2]) for x in starts) == list(range(n))
    assert sorted(int(x[2]) for x in ends) == list(range(n))
    assert ends_by_member(run_dir) == Counter(range(n))
    # every node of the allocation ran members
    assert set(Counter(x[4] for x in ends)) == set(slurm4.nodes), Counter(x[4] for x in ends)
    # one allocation, and the batch system asked about it at most once per status interval
    # (5 s; backing off to 60 s while nothing changes), plus its end
    made = calls_of(calls)
    assert made["sbatch"] == 1, made
    assert made["squeue"] <= wall / 5 + 2, (made, wall)
    pilots = [r for r in read_journal(run_dir) if r.get("e") == "pilot"]
    assert len(pilots) == 1 and pilots[0]["batch"] == "slurm"
    if host == "slurm4":
        # the members on the other three nodes went through one agent step per node (the
        # pilot's PATH is the job's, so its srun calls are counted too), not a step each
        assert made["srun"] == 3, made
    script = (run_dir / "pilots" / "p1" / "job.sh").read_text()
    assert "#SBATCH --nodes=4" in script and "#SBATCH --no-kill" in script
    # the journal's start of each member and the trace name the node its ledger says it ran on
    where = {int(x[2]): x[4] for x in starts}
    trace = pwe("trace", run_dir, "--json", env=env, cwd=tmp_path)
    assert trace.returncode == 0, trace.stderr
    rows = [json.loads(line) for line in trace.stdout.splitlines()]
    assert {r["member"]: r["node_name"] for r in rows} == where


def test_a_pbs_pilot_of_two_nodes_runs_members_on_both(slurm4, tmp_path):
    """PBS's words for a multi-node pilot (`#PBS -l nodes=2:ppn=2`), through the PBS front
    end over this cluster (slurm-wlm-torque's qsub): one job, members on both its nodes."""
    env, calls = counting_path(tmp_path, slurm4)
    wf = ledger_workflow(tmp_path, 40, 0.2, "pbs4")
    run_dir = tmp_path / "run"
    proc = pwe("run", wf, "--hosts", slurm4.hosts, "--run-dir", run_dir, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "#PBS -l nodes=2:ppn=2" in (run_dir / "pilots" / "p1" / "job.sh").read_text()
    _, ends = read_ledger(tmp_path)
    assert sorted(int(x[2]) for x in ends) == list(range(40))
    assert len({x[4] for x in ends}) == 2 and {x[4] for x in ends} <= set(slurm4.nodes)
    assert [r["batch"] for r in read_journal(run_dir) if r.get("e") == "pilot"] == ["pbs"]


def test_an_mpi_member_spans_two_nodes_and_a_failing_rank_fails_it(slurm4, tmp_path):
    prog = tmp_path / "ranks"
    (tmp_path / "ranks.c").write_text(r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, len, one = 1, sum = 0;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d on %s sum %d\n", rank, size, host, sum);
    fflush(stdout);
    int fail = argc > 1 ? atoi(argv[1]) : 0;
    if (fail && rank == 1) return fail;  /* one rank exits non-zero */
    MPI_Finalize();
    return 0;
}
""")
    subprocess.run(["mpicc", "-o", str(prog), str(tmp_path / "ranks.c")], check=True, timeout=120)
    wf = tmp_path / "mpi.yaml"
    # one after the other: two PMIx steps starting at the same moment on this one-machine
    # cluster (four namespaces sharing /dev/shm and /tmp) sometimes hang, bare srun as well
    # (the closing note of issue 21); a walltime turns such a hang into a failed member
    mpi = "scheduling: {ranksPerMember: 4, ranksPerNode: 2, maxWallTimePerMember: 2}"
    wf.write_text(f"name: mpi\ndefaults: {{host: slurm4}}\nnodes:\n  sim:\n    {mpi}\n    run: {prog} 0\n"
                  f"  bad:\n    after: [sim]\n    {mpi}\n    run: {prog} 3\n")
    env = {**os.environ, **slurm4.env, "PYTHONPATH": str(ROOT)}
    run_dir = tmp_path / "run"
    proc = pwe("run", wf, "--hosts", slurm4.hosts, "--run-dir", run_dir, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # one member failed
    out = output(run_dir, "sim", 0).splitlines()
    ranks = sorted(line.split() for line in out)  # "rank R of 4 on HOST sum 4"
    # one MPI job of 4 ranks (their Allreduce summed 4), two on each of two hosts
    assert [r[1] for r in ranks] == ["0", "1", "2", "3"]
    assert {r[3] for r in ranks} == {"4"} and {r[7] for r in ranks} == {"4"}
    hosts = Counter(r[5] for r in ranks)
    assert len(hosts) == 2 and set(hosts.values()) == {2} and set(hosts) <= set(slurm4.nodes), hosts
    show = json.loads(pwe("show", run_dir, "--json", env=env, cwd=tmp_path).stdout)
    by = {m["node"]: m for m in show}
    assert by["sim"]["state"] == "done"
    assert by["bad"]["state"] == "failed" and by["bad"]["exit_status"] == 3  # the rank's own status
    bad = output(run_dir, "bad", 0)
    assert bad.count(" of 4 on ") == 4  # it ran (all four ranks), then rank 1 exited 3


def test_a_node_lost_mid_run_has_its_members_run_again_on_the_others(slurm4, tmp_path):
    env, calls = counting_path(tmp_path, slurm4)
    n = 60
    wf = ledger_workflow(tmp_path, n, 2)
    run_dir = tmp_path / "run"
    proc = start_run(wf, slurm4, run_dir, env)
    victim = "pwe-n3"
    try:
        # kill it while members run on it (their ledger says they started there)
        wait_for(lambda: (tmp_path / "ledger").exists() and f" {victim}" in (tmp_path / "ledger").read_text(),
                 timeout=120, what=f"a member started on {victim}")
        slurm4.kill(victim)
        killed_at = time.time()
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
        slurm4.revive(victim)
    assert proc.returncode == 0, err
    starts, ends = read_ledger(tmp_path)
    # nothing lost: every member ran to its end; nothing twice: each recorded done once
    assert sorted(int(x[2]) for x in ends) == list(range(n))
    assert ends_by_member(run_dir) == Counter(range(n))
    journal = read_journal(run_dir)
    lost = [r for r in journal if r.get("e") == "node_lost"]
    assert [r["node"] for r in lost] == [victim]
    # the members that were running there went back and ran as their next attempt, elsewhere
    back = {r["m"] for r in journal if r.get("e") == "unassign" and victim in str(r.get("why"))}
    assert back, "no member was running on the lost node"
    for m in back:
        done = [x for x in ends if int(x[2]) == m]
        assert len(done) == 1 and done[0][4] != victim and int(done[0][3]) >= 2, done
    # on the surviving nodes of the same allocation: no second sbatch
    assert calls_of(calls)["sbatch"] == 1
    status = pwe("status", run_dir, env=env, cwd=tmp_path)
    assert f"node {victim} lost" in status.stdout, status.stdout
    # the pilot noticed by itself, well before SLURM's SlurmdTimeout (30 s) would have
    assert lost[0]["t"] - killed_at < 30, lost[0]["t"] - killed_at


def test_a_cancelled_allocation_gets_a_new_pilot_and_the_run_completes(slurm4, tmp_path):
    env, calls = counting_path(tmp_path, slurm4)
    n = 40
    wf = ledger_workflow(tmp_path, n, 1)
    run_dir = tmp_path / "run"
    proc = start_run(wf, slurm4, run_dir, env)
    try:
        wait_for(lambda: len(read_ledger(tmp_path)[1]) >= 8 if (tmp_path / "ledger").exists() else False,
                 timeout=120, what="some members done")
        job = next(r["job"] for r in read_journal(run_dir) if r.get("e") == "pilot")
        slurm4.run("scancel", job)  # someone else takes the whole allocation away
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    _, ends = read_ledger(tmp_path)
    assert sorted(int(x[2]) for x in ends) == list(range(n))
    assert ends_by_member(run_dir) == Counter(range(n))
    pilots = [r for r in read_journal(run_dir) if r.get("e") == "pilot"]
    assert len(pilots) >= 2 and calls_of(calls)["sbatch"] == len(pilots)


def test_an_mpi_layout_that_does_not_divide_is_refused_at_validate(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: m\nnodes:\n  a:\n    scheduling: {ranksPerMember: 5, ranksPerNode: 2}\n    run: x\n")
    proc = subprocess.run([PY, "-m", "pwe", "validate", wf], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "not a multiple of ranksPerNode" in proc.stderr and "wf.yaml" in proc.stderr


def test_ranks_per_node_wider_than_the_hosts_nodes_is_refused_at_plan(tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts:\n  two:\n    protocol: slurm\n    cores_per_node: 2\n"
                                         "    max_nodes: 2\n")
    for sched, words in (("{ranksPerMember: 4, ranksPerNode: 4}", "ranksPerNode 4"),
                         ("{ranksPerMember: 6, ranksPerNode: 2}", "spans 3 nodes")):
        wf = tmp_path / "wf.yaml"
        wf.write_text(f"name: m\ndefaults: {{host: two}}\nnodes:\n  a:\n    scheduling: {sched}\n    run: x\n")
        proc = subprocess.run([PY, "-m", "pwe", "plan", wf], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
        assert proc.returncode == 2, proc.stdout
        assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr


@pytest.mark.parametrize("host,words", [
    ("max_nodes: 8", "may ask for 8 nodes but partition 'batch' has 4 (sinfo); lower max_nodes"),
    ("cores_per_node: 16", "may ask for 16 cores per node but partition 'batch' has 2 (sinfo)"),
    ("memory_per_node: 64000", "may ask for 64000 MB of memory per node but partition 'batch' has 2000 (sinfo)"),
    ("partitions: [{name: gpu}]", "partition 'gpu' does not exist; sinfo lists: "),  # (batch, small: sinfo's order)
])
def test_a_host_asking_more_than_its_partition_has_is_refused_before_anything_is_made(slurm4, tmp_path, host,
                                                                                       words):
    """Such a pilot job would wait in the queue for ever (or be refused by sbatch once the
    run is made): sinfo says what the partition has, and plan and run refuse in one line."""
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  big:\n    protocol: slurm\n    account: abc\n"
                                         f"    {host}\n")
    wf = ledger_workflow(tmp_path, 4, 0, "big")
    env = {**os.environ, **slurm4.env, "PYTHONPATH": str(ROOT)}
    for command in (["plan"], ["run", "--run-dir", tmp_path / "run"]):
        proc = pwe(*command, wf, env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "host 'big'" in lines[0] and words in lines[0], lines
        assert "hosts.yaml:5:" in lines[0]  # the line to change
    assert not (tmp_path / "run").exists() and not (tmp_path / "ledger").exists()


#: grows by 16 MB every 20 ms to 400 MB (touched: resident), holds it a moment, exits 0
GROW_400 = ("import time\nb = []\nfor _ in range(25):\n    b.append(b'x' * (16 << 20)); time.sleep(0.02)\n"
            "time.sleep(0.5)\n")


def test_a_member_grown_past_its_partition_gets_a_pilot_in_a_partition_of_larger_nodes(slurm4, tmp_path):
    """Partition small holds a job to 500 MB a node (SLURM's MaxMemPerNode), batch has
    2,000 MB nodes. The node asks 300 MB: its pilot goes to small, the first that holds it.
    The member needs 400 MB: killed for memory there (oom, the pilot's memory watch); its
    retry asks 1,200 MB, which no node of small holds, so the engine submits a pilot to
    batch and the attempt runs there. Read from the member's own ledger (SLURM's partition
    in its environment) and from SLURM's own record of the two jobs."""
    (tmp_path / "grow.py").write_text(GROW_400)
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  parts:\n    protocol: slurm\n    cores_per_node: 2\n    memory_per_node: 2000\n    max_nodes: 1\n"
        "    partitions:\n      - {name: small, memory_per_node: 500, max_nodes: 1}\n      - {name: batch, max_nodes: 1}\n")
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(
        "name: grows\ndefaults: {host: parts}\nnodes:\n  a:\n"
        f"    run: 'echo \"$PWE_ATTEMPT $SLURM_JOB_PARTITION $(hostname)\" >> {ledger}; {PY} {tmp_path}/grow.py "
        f"&& echo \"end $PWE_ATTEMPT\" >> {ledger}'\n"
        "    scheduling: {memoryPerMember: 300}\n"
        "    retry: {attempts: 2, on: [oom], grow: {memoryPerMember: 4}}\n")
    env = {**os.environ, **slurm4.env, "PYTHONPATH": str(ROOT)}
    run_dir = tmp_path / "run"
    proc = pwe("run", wf, "--hosts", tmp_path / "hosts.yaml", "--run-dir", run_dir, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = ledger.read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [["1", "small"], ["2", "batch"], ["end", "2"]], lines
    journal = read_journal(run_dir)
    ends = {r["a"]: r for r in journal if r["e"] == "end"}
    assert ends[1].get("reason") == "oom" and ends[2]["rc"] == 0, ends
    lanes = {r["p"]: r["lane"] for r in journal if r["e"] == "pilot"}
    assert lanes[ends[1]["p"]] == "parts" and lanes[ends[2]["p"]] == "parts/batch", lanes
    scripts = {p: (run_dir / "pilots" / p / "job.sh").read_text() for p in lanes}
    assert "#SBATCH --partition=small" in scripts[ends[1]["p"]]
    assert "#SBATCH --partition=batch" in scripts[ends[2]["p"]]
