"""Benchmark: dispatch against the bare spawn loop, by slots and spawners (issue 13).

    python bench/dispatch_cores.py [--members 5000] [--repeat 3] [--case 2:auto --case 16:auto --case 16:0 ...]

Each case is SLOTS:SPAWNERS (auto: the pilot's own choice, pilot/spawners.py; 0: the
pilot starts every member itself). For each repeat, every case's whole `pwe run` of
MEMBERS x `true` on tmpfs is alternated with the bare loop on the same number of slots
(bench/dispatch_local.py's: mkdir + posix_spawn of /bin/true with its stdout/stderr
files, reaped, nothing else), so each ratio compares figures taken side by side.
Bars: on 16 slots pwe >= 0.9 x the bare loop; on 2 slots >= 0.8 x.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from pathlib import Path

from common import parser, pwe_env
from dispatch_local import bare_loop, one

BARS = {2: 0.8, 16: 0.9}


def main() -> None:
    ap = parser(__doc__, repeat=3, members=5000)
    ap.add_argument("--case", action="append", default=None, help="SLOTS:SPAWNERS (auto, or a number)")
    args = ap.parse_args()
    cases = [tuple(c.split(":")) for c in (args.case or ["2:auto", "16:auto", "16:0"])]
    base = Path(tempfile.mkdtemp(prefix="pwe-cores-", dir="/dev/shm"))
    n = args.members
    got: dict[tuple[str, str], dict[str, list[float]]] = {c: {"pwe": [], "bare": [], "span": []} for c in cases}
    try:
        for k in range(args.repeat):
            for case in cases:
                slots, spawners = case
                env = pwe_env() if spawners == "auto" else pwe_env(PWE_SPAWNERS=spawners)
                if spawners == "auto":
                    env.pop("PWE_SPAWNERS", None)
                runs = ("pwe", "bare") if k % 2 == 0 else ("bare", "pwe")
                for who in runs:
                    if who == "bare":
                        got[case]["bare"].append(bare_loop(base, n, int(slots)))
                    else:
                        wall, span = one(base, n, int(slots), "true", env)
                        got[case]["pwe"].append(n / wall)
                        got[case]["span"].append(n / span)
        print(f"{'slots':>5} {'spawners':>8} {'pwe /s (whole cmd)':>19} {'first->last /s':>15} {'bare loop /s':>13} "
              f"{'ratio':>6}  bar  (ratio: median over the pairs of pwe / the bare loop beside it)")
        for (slots, spawners), v in got.items():
            p, b, s = (statistics.median(v[x]) for x in ("pwe", "bare", "span"))
            # each pwe run against the bare loop run beside it: robust to the host's drift
            ratio = statistics.median(x / y for x, y in zip(v["pwe"], v["bare"]))
            bar = BARS.get(int(slots))
            verdict = "" if bar is None else f">= {bar}: {'met' if ratio >= bar else 'NOT met'}"
            runs = "; ".join(f"{x} {', '.join(f'{r:.0f}' for r in v[x])}" for x in ("pwe", "bare"))
            runs += "; each pair " + ", ".join(f"{x / y:.2f}" for x, y in zip(v["pwe"], v["bare"]))
            print(f"{slots:>5} {spawners:>8} {p:19.0f} {s:15.0f} {b:13.0f} {ratio:6.2f}  {verdict}  ({runs})")
    finally:
        shutil.rmtree(base, ignore_errors=True)
        os.sync()


if __name__ == "__main__":
    main()
