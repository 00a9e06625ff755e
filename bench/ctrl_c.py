"""Benchmark: how long `pwe run` takes to stop after Ctrl-C, with the machine idle or busy.

    python bench/ctrl_c.py [--times 10] [--hogs 0]

Each time: `pwe run` of 4 members that sleep (2 cores); once two of them run, SIGINT to
the `pwe` process, as a terminal's Ctrl-C sends it. Timed from the signal to the process's
exit (status 130), and to the last of its members gone. ``--hogs N``: N busy loops beside
it (a machine CI shares). The CLI leaves within pwe.cli.base.CTRL_C_BOUND s whatever it
waits on (a second Ctrl-C at once); this measures where inside that bound it stops.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import clock, pwe_env


def _spin(stop) -> None:
    n, parent = 0, os.getppid()
    while not stop.is_set() and os.getppid() == parent:
        for _ in range(100_000):
            n += 1


def _sleepers(marker: str) -> int:
    return len(subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split())


def once(d: Path, env: dict) -> tuple[float, float]:
    marker = f"30.{secrets.randbelow(10**9):09d}7"
    wf = d / "wf.yaml"
    wf.write_text(f"name: ctrlc\nnodes:\n  s:\n    parameters: {{k: {{range: [0, 4]}}}}\n    run: sleep {marker}\n")
    run_dir = d / f"run-{marker}"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            env=env, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while _sleepers(marker) < 2:
        if proc.poll() is not None:
            raise SystemExit(f"pwe run ended ({proc.returncode}) before its members started")
        time.sleep(0.02)
    t0 = clock()
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=120)
    exited = clock() - t0
    if rc != 130:
        raise SystemExit(f"pwe run exited {rc} after Ctrl-C, not 130")
    while _sleepers(marker):
        time.sleep(0.02)
    return exited, clock() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--times", type=int, default=10)
    ap.add_argument("--hogs", type=int, default=0)
    a = ap.parse_args()
    env = pwe_env()
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(a.hogs)]
    for h in hogs:
        h.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            got = [once(Path(tmp), env) for _ in range(a.times)]
    finally:
        stop.set()
    for k, label in ((0, "Ctrl-C to exit"), (1, "Ctrl-C to the last member gone")):
        xs = sorted(g[k] for g in got)
        print(f"{label:32} median {statistics.median(xs):.2f} s, max {xs[-1]:.2f} s  ({a.times} times, "
              f"{a.hogs} CPU hogs)")


if __name__ == "__main__":
    main()
