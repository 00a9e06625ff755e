"""Core-hours saved by right-sizing (issue 33, item 4): one sweep of members with
spread-out memory use, first with a blanket memoryPerMember, then with the one that
`pwe status --usage` suggested from the first run.

The sweep: MEMBERS members, each allocating and touching its memory, then sleeping
SECONDS (so that the machine's own two cores are not what limits them): every
``--every``-th uses BIG MB, the rest SMALL MB. The host is this machine, declared as one
node of CORES cores and NODE_MB MB (``memory_per_node``: the pilot packs members by
memoryPerMember), so a blanket request of BLANKET MB lets NODE_MB // BLANKET members run at
once on the node's cores. The second run asks what the first run's usage document
suggests (p99 peak RSS + 20 %, rounded up). Each figure: members at once (the usage
document's packing), the pilot's span (first member's start to last end, the pilot's
own clock) and the core-hours the pilot held (CORES x span); the median of --repeat
rounds, each round one run of each (the suggestion taken again from each round's first run).

    flock /tmp/pwe-bench.lock python bench/rightsize.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_ends, pilot_span, place, parser, pwe_env, timed_run, write_json  # noqa: E402

HOSTS = """\
hosts:
  box:
    protocol: local
    cores_per_node: {cores}
    memory_per_node: {node_mb}
"""

WF = """\
name: rightsize-bench
nodes:
  sweep:
    parameters: {{i: {{range: [0, {members}]}}}}
    run: >-
      python3 -c "import time; n = ({big} if {{{{ i }}}} % {every} == {last} else {small}) << 20;
      b = bytearray(n); b[::4096] = b'x' * len(range(0, n, 4096)); time.sleep({seconds})"
    scheduling: {{memoryPerMember: {ask}, maxWallTimePerMember: 30}}
"""


def usage(run_dir: Path, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-m", "pwe", "status", run_dir, "--usage", "--json"], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["nodes"]["sweep"]


def one(root: Path, name: str, ask: int, a: argparse.Namespace, env: dict) -> dict:
    wf = root / f"{name}.yaml"
    wf.write_text(WF.format(members=a.members, big=a.big, small=a.small, every=a.every, last=a.every - 1,
                            seconds=a.seconds, ask=ask))
    run_dir = root / name
    wall = timed_run([wf, "--hosts", root / "hosts.yaml", "--host", "box", "--run-dir", run_dir], env)
    check_ends(run_dir, a.members)
    u = usage(run_dir, env)
    span = pilot_span(run_dir)
    return {"ask_mb": ask, "members_at_once": u["packing"]["members_per_node_asked"], "span_s": span, "wall_s": wall,
            "core_hours_held": a.cores * span / 3600, "suggested_mb": u["suggested"]["memoryPerMember"],
            "p99_rss_mb": u["rss_mb"]["p99"], "max_rss_mb": u["rss_mb"]["max"], "covers": u["suggested"]["covers"]}


def main() -> None:
    ap = parser(__doc__, repeat=3, members=48, cores=8, where="tmpfs", json_out=True)
    ap.add_argument("--node-mb", type=int, default=2048, help="memory_per_node of the host (default 2048)")
    ap.add_argument("--blanket", type=int, default=1024, help="the blanket memoryPerMember, MB (default 1024)")
    ap.add_argument("--small", type=int, default=16, help="MB most members use (default 16)")
    ap.add_argument("--big", type=int, default=192, help="MB every --every-th member uses (default 192)")
    ap.add_argument("--every", type=int, default=8, help="one member in this many is big (default 8)")
    ap.add_argument("--seconds", type=float, default=1.0, help="each member's sleep (default 1.0)")
    a = ap.parse_args()
    env = pwe_env()
    rounds: list[tuple[dict, dict]] = []
    for _ in range(a.repeat):
        root = Path(tempfile.mkdtemp(prefix="rightsize-", dir=place(a.where)))
        try:
            (root / "hosts.yaml").write_text(HOSTS.format(cores=a.cores, node_mb=a.node_mb))
            blanket = one(root, "blanket", a.blanket, a, env)
            sized = one(root, "suggested", blanket["suggested_mb"], a, env)
            rounds.append((blanket, sized))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    med = {arm: {k: statistics.median(r[i][k] for r in rounds) for k in rounds[0][i]}
           for i, arm in enumerate(("blanket", "suggested"))}
    b, s = med["blanket"], med["suggested"]
    print(f"{a.members} members on one node of {a.cores} cores, {a.node_mb} MB; every {a.every}th uses {a.big} MB, "
          f"the rest {a.small} MB, each {a.seconds} s; median of {a.repeat}")
    print(f"{'':<10} {'memoryPerMember':>15} {'at once':>8} {'pilot span s':>13} {'core-h held':>12} "
          f"{'p99 RSS MB':>11} {'covers':>7}")
    for arm, r in med.items():
        print(f"{arm:<10} {r['ask_mb']:>15,.0f} {r['members_at_once']:>8.0f} {r['span_s']:>13.2f} "
              f"{r['core_hours_held']:>12.4f} {r['p99_rss_mb']:>11.1f} {r['covers']:>7.1%}")
    saved = b["core_hours_held"] - s["core_hours_held"]
    print(f"saved: {saved:.4f} core-hours ({saved / b['core_hours_held']:.0%} of the blanket run's)")
    write_json(a.json, {"rounds": rounds, "median": med, "saved_core_hours": saved})


if __name__ == "__main__":
    main()
