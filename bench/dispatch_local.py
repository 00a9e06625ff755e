"""Benchmark: members per second end to end through `pwe run` on this machine.

    python bench/dispatch_local.py [--members 5000] [--cores 2] [--repeat 3] [--where disk|tmpfs|both]

Each run is a fresh `python -m pwe run` process (start-up, planning, pilot start and the
final summary included); the figure is members / wall seconds of that whole command.
After each run the script checks from the run directory that every member has a
journaled exit status of 0 and that its directory was tidied (the payloads print nothing,
so the pilot removes their empty stdout, stderr and directory: pilot/spawn.py); the bar
counts only runs where all of that was recorded.

Payloads:
  true       `true` (pwe execs it directly: no shell needed)
  bash       `true;` (has shell syntax, so pwe runs it with bash -c)
  sleep      `sleep 0.05` on --cores 8 (--members 400): efficiency = ideal / wall
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import check_ends, clock, parser, pilot_span, place, pwe_env, timed_run


def workflow(d: Path, members: int, payload: str) -> Path:
    p = d / "bench.yaml"
    p.write_text(f"name: bench\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {members}]}}}}\n"
                 f"    run: {json.dumps(payload)}\n")
    return p


def check(run_dir: Path, members: int) -> None:
    check_ends(run_dir, members)
    for i in (0, members // 2, members - 1):
        md = run_dir / "members" / "m" / str(i // 1000) / str(i)
        # (the payloads print nothing: the pilot removed their empty files and directory)
        assert not md.exists(), f"{md} was not tidied after its member ended"


def settle() -> None:
    """Write back what is dirty before a timed run (outside the timed part).

    This VM's root is ext4 *without a journal*. There, every new inode skips the inodes
    deleted in the last 60 s (360 s while their inode-table block is still dirty): the
    kernel's recently_deleted() check, seen in `perf` at a third of all CPU when a run
    followed the removal of an earlier one. So the script removes no run directory until
    every run of a row is over, and syncs before each run.
    """
    os.sync()


def bare_loop(base: Path, members: int, slots: int) -> float:
    """The machine's ceiling at this moment: members/s of a bare loop, no engine, no pilot.

    The same work per member as the pilot's minimum (a directory, stdout and stderr files
    created by the child, posix_spawn of /bin/true, reaping), at most `slots` at a time.
    The host this VM runs on varies by a quarter within an hour, so every row of `true`
    is printed beside this figure measured just before it.
    """
    d = base / f"bare-{time.time_ns()}"
    d.mkdir()
    create = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    actions = [(os.POSIX_SPAWN_OPEN, 1, "stdout", create, 0o644), (os.POSIX_SPAWN_OPEN, 2, "stderr", create, 0o644)]
    here = os.getcwd()
    settle()
    t0 = clock()
    live = 0
    try:
        for i in range(members):
            md = d / str(i)
            os.mkdir(md)
            os.chdir(md)
            os.posix_spawn("/bin/true", ["true"], {}, file_actions=actions)
            live += 1
            if live >= slots:
                os.wait()
                live -= 1
        while live:
            os.wait()
            live -= 1
    finally:
        os.chdir(here)
    return members / (clock() - t0)


def one(base: Path, members: int, cores: int, payload: str, env: dict[str, str]) -> tuple[float, float]:
    run_dir = base / f"run-{time.time_ns()}"
    wf = workflow(base, members, payload)
    settle()
    wall = timed_run([wf, "--cores", cores, "--run-dir", run_dir], env)
    check(run_dir, members)
    return wall, pilot_span(run_dir)


def main() -> None:
    ap = parser(__doc__, repeat=3, members=5000, cores=2, where="both", both=True)
    ap.add_argument("--payload", choices=["true", "bash", "sleep", "all"], default="all")
    args = ap.parse_args()
    env = pwe_env()
    wheres = ["disk", "tmpfs"] if args.where == "both" else [args.where]
    payloads = ["true", "bash", "sleep"] if args.payload == "all" else [args.payload]
    print(f"{'payload':8} {'where':6} {'members':>8} {'cores':>5} {'wall s (median)':>16} {'members/s':>10}  extra")
    bases: list[Path] = []  # removed only at the very end: see settle()
    try:
        for payload in payloads:
            for where in wheres:
                base = Path(tempfile.mkdtemp(prefix="pwe-bench-", dir=place(where)))
                bases.append(base)
                if payload == "sleep":
                    n, cores, cmd = 400, 8, "sleep 0.05"
                else:
                    n, cores, cmd = args.members, args.cores, "true" if payload == "true" else "true;"
                results = [one(base, n, cores, cmd, env) for _ in range(args.repeat)]
                walls = [w for w, _ in results]
                wall = statistics.median(walls)
                inner = statistics.median(i for _, i in results)
                extra = f"first start->last end {inner:.3f} s ({n / inner:.0f}/s)"
                if payload == "true":
                    extra += f", bare loop {bare_loop(base, n, cores):.0f}/s"
                if payload == "sleep":
                    ideal = n * 0.05 / cores
                    extra = (f"efficiency end-to-end {ideal / wall:.2f}, first start->last end {ideal / inner:.2f}"
                             f" (ideal {ideal:.2f} s)")
                print(f"{payload:8} {where:6} {n:8} {cores:5} {wall:16.3f} {n / wall:10.0f}  {extra}"
                      f"  runs: {', '.join(f'{w:.2f}' for w in walls)}", flush=True)
    finally:
        for base in bases:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
