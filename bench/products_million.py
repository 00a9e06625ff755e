"""Benchmark: the products check of issue 14 ("completion by products") on 1,000,000 members.

    flock /tmp/pwe-bench.lock python bench/products_million.py [--members 1000000] [--per-dir 1000]

Makes a workspace of N product files, ``out/<i // per_dir>/<i>.dat`` (1,000 directories
of 1,000 files at the default), with 1 member in 100 missing its product, and a workflow
of one node ``sim`` of N members naming that product, then a barrier node after it.
Then measures, each in a fresh process (imports and planning included) and with the
page cache warm (the files were just made):

- ``scan``: what a run does when it begins (``pwe.planning.products.scan``: render every member's
  product path, list each directory once) and then the engine's part: the ``complete``
  journal records (``pwe.planning.products.complete_runs``, ``pwe.runstate.records.complete``)
  applied to the run's state; wall time of
  each part and peak RSS;
- its system calls, counted by ``strace -f -c`` over the whole process, less a process
  that only plans (the same imports and planning, no scan): directory reads
  (``getdents64``), ``openat`` and every kind of ``stat``;
- ``pwe plan --json`` of the workflow (what a user waits for to see complete / eligible /
  waiting counts), the whole command;
- for comparison, the check the design refuses: one ``os.stat`` per member (a fresh
  process that renders the same paths and stats each).

Prints a Markdown table for bench/BENCHMARKS.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import clock, parser, place, pwe_env

ENV = pwe_env()

WF = """\
name: prodbench
nodes:
  sim:
    parameters: {{i: {{range: [0, {n}]}}}}
    products: ["out/{{{{ i // {per} }}}}/{{{{ i }}}}.dat"]
    run: touch "$PWE_WORKSPACE/out/{{{{ i // {per} }}}}/{{{{ i }}}}.dat"
  summary:
    after: [sim]
    run: echo done
