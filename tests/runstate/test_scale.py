"""A run of many members: the checkpoint, the ready queue kept as runs, member files kept
only when written, and `show` without a full replay.

Real runs (a real engine, a real pilot, real kill -9); what ran and how often is read from
the members' own ledger. No timed assertion: bench/million.py measures the speed.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers import LEDGER_WF, ROOT, count_ends, ledger_counts, output, wait_for

from pwe.runstate import checkpoint, runs
from pwe.runstate.journal import replay
from pwe.runstate.rundir import SHARD, member_dir
from pwe.runstate.readyqueue import ReadyQueue
from pwe.base.states import READY
from pwe.runstate.state import RunState

ENV = dict(os.environ, PYTHONPATH=str(ROOT), PWE_CHECKPOINT_EVERY="0.3")
FIELDS = ("state", "attempt", "deps", "counts", "rc", "why", "outputs", "failures", "pilot", "pid", "spent",
          "done_spent")


def pwe(*args, cwd, check=None, timeout=180):
    proc = subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=timeout)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def full_replay(run_dir: Path) -> RunState:
    _, plan = runs.read(run_dir)
    st = RunState(plan)
    replay(run_dir / "journal.jsonl", st.apply)
    return st


def assert_same(a: RunState, b: RunState) -> None:
    """Two states of a run are the same: every member's every field, the run's own."""
    assert list(a.nodes) == list(b.nodes)
    for nid in a.nodes:
        for k in FIELDS:
            assert getattr(a.nodes[nid], k) == getattr(b.nodes[nid], k), (nid, k)
        ready = {i for n, i in a.ready if n == nid and a.nodes[nid].state[i] == READY}
        assert ready == {i for i, s in enumerate(a.nodes[nid].state) if s == READY}, nid
    for k in ("pilots", "barrier_left", "cancelled", "finished_ok", "stopped", "edges", "edge_files", "rejected"):
        assert getattr(a, k) == getattr(b, k), k


def test_ready_queue_is_first_in_first_out_in_runs():
    q = ReadyQueue()
    q.append_run("a", 0, 1000)  # a million ready members cost one entry: here a thousand
    q.append(("a", 1000))
    q.append(("b", 5))
    q.appendleft(("z", 9))
    assert len(q._runs) == 3 and len(q) == 1003
    got = [q.popleft() for _ in range(3)]
    assert got == [("z", 9), ("a", 0), ("a", 1)]
    q.appendleft(("a", 1))  # handed back: first again, into its run
    assert len(q._runs) == 2
    rest = list(q)
    assert rest[0] == ("a", 1) and rest[-2:] == [("a", 1000), ("b", 5)] and len(rest) == 1001
    runs_ = q.take_runs()
    assert [list(r) for r in runs_] == [["a", 1, 1001], ["b", 5, 6]] and not q


def test_checkpoint_and_tail_give_the_state_of_a_full_replay_across_kill_and_resume(tmp_path):
    """Checkpoints are taken every 0.3 s of a run whose members fail, retry, write outputs
    and release downstream members; the engine is killed (-9) mid-run. The checkpoint plus
    the journal's tail is then exactly what a full replay gives; `pwe resume` (which loads
    that) runs every member once (the ledger), and after the end the same holds again."""
    ledger = tmp_path / "ledger"
    n = 120
    text = LEDGER_WF.format(ledger=ledger, n=n, sleep=0.02)
    # a's members with index % 9 == 4 fail at their first attempt (retried once), and every
    # member of a returns an output
    text = text.replace(
        '    run: echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{ ledger }}; sleep 0.02 && '
        'echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{ ledger }}\n  b:',
        '    retries: 1\n'
        '    run: echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{ ledger }}; sleep 0.02; '
        'echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{ ledger }}; echo "sq=$((PWE_MEMBER * PWE_MEMBER))" '
        '>> $PWE_OUTPUTS; test $((PWE_MEMBER % 9)) -ne 4 -o $PWE_ATTEMPT -gt 1\n  b:', 1)
    assert "retries: 1" in text
    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    run_dir = tmp_path / "run"
    pwe("submit", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path, check=0)
    wait_for(lambda: (run_dir / checkpoint.NAME).exists() and count_ends(run_dir) >= 90, timeout=120,
             what="a checkpoint and 90 members ended")
    engine = json.loads((run_dir / "engine.lock").read_text())["pid"]
    os.kill(engine, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{engine}") or open(f"/proc/{engine}/stat").read().split()[2] == "Z",
             what="the engine to die")
    _, plan = runs.read(run_dir)
    st, tail, warnings = checkpoint.load(run_dir, plan)
    assert not warnings
    journal_size = (run_dir / "journal.jsonl").stat().st_size
    assert tail.end == journal_size or tail.torn, "the tail was replayed to the journal's end"
    assert count_ends(run_dir) < 2 * n + n // 9, "the run ended before the engine was killed"
    assert_same(st, full_replay(run_dir))

    proc = pwe("resume", run_dir, cwd=tmp_path, check=0)
    assert f"{2 * n} done of {2 * n}" in proc.stdout, proc.stdout + proc.stderr
    starts, ends = ledger_counts(ledger, attempts=True)
    expected = {(node, str(i)) for node in "ab" for i in range(n)}
    assert {k[:2] for k in ends} == expected
    # once each, and a second attempt only where the first one failed
    assert all(c == 1 for c in ends.values()), [k for k, c in ends.items() if c > 1]
    assert all(c == 1 for c in starts.values()), [k for k, c in starts.items() if c > 1]
    twice = {(k[0], k[1]) for k in ends if k[2] == "2"}
    assert twice == {("a", str(i)) for i in range(n) if i % 9 == 4}
    st, tail, warnings = checkpoint.load(run_dir, plan)
    assert not warnings and tail.applied == 0, "the last engine checkpoints the end"
    full = full_replay(run_dir)
    assert_same(st, full)
    assert full.nodes["a"].outputs[7] == {"sq": "49"} and full.finished_ok is True


def test_a_damaged_or_foreign_checkpoint_is_ignored_with_a_warning(tmp_path):
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=30, sleep=0))
    run_dir = tmp_path / "run"
    pwe("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path, check=0)
    good = json.loads(pwe("show", run_dir, "--limit", "0", "--json", cwd=tmp_path, check=0).stdout)
    assert len(good) == 60 and all(m["state"] == "done" for m in good)
    ck = run_dir / checkpoint.NAME
    data = bytearray(ck.read_bytes())
    # a flipped byte in its body (members' counters)
    data[-200] ^= 0xFF
    ck.write_bytes(bytes(data))
    proc = pwe("show", run_dir, "--limit", "0", "--json", cwd=tmp_path, check=0)
    assert "checksum does not match" in proc.stderr and "whole journal is replayed" in proc.stderr
    assert json.loads(proc.stdout) == good
    # a checkpoint of another journal (its journal was replaced by one that differs before
    # the offset): the anchor no longer matches
    ck.unlink()
    pwe("show", run_dir, cwd=tmp_path, check=0)  # (none: a full replay, no warning)
    jr = run_dir / "journal.jsonl"
    original = jr.read_bytes()
    _, plan = runs.read(run_dir)
    checkpoint.write(run_dir, full_replay(run_dir), len(original), original.count(b"\n"))
    jr.write_bytes(original[:-200] + b"x" * 199 + b"\n")
    st, _, warnings = checkpoint.load(run_dir, plan)
    assert warnings and "not the one it was taken of" in warnings[0]
    jr.write_bytes(original)
    st, tail, warnings = checkpoint.load(run_dir, plan)
    assert not warnings and tail.applied == 0 and st.totals()[4] == 60  # (4: done)
    # a resumed engine meets a damaged checkpoint the same way: warns, replays, goes on
    ck.write_bytes(b"PWECKPT1 00000000 3\n{}\n")
    proc = pwe("resume", run_dir, cwd=tmp_path, check=0)
    assert "cannot be used" in proc.stderr and "60 done of 60" in proc.stdout
    assert ledger_counts(ledger)[1] == {(node, str(i)): 1 for node in "ab" for i in range(30)}


def test_member_files_are_kept_only_when_written_and_logs_finds_them(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: files\nnodes:\n  m:\n    parameters: {i: {range: [0, 40]}}\n    directory: own\n"
                  "    run: |\n"
                  "      case $((PWE_MEMBER % 4)) in\n"
                  "        1) echo out $PWE_MEMBER ;;\n"
                  "        2) echo err $PWE_MEMBER >&2 ;;\n"
                  "        3) echo made > own.txt; echo k=$PWE_MEMBER >> $PWE_OUTPUTS ;;\n"
                  "      esac\n")
    run_dir = tmp_path / "run"
    pwe("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path, check=0)
    for i in range(40):
        md = member_dir(run_dir, "m", i)
        kept = sorted(p.name for p in md.iterdir()) if md.is_dir() else []
        # (stdout and stderr: in the pilot's output stream; outputs: in the journal)
        assert kept == [[], [], [], ["own.txt"]][i % 4], (i, kept)
    proc = pwe("logs", run_dir, "m:5", cwd=tmp_path, check=0)
    assert "out 5" in proc.stdout
    proc = pwe("logs", run_dir, "m:6", "--stderr", cwd=tmp_path, check=0)  # (into a pipe: one channel)
    assert "err 6" in proc.stdout
    proc = pwe("logs", run_dir, "m:4", "--stdout", "--stderr", cwd=tmp_path, check=0)  # ran, wrote nothing: nothing kept
    assert "m[4] stdout" in proc.stdout and "m[4] stderr" in proc.stdout
    pwe("logs", run_dir, "m:40", cwd=tmp_path, check=2)
    shown = json.loads(pwe("show", run_dir, "--json", cwd=tmp_path, check=0).stdout)
    assert shown[7]["outputs"] == {"k": "7"}


def test_no_directory_of_a_5000_member_run_holds_more_than_a_shard(tmp_path):
    """5,000 members, each in a directory of its own, that each write a file there (each
    keeps its directory) and 2,000 that write nothing (they keep nothing): no directory of
    the run has more than SHARD entries (unsharded, one would hold 5,000). (This was 30,000
    members: 60 s of the suite to show what 5,000 show as well.)"""
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: wide\nnodes:\n  talk:\n    parameters: {i: {range: [0, 5000]}}\n    directory: own\n"
                  "    run: echo {{ i }} > f; echo {{ i }}\n"
                  "  quiet:\n    parameters: {i: {range: [0, 2000]}}\n    directory: own\n    run: 'true'\n")
    run_dir = tmp_path / "run"
    pwe("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path, check=0, timeout=600)
    most = max(len(dirs) + len(files) for _, dirs, files in os.walk(run_dir))
    assert most <= SHARD, most
    shards = sorted(int(p.name) for p in (run_dir / "members" / "talk").iterdir())
    assert shards == list(range(5000 // SHARD))
    assert output(run_dir, "talk", 4999) == "4999\n"
    kept = list((run_dir / "members" / "quiet").rglob("*"))
    assert all(p.is_dir() for p in kept) and len(kept) == 2000 // SHARD, "only the (empty) shards are left"
