"""Real crashes: kill -9 of the engine and of the pilot, and a disk that fills up.

Each test reads the members' own records (a ledger each member appends to) to prove
what ran and how often.
"""

import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import (LEDGER_WF, ROOT, alive, cmdline, count_ends, engine_pid, kill_pilot, ledger_counts,
                      let_time_pass, pilot_pids, read_journal, run_cli, status, tmpfs, wait_for)

ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def pwe(*args, cwd, check=None, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=timeout)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.mark.parametrize("hosts", ["one", "two"])
def test_kill_engine_then_resume_runs_every_member_exactly_once(tmp_path, hosts):
    """With 'two', node b runs on a second host: its own pilot, reattached on resume."""
    ledger = tmp_path / "ledger"
    n = 40
    wf = tmp_path / "wf.yaml"
    text = LEDGER_WF.format(ledger=ledger, n=n, sleep=0.1)
    if hosts == "two":
        (tmp_path / "hosts.yaml").write_text("hosts:\n  other: {protocol: local, cores_per_node: 2}\n")
        text = text.replace("    after: [a]\n", "    after: [a]\n    host: other\n")
        assert "host: other" in text
    wf.write_text(text)
    run_dir = tmp_path / "run"
    pwe("submit", wf, "--cores", "4", "--run-dir", run_dir, cwd=tmp_path, check=0)
    wait_for(lambda: count_ends(run_dir) >= 15, what="15 members to finish")
    engine_pid = json.loads((run_dir / "engine.lock").read_text())["pid"]
    os.kill(engine_pid, signal.SIGKILL)
    killed_at = count_ends(run_dir)
    assert killed_at < 2 * n, "the run finished before the engine could be killed"
    let_time_pass(0.5, "the pilot goes on without the engine meanwhile")
    proc = pwe("resume", run_dir, cwd=tmp_path, check=0)
    assert "80 done of 80" in proc.stdout
    starts, ends = ledger_counts(ledger)
    expected = {(node, str(i)) for node in "ab" for i in range(n)}
    assert set(ends) == expected
    assert all(c == 1 for c in ends.values()), [k for k, c in ends.items() if c > 1]
    assert all(c == 1 for c in starts.values()), "a member that had finished ran again"
    recs = read_journal(run_dir)
    assert [r["e"] for r in recs].count("resume") == 1
    done = {(r["n"], r["m"]) for r in recs if r["e"] == "end" and r["rc"] == 0}
    assert len(done) == 2 * n
    status = json.loads(pwe("status", run_dir, "--json", cwd=tmp_path, check=0).stdout)
    assert status["totals"]["done"] == 2 * n and status["phase"] == "succeeded"
    if hosts == "two":  # each node's members went only to pilots of its own host, before and after
        lanes = {r["p"]: r["lane"] for r in recs if r["e"] == "pilot"}
        for node, host in (("a", "local"), ("b", "other")):
            assert {lanes[r["p"]] for r in recs if r["e"] == "assign" and r["n"] == node} == {host}


RESUME_WF = """\
name: crashy
nodes:
  s:
    parameters: {k: {range: [0, 8]}}
    run: '[ {{ k }} -lt 2 ] || until [ -e {{ gate }} ]; do sleep 0.05; done; echo x >> {{ counts }}/s.$PWE_MEMBER'
  fin:
    after: [s]
    run: echo x >> {{ counts }}/fin
"""


def test_engine_killed_then_resume(tmp_path, write, reaper):
    wf = write(RESUME_WF)
    counts = tmp_path / "counts"
    counts.mkdir()
    run = tmp_path / "run"
    gate = tmp_path / "gate"  # (members 2.. wait for it: the run cannot end before its engine is killed)
    rc, out, err = run_cli("submit", wf, "--set", f"counts={counts}", "--set", f"gate={gate}", "--cores", "2",
                           "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    pid = wait_for(lambda: engine_pid(run), what="an engine.lock after pwe submit")
    wait_for(lambda: any(counts.iterdir()), what="a member to finish")
    reaper(run, *pilot_pids(run))
    assert str(run) in cmdline(pid), "engine.lock does not name this run's engine"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), what="the killed engine to be gone")
    assert not (counts / "fin").exists(), "the run finished before its engine was killed: nothing left to resume"
    assert status(run)["phase"].startswith("stopped"), status(run)
    gate.touch()
    rc, out, err = run_cli("resume", run, cwd=tmp_path, timeout=120)
    assert rc == 0, f"resume after the engine was killed failed:\n{out}\n{err}"
    tally = {p.name: len(p.read_text().splitlines()) for p in counts.iterdir()}
    assert tally == {**{f"s.{i}": 1 for i in range(8)}, "fin": 1}, f"members ran more or less than once: {tally}"
    assert status(run)["phase"] == "succeeded"


