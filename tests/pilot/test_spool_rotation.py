"""A pilot's spool files are rotated as they grow and the parts behind sealed while the run
goes on (issue 34, 10^7 members: one pilot's plain spool would be ~5 GB before its seal
at the end). Each writer renames its file to ``NAME.END`` past ``PWE_SPOOL_SEGMENT`` bytes
and begins it again; every reader reads the parts and the live file as one text, offsets
into the whole (pilot.bounded.Chain); the engine gzips the parts nobody reads again."""

from __future__ import annotations

import json
import os

import pytest

from helpers import LEDGER_WF, ledger_counts, run_cli, tmpfs, wait_for
from pilot.bounded import Damaged, open_spool, segments
from pilot.sealing import seal
from pilot.transport import EVENTS, TASKS, EngineSpool, PilotSpool

SEGMENT = 64 << 10  # (the least PWE_SPOOL_SEGMENT takes)


def _events(n, start=0):
    return [{"k": "start", "n": "a", "m": i, "a": 1, "pad": "x" * 40} for i in range(start, start + n)]


def _drain(engine, cursor=0):
    got = []
    while True:
        msgs, cursor = engine.receive(cursor)
        if not msgs:
            return got, cursor
        got += msgs


@pytest.fixture
def small_segments(monkeypatch):
    monkeypatch.setenv("PWE_SPOOL_SEGMENT", str(SEGMENT))


