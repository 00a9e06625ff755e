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

from conftest import LEDGER_WF, ROOT, count_ends, ledger_counts, run_cli, wait_for
from pwe.rundir import EngineLock

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
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from pwe.rundir import EngineLock; "
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
        from pwe.runview import status

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
    # one line of garbage in the middle, and one end record overwritten in place (a bad block)
    lost = next(k for k in range(len(lines) // 3, len(lines)) if b'"e":"end"' in lines[k])
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
    run: echo a $PWE_PARAM_I >> ../../../../ran
  b:
    after: [a]
    run: echo b >> ../../../../ran
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
