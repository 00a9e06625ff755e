"""Exactly once when a pilot dies, whoever started the member (issue 45, part 6).

On a node of 8 slots or more the pilot's members are started by local spawners
(pilot/spawners.py), not by the pilot: they are the spawners' children, not the pilot's,
so its guardian (pilot/guardian.py) does not collect them. A spawner that lost its pilot
used to kill its members at once: one killed in the instant after its last effect (its
result written) ran again, as its next attempt: completed twice (3 tries in 11 of the
kill -9 sweep at 8 slots with both cores busy). Now a spawner that lost its pilot gives
its members the same grace as the guardian, writes their ends signed into the pilot's
directory, and the pilot's guardian waits for it; the engine takes those ends, and runs
again only what was killed.

Each test reads the members' own ledger (a file outside the run directory).
"""

import os
import random
import subprocess
import sys

import pytest

from helpers import ROOT, kill_pilot, ledger_counts, let_time_pass, read_journal, wait_for

ENV = dict(os.environ, PYTHONPATH=str(ROOT))

#: a member that records its end, then lingers before it exits: a kill in that span is a
#: kill after its last effect
LINGER_WF = """\
name: linger
properties: {{ledger: {ledger}}}
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; sleep {work};
      echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; sleep {linger}
"""


def _start(tmp_path, cores: int, n: int, work: float, linger: float, host: str = ""):
    """`pwe run` of LINGER_WF in the background, on ``cores`` local slots or on ``host``."""
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LINGER_WF.format(ledger=ledger, n=n, work=work, linger=linger))
    run_dir = tmp_path / "run"
    where = ["--host", host] if host else ["--cores", str(cores)]
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), *where, "--run-dir", str(run_dir)],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return ledger, run_dir, proc


def _ends(ledger) -> int:
    try:
        return ledger.read_bytes().count(b"end ")
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("cores", [8, 64])
def test_members_of_a_killed_pilots_spawners_that_ended_their_work_are_not_run_again(tmp_path, cores):
    """The pilot (8 or 64 slots: its members started by spawners) is killed -9 while every
    running member has written its end and lingers before it exits. Each ends in the grace
    and is recorded with that end: none runs again."""
    n = cores * 2
    ledger, run_dir, proc = _start(tmp_path, cores, n, 0.2, 2.0)
    try:
        events = run_dir / "pilots" / "p1" / "events.jsonl"
        # every member of the first wave has written its end and lingers
        wait_for(lambda: _ends(ledger) >= cores, what="the first wave's ends")
        assert (run_dir / "pilots" / "p1" / "spawner-0.log").exists(), "the pilot started no spawner"
        kill_pilot(events)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    twice = sorted(k for k, c in ends.items() if c > 1)
    assert not twice, f"members that completed twice: {twice[:10]}"
    assert set(ends) == {("a", str(i)) for i in range(n)}
    recs = read_journal(run_dir)
    by_orphans = [r for r in recs if r["e"] == "note" and "p1" in r.get("what", "") and "died" in r.get("what", "")]
    assert by_orphans, "no member's end came from the dead pilot's files"


@pytest.mark.parametrize("cores", [8, 64])
def test_pilot_with_spawners_killed_at_random_moments_no_member_completes_twice(tmp_path, cores):
    """A sweep of short members at 8 and 64 slots; the pilot killed -9 at random moments,
    several times. From the members' own ledger: every member completed, none twice."""
    n, kills = cores * 40, 4
    ledger, run_dir, proc = _start(tmp_path, cores, n, 0.2, 0.02)
    rng = random.Random()
    try:
        for k in range(1, kills + 1):
            events = run_dir / "pilots" / f"p{k}" / "events.jsonl"
            wait_for(lambda ev=events, want=(k - 1) * n // (kills + 2): ev.exists()
                     and b'"k":"end"' in ev.read_bytes() and _ends(ledger) >= want, what=f"pilot p{k}")
            let_time_pass(rng.uniform(0.0, 0.5), "a random moment of the pilot's work")
            kill_pilot(events)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    twice = sorted(k for k, c in ends.items() if c > 1)
    assert not twice, f"members that completed twice: {twice[:10]}"
    assert set(ends) == {("a", str(i)) for i in range(n)}


