"""Benchmark: `pwe status` on a 100,000-member run (bar: under 0.5 s).

    python bench/status_100k.py [--members 100000] [--where tmpfs|disk] [--repeat 7]

Runs a real 100,000-member workflow of `true` to completion first (that takes a minute
or more; its own rate is printed too), then times fresh `python -m pwe status RUN`
processes (interpreter start-up included): median of --repeat. Also timed, for
information: `pwe status` when the snapshot is stale (the engine was killed before
writing it, so status replays the journal) and `pwe show RUN --limit 20`.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from common import median_of, parser, place, pwe_env, timed_run

ENV = pwe_env()
PWE = [sys.executable, "-m", "pwe"]


def main() -> None:
    ap = parser(__doc__, repeat=7, members=100_000, where="tmpfs")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pwe-status-", dir=place(args.where)))
    try:
        wf = base / "wf.yaml"
        wf.write_text(f"name: big\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {args.members}]}}}}\n"
                      "    run: 'true'\n")
        run_dir = base / "run"
        wall = timed_run([wf, "--cores", "2", "--run-dir", run_dir], ENV)
        print(f"run: {args.members} members in {wall:.1f} s ({args.members / wall:.0f}/s) on {args.where}")
        print(f"journal: {(run_dir / 'journal.jsonl').stat().st_size / 1e6:.1f} MB")
        print(f"pwe status (snapshot)      : {median_of(args.repeat, [*PWE, 'status', run_dir], ENV):.3f} s median")
        os.utime(run_dir / "state.json", (0, 0))  # as if the engine died before its last snapshot
        print(f"pwe status (stale, replay) : {median_of(3, [*PWE, 'status', run_dir], ENV):.3f} s median")
        show = median_of(3, [*PWE, "show", run_dir, "--limit", "20"], ENV)
        print(f"pwe show --limit 20        : {show:.3f} s median")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