"""

# one child per measurement: MODE is scan | plan-only | render-only | stat-each
CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
mode, wf, ws = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
t0 = time.perf_counter()
from pwe.planning.plan import plan_workflow
from pwe.planning import products
plan = plan_workflow(wf)
t1 = time.perf_counter()
out = {"plan_s": t1 - t0}
if mode == "scan":
    found = products.scan(plan, ws)
    t2 = time.perf_counter()
    from pwe.runstate.records import complete
    from pwe.runstate.state import RunState
    st = RunState(plan)
    recs = [complete(nid, runs) for nid, runs in products.complete_runs(found)]
    for r in recs:
        st.apply(r)
    t3 = time.perf_counter()
    out.update(scan_s=t2 - t1, apply_s=t3 - t2, dirs=found.dirs_listed, names=found.names_read,
               complete=found.count("sim"), runs=len(found.complete.get("sim", [])), records=len(recs),
               journal_bytes=sum(len(json.dumps(r, separators=(",", ":"))) + 1 for r in recs),
               ready=st.nodes["sim"].counts[1], done=st.nodes["sim"].counts[4])
elif mode == "render-only":
    for i in range(plan.nodes["sim"].size):
        products.member_products(plan, "sim", i)
    out.update(render_s=time.perf_counter() - t1)
elif mode == "stat-each":
    n = 0
    root = str(ws)
    for i in range(plan.nodes["sim"].size):
        for rel in products.member_products(plan, "sim", i):
            try:
                os.stat(os.path.join(root, rel))
                n += 1
            except FileNotFoundError:
                pass
    out.update(stat_s=time.perf_counter() - t1, found=n)
out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""

SYSCALLS = ("getdents64", "openat", "newfstatat", "statx", "stat", "lstat", "fstat")


def child(mode: str, wf: Path, ws: Path) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, mode, str(wf), str(ws)], env=ENV, check=True,
                       capture_output=True, text=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def syscalls(mode: str, wf: Path, ws: Path) -> dict[str, int]:
    """Calls per kind, counted by strace -f -c over the whole child."""
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as log:
        subprocess.run(["strace", "-f", "-c", "-o", log.name, "-e", "trace=" + ",".join(SYSCALLS), sys.executable,
                        "-c", CHILD, mode, str(wf), str(ws)], env=ENV, check=True, capture_output=True)
        text = Path(log.name).read_text()
    counts = {}
    for line in text.splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if m:
            counts[m.group(2)] = int(m.group(1))
    return counts


def make_workspace(base: Path, n: int, per: int) -> tuple[Path, int]:
    ws = base / "ws"
    missing = 0
    for d in range((n + per - 1) // per):
        (ws / "out" / str(d)).mkdir(parents=True)
    for i in range(n):
        if i % 100 == 7:
            missing += 1
            continue
        fd = os.open(ws / "out" / str(i // per) / f"{i}.dat", os.O_CREAT | os.O_WRONLY, 0o644)
        os.close(fd)
    return ws, missing


def main() -> None:
    ap = parser(__doc__, repeat=3, members=1_000_000, where="/var/tmp")  # (a disk, not tmpfs)
    ap.add_argument("--per-dir", type=int, default=1000)
    args = ap.parse_args()
    n, per = args.members, args.per_dir
    base = Path(tempfile.mkdtemp(prefix="pwe-bench-products-", dir=place(args.where)))
    try:
        t0 = clock()
        ws, missing = make_workspace(base, n, per)
        print(f"made {n - missing:,} product files in {(n + per - 1) // per:,} directories in "
              f"{clock() - t0:.1f} s", file=sys.stderr)
        wf = base / "prodbench.yaml"
        wf.write_text(WF.format(n=n, per=per))
        scans = [child("scan", wf, ws) for _ in range(args.repeat)]
        for s in scans:
            assert s["complete"] == n - missing and s["done"] == n - missing and s["ready"] == missing, s
        base_plan = [child("plan-only", wf, ws) for _ in range(args.repeat)]
        walls = []
        for _ in range(args.repeat):
            t = clock()
            p = subprocess.run([sys.executable, "-m", "pwe", "plan", str(wf), "--json", "--members", "1",
                                "--workspace", str(ws)], env=ENV, check=True, capture_output=True, text=True)
            walls.append(clock() - t)
            node = json.loads(p.stdout)["nodes"][0]
            assert (node["complete"], node["eligible"], node["waiting"]) == (n - missing, missing, 0), node
        with_scan, without = syscalls("scan", wf, ws), syscalls("plan-only", wf, ws)
        naive = [child("stat-each", wf, ws) for _ in range(args.repeat)]
        assert all(s["found"] == n - missing for s in naive)
        render = [child("render-only", wf, ws) for _ in range(args.repeat)]
        naive_calls = syscalls("stat-each", wf, ws)

        def med(rows, key):
            return statistics.median(r[key] for r in rows)

        s0 = scans[0]
        print(f"\n{n:,} members, {(n + per - 1) // per:,} product directories, {missing:,} products missing; "
              f"median of {args.repeat} fresh processes; page cache warm\n")
        print("| what | figure |\n|---|---|")
        print(f"| scan: render {n:,} paths + list each directory once | {med(scans, 'scan_s'):.2f} s |")
        print(f"| of which rendering the paths (a process that only renders them) | {med(render, 'render_s'):.2f} s |")
        print(f"| complete records ({s0['records']} record(s), {s0['runs']:,} runs, {s0['journal_bytes']:,} bytes) "
              f"applied to the run's state | {med(scans, 'apply_s'):.2f} s |")
        print(f"| planning the workflow (before either) | {med(scans, 'plan_s'):.2f} s |")
        print(f"| peak RSS of the process (plan + scan + state) | {med(scans, 'rss_mb'):.0f} MB "
              f"(plan only: {med(base_plan, 'rss_mb'):.0f} MB) |")
        print(f"| directories listed (the scan's own count) | {s0['dirs']:,} |")
        for k in SYSCALLS:
            a, b = with_scan.get(k, 0), without.get(k, 0)
            if a or b:
                print(f"| `{k}` calls: scan process - plan-only process | {a:,} - {b:,} = **{a - b:,}** |")
        print(f"| `pwe plan --json --workspace` (whole command) | {statistics.median(walls):.2f} s |")
        stats = sum(naive_calls.get(k, 0) - without.get(k, 0) for k in ("newfstatat", "stat", "statx", "lstat"))
        print(f"| refused design, for comparison: render + one `os.stat` per member | {med(naive, 'stat_s'):.2f} s "
              f"(stat calls over plan-only: **{stats:,}**; `getdents64`: "
              f"{naive_calls.get('getdents64', 0) - without.get('getdents64', 0):,}) |")
    finally:
        t = clock()
        shutil.rmtree(base, ignore_errors=True)
        print(f"(removed the workspace in {clock() - t:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