def _four_nodes(tmp_path) -> None:
    from helpers import ssh_hosts_yaml

    ssh_hosts_yaml(tmp_path)


def _children(pid: int) -> list[tuple[int, bytes]]:
    """(pid, command line) of each child of ``pid`` (the test's look: the pilot's own ssh
    clients, found from its pid, not by a pattern over every process)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
                if ppid == pid:
                    with open(f"/proc/{name}/cmdline", "rb") as fh:
                        out.append((int(name), fh.read()))
            except (OSError, ValueError, IndexError):
                continue
    return out


def test_members_on_other_nodes_that_ended_their_work_when_the_pilot_died_are_not_run_again(ssh_nodes, tmp_path):
    """Four ssh nodes, 8 slots; the pilot is killed -9 while every running member has
    written its end and lingers: each node agent lost its pilot, gives its members the
    grace, writes their ends into the pilot's directory; none runs again."""
    _four_nodes(tmp_path)
    n = 16
    ledger, run_dir, proc = _start(tmp_path, 0, n, 0.2, 2.0, host="four")
    try:
        wait_for(lambda: _ends(ledger) >= 8, what="the first wave's ends")
        kill_pilot(run_dir / "pilots" / "p1" / "events.jsonl")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    assert not sorted(k for k, c in ends.items() if c > 1), f"members that completed twice: {ends}"
    assert set(ends) == {("a", str(i)) for i in range(n)}
    assert list((run_dir / "pilots" / "p1").glob("orphans-node-*.jsonl")), "no node agent wrote its members' ends"


def test_a_node_agents_session_killed_its_members_that_ended_their_work_are_not_run_again(ssh_nodes, tmp_path):
    """The ssh session of the agent on pwe-n1 is killed (-9 of its ssh client) while its
    members have written their ends and linger: the agent gives them the grace and writes
    their ends; the pilot waits for that word before it runs anything again: none runs
    twice, and the pilot goes on."""
    _four_nodes(tmp_path)
    n = 16
    ledger, run_dir, proc = _start(tmp_path, 0, n, 0.2, 2.0, host="four")
    try:
        events = run_dir / "pilots" / "p1" / "events.jsonl"
        wait_for(lambda: _ends(ledger) >= 8, what="the first wave's ends")
        import json

        pilot = json.loads(events.read_text().splitlines()[0])["pid"]
        ssh = [pid for pid, argv in _children(pilot) if b"pwe-n1" in argv and b"pilot.nodeagent" in argv]
        assert len(ssh) == 1, _children(pilot)
        os.kill(ssh[0], 9)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    assert not sorted(k for k, c in ends.items() if c > 1), f"members that completed twice: {ends}"
    assert set(ends) == {("a", str(i)) for i in range(n)}


#: LINGER_WF on the four-node SLURM cluster: the same lines, and where each member ran
#: ("on HOST MEMBER", after its end, before it lingers)
SLURM_LINGER_WF = """\
name: linger
properties: {{ledger: {ledger}}}
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; sleep {work};
      echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; echo "on $(hostname) $PWE_MEMBER" >> {{{{ ledger }}}};
      sleep {linger}
"""


