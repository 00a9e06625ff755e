"""The cost of enforcing memoryPerMember (pilot/memwatch.py), per member, A/B.

    python bench/memwatch.py --members 3000 --cores 2 --repeat 5 [--running 64] [--json F]

Part 1, per member: an in-process PilotAgent given the same --members x `true` (the same
sweep of short members) on --cores slots, three arms alternated by common.interleave,
each a fresh interpreter: none (no task has a ``mem``), watch (every task has ``mem``
512, PWE_NO_CGROUPS=1: the member's RSS looked at), cgroup (``mem`` 512, a cgroup of its
own; only where the kernel gives this process a memory cgroup it may write). The figures
are the pilot's CPU seconds and the wall seconds of its loop; the cost per member is
(arm - none) / members.

Part 2, the calls alone: MemoryWatch.attach + ended per member (500 members of `sleep
0.01`), and per running member: --running members of `sleep` held to a limit, and the CPU
of one sweep over them (MemoryWatch.sweep: the watch reads each one's /proc tree; the
cgroup arm reads each one's oom counter), the median of 5 rounds of 200 sweeps; the pilot sweeps
every memwatch.EVERY s. Then the same sweep over members that carry their marker (the
watch looks for what left their trees: /proc listed, a new pid's environment read once),
and the first such sweep, which reads every process's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from common import ROOT, interleave, parser, pwe_env, summary, write_json

CHILD = r'''
import json, os, resource, shutil, sys, time
from pilot import wire
from pilot.agent import PilotAgent
members, slots, mem = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
base = f"/dev/shm/pwe-memwatch-{os.getpid()}"
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
try:
    d = f"{base}/pilots/p1"; os.makedirs(d)
    tasks = [dict({"k": "task", "n": "m", "m": i, "a": 1, "cmd": "true", "cwd": f"{base}/members/m/{i // 1000}/{i}",
                   "env": {"PWE_MEMBER": str(i)}}, **({"mem": mem} if mem else {})) for i in range(members)]
    tasks.append({"k": "stop"})
    open(f"{d}/tasks.jsonl", "wb").write(wire.encode(tasks))
    p = PilotAgent(d, slots, idle_timeout=5)
    t, w = cpu(), time.perf_counter()
    p.run()
    ends = [json.loads(l) for l in open(f"{d}/events.jsonl") if '"k":"end"' in l]
    assert len(ends) == members and all(e["rc"] == 0 for e in ends), ends[:3]
    print(json.dumps({"cpu": cpu() - t, "wall": time.perf_counter() - w}))
finally:
    shutil.rmtree(base, ignore_errors=True)
'''


def arm(members: int, slots: int, mem: int, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(members), str(slots), str(mem)], env=env,
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"the pilot arm failed: {out.stderr[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def sweep_cost(running: int, cgroup: bool, marked: bool = False) -> float:
    """CPU seconds of one MemoryWatch.sweep over ``running`` limited `sleep` members (the median
    of 5 rounds of 200 sweeps). ``marked``: each member started with its marker (PWE_RUN_ID,
    PWE_NODE, PWE_MEMBER, PWE_ATTEMPT, as the pilot starts them), so that the watch looks
    for the processes that left its tree (memwatch.Strays: /proc listed, each new pid's
    environment read once); the first sweep, which reads every process's, is left out here
    (:func:`first_sweep`)."""
    sys.path.insert(0, str(ROOT))
    from pilot import memwatch

    os.environ.pop("PWE_NO_CGROUPS", None)
    if not cgroup:
        os.environ["PWE_NO_CGROUPS"] = "1"
    w = memwatch.MemoryWatch()
    procs = [subprocess.Popen(["sleep", "600"], start_new_session=True, env=_marked(i) if marked else None)
             for i in range(running)]
    try:
        for p in procs:
            w.attach(p.pid, p.pid, 512)
        w.sweep(time.time())  # (the first: every process's environment read; first_sweep measures it)
        got = []
        for _round in range(5):  # (200 sweeps a round: the CPU clock's ticks are coarse)
            t = time.process_time()
            for _ in range(200):
                w.due = 0.0
                w.sweep(time.time())
            got.append((time.process_time() - t) / 200)
        return statistics.median(got)
    finally:
        for p in procs:
            p.kill()
            p.wait()
            w.ended(p.pid)
        w.close()


def _marked(i: int) -> dict:
    return dict(os.environ, PWE_RUN_ID="bench-memwatch", PWE_NODE="m", PWE_MEMBER=str(i), PWE_ATTEMPT="1")


def first_sweep(running: int) -> tuple[float, int]:
    """CPU seconds of the first sweep of a watch over ``running`` marked members (every
    process of this machine's environment read once), and how many processes /proc listed."""
    sys.path.insert(0, str(ROOT))
    from pilot import memwatch

    os.environ["PWE_NO_CGROUPS"] = "1"
    procs = [subprocess.Popen(["sleep", "600"], start_new_session=True, env=_marked(i)) for i in range(running)]
    got = []
    try:
        for _round in range(20):
            w = memwatch.MemoryWatch()
            for p in procs:
                w.attach(p.pid, p.pid, 512)
            t = time.process_time()
            w.sweep(time.time())
            got.append(time.process_time() - t)
            w.limits.clear()
        listed = sum(1 for n in os.listdir("/proc") if n.isdigit())
        return statistics.median(got), listed
    finally:
        for p in procs:
            p.kill()
            p.wait()


def attach_cost(n: int, cgroup: bool) -> float:
    """CPU seconds of MemoryWatch.attach + ended per member (the calls alone), over ``n``
    members of `sleep 0.01` started and reaped here."""
    sys.path.insert(0, str(ROOT))
    from pilot import memwatch

    os.environ.pop("PWE_NO_CGROUPS", None)
    if not cgroup:
        os.environ["PWE_NO_CGROUPS"] = "1"
    w = memwatch.MemoryWatch()
    spent = 0.0
    for _ in range(n):
        pid = os.posix_spawn("/bin/sleep", ["sleep", "0.01"], os.environ, setsid=True)
        t = time.process_time()
        w.attach(pid, pid, 512)
        spent += time.process_time() - t
        _, status, use = os.wait4(pid, 0)
        t = time.process_time()
        w.ended(pid, use.ru_maxrss, os.waitstatus_to_exitcode(status))
        spent += time.process_time() - t
    w.close()
    return spent / n


def main() -> None:
    ap = parser(__doc__, repeat=5, members=3000, cores=2, json_out=True)
    ap.add_argument("--running", type=int, default=64, help="members held to a limit in part 2 (default 64)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from pilot.cgroups import find_cgroups

    has_cgroup = find_cgroups() is not None
    env = pwe_env()
    env.pop("PWE_NO_CGROUPS", None)
    arms = {"none": lambda k: arm(a.members, a.cores, 0, env),
            "watch": lambda k: arm(a.members, a.cores, 512, dict(env, PWE_NO_CGROUPS="1"))}
    if has_cgroup:
        arms["cgroup"] = lambda k: arm(a.members, a.cores, 512, env)
    got = interleave(arms, a.repeat)
    figures: dict = {"members": a.members, "slots": a.cores, "repeat": a.repeat, "cgroup": has_cgroup}
    base_cpu = summary([g["cpu"] for g in got["none"]])["median"]
    base_wall = summary([g["wall"] for g in got["none"]])["median"]
    print(f"{a.members} x `true` on {a.cores} slots, {a.repeat} rounds each (median [min-max])")
    for name, runs in got.items():
        c, w = summary([g["cpu"] for g in runs]), summary([g["wall"] for g in runs])
        per_cpu = (c["median"] - base_cpu) / a.members * 1e6
        per_wall = (w["median"] - base_wall) / a.members * 1e6
        figures[name] = {"cpu": c, "wall": w, "cpu_per_member_us": per_cpu, "wall_per_member_us": per_wall}
        print(f"  {name:7s} pilot CPU {c['median']:.3f} s [{c['min']:.3f}-{c['max']:.3f}]  "
              f"wall {w['median']:.3f} s [{w['min']:.3f}-{w['max']:.3f}]  "
              f"per member vs none: CPU {per_cpu:+.1f} us, wall {per_wall:+.1f} us")
    for name, cg in (("watch", False), ("cgroup", True)):
        if cg and not has_cgroup:
            continue
        per = attach_cost(500, cg)
        figures[f"attach_{name}"] = {"per_member_us": per * 1e6}
        print(f"  attach + ended ({name}), the calls alone: {per * 1e6:.1f} us CPU a member (500 members)")
        s = sweep_cost(a.running, cg)
        figures[f"sweep_{name}"] = {"running": a.running, "cpu_s": s, "per_member_us": s / a.running * 1e6}
        print(f"  one sweep ({name}) over {a.running} running members: {s * 1e3:.2f} ms CPU, "
              f"{s / a.running * 1e6:.1f} us a member (every 0.5 s)")
    s = sweep_cost(a.running, False, marked=True)
    figures["sweep_watch_marked"] = {"running": a.running, "cpu_s": s, "per_member_us": s / a.running * 1e6}
    print(f"  one sweep (watch, marked members: strays looked for) over {a.running} running members: "
          f"{s * 1e3:.2f} ms CPU, {s / a.running * 1e6:.1f} us a member (every 0.5 s)")
    s, listed = first_sweep(a.running)
    figures["first_sweep_marked"] = {"running": a.running, "cpu_s": s, "processes": listed}
    print(f"  the first such sweep (every process's environment read once): {s * 1e3:.2f} ms CPU, "
          f"{listed} processes listed")
    write_json(a.json, figures)


if __name__ == "__main__":
    main()
