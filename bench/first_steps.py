"""Where `pwe run`'s road to its first member goes, step by step, inside the engine's process.

    python bench/first_steps.py [--repeat 5]

Runs `pwe run --fresh` of a 2-member workflow (`true`, 2 cores) in a fresh interpreter that
wraps the steps of the command and prints, in ms from the interpreter's first line: the
pilot's interpreter started (as pwe/cli/front.py starts it), click imported, the engine's
and the planning's modules imported, planning (`plan_for_hosts`), making the run
(`Engine.create`), the order handed to the prestarted pilot (`protocols.warmpilot.hand`);
and when its first member started (the pilot's own record). Every round is a first run of
its file. (The interpreter's own start, before its first line, is `python -c pass`:
bench/ab.py --measure pass.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the wrapped `pwe run`, printing its marks as JSON on stderr's last line
CHILD = r'''
import time
T0 = time.perf_counter()
W0 = time.time()
import importlib, json, sys
marks = {}
def mark(what):
    marks.setdefault(what, round((time.perf_counter() - T0) * 1000, 1))
def wrap(module, attr, label):
    obj = importlib.import_module(module)
    *path, name = attr.split(".")
    for p in path:
        obj = getattr(obj, p)
    f = getattr(obj, name)
    def w(*a, **k):
        mark(label)
        return f(*a, **k)
    setattr(obj, name, w)
import atexit
atexit.register(lambda: print("STEPS " + json.dumps({"t0": W0, **marks}), file=sys.stderr))
sys.argv = ["pwe"] + sys.argv[1:]
import protocols.warmpilot
from pwe.cli.front import pilot_ahead
if pilot_ahead(sys.argv[1:]):  # (as the front door does, first: its second call finds the pilot started)
    protocols.warmpilot.prestart()
mark("pilot started")
import click
mark("click imported")
import pwe.cli.running, pwe.engine.loop, pwe.planning.placement
mark("engine and planning imported")
wrap("pwe.planning.placement", "plan_for_hosts", "planning begins")
wrap("pwe.engine.loop", "Engine.create", "making the run begins")
wrap("pwe.engine.loop", "Engine.run", "the engine runs")
wrap("protocols.warmpilot", "hand", "the pilot gets its order")
from pwe.cli.front import console
console()
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pwe-first-steps-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    rows = []
    for k in range(args.repeat):
        wf = base / f"w{k}.yaml"
        wf.write_text(f"name: w{k}\nnodes:\n  m:\n    parameters: {{i: [1, 2]}}\n    run: 'true'\n")
        run = base / f"run{k}"
        proc = subprocess.run([sys.executable, "-c", CHILD, "run", "--fresh", str(wf), "--cores", "2",
                               "--run-dir", str(run)], cwd=base, env=env, capture_output=True, text=True,
                              timeout=120)
        line = [ln for ln in proc.stderr.splitlines() if ln.startswith("STEPS ")]
        if proc.returncode != 0 or not line:
            raise SystemExit(f"round {k}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        steps = json.loads(line[-1][6:])
        events = [json.loads(ln) for ln in (run / "pilots" / "p1" / "events.jsonl").read_text().splitlines()]
        first = min(e["t"] for e in events if e.get("k") == "start")
        steps["first member starts"] = round((first - steps.pop("t0")) * 1000, 1)
        rows.append(steps)
        print(" | ".join(f"{what} {ms:.0f}" for what, ms in steps.items()))
    print("medians (ms): " + " | ".join(
        f"{what} {sorted(r[what] for r in rows)[len(rows) // 2]:.0f}" for what in rows[0]))


if __name__ == "__main__":
    main()
