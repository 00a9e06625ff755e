"""What a container (ch-run) and environment modules (Lmod) cost a member, against a bare one.

Three runs of N members each (``true``) on this machine with 2 slots: bare, inside a
charliecloud directory image built here from busybox-static, and with one Lmod module
loaded (through a tree written here). Each run's wall time from ``pwe run`` start to end,
and per member (wall x slots / N). One run each, one machine: see BENCHMARKS.md.

    .venv/bin/python bench/env_cost.py [--members 500]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOTS = 2


def image(where: Path) -> None:
    for d in ("bin", "dev", "proc", "sys", "tmp", "etc", "home"):
        (where / d).mkdir(parents=True, exist_ok=True)
    (where / "etc" / "passwd").write_text("")
    (where / "etc" / "group").write_text("")
    shutil.copy2("/bin/busybox", where / "bin" / "busybox")
    for tool in ("sh", "true"):
        os.symlink("busybox", where / "bin" / tool)


def run(where: Path, extra: str, n: int, env: dict) -> float:
    wf = where / "wf.yaml"
    wf.write_text(f"name: cost\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {n}]}}}}\n    reuse: false\n"
                  f"    run: 'true'\n{extra}")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--cores", str(SLOTS), "--run-dir",
                           str(where / f"run-{time.time_ns()}")], cwd=where, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=500)
    n = ap.parse_args().members
    with tempfile.TemporaryDirectory(prefix="pwe-env-cost-") as d:
        where = Path(d)
        image(where / "img")
        tree = where / "modulefiles" / "testmod"
        tree.mkdir(parents=True)
        (tree / "1.0.lua").write_text('setenv("PWE_TESTMOD", "loaded")\n')
        rows = [("bare", run(where, "", n, {})),
                ("ch-run", run(where, "    container: {image: ./img, runtime: charliecloud}\n", n, {})),
                ("modules", run(where, "    modules: [testmod/1.0]\n", n, {"MODULEPATH": str(where / "modulefiles")}))]
    base = rows[0][1]
    print(f"{n} members, {SLOTS} slots")
    for name, dt in rows:
        each, more = dt * SLOTS / n * 1000, (dt - base) * SLOTS / n * 1000
        print(f"{name:8s} {dt:7.2f} s   {each:6.1f} ms a member   {more:+6.1f} ms against bare")


if __name__ == "__main__":
    main()
