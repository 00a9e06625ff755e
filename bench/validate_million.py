"""Benchmark: `pwe validate` of two matched 1,000,000-member nodes plus one more node.

The bar (issue 2): 2,000,001 members reported in at most 3 s and 400 MB peak memory.
Each case runs the real console entry point in a fresh process; wall time and the
child's peak RSS (wait4) are the median / max of --repeat runs.

    python bench/validate_million.py [--repeat 5]

Cases:
  range    both nodes take i from {range: [0, 1000000]}
  product  both nodes take a 1000-value list x a 1000-value list (explicit values)
  csv      both nodes read i from a 1,000,000-row CSV file
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import measure, parser, pwe_env

N = 1_000_000


def workflows(d: Path) -> dict[str, Path]:
    third = "  summary:\n    after: [b]\n    run: echo done\n"
    cases = {}
    rng = "{range: [0, %d]}" % N
    cases["range"] = (
        f"name: million\nnodes:\n  a:\n    parameters: {{i: {rng}}}\n    run: echo a {{{{ i }}}}\n"
        f"  b:\n    after: [a]\n    parameters: {{i: {rng}}}\n    run: echo b {{{{ i }}}}\n" + third
    )
    xs = "[" + ", ".join(str(v) for v in range(1000)) + "]"
    ys = "[" + ", ".join(f"s{v}" for v in range(1000)) + "]"
    cases["product"] = (
        f"name: million\nnodes:\n  a:\n    parameters: {{x: {xs}, y: {ys}}}\n    run: echo {{{{ x }}}} {{{{ y }}}}\n"
        f"  b:\n    after: [a]\n    parameters: {{x: {xs}, y: {ys}}}\n    run: echo {{{{ x }}}}\n" + third
    )
    (d / "values.csv").write_text("i\n" + "".join(f"{v}\n" for v in range(N)))
    cases["csv"] = (
        "name: million\nnodes:\n  a:\n    parameters: {i: {file: values.csv}}\n    run: echo a {{ i }}\n"
        "  b:\n    after: [a]\n    parameters: {i: {file: values.csv}}\n    run: echo b {{ i }}\n" + third
    )
    out = {}
    for name, text in cases.items():
        p = d / f"{name}.yaml"
        p.write_text(text)
        out[name] = p
    return out


def run_once(path: Path) -> tuple[float, float, str]:
    """(wall s, peak RSS MB, its first line of output) of one `pwe validate FILE`."""
    wall, peak_kb, out = measure([sys.executable, "-m", "pwe", "validate", path], out=True)
    return wall, peak_kb / 1024, out.splitlines()[0]


def main() -> None:
    ap = parser(__doc__, repeat=5)
    ap.add_argument("--case", action="append")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:  # child mode: one case, one measurement, printed as "wall peak_mb line"
        wall, peak, line = run_once(Path(args.one))
        print(f"{wall:.4f} {peak:.1f} {line}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        files = workflows(Path(tmp))
        env = pwe_env()
        print(f"{'case':8} {'wall s (median)':>16} {'peak MB (max)':>14}  report")
        for name, path in files.items():
            if args.case and name not in args.case:
                continue
            walls, peaks, line = [], [], ""
            for _ in range(args.repeat):
                out = subprocess.run([sys.executable, __file__, "--one", str(path)], capture_output=True,
                                     text=True, check=True, env=env).stdout.split(" ", 2)
                walls.append(float(out[0]))
                peaks.append(float(out[1]))
                line = out[2].strip()
            print(f"{name:8} {statistics.median(walls):16.3f} {max(peaks):14.1f}  {line}")


if __name__ == "__main__":
    main()
