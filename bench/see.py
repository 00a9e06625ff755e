"""Benchmark: seeing a 100,000-member run (issue 12).

    flock /tmp/pwe-bench.lock python bench/see.py [--members 100000] [--where tmpfs|disk] [--repeat 3]

Makes a real run (not a synthetic journal): --members members of `test I -ne 7` (one in
a thousand fails) on this machine, `pwe submit` with 2 cores. While it runs, times
`pwe status RUN` (fresh processes, interpreter start-up included; bar: under 0.2 s).
Once it has ended, times fresh processes of
  pwe report RUN      (bar: under 5 s, under 500 MB peak memory, the file under 10 MB)
  pwe show RUN -q 'state=failed'          (bar: under 1 s; reads the state)
  pwe show RUN -q 'T>0.01'                (for information: a duration reads the trace)
  pwe trace RUN > /dev/null               (for information)
Median of --repeat each; peak memory is the process's ru_maxrss (wait4).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import clock, measure, parser, place, pwe_env

ENV = pwe_env()


def once(args: list[str]) -> tuple[float, int, str]:
    """(wall s, peak RSS KB, stdout) of one fresh `python -m pwe ARGS` (exit 1, "some
    members failed", is an answer here)."""
    return measure([sys.executable, "-m", "pwe", *args], ENV, ok=(0, 1), out=True)


def median_once(args: list[str], repeat: int) -> tuple[float, int, list[float], str]:
    runs = [once(args) for _ in range(repeat)]
    walls = [r[0] for r in runs]
    return statistics.median(walls), max(r[1] for r in runs), walls, runs[-1][2]


def main() -> None:
    ap = parser(__doc__, repeat=3, members=100_000, where="tmpfs")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pwe-see-", dir=place(args.where)))
    try:
        wf = base / "wf.yaml"
        wf.write_text(f"name: seen\nnodes:\n  sim:\n    parameters: {{i: {{range: [0, {args.members}]}}}}\n"
                      "    run: test {{ i % 1000 }} -ne 7\n")
        run_dir = base / "run"
        t0 = clock()
        measure([sys.executable, "-m", "pwe", "submit", wf, "--cores", "2", "--run-dir", run_dir], ENV)
        # pwe status while it runs
        during: list[float] = []
        counts = []
        while True:
            wall, _, out = once(["status", str(run_dir), "--json"])
            snap = json.loads(out)
            if snap["phase"] in ("succeeded", "finished with failures"):
                break
            if clock() - t0 > 3600:
                raise SystemExit(f"the run did not end within an hour: {snap['phase']}")
            if snap["phase"] == "running":  # (not before its engine has started)
                during.append(wall)
                counts.append(snap["totals"].get("done", 0) + snap["totals"].get("failed", 0))
            time.sleep(0.5)
        total = clock() - t0
        print(f"run: {args.members:,} members in {total:.1f} s on {args.where}; "
              f"journal {(run_dir / 'journal.jsonl').stat().st_size / 1e6:.1f} MB")
        if during:
            print(f"pwe status during the run   : median {statistics.median(during):.3f} s, max {max(during):.3f} s "
                  f"({len(during)} calls, at {counts[0]:,} to {counts[-1]:,} members finished)")
        wall, rss, walls, out = median_once(["report", str(run_dir), "-o", str(base / "report.html")], args.repeat)
        size = (base / "report.html").stat().st_size
        print(f"pwe report                  : {wall:.3f} s median (runs {', '.join(f'{w:.2f}' for w in walls)}), "
              f"peak {rss / 1024:.0f} MB, file {size / 1e6:.2f} MB")
        for q in ("state=failed", "T>0.01"):
            wall, rss, walls, out = median_once(["show", str(run_dir), "-q", q, "--limit", "0", "--json"], args.repeat)
            print(f"pwe show -q {q!r:<16}: {wall:.3f} s median (runs {', '.join(f'{w:.2f}' for w in walls)}), "
                  f"peak {rss / 1024:.0f} MB, {len(json.loads(out)):,} members")
        wall, rss, walls, out = median_once(["trace", str(run_dir)], args.repeat)
        print(f"pwe trace (tsv)             : {wall:.3f} s median, peak {rss / 1024:.0f} MB, "
              f"{len(out.splitlines()) - 1:,} attempts")
        wall, rss, walls, out = median_once(["show", str(run_dir), "--limit", "20"], args.repeat)
        print(f"pwe show --limit 20 (no -q) : {wall:.3f} s median, peak {rss / 1024:.0f} MB")
        if os.environ.get("PWE_BENCH_KEEP"):
            shutil.copy(base / "report.html", os.environ["PWE_BENCH_KEEP"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
