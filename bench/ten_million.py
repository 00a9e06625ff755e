"""Benchmark: N members (10^7 by default) to their end, each printing one line, in the
background, against issue 34's bars (item 3).

    nohup nice -n 10 flock /tmp/pwe-bench.lock python bench/ten_million.py \\
        --members 10000000 --base bench/out/ten-million > bench/out/ten-million.log 2>&1 &
    tail -f bench/out/ten-million.log               # one progress line a minute
    python bench/ten_million.py --base bench/out/ten-million --report   # figures so far, any time

One node, ``parameters: {i: {range: [0, N]}}``, ``run: echo "member $PWE_MEMBER"`` (``--quiet``:
``true``), ``pwe run --cores 2`` in a session of its own: the engine goes on if this script is
stopped. Everything the script learns is kept under ``--base``, so it is **resumable**: run the
same command again and it follows the run it finds there (``pwe resume`` first if the engine
is gone before the run's end), adding to the samples it has.

Under ``--base``: ``run/`` (the run directory, on disk by default), ``wf.yaml``,
``engine.out`` (the engine's stdout and stderr), ``samples.jsonl`` (one line every
``--sample-every`` seconds: time, members done, the engine's RSS and peak RSS; every
``--walk-every`` seconds also the run directory's bytes and entries) and, at the end,
``figures.json``. Each figure against its bar:

- engine memory flat: the RSS slope over the run, in bytes a member done (a least-squares
  line through the samples from 10 % to 95 % done), and the peak (VmHWM);
- the run directory under 2 GB: bytes by kind of file (journal, checkpoint, the pilots'
  tasks, events, streams, members' own files, the rest), each in bytes a member;
- O(pilots) files: files and directories in the run directory, and the most in one;
- ``pwe status RUN`` (fresh process, median of 3) and ``pwe logs RUN m:i`` for the first,
  middle and last member (fresh processes; each must show that member's line).

Projection to another N (``--project``, default 10^7): sizes and RSS growth scale with members
(fixed parts kept), the wall time with the rate measured. A smaller run leaves files under
``PWE_SEAL_ABOVE`` (8 MiB) plain that 10^7 would seal: ``--seal-all`` seals them as 10^7 does.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import clock, parser, place, pwe_env, timed

ENV = pwe_env()
BARS = {"run_dir_bytes": 2e9}


def pwe_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pwe", *args]


def proc_kb(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line[:5]] = int(line.split()[1])
    except OSError:
        pass
    return out


def engine_pid(run_dir: Path) -> int:
    """The live engine's pid from its lock file (0: none, or it is gone)."""
    try:
        pid = int(json.loads((run_dir / "engine.lock").read_text())["pid"])
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def totals(run_dir: Path) -> dict[str, int]:
    try:
        return json.loads((run_dir / "state.json").read_text())["totals"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


#: file kinds of a run directory, by the first pattern its relative path matches
KINDS = (("journal", re.compile(r"journal")), ("checkpoint", re.compile(r"checkpoint")),
         ("pilot tasks", re.compile(r"pilots/[^/]+/tasks")), ("pilot events", re.compile(r"pilots/[^/]+/events")),
         ("pilot streams", re.compile(r"pilots/[^/]+/.*(stream|out|err)")),
         ("pilot other", re.compile(r"pilots/")), ("members", re.compile(r"members/")), ("other", re.compile(r"")))


def walk(run_dir: Path) -> dict[str, object]:
    """Bytes by kind, files, directories, and the directory with the most entries."""
    by_kind = {k: 0 for k, _ in KINDS}
    files = dirs = most = 0
    where = ""
    for d, ds, fs in os.walk(run_dir):
        dirs += len(ds)
        files += len(fs)
        if len(ds) + len(fs) > most:
            most, where = len(ds) + len(fs), os.path.relpath(d, run_dir)
        rel = os.path.relpath(d, run_dir)
        for f in fs:
            path = f if rel == "." else f"{rel}/{f}"
            try:
                size = os.lstat(os.path.join(d, f)).st_size
            except OSError:
                continue
            by_kind[next(k for k, rx in KINDS if rx.match(path))] += size
    return {"bytes": sum(by_kind.values()), "by_kind": by_kind, "files": files, "dirs": dirs,
            "largest_dir": where, "largest_dir_entries": most}


def read_samples(path: Path) -> list[dict]:
    out = []
    try:
        with open(path) as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # (a line cut by a kill of this script)
    except FileNotFoundError:
        pass
    return out


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x (None with fewer than 3 points or no spread of x)."""
    if len(points) < 3:
        return None
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else None


def start(base: Path, n: int, cores: int, quiet: bool) -> subprocess.Popen:
    run = 'true' if quiet else 'echo "member $PWE_MEMBER"'
    wf = base / "wf.yaml"
    wf.write_text(f"name: ten-million\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {n}]}}}}\n"
                  f"    run: {json.dumps(run)}\n")
    (base / "meta.json").write_text(json.dumps({"members": n, "cores": cores, "quiet": quiet,
                                                "seal_above": ENV.get("PWE_SEAL_ABOVE"),
                                                "started": time.time()}) + "\n")
    return spawn(base, pwe_cmd("run", str(wf), "--cores", str(cores), "--run-dir", str(base / "run")))


def spawn(base: Path, argv: list[str]) -> subprocess.Popen:
    with open(base / "engine.out", "ab") as out:
        return subprocess.Popen(argv, env=ENV, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def follow(base: Path, n: int, sample_every: float, walk_every: float, progress_every: float,
           proc: subprocess.Popen | None) -> None:
    """Sample until the run has ended: its engine gone (resumed once if it went before its end).
    ``proc``: the engine this script started (reaped here, so that its pid is not taken for live)."""
    run_dir = base / "run"
    samples = base / "samples.jsonl"
    last_walk = last_progress = 0.0
    resumed = False
    while True:
        if proc is not None:
            proc.poll()  # (reaps it once it has exited)
        pid = engine_pid(run_dir)
        t = totals(run_dir)
        now = time.time()
        ended = t and t.get("done", 0) + t.get("failed", 0) >= n
        if not pid:
            if proc is not None and proc.poll() is None:
                time.sleep(0.5)  # (started, not yet locked)
                continue
            if ended or resumed:
                break
            print(f"{time.strftime('%H:%M:%S')} no engine and the run not at its end: pwe resume", flush=True)
            proc = spawn(base, pwe_cmd("resume", str(run_dir)))
            resumed = True
            continue
        mem = proc_kb(pid)
        row = {"t": round(now, 1), "done": t.get("done", 0), "failed": t.get("failed", 0),
               "rss_kb": mem.get("VmRSS", 0), "hwm_kb": mem.get("VmHWM", 0)}
        if now - last_walk >= walk_every:
            w = walk(run_dir)
            row.update(bytes=w["bytes"], entries=w["files"] + w["dirs"])
            last_walk = time.time()  # (from the walk's end: a walk of millions of entries takes minutes)
        with open(samples, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        if now - last_progress >= progress_every:
            rate = rate_of(read_samples(samples)[-30:])
            left = (n - row["done"]) / rate if rate else float("nan")
            print(f"{time.strftime('%H:%M:%S')} done {row['done']:,}/{n:,} failed {row['failed']:,} "
                  f"rss {row['rss_kb'] / 1024:.0f} MiB (peak {row['hwm_kb'] / 1024:.0f}) "
                  f"{rate:,.0f}/s, ~{left / 60:.0f} min left"
                  + (f"; run dir {row['bytes'] / 1e6:,.0f} MB in {row['entries']:,} entries" if "bytes" in row else ""),
                  flush=True)
            last_progress = now
        time.sleep(sample_every)
    if proc is not None:
        proc.wait()


def rate_of(rows: list[dict]) -> float:
    rows = [r for r in rows if r.get("rss_kb")]
    if len(rows) < 2 or rows[-1]["t"] <= rows[0]["t"]:
        return 0.0
    return (rows[-1]["done"] - rows[0]["done"]) / (rows[-1]["t"] - rows[0]["t"])


def logs_check(run_dir: Path, index: int, quiet: bool) -> float:
    """Wall seconds of a fresh ``pwe logs RUN m:index``; SystemExit if its line is not there."""
    argv = pwe_cmd("logs", str(run_dir), f"m:{index}")
    t0 = clock()
    done = subprocess.run(argv, env=ENV, capture_output=True)
    took = clock() - t0
    if done.returncode != 0 or (not quiet and f"member {index}".encode() not in done.stdout):
        print(f"pwe logs m:{index}: exit {done.returncode}, stdout {done.stdout[-200:]!r}, "
              f"stderr {done.stderr[-300:]!r}", flush=True)
        return -took
    return took


def report(base: Path, project: int) -> dict:
    meta = json.loads((base / "meta.json").read_text())
    n, quiet = meta["members"], meta["quiet"]
    run_dir = base / "run"
    rows = [r for r in read_samples(base / "samples.jsonl") if r.get("rss_kb")]
    t = totals(run_dir)
    done = t.get("done", 0) + t.get("failed", 0)
    out: dict[str, object] = {"members": n, "quiet": quiet, "cores": meta["cores"],
                              "seal_above": meta.get("seal_above"), "done": t.get("done", 0),
                              "failed": t.get("failed", 0), "ended": done >= n}
    if rows:
        wall = rows[-1]["t"] - meta["started"]
        out["wall_s"] = round(wall, 1)
        out["rate_per_s"] = round(done / wall) if wall > 0 else None
        mid = [(r["done"], r["rss_kb"] * 1024) for r in rows if 0.10 * n <= r["done"] <= 0.95 * n]
        s = slope(mid)
        out.update(rss_first_mib=round(rows[0]["rss_kb"] / 1024, 1), rss_last_mib=round(rows[-1]["rss_kb"] / 1024, 1),
                   rss_peak_mib=round(max(r["hwm_kb"] for r in rows) / 1024, 1),
                   rss_bytes_per_member=None if s is None else round(s, 2))
    w = walk(run_dir)
    out["run_dir"] = w
    out["bytes_per_member"] = {k: round(v / max(done, 1), 1) for k, v in w["by_kind"].items() if v}
    if out["ended"]:
        out["status_s"] = round(statistics.median(timed(pwe_cmd("status", str(run_dir)), ENV) for _ in range(3)), 3)
        out["logs_s"] = {str(i): round(logs_check(run_dir, i, quiet), 3) for i in (0, n // 2, n - 1)}
    if done:
        f = project / done
        fixed = w["by_kind"].get("checkpoint", 0)  # (every member's state from the start: sized by N already)
        cp = fixed * project / n
        out["projected"] = {
            "members": project,
            "run_dir_bytes": round((w["bytes"] - fixed) * f + cp),
            "entries": round((w["files"] + w["dirs"]) * f) if w["files"] > 1000 else w["files"] + w["dirs"],
            "wall_h": round(project / out["rate_per_s"] / 3600, 2) if out.get("rate_per_s") else None,
            "rss_growth_mib": None if out.get("rss_bytes_per_member") is None
            else round(out["rss_bytes_per_member"] * project / 2**20, 1),
        }
    (base / "figures.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def show(out: dict) -> None:
    w = out["run_dir"]
    print(f"members {out['members']:,}: done {out['done']:,}, failed {out['failed']:,}"
          + (f", {out.get('wall_s', 0):,.0f} s wall, {out.get('rate_per_s') or 0:,}/s" if "wall_s" in out else ""))
    if "rss_first_mib" in out:
        print(f"engine RSS: first {out['rss_first_mib']} MiB, last {out['rss_last_mib']} MiB, peak "
              f"{out['rss_peak_mib']} MiB; slope {out['rss_bytes_per_member']} bytes a member (bar: flat)")
    print(f"run directory: {w['bytes'] / 1e6:,.1f} MB, {w['files']:,} files + {w['dirs']:,} directories; "
          f"largest directory {w['largest_dir']} ({w['largest_dir_entries']:,} entries)")
    for k, v in w["by_kind"].items():
        if v:
            print(f"  {k:14} {v / 1e6:10,.1f} MB  {out['bytes_per_member'][k]:8.1f} bytes a member")
    if "status_s" in out:
        print(f"pwe status {out['status_s']} s (median of 3); pwe logs m:first/middle/last "
              + " ".join(f"{v} s" for v in out["logs_s"].values()) + " (negative: the line was not found)")
    p = out.get("projected")
    if p:
        print(f"projected to {p['members']:,}: run directory {p['run_dir_bytes'] / 1e9:.2f} GB (bar 2 GB), "
              f"{p['entries']:,} entries, {p['wall_h']} h, engine RSS growth {p['rss_growth_mib']} MiB")


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    ap = parser(__doc__, repeat=None, members=10_000_000, cores=2, where="disk", json_out=True)
    ap.add_argument("--base", type=Path, help="where the run and the samples are kept (default: "
                    "<where>/ten-million-<members>); a base that holds a run is followed, not started again")
    ap.add_argument("--quiet", action="store_true", help="members run `true` (print nothing)")
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--walk-every", type=float, default=300.0, help="seconds between run directory sizes")
    ap.add_argument("--progress-every", type=float, default=60.0, help="seconds between progress lines")
    ap.add_argument("--project", type=int, default=10_000_000, help="project the figures to this many members")
    ap.add_argument("--report", action="store_true", help="only the figures so far (the run is not touched)")
    ap.add_argument("--seal-all", action="store_true", help="seal every left pilot's files, however small "
                    "(PWE_SEAL_ABOVE=0): what a run of 10^7 does with its files of hundreds of MB, for a smaller "
                    "run whose sizes are projected to it")
    args = ap.parse_args()
    if args.seal_all:
        ENV["PWE_SEAL_ABOVE"] = "0"
    base = (args.base or place(args.where) / f"ten-million-{args.members}").resolve()
    if args.report:
        show(report(base, args.project))
        return
    if not (base / "meta.json").exists():
        base.mkdir(parents=True, exist_ok=True)
        print(f"{time.strftime('%H:%M:%S')} starting {args.members:,} members in {base}", flush=True)
        proc = start(base, args.members, args.cores, args.quiet)
        while not engine_pid(base / "run") and proc.poll() is None:
            time.sleep(0.2)
    else:
        proc = None
        print(f"{time.strftime('%H:%M:%S')} following the run in {base}", flush=True)
    n = json.loads((base / "meta.json").read_text())["members"]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (the engine goes on: its own session)
    follow(base, n, args.sample_every, args.walk_every, args.progress_every, proc)
    out = report(base, args.project)
    show(out)
    print(json.dumps(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
