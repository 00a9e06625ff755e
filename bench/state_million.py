"""Benchmark: reading a million members' state back without a full replay (issue 12's `pwe
show`, issue 13's resume and memory), on a journal made for it (no member runs).

    flock /tmp/pwe-bench.lock python bench/state_million.py [--members 1000000] [--where disk|tmpfs]

Makes a real run directory (``pwe.runstate.runs.create``) for one node of N members of ``true``,
then writes the journal a finished run of it has (the engine's own records, encoded by
``pwe.runstate.journal.encode``: a pilot, then each member's assign, start and end), and times in
this process: a full replay; the checkpoint's write (``pwe.runstate.checkpoint.write``) and its
load (``checkpoint.load``, with no tail); the engine state's memory per member (RSS of a
fresh process that builds it, at N and at N/10: the difference over 0.9 N members); and as
fresh processes (interpreter start-up and imports included): ``pwe show RUN --limit 20``
(bar: under 1 s at 100,000) and ``pwe status RUN`` with ``state.json`` older than the
journal (as after kill -9: it then reads the state from the checkpoint).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, clock, median_of, parser, place, pwe_env

ENV = pwe_env()
PWE = [sys.executable, "-m", "pwe"]
sys.path.insert(0, str(ROOT))

from pwe.runstate import checkpoint, runs  # noqa: E402
from pwe.runstate.journal import encode, replay  # noqa: E402
from pwe.runstate.state import RunState  # noqa: E402

RSS_OF_STATE = """
import sys
from pwe.runstate import runs
from pwe.runstate.state import RunState
from pathlib import Path
info, plan = runs.read(Path(sys.argv[1]))
st = RunState(plan)
with open('/proc/self/status') as fh:
    print([int(l.split()[1]) for l in fh if l.startswith('VmRSS:')][0])
"""


def make_run(base: Path, n: int, name: str) -> Path:
    wf = base / f"{name}.yaml"
    wf.write_text(f"name: {name}\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {n}]}}}}\n    run: 'true'\n")
    run_dir, _, _, _ = runs.create(wf, cores=2, run_dir=base / name)
    return run_dir


def write_journal(run_dir: Path, n: int) -> None:
    t = time.time()
    with open(run_dir / "journal.jsonl", "wb") as fh:
        fh.write(encode({"e": "run", "t": t, "pid": 1}))
        fh.write(encode({"e": "pilot", "p": "p1", "pid": 2, "host": "vm", "lane": "local", "slots": 2, "t": t}))
        for lo in range(0, n, 256):
            hi = min(n, lo + 256)
            fh.write(b"".join(encode({"e": "assign", "n": "m", "m": i, "a": 1, "p": "p1"}) for i in range(lo, hi)))
            fh.write(b"".join(encode({"e": "start", "n": "m", "m": i, "a": 1, "p": "p1", "pid": 1000 + i})
                              for i in range(lo, hi)))
            fh.write(b"".join(encode({"e": "end", "n": "m", "m": i, "a": 1, "p": "p1", "rc": 0, "dt": 0.001,
                                      "out": {}}) for i in range(lo, hi)))
        fh.write(encode({"e": "finish", "ok": True, "t": t}))


def rss_kb(run_dir: Path) -> int:
    out = subprocess.run([sys.executable, "-c", RSS_OF_STATE, str(run_dir)], env=ENV, check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip())


def main() -> None:
    ap = parser(__doc__, repeat=3, members=1_000_000, where="disk")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pwe-state-", dir=place(args.where)))
    n = args.members
    try:
        run_dir = make_run(base, n, "big")
        write_journal(run_dir, n)
        print(f"{n:,} members: journal {(run_dir / 'journal.jsonl').stat().st_size / 1e6:.0f} MB "
              f"({3 * n + 3:,} records)")
        _, plan = runs.read(run_dir)
        t0 = clock()
        full = RunState(plan)
        rep = replay(run_dir / "journal.jsonl", full.apply)
        t_full = clock() - t0
        print(f"full replay: {t_full:.2f} s ({rep.applied:,} records)")
        walls = []
        for _ in range(3):
            t0 = clock()
            size = checkpoint.write(run_dir, full, rep.end, rep.lines)
            walls.append(clock() - t0)
        print(f"checkpoint write: {statistics.median(walls) * 1000:.0f} ms median of 3 ({size / 1e6:.1f} MB)")
        walls = []
        for _ in range(3):
            t0 = clock()
            st, tail, warnings = checkpoint.load(run_dir, plan)
            walls.append(clock() - t0)
        assert not warnings and tail.applied == 0 and st.totals() == full.totals()
        print(f"checkpoint load (no tail): {statistics.median(walls) * 1000:.0f} ms median of {args.repeat}")
        small = make_run(base, n // 10, "small")
        big_kb, small_kb = rss_kb(run_dir), rss_kb(small)
        print(f"engine state RSS: {big_kb / 1024:.1f} MiB at {n:,}, {small_kb / 1024:.1f} MiB at {n // 10:,}: "
              f"{(big_kb - small_kb) * 1024 / (n - n // 10):.1f} bytes a member")
        show = median_of(args.repeat, [*PWE, "show", run_dir, "--limit", "20"], ENV)
        print(f"pwe show --limit 20 (fresh process): {show:.2f} s median of {args.repeat}")
        rundir_state = run_dir / "state.json"
        if rundir_state.exists():
            os.utime(rundir_state, (0, 0))
        status = median_of(args.repeat, [*PWE, "status", run_dir], ENV)
        print(f"pwe status, state.json stale (fresh process, from the checkpoint): {status:.2f} s "
              f"median of {args.repeat}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
