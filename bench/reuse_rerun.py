"""Benchmark: an edited rerun of a 10^5 sweep against a full rerun (content-addressed reuse, issue 34).

    nice -n 10 flock /tmp/pwe-bench.lock python bench/reuse_rerun.py [--members 100000] [--cores 2] [--where disk]

A workflow of one node ``sim`` of N members (``true``) and a node ``post`` matched on its
parameter (N more), under one runs root. First run: everything (the lending run). Then:

- **edited rerun**: the range widened by 1% and nothing else changed: the new 1% of
  ``sim`` and of ``post`` run, the rest is reused (its keys computed, the earlier run's
  signed record verified and looked up, the ``reused`` records journaled when the run
  begins);
- **full rerun**: the same edited file with ``--fresh`` (what pwe did before reuse: run
  every member again).

For each: the wall time of the whole ``pwe run`` (imports, planning, the reuse decision,
the members, the record written at the end), the members that ran (``end`` records of the
journal), and the time ``pwe plan --json`` takes to say how many would be reused. Prints a
Markdown table for bench/BENCHMARKS.md.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from common import measure, parser, place, pwe_env
import sys

ENV = pwe_env()

WF = """\
name: rerunbench
nodes:
  sim:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: "true"
  post:
    after: [sim]
    parameters: {{i: {{range: [0, {n}]}}}}
    run: "true"
"""


def ran(run_dir: Path) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from pwe.runstate.journal import unpack

    n = 0
    with open(run_dir / "journal.jsonl", "rb") as fh:
        for line in fh:
            n += sum(1 for r in unpack(json.loads(line)) if r["e"] == "end")
    return n


def main() -> None:
    ap = parser(__doc__, repeat=None, members=100_000, cores=2, where="disk")
    args = ap.parse_args()
    n = args.members
    top = Path(tempfile.mkdtemp(prefix="reuse-rerun-", dir=place(args.where)))
    try:
        runs = top / "runs"
        wf = top / "wf.yaml"
        wf.write_text(WF.format(n=n))
        py = sys.executable
        rows = []

        def go(name: str, *extra: str) -> None:
            took, rss, _ = measure([py, "-m", "pwe", "run", wf, "--cores", str(args.cores), "--run-dir",
                                    runs / name, "--json", *extra], env=ENV, cwd=top)
            rows.append((name, took, ran(runs / name), rss))

        go("first")
        wf.write_text(WF.format(n=n + n // 100))
        plan_took, plan_rss, out = measure([py, "-m", "pwe", "plan", wf, "--reuse-from", runs, "--json",
                                            "--members", "0"], env=ENV, cwd=top, out=True)
        counts = {nd["id"]: (nd["reused"], nd["run"]) for nd in json.loads(out)["nodes"]}
        go("edited", "--reuse-from", str(runs))
        go("full (--fresh)", "--fresh")
        total = 2 * (n + n // 100)
        print(f"{n:,}-member sweep (x2 nodes), widened by 1% to {total:,} members; {args.cores} slots; "
              f"run directories on {args.where}\n")
        print("| run | wall | members run | engine peak RSS |")
        print("|---|---|---|---|")
        for name, took, count, rss in rows:
            print(f"| {name} | {took:.1f} s | {count:,} | {rss / 1024:.0f} MiB |")
        print(f"\n`pwe plan --json` of the edited file: {plan_took:.2f} s (peak RSS {plan_rss / 1024:.0f} MiB); "
              f"reused / run per node: {counts}")
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
