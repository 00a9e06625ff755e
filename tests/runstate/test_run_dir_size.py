"""The run directory of a big run stays small (issue 23): the journal's compacted records
(an assign of consecutive members as one record, an end carrying its start) and a left
pilot's spool files sealed (compressed). Every reader reads them as before: the state,
the trace, ``pwe events``, and a resumed engine recovering a damaged journal from the
pilots' own (sealed) files, which the members' ledger proves ran nothing twice."""

from __future__ import annotations

import gzip
import json

import pytest

from helpers import LEDGER_WF, ledger_counts, read_journal, run_cli
from pilot.sealing import seal
from pilot.transport import EVENTS, TASKS, EngineSpool, PilotSpool, open_spool
from pwe.runstate.journal import Journal, encode, replay, unpack

WF = "name: w\nnodes:\n  a:\n    parameters: {i: {range: [0, %d]}}\n    run: 'true'\n  b:\n    after: [a]\n" \
     "    parameters: {i: {range: [0, 3]}}\n    run: 'true'\n"


def _state(tmp_path, n=10):
    from pwe.planning.plan import plan_workflow
    from pwe.runstate.state import RunState

    wf = tmp_path / "wf.yaml"
    wf.write_text(WF % n)
    return RunState(plan_workflow(wf))


def _lines(path):
    """A journal's records as written, after its header (its first line: its version)."""
    lines = [json.loads(line) for line in path.read_bytes().splitlines()]
    return lines[1:] if lines and lines[0]["e"] == "journal" else lines


# -- the journal's compacted records ---------------------------------------------------------

