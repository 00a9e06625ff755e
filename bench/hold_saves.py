"""Benchmark: the core-hours a hold saves (issue 48): a sweep where one value of one
parameter always fails, run with and without ``hold: {after: N}``.

    flock /tmp/pwe-bench.lock python bench/hold_saves.py [--seeds 30] [--seconds 1] [--after 3] [--cores 2]

One node, ``mesh`` in (coarse, medium, fine) x ``seed`` (--seeds values); every member
sleeps --seconds, and the ``fine`` ones then fail (as a member killed for memory at its
end would). Each arm is a real `pwe run --cores C`; its figures from its own trace: the
core-seconds its attempts held (sum of their durations x cores per member), the fine
members that started, and the wall time. The hold's saving is the difference.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from common import clock, measure, parser, place, pwe_env

ENV = pwe_env()


def arm(base: Path, name: str, hold: str, seeds: int, seconds: float, cores: int) -> dict[str, float]:
    wf = base / f"{name}.yaml"
    wf.write_text(f"name: {name}\n{hold}nodes:\n  sim:\n"
                  f"    parameters: {{mesh: [coarse, medium, fine], seed: {{range: [0, {seeds}]}}}}\n"
                  f"    run: sleep {seconds}; [ {{{{ mesh }}}} != fine ]\n")
    run = base / f"{name}-run"
    t0 = clock()
    measure([sys.executable, "-m", "pwe", "run", wf, "--cores", str(cores), "--run-dir", run], ENV, ok=(1,))
    wall = clock() - t0
    _, _, out = measure([sys.executable, "-m", "pwe", "trace", run, "--format", "json"], ENV, out=True)
    recs = [json.loads(line) for line in out.splitlines()]
    held = sum(r["duration"] or 0 for r in recs)
    fine = sum(1 for r in recs if r["parameters"].get("mesh") == "fine")
    return {"core_seconds": round(held, 1), "fine_started": fine, "attempts": len(recs), "wall_s": round(wall, 1)}


def main() -> None:
    ap = parser(__doc__, repeat=None, cores=2)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--after", type=int, default=3)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pwe-hold-", dir=place("disk")))
    try:
        without = arm(base, "nohold", "", args.seeds, args.seconds, args.cores)
        held = arm(base, "hold", f"hold: {{after: {args.after}}}\n", args.seeds, args.seconds, args.cores)
        saved = without["core_seconds"] - held["core_seconds"]
        figures = {"members": 3 * args.seeds, "fine": args.seeds, "seconds": args.seconds, "after": args.after,
                   "cores": args.cores, "without_hold": without, "with_hold": held,
                   "core_seconds_saved": round(saved, 1),
                   "saved_share": round(saved / without["core_seconds"], 3) if without["core_seconds"] else None}
        print(f"without a hold: {without}")
        print(f"with hold after {args.after}: {held}")
        print(f"saved: {saved:.1f} core-seconds of {without['core_seconds']:.1f} ({figures['saved_share']:.0%})")
        print(json.dumps(figures))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
