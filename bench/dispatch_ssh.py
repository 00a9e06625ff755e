"""Benchmark: the pilot across 4 SSH nodes (network namespaces with their own sshd).

    bash tests/services/setup.sh && python bench/dispatch_ssh.py [--members 1000] [--repeat 3]

One `pwe run` of N members of `true` on a host of 4 nodes x 2 cores reached over ssh
(the pilot runs here and launches every member with ssh to its node). Reported:
members/s of the whole command, and the per-member overhead: the mean time from the
pilot starting a member to reaping it (for `true` that is all launcher cost: ssh
connection, remote shell, exec).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import clock, parser, pilot_events, pwe_env


def main() -> None:
    ap = parser(__doc__, repeat=3, members=1000)
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="pwe-ssh-bench-"))
    (d / "hosts.yaml").write_text(
        "hosts:\n  four:\n    cores_per_node: 2\n    nodes: [pwe-n1, pwe-n2, pwe-n3, pwe-n4]\n"
        "    ssh_config: /var/tmp/pwe-ssh/ssh_config\n")
    wf = d / "wf.yaml"
    wf.write_text(f"name: ssh\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {args.members}]}}}}\n    run: 'true'\n")
    env = pwe_env()
    rows = []
    for k in range(args.repeat):
        run_dir = d / f"run{k}"
        t0 = clock()
        subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "four", "--run-dir", str(run_dir)],
                       env=env, check=True, capture_output=True, cwd=d)
        wall = clock() - t0
        dts, nodes = [], set()
        for ev in pilot_events(run_dir):
            if ev["k"] == "end":
                assert ev["rc"] == 0, ev
                dts.append(ev["dt"])
            elif ev["k"] == "start":
                nodes.update(ev["nodes"])
        assert len(dts) == args.members and len(nodes) == 4
        rows.append((wall, statistics.mean(dts) * 1000))
        shutil.rmtree(run_dir, ignore_errors=True)
    wall = statistics.median(r[0] for r in rows)
    over = statistics.median(r[1] for r in rows)
    print(f"{args.members} members over 4 ssh nodes x 2 cores: {wall:.2f} s median "
          f"({args.members / wall:.0f} members/s), per-member overhead {over:.1f} ms "
          f"(runs: {', '.join(f'{r[0]:.2f}' for r in rows)})")
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