def test_the_pilots_events_are_rotated_and_the_engine_reads_them_whole_in_order(tmp_path, small_segments, monkeypatch):
    from pilot.bounded import Chain

    monkeypatch.setattr(Chain, "RELIST", 0.0)  # (looks for a rotation at every end of the live file)
    pilot, engine = PilotSpool(str(tmp_path)), EngineSpool(tmp_path)
    got, cursor = [], 0
    for b in range(200):  # (read as it is written: the engine follows each rotation)
        pilot.send(_events(20, b * 20))
        msgs, cursor = _drain(engine, cursor)
        got += msgs
    assert [m["m"] for m in got] == list(range(4000)) and [m["q"] for m in got] == list(range(1, 4001))
    parts = segments(tmp_path / EVENTS)
    assert len(parts) >= 5 and os.path.getsize(tmp_path / EVENTS) < SEGMENT
    # the parts read are sealed behind the engine, in a thread
    wait_for(lambda: all(not os.path.exists(p) and os.path.exists(p + ".gz") for _, p in parts[:-1]),
             what="the events' parts read sealed")
    # the cursor is an offset into the whole: a new engine (resumed) reads on from any of them
    again, end = _drain(EngineSpool(tmp_path), 0)
    assert [m["m"] for m in again] == list(range(4000)) and end == cursor
    middle = parts[len(parts) // 2][0]  # (the start of a part: a line's start)
    later, _ = _drain(EngineSpool(tmp_path), middle)
    assert later == again[len(again) - len(later):] and 0 < len(later) < 4000
    # and every reader of the file as one: open_spool
    with open_spool(tmp_path / EVENTS) as fh:
        assert [json.loads(line)["m"] for line in fh.read().splitlines()] == list(range(4000))
    pilot.close()
    engine.close()


def test_the_engines_tasks_are_rotated_sealed_and_still_counted_as_sent(tmp_path, small_segments):
    engine = EngineSpool(tmp_path)
    task = {"k": "task", "n": "a", "a": 1, "cmd": "true", "cwd": str(tmp_path), "env": {"X": "y" * 30}}
    for b in range(100):
        engine.send([{**task, "m": i} for i in range(b * 20, b * 20 + 20)])
    parts = segments(tmp_path / TASKS)
    assert len(parts) >= 3
    wait_for(lambda: all(os.path.exists(p + ".gz") for _, p in segments(tmp_path / TASKS)),
             what="the tasks' rotated parts sealed")
    # the pilot reads them all, in order, from the start (a pilot started late: sealed parts)
    pilot = PilotSpool(str(tmp_path))
    got, cursor = [], 0
    while True:
        msgs, cursor = pilot.receive(cursor)
        if not msgs:
            break
        got += msgs
    assert [t["m"] for t in got] == list(range(2000))
    # what a resumed engine asks: a few sent long ago (in a sealed part) and a few just now
    among = {("a", 3, 1), ("a", 1999, 1), ("a", 5000, 1)}
    sent = EngineSpool(tmp_path).sent(among)
    assert sent[("a", 3, 1)] == 1 and sent[("a", 1999, 1)] == 1 and sent[("a", 5000, 1)] == 0
    assert sum(EngineSpool(tmp_path).sent().values()) == 2000
    pilot.close()
    engine.close()


def test_a_left_pilots_seal_takes_the_live_files_and_any_part_left_plain(tmp_path, small_segments):
    pilot = PilotSpool(str(tmp_path))
    for b in range(100):
        pilot.send(_events(20, b * 20))
    pilot.close()  # (nobody read them: no part was sealed as the run went on)
    assert segments(tmp_path / EVENTS) and all(os.path.exists(p) for _, p in segments(tmp_path / EVENTS))
    assert seal(str(tmp_path), above=0) > 0
    left = sorted(os.listdir(tmp_path))
    assert all(name.endswith(".gz") for name in left), left
    got, _ = _drain(EngineSpool(tmp_path))
    assert [m["m"] for m in got] == list(range(2000))


def test_a_rotated_part_cut_short_is_said_damaged_not_read_as_the_next(tmp_path, small_segments):
    pilot = PilotSpool(str(tmp_path))
    for b in range(100):
        pilot.send(_events(20, b * 20))
    pilot.close()
    end, first = segments(tmp_path / EVENTS)[0]
    with open(first, "r+b") as fh:
        fh.truncate(end - 100)
    with open_spool(tmp_path / EVENTS) as fh, pytest.raises(Damaged, match="shorter than its name says") as exc:
        fh.read()
    assert first in str(exc.value)
    os.unlink(first)  # (a part gone: the next one does not cover the whole from 0)
    with open_spool(tmp_path / EVENTS) as fh, pytest.raises(Damaged, match="a part before it is gone"):
        fh.read()


@pytest.mark.parametrize("value", ["1000", "-1", "lots"])
def test_a_spool_segment_below_64_kib_or_not_a_number_is_one_line_exit_2(tmp_path, value):
    rc, out, err = run_cli("status", tmp_path, env={"PWE_SPOOL_SEGMENT": value}, cwd=tmp_path)
    assert rc == 2 and "PWE_SPOOL_SEGMENT" in err and len(err.strip().splitlines()) == 1 \
        and "Traceback" not in err, err


def test_a_real_run_rotates_its_pilots_spool_and_runs_every_member_once(tmp_path):
    n = 1500  # (2 x 1,500 members: ~1.5 MB of spool, some twenty 64 KiB parts)
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=n, sleep=0))
    run_dir = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path, timeout=900,
                           env={"PWE_SPOOL_SEGMENT": str(SEGMENT)})
    assert rc == 0 and f"{2 * n} done of {2 * n}" in out, err
    starts, ends = ledger_counts(ledger)
    assert len(starts) == 2 * n and set(starts.values()) == {1} and starts == ends
    pdir = run_dir / "pilots" / "p1"
    names = sorted(os.listdir(pdir))
    rotated = [x for x in names if x.startswith((EVENTS + ".", TASKS + ".")) and x[len(EVENTS) + 1:][:1].isdigit()]
    assert len(rotated) >= 4 and all(x.endswith(".gz") for x in rotated), names
    rc, out, err = run_cli("trace", run_dir, "--json", cwd=tmp_path)
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and len(rows) == 2 * n and all(r["state"] == "done" and r["start"] for r in rows), err
    rc, out, err = run_cli("events", run_dir, "--json", cwd=tmp_path)
    kinds = [json.loads(line).get("k") for line in out.splitlines() if '"pilot"' in line]
    assert rc == 0 and kinds.count("start") == 2 * n and kinds.count("end") == 2 * n, err


def test_a_reader_that_began_before_the_file_finds_it_even_if_its_first_batch_was_rotated_at_once(
        tmp_path, small_segments, monkeypatch):
    """A pilot up before its first task, whose first batch is bigger than a segment: the live
    file it waited for is never made (rotated at once); it finds the part (a pilot once sat idle)."""
    from pilot.bounded import Chain

    monkeypatch.setattr(Chain, "RELIST", 0.0)
    pilot, engine = PilotSpool(str(tmp_path)), EngineSpool(tmp_path)
    assert pilot.receive(0) == ([], 0)  # (nothing yet)
    task = {"k": "task", "n": "a", "a": 1, "cmd": "true", "cwd": str(tmp_path), "env": {"X": "y" * 60}}
    engine.send([{**task, "m": i} for i in range(1000)])  # (~150 KB in one batch)
    assert not (tmp_path / TASKS).exists() and segments(tmp_path / TASKS)
    msgs, _ = pilot.receive(0)
    assert [t["m"] for t in msgs] == list(range(1000))


