"""Ready members ordered by pressure (issue 14): end to end, through `pwe run`.

Each member appends a line to a ledger as it starts and as it ends; the order is read
from the members' own ledger. One core, so members run one at a time and the ledger's
order is the order they were handed out in. No timings are asserted.
"""

import json
from pathlib import Path

from helpers import run_cli

#: `leaves` (first in the file: FIFO hands them out first; said to be short, 6 s at most)
#: and a chain of three stages (nothing said: 60 s each until one is measured)
CHAIN_WF = """
name: chain
order: {order}
properties: {{ledger: {ledger}}}
nodes:
  leaves:
    parameters: {{i: {{range: [0, 6]}}}}
    scheduling: {{maxWallTimePerMember: 0.1}}
    run: echo "start $PWE_NODE $PWE_MEMBER" >> {{{{ ledger }}}}; sleep 0.05; echo "end $PWE_NODE $PWE_MEMBER" >> {{{{ ledger }}}}
  stage1:
    run: echo "start $PWE_NODE 0" >> {{{{ ledger }}}}; sleep 0.05; echo "end $PWE_NODE 0" >> {{{{ ledger }}}}
  stage2:
    after: [stage1]
    run: echo "start $PWE_NODE 0" >> {{{{ ledger }}}}; sleep 0.05; echo "end $PWE_NODE 0" >> {{{{ ledger }}}}
  stage3:
    after: [stage2]
    run: echo "start $PWE_NODE 0" >> {{{{ ledger }}}}; sleep 0.05; echo "end $PWE_NODE 0" >> {{{{ ledger }}}}
"""


def starts(ledger: Path) -> list[str]:
    """The nodes of the members in the order they started, from the ledger."""
    return [line.split()[1] for line in ledger.read_text().splitlines() if line.startswith("start ")]


def run_chain(tmp_path: Path, order: str) -> list[str]:
    ledger = tmp_path / f"ledger-{order}"
    wf = tmp_path / f"chain-{order}.yaml"
    wf.write_text(CHAIN_WF.format(order=order, ledger=ledger))
    rc, out, err = run_cli("run", wf, "--cores", "1", "--run-dir", tmp_path / f"run-{order}", cwd=tmp_path)
    assert rc == 0, err
    got = starts(ledger)
    assert sorted(got) == sorted(["leaves"] * 6 + ["stage1", "stage2", "stage3"]), got  # each once
    return got


def test_pressure_starts_the_long_chain_before_the_leaves_and_fifo_does_not(tmp_path):
    pressure = run_chain(tmp_path, "pressure")
    # the chain's pressure (3 stages, 180 s) beats a leaf's (6 s): each stage goes to the core
    # as soon as it is ready, before any leaf (the pilot is not handed leaves meanwhile); stage1
    # measured (0.05 s), stage2 and stage3 still count 60 s each
    assert pressure[:3] == ["stage1", "stage2", "stage3"], pressure
    fifo = run_chain(tmp_path, "fifo")
    # first in first out: the leaves, ready first (first in the file), run first
    assert fifo[:6] == ["leaves"] * 6, fifo
    assert fifo.index("stage1") == 6, fifo


TWO_WF = """
name: remembers
properties: {{ledger: {ledger}}}
nodes:
  quick:
    run: echo "start $PWE_NODE 0" >> {{{{ ledger }}}}
  slow:
    run: echo "start $PWE_NODE 0" >> {{{{ ledger }}}}; sleep 0.5
"""


def test_an_earlier_runs_durations_order_the_next_run(tmp_path):
    """Two independent one-member nodes, nothing known: a tie, so the file's order (quick
    first). The run records each node's mean under the run root; the next run of the same
    workflow knows slow takes longer and starts it first."""
    ledger = tmp_path / "ledger"
    wf = tmp_path / "remembers.yaml"
    wf.write_text(TWO_WF.format(ledger=ledger))
    rc, _, err = run_cli("run", wf, "--cores", "1", cwd=tmp_path)
    assert rc == 0, err
    assert starts(ledger) == ["quick", "slow"]
    (first,) = (tmp_path / "pwe-runs").iterdir()
    durations = first / "durations.json"
    assert durations.stat().st_mode & 0o777 == 0o600
    means = {n: v["mean"] for n, v in json.loads(durations.read_text())["nodes"].items()}
    assert means["slow"] > means["quick"], means
    ledger.unlink()
    rc, _, err = run_cli("run", wf, "--cores", "1", "--fresh", cwd=tmp_path)  # (run again: not reused)
    assert rc == 0, err
    assert starts(ledger) == ["slow", "quick"]


def test_plan_shows_the_order_and_each_nodes_pressure(tmp_path):
    wf = tmp_path / "chain.yaml"
    wf.write_text(CHAIN_WF.format(order="pressure", ledger=tmp_path / "l"))
    rc, out, err = run_cli("plan", wf, "--json", cwd=tmp_path)
    assert rc == 0, err
    plan = json.loads(out)
    assert plan["order"] == "pressure"
    by_node = {r["node"]: r["pressure_s"] for r in plan["pressure"]}
    assert by_node["stage1"] > by_node["stage2"] > by_node["stage3"] > by_node["leaves"] == 6
    assert [r["node"] for r in plan["pressure"]][0] == "stage1"


def test_queues_pass_over_held_nodes_and_keep_their_places(tmp_path):
    """ReadyQueue (fifo) and PressureQueue hand out the first member of a node not held
    back this feed, and the members passed over stay where they were."""
    from pwe.planning.plan import plan_workflow
    from pwe.runstate.pressure import Pressure, PressureQueue
    from pwe.runstate.readyqueue import ReadyQueue

    wf = tmp_path / "chain.yaml"
    wf.write_text(CHAIN_WF.format(order="pressure", ledger=tmp_path / "l"))
    plan = plan_workflow(wf)
    fifo = ReadyQueue()
    fifo.append_run("leaves", 0, 3)
    fifo.append_run("stage1", 0, 1)
    assert fifo.pop_next({"leaves"}) == ("stage1", 0)
    assert fifo.pop_next({"leaves"}) is None
    assert [fifo.pop_next() for _ in range(3)] == [("leaves", 0), ("leaves", 1), ("leaves", 2)]
    press = PressureQueue(Pressure(plan))
    press.append_run("leaves", 0, 3)
    press.append_run("stage3", 0, 1)
    press.append_run("stage1", 0, 1)
    assert press.pop_next() == ("stage1", 0)  # the highest pressure, whatever came first
    assert press.pop_next({"stage3"}) == ("leaves", 0)
    press.appendleft(("leaves", 0))
    assert list(press) == [("stage3", 0), ("leaves", 0), ("leaves", 1), ("leaves", 2)]
    assert len(press) == 4 and press
    while press:
        press.popleft()
    assert press.pop_next() is None and not press
