"""Benchmark: pwe beside its peers on this machine, interleaved in one invocation (issue 23).

    .venv/bin/python bench/peers.py [--install [--wheels DIR]] [--peers bare,xargs,pwe,hq,parsl,celery]
        [--repeat 3] [--w1-members 5000] [--w1-slots 2] [--w2-members 400] [--w2-slots 8] [--quick] [--write]

W1: N x `true` on S slots, members/s of the whole command, and its ratio to the bare loop
    of the same repeat (median over the repeats of peer / bare beside it).
W2: N x `sleep 0.05` on S slots, efficiency = ideal / wall, ideal = N * 0.05 / S.

Peers:
  bare    bench/dispatch_local.py's bare_loop (mkdir + posix_spawn of /bin/true with its
          stdout/stderr files, reaped; W1 only: it runs nothing but true)
  xargs   `xargs -P S -n 1 true|sleep` (no per-member files)
  pwe     a fresh `python -m pwe run --cores S` (cold: the whole command), run dir on tmpfs,
          every member's end checked in its journal
  hq      HyperQueue (PyPI `hyperqueue`), a server and one worker of S cpus; its wheel ships no
          `hq` binary, so both run inside the driver through the wheel's LocalCluster (FFI)
  parsl   Parsl HighThroughputExecutor with S workers, python_app members
  celery  Celery + the tests' Redis (db 15) as broker, a prefork worker of concurrency S
hq, parsl and celery are warm: each run is a fresh driver (bench/peers_drivers.py, run in
bench/.peers-venv) that starts the peer, runs 4 x S members untimed, then times the N
members from their submission to the last one's end; it stops the peer before the next
peer runs, so no peer's idle servers run beside another's timing. `--install` makes that
venv and installs the three there (from DIR with --no-index under `--wheels DIR`); a peer
that is not installed or cannot run is reported absent with the reason, never measured.

Every repeat runs each peer once per workload, in an order rotated by one each repeat.
Noise guard: the bare loop (W1's size) runs before the first and after the last repeat;
if the bare loop's spread over all its runs exceeds 15%, or the 1-minute load average
before starting exceeds 0.5, the table is flagged NOISY HOST with the reason.
A run that fails is shown as FAILED with its reason, and that peer is not run again.
This script is the subreaper of all it starts: after each peer's run and at its exit
(Ctrl-C and SIGTERM included) it stops whatever of that is still running.
`--write` appends the dated section (machine, command, tables) to bench/BENCHMARKS.md;
without it the same text is printed. `--quick` (500 / 80 members, 1 repeat) is a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, clock, pilot_events, pwe_env, timed_run
from dispatch_local import bare_loop, check, settle, workflow

BENCH = ROOT / "bench"
VENV = BENCH / ".peers-venv"
VPY = VENV / "bin" / "python"
DRIVERS = BENCH / "peers_drivers.py"
ALL = ["bare", "xargs", "pwe", "hq", "parsl", "celery"]
WARM = {"hq", "parsl", "celery"}
PIP_NAMES = {"hq": "hyperqueue", "parsl": "parsl", "celery": "celery[redis]"}
REDIS_URL_FILE = Path("/var/tmp/pwe-redis/url")
SLEEP = 0.05


# ----------------------------------------------------------------------------- processes
def become_subreaper() -> None:
    """Orphans of what this script starts (a peer's daemon whose parent died) are given to
    this process instead of init, so sweep() still finds them among its descendants. (Not a
    tag in the environment: setproctitle, which Celery's and Parsl's workers use, overwrites
    /proc/PID/environ.)"""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("warning: prctl(PR_SET_CHILD_SUBREAPER) failed: orphaned peer processes may escape", file=sys.stderr)


def descendants() -> list[int]:
    """Every live process under this one (zombies are only reaped)."""
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if state != "Z":
                kids.setdefault(int(ppid), []).append(int(p.name))
            elif int(ppid) == os.getpid():
                try:
                    os.waitpid(int(p.name), os.WNOHANG)
                except ChildProcessError:
                    pass
    found, todo = [], [os.getpid()]
    while todo:
        for c in kids.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def sweep() -> list[int]:
    """Stop whatever this script started that is still running (TERM, then KILL): called
    when none of it should be. Returns the pids it found."""
    left = descendants()
    pending = left
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pending:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3
        while (pending := descendants()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not pending:
            break
    return left


def redact(s: str) -> str:
    url = os.environ.get("PWE_PEERS_REDIS", "")
    if "@" in url:
        s = s.replace(url.split("@")[0].rsplit(":", 1)[-1], "***")
    return s


# ----------------------------------------------------------------------------- install / check
def install(wanted: list[str], wheels: Path | None) -> dict[str, str]:
    """bench/.peers-venv with each peer pip-installed on its own (one failing leaves the
    others); returns peer -> why it failed."""
    failed = {}
    if not VPY.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    src = ["--no-index", "--find-links", str(wheels)] if wheels else []
    for peer, name in PIP_NAMES.items():
        if peer not in wanted:
            continue
        print(f"installing {name} into {VENV.relative_to(ROOT)} ...", flush=True)
        p = subprocess.run([str(VPY), "-m", "pip", "install", "-q", *src, name], capture_output=True, text=True)
        if p.returncode != 0:
            last = ((p.stderr or p.stdout).strip().splitlines() or [f"exit {p.returncode}"])[-1]
            failed[peer] = f"pip install {name} failed: {last}"
    return failed


def check_peers(wanted: list[str], install_failed: dict[str, str]) -> dict[str, dict]:
    """peer -> {"ok": bool, "version"/"why", "how"} for the peers that need the bench venv."""
    out = {}
    need = [p for p in wanted if p in WARM]
    if not need:
        return out
    if not VPY.exists():
        return {p: {"ok": False, "why": "not installed: run with --install"} for p in need}
    p = subprocess.run([str(VPY), str(DRIVERS), "check"], capture_output=True, text=True, timeout=120)
    try:
        got = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        got = {x: {"ok": False, "why": f"check failed: {redact(p.stderr.strip()[-300:])}"} for x in need}
    for peer in need:
        r = got[peer]
        if not r["ok"]:
            r["why"] = install_failed.get(peer) or (
                "not installed: run with --install" if "ModuleNotFoundError" in r["why"] else redact(r["why"]))
        out[peer] = r
    return out


# ----------------------------------------------------------------------------- runners
def run_xargs(n: int, slots: int, argv: list[str]) -> dict:
    """xargs -P S -n 1 ARGV0 with one argument a member (`true 0`, `sleep 0.05`)."""
    items = "".join((f"{argv[1]}\n" if len(argv) > 1 else f"{i}\n") for i in range(n)).encode()
    t0 = clock()
    p = subprocess.run(["xargs", "-P", str(slots), "-n", "1", argv[0]], input=items, capture_output=True)
    wall = clock() - t0
    if p.returncode != 0:
        raise RuntimeError(f"xargs exited {p.returncode}: {p.stderr[-300:]!r}")
    return {"wall": wall}


def run_pwe(base: Path, n: int, slots: int, cmd: str, env: dict[str, str]) -> dict:
    """A fresh `python -m pwe run` (the whole command), every member's end and tidying
    checked; the first member's start and the last one's end from the pilot's events."""
    run_dir = base / f"pwe-{time.time_ns()}"
    wf = workflow(base, n, cmd)
    settle()
    t0 = time.time()
    try:
        wall = timed_run([wf, "--cores", slots, "--run-dir", run_dir], env)
    except SystemExit as e:  # common.timed_run's way to say the run failed
        raise RuntimeError(str(e)[-500:]) from None
    check(run_dir, n)
    starts, ends = [], []
    for ev in pilot_events(run_dir):
        (starts if ev["k"] == "start" else ends if ev["k"] == "end" else []).append(ev["t"])
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"wall": wall, "first": min(starts) - t0, "last_end": max(ends) - t0}


