"""`pwe logs RUN node:i` on a run whose pilot streams hold 10^6 members' output.

A real run is made (`pwe run` of a one-member workflow), then 10^6 frames (node `talk`,
members 0..10^6-1, each a line on stdout and one on stderr) are written through the real
writer (pilot/streams.py StreamWriter, as a pilot writes them) into a stream of a pilot
directory of that run; then the real `pwe logs` (a subprocess, as a user runs it) is timed
on members spread over the stream, plain and then sealed (pilot/streams.seal, as the engine
seals a pilot that left). Reported: the writer's rate, the files' sizes, `pwe logs` wall
time (median and worst), and the reader's own time in-process.

    nice -n 10 flock /tmp/pwe-bench.lock python bench/logs_million.py --members 1000000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pilot.streams import Reader, StreamWriter, seal  # noqa: E402


def pwe(*args: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pwe", *args], cwd=cwd, env=env, capture_output=True, timeout=600)
    return time.perf_counter() - t0, p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--dir", default=str(ROOT / ".bench"))
    ap.add_argument("--looks", type=int, default=7)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    top = Path(tempfile.mkdtemp(dir=a.dir, prefix="logs-million-"))
    try:
        (top / "wf.yaml").write_text("name: million\nnodes:\n  talk:\n    run: echo hello\n")
        took, p = pwe("run", "wf.yaml", "--run-dir", "run", cwd=top)
        assert p.returncode == 0, p.stderr
        run = top / "run"
        pilot = run / "pilots" / "p-bench"
        pilot.mkdir()
        w = StreamWriter(str(pilot), "out-pilot", scratch=tempfile.gettempdir())
        n = a.members
        t0 = time.perf_counter()
        for i in range(n):
            w.frame("talk", i, 1, f"line {i}\n".encode(), f"err {i}\n".encode(), 0, 0)
        w.close()
        wrote = time.perf_counter() - t0
        size = (pilot / "out-pilot.stream").stat().st_size
        isize = (pilot / "out-pilot.index").stat().st_size
        print(f"wrote {n:,} frames in {wrote:.1f} s ({n / wrote:,.0f}/s, {wrote / n * 1e6:.1f} us each): "
              f"stream {size / 1e6:.1f} MB ({size / n:.0f} B/frame), index {isize / 1e6:.1f} MB")
        looks = [int(n * k / (a.looks - 1)) for k in range(a.looks)]
        looks[-1] = n - 1
        for phase in ("plain", "sealed"):
            if phase == "sealed":
                t0 = time.perf_counter()
                seal(str(pilot), 0)
                gz = (pilot / "out-pilot.stream.gz").stat().st_size
                print(f"sealed in {time.perf_counter() - t0:.1f} s: {gz / 1e6:.1f} MB ({gz / n:.1f} B/frame)")
            walls = []
            for i in looks:
                took, p = pwe("logs", "run", f"talk:{i}", cwd=top)
                assert p.returncode == 0 and f"line {i}\n".encode() in p.stdout, (i, p.stdout[-300:], p.stderr)
                walls.append(took)
            t0 = time.perf_counter()
            with Reader(str(run / "pilots")) as r:
                for i in looks:
                    frames, bad, unreadable = r.member("talk", i)
                    assert any(f.stdout == f"line {i}\n".encode() for f in frames[1])
            inproc = (time.perf_counter() - t0) / len(looks)
            print(f"{phase}: pwe logs RUN talk:i wall median {statistics.median(walls):.3f} s, worst "
                  f"{max(walls):.3f} s ({len(looks)} members across the stream); the reader alone "
                  f"{inproc * 1e3:.1f} ms a member")
        took, p = pwe("logs", "run", "talk:0", cwd=top)  # (the member that really ran, in its own pilot's stream)
        assert p.returncode == 0 and b"hello" in p.stdout
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import pwe.cli.main"], env={**os.environ, "PYTHONPATH": str(ROOT)},
                       check=True)
        print(f"(python -c 'import pwe.cli.main' alone: {time.perf_counter() - t0:.3f} s)")
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
