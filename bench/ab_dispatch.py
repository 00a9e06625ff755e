"""A/B: the same 5,000-member run through two source trees of pwe, alternating.

    git worktree add /tmp/old HEAD~1
    python bench/ab_dispatch.py /tmp/old . [--runs 8] [--members 5000] [--where tmpfs|disk]

The host this VM runs on changes speed by a quarter within an hour, so two figures taken
minutes apart cannot tell a code change from the host. Alternating single runs (old, new,
new, old, ...) on tmpfs (or, --where disk, under bench/out on the disk) can; the medians
are printed.
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

from common import PACKAGES


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--members", type=int, default=5000)
    ap.add_argument("--where", choices=["tmpfs", "disk"], default="tmpfs")
    args = ap.parse_args()
    roots = {"old": Path(args.old).resolve(), "new": Path(args.new).resolve()}
    for root in roots.values():  # as pip would have: bytecode compiled
        subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(root / d) for d in PACKAGES)], check=True)
    parent = Path("/dev/shm") if args.where == "tmpfs" else Path(__file__).resolve().parent / "out"
    parent.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="pwe-ab-", dir=parent))
    try:
        wf = base / "ab.yaml"
        wf.write_text(f'name: ab\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {args.members}]}}}}\n'
                      '    run: "true"\n')
        walls: dict[str, list[float]] = {"old": [], "new": []}
        for k in range(args.runs):
            for tag in ("old", "new") if k % 2 == 0 else ("new", "old"):
                run_dir = base / f"run-{tag}-{k}"
                env = dict(os.environ, PYTHONPATH=str(roots[tag]))
                os.sync()
                t0 = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir",
                                       str(run_dir)], env=env, capture_output=True, text=True, cwd=base)
                walls[tag].append(time.perf_counter() - t0)
                if proc.returncode != 0:
                    raise SystemExit(f"{tag}: pwe run failed ({proc.returncode}): {proc.stderr}")
                shutil.rmtree(run_dir)
        for tag, v in walls.items():
            print(f"{tag}: median {statistics.median(v):.3f} s ({args.members / statistics.median(v):.0f}/s)  "
                  f"runs: {', '.join(f'{x:.2f}' for x in v)}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