def run_driver(peer: str, base: Path, n: int, slots: int, argv: list[str]) -> dict:
    """A fresh driver in the bench venv; its output goes to files, not pipes, so a driver
    that dies is seen at once even while its orphans (a peer's daemons) hold them open."""
    work = Path(tempfile.mkdtemp(prefix=f"{peer}-", dir=base))
    limit = 120 + n * 0.1
    try:
        with open(work / "driver.out", "w+") as out, open(work / "driver.err", "w+") as err:
            p = subprocess.Popen([str(VPY), str(DRIVERS), "run", peer, "--members", str(n), "--slots", str(slots),
                                  "--work", str(work), "--", *argv], stdout=out, stderr=err, start_new_session=True)
            try:
                p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                raise RuntimeError(f"{peer} driver did not finish in {limit:.0f} s") from None
            finally:
                left = sweep()
            out.seek(0)
            err.seek(0)
            lines = [x for x in out.read().splitlines() if x.startswith("PEERS-RESULT ")]
            why = err.read().strip().splitlines()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if left:
        print(f"  warning: {peer} left processes behind, stopped: {left}", file=sys.stderr)
    if p.returncode != 0 or not lines:
        how = f"killed by signal {-p.returncode}" if p.returncode < 0 else f"exited {p.returncode}"
        raise RuntimeError(redact(f"{peer} driver {how}: {(why or ['no message'])[-1][-400:]}"))
    return json.loads(lines[-1][len("PEERS-RESULT "):])


