"""Benchmark: members shorter than their launch cost, grouped (``group:``) against not.

    flock /tmp/pwe-bench.lock flock /tmp/pwe-slurm.lock \
        python bench/groups.py [--members 4000] [--size 250] [--repeat 3] [--host local|cluster|llemu|both]

Each run is a fresh `python -m pwe run` process; the figures are members / wall seconds
of the whole command, and members / (first member start -> last member end) from the
pilots' own events. Payload `true`. On ``cluster`` (the test services' SLURM, through
``examples/hosts.yaml``) the pilot is a batch job, whose engine keeps only about two
members per core queued at the pilot (so that other pilots may take the rest): a member
shorter than the engine -> pilot round trip leaves its slot idle until the next one
comes; a group hands a slot ``--size`` members at once. ``llemu``: the same batch-pilot
path through the LoadLeveler command-level emulator of tests/llemu (a 2-core allocation
here, no SLURM needed). On ``local`` the pilot is given
a deep queue and grouping should change little. After each run the script checks from
the journal that every member ended with exit status 0 (and, grouped, that the tasks
went as groups).
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from pathlib import Path

from common import ROOT, check_ends, parser, pilot_span, pwe_env, timed_run


def workflow(d: Path, members: int, size: int | None) -> Path:
    p = d / "bench.yaml"
    group = f"    group: {{maximum_size: {size}}}\n" if size else ""
    p.write_text(f"name: bench\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {members}]}}}}\n    run: 'true'\n"
                 f"    scheduling: {{maxWallTime: 10}}\n{group}")
    return p


def check(run_dir: Path, members: int, grouped: bool) -> None:
    check_ends(run_dir, members)
    kinds = set()
    for tasks in (run_dir / "pilots").glob("*/tasks.jsonl"):
        for line in open(tasks):
            kinds.add(json.loads(line)["k"])
    assert ("group" in kinds) == grouped and ("task" not in kinds) == grouped, kinds


def one(base: Path, host: str, members: int, size: int | None, env: dict) -> tuple[float, float]:
    d = Path(tempfile.mkdtemp(dir=base))
    wf = workflow(d, members, size)
    run_dir = d / "run"
    if host == "llemu":
        (d / "hosts.yaml").write_text("hosts:\n  ll:\n    protocol: loadleveler\n    cores_per_node: 2\n"
                                      "    max_nodes: 1\n")
        args = ["--host", "ll"]
        env = dict(env, PATH=f"{ROOT / 'tests' / 'llemu'}:{env['PATH']}", LLEMU_DIR=str(d / "llemu"))
    elif host == "cluster":
        args = ["--host", host, "--hosts", str(ROOT / "examples" / "hosts.yaml")]
    else:
        args = ["--cores", "2"]
    wall = timed_run([wf, "--run-dir", run_dir, *args], env, cwd=d)
    check(run_dir, members, bool(size))
    return wall, pilot_span(run_dir)


def main() -> None:
    ap = parser(__doc__, repeat=3, members=4000)
    ap.add_argument("--size", type=int, default=250)
    ap.add_argument("--host", default="both", choices=["local", "cluster", "llemu", "both"])
    a = ap.parse_args()
    env = pwe_env()
    hosts = ["local", "cluster"] if a.host == "both" else [a.host]
    base = Path(tempfile.mkdtemp(prefix="pwe-bench-groups-"))
    print(f"{a.members} x `true`, groups of {a.size}; medians of {a.repeat}")
    print("| host | members | wall (s) | members/s whole command | members/s first start -> last end |")
    print("|---|---|---|---|---|")
    try:
        for host in hosts:
            for size in (None, a.size):
                runs = [one(base, host, a.members, size, env) for _ in range(a.repeat)]
                wall = statistics.median(r[0] for r in runs)
                sp = statistics.median(r[1] for r in runs)
                label = f"grouped ({a.size})" if size else "one by one"
                print(f"| {host} | {label} | {wall:.2f} | {a.members / wall:,.0f} | {a.members / sp:,.0f} |",
                      flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
