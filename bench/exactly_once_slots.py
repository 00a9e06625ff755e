"""Stress (not part of the suite): exactly once when a pilot of many slots dies (issue 45,
part 6), the issue's own scenario, many times, with both cores busy.

    python bench/exactly_once_slots.py [--slots 8] [--members 2000] [--sleep 0.2]
                                       [--kill-at 500] [--times 20] [--hogs 2]

Each try: `pwe run` of ``--members`` members of ``--sleep`` s on ``--slots`` local slots
(8 and more: the members are started by the pilot's spawners, pilot/spawners.py), each
member appending its start and its end to a ledger outside the run directory; the pilot
killed -9 once ``--kill-at`` members have ended; the run goes on with a new pilot. From the
ledger: every member ended, none twice. ``--hogs`` busy loops spin beside it. Prints one
line a try and the tally ("20 of 20"); exit status 1 if any try had a member end twice or
not at all. A failed try's directory is kept under /tmp/pwe-eo-slots.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from common import ROOT, Hogs

KEEP = Path("/tmp/pwe-eo-slots")


def one(k: int, a: argparse.Namespace) -> tuple[bool, str]:
    d = KEEP / f"try{k}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    ledger = d / "ledger"
    (d / "wf.yaml").write_text(
        f"name: eo\nnodes:\n  a:\n    parameters: {{i: {{range: [0, {a.members}]}}}}\n"
        f"    run: echo \"start $PWE_MEMBER $PWE_ATTEMPT\" >> {ledger}; sleep {a.sleep}; "
        f"echo \"end $PWE_MEMBER $PWE_ATTEMPT\" >> {ledger}\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", "wf.yaml", "--cores", str(a.slots), "--run-dir",
                             "run"], cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    events = d / "run" / "pilots" / "p1" / "events.jsonl"
    killed = False
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        ends = ledger.read_bytes().count(b"end ") if ledger.exists() else 0
        if ends >= a.kill_at and events.exists():
            pid = json.loads(events.read_text().split("\n", 1)[0])["pid"]
            try:
                os.kill(pid, signal.SIGKILL)
                killed = True
            except ProcessLookupError:
                pass
            break
        time.sleep(0.05)
    try:
        err = proc.communicate(timeout=900)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return False, "timed out"
    lines = [w.split() for w in ledger.read_text().splitlines()]
    ends = Counter(w[1] for w in lines if w[0] == "end")
    twice = sorted((m for m, c in ends.items() if c > 1), key=int)
    missing = a.members - len(ends)
    ok = proc.returncode == 0 and not twice and not missing and killed
    said = (f"exit {proc.returncode}, pilot killed: {killed}, ended twice: {twice[:10]}, never: {missing}"
            + ("" if proc.returncode == 0 else f"; {err.strip().splitlines()[-1:]}"))
    if ok:
        shutil.rmtree(d, ignore_errors=True)
    return ok, said


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--members", type=int, default=2000)
    ap.add_argument("--sleep", type=float, default=0.2)
    ap.add_argument("--kill-at", type=int, default=500)
    ap.add_argument("--times", type=int, default=20)
    ap.add_argument("--hogs", type=int, default=2)
    a = ap.parse_args()
    good, t0 = 0, time.time()
    with Hogs(a.hogs):
        for k in range(1, a.times + 1):
            t = time.time()
            ok, said = one(k, a)
            good += ok
            print(f"try {k:>2}: {'ok' if ok else 'FAIL'} in {time.time() - t:.0f} s  {said}", flush=True)
    print(f"{good} of {a.times} with every member ended once ({a.slots} slots, {a.members} members of {a.sleep} s, "
          f"pilot killed at {a.kill_at} ended, {a.hogs} CPU hogs) in {time.time() - t0:.0f} s")
    return 0 if good == a.times else 1


if __name__ == "__main__":
    sys.exit(main())
