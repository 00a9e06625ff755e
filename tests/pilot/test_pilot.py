"""The pilot with real processes: walltime draining and hand-back, through the engine too."""

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers import ROOT, read_journal, wait_for

ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def events(d: Path) -> list[dict]:
    return [json.loads(l) for l in (d / "events.jsonl").read_text().splitlines()]


def task(d: Path, m: int, cmd: str, wall=None, **kw) -> dict:
    return {"k": "task", "n": "a", "m": m, "a": 1, "cmd": cmd, "cwd": str(d / "m" / str(m)), "env": {},
            "ranks": 1, "threads": 1, "wall": wall, **kw}


def test_walltime_hands_back_what_cannot_finish_and_drains_before_the_end(tmp_path):
    d = tmp_path / "pilot"
    d.mkdir()
    tasks = [task(d, 0, "true"), task(d, 1, "sleep 0.2", wall=10), task(d, 2, "sleep 60"),
             task(d, 3, "sleep 0.1", wall=0.01)]
    (d / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    t0 = time.time()
    # a 5 s allocation, stopping 2.5 s before its end
    proc = subprocess.run([sys.executable, "-m", "pilot", "--dir", str(d), "--slots", "4", "--walltime",
                           str(5 / 60), "--margin", "2.5", "--heartbeat", "1"], env=ENV, timeout=120)
    took = time.time() - t0
    assert proc.returncode == 0
    ev = events(d)
    by = {(e["k"], e.get("m")) for e in ev}
    assert ("end", 0) in by and ("end", 3) in by  # short members ran
    back = {e["m"]: e["why"] for e in ev if e["k"] == "back"}
    assert "needs 10 min" in back[1]  # never started: cannot fit
    assert ("start", 1) not in by
    assert back[2] == "the allocation ended while it ran"  # stopped at end - margin, handed back
    assert ("end", 2) not in by
    assert any(e["k"] == "drain" for e in ev)
    assert ev[-1]["k"] == "down" and ev[-1]["why"] == "walltime"
    assert took < 60  # (left at its walltime; a busy machine may start it late)
    up = ev[0]
    assert up["k"] == "up" and up["end"] and up["nodes"]


def test_engine_gives_handed_back_members_to_the_next_pilot_without_spending_attempts(tmp_path):
    from pwe.engine.loop import Engine
    from pwe.observe.results import load_state

    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(
        "name: drain\nnodes:\n  a:\n    parameters: {i: {range: [0, 12]}}\n"
        f"    run: sleep 0.5; echo $PWE_MEMBER $PWE_ATTEMPT >> {ledger}\n"
    )
    # every pilot lives 3 s and stops 1.5 s before that: members get handed back mid-run
    eng = Engine.create(wf, cores=2, run_dir=tmp_path / "run",
                        pilot_args=["--walltime", str(3 / 60), "--margin", "1.5"])
    assert eng.run() is True
    _, st = load_state(tmp_path / "run")
    ns = st.nodes["a"]
    assert ns.counts[4] == 12 and not ns.failures
    lines = ledger.read_text().split()
    done = Counter(lines[0::2])
    assert sorted(done) == sorted(str(i) for i in range(12)) and set(done.values()) == {1}
    journal = read_journal(tmp_path / "run")
    pilots = [r["p"] for r in journal if r["e"] == "pilot"]
    assert len(pilots) >= 2, "no pilot ran out of walltime"
    assert any(r["e"] == "unassign" and "allocation" in (r.get("why") or "") for r in journal)


def test_the_pilot_never_takes_the_same_attempt_of_a_member_twice(tmp_path):
    """An engine whose journal lost an assignment may send the same task again: the pilot
    runs it once and says so in pilot.log. An attempt it handed back it may take again."""
    d = tmp_path / "pilot"
    d.mkdir()
    ledger = tmp_path / "ledger"
    run = f"echo $PWE_MEMBER $PWE_ATTEMPT >> {ledger}"
    again = [task(d, 0, run, env={"PWE_MEMBER": "0", "PWE_ATTEMPT": "1"}),
             task(d, 0, run, env={"PWE_MEMBER": "0", "PWE_ATTEMPT": "1"}),
             {**task(d, 0, run, env={"PWE_MEMBER": "0", "PWE_ATTEMPT": "2"}), "a": 2},
             {**task(d, 0, run, env={"PWE_MEMBER": "0", "PWE_ATTEMPT": "1"}), "a": 1},  # an older attempt
             {"k": "stop"}]
    (d / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in again))
    log = open(d / "pilot.log", "wb")
    proc = subprocess.run([sys.executable, "-m", "pilot", "--dir", str(d), "--slots", "1"], env=ENV, timeout=120,
                          stderr=log)
    assert proc.returncode == 0
    # each attempt once (a second attempt goes ahead of what the pilot holds: pilot/intake.py)
    assert sorted(ledger.read_text().split()) == ["0", "0", "1", "2"]
    assert sorted(ledger.read_text().splitlines()) == ["0 1", "0 2"]
    said = (d / "pilot.log").read_text()
    assert said.count("task a[0] attempt 1 ignored: this pilot took attempt") == 2, said
    ev = events(d)
    assert sorted((e["k"], e["a"]) for e in ev if e["k"] in ("start", "end")) == [("end", 1), ("end", 2),
                                                                                   ("start", 1), ("start", 2)]


