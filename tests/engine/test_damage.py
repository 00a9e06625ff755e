"""A run directory that something went wrong with: two engines racing for it, a damaged
journal, damaged or missing files. Nothing lost, nothing run twice, and never a traceback."""

import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import LEDGER_WF, ROOT, count_ends, ledger_counts, run_cli, wait_for
from pwe.runstate.locks import EngineLock

TRIALS = 200


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _racer(run_dir, barrier, results, name):
    """Take the run's lock at the same moment as the other racer, TRIALS times."""
    for _ in range(TRIALS):
        barrier.wait()  # the stale holder is in place
        lock = EngineLock(Path(run_dir))
        try:
            lock.acquire()
            got = True
        except Exception:
            got = False
        results.put((name, got))
        barrier.wait()  # both have tried: whoever holds it still holds it
        if got:
            lock.release()
        barrier.wait()


def test_two_engines_racing_for_a_stale_lock_never_both_hold_it(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(3)
    results = ctx.Queue()
    racers = [ctx.Process(target=_racer, args=(str(tmp_path), barrier, results, n)) for n in "AB"]
    for p in racers:
        p.start()
    both = none = 0
    try:
        for _ in range(TRIALS):
            # the lock of an engine that died without releasing it (kill -9), on this host
            (tmp_path / "engine.lock").write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname(),
                                                              "since": 0}))
            barrier.wait()
            got = [results.get(timeout=30)[1] for _ in racers]
            both += all(got)
            none += not any(got)
            barrier.wait()
            barrier.wait()
    finally:
        for p in racers:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert both == 0, f"two engines held the lock at once in {both} of {TRIALS} trials"
    assert none == 0, f"neither engine took a stale lock in {none} of {TRIALS} trials"


def test_status_tells_who_holds_the_lock(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from pwe.runstate.locks import EngineLock; "
         "EngineLock(Path(sys.argv[1])).acquire(); print('held', flush=True); time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout.readline().strip() == "held"
        info = EngineLock(tmp_path).holder()
        assert info and info["pid"] == holder.pid and info["host"] == socket.gethostname()
        with pytest.raises(Exception, match=f"pid {holder.pid} on {socket.gethostname()}"):
            EngineLock(tmp_path).acquire()
        # asking, from this process, twice, takes nothing from the holder
        assert EngineLock(tmp_path).holder()["pid"] == holder.pid
        from pwe.observe.runview import status

        (tmp_path / "state.json").write_text('{"nodes": {}, "totals": {}}')
        assert status(tmp_path)["phase"] == "running" and status(tmp_path)["engine"] == {"pid": holder.pid, "host": socket.gethostname()}
    finally:
        holder.kill()
        holder.wait()
    assert EngineLock(tmp_path).holder() is None  # kill -9 frees it: no stale lock to take over
    lock = EngineLock(tmp_path)
    lock.acquire()
    lock.release()


# -- a damaged journal --------------------------------------------------------------------------

def engine_killed_midrun(tmp_path, n=40, sleep=0.1, ends=15):
    """A run of 2 x n members of `sleep` s each whose engine was killed (-9) after `ends` of
    them ended; its pilot runs on. (run_dir, ledger, n)."""
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=n, sleep=sleep))
    run_dir = tmp_path / "run"
    rc, _, err = run_cli("submit", wf, "--cores", "4", "--run-dir", run_dir, cwd=tmp_path)
    assert rc == 0, err
    wait_for(lambda: count_ends(run_dir) >= ends, what=f"{ends} members to end")
    os.kill(json.loads((run_dir / "engine.lock").read_text())["pid"], signal.SIGKILL)
    assert count_ends(run_dir) < 2 * n, "the run finished before its engine was killed"
    return run_dir, ledger, n


def assert_each_attempt_ran_once(ledger, n):
    """From the members' own ledger: every member ended, and no attempt of one ran twice."""
    starts, ends = ledger_counts(ledger, attempts=True)
    twice = sorted(k for k, c in ends.items() if c > 1) + sorted(k for k, c in starts.items() if c > 1)
    assert not twice, f"attempts that ran twice: {twice}"
    assert {(node, m) for node, m, _ in ends} == {(node, str(i)) for node in "ab" for i in range(n)}


