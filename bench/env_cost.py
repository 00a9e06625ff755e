"""What a container and environment modules cost a member, against a bare one; for commands
and for Python-function members.

Runs of N members each on this machine with 2 slots:

- commands (``true``): bare; inside a charliecloud directory image built here from
  busybox-static (``ch-run``); inside the same image imported into podman's store (where
  podman and runc are here, with the containers.conf the tests use: tests/images.py); with
  one Lmod module loaded (through a tree written here);
- function members (``python: fns:f``, a function that returns None): bare, and with their
  warm workers inside a charliecloud image of this machine's Python.

Each run's wall time from ``pwe run`` start to end, and per member (wall x slots / N). One
run each, one machine: see BENCHMARKS.md.

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
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # (the tests' image builders: tests/images.py)
from images import PODMAN_CONF, busybox_image, podman_import, python_image  # noqa: E402

SLOTS = 2


def run(where: Path, payload: str, extra: str, n: int, env: dict) -> float:
    wf = where / "wf.yaml"
    wf.write_text(f"name: cost\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {n}]}}}}\n    reuse: false\n"
                  f"    {payload}\n{extra}")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--cores", str(SLOTS), "--run-dir",
                           str(where / f"run-{time.time_ns()}")], cwd=where, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=500)
    n = ap.parse_args().members
    with tempfile.TemporaryDirectory(prefix="pwe-env-cost-") as d:
        where = Path(d)
        busybox_image(where / "img")
        python_image(where / "pyimg")
        (where / "fns.py").write_text("def f(i):\n    return None\n")
        tree = where / "modulefiles" / "testmod"
        tree.mkdir(parents=True)
        (tree / "1.0.lua").write_text('setenv("PWE_TESTMOD", "loaded")\n')
        cmd, fn = "run: 'true'", "python: fns:f"
        rows = [("bare", run(where, cmd, "", n, {})),
                ("ch-run", run(where, cmd, "    container: {image: ./img, runtime: charliecloud}\n", n, {}))]
        if shutil.which("podman") and shutil.which("runc"):
            (where / "containers.conf").write_text(PODMAN_CONF)
            env = {"CONTAINERS_CONF": str(where / "containers.conf")}
            name = podman_import(where / "img", f"localhost/pwe-bench-{uuid.uuid4().hex[:8]}:1", env)
            try:
                rows.append(("podman", run(where, cmd, f"    container: {{image: '{name}', runtime: podman}}\n", n,
                                           env)))
            finally:
                subprocess.run(["podman", "rmi", "-f", name], capture_output=True, env={**os.environ, **env})
        rows.append(("modules", run(where, cmd, "    modules: [testmod/1.0]\n", n,
                                    {"MODULEPATH": str(where / "modulefiles")})))
        rows += [("fn bare", run(where, fn, "", n, {})),
                 ("fn ch-run", run(where, fn, "    container: {image: ./pyimg, runtime: charliecloud}\n", n, {}))]
    print(f"{n} members, {SLOTS} slots")
    base = {False: rows[0][1], True: next(dt for name, dt in rows if name == "fn bare")}
    for name, dt in rows:
        against = base[name.startswith("fn")]
        each, more = dt * SLOTS / n * 1000, (dt - against) * SLOTS / n * 1000
        print(f"{name:10s} {dt:7.2f} s   {each:6.1f} ms a member   {more:+6.1f} ms against bare")


if __name__ == "__main__":
    main()
