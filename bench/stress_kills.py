"""Stress (not part of the suite): the kill -9 test of exactly-once, many times, with both
cores busy.

    python bench/stress_kills.py [--times 20] [--hogs 2] [--test NODEID] [--keep DIR]

Runs ``tests/engine/test_crash.py::test_pilot_killed_at_twenty_random_moments_no_member_completes_twice``
(2,000 members two at a time, the pilot killed -9 at twenty random moments; from the
members' own ledger, every member completed and none twice) ``--times`` times in a row,
while ``--hogs`` processes spin on the CPU beside it (a busy loop each: the machine CI
shares is busy like this). Each run's directory is kept under ``--keep`` when it fails,
with the journal and the pilots' files, so a double is examined from its evidence; the
passing ones are removed. Prints one line a run and the tally; exit status 1 if any failed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, Hogs

TEST = "tests/engine/test_crash.py::test_pilot_killed_at_twenty_random_moments_no_member_completes_twice"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--times", type=int, default=20)
    ap.add_argument("--hogs", type=int, default=2, help="busy loops beside the test (one a core)")
    ap.add_argument("--test", default=TEST)
    ap.add_argument("--keep", type=Path, default=Path("/tmp/pwe-stress-kills"))
    a = ap.parse_args()
    a.keep.mkdir(parents=True, exist_ok=True)
    failed, t0 = [], time.time()
    with Hogs(a.hogs):
        for k in range(1, a.times + 1):
            base = a.keep / f"run{k}"
            shutil.rmtree(base, ignore_errors=True)
            t = time.time()
            proc = subprocess.run([sys.executable, "-m", "pytest", a.test, "-q", "-p", "no:cacheprovider",
                                   f"--basetemp={base}"], cwd=ROOT, capture_output=True, text=True)
            ok = proc.returncode == 0
            last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
            print(f"run {k:>2}: {'pass' if ok else 'FAIL'} in {time.time() - t:.0f} s  {last}", flush=True)
            if ok:
                shutil.rmtree(base, ignore_errors=True)
            else:
                failed.append(k)
                (base / "pytest.out").write_text(proc.stdout + proc.stderr)
    kept = ", ".join(str(a.keep / f"run{k}") for k in failed)
    print(f"{a.times - len(failed)} passed, {len(failed)} failed in {time.time() - t0:.0f} s "
          f"with {a.hogs} CPU hogs" + (f"; kept: {kept}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
