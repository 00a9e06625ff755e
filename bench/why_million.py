"""Benchmark: `pwe failures` and `pwe explain` on a run of a million members (issue 47).

    flock /tmp/pwe-bench.lock python bench/why_million.py [--members 1000000] [--repeat 3]
        [--where disk|tmpfs] [--keep DIR] [--run DIR]

Makes a real run (not a synthetic journal) on this machine, `pwe run --cores 2`: one node
of `mesh` (4 values) x `seed` (members / 4); the members of mesh=ultra whose seed is a
multiple of 10 fail with a line on stderr that names a path and a number (members / 40
failures: 25,000 at a million). ``--run DIR``: time an existing run of it instead (the
run takes most of the time). Then times fresh processes (interpreter start included):

  pwe failures RUN --json                  (every view: the host view replays the journal)
  pwe failures RUN --json --no-hosts       (the state, and the signatures of 2,000 failed)
  pwe failures RUN --json --no-hosts --signatures 0   (by value and reason: the state alone)
  pwe explain RUN sim:N --json             (a member that failed, one that is done)

Median wall of --repeat each, and the peak RSS (ru_maxrss of the process, wait4). Prints
one line per figure and a JSON summary last; checks the answer: mesh=ultra first.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from common import clock, measure, parser, place, pwe_env

ENV = pwe_env()


def timed(args: list[str], repeat: int) -> tuple[float, int, str]:
    runs = [measure([sys.executable, "-m", "pwe", *args], ENV, ok=(0,), out=True) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2]


def main() -> None:
    ap = parser(__doc__, repeat=3, members=1_000_000, where="disk")
    ap.add_argument("--run", type=Path, default=None, help="an existing run of this benchmark's workflow")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pwe-why-", dir=place(args.where)))
    figures: dict[str, object] = {"members": args.members}
    try:
        run_dir = args.run
        seeds = args.members // 4
        if run_dir is None:
            wf = base / "wf.yaml"
            wf.write_text(
                "name: whybench\nnodes:\n  sim:\n"
                f"    parameters: {{mesh: [coarse, medium, fine, ultra], seed: {{range: [0, {seeds}]}}}}\n"
                "    run: '[ {{ mesh }} != ultra ] || [ $(( {{ seed }} % 10 )) -ne 0 ] || "
                "{ echo \"Error: /scratch/run{{ seed }}/m.h5 diverged at step {{ seed }}\" >&2; exit 3; }'\n")
            run_dir = base / "run"
            t0 = clock()
            measure([sys.executable, "-m", "pwe", "run", wf, "--cores", "2", "--run-dir", run_dir], ENV, ok=(1,))
            figures["run_s"] = round(clock() - t0, 1)
            print(f"the run: {figures['run_s']} s", flush=True)
        cases = {
            "failures": ["failures", str(run_dir), "--json"],
            "failures_no_hosts": ["failures", str(run_dir), "--json", "--no-hosts"],
            "failures_state_only": ["failures", str(run_dir), "--json", "--no-hosts", "--signatures", "0"],
            "explain_failed": ["explain", str(run_dir), f"sim:{3 * seeds}", "--json"],
            "explain_done": ["explain", str(run_dir), f"sim:{seeds // 2}", "--json"],
        }
        for name, argv in cases.items():
            wall, rss, out = timed(argv, args.repeat)
            doc = json.loads(out)
            if name.startswith("failures"):
                first = doc["by_value"][0]
                assert (first["parameter"], first["value"]) == ("mesh", "ultra"), first
                assert doc["failed"] == len(range(0, seeds, 10)), doc["failed"]
            else:
                assert doc["state"] == ("failed" if name == "explain_failed" else "done"), doc["state"]
            figures[name] = {"wall_s": round(wall, 3), "peak_rss_mb": round(rss / 1024, 1)}
            print(f"{' '.join(argv[:1] + argv[2:])}: {wall:.3f} s, peak {rss / 1024:.1f} MB", flush=True)
        print(json.dumps(figures))
    finally:
        if args.keep:
            print(f"(kept {base})", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
