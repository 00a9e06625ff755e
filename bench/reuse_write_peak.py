"""What writing a run's reuse record (`reusable.keys`, `reusable.json`) costs the engine at
a run's end, in memory and time, on a finished run of any size.

    python bench/reuse_write_peak.py RUN [--repeat 3]

The run's plan and state are read back (as `pwe status` reads them), then
`pwe.runstate.reusable.write` is called as the engine calls it when the run ends, into a
scratch directory (the run itself is not touched), twice a round: timed (its seconds),
then under `tracemalloc` (its peak of Python allocations above what was held before the
call: the member keys, any copies of them); and the keys' bytes it wrote. (bench/million.py and
bench/ten_million.py measure the engine's whole RSS; this is the part the end adds.)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a finished run directory")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from pwe.observe.results import load_state
    from pwe.runstate import reusable

    info, state = load_state(args.run)
    members = sum(pn.size for pn in state.plan.nodes.values())
    scratch = Path(tempfile.mkdtemp(prefix="pwe-reuse-peak-"))
    try:
        shutil.copy2(args.run / "secret", scratch / "secret")  # (the record is signed with the run's secret)
        for k in range(args.repeat):
            t0 = time.perf_counter()  # (timed untraced: tracemalloc slows it ~15x)
            reusable.write(scratch, state.plan, state, info["run_id"], info.get("workspace"))
            dt = time.perf_counter() - t0
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            lent = reusable.write(scratch, state.plan, state, info["run_id"], info.get("workspace"))
            peak = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()
            size = (scratch / reusable.KEYS).stat().st_size
            print(f"round {k + 1}: {members:,} members, {lent:,} lent, keys {size / 1e6:.1f} MB; "
                  f"peak +{peak / 2**20:.1f} MiB ({peak / max(members, 1):.1f} bytes a member), {dt:.2f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