def _pids_cgroup(name: str, most: int) -> Path | None:
    """A real pids cgroup allowing ``most`` tasks (cgroup v1's pids hierarchy, or v2's root
    with the pids controller on); None where the kernel gives none this process may make."""
    for base, ok in ((Path("/sys/fs/cgroup/pids"), lambda b: (b / "pids.max").exists() or (b / "tasks").exists()),
                     (Path("/sys/fs/cgroup"), lambda b: "pids" in (b / "cgroup.subtree_control").read_text().split())):
        try:
            if not base.is_dir() or not ok(base):
                continue
            cg = base / name
            cg.mkdir()
            (cg / "pids.max").write_text(str(most))
            return cg
        except OSError:
            continue
    return None


def _removed(cg: Path) -> bool:
    try:
        cg.rmdir()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("spawners", [0, 1], ids=["pilot", "spawner"])
def test_a_node_at_its_limit_of_processes_hands_members_back_and_fails_none(tmp_path, spawners):
    """A node's limit of processes (a real pids cgroup: pids.max = the engine, the pilot, its
    guardian and two members, for a pilot of four slots). A spawn the node refuses (EAGAIN)
    is not the member's fault: it goes back, no attempt spent, and the pilot starts nothing
    more until a member ends. Before, each such member failed ("cannot start: Resource
    temporarily unavailable"). Every member is done, each as its first attempt. The same
    when the pilot's members are spawned by a local spawner (pilot/spawners.py: a pilot of
    many slots), one process more."""
    cg = _pids_cgroup(f"pwe-test-{os.getpid()}-{time.monotonic_ns()}", 5 + spawners)
    if cg is None:
        pytest.skip("the kernel gives this process no pids cgroup it may make (cgroup v1 or v2)")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: limit\nnodes:\n  a:\n    parameters: {i: {range: [0, 16]}}\n    run: sleep 0.3\n"
                  "  b:\n    after: [a]\n    run: 'true'\n")
    run = tmp_path / "run"
    try:
        proc = subprocess.run(["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$0" "$@"', sys.executable, "-m", "pwe",
                               "run", "--fresh", str(wf), "--cores", "4", "--run-dir", str(run)],
                              cwd=tmp_path, env=dict(ENV, PWE_SPAWNERS=str(spawners)), capture_output=True, text=True,
                              timeout=180)
    finally:
        wait_for(lambda: _removed(cg), 30, "the cgroup's tasks to be gone with the run")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(subprocess.run([sys.executable, "-m", "pwe", "show", str(run), "--json"], env=ENV,
                                      capture_output=True, text=True, timeout=60).stdout)
    assert [(m["state"], m["attempts"]) for m in shown] == [("done", 1)] * 17, shown
    ev = [e for p in (run / "pilots").iterdir() for e in events(p)]
    backs = [e for e in ev if e["k"] == "back"]
    assert backs, "the node's limit was never met: the test proves nothing"
    assert all(e["why"].startswith("could not be started for now: Resource temporarily unavailable") for e in backs)
    assert not [e for e in ev if e["k"] == "end" and e["rc"] != 0]
    log = "".join((p / "pilot.log").read_text() for p in (run / "pilots").iterdir())
    assert log.count("cannot start a member now: Resource temporarily unavailable") == 1, log