def assert_readers_agree(run_dir, tmp_path, n):
    shown = json.loads(run_cli("show", run_dir, "--json", "--limit", "0", cwd=tmp_path)[1])
    assert len(shown) == 2 * n and all(m["state"] == "done" for m in shown)
    snap = json.loads(run_cli("status", run_dir, "--json", cwd=tmp_path)[1])
    assert snap["totals"]["done"] == 2 * n and snap["phase"] == "succeeded", snap


def test_garbage_in_the_middle_of_the_journal_is_skipped_and_nothing_runs_twice(tmp_path):
    run_dir, ledger, n = engine_killed_midrun(tmp_path)
    journal = run_dir / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    # one line of garbage in the middle, and one record of ends (an end, or an ``ends`` of
    # several: pwe/runstate/journal.py) overwritten in place (a bad block)
    lost = next(k for k in range(len(lines) // 3, len(lines)) if lines[k].startswith(b'{"e":"end'))
    lines[lost] = b"\x00" * (len(lines[lost]) - 1) + b"\n"
    lines.insert(len(lines) // 2, b'{"e":"assign","n":"a","m":3,"a":1,"p":"p1\n')
    journal.write_bytes(b"".join(lines))
    rc, out, err = run_cli("resume", run_dir, cwd=tmp_path)
    assert rc == 0, err
    assert f"{2 * n} done of {2 * n}" in out
    assert "Traceback" not in err
    assert_each_attempt_ran_once(ledger, n)
    assert re.search(r"warning: .*journal\.jsonl line \d+ .*skipped", err), err
    assert_readers_agree(run_dir, tmp_path, n)


def test_torn_journal_never_hands_a_pilot_the_same_task_twice(tmp_path):
    run_dir, ledger, n = engine_killed_midrun(tmp_path)
    journal = run_dir / "journal.jsonl"
    data = journal.read_bytes()
    # the journal lost its last records, the last one torn: among them an assignment whose
    # task the pilot has (and runs)
    at = data.rindex(b'{"e":"assign"')
    journal.write_bytes(data[:at + 20])
    rc, out, err = run_cli("resume", run_dir, cwd=tmp_path)
    assert rc == 0, err
    assert f"{2 * n} done of {2 * n}" in out
    assert_each_attempt_ran_once(ledger, n)
    assert_readers_agree(run_dir, tmp_path, n)
    for log in (run_dir / "pilots").glob("*/pilot.log"):
        assert "Traceback" not in log.read_text()


def test_a_journal_of_an_earlier_pwe_without_checksums_resumes(tmp_path):
    run_dir, ledger, n = engine_killed_midrun(tmp_path)
    journal = run_dir / "journal.jsonl"
    plain = []
    for line in journal.read_bytes().splitlines(keepends=True):
        if line.endswith(b"\n"):
            rec = json.loads(line)
            rec.pop("c")
            plain.append(json.dumps(rec, separators=(",", ":")).encode() + b"\n")
    journal.write_bytes(b"".join(plain))
    rc, out, err = run_cli("resume", run_dir, cwd=tmp_path)
    assert rc == 0, err
    assert f"{2 * n} done of {2 * n}" in out and "warning" not in err, err
    assert_each_attempt_ran_once(ledger, n)
    assert_readers_agree(run_dir, tmp_path, n)


# -- damaged run directories: every command says what is wrong in one line -----------------------

SMALL_WF = """
name: small
nodes:
  a:
    parameters: {i: [1, 2, 3]}
    run: echo a $PWE_PARAM_I >> ../../ran
  b:
    after: [a]
    run: echo b >> ../../ran
"""


def _garbage(path):
    path.write_bytes(b"\x00\xffnot what pwe wrote {[\n" * 3)


DAMAGES = {
    # what is damaged: (how, the file named in the one line when a command cannot go on)
    "run.json garbage": (lambda d: _garbage(d / "run.json"), "run.json"),
    "run.json not a run's": (lambda d: (d / "run.json").write_text('{"run_id": 3}'), "run.json"),
    "workflow copy deleted": (lambda d: (d / "workflow.yaml").unlink(), "workflow.yaml"),
    "state.json garbage": (lambda d: _garbage(d / "state.json"), "state.json"),
    "checkpoint garbage": (lambda d: _garbage(d / "checkpoint.bin"), "checkpoint.bin"),
    "journal deleted": (lambda d: (d / "journal.jsonl").unlink(), "journal.jsonl"),
    "journal all garbage": (lambda d: _garbage(d / "journal.jsonl"), "journal.jsonl"),
    "secret truncated": (lambda d: (d / "secret").write_text((d / "secret").read_text()[:5]), "secret"),
    "events garbage": (lambda d: _garbage(d / "pilots" / "p1" / "events.jsonl"), "events.jsonl"),
    "tasks garbage": (lambda d: _garbage(d / "pilots" / "p1" / "tasks.jsonl"), "tasks.jsonl"),
}
COMMANDS = [("status",), ("status", "--json"), ("show",), ("logs", "a:0"), ("resume",), ("retry",), ("cancel",)]


def test_damaged_run_directories_never_end_in_a_traceback(tmp_path):
    import shutil

    wf = tmp_path / "wf.yaml"
    wf.write_text(SMALL_WF)
    good = tmp_path / "good"
    rc, _, err = run_cli("run", wf, "--cores", "2", "--run-dir", good, cwd=tmp_path)
    assert rc == 0, err
    os.unlink(wf)  # only the run's own copy of the workflow is left
    failures = []
    for name, (damage, named) in DAMAGES.items():
        run_dir = tmp_path / name.replace(" ", "-")
        shutil.copytree(good, run_dir)
        damage(run_dir)
        for command in COMMANDS:
            rc, out, err = run_cli(command[0], run_dir, *command[1:], cwd=tmp_path, timeout=60)
            said = f"{name}: pwe {' '.join(command)} -> {rc}\n{out}{err}"
            lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: ")]
            if "Traceback" in err or rc not in (0, 1, 2, 3):
                failures.append(said)
            elif rc != 0 and (len(lines) != 1 or named not in lines[0]):
                failures.append(f"not one line naming {named}: {said}")
            elif command == ("status", "--json") and rc == 0:
                json.loads(out)
        if (run_dir / "ran").read_text() != (good / "ran").read_text():
            failures.append(f"{name}: members ran again:\n{(run_dir / 'ran').read_text()}")
    assert not failures, "\n\n".join(failures)


# -- two commands taking one run at once: exactly one takes it, the other says who has it -----------

RACE_WF = """
name: race
nodes:
  a:
    parameters: {i: [0, 1]}
    run: echo "a $PWE_MEMBER says hello"; echo "start a $PWE_MEMBER $PWE_ATTEMPT" >> ../../ledger; echo "end a $PWE_MEMBER $PWE_ATTEMPT" >> ../../ledger
  b:
    after: [a]
    parameters: {i: [0, 1]}
    run: echo "start b $PWE_MEMBER $PWE_ATTEMPT" >> ../../ledger; while [ ! -e ../../go ]; do sleep 0.05; done; sleep 4; echo "end b $PWE_MEMBER $PWE_ATTEMPT" >> ../../ledger
"""
RACE_TRIALS = 10


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A run whose engine and pilot were killed (-9) while b's members ran (they wait for a
    file `go` in the run directory, then take 4 s): each race takes up a copy of it."""
    from helpers import kill_pilot

    tmp = tmp_path_factory.mktemp("interrupted")
    (tmp / "wf.yaml").write_text(RACE_WF)
    run_dir = tmp / "run"
    rc, _, err = run_cli("submit", tmp / "wf.yaml", "--cores", "2", "--run-dir", run_dir, cwd=tmp)
    assert rc == 0, err
    wait_for(lambda: (run_dir / "ledger").is_file() and (run_dir / "ledger").read_text().count("start b") == 2,
             what="b's members to start")
    os.kill(json.loads((run_dir / "engine.lock").read_text())["pid"], signal.SIGKILL)
    kill_pilot(run_dir / "pilots" / "p1" / "events.jsonl")
    wait_for(lambda: EngineLock(run_dir).holder() is None, what="the killed engine's lock to go")
    yield run_dir
    (run_dir / "go").touch()  # (b's orphaned members end)


def _resumes(run_dir) -> list[int]:
    """The pids of the engines that took the run up (its journal's resume records)."""
    return [rec["pid"] for rec in map(json.loads, (Path(run_dir) / "journal.jsonl").read_text().splitlines())
            if rec.get("e") == "resume"]


@pytest.mark.parametrize("commands", [
    (("resume",), ("resume",)),
    (("resume", "--detach"), ("resume", "--detach")),
    (("resume",), ("retry",)),
], ids=["resume+resume", "detach+detach", "resume+retry"])
def test_two_commands_taking_one_run_at_once_one_takes_it_the_other_says_who(tmp_path, interrupted, commands):
    import shutil

    dirs = []
    for k in range(RACE_TRIALS):
        d = tmp_path / f"trial{k}"
        shutil.copytree(interrupted, d)
        # (copies of one run are runs of one workflow in one workspace: each trial's pair
        # races for its own run, so the copies are made --concurrent, as a user would)
        info = json.loads((d / "run.json").read_text())
        (d / "run.json").write_text(json.dumps({**info, "concurrent": True}))
        dirs.append(d)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = len(_resumes(interrupted))
    procs = [[subprocess.Popen([sys.executable, "-m", "pwe", *cmd[:1], str(d), *cmd[1:]], cwd=tmp_path, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for cmd in commands] for d in dirs]
    # b's members end only once `go` is there, and it is made only once the command that did
    # not take the run has answered (with --detach, both): the taker cannot have finished
    # the run before the other command even looked, however slowly a loaded machine starts them
    wanted = 2 if "--detach" in commands[0] else 1
    for d, pair in zip(dirs, procs):
        wait_for(lambda pair=pair: sum(p.poll() is not None for p in pair) >= wanted, timeout=120,
                 what="the command that did not take the run to answer")
        (d / "go").touch()
    outcomes = [[(p.wait(timeout=120), *p.communicate()) for p in pair] for pair in procs]
    if "--detach" in commands[0]:
        for d in dirs:  # the detached engine that took it runs it to its end
            wait_for(lambda d=d: b'"e":"finish"' in (d / "journal.jsonl").read_bytes() and EngineLock(d).holder() is None,
                     timeout=120, what="the detached engine to finish")
    bad = []
    for d, pair in zip(dirs, outcomes):
        said = f"{d.name}: " + " | ".join(f"{' '.join(c)} -> {rc} {out.strip()!r} {err.strip()!r}"
                                          for c, (rc, out, err) in zip(commands, pair))
        rcs = sorted(rc for rc, _, _ in pair)
        took = _resumes(d)[before:]
        if rcs != [0, 2] or len(took) != 1:
            bad.append(f"not one taker, one refused ({len(took)} engines took it): {said}")
            continue
        _, out, err = next(o for o in pair if o[0] == 2)
        lines = err.splitlines()
        m = re.fullmatch(re.escape(str(d)) + r": already taken by pid (\d+) on (\S+) since (\d\d:\d\d:\d\d); (.*)",
                         lines[0]) if len(lines) == 1 else None
        if not m or out or int(m.group(1)) != took[0] or m.group(2) != socket.gethostname() \
                or not all(w in m.group(4) for w in (f"pwe status {d}", "wait", f"pwe cancel {d}")):
            bad.append(f"the refusal is not one line naming the taker (pid {took[0]}): {said}")
        starts, ends = ledger_counts(d / "ledger", attempts=True)
        twice = sorted(k for k, c in starts.items() if c > 1)
        if twice or {(node, m_) for node, m_, _ in ends} != {(n, str(i)) for n in "ab" for i in range(2)}:
            bad.append(f"ran twice {twice} or not to its end: {said}\n{(d / 'ledger').read_text()}")
    assert not bad, f"{len(bad)} of {RACE_TRIALS} trials:\n" + "\n".join(bad)


# -- a damaged run directory: every command that cannot go on says so in one line, exit 2 ---------

def _torn_last(path):
    data = path.read_bytes()
    path.write_bytes(data[:data.rindex(b"\n", 0, len(data) - 1) + 20])  # the last record cut inside


RUN_DAMAGES = {
    # damage: (how, {command: None (it works: exit 0) or the words of its one line, exit 2})
    "state.json missing": (lambda d: (d / "state.json").unlink(), {}),
    "state.json garbage": (lambda d: _garbage(d / "state.json"), {}),
    "journal torn mid-record": (lambda d: _torn_last(d / "journal.jsonl"), {}),
    "run.json garbage": (lambda d: _garbage(d / "run.json"),
                         dict.fromkeys(("show", "trace", "report", "resume"),
                                       ("run.json is damaged", "cannot be repaired", "pwe run "))),
    "workflow copy missing": (lambda d: (d / "workflow.yaml").unlink(),
                              dict.fromkeys(("show", "trace", "report", "resume"),
                                            ("workflow.yaml", "put the workflow it ran back there"))),
    "journal missing": (lambda d: (d / "journal.jsonl").unlink(),
                        dict.fromkeys(("show", "trace", "report", "resume"),
                                      ("journal.jsonl is missing", "put the journal back", "pwe run "))),
    "journal cut in its first record": (lambda d: (d / "journal.jsonl").write_bytes(
        (d / "journal.jsonl").read_bytes()[:30]), dict.fromkeys(("show", "trace", "report", "resume"), (
            "journal.jsonl is cut off inside its first record", "put the journal back", "pwe run "))),
    "journal garbage": (lambda d: _garbage(d / "journal.jsonl"),
                        dict.fromkeys(("show", "trace", "report", "resume"),
                                      ("journal.jsonl is damaged", "put a good copy back"))),
}
RUN_COMMANDS = [("status",), ("show",), ("logs", "a:0"), ("trace",), ("report",), ("resume",)]


@pytest.mark.parametrize("command", RUN_COMMANDS, ids=[c[0] for c in RUN_COMMANDS])
@pytest.mark.parametrize("damage", list(RUN_DAMAGES))
def test_a_damaged_run_directory_is_one_line_and_exit_2_or_the_command_works(tmp_path, interrupted, damage,
                                                                              command):
    """An interrupted run (its engine and pilot killed) with one file damaged or gone: a
    command that can still answer does (status from the snapshot, logs from the member's
    files; resume rebuilds the snapshot and repairs a torn journal); one that cannot says
    in one line what is damaged and what to do, exit 2, and runs nothing."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(interrupted, run_dir)
    (run_dir / "go").touch()
    how, refused = RUN_DAMAGES[damage]
    how(run_dir)
    ledger = (run_dir / "ledger").read_text()
    rc, out, err = run_cli(command[0], run_dir, *command[1:], cwd=tmp_path, timeout=120)
    assert "Traceback" not in err, err
    words = refused.get(command[0])
    if words:
        assert rc == 2 and not out and err.count("\n") == 1, (rc, out, err)
        assert all(w in err for w in words), err
        assert (run_dir / "ledger").read_text() == ledger, "a member ran"
        return
    assert rc == 0, (rc, out, err)
    if command == ("status",):
        assert "interrupted" in out or "stopped" in out or "pwe resume" in out, out
        if damage == "state.json garbage":
            assert f"{run_dir / 'state.json'} is damaged" in err and f"pwe resume {run_dir}" in err, err
    elif command[0] == "logs":
        assert "a 0 says hello" in out
    elif command == ("resume",):
        assert "4 done of 4" in out, out
        assert_each_attempt_ran_once(run_dir / "ledger", 2)
        from helpers import read_journal

        read_journal(run_dir)  # every line whole: a torn one was cut off
        assert json.loads((run_dir / "state.json").read_text())["totals"]["done"] == 4


def test_a_background_engine_that_cannot_take_the_run_says_why_to_the_command_that_started_it(tmp_path,
                                                                                              interrupted):
    """spawn_engine (pwe submit, --detach) waits for its engine's word over a pipe: taken,
    or why not, raised here with the engine's exit status (not "started" while it died)."""
    import shutil

    from pwe.engine.control import spawn_engine
    from pwe.base.errors import PweError

    run_dir = tmp_path / "run"
    shutil.copytree(interrupted, run_dir)
    _garbage(run_dir / "run.json")
    with pytest.raises(PweError) as refused:
        spawn_engine(run_dir)
    assert refused.value.exit_status == 2 and str(refused.value).startswith(f"{run_dir / 'run.json'} is damaged")
    assert "\n" not in str(refused.value)
