"""Benchmark: 200 members of `true` on the real one-node SLURM cluster (tests/services/setup.sh).

    bash tests/services/setup.sh && python bench/slurm_200.py [--members 200] [--repeat 3]

Three ways, each timed from the first command to the last member finished:
  sbatch-each   one `sbatch --wrap true` per member, then poll squeue until all left
  array         one `sbatch --array=0-199 --wrap true`, polled the same way
  pwe           `pwe run` of a 200-member node on a slurm host: pilots (one here)
The number of sbatch and squeue calls each made is counted by a shim directory on PATH
that logs every call before running the real command.
"""

from __future__ import annotations

import os
import shutil
import statistics
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import clock, parser, pwe_env
CMDS = ("sbatch", "squeue", "scontrol", "scancel")


def shim(d: Path) -> tuple[dict, Path]:
    bindir, log = d / "shim", d / "calls.log"
    bindir.mkdir()
    for cmd in CMDS:
        real = shutil.which(cmd)
        p = bindir / cmd
        p.write_text(f'#!/bin/sh\necho {cmd} >> {log}\nexec {real} "$@"\n')
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    env = pwe_env(PATH=f"{bindir}:{os.environ['PATH']}")
    return env, log


def counts(log: Path) -> dict[str, int]:
    calls = log.read_text().split() if log.exists() else []
    log.unlink(missing_ok=True)
    return {c: calls.count(c) for c in ("sbatch", "squeue")}


def wait_gone(env: dict, name: str) -> None:
    while True:
        out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], env=env, capture_output=True,
                             text=True).stdout
        if not out.strip():
            return
        time.sleep(0.5)


def sbatch_each(d: Path, env: dict, n: int) -> float:
    t0 = clock()
    for _ in range(n):
        subprocess.run(["sbatch", "-J", "bench-each", "-o", "/dev/null", "--wrap", "true"], env=env, check=True,
                       capture_output=True)
    wait_gone(env, "bench-each")
    return clock() - t0


def array(d: Path, env: dict, n: int) -> float:
    t0 = clock()
    subprocess.run(["sbatch", "-J", "bench-array", "-o", "/dev/null", f"--array=0-{n - 1}", "--wrap", "true"],
                   env=env, check=True, capture_output=True)
    wait_gone(env, "bench-array")
    return clock() - t0


def pwe(d: Path, env: dict, n: int) -> float:
    (d / "hosts.yaml").write_text("hosts:\n  cluster:\n    protocol: slurm\n    cores_per_node: 8\n    max_nodes: 1\n")
    wf = d / "wf.yaml"
    wf.write_text(f"name: b\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {n}]}}}}\n    run: 'true'\n"
                  "    scheduling: {maxWallTime: 10}\n")
    run_dir = d / f"run-{time.time_ns()}"
    t0 = clock()
    subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "cluster", "--run-dir", str(run_dir)],
                   env=env, check=True, capture_output=True, cwd=d)
    return clock() - t0


def main() -> None:
    ap = parser(__doc__, repeat=3, members=200)
    ap.add_argument("--only", choices=["sbatch-each", "array", "pwe"], action="append")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="pwe-slurm-bench-"))
    env, log = shim(d)
    print(f"{'way':12} {'members':>7} {'wall s (median)':>16} {'sbatch':>7} {'squeue':>7}  runs")
    for name, fn in (("sbatch-each", sbatch_each), ("array", array), ("pwe", pwe)):
        if args.only and name not in args.only:
            continue
        walls, calls = [], {}
        for _ in range(args.repeat):
            walls.append(fn(d, env, args.members))
            calls = counts(log)
        print(f"{name:12} {args.members:7} {statistics.median(walls):16.2f} {calls['sbatch']:7} {calls['squeue']:7}"
              f"  {', '.join(f'{w:.2f}' for w in walls)}", flush=True)
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
