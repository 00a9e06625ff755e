"""Benchmark: an edited rerun of a 10^5 sweep against a full rerun (content-addressed reuse, issue 34).

    nice -n 10 flock /tmp/pwe-bench.lock python bench/reuse_rerun.py [--members 100000] [--cores 2] [--where disk]
    nice -n 10 flock /tmp/pwe-bench.lock python bench/reuse_rerun.py --keys [--members 1000000] [--src TREE]

``--keys``: in one process, what the keys and what they lend cost a member (issue 45's
table; issue 47's parts): every key made at once, with and without its parts; each made
as its member is handed to a pilot (``KeyRing.fix``); lending each as it ends
(``lending.jsonl``); the end's record (``reusable.keys``, ``reusable.parts``,
``reusable.json``) and reading it back; the bytes each holds a member; and, where the
tree has it, ``pwe plan --explain``'s naming of a change for every member
(:class:`pwe.runstate.rerun_why.Why`). ``--src TREE``: import pwe from another source
tree (a ``git worktree`` of an earlier commit: the "before" column).

A workflow of one node ``sim`` of N members (``true``) and a node ``post`` matched on its
parameter (N more), under one runs root. First run: everything (the lending run). Then:

- **edited rerun**: the range widened by 1% and nothing else changed: the new 1% of
  ``sim`` and of ``post`` run, the rest is reused (its keys computed, the earlier run's
  signed record verified and looked up, the ``reused`` records journaled when the run
  begins);
- **full rerun**: the same edited file with ``--fresh`` (what pwe did before reuse: run
  every member again).

For each: the wall time of the whole ``pwe run`` (imports, planning, the reuse decision,
the members, the record written at the end), the members that ran (``end`` records of the
journal), and the time ``pwe plan --json`` takes to say how many would be reused. Prints a
Markdown table for bench/BENCHMARKS.md.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from common import measure, parser, place, pwe_env
import sys

ENV = pwe_env()

WF = """\
name: rerunbench
nodes:
  sim:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: "true"
  post:
    after: [sim]
    parameters: {{i: {{range: [0, {n}]}}}}
    run: "true"
"""


def ran(run_dir: Path) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from pwe.runstate.journal import unpack

    n = 0
    with open(run_dir / "journal.jsonl", "rb") as fh:
        for line in fh:
            n += sum(1 for r in unpack(json.loads(line)) if r["e"] == "end")
    return n


KEYS_WF = """\
name: keysbench
properties: {{v: "1"}}
nodes:
  sim:
    parameters: {{i: {{range: [0, {n}]}}}}
    inputs: [data.txt]
    env: {{FOO: "{foo}"}}
    run: "true {{{{ v }}}}"
