"""CPU seconds the pilot and the engine spend on the same work, for two source trees
(what the message bus costs each process per member; CPU time, so usable where wall
time is not: on a machine shared with other work).

    python bench/bus_cpu.py OLD_TREE NEW_TREE [--repeat 3]

pilot: an in-process PilotAgent given 3,000 x `true` (tasks signed where the tree signs);
engine: an in-process Engine running 5,000 x `true` (its pilot a subprocess, not counted).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = r'''
import os, resource, shutil, sys
root, what = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
os.environ["PYTHONPATH"] = root
from pilot import wire
base = f"/dev/shm/pwe-bus-cpu-{os.getpid()}"
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
try:
    if what == "pilot":
        from pilot.agent import PilotAgent
        d = f"{base}/pilots/p1"; os.makedirs(d)
        secret = b"ab" * 32
        open(f"{base}/secret", "wb").write(secret); os.chmod(f"{base}/secret", 0o600)
        tasks = [{"k": "task", "n": "m", "m": i, "a": 1, "cmd": "true", "cwd": f"{base}/members/m/{i // 1000}/{i}",
                  "env": {"PWE_MEMBER": str(i)}, "ranks": 1, "threads": 1, "wall": None} for i in range(3000)]
        tasks.append({"k": "stop"})
        key = wire.channel_key(secret, "p1", False) if hasattr(wire, "channel_key") else None
        open(f"{d}/tasks.jsonl", "wb").write(wire.encode(tasks, key) if key else wire.encode(tasks))
        p = PilotAgent(d, 2, idle_timeout=5)
        t = cpu(); p.run(); print(f"{cpu() - t:.3f}")
    else:
        from pwe.engine.loop import Engine
        os.makedirs(base)
        wf = f"{base}/ab.yaml"
        open(wf, "w").write('name: ab\nnodes:\n  m:\n    parameters: {i: {range: [0, 5000]}}\n    run: "true"\n')
        e = Engine.create(wf, cores=2, run_dir=f"{base}/r")
        t = cpu(); e.run(); print(f"{cpu() - t:.3f}")
finally:
    shutil.rmtree(base, ignore_errors=True)
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for what in ("pilot", "engine"):
        got: dict[str, list[str]] = {"old": [], "new": []}
        for _ in range(args.repeat):
            for tag in ("old", "new"):
                out = subprocess.run([sys.executable, "-c", CHILD, getattr(args, tag), what], capture_output=True,
                                     text=True, check=True).stdout.split()
                got[tag].append(out[-1])
        print(f"{what}: old {', '.join(got['old'])} s; new {', '.join(got['new'])} s")


if __name__ == "__main__":
    main()