def _start_slurm4(tmp_path, slurm4, n: int, work: float, linger: float):
    """`pwe run` of SLURM_LINGER_WF on the host slurm4 (one pilot job over the four nodes,
    an `srun --overlap` node agent on each other node), in the background."""
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(SLURM_LINGER_WF.format(ledger=ledger, n=n, work=work, linger=linger))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--host", "slurm4", "--hosts",
                             str(slurm4.hosts), "--run-dir", str(run_dir)], cwd=tmp_path, env={**ENV, **slurm4.env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    return ledger, run_dir, proc


def _lingering_on(ledger) -> set[str]:
    """The hosts where some member has written its end (and lingers, or did)."""
    try:
        return {w[1] for w in (line.split() for line in ledger.read_text().splitlines()) if w and w[0] == "on"}
    except FileNotFoundError:
        return set()


def _up_pilot(run_dir) -> tuple:
    """(events file, pid) of the run's newest pilot that is up (its first line `up`)."""
    import json

    for events in sorted((run_dir / "pilots").glob("p*/events.jsonl"), key=lambda e: -int(e.parent.name[1:])):
        first = events.read_bytes().split(b"\n", 1)[0]
        if first.strip():
            return events, json.loads(first)["pid"]
    return None


def _agents_of(pilot: int) -> dict[str, int]:
    """node -> pid of the pilot's `srun ... pilot.nodeagent` client for that node (its children)."""
    out = {}
    for pid, argv in _children(pilot):
        if b"pilot.nodeagent" in argv:
            for word in argv.split(b"\0"):
                if word.startswith(b"--nodelist="):
                    out[word.split(b"=", 1)[1].decode()] = pid
    return out


def test_slurm_pilot_killed_members_on_other_nodes_that_ended_their_work_are_not_run_again(slurm4, tmp_path):
    """One pilot job over the four-node SLURM cluster; the pilot process is killed -9 while
    the members of the first wave, on every node, have written their ends and linger. Its
    `srun` clients live on (the guardian waits for them) and close their agents' stdin:
    each agent gives its members the grace and writes their ends; none runs again, all end,
    the run finishes (a new pilot job runs the rest)."""
    n = 16
    ledger, run_dir, proc = _start_slurm4(tmp_path, slurm4, n, 0.5, 2.0)
    try:
        wait_for(lambda: _ends(ledger) >= 6, timeout=180, what="the first wave's ends")
        events, pilot = wait_for(lambda: _up_pilot(run_dir), what="the pilot's up")
        agents = _agents_of(pilot)
        assert len(agents) >= 2, _children(pilot)
        wait_for(lambda: _lingering_on(ledger) & set(agents), what="a member lingering on an agent's node")
        kill_pilot(events)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    assert not sorted(k for k, c in ends.items() if c > 1), f"members that completed twice: {ends}"
    assert set(ends) == {("a", str(i)) for i in range(n)}
    assert list(events.parent.glob("orphans-node-*.jsonl")), "no node agent wrote its members' ends"


def test_slurm_node_agents_srun_killed_slurm_kills_its_step_and_only_the_members_it_killed_run_again(slurm4,
                                                                                                 tmp_path):
    """The `srun` client of one node agent (a child of the pilot) is killed -9 while that
    node's members have written their ends and linger. SLURM ends the agent's step at once:
    slurmstepd SIGKILLs its every process, the agent and the members it forked (no SIGTERM,
    no KillWait, no end of stdin first: seen with Slurm 22.05, see pilot/nodeagent.py), so no
    agent can give them a grace: killed before they exited, they run again, as after a
    node's death. What holds: only members SLURM killed there run again, every member ends,
    the run records each done once and finishes. (Passes on 645585e too: this is SLURM's
    behaviour, not the grace's.)"""
    n = 16
    ledger, run_dir, proc = _start_slurm4(tmp_path, slurm4, n, 0.5, 2.0)
    try:
        wait_for(lambda: _ends(ledger) >= 6, timeout=180, what="the first wave's ends")
        events, pilot = wait_for(lambda: _up_pilot(run_dir), what="the pilot's up")
        agents = _agents_of(pilot)
        assert len(agents) >= 2, _children(pilot)
        node = sorted(wait_for(lambda: _lingering_on(ledger) & set(agents),
                               what="a member lingering on an agent's node"))[0]
        os.kill(agents[node], 9)
        # the members there when it was killed (lingering after their end, or still at work)
        there = {w[2] for w in (line.split() for line in ledger.read_text().splitlines())
                 if w[0] == "on" and w[1] == node}
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    assert set(ends) == {("a", str(i)) for i in range(n)}
    twice = {m for (_, m), c in ends.items() if c > 1}
    journal = read_journal(run_dir)
    # (and those begun there as it was killed: started by the pilot's word, the journal's
    # start, before they could write their own line; SLURM killed them too)
    there |= {str(r["m"]) for r in journal if r["e"] == "start" and r["a"] == 1 and node in (r.get("nodes") or ())}
    assert twice <= there, f"members run again that SLURM did not kill on {node}: {twice - there}"
    back = {str(r["m"]) for r in journal if r["e"] == "unassign" and f"node {node}" in str(r.get("why"))}
    assert twice <= back, (twice, back)
    done = [r["m"] for r in journal if r["e"] == "end" and r.get("rc") == 0]
    assert sorted(done) == list(range(n)), done