def test_consecutive_assigns_to_one_pilot_are_one_record_and_replay_as_each(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    recs = [{"e": "assign", "n": "a", "m": i, "a": 1, "p": "p1", "t": 5.0} for i in range(0, 4)]
    recs += [{"e": "assign", "n": "a", "m": 5, "a": 1, "p": "p1", "t": 5.0}]  # (a gap: 4 is not assigned)
    recs += [{"e": "assign", "n": "a", "m": 6, "a": 1, "p": "p2", "t": 5.0}]  # (another pilot)
    recs += [{"e": "note", "what": "x"}]
    recs += [{"e": "assign", "n": "a", "m": 7, "a": 1, "p": "p2", "t": 5.0}]  # (after another record)
    recs += [{"e": "assign", "n": "a", "m": 8, "a": 2, "p": "p2", "t": 5.0}]  # (another attempt)
    for r in recs:
        j.append(r)
    assert j.pending == 6  # (what flush writes: the runs are lines)
    j.close()
    lines = _lines(path)
    assert [(r["e"], r.get("m"), r.get("len")) for r in lines] == [
        ("assign", 0, 4), ("assign", 5, None), ("assign", 6, None), ("note", None, None), ("assign", 7, None),
        ("assign", 8, None)]
    assert j.lines == 6 + 1 and j.offset == path.stat().st_size  # (and the header)
    unpacked = [u for r in lines for u in unpack({k: v for k, v in r.items() if k != "c"})]
    assert unpacked == recs


def test_a_replayed_journal_of_compacted_records_gives_the_same_state(tmp_path):
    from pwe.base.states import DONE, RUNNING

    plain, packed = _state(tmp_path), _state(tmp_path)
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    for i in range(10):
        rec = {"e": "assign", "n": "a", "m": i, "a": 1, "p": "p1", "t": 1.0}
        assert plain.apply(rec)
        j.append(rec)
    for i in range(9):  # member 9 started and has not ended yet
        start = {"e": "start", "n": "a", "m": i, "a": 1, "p": "p1", "t": 2.0, "nodes": ["x"]}
        end = {"e": "end", "n": "a", "m": i, "a": 1, "p": "p1", "t": 3.0, "rc": 0, "dt": 1.0}
        for r in (start, end):
            assert plain.apply(r)
        j.append({**end, "ran": 1, "nodes": ["x"]})
    j.append({"e": "start", "n": "a", "m": 9, "a": 1, "p": "p1", "t": 2.0})
    assert plain.apply({"e": "start", "n": "a", "m": 9, "a": 1, "p": "p1", "t": 2.0})
    j.close()
    assert sum(1 for r in _lines(path) if r["e"] == "assign") == 1
    got = replay(path, packed.apply)
    assert not got.damaged and got.applied == 11
    ns = packed.nodes["a"]
    assert [ns.state[i] for i in range(10)] == [DONE] * 9 + [RUNNING]
    assert packed.snapshot()["nodes"] == plain.snapshot()["nodes"]
    assert packed.snapshot()["nodes"]["a"]["done"] == 9 and packed.snapshot()["nodes"]["a"]["running"] == 1
    # the trace reads the start out of the end
    from pwe.observe.trace import Trace

    tr = Trace()
    replay(path, tr.take)
    rows = {r["member"]: r for r in tr.records()}
    assert rows[0]["start"] == 2.0 and rows[0]["end"] == 3.0 and rows[0]["node_name"] == "x"
    assert rows[0]["state"] == "done" and rows[9]["state"] == "running"


def test_plain_ends_one_after_another_are_one_record_of_columns(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)

    def end(m, **more):
        return {"e": "end", "n": "a", "m": m, "a": 1, "p": "p1", "t": 10.0 + m, "rc": 0, "dt": 0.5, "cpu": 0.1,
                "rss": 100 + m, **more}
    recs = [end(0, ran=1), end(1), end(5, ran=1)]  # one record
    recs += [end(6, out={"x": "1"}), end(7), end(8)]  # outputs: alone; then two more
    recs += [{**end(9), "rc": 1}, end(10), {**end(11), "n": "b"}]  # failed: alone; another node: not with 10
    recs += [end(12), {"e": "note", "what": "x"}, end(13), {**end(14), "a": 2}, {**end(15), "p": "p2"}]
    for r in recs:
        j.append(r)
    j.close()
    lines = _lines(path)
    # (an ends record's m, t and rss are each its first value and then differences: journal.py)
    assert [(r["e"], r["m"]) for r in lines if r["e"] != "note"] == [
        ("ends", [0, 1, 4]), ("end", 6), ("ends", [7, 1]), ("end", 9), ("end", 10), ("end", 11), ("end", 12),
        ("end", 13), ("end", 14), ("end", 15)]
    assert lines[0]["d"] == 1 and lines[0]["ran"] == [1, 0, 1] and lines[0]["rss"] == [100, 1, 4]
    assert lines[0]["t"] == [10000, 1000, 4000] and lines[0]["dt"] == [500] * 3
    got = [u for r in lines for u in unpack({k: v for k, v in r.items() if k != "c"})]
    want = [u for r in recs for u in unpack(r)]
    assert got == want
    assert [r["e"] for r in got[:4]] == ["start", "end", "end", "start"] and got[0]["t"] == 9.5


def test_an_ends_record_whose_columns_differ_in_length_is_damaged(tmp_path):
    st = _state(tmp_path)
    path = tmp_path / "journal.jsonl"
    path.write_bytes(encode({"e": "run", "t": 1.0}) + encode({"e": "assign", "n": "a", "m": 0, "a": 1, "p": "p1",
                                                                "len": 3})
                     + encode({"e": "ends", "n": "a", "a": 1, "p": "p1", "m": [0, 1], "t": [1.0], "dt": [0, 0],
                               "cpu": [0, 0], "rss": [0, 0], "ran": [0, 0]}))
    assert replay(path, st.apply).damaged == [3]


@pytest.mark.parametrize("bad", [0, -3, "4", 1.5, None])
def test_an_assign_run_of_no_sensible_length_is_a_damaged_record(tmp_path, bad):
    st = _state(tmp_path)
    path = tmp_path / "journal.jsonl"
    path.write_bytes(encode({"e": "run", "t": 1.0}) + encode({"e": "assign", "n": "a", "m": 0, "a": 1, "p": "p1",
                                                                "len": bad})
                     + encode({"e": "assign", "n": "a", "m": 1, "a": 1, "p": "p1", "len": 2}))
    got = replay(path, st.apply)
    assert got.damaged == [2]
    from pwe.base.states import ASSIGNED, READY

    assert [st.nodes["a"].state[i] for i in range(4)] == [READY, ASSIGNED, ASSIGNED, READY]


def test_an_assign_run_past_the_node_is_a_damaged_record(tmp_path):
    st = _state(tmp_path)
    path = tmp_path / "journal.jsonl"
    path.write_bytes(encode({"e": "run", "t": 1.0}) + encode({"e": "assign", "n": "a", "m": 8, "a": 1, "p": "p1",
                                                                "len": 5}))
    assert replay(path, st.apply).damaged == [2]


# -- sealed spool files ----------------------------------------------------------------------

def _spool_with(tmp_path, n):
    d = tmp_path / "pilots" / "p1"
    eng = EngineSpool(d)
    eng.send([{"k": "task", "n": "a", "m": i, "a": 1, "cmd": "true", "cwd": "/x" * 40} for i in range(n)])
    pil = PilotSpool(str(d))
    pil.send([{"k": "start", "n": "a", "m": i, "a": 1} for i in range(n)])
    pil.close()
    eng.close()
    return d


def test_a_small_spool_stays_plain_and_a_big_one_is_sealed_and_read_the_same(tmp_path):
    small = _spool_with(tmp_path / "s", 10)
    assert seal(str(small), above=1 << 20) == 0 and (small / TASKS).exists() and not (small / (TASKS + ".gz")).exists()
    d = _spool_with(tmp_path, 20000)
    before_events = EngineSpool(d).receive(0)
    before_sent = EngineSpool(d).sent()
    size = (d / TASKS).stat().st_size + (d / EVENTS).stat().st_size
    assert size > 1 << 20
    saved = seal(str(d), above=1 << 20)
    assert not (d / TASKS).exists() and not (d / EVENTS).exists() and not list(d.glob("*.tmp"))
    assert saved > size * 0.8, (saved, size)
    eng = EngineSpool(d)
    assert eng.receive(0) == before_events and eng.sent() == before_sent
    assert eng.sent(among={("a", 19999, 1), ("a", 5, 2)}) == {("a", 19999, 1): 1}
    # a cursor is an offset into the plain text: read on from the middle
    msgs, cursor = before_events
    half = len(gzip.decompress((d / (EVENTS + ".gz")).read_bytes()).split(b"\n")[0]) + 1
    assert EngineSpool(d).receive(half)[0] == msgs[1:]
    eng.close()
    assert not (d / TASKS).exists()  # (reading made no plain file beside the sealed one)


def test_a_seal_cut_short_leaves_the_plain_file_which_is_read(tmp_path):
    d = _spool_with(tmp_path, 20000)
    (d / (EVENTS + ".gz")).write_bytes(b"\x1f\x8b garbage")  # (a seal that stopped before its rename)
    with open_spool(str(d / EVENTS)) as fh:
        assert fh.read(12) == b'{"k":"start"'


def test_a_full_disk_during_a_seal_keeps_the_plain_files(tmp_path):
    d = _spool_with(tmp_path, 20000)
    (d / (EVENTS + ".gz.tmp")).mkdir()  # (the seal cannot write its file)
    with pytest.raises(OSError):
        seal(str(d), above=1 << 20)
    assert (d / EVENTS).exists() and EngineSpool(d).receive(0)[0]


# -- a real run ------------------------------------------------------------------------------

def test_a_big_run_seals_its_pilot_and_every_reader_still_reads_it(tmp_path):
    n = 2500  # 2 x 2,500 members: the pilot's files are over 1 MiB (PWE_SEAL_ABOVE below)
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=n, sleep=0))
    run_dir = tmp_path / "run"
    small = tmp_path / "small"  # (the default threshold: this run's files stay plain)
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", small, cwd=tmp_path, timeout=300)
    assert rc == 0 and sorted(p.name for p in (small / "pilots" / "p1").iterdir() if "jsonl" in p.name) == \
        [EVENTS, TASKS], err
    ledger.unlink()
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", run_dir, "--fresh", cwd=tmp_path, timeout=300,
                           env={"PWE_SEAL_ABOVE": str(1 << 20)})  # (--fresh: run again, not reused from the first)
    assert rc == 0 and f"{2 * n} done of {2 * n}" in out, err
    pdir = run_dir / "pilots" / "p1"
    assert sorted(p.name for p in pdir.iterdir() if "jsonl" in p.name) == [EVENTS + ".gz", TASKS + ".gz"]
    recs = _lines(run_dir / "journal.jsonl")
    # (how many records the engine wrote depends on how the pilot's messages happened to
    # come in batches, which load changes: the compacted records' forms are tested above;
    # here, that every member's end is there once, whatever its record)
    assert sum(1 if r["e"] == "end" else len(r["m"]) if r["e"] == "ends" else 0 for r in recs) == 2 * n
    gone = [r for r in recs if r["e"] == "pilot_gone"]
    assert len(gone) == 1 and gone[0]["why"] == "exited"  # (waited for, so that it could be sealed)
    logical = read_journal(run_dir)
    assert sum(r["e"] == "start" for r in logical) == 2 * n and sum(r["e"] == "assign" for r in logical) == 2 * n
    # the readers: status, the trace, pwe events (the sealed events file)
    rc, out, err = run_cli("status", run_dir, "--json", cwd=tmp_path)
    snap = json.loads(out)
    assert snap["totals"]["done"] == 2 * n and snap["pilots"]["p1"]["state"] == "gone", snap["pilots"]
    rc, out, err = run_cli("trace", run_dir, "--json", cwd=tmp_path)
    rows = [json.loads(line) for line in out.splitlines()]  # (one attempt a line)
    assert len(rows) == 2 * n and all(r["state"] == "done" and r["start"] and r["node_name"] for r in rows), rows[0]
    rc, out, err = run_cli("events", run_dir, "--json", cwd=tmp_path)
    assert rc == 0, err
    kinds = [json.loads(line).get("k") for line in out.splitlines() if '"pilot"' in line]
    assert kinds.count("start") == 2 * n and kinds.count("end") == 2 * n
    # a damaged journal, no checkpoint: what it lost comes back from the sealed files, and
    # nothing runs again (the members' own ledger)
    (run_dir / "checkpoint.bin").unlink()
    lines = (run_dir / "journal.jsonl").read_bytes().splitlines(keepends=True)
    hit = [k for k in range(len(lines) // 4, len(lines)) if lines[k].startswith(b'{"e":"end')][:20]  # (an end or an ends)
    for k in hit:
        lines[k] = b"\x00" * (len(lines[k]) - 1) + b"\n"
    (run_dir / "journal.jsonl").write_bytes(b"".join(lines))
    rc, out, err = run_cli("resume", run_dir, cwd=tmp_path, timeout=300)
    assert rc == 0 and f"{2 * n} done of {2 * n}" in out, (out, err)
    assert "Traceback" not in err
    starts, ends = ledger_counts(ledger, attempts=True)
    assert len(ends) == 2 * n and set(starts.values()) == {1} and set(ends.values()) == {1}