def _kill_pilot_while_members_run(tmp_path, n: int, sleep: float, env: dict):
    """`pwe run` of LEDGER_WF (4 cores); kill -9 of its first pilot while members run;
    the run's (process, ledger, run directory) once it has ended."""
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=n, sleep=sleep))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "4", "--run-dir", str(run_dir)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        events = run_dir / "pilots" / "p1" / "events.jsonl"
        wait_for(lambda: events.exists() and b'"k":"up"' in events.read_bytes(), what="the pilot to come up")
        wait_for(lambda: ledger.exists() and ledger.read_text().count("start") > ledger.read_text().count("end"),
                 what="running members")
        kill_pilot(events)
        proc.communicate(timeout=180)
    finally:
        proc.kill()
    return proc, ledger, run_dir


def test_kill_pilot_its_running_members_end_on_their_own_and_not_again(tmp_path):
    """The members a killed pilot left running are given a grace to end on their own
    (pilot/guardian.py): each ends once, as its first attempt, its end from the guardian;
    none runs again (a member killed at once could be killed between its last effect and
    its exit: completed twice)."""
    proc, ledger, run_dir = _kill_pilot_while_members_run(tmp_path, 16, 0.4, ENV)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    starts, ends = ledger_counts(ledger, attempts=True)
    assert set(ends) == {(node, str(i), "1") for node in "ab" for i in range(16)}
    assert all(c == 1 for c in ends.values()) and all(c == 1 for c in starts.values())
    recs = read_journal(run_dir)
    assert [r["p"] for r in recs if r["e"] == "pilot_gone"][0] == "p1"
    assert any(r["e"] == "pilot" and r["p"] == "p2" for r in recs)
    by_guardian = [r for r in recs if r["e"] == "note" and "from the pilot's guardian" in r.get("what", "")]
    assert by_guardian, "no member was running when the pilot was killed"


def test_kill_pilot_members_running_past_the_grace_are_killed_and_run_again(tmp_path):
    """PWE_ORPHAN_GRACE=1, members of 4 s: those running when the pilot is killed are
    killed a second later by its guardian, and run again as their next attempt; no orphan
    of the dead pilot ran on (the first attempt of each has no end)."""
    proc, ledger, run_dir = _kill_pilot_while_members_run(tmp_path, 4, 4, dict(ENV, PWE_ORPHAN_GRACE="1"))
    assert proc.returncode == 0
    starts, ends = ledger_counts(ledger, attempts=True)
    rerun = {(node, i) for node, i, a in starts if a == "2"}
    assert rerun, "no member was running when the pilot was killed"
    for node, i in rerun:
        assert (node, i, "1") not in ends and ends[(node, i, "2")] == 1, (node, i)
    assert {(node, i) for node, i, _ in ends} == {(node, str(i)) for node in "ab" for i in range(4)}
    assert all(c == 1 for c in ends.values())
    recs = read_journal(run_dir)
    killed = {str(r["m"]) for r in recs if r["e"] == "unassign" and r["p"] == "p1" and "its pilot p1 is gone" in
              r.get("why", "") and r.get("a") == 1}
    assert {i for node, i in rerun if node == "a"} <= killed


@pytest.fixture
def small_fs(tmp_path):
    """A real 1 MiB filesystem (tmpfs), to fill up."""
    with tmpfs(tmp_path / "small", "size=1m") as mnt:
        yield mnt