def test_a_backlog_larger_than_one_read_step_is_taken_in_one_receive(tmp_path):
    """A spool file is read READ_STEP (1 MiB) at a time, not with one 64 MiB request per
    read (64 MiB allocated and freed even when nothing is there): a backlog of a few MiB is
    still taken whole by one receive, and a read with nothing new returns nothing."""
    from pilot import transport, wire

    key_in, key_out = wire.channel_key(b"s", "p1", True), wire.channel_key(b"s", "p1", False)
    engine = transport.EngineSpool(tmp_path, key_in, key_out)
    pilot = transport.PilotSpool(str(tmp_path), key_out=key_in, key_in=key_out)
    n = 40_000
    pilot.send([{"k": "hb", "running": i, "queued": 0, "t": 0} for i in range(n)])
    size = (tmp_path / transport.EVENTS).stat().st_size
    assert size > 3 * transport.READ_STEP
    msgs, cursor = engine.receive(0)
    assert [m["running"] for m in msgs] == list(range(n)) and cursor == size
    assert engine.receive(cursor) == ([], cursor)
    whole = (tmp_path / transport.EVENTS).read_bytes()
    with open(tmp_path / transport.EVENTS, "rb") as fh:
        assert transport.read_some(fh, 1000) == whole[:1000]  # (at most what was asked)
        fh.seek(0)
        assert transport.read_some(fh, size + 10) == whole  # (all there is, in steps)
        assert transport.read_some(fh, size) == b""
    engine.close()
    pilot.close()


def test_a_reader_that_waited_for_the_live_file_is_not_fooled_by_a_later_one(tmp_path, monkeypatch):
    """The reader read every part and waits for the live file; meanwhile the writer writes
    a live file, rotates it (then it is sealed) and begins another. The reader takes the
    part it never saw, then the new live file: every byte once, in order. (It used to open
    the new live file as if it began where its own listing ended: a pilot skipped a part,
    then read another from mid-line, refused the cut line as forged and sat idle with
    members the engine had assigned it: caught in tests/pilot/test_spool_rotation.py's real run.)"""
    from pilot.bounded import Chain

    monkeypatch.setattr(Chain, "RELIST", 0.0)
    path = tmp_path / TASKS
    lines = [f"line {i:04d} {'x' * 40}\n".encode() for i in range(30)]
    first, second, third = b"".join(lines[:10]), b"".join(lines[10:20]), b"".join(lines[20:])
    (tmp_path / f"{TASKS}.{len(first)}").write_bytes(first)
    reader = Chain(path)
    assert reader.read() == first and reader.read() == b""  # (the live file is not there yet)
    # the writer: a live file, rotated and sealed, then the next live file
    path.write_bytes(second)
    os.rename(path, tmp_path / f"{TASKS}.{len(first) + len(second)}")
    seal(str(tmp_path), (TASKS,), above=0)
    assert not path.exists() and (tmp_path / f"{TASKS}.{len(first) + len(second)}.gz").exists()
    path.write_bytes(third)
    got = b""
    while chunk := reader.read(1 << 20):
        got += chunk
    assert got == second + third
    assert reader.tell() == len(first) + len(second) + len(third)


def test_the_pilot_takes_every_task_once_across_rotations_it_slept_through(tmp_path, small_segments, monkeypatch):
    """The same through the real spools: the pilot's reader waits at a rotation while the
    engine sends more than a segment (rotated, sealed behind) and then one more batch; the
    pilot takes each task once, in order, and nothing it takes is refused as forged."""
    from pilot.bounded import Chain

    monkeypatch.setattr(Chain, "RELIST", 0.0)
    from pilot import wire

    secret = b"s" * 32
    pilot = PilotSpool(str(tmp_path), False, wire.channel_key(secret, "p1", True), wire.channel_key(secret, "p1", False))
    engine = EngineSpool(tmp_path, wire.channel_key(secret, "p1", True), wire.channel_key(secret, "p1", False))
    task = {"k": "task", "n": "a", "a": 1, "cmd": "true", "cwd": str(tmp_path), "env": {"X": "y" * 60}}
    taken, m, cursor = [], 0, 0

    def send(count):
        nonlocal m
        engine.send([{**task, "m": i} for i in range(m, m + count)])
        m += count

    send(600)  # (past a segment: rotated at once, the live file not made again yet)
    msgs, cursor = pilot.receive(cursor)
    taken += [t["m"] for t in msgs]
    assert not (tmp_path / TASKS).exists()
    send(600)  # (a live file, rotated: the reader never saw it live)
    send(10)  # (the next live file)
    engine.close()
    engine.await_seal()  # (what is behind both readers, sealed by then)
    assert all(p.endswith(".gz") or os.path.exists(p + ".gz") for _, p in segments(tmp_path / TASKS))
    for _ in range(5):
        msgs, cursor = pilot.receive(cursor)
        taken += [t["m"] for t in msgs]
    assert taken == list(range(m))


