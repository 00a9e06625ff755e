"""Benchmark: start-up (issue 13). Fresh processes, medians.

    python bench/startup.py [--repeat 9] [--w2-repeat 5]

Prints:
  python -c pass          the interpreter alone (the floor under every command)
  pwe --help              bar: under 0.1 s
  pwe status RUN          a finished 2-member run; bar: under 0.1 s
  pilot import            python -c "import pilot.agent" (what a pilot pays before its loop)
  W2                      400 x `sleep 0.05` on 8 slots as a whole `pwe run` command,
                          alternated with `xargs -P8` of the same 400 sleeps in the same
                          run; efficiency = ideal (2.5 s) / wall; bar: pwe >= 0.92

Where pwe's time goes before the first member starts is printed too, from the run's
own records (pilot's `up` and first `start` against the command's start). To measure
these rows for two versions of pwe alternately (what `--against OLD_TREE` did), use the
A/B runner: `python bench/ab.py --a OLD_TREE --b . --measure pass,help,status,pilot,w2`.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import interleave, parser, pilot_events, pwe_env, timed


def w2_pwe(base: Path, env: dict[str, str], k: int | str) -> tuple[float, float, float, float]:
    """(wall, until the pilot's up, until the first member's start, from the last member's
    end to the command's exit) of one whole `pwe run`."""
    wf = base / "w2.yaml"
    run_dir = base / f"w2-{k}"
    t_wall0 = time.time()
    wall = timed([sys.executable, "-m", "pwe", "run", "--fresh", str(wf), "--cores", "8", "--run-dir", str(run_dir)],
                 env, base)  # (--fresh: each a first run, not a rerun reusing the last one's members)
    ev = pilot_events(run_dir)
    up = min(e["t"] for e in ev if e["k"] == "up") - t_wall0
    first = min(e["t"] for e in ev if e["k"] == "start") - t_wall0
    tail = wall - (max(e["t"] for e in ev if e["k"] == "end") - t_wall0)
    ends = sum(1 for e in ev if e["k"] == "end" and e["rc"] == 0)
    assert ends == 400, ends
    return wall, up, first, tail


def main() -> None:
    ap = parser(__doc__, repeat=9)
    ap.add_argument("--w2-repeat", type=int, default=5)
    args = ap.parse_args()
    env = pwe_env()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="pwe-startup-", dir="/dev/shm") as tmp:
        base = Path(tmp)
        (base / "two.yaml").write_text("name: two\nnodes:\n  m:\n    parameters: {i: {range: [0, 2]}}\n"
                                       "    run: 'true'\n")
        timed([py, "-m", "pwe", "run", base / "two.yaml", "--cores", "2", "--run-dir", base / "two"], env, base)
        rows = [
            ("python -c pass", [py, "-c", "pass"], None),
            ("pwe --help", [py, "-m", "pwe", "--help"], 0.1),
            ("pwe status RUN", [py, "-m", "pwe", "status", base / "two"], 0.1),
            ("pilot import", [py, "-c", "import pilot.agent"], None),
        ]
        for name, argv, bar in rows:
            runs = [timed(argv, env, base) for _ in range(args.repeat)]
            med = statistics.median(runs)
            verdict = "" if bar is None else f"  bar < {bar} s: {'met' if med < bar else 'NOT met'}"
            print(f"{name:20} {med:.3f} s (median of {len(runs)}; min {min(runs):.3f}){verdict}", flush=True)

        (base / "w2.yaml").write_text("name: w2\nnodes:\n  m:\n    parameters: {i: {range: [0, 400]}}\n"
                                      "    run: sleep 0.05\n")
        sleeps = b"".join(b"0.05\n" for _ in range(400))
        ideal = 400 * 0.05 / 8
        results: list[tuple[float, float, float, float]] = []

        def pwe_w2(k: int) -> float:
            results.append(w2_pwe(base, env, k))
            return results[-1][0]

        got = interleave({"pwe": pwe_w2, "xargs": lambda k: timed(["xargs", "-P8", "-n1", "sleep"], env, base,
                                                                   stdin=sleeps)}, args.w2_repeat)
        pw = statistics.median(got["pwe"])
        up, first, tail = (statistics.median(r[i] for r in results) for i in (1, 2, 3))
        print(f"W2 pwe run        {pw:.3f} s  efficiency {ideal / pw:.3f}  bar >= 0.92: "
              f"{'met' if ideal / pw >= 0.92 else 'NOT met'}  runs: {', '.join(f'{w:.2f}' for w in got['pwe'])}")
        print(f"   (command start -> pilot up {up:.3f} s, -> first member {first:.3f} s; "
              f"last member's end -> exit {tail:.3f} s)")
        xw = statistics.median(got["xargs"])
        print(f"W2 xargs -P8      {xw:.3f} s  efficiency {ideal / xw:.3f}  runs: "
              f"{', '.join(f'{w:.2f}' for w in got['xargs'])}")


if __name__ == "__main__":
    main()