def test_full_disk_stops_cleanly_and_resume_finishes(tmp_path, small_fs):
    n = 60
    wf = tmp_path / "wf.yaml"
    # each member leaves 40 KB in its directory: the 1 MiB filesystem fills up mid-run
    wf.write_text(
        "name: full\nnodes:\n  a:\n    directory: own\n    parameters: {i: {range: [0, %d]}}\n"
        "    run: head -c 40000 /dev/zero > blob || true; echo size=40000 >> \"$PWE_OUTPUTS\" || true\n" % n
    )
    run_dir = small_fs / "run"
    first = pwe("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path)
    assert first.returncode == 3, first.stderr  # stopped, resumable
    assert "Traceback" not in first.stderr
    last = first.stderr.strip().splitlines()[-1]
    assert f"stopped with its state intact: the filesystem of {run_dir.resolve()} is full" in last or \
        f"stopped with its state intact: cannot write {run_dir.resolve()}" in last, last
    assert last.endswith(f"then: pwe resume {run_dir.resolve()}"), last
    recs = read_journal(run_dir)  # every line whole
    done_before = {r["m"] for r in recs if r["e"] == "end" and r["rc"] == 0}
    # free space: the filesystem grows, as after a clean-up or a quota raise
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    second = pwe("resume", run_dir, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    recs = read_journal(run_dir)
    done = {r["m"] for r in recs if r["e"] == "end" and r["rc"] == 0}
    assert done == set(range(n))
    assert done_before <= done
    shown = json.loads(pwe("show", run_dir, "--json", "--limit", "0", cwd=tmp_path, check=0).stdout)
    assert len(shown) == n and all(m["state"] == "done" for m in shown)


def test_a_filesystem_out_of_inodes_at_any_step_is_one_line_and_resume_finishes_each_member_once(tmp_path):
    """An inode quota (the limit HPC filesystems hit first) met at every step of a run in
    turn: a real tmpfs of N inodes, N from 3 up, until a run fits. Wherever the refusal
    comes (making the run directory, its lock, its journal, a pilot's directory, its
    files, the members' directory), `pwe run` says it in one line and no traceback: either
    the run was not made (exit 1, nothing left behind) or it stopped with its state intact
    (exit 3); then, with inodes to spare, `pwe resume` finishes it and the members' own
    ledger shows each of them ran exactly once."""
    n = 40
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: inodes\nnodes:\n  a:\n    parameters: {i: {range: [0, %d]}}\n"
                  '    run: echo "$PWE_MEMBER" >> %s\n' % (n, ledger))
    seen = {}
    for inodes in range(3, 64):
        with tmpfs(tmp_path / "fs", f"size=16m,nr_inodes={inodes}") as mnt:
            ledger.unlink(missing_ok=True)
            run_dir = mnt / "run"
            first = pwe("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path)
            assert "Traceback" not in first.stderr, (inodes, first.stderr)
            seen.setdefault(first.returncode, inodes)
            if first.returncode == 0:
                break
            last = first.stderr.strip().splitlines()[-1]
            assert "No space left on device" in last and "free space" in last, (inodes, last)
            if first.returncode == 1:  # refused before it was made: nothing of it left
                assert last.startswith(f"cannot make the run directory {run_dir}"), (inodes, last)
                assert not run_dir.exists() and not ledger.exists(), inodes
                continue
            assert first.returncode == 3, (inodes, first.returncode, last)
            assert "stopped with its state intact" in last and last.endswith(f"pwe resume {run_dir.resolve()}")
            subprocess.run(["mount", "-o", "remount,nr_inodes=10000", str(mnt)], check=True)
            again = pwe("resume", run_dir, cwd=tmp_path)
            assert again.returncode == 0, (inodes, again.stderr)
            ran = ledger.read_text().split() if ledger.exists() else []
            assert sorted(map(int, ran)) == list(range(n)), (inodes, "members lost or run twice", ran)
    assert seen.get(0) and seen.get(3), f"the sweep never stopped a run with its state intact, or never fit: {seen}"


def start_kill_sweep(tmp_path, n: int, between: str = ""):
    """`pwe run` (in the background, 2 cores) of n short members that write their own ledger
    (start, then ``between``, then end, with member and attempt): (ledger, run dir, process)."""
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(
        f"name: kills\nproperties: {{ledger: {ledger}}}\nnodes:\n  a:\n    parameters: {{i: {{range: [0, {n}]}}}}\n"
        f'    run: echo "start $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; {between}'
        'echo "end $PWE_MEMBER $PWE_ATTEMPT" >> {{ ledger }}\n')
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return ledger, run_dir, proc


def ledger_ends(ledger) -> int:
    """How many ends the members' ledger has (0 before it exists)."""
    try:
        return ledger.read_bytes().count(b"end ")
    except FileNotFoundError:
        return 0


def test_pilot_killed_again_and_again_never_runs_an_attempt_twice(tmp_path):
    """Many short members, 2 at a time; the pilot is killed (-9) five times mid-run. Each
    member's start is on disk as it starts, and the engine ends what a dead pilot left
    running before it hands its members on: from the members' own ledger, no attempt
    of a member started or ended twice, and every member ended."""
    n = 2000
    ledger, run_dir, proc = start_kill_sweep(tmp_path, n)

    def ended() -> int:
        return ledger_ends(ledger)

    try:
        for k, share in enumerate((0.1, 0.25, 0.4, 0.55, 0.7), start=1):
            events = run_dir / "pilots" / f"p{k}" / "events.jsonl"
            wait_for(lambda ev=events, want=share * n: ev.exists() and b'"k":"up"' in ev.read_bytes()
                     and ended() >= want, timeout=120, what=f"pilot p{k} and {share:.0%} of the members")
            kill_pilot(events)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert f"{n} done of {n}" in out
    starts, ends = ledger_counts(ledger, attempts=True)
    assert not [k for k, c in ends.items() if c > 1], "attempts that ended twice"
    assert not [k for k, c in starts.items() if c > 1], "attempts that started twice"
    assert {m for m, _ in ends} == {str(i) for i in range(n)}
    recs = read_journal(run_dir)
    assert [r["p"] for r in recs if r["e"] == "pilot_gone"][:5] == ["p1", "p2", "p3", "p4", "p5"]


def test_members_directory_made_read_only_mid_run_stops_the_run_then_resume_finishes(tmp_path):
    """The run's cause, not the members': no member fails, no attempt is spent; the run
    stops (exit 3) with one line naming the directory; made writable again, `pwe resume`
    finishes it, every member once. Root is not stopped by chmod: a read-only bind mount
    over the members directory does it (files already open keep writing)."""
    n = 400
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(
        f"name: ro\nproperties: {{ledger: {ledger}}}\ndefaults: {{retries: 2}}\nnodes:\n  a:\n    directory: own\n"
        f"    parameters: {{i: {{range: [0, {n}]}}}}\n"
        '    run: echo "start $PWE_MEMBER $PWE_ATTEMPT" >> {{ ledger }}; sleep 0.01; '
        'echo "end $PWE_MEMBER $PWE_ATTEMPT" >> {{ ledger }}\n')
    run_dir = tmp_path / "run"
    members = run_dir / "members"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    mounted = False
    try:
        wait_for(lambda: ledger.exists() and ledger.read_text().count("end") >= 60, what="60 members to end")
        # made read-only aside (where nothing has a file open), then moved over it at once
        stage = tmp_path / "stage"
        stage.mkdir()
        res = subprocess.run(["mount", "--bind", str(members), str(stage)], capture_output=True, text=True)
        if res.returncode != 0:
            proc.kill()
            if os.environ.get("CI"):
                pytest.fail(f"cannot bind-mount: {res.stderr}")
            pytest.skip(f"cannot bind-mount here: {res.stderr.strip()}")
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(stage)], check=True, capture_output=True)
            subprocess.run(["mount", "--move", str(stage), str(members)], check=True, capture_output=True)
            mounted = True
        finally:
            if not mounted:
                subprocess.run(["umount", str(stage)])
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        if mounted:
            subprocess.run(["umount", "-l", str(members)], check=True)
    assert proc.returncode == 3, (out, err)
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert "stopped with its state intact" in last and f"{members.resolve()}" in last and "writable" in last, last
    assert last.endswith(f"then: pwe resume {run_dir.resolve()}"), last
    shown = json.loads(pwe("show", run_dir, "--json", "--limit", "0", cwd=tmp_path, check=0).stdout)
    assert not [m for m in shown if m["state"] == "failed" or m["attempts"] > 1], "the run's cause spent attempts"
    # what the stopped run's pilot still had queued, it hands back before leaving
    wait_for(lambda: not any(alive(p) for p in pilot_pids(run_dir)), what="the stopped run's pilot to leave")
    second = pwe("resume", run_dir, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert f"{n} done of {n}" in second.stdout
    starts, ends = ledger_counts(ledger, attempts=True)
    assert set(ends) == {(str(i), "1") for i in range(n)}, "a member that ended twice, or not at attempt 1"
    assert all(c == 1 for c in ends.values()) and all(c == 1 for c in starts.values())


def test_a_member_handed_back_for_an_unwritable_directory_after_its_start_spends_no_attempt(tmp_path):
    """The pilot writes a member's start before spawning it; if the spawn then finds its
    directory read-only (made a moment before the mount turned), the pilot hands it back
    as the run's cause. That attempt did not happen: the next one is attempt 1 again. A
    member handed back for another reason after it started keeps its attempt."""
    from pwe.planning.plan import plan_workflow
    from pwe.base.states import READY
    from pwe.runstate.state import RunState

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    parameters: {i: [0, 1]}\n    run: 'true'\n")
    st = RunState(plan_workflow(wf))
    for i, why in ((0, "cannot write /r/members/a/0/0: Read-only file system"),
                   (1, "the allocation ended while it ran")):
        assert st.apply({"e": "assign", "n": "a", "m": i, "a": 1, "p": "p1"})
        assert st.apply({"e": "start", "n": "a", "m": i, "a": 1, "p": "p1", "pid": 0})
        assert st.apply({"e": "unassign", "n": "a", "m": i, "a": 1, "p": "p1", "why": why})
    ns = st.nodes["a"]
    assert ns.state[0] == READY and ns.attempt[0] == 0
    assert ns.state[1] == READY and ns.attempt[1] == 1


def test_pilot_killed_at_twenty_random_moments_no_member_completes_twice(tmp_path):
    """2,000 short members two at a time, the pilot killed (-9) twenty times at
    random moments. From the members' own ledger: every member completed, and none twice.
    A member that ended as its pilot died, or in the grace its pilot's guardian gives the
    members still running (pilot/guardian.py), is recorded with the end it had, not run
    again; one still running past the grace would be killed and run again as its next
    attempt, which the trace says. (With members killed at once, 1 run in 2 of this test
    with both cores busy had a member killed after its last effect: completed twice.)"""
    import random

    n, kills = 2000, 20
    ledger, run_dir, proc = start_kill_sweep(tmp_path, n, "sleep 0.01; ")
    rng = random.Random()

    def ended() -> int:
        return ledger_ends(ledger)

    try:
        for k in range(1, kills + 1):
            events = run_dir / "pilots" / f"p{k}" / "events.jsonl"
            # (after its first end: three pilots in a row that finish nothing stop the run)
            wait_for(lambda ev=events, want=(k - 1) * n // (kills + 5): ev.exists() and b'"k":"end"' in ev.read_bytes()
                     and ended() >= want, timeout=120, what=f"pilot p{k}")
            let_time_pass(rng.uniform(0.0, 0.3), "a random moment of the pilot's work")
            kill_pilot(events)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    twice = sorted(k for k, c in ends.items() if c > 1)
    assert not twice, f"members that completed twice: {twice[:10]}"
    assert set(ends) == {(str(i),) for i in range(n)}
    recs = read_journal(run_dir)
    assert len([r for r in recs if r["e"] == "pilot_gone"]) >= kills
    rerun = {r["m"] for r in recs if r["e"] == "start" and r["a"] > 1}
    notes = [r for r in recs if r["e"] == "note" and "guardian" in r.get("what", "")]
    assert rerun or notes, "no member was running at any of the kills"
    # the trace: each rerun member's first attempt was lost with its pilot, its second done
    rows = [json.loads(line) for line in pwe("trace", run_dir, "--json", cwd=tmp_path, check=0).stdout.splitlines()]
    first = {r["member"]: r for r in rows if r["attempt"] == 1}
    assert {r["member"] for r in rows if r["attempt"] == 2 and r["state"] == "done"} >= rerun
    for m in rerun:
        assert first[m]["state"] == "lost" and "its pilot" in first[m]["why"], first[m]
    # and the members whose end only the guardian saw (ended as their pilot died, or in
    # the grace it gave them) ended as attempt 1, not run again
    for r in notes:
        m = int(r["what"].split(":")[2].split()[0])
        assert ends[(str(m),)] == 1 and first[m]["state"] == "done"


GONE_WF = """\
name: orphaned
nodes:
  s:
    parameters: {k: {range: [0, 2]}}
    run: echo $$ > {{ pids }}/$PWE_MEMBER.pid; exec sleep 600
"""


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_engine_killed_and_run_directory_removed_its_pilot_ends_its_members_and_leaves(tmp_path, write, reaper, how):
    """kill -9 of the engine, then the run directory removed (or moved away, another made at
    its path): nobody is left to cancel the pilot. It finds its directory gone, ends its
    members and leaves, instead of running them to their walltime and holding its
    allocation until its idle timeout."""
    wf = write(GONE_WF)
    pids = tmp_path / "pids"
    pids.mkdir()
    run = tmp_path / "run"
    rc, out, err = run_cli("submit", wf, "--set", f"pids={pids}", "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    engine = wait_for(lambda: engine_pid(run), what="an engine.lock after pwe submit")
    lines = wait_for(lambda: [p.read_text() for p in pids.iterdir()] if len(list(pids.iterdir())) == 2
                     and all(p.read_text().endswith("\n") for p in pids.iterdir()) else None,
                     what="both members to write their pids")
    members = [int(line) for line in lines]
    pilots = pilot_pids(run)
    reaper(run, engine, *pilots)
    try:
        assert len(pilots) == 1 and alive(pilots[0])
        os.kill(engine, signal.SIGKILL)
        wait_for(lambda: not alive(engine), what="the killed engine to be gone")
        assert all(alive(m) for m in members), "a member ended before its run was removed"
        if how == "removed":
            subprocess.run(["rm", "-rf", str(run)], check=True)
        else:
            os.rename(run, tmp_path / "run.old")
            (run / "pilots" / "p1").mkdir(parents=True)
        wait_for(lambda: not alive(pilots[0]) and not any(alive(m) for m in members), timeout=120,
                 what="the pilot to end its members and leave")
    finally:
        for m in members:
            if alive(m) and "sleep 600" in cmdline(m):
                os.kill(m, signal.SIGKILL)
    if how == "replaced":  # (its log and its last event went where its files went)
        old = tmp_path / "run.old" / "pilots" / "p1"
        assert "this pilot's run is gone; ending its 2 running members and leaving" in (old / "pilot.log").read_text()
        events = [json.loads(line) for line in (old / "events.jsonl").read_text().splitlines()]
        assert [e["why"] for e in events if e["k"] == "down"] == ["gone"]
        # (handed back, not ended: no attempt spent, should the run be resumed where it went)
        assert sorted(e["m"] for e in events if e["k"] == "back" and e["why"] == "its run directory was removed") \
            == [0, 1]
        assert not [e for e in events if e["k"] == "end"]
        assert list((run / "pilots" / "p1").iterdir()) == [], "the pilot wrote into the directory that replaced its own"


def test_a_run_directory_whose_making_was_cut_short_is_said_so_by_every_command(tmp_path):
    """`pwe run` killed -9 between making its run directory (pwe.runstate.rundir.create)
    and writing its run.json leaves the subdirectories and nothing else: nothing of it ran.
    resume, status and cancel say that, and a new `pwe run` there says to remove it; one
    line each, exit status 2, nothing changed."""
    from pwe.runstate import rundir

    run = tmp_path / "half"
    rundir.create(run)  # (what a kill right after it leaves)
    (run / ".run.json.4242.tmp").write_text("{")  # (and a kill inside run.json's atomic write)
    before = sorted(p.name for p in run.iterdir())
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    run: 'true'\n")
    for args in (("resume", run), ("status", run), ("cancel", run)):
        rc, out, err = run_cli(*args, cwd=tmp_path)
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, (args, rc, err)
        assert err.startswith(f"{run}: a run directory whose making was cut short (it has no run.json"), err
        assert err.rstrip().endswith("remove it and run again"), err
    rc, out, err = run_cli("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 2 and err.count("\n") == 1 and "its making cut short" in err and "remove it" in err, (rc, err)
    assert sorted(p.name for p in run.iterdir()) == before


def test_a_run_directory_on_a_full_disk_is_one_line_and_nothing_is_left(tmp_path):
    """A disk full of bytes (a real 4 KiB tmpfs) under a new run: the workflow's copy is
    refused mid-copy. The copy's error names the file read first; the line names the one
    that could not be written, and nothing of the run is left."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: full\nnodes:\n  a:\n    run: 'true'\n" + "# padding\n" * 1200)
    with tmpfs(tmp_path / "fs", "size=4k") as mnt:
        run_dir = mnt / "run"
        proc = pwe("run", wf, "--run-dir", run_dir, cwd=tmp_path)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.strip() == (f"cannot make the run directory {run_dir}: {run_dir}/workflow.yaml: No space left "
                                       "on device: free space (nothing was left behind)"), proc.stderr
        assert list(mnt.iterdir()) == []
