"""Makespan of one workflow with ready members handed out first in first out and by
pressure (issue 14).

The workflow: LEAVES short independent members (first in the file, so first in first
out hands them out first) and one chain of STAGES members, each waiting for the one
before, on CORES cores. First in first out fills every core with leaves and runs the
chain alone at the end; by pressure the chain's next stage takes the next free core and
the leaves fill the rest. The ideal is max(chain, all the work / cores).

Each case is a whole ``pwe run`` in its own run root (no earlier run's durations),
except "pressure, 2nd run", which runs again in the root of a pressure run before it and
so starts from that run's measured durations. The makespan is read from the journal:
the first member's start to the last member's end (the pilot's clock).

    flock /tmp/pwe-bench.lock python bench/pressure.py --repeat 3
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import journal_records, parser, pwe_env, timed_run  # noqa: E402


def workflow(order: str, leaves: int, leaf_s: float, stages: int, stage_s: float) -> str:
    lines = [f"name: pressure-bench\norder: {order}\nnodes:",
             f"  leaves:\n    parameters: {{i: {{range: [0, {leaves}]}}}}\n    run: sleep {leaf_s}"]
    for k in range(1, stages + 1):
        after = f"\n    after: [stage{k - 1}]" if k > 1 else ""
        lines.append(f"  stage{k}:{after}\n    run: sleep {stage_s}")
    return "\n".join(lines) + "\n"


def makespan(run_dir: Path) -> float:
    starts, ends = [], []
    for r in journal_records(run_dir):
        if r["e"] == "start":
            starts.append(r["t"])
        elif r["e"] == "end":
            ends.append(r["t"])
    return max(ends) - min(starts)


def one(root: Path, wf: Path, cores: int, env: dict, name: str) -> tuple[float, float]:
    run_dir = root / name
    wall = timed_run([wf, "--cores", cores, "--run-dir", run_dir], env)
    return makespan(run_dir), wall


def main() -> None:
    ap = parser(__doc__, repeat=3, cores=2)
    ap.add_argument("--leaves", type=int, default=48)
    ap.add_argument("--leaf-seconds", type=float, default=0.25)
    ap.add_argument("--stages", type=int, default=6)
    ap.add_argument("--stage-seconds", type=float, default=1.0)
    args = ap.parse_args()
    env = pwe_env()
    chain = args.stages * args.stage_seconds
    work = chain + args.leaves * args.leaf_seconds
    ideal = max(chain, work / args.cores)
    print(f"{args.leaves} leaves x {args.leaf_seconds} s, a chain of {args.stages} x {args.stage_seconds} s, "
          f"{args.cores} cores: ideal {ideal:.2f} s, leaves then chain {chain + (work - chain) / args.cores:.2f} s")
    results: dict[str, list[tuple[float, float]]] = {"fifo": [], "pressure": [], "pressure, 2nd run": []}
    tmp = Path(tempfile.mkdtemp(prefix="pwe-bench-pressure-"))
    try:
        files = {}
        for order in ("fifo", "pressure"):
            files[order] = tmp / f"{order}.yaml"
            files[order].write_text(workflow(order, args.leaves, args.leaf_seconds, args.stages, args.stage_seconds))
        for rep in range(args.repeat):  # (alternating, so that a drift of the host hits both)
            for order in ("fifo", "pressure"):
                root = tmp / f"{order}-{rep}"
                root.mkdir()
                results[order].append(one(root, files[order], args.cores, env, "run1"))
                if order == "pressure":
                    results["pressure, 2nd run"].append(one(root, files[order], args.cores, env, "run2"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| order | makespan, first start -> last end (s): median (runs) | whole pwe run (s), median | "
          "vs ideal |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        spans = [m for m, _ in rows]
        med = statistics.median(spans)
        print(f"| {name} | {med:.2f} ({', '.join(f'{m:.2f}' for m in spans)}) | "
              f"{statistics.median(w for _, w in rows):.2f} | {ideal / med:.2f} |")


if __name__ == "__main__":
    main()