def test_a_part_rotated_as_the_seal_thread_found_nothing_left_is_sealed_too(tmp_path, small_segments, monkeypatch):
    """The seal's thread has found nothing more behind and is about to end when the engine
    rotates another part and asks for a seal: the thread looks once more, and that part is
    sealed too (it was left plain: the thread was still alive, so no new one started)."""
    import threading

    window, go = threading.Event(), threading.Event()
    real = EngineSpool._behind

    def behind(self):
        sizes = real(self)
        if not sizes and threading.current_thread() is not threading.main_thread() and not window.is_set():
            window.set()  # (the thread found nothing left: held here, about to end)
            go.wait(30)
        return sizes

    monkeypatch.setattr(EngineSpool, "_behind", behind)
    engine = EngineSpool(tmp_path)
    task = {"k": "task", "n": "a", "a": 1, "cmd": "true", "cwd": str(tmp_path), "env": {"X": "y" * 60}}
    engine.send([{**task, "m": i} for i in range(600)])  # (past a segment: rotated, a seal's thread started)
    assert window.wait(30)
    engine.send([{**task, "m": i} for i in range(600, 1200)])  # (rotated again, a seal asked for)
    go.set()
    engine.await_seal()
    parts = [p for _, p in segments(tmp_path / TASKS)]
    assert len(parts) == 2
    assert all(os.path.exists(p + ".gz") and not os.path.exists(p) for p in parts), os.listdir(tmp_path)


def test_a_spool_whose_parts_change_at_every_look_is_damaged_not_waited_on(tmp_path, monkeypatch):
    """A directory whose listing of parts never holds still (a writer gone wild, or someone
    renaming files there): the reader gives up after RELOCATE looks with Damaged, one line,
    instead of looping."""
    from pilot import bounded

    path = tmp_path / TASKS
    looks = []

    def moving(p):  # (each listing names one more part than the last)
        looks.append(1)
        return [(100 * len(looks), f"{p}.{100 * len(looks)}")]

    reader = bounded.Chain(path)  # (waiting for its live file)
    path.write_bytes(b'{"k":"stop"}\n')
    monkeypatch.setattr(bounded, "segments", moving)
    with pytest.raises(Damaged, match="rotated 100 times while it was opened"):
        reader.seek(1 << 40)  # (past every part listed: the live file, opened and looked at again)
    assert len(looks) == bounded.Chain.RELOCATE  # (one look a try)


def test_a_rotation_whose_new_file_cannot_be_made_holds_what_follows_until_it_can(tmp_path, small_segments):
    """A real tmpfs with no inode left: the pilot's rotation renames its events file (no new
    inode needed), then cannot make the new one. The batch just written stays written; what
    follows is held and raises OSError (the pilot's flush: hold events, start no member),
    never a write to a closed file (which made the pilot leave with an internal error).
    Once an inode is free again, everything held goes out: every message once, in order."""
    import errno

    with tmpfs(tmp_path / "fs", "size=16m,nr_inodes=64") as mnt:
        d = mnt / "p1"
        d.mkdir()
        pilot = PilotSpool(str(d))
        (d / TASKS).touch()
        fillers = []
        while True:  # every inode left taken
            try:
                f = mnt / f"filler{len(fillers)}"
                f.touch()
                fillers.append(f)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        sent, refused = 0, 0
        for b in range(60):  # 60 x 20 messages of ~100 bytes: past the 64 KiB segment
            try:
                pilot.send(_events(20, b * 20))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                refused += 1
            sent += 20
        assert refused > 0, "the rotation made its new file: no inode was short"
        assert pilot.held and not os.path.exists(d / EVENTS)
        fillers.pop().unlink()  # an inode free again
        pilot.send(_events(5, sent))
        sent += 5
        assert not pilot.held
        got, _ = _drain(EngineSpool(d), 0)
        assert [m["m"] for m in got] == list(range(sent)) and [m["q"] for m in got] == list(range(1, sent + 1))
        pilot.close()
