"""Benchmark: `pwe status` on a 100,000-member run (bar: under 0.5 s).

    python bench/status_100k.py [--members 100000] [--where tmpfs|disk] [--repeat 7]

Runs a real 100,000-member workflow of `true` to completion first (that takes a minute
or more; its own rate is printed too), then times fresh `python -m pwe status RUN`
processes (interpreter start-up included): median of --repeat. Also timed, for
information: `pwe status` when the snapshot is stale (the engine was killed before
writing it, so status replays the journal) and `pwe show RUN --limit 20`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, pwe_env
ENV = pwe_env()


def timed(args: list[str], repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pwe", *args], env=ENV, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument("--where", choices=["tmpfs", "disk"], default="tmpfs")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    parent = Path("/dev/shm") if args.where == "tmpfs" else ROOT / "bench" / "out"
    parent.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="pwe-status-", dir=parent))
    try:
        wf = base / "wf.yaml"
        wf.write_text(f"name: big\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {args.members}]}}}}\n"
                      "    run: 'true'\n")
        run_dir = base / "run"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                       env=ENV, check=True, capture_output=True)
        wall = time.perf_counter() - t0
        print(f"run: {args.members} members in {wall:.1f} s ({args.members / wall:.0f}/s) on {args.where}")
        print(f"journal: {(run_dir / 'journal.jsonl').stat().st_size / 1e6:.1f} MB")
        print(f"pwe status (snapshot)      : {timed(['status', str(run_dir)], args.repeat):.3f} s median")
        os.utime(run_dir / "state.json", (0, 0))  # as if the engine died before its last snapshot
        print(f"pwe status (stale, replay) : {timed(['status', str(run_dir)], 3):.3f} s median")
        print(f"pwe show --limit 20        : {timed(['show', str(run_dir), '--limit', '20'], 3):.3f} s median")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
