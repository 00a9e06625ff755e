"""Local spawners (pilot/spawners.py) with real processes: members started by spawner
children of the pilot run once each, report their exit status and rusage, and are still
killed on cancel, timeout, a pilot killed -9, and a spawner killed -9.

Each member writes its own ledger line as it starts (with its pid and its parent's) and
as it ends, so the tests prove from the members themselves what ran, where, and how often.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from helpers import ROOT, wait_for

from pilot.spawn import pid_alive
from pilot.spawners import SLOTS_PER_SPAWNER, spawner_count

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
ENV.pop("PWE_SPAWNERS", None)


def events(d: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()]
    except FileNotFoundError:
        return []


def member(d: Path, m: int, ledger: Path, sleep: float, wall=None) -> dict:
    cmd = f"echo start $PWE_MEMBER $$ $PPID >> {ledger}; sleep {sleep}; echo end $PWE_MEMBER >> {ledger}"
    return {"k": "task", "n": "a", "m": m, "a": 1, "cmd": cmd, "cwd": str(d / "m" / str(m)),
            "env": {"PWE_MEMBER": str(m)}, "ranks": 1, "threads": 1, "wall": wall}


def pilot(d: Path, tasks: list[dict], slots: int = 4, spawners: int = 2, stop: bool = True) -> subprocess.Popen:
    d.mkdir(exist_ok=True)
    lines = [json.dumps(t) + "\n" for t in tasks] + (['{"k":"stop"}\n'] if stop else [])
    (d / "tasks.jsonl").write_text("".join(lines))
    return subprocess.Popen([sys.executable, "-m", "pilot", "--dir", str(d), "--slots", str(slots), "--spawners",
                             str(spawners), "--heartbeat", "1"], env=ENV, stderr=open(d / "pilot.log", "ab"),
                            start_new_session=True)


def ledger_lines(ledger: Path) -> list[list[str]]:
    return [ln.split() for ln in ledger.read_text().splitlines()] if ledger.exists() else []


def test_how_many_spawners():
    assert spawner_count(2) == 0 and spawner_count(SLOTS_PER_SPAWNER - 1) == 0  # few slots: the pilot alone
    assert spawner_count(16, cores=2) == 2 and spawner_count(17, cores=2) == 3  # one per 8 slots on few cores
    assert spawner_count(8, cores=2) == 1 and spawner_count(16, cores=8) == 2
    assert spawner_count(16, cores=16) == 4 and spawner_count(64, cores=64) == 16  # one per 4 with cores for them
    assert spawner_count(200, cores=256) == 16  # (MAX_SPAWNERS)
    assert spawner_count(2, asked=2) == 2 and spawner_count(64, asked=0) == 0


def test_spawners_start_every_member_once_and_report_rusage(tmp_path):
    d, ledger = tmp_path / "p", tmp_path / "ledger"
    proc = pilot(d, [member(d, m, ledger, 0.05) for m in range(40)])
    assert proc.wait(timeout=60) == 0
    ev = events(d)
    up = ev[0]
    ends = [e for e in ev if e["k"] == "end"]
    assert sorted(e["m"] for e in ends) == list(range(40))
    assert all(e["rc"] == 0 and isinstance(e["cpu"], float) and e["rss"] > 0 for e in ends)
    starts = [ln for ln in ledger_lines(ledger) if ln[0] == "start"]
    assert Counter(ln[1] for ln in starts) == Counter(str(m) for m in range(40))  # each once
    parents = {int(ln[3]) for ln in starts}
    assert up["pid"] not in parents and len(parents) == 2  # started by the two spawners, not the pilot
    # each member's start is on disk before the member runs: every start precedes its end
    order = [(e["k"], e.get("m")) for e in ev]
    assert all(order.index(("start", m)) < order.index(("end", m)) for m in range(40))
    assert ev[-1]["k"] == "down" and ev[-1]["why"] == "stop"
    wait_for(lambda: not any(pid_alive(p) for p in parents), 10, "spawners to leave with the pilot")


def test_cancel_and_timeout_reach_members_through_spawners(tmp_path):
    d, ledger = tmp_path / "p", tmp_path / "ledger"
    tasks = [member(d, m, ledger, 60) for m in range(3)] + [member(d, 3, ledger, 60, wall=0.02)]
    proc = pilot(d, tasks, stop=False)
    wait_for(lambda: any(e["k"] == "end" and e["m"] == 3 for e in events(d)), 30, "the timeout")
    end3 = next(e for e in events(d) if e["k"] == "end" and e["m"] == 3)
    assert end3["reason"] == "walltime" and end3["rc"] == -signal.SIGTERM
    assert end3["why"] == "ran past its maxWallTimePerMember of 0.02 min", end3
    pids = [int(ln[2]) for ln in ledger_lines(ledger) if ln[0] == "start" and ln[1] != "3"]
    assert len(pids) == 3 and all(pid_alive(p) for p in pids)
    with open(d / "tasks.jsonl", "a") as fh:
        fh.write('{"k":"cancel"}\n')
    assert proc.wait(timeout=30) == 0
    assert not any(pid_alive(p) for p in pids)
    ends = {e["m"]: e for e in events(d) if e["k"] == "end"}
    assert all(ends[m]["why"] == "cancelled" for m in range(3))
    assert not [ln for ln in ledger_lines(ledger) if ln[0] == "end"]  # none of them finished
    assert events(d)[-1]["why"] == "cancel"


def test_a_pilot_killed_9_leaves_no_member_running(tmp_path):
    d, ledger = tmp_path / "p", tmp_path / "ledger"
    proc = pilot(d, [member(d, m, ledger, 60) for m in range(4)], stop=False)
    wait_for(lambda: len(ledger_lines(ledger)) == 4, 30, "four members to start")
    pids = [int(ln[2]) for ln in ledger_lines(ledger)]
    spawners = {int(ln[3]) for ln in ledger_lines(ledger)}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # the spawners see their stdin close and kill their members' process groups
    wait_for(lambda: not any(pid_alive(p) for p in pids + list(spawners)), 15, "members and spawners to end")


def test_a_spawner_killed_9_has_its_members_run_again_elsewhere(tmp_path):
    d, ledger = tmp_path / "p", tmp_path / "ledger"
    proc = pilot(d, [member(d, m, ledger, 1.5) for m in range(4)])
    wait_for(lambda: len(ledger_lines(ledger)) == 4, 30, "four members to start")
    first = ledger_lines(ledger)
    victim = int(first[0][3])
    lost = [int(ln[2]) for ln in first if int(ln[3]) == victim]
    os.kill(victim, signal.SIGKILL)
    assert proc.wait(timeout=60) == 0
    assert not any(pid_alive(p) for p in lost)  # killed, not left running beside their second run
    lines = ledger_lines(ledger)
    ends = Counter(ln[1] for ln in lines if ln[0] == "end")
    assert ends == Counter(str(m) for m in range(4))  # every member finished exactly once
    again = {ln[1] for ln in first if int(ln[3]) == victim}
    starts = Counter(ln[1] for ln in lines if ln[0] == "start")
    assert all(starts[m] == 2 for m in again) and again
    ev_ends = [e for e in events(d) if e["k"] == "end"]
    assert sorted(e["m"] for e in ev_ends) == list(range(4)) and all(e["rc"] == 0 for e in ev_ends)
    assert "ended unexpectedly" in (d / "pilot.log").read_text()


def test_the_pilot_alone_reports_rusage_too(tmp_path):
    """Below 8 slots the pilot starts and reaps members itself: its end carries the same
    cpu and rss, from wait4. A member that burns CPU shows it."""
    d, ledger = tmp_path / "p", tmp_path / "ledger"
    burn = {**member(d, 1, ledger, 0), "cmd": "python3 -c 'sum(range(3000000))'"}
    proc = pilot(d, [member(d, 0, ledger, 0.01), burn], slots=2, spawners=0)
    assert proc.wait(timeout=60) == 0
    ends = {e["m"]: e for e in events(d) if e["k"] == "end"}
    assert ends[0]["rc"] == 0 and ends[1]["rc"] == 0
    assert all(isinstance(e["cpu"], float) and e["rss"] > 0 for e in ends.values())
    assert ends[1]["cpu"] > ends[0]["cpu"]
    starts = [ln for ln in ledger_lines(ledger) if ln[0] == "start"]
    assert [int(ln[3]) for ln in starts] == [events(d)[0]["pid"]]  # started by the pilot itself
