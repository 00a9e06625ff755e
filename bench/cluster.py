"""Benchmark: members over the real four-node SLURM cluster (tests/cluster/up.sh).

    bash tests/cluster/up.sh && . tests/cluster/env.sh && python bench/cluster.py [--members 2000]

Each way is timed from its first command to its last member's end:
  pwe-srun       `pwe run` of N × `true` on host slurm4: one pilot job over 4 nodes,
                 members on other nodes as `srun --exact` steps
  pwe-ssh        the same on host slurm4-ssh: members over one ssh session per node
  srun-steps     one 4-node `salloc`, inside it a shell loop of N `srun --exact -n1 true`
                 steps, 8 at a time (what a hand-written pilot script does)
  sbatch-each    one `sbatch --wrap true` per member (fewer members: --each, default 200)
and, from the runs' own journals:
  sbatch -> first member   the pilot job's submission to its first member's start
  node loss                kill -9 of one node (its slurmd, its members, its link) to the
                           pilot's `node_lost`, and to the last member it handed back starting
                           again on another node (60 × `sleep 2`)
  1 node vs 4 nodes        N × `true` with max_nodes 1 against max_nodes 4
Figures depend on this machine: four "nodes" here share its 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, check_ends, clock, journal_records, parser, pwe_env

HOSTS = ROOT / "tests" / "cluster" / "hosts.yaml"
NODE_SH = ROOT / "tests" / "services" / "node.sh"


def workflow(d: Path, n: int, run: str = "true", host: str = "slurm4") -> Path:
    wf = d / f"wf-{n}-{host}.yaml"
    wf.write_text(f"name: b\ndefaults: {{host: {host}}}\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {n}]}}}}\n"
                  f"    run: {json.dumps(run)}\n")
    return wf


def journal(run_dir: Path) -> list[dict]:
    return journal_records(run_dir)


def pwe_run(d: Path, env: dict, n: int, host: str, hosts: Path = HOSTS) -> tuple[float, Path]:
    run_dir = d / f"run-{time.time_ns()}"
    t0 = clock()
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(workflow(d, n, host=host)), "--hosts", str(hosts),
                           "--run-dir", str(run_dir)], env=env, capture_output=True, text=True, cwd=d)
    wall = clock() - t0
    if proc.returncode != 0:
        raise SystemExit(f"pwe run failed: {proc.stderr[-2000:]}")
    check_ends(run_dir, n)
    return wall, run_dir


def first_member(run_dir: Path) -> float:
    """Seconds from the pilot job's submission (its journal record) to the first start."""
    recs = journal(run_dir)
    submitted = next(r["t"] for r in recs if r["e"] == "pilot")
    return min(r["t"] for r in recs if r["e"] == "start") - submitted


def srun_steps(env: dict, n: int, width: int = 8) -> float:
    loop = (f"for i in $(seq {n}); do srun --exact --quiet -N1 -n1 -c1 true & "
            f"[ $((i % {width})) = 0 ] && wait; done; wait")
    t0 = clock()
    subprocess.run(["salloc", "-N4", "--quiet", "bash", "-c", loop], env=env, check=True, capture_output=True)
    return clock() - t0


def sbatch_each(env: dict, n: int) -> float:
    t0 = clock()
    for _ in range(n):
        subprocess.run(["sbatch", "-J", "bench-each", "-o", "/dev/null", "--wrap", "true"], env=env, check=True,
                       capture_output=True)
    while subprocess.run(["squeue", "-h", "-n", "bench-each", "-o", "%i"], env=env, capture_output=True,
                         text=True).stdout.strip():
        time.sleep(0.5)
    return clock() - t0


