"""Benchmark: what the core-hour budget costs the engine (pwe/engine/budget.py).

    python bench/budget_cost.py [--members 1000000] [--repeat 200]

A real plan of two nodes of --members members each with a budget, its state with 200 pilot
records and 100,000 failed attempts, then the three calls the engine makes: ``figures``
(each snapshot, 0.5 s), ``weigh`` (each snapshot) and ``allows`` (each time a lane may
start a pilot); the mean of --repeat calls of each. Nothing per member is added: a run
without a budget calls none of them past a check of an empty dict.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from common import parser

WF = """name: big
budget: {{coreHours: 1000000}}
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: "true"
  b:
    after: [a]
    parameters: {{i: {{range: [0, {n}]}}}}
    run: "true"
"""


def main() -> None:
    args = parser(__doc__, repeat=200, members=1_000_000).parse_args()
    from pwe.engine.loop import Engine
    from pwe.runstate.journal import Journal
    from pwe.runstate.state import RunState

    d = Path(tempfile.mkdtemp(prefix="pwe-budget-"))
    try:
        (d / "wf.yaml").write_text(WF.format(n=args.members))
        e = Engine.create(d / "wf.yaml", run_dir=d / "run", cores=2)
        e.ledger.open(RunState(e.plan), Journal(d / "run" / "journal.jsonl"))
        now = time.time()
        for k in range(200):
            e.ledger.take({"e": "pilot", "p": f"p{k}", "host": "x", "lane": "local", "slots": 32,
                             "t": now - 3600 + k})
        ns = e.state.nodes["a"]
        ns.failures.update((i, 1) for i in range(min(100_000, args.members)))
        ns.spent = 1e6
        lane = next(iter(e.lanes.values()))
        for name, f in (("figures", e.budget.figures), ("weigh", e.budget.weigh),
                        ("allows", lambda: e.budget.allows(lane, 0.0))):
            t0 = time.perf_counter()
            for _ in range(args.repeat):
                f()
            print(f"{name:8} {(time.perf_counter() - t0) / args.repeat * 1e3:.3f} ms a call")
        e.journal.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
