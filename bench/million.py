"""Benchmark: a million members through one `pwe run`, end to end (issue 13, part 1).

    flock /tmp/pwe-bench.lock python bench/million.py [--members 1000000] [--kill-at 500000]
        [--where disk|tmpfs] [--cores 2] [--status-every 5] [--keep]

One node, ``parameters: {i: {range: [0, N]}}``, ``run: "true"``. The run is started with
``pwe run`` (a real engine and a real pilot); while it runs the script samples, each
against its bar:

- the engine's peak RSS (VmHWM of /proc/<engine pid>/status, sampled every second until
  it exits): bar 1 GB; and the engine's RSS per member: its RSS once every member is in
  memory (the first sample) against the same at the end;
- ``pwe status RUN`` every --status-every seconds, as a fresh process (interpreter start
  and imports included) and as the call itself (``runview.status``, in this process):
  bar 0.2 s;
- kill -9 of the engine once --kill-at members are done, then ``pwe resume RUN``: the
  seconds from the command's start to the first member that had never been given to a
  pilot starting (a ``start`` event in a pilot's events file for an index past the last
  one assigned before the kill): bar 10 s;
- after the end: the run directory's size and its largest directory (entries): bars 2 GB
  and 10,000; ``pwe show RUN --limit 20`` and ``pwe status`` (fresh processes).

Prints one line per figure, and a JSON summary last.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, clock, median_of, parser, place, pwe_env, timed, write_json

ENV = pwe_env()
sys.path.insert(0, str(ROOT))


def pwe_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pwe", *args]


def proc_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def engine_pid(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "engine.lock").read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def done(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "state.json").read_text())["totals"]["done"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def last_assigned(run_dir: Path) -> int:
    """The highest member index assigned in the journal (assigned in index order: the last)."""
    with open(run_dir / "journal.jsonl", "rb") as fh:
        size = fh.seek(0, 2)
        fh.seek(max(0, size - (4 << 20)))
        tail = fh.read()
    return max(_field(line, "m") + _field(line, "len", 1) - 1 for line in tail.split(b"\n")[1:]
               if b'"e":"assign"' in line)


def _field(line: bytes, name: str, missing: int = -1) -> int:
    try:
        return int(json.loads(line).get(name, missing))
    except (ValueError, TypeError, AttributeError):
        return -1  # (a line cut short: the kill, or a read while it is written)


def started_past(run_dir: Path, index: int, offsets: dict[Path, int]) -> bool:
    """Whether any pilot's events file has a start of a member past ``index`` (read on from
    where the last look stopped)."""
    for ev in (run_dir / "pilots").glob("*/events.jsonl"):
        with open(ev, "rb") as fh:
            fh.seek(offsets.get(ev, max(0, ev.stat().st_size - (1 << 20))))
            data = fh.read()
            offsets[ev] = fh.tell() - len(data) + (data.rfind(b"\n") + 1)
        for line in data.split(b"\n"):
            if b'"k":"start"' in line and _field(line, "m") > index:
                return True
    return False


def walk(run_dir: Path) -> tuple[int, int, str, int]:
    """(bytes of files, files and directories, the directory with most entries, its count)."""
    size = count = 0
    most, where = 0, ""
    for d, dirs, files in os.walk(run_dir):
        n = len(dirs) + len(files)
        count += n
        if n > most:
            most, where = n, d
        for f in files:
            try:
                size += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return size, count, where, most


class Sampler:
    """RSS and `pwe status` latency of a running engine, sampled as it goes."""

    def __init__(self, run_dir: Path, status_every: float):
        self.dir = run_dir
        self.status_every = status_every
        self.hwm_kb = 0
        self.first_rss_kb = 0
        self.last_rss_kb = 0
        self.status_cli: list[float] = []
        self.status_call: list[float] = []
        self._next_status = time.time() + status_every

    def sample(self, pid: int) -> None:
        if pid:
            hwm, rss = proc_kb(pid, "VmHWM"), proc_kb(pid, "VmRSS")
            self.hwm_kb = max(self.hwm_kb, hwm)
            if rss:
                self.first_rss_kb = self.first_rss_kb or rss
                self.last_rss_kb = rss
        if time.time() >= self._next_status:
            from pwe.observe.runview import status

            t0 = clock()
            status(self.dir)
            self.status_call.append(clock() - t0)
            self.status_cli.append(timed(pwe_cmd("status", str(self.dir)), ENV))
            self._next_status = time.time() + self.status_every


def follow(proc: subprocess.Popen, sampler: Sampler, run_dir: Path, until=None) -> None:
    pid = 0
    while proc.poll() is None:
        pid = pid or engine_pid(run_dir)
        sampler.sample(pid)
        if until is not None and until():
            return
        time.sleep(1.0)


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    ap = parser(__doc__, repeat=None, members=1_000_000, cores=2, where="disk", json_out=True)
    ap.add_argument("--kill-at", type=int, default=500_000, help="kill -9 the engine at this many done (0: never)")
    ap.add_argument("--status-every", type=float, default=5.0)
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pwe-million-", dir=place(args.where)))
    n = args.members
    out: dict[str, object] = {"members": n, "where": args.where, "cores": args.cores}
    try:
        wf = base / "wf.yaml"
        wf.write_text(f"name: million\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {n}]}}}}\n    run: 'true'\n")
        run_dir = base / "run"
        sampler = Sampler(run_dir, args.status_every)
        t0 = clock()
        proc = subprocess.Popen(pwe_cmd("run", str(wf), "--cores", str(args.cores), "--run-dir", str(run_dir)),
                                env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        killed = False
        if args.kill_at:
            follow(proc, sampler, run_dir, until=lambda: done(run_dir) >= args.kill_at)
            if proc.poll() is None:
                pid = engine_pid(run_dir)
                sampler.sample(pid)
                at = done(run_dir)
                os.kill(pid, signal.SIGKILL)
                proc.wait()
                killed = True
                before = clock() - t0
                index = last_assigned(run_dir)
                print(f"kill -9 of the engine at {at:,} done ({before:.1f} s in); last member assigned: {index:,}")
                out.update(killed_at_done=at, killed_after_s=round(before, 1))
                offsets: dict[Path, int] = {}
                started_past(run_dir, index, offsets)  # (read up to now: what the old engine started)
                t1 = clock()
                proc = subprocess.Popen(pwe_cmd("resume", str(run_dir)), env=ENV, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, start_new_session=True)
                while not started_past(run_dir, index, offsets) and proc.poll() is None:
                    time.sleep(0.02)
                first_new = clock() - t1
                if proc.poll() is None:
                    print(f"pwe resume -> first new member started: {first_new:.2f} s (bar 10 s)")
                    out["resume_first_new_s"] = round(first_new, 2)
                else:
                    print("pwe resume ended before this script saw a new member start (a bug of the script?)")
        follow(proc, sampler, run_dir)
        rc = proc.wait()
        wall = clock() - t0
        err = proc.stderr.read().decode(errors="replace").strip()
        final = done(run_dir)
        print(f"run: {final:,} of {n:,} done, exit {rc}, {wall:.1f} s wall ({n / wall:.0f}/s)"
              + (" including the kill and resume" if killed else ""))
        if err:
            print(f"  (its stderr: {err[-500:]})")
        out.update(done=final, exit=rc, wall_s=round(wall, 1))
        print(f"engine peak RSS (VmHWM): {sampler.hwm_kb / 1024:.1f} MiB (bar 1 GB); RSS first sample "
              f"{sampler.first_rss_kb / 1024:.1f} MiB, last {sampler.last_rss_kb / 1024:.1f} MiB")
        out.update(engine_peak_rss_mib=round(sampler.hwm_kb / 1024, 1))
        if sampler.status_cli:
            print(f"pwe status during the run: {len(sampler.status_cli)} samples, process median "
                  f"{statistics.median(sampler.status_cli):.3f} s max {max(sampler.status_cli):.3f} s; the call "
                  f"median {statistics.median(sampler.status_call) * 1000:.1f} ms max "
                  f"{max(sampler.status_call) * 1000:.1f} ms (bar 0.2 s)")
            out.update(status_process_median_s=round(statistics.median(sampler.status_cli), 3),
                       status_process_max_s=round(max(sampler.status_cli), 3),
                       status_call_median_ms=round(statistics.median(sampler.status_call) * 1000, 1),
                       status_call_max_ms=round(max(sampler.status_call) * 1000, 1))
        size, count, where, most = walk(run_dir)
        print(f"run directory: {size / 1e6:.0f} MB in {count:,} files and directories (bar 2 GB); largest "
              f"directory {most:,} entries: {os.path.relpath(where, run_dir)} (bar 10,000)")
        for name in ("journal.jsonl", "checkpoint.bin"):
            print(f"  {name}: {(run_dir / name).stat().st_size / 1e6:.1f} MB")
        for f in sorted((run_dir / "pilots").glob("*/*.jsonl")):
            print(f"  {f.relative_to(run_dir)}: {f.stat().st_size / 1e6:.1f} MB")
        out.update(run_dir_mb=round(size / 1e6), entries=count, largest_dir_entries=most)
        show = median_of(3, pwe_cmd("show", str(run_dir), "--limit", "20"), ENV)
        status_end = median_of(3, pwe_cmd("status", str(run_dir)), ENV)
        logs = timed(pwe_cmd("logs", str(run_dir), f"m:{n // 2 + 1}"), ENV)
        print(f"after the end: pwe show --limit 20 {show:.2f} s, pwe status {status_end:.3f} s, "
              f"pwe logs of a member that wrote nothing {logs:.2f} s (fresh processes, medians of 3)")
        out.update(show_s=round(show, 2), status_end_s=round(status_end, 3), logs_s=round(logs, 2))
        print(json.dumps(out))
        write_json(args.json, out)
    finally:
        if args.keep:
            print(f"kept: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
