"""Benchmark: how fast a tree grows (iteration until convergence, issue 14): the latency of
one iteration, member end -> its check -> the child journaled -> assigned -> started.

    flock /tmp/pwe-bench.lock python bench/converge_chain.py [--depth 500] [--trees 1] [--repeat 3]

One checked node whose members run ``true`` and whose check names the next member
(``next.k=k+1``) until k reaches the depth: each tree is a chain, so its members run one
after another and the wall time divided by the depth is the time of one iteration, pwe's
own overhead (a member and its check are two tiny shell commands). With ``--trees T`` the
node has T roots, growing side by side on 2 slots. Whole ``pwe run`` commands (start-up
included), on tmpfs; medians of ``--repeat``.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import clock, parser, pwe_env

WF = """name: chain
nodes:
  step:
    parameters:
      tree: {{range: [0, {trees}]}}
      k: [0]
    max_iterations: {depth}
    run: 'true'
    check: |
      if [ {{{{ k }}}} -ge {last} ]; then echo converged=true
      else echo next.k=$(({{{{ k }}}} + 1)); fi >> "$PWE_OUTPUTS"
"""


def main() -> None:
    ap = parser(__doc__, repeat=3)
    ap.add_argument("--depth", type=int, default=500)
    ap.add_argument("--trees", type=int, default=1)
    a = ap.parse_args()
    env = pwe_env()
    base = Path(tempfile.mkdtemp(prefix="pwe-chain-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        wf = base / "chain.yaml"
        wf.write_text(WF.format(trees=a.trees, depth=a.depth, last=a.depth - 1))
        times = []
        for r in range(a.repeat):
            t0 = clock()
            proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir",
                                   str(base / f"run{r}")], env=env, capture_output=True, text=True)
            times.append(clock() - t0)
            want = f"{a.depth * a.trees} done of {a.depth * a.trees}"
            if proc.returncode != 0 or want not in proc.stdout:
                sys.exit(f"run {r} did not end as expected: {proc.stdout}{proc.stderr}")
        med = statistics.median(times)
        print(f"depth {a.depth} x {a.trees} tree(s): median {med:.2f} s "
              f"({1000 * med / a.depth:.2f} ms per iteration of a tree; "
              f"{a.depth * a.trees / med:.0f} members/s)  runs: {', '.join(f'{t:.2f}' for t in times)}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