"""


def keys_costs(n: int, src: Path | None) -> None:
    """The in-process table of ``--keys`` (see the module's docstring), printed as Markdown."""
    import os
    import time

    sys.path.insert(0, str(src or Path(__file__).resolve().parent.parent))
    from pwe.base.states import DONE
    from pwe.planning import reuse
    from pwe.planning.placement import plan_for_hosts
    from pwe.runstate import reusable
    from pwe.runstate.keyring import KeyRing
    from pwe.runstate.lending import FILE, Lending
    from pwe.runstate.state import RunState

    parts = hasattr(reuse, "Parts")
    top = Path(tempfile.mkdtemp(prefix="reuse-keys-", dir="/dev/shm"))
    rows = []

    def row(what: str, t0: float, extra: str = "") -> None:
        took = time.perf_counter() - t0
        rows.append((what, f"{took:.2f} s ({took / n * 1e6:.2f} µs a member){extra}"))
    try:
        (top / "data.txt").write_text("data\n")
        wf = top / "wf.yaml"
        wf.write_text(KEYS_WF.format(n=n, foo="1"))
        plan = plan_for_hosts(str(wf), {})[0]
        t0 = time.perf_counter()
        reuse.keys(plan, top)
        row("every key made at once (`reuse.keys`: a run's start)", t0)
        if parts:
            t0 = time.perf_counter()
            reuse.keys(plan, top, parts=reuse.Parts())
            row("every key and its parts at once (`reuse.keys(parts=)`: `pwe plan --explain`)", t0)
        run_dir = top / "run"
        run_dir.mkdir()
        (run_dir / "secret").write_text(os.urandom(16).hex())
        os.chmod(run_dir / "secret", 0o600)
        ring = KeyRing(plan, run_dir, str(top))
        ring.open()
        t0 = time.perf_counter()
        for i in range(n):
            ring.fix("sim", i)
            if i % 5000 == 4999:
                ring.flush()
        ring.flush()
        row("each key made as its member is assigned (`KeyRing.fix`), written every 5,000", t0)
        state = RunState(plan)
        ns = state.nodes["sim"]
        ns.state[:] = bytes([DONE]) * n
        lend = Lending(run_dir, plan, "r1", str(top), ring)
        t0 = time.perf_counter()
        for i in range(n):
            lend.done("sim", i)
            if i % 2000 == 1999:
                lend.flush(state)
        lend.flush(state)
        lend.close()
        size = (run_dir / FILE).stat().st_size
        row("lending each member as it ends (`Lending.done` + a flush every 2,000)", t0,
            f"; `lending.jsonl` {size / n:.1f} bytes a member")
        t0 = time.perf_counter()
        got = reusable.read(run_dir, "keysbench")
        assert not isinstance(got, str), got
        row("reading `lending.jsonl` back (a killed run's record)", t0)
        os.unlink(run_dir / FILE)
        t0 = time.perf_counter()
        if parts:
            reusable.write(run_dir, plan, state, "r1", str(top), recorded=ring.filled, parts=ring)
        else:
            reusable.write(run_dir, plan, state, "r1", str(top), recorded=ring.filled)
        files = {f: (run_dir / f).stat().st_size for f in ("reusable.json", "reusable.keys", "reusable.parts")
                 if (run_dir / f).exists()}
        row("the end's record (`reusable.write`, the keyring's keys)", t0,
            "; " + ", ".join(f"`{f}` {b / n:.2f} bytes a member" for f, b in files.items()))
        t0 = time.perf_counter()
        got = reusable.read(run_dir, "keysbench")
        assert not isinstance(got, str), got
        row("reading the end's record back (`reusable.read`: a later run's start)", t0)
        if parts:
            from pwe.runstate.rerun_why import Why

            (top / "runs").mkdir()
            os.rename(run_dir, top / "runs" / "r1")
            (top / "runs" / "r1" / "run.json").write_text("{}")
            wf.write_text(KEYS_WF.format(n=n, foo="2"))  # (one change: every member runs again)
            plan = plan_for_hosts(str(wf), {})[0]
            found, _ = reusable.lenders(top / "runs", "keysbench")
            t0 = time.perf_counter()
            why = Why(plan, str(top), found)
            named = why.node("sim")["changes"]
            row("naming the change of every member (`Why(...).node`: `pwe plan --explain`)", t0,
                f": {named[0]['count']:,} x {named[0]['reason']!r}")
        from resource import RUSAGE_SELF, getrusage

        print(f"{n:,} members of one node (`true`, one input, one env variable), in one process; "
              f"tree {src or 'this one'}; peak RSS {getrusage(RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB\n")
        print("| what | cost |")
        print("|---|---|")
        for what, cost in rows:
            print(f"| {what} | {cost} |")
    finally:
        shutil.rmtree(top, ignore_errors=True)


def main() -> None:
    ap = parser(__doc__, repeat=None, members=100_000, cores=2, where="disk")
    ap.add_argument("--keys", action="store_true", help="the in-process costs of keys, parts and lending")
    ap.add_argument("--src", type=Path, default=None, help="(--keys) import pwe from this source tree")
    args = ap.parse_args()
    if args.keys:
        keys_costs(args.members, args.src)
        return
    n = args.members
    top = Path(tempfile.mkdtemp(prefix="reuse-rerun-", dir=place(args.where)))
    try:
        runs = top / "runs"
        wf = top / "wf.yaml"
        wf.write_text(WF.format(n=n))
        py = sys.executable
        rows = []

        def go(name: str, *extra: str) -> None:
            took, rss, _ = measure([py, "-m", "pwe", "run", wf, "--cores", str(args.cores), "--run-dir",
                                    runs / name, "--json", *extra], env=ENV, cwd=top)
            rows.append((name, took, ran(runs / name), rss))

        go("first")
        wf.write_text(WF.format(n=n + n // 100))
        plan_took, plan_rss, out = measure([py, "-m", "pwe", "plan", wf, "--reuse-from", runs, "--json",
                                            "--members", "0"], env=ENV, cwd=top, out=True)
        counts = {nd["id"]: (nd["reused"], nd["run"]) for nd in json.loads(out)["nodes"]}
        go("edited", "--reuse-from", str(runs))
        go("full (--fresh)", "--fresh")
        total = 2 * (n + n // 100)
        print(f"{n:,}-member sweep (x2 nodes), widened by 1% to {total:,} members; {args.cores} slots; "
              f"run directories on {args.where}\n")
        print("| run | wall | members run | engine peak RSS |")
        print("|---|---|---|---|")
        for name, took, count, rss in rows:
            print(f"| {name} | {took:.1f} s | {count:,} | {rss / 1024:.0f} MiB |")
        print(f"\n`pwe plan --json` of the edited file: {plan_took:.2f} s (peak RSS {plan_rss / 1024:.0f} MiB); "
              f"reused / run per node: {counts}")
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