# ----------------------------------------------------------------------------- report
def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f", {kb / 2**20:.0f} GiB"
    except (OSError, IndexError, ValueError):
        pass
    return (f"{len(os.sched_getaffinity(0))} CPUs (nproc) of {model}{mem}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def fmt_runs(runs: list) -> str:
    return ", ".join(f"{r['wall']:.2f}" for r in runs)


def table(w: str, res: dict, peers: list[str], n: int, ideal: float, absent: dict[str, str]) -> list[str]:
    """W1: members/s and the ratio to the bare loop of the same repeat; W2: efficiency."""
    if w == "W1":
        rows = ["| peer | median wall (s) | members/s | ratio to bare loop | runs (s) | note |",
                "|---|---|---|---|---|---|"]
    else:
        rows = ["| peer | median wall (s) | efficiency | runs (s) | note |", "|---|---|---|---|---|"]
    gap = "| | " if w == "W1" else "| "
    bare = res.get("bare", {}).get("runs", [])
    for peer in peers:
        if peer == "bare" and w == "W2":
            continue
        r = res[peer]
        if peer in absent:
            rows.append(f"| {peer} | absent | {gap}| {absent[peer]} |")
            continue
        if r["error"]:
            rows.append(f"| {peer} | **FAILED** | {gap}{fmt_runs(r['runs'])} | {r['error']} |")
            continue
        walls = [x["wall"] for x in r["runs"]]
        med = statistics.median(walls)
        note = ""
        if peer == "pwe" and w == "W1":
            span = statistics.median(x["last_end"] - x["first"] for x in r["runs"])
            note = f"first member start -> last end: {n / span:,.0f}/s"
        if peer == "pwe" and w == "W2":
            first = statistics.median(x["first"] for x in r["runs"])
            rest = statistics.median(x["wall"] - x["first"] for x in r["runs"])
            note = f"from first member start (at {first:.2f} s) to exit: efficiency {ideal / rest:.2f}"
        if peer == "hq":
            note = f"wait_for_jobs returned after {statistics.median(x['waited'] for x in r['runs']):.2f} s (median)"
        if w == "W1":
            ratio = ""
            if peer != "bare" and len(bare) == len(walls):
                ratio = f"{statistics.median(b['wall'] / x for x, b in zip(walls, bare)):.2f}"
            rows.append(f"| {peer} | {med:.3f} | {n / med:,.0f} | {ratio} | {fmt_runs(r['runs'])} | {note} |")
        else:
            rows.append(f"| {peer} | {med:.3f} | {ideal / med:.2f} | {fmt_runs(r['runs'])} | {note} |")
    return rows


def how_they_run(peers: list[str], checks: dict[str, dict]) -> list[str]:
    how = {"bare": "Python loop (bench/dispatch_local.py): mkdir + posix_spawn of /bin/true with stdout/stderr "
                   "files, S at a time, reaped; W1 only",
           "xargs": "`xargs -P S -n 1 true` (or `sleep 0.05`), the whole command; no per-member files",
           "pwe": "cold: the whole `python -m pwe run --cores S` command, run dir on tmpfs, per-member "
                  "stdout/stderr files (tidied), every end checked in the journal",
           "hq": "a server and one worker with S cpus: {how}; per-task stdout/stderr files, removed when it ends; "
                 "timed from submit to the last task's end (its folder's mtime: wait_for_jobs polls once a second)",
           "parsl": "HighThroughputExecutor, S workers on one LocalProvider block; python_app members that "
                    "run the command with subprocess; timed from the first submit to the last result",
           "celery": "prefork worker with concurrency S on its own queue, Redis broker (the tests' Redis, db 15); "
                     "tasks run the command with subprocess and count their ends in Redis; timed from the first "
                     "send to the N-th end"}
    out = []
    for p in peers:
        c = checks.get(p, {})
        text = how[p].format(how=c.get("how", ""))
        if p in WARM:
            text = (f"{c['version']}, warm (started, then 4 x S members untimed, in a fresh driver each run): {text}"
                    if c.get("ok") else f"absent: {c['why']}")
        out.append(f"- **{p}**: {text}")
    return out


def rotate(peers: list[str], k: int) -> list[str]:
    k %= len(peers)
    return peers[k:] + peers[:k]


def arguments() -> tuple[argparse.Namespace, list[str], str]:
    """The command line: its options (--quick's smaller defaults filled in), the peers
    asked for, and the command as BENCHMARKS.md shows it; a bad one is argparse's error."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", default=",".join(ALL), help=f"comma-separated, of {','.join(ALL)}")
    ap.add_argument("--repeat", type=int, help="runs of each peer per workload (3; --quick: 1)")
    ap.add_argument("--w1-members", type=int, help="W1's members (5000; --quick: 500)")
    ap.add_argument("--w1-slots", type=int, default=2)
    ap.add_argument("--w2-members", type=int, help="W2's members (400; --quick: 80)")
    ap.add_argument("--w2-slots", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="smoke test: smaller defaults, never --write")
    ap.add_argument("--install", action="store_true", help=f"make {VENV.relative_to(ROOT)} and pip install the peers")
    ap.add_argument("--wheels", type=Path, help="with --install: install from this folder only (--no-index)")
    ap.add_argument("--write", action="store_true", help="append the section to bench/BENCHMARKS.md")
    args = ap.parse_args()
    command = "python bench/peers.py " + " ".join(map(shlex.quote, sys.argv[1:]))
    for name, full, quick in (("w1_members", 5000, 500), ("w2_members", 400, 80), ("repeat", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.quick and args.write:
        ap.error("--quick is a smoke test: its figures are not for BENCHMARKS.md")
    if min(args.repeat, args.w1_members, args.w2_members, args.w1_slots, args.w2_slots) < 1:
        ap.error("--repeat, members and slots must be at least 1")
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(peers) - set(ALL)
    if unknown or not peers:
        ap.error(f"unknown peers {sorted(unknown)}; choose from {','.join(ALL)}")
    if args.wheels and not args.install:
        ap.error("--wheels goes with --install")
    return args, peers, command


def main() -> None:
    args, peers, command = arguments()
    become_subreaper()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally below stops the peers
    try:
        os.environ["PWE_PEERS_REDIS"] = REDIS_URL_FILE.read_text().strip().rsplit("/", 1)[0] + "/15"
    except OSError:
        pass  # Celery's check says: no Redis URL
    load0 = os.getloadavg()[0]
    install_failed = install(peers, args.wheels) if args.install else {}
    checks = check_peers(peers, install_failed)
    absent = {p: c["why"] for p, c in checks.items() if not c["ok"]}
    n1, s1, n2, s2 = args.w1_members, args.w1_slots, args.w2_members, args.w2_slots
    ideal = n2 * SLEEP / s2
    env = pwe_env()
    workloads = [("W1", n1, s1, ["true"]), ("W2", n2, s2, ["sleep", str(SLEEP)])]
    res: dict[str, dict] = {w: {p: {"runs": [], "error": None} for p in peers} for w, *_ in workloads}
    guard: list[float] = []
    base = Path(tempfile.mkdtemp(prefix="pwe-peers-", dir="/dev/shm"))
    print(f"peers: {', '.join(peers)}; absent: {absent or 'none'}; load {load0:.2f}", flush=True)
    try:
        guard.append(bare_loop(base, n1, s1))
        for k in range(args.repeat):
            for w, n, slots, argv in workloads:
                for peer in rotate(peers, k):
                    r = res[w][peer]
                    if peer in absent or r["error"] or (peer == "bare" and w == "W2"):
                        continue
                    try:
                        if peer == "bare":
                            got = {"wall": n / bare_loop(base, n, slots)}
                            guard.append(n / got["wall"])
                        elif peer == "xargs":
                            got = run_xargs(n, slots, argv)
                        elif peer == "pwe":
                            got = run_pwe(base, n, slots, " ".join(argv), env)
                        else:
                            got = run_driver(peer, base, n, slots, argv)
                    except Exception as e:  # noqa: BLE001 - every failure is reported in the table
                        r["error"] = redact(f"{type(e).__name__}: {e}").replace("|", "/").replace("\n", " ")[:400]
                        print(f"  {w} repeat {k + 1} {peer}: FAILED {r['error']}", flush=True)
                        continue
                    r["runs"].append(got)
                    print(f"  {w} repeat {k + 1} {peer}: {got['wall']:.3f} s", flush=True)
        guard.append(bare_loop(base, n1, s1))
    finally:
        left = sweep()
        if left:
            print(f"warning: processes left behind were killed: {left}", file=sys.stderr)
        shutil.rmtree(base, ignore_errors=True)
        os.sync()

    spread = (max(guard) - min(guard)) / statistics.median(guard)
    why = [f"1-min load average {load0:.2f} > 0.5 before starting"] if load0 > 0.5 else []
    if spread > 0.15:
        why.append(f"the bare loop's spread {spread:.0%} > 15% over its {len(guard)} runs")
    guard_line = (f"**NOISY HOST**: {'; '.join(why)}." if why else "Quiet host:") + (
        f" Load {load0:.2f} before starting; bare loop {min(guard):,.0f}-{max(guard):,.0f}/s over {len(guard)} runs "
        f"(spread {spread:.0%}; before the first and after the last repeat"
        f"{', and in each' if 'bare' in peers else ''}).")
    text = [f"## Peers: W1 and W2 side by side (issue 23), {time.strftime('%Y-%m-%d %H:%M %Z')}", "",
            f"Machine: {machine()}.",
            "", "    " + command, "", guard_line, "",
            f"Median of {args.repeat}, peers interleaved (order rotated each repeat); ratios only from this run. "
            "Absolute figures hold for this machine only.", "", *how_they_run(peers, checks), "",
            f"### W1: {n1:,} x `true` on {s1} slots (members/s of the whole command or batch)", "",
            *table("W1", res["W1"], peers, n1, ideal, absent), "",
            f"### W2: {n2:,} x `sleep {SLEEP}` on {s2} slots (efficiency = ideal {ideal:.2f} s / wall)", "",
            *table("W2", res["W2"], peers, n2, ideal, absent), ""]
    out = "\n".join(text) + "\n"
    if args.write:
        with open(BENCH / "BENCHMARKS.md", "a") as fh:
            fh.write("\n" + out)
        print(f"appended to {BENCH / 'BENCHMARKS.md'}:\n")
    print(out)


if __name__ == "__main__":
    main()