def node_loss(d: Path, env: dict, victim: int = 3) -> tuple[float, float]:
    """(kill -> node_lost, kill -> last handed-back member started again), seconds."""
    ledger = d / "loss-ledger"
    run = f'echo "start $PWE_MEMBER $(hostname)" >> {ledger}; sleep 2 && echo end >> {ledger}'
    run_dir = d / f"loss-{time.time_ns()}"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(workflow(d, 60, run)), "--hosts", str(HOSTS),
                             "--run-dir", str(run_dir)], env=env, cwd=d, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        while not (ledger.exists() and f"pwe-n{victim}" in ledger.read_text()):
            time.sleep(0.05)
        killed = time.time()  # (node.sh takes the link down first, then kills what runs there)
        subprocess.run(["bash", str(NODE_SH), "kill", str(victim)], check=True, capture_output=True)
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
        subprocess.run(["bash", str(NODE_SH), "revive", str(victim)], capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"pwe run (node loss) failed: {err[-2000:]}")
    recs = journal(run_dir)
    lost = next(r["t"] for r in recs if r["e"] == "node_lost")
    back = {r["m"] for r in recs if r["e"] == "unassign"}
    again = max(r["t"] for r in recs if r["e"] == "start" and r["m"] in back and r["a"] > 1)
    return lost - killed, again - killed


def wait_idle(env: dict, timeout: float = 120) -> None:
    """Until all four nodes are idle again (a revived node comes back by itself)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        states = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True).stdout
        if states.split() and all(s == "idle" for s in states.split()):
            return
        for s in ("down", "drain"):
            if s in states:
                subprocess.run(["scontrol", "update", "NodeName=pwe-n[1-4]", "State=RESUME"], env=env,
                               capture_output=True)
        time.sleep(1)


def main() -> None:
    ap = parser(__doc__, repeat=None, members=2000)
    ap.add_argument("--each", type=int, default=200, help="members for sbatch-each (one job per member; 0: skip)")
    ap.add_argument("--scale", type=int, default=20000, help="members for 1 node vs 4 nodes (0: skip)")
    args = ap.parse_args()
    if "SLURM_CONF" not in os.environ:
        raise SystemExit("source tests/cluster/env.sh first (SLURM_CONF of the four-node cluster)")
    env = pwe_env()
    d = Path(tempfile.mkdtemp(prefix="pwe-cluster-bench-"))
    n = args.members
    print(f"{'way':32} {'members':>8} {'wall s':>8} {'members/s':>10}", flush=True)
    for host in ("slurm4", "slurm4-ssh"):
        wall, run_dir = pwe_run(d, env, n, host)
        print(f"{'pwe ' + host + ' (one pilot, 4 nodes)':32} {n:8} {wall:8.2f} {n / wall:10.1f}"
              f"   sbatch -> first member {first_member(run_dir):.2f} s", flush=True)
    wall = srun_steps(env, n)
    print(f"{'srun steps alone (salloc -N4)':32} {n:8} {wall:8.2f} {n / wall:10.1f}", flush=True)
    if args.each:
        wall = sbatch_each(env, args.each)
        print(f"{'one sbatch per member':32} {args.each:8} {wall:8.2f} {args.each / wall:10.1f}", flush=True)
    wait_idle(env)
    detect, again = node_loss(d, env)
    print(f"node loss: kill -> node_lost {detect:.2f} s; kill -> last handed-back member started again "
          f"{again:.2f} s", flush=True)
    wait_idle(env)
    if args.scale:
        one = d / "one-node.yaml"
        one.write_text(HOSTS.read_text().replace("max_nodes: 4\n    partitions:\n      - {name: batch, max_nodes: 4}",
                                                 "max_nodes: 1\n    partitions:\n      - {name: batch, max_nodes: 1}",
                                                 1))
        w1, _ = pwe_run(d, env, args.scale, "slurm4", one)
        w4, _ = pwe_run(d, env, args.scale, "slurm4")
        print(f"{args.scale} x true: 1 node {w1:.2f} s ({args.scale / w1:.0f}/s), 4 nodes {w4:.2f} s "
              f"({args.scale / w4:.0f}/s): {w1 / w4:.2f}x", flush=True)


if __name__ == "__main__":
    main()
