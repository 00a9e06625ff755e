"""What capturing a member's stdout and stderr costs its starter, per member (pilot/streams.py).

Two ways, each the starter's own work around one posix_spawn of a member, measured in the
same process, alternated over --repeat rounds:

- files: before output streams (main before issue 34): the child opens ``stdout`` and
  ``stderr`` (O_CREAT|O_TRUNC) in the member's directory; after it is reaped, the directory
  is tidied (three stats, an unlink of each empty file, an rmdir).
- streams: two O_TMPFILE files in node-local scratch dup2'd onto 1 and 2 (a pair used
  again once the member's process group is gone); after the reap, two fstats, a frame
  appended to the stream when the member printed (two writes: the frame and its index
  record), then the pair emptied for the next member.

Each arm spawns ``--members`` members of a program (``true``: prints nothing; ``echo``:
one line), one at a time, in a run directory on the disk (not tmpfs). What is reported is
the starter's CPU per member (user + system of this process, which includes the spawn
itself: subtract the arms to get the capture's cost) and the wall per member.

    python bench/streams_cost.py --members 3000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pilot.spawn import Spawner, file_actions, make_member_dir, tidy_member_dir  # noqa: E402
from pilot.streams import StreamWriter  # noqa: E402

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
OLD_ACTIONS = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, "stdout", _CREATE, 0o644),
               (os.POSIX_SPAWN_OPEN, 2, "stderr", _CREATE, 0o644)]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def arm_files(root: str, argv: list[str], n: int) -> tuple[float, float]:
    env = dict(os.environ)
    exe = Spawner().resolve(argv[0], env["PATH"])
    c0, t0 = cpu(), time.perf_counter()
    for i in range(n):
        cwd = f"{root}/members/x/{i // 1000}/{i}"
        make_member_dir(cwd)
        os.chdir(cwd)
        pid = os.posix_spawn(exe, argv, env, file_actions=OLD_ACTIONS, setsid=True)
        os.waitpid(pid, 0)
        tidy_member_dir(cwd)
    return (cpu() - c0) / n, (time.perf_counter() - t0) / n


def arm_streams(root: str, argv: list[str], n: int, scratch: str) -> tuple[float, float]:
    env = dict(os.environ)
    exe = Spawner().resolve(argv[0], env["PATH"])
    pilot = f"{root}/pilots/p1"
    os.makedirs(pilot, exist_ok=True)
    w = StreamWriter(pilot, "out-pilot", scratch=scratch)
    c0, t0 = cpu(), time.perf_counter()
    for i in range(n):
        cwd = f"{root}/members/x/{i // 1000}/{i}"
        make_member_dir(cwd)  # (as today: workdir decides whether a member has a directory)
        os.chdir(cwd)
        fds = w.capture()
        pid = os.posix_spawn(exe, argv, env, file_actions=file_actions(fds), setsid=True)
        os.waitpid(pid, 0)
        w.keep("x", i, 1, (*fds, pid))
        tidy_member_dir(cwd)
    w.close()
    return (cpu() - c0) / n, (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".bench"))
    ap.add_argument("--scratch", default=tempfile.gettempdir())
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    here = os.getcwd()
    for label, argv in (("true", ["true"]), ("echo", ["echo", "a line of output"])):
        got: dict[str, list[tuple[float, float]]] = {"files": [], "streams": []}
        for _ in range(a.repeat):
            for arm in ("files", "streams"):
                root = tempfile.mkdtemp(dir=a.dir, prefix=f"{arm}-")
                if arm == "files":
                    got[arm].append(arm_files(root, argv, a.members))
                else:
                    got[arm].append(arm_streams(root, argv, a.members, a.scratch))
                os.chdir(here)
                os.system(f"rm -rf {root}")
        for arm, runs in got.items():
            c = statistics.median(x[0] for x in runs) * 1e6
            w = statistics.median(x[1] for x in runs) * 1e6
            print(f"{label:5s} {arm:8s} starter CPU {c:7.1f} us/member  wall {w:7.1f} us/member "
                  f"[{min(x[0] for x in runs) * 1e6:.0f}-{max(x[0] for x in runs) * 1e6:.0f}]")
        d = (statistics.median(x[0] for x in got["streams"]) - statistics.median(x[0] for x in got["files"])) * 1e6
        print(f"{label:5s} streams - files: {d:+.1f} us of the starter's CPU per member")


if __name__ == "__main__":
    main()
