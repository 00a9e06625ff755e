"""Benchmark: what exactly-once under a pilot kill costs, and how long recovery takes.

    python bench/exactly_once.py [--members 5000] [--repeat 3] [--big 100000]

1. **The cost of the durable member end** (pilot/guardian.py): members per second of a
   whole `pwe run` of N x `true` on 2 cores, with the pilot's guardian (a member's exit
   put in the shared table before it is collected, one `waitid` more per member) and
   without it (`PWE_NO_GUARDIAN=1`: as before issue 22), the two alternated in one run of
   this script so that both meet the same machine.
2. **Recovery after a pilot kill at 10^5 members** (`--big`): a run of `--big` x `true`
   on 2 cores; once a fifth of the members have ended, kill -9 of the pilot. Timed from
   the kill: the engine has taken the pilot as gone (its `pilot_gone` record), and the next
   pilot's first member started. Then kill -9 of the engine and the new pilot together,
   and `pwe resume`: timed from the command to its first member started (the journal
   replayed, the orphans seen to).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import journal_records, parser, pwe_env, timed_run


def workflow(d: Path, n: int) -> Path:
    wf = d / f"wf{n}.yaml"
    wf.write_text(f"name: once\nnodes:\n  a:\n    parameters: {{i: {{range: [0, {n}]}}}}\n    run: 'true'\n")
    return wf


def dispatch(d: Path, n: int, repeat: int, env: dict) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {"with guardian": [], "without (PWE_NO_GUARDIAN=1)": []}
    wf = workflow(d, n)
    for k in range(repeat):
        for label, extra in (("with guardian", {}), ("without (PWE_NO_GUARDIAN=1)", {"PWE_NO_GUARDIAN": "1"})):
            wall = timed_run([wf, "--cores", "2", "--run-dir", d / f"d-{k}-{len(extra)}"], {**env, **extra}, d)
            rates[label].append(n / wall)
    return rates


def _records(run_dir: Path) -> list[dict]:
    try:
        return journal_records(run_dir, whole=False)
    except OSError:
        return []


def _wait(cond, timeout: float = 600, step: float = 0.01):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(step)
    raise SystemExit("timed out")


def _count(path: Path, needle: bytes) -> int:
    try:
        return path.read_bytes().count(needle)
    except OSError:
        return 0


def _up_pid(events: Path) -> int | None:
    try:
        first = events.read_text().splitlines()[0]
        return json.loads(first)["pid"]
    except (OSError, IndexError, ValueError, KeyError):
        return None


def recovery(d: Path, n: int, env: dict) -> dict[str, float]:
    wf = workflow(d, n)
    run_dir = d / "big"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            env=env, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out: dict[str, float] = {}
    try:
        p1 = run_dir / "pilots" / "p1" / "events.jsonl"
        _wait(lambda: _count(p1, b'"k":"end"') >= n // 5)
        os.kill(_up_pid(p1), signal.SIGKILL)
        killed = time.time()
        p2 = run_dir / "pilots" / "p2" / "events.jsonl"
        _wait(lambda: _count(p2, b'"k":"start"') >= 1)
        recs = _records(run_dir)
        gone = next(r["t"] for r in recs if r["e"] == "pilot_gone")
        first = min(json.loads(line)["t"] for line in p2.read_text().splitlines() if '"k":"start"' in line)
        out["pilot kill -> pilot_gone"] = gone - killed
        out["pilot kill -> next pilot's first start"] = first - killed
        # the engine and its new pilot killed together, then pwe resume
        _wait(lambda: _count(p2, b'"k":"end"') >= n // 10)
        pilot2 = _up_pid(p2)
        proc.kill()
        os.kill(pilot2, signal.SIGKILL)
        proc.wait()
        time.sleep(0.5)
        t0 = time.time()
        resumed = subprocess.Popen([sys.executable, "-m", "pwe", "resume", str(run_dir)], env=env, cwd=d,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        p3 = run_dir / "pilots" / "p3" / "events.jsonl"
        _wait(lambda: _count(p3, b'"k":"start"') >= 1)
        first3 = min(json.loads(line)["t"] for line in p3.read_text().splitlines() if '"k":"start"' in line)
        out["pwe resume -> first start"] = first3 - t0
        _, err = resumed.communicate(timeout=900)
        if resumed.returncode != 0:
            raise SystemExit(f"pwe resume failed: {err[-2000:]}")
        ends = {}
        for r in _records(run_dir):
            if r["e"] == "end" and r.get("rc") == 0:
                ends[r["m"]] = ends.get(r["m"], 0) + 1
        if len(ends) != n or max(ends.values()) != 1:
            raise SystemExit(f"ends: {len(ends)} members, most ends of one member {max(ends.values())}")
    finally:
        proc.kill()
    return out


def main() -> None:
    ap = parser(__doc__, repeat=3, members=5000)
    ap.add_argument("--big", type=int, default=100_000)
    ap.add_argument("--skip-recovery", action="store_true")
    args = ap.parse_args()
    env = pwe_env()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        d = Path(tmp)
        rates = dispatch(d, args.members, args.repeat, env)
        print(f"{args.members} x true, 2 cores, whole pwe run, alternated {args.repeat} times:")
        for label, rs in rates.items():
            print(f"  {label:<30} median {statistics.median(rs):7.0f}/s   runs: {', '.join(f'{r:.0f}' for r in rs)}")
        if not args.skip_recovery:
            for what, s in recovery(d, args.big, env).items():
                print(f"{args.big:,} members: {what}: {s:.2f} s")


if __name__ == "__main__":
    main()
