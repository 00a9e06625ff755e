"""The journal's header (pwe/runstate/journal.py, VERSION and its changelog): the first line
of a new journal names its version and the pwe that began it; a journal written before the
header (version 1) is read as it is and stays without one; a journal of a newer version is
refused in one line, exit status 2, naming the pwe to use; every reader skips the header."""

import json
from pathlib import Path

import pytest

import pwe
from helpers import child_pids, run_cli
from pwe.base.errors import JournalTooNew
from pwe.planning.plan import plan_workflow
from pwe.runstate import journal, records
from pwe.runstate.journal import HEADER, VERSION, Journal, decode, encode, replay, unpack
from pwe.runstate.state import RunState


WF = """
name: versions
nodes:
  a:
    parameters: {i: [1, 2]}
    run: 'true'
"""

T = 1_700_000_000.0


def _plan(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(WF)
    return plan_workflow(wf)


def _records():
    return [records.run(T, 11), records.pilot("p1", "here", "local", 2, T, pid=12, started=5),
            records.assign("a", 0, 1, "p1", T), records.assign("a", 1, 1, "p1", T),
            records.start("a", 0, 1, "p1", T + 1, 13), records.end("a", 0, 1, "p1", T + 2, 0, 1.0, cpu=0.5, rss=900),
            records.start("a", 1, 1, "p1", T + 1, 14), records.end("a", 1, 1, "p1", T + 2, 0, 1.0, cpu=0.5, rss=900),
            records.finish(True, T + 3)]


def test_a_new_journal_begins_with_its_header_which_no_reader_takes_as_a_record(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    for r in _records():
        j.append(r)
    j.close()
    lines = path.read_bytes().splitlines(keepends=True)
    head = decode(lines[0])
    assert head == {"e": HEADER, "v": VERSION, "pwe": pwe.__version__}
    assert j.lines == len(lines) and j.offset == path.stat().st_size
    assert unpack(dict(head)) == []  # (every reader of records goes through unpack)
    seen = []
    done = replay(path, seen.append)
    assert HEADER not in {r["e"] for r in seen} and done.applied == len(lines) - 1
    assert done.lines == len(lines) and done.end == path.stat().st_size and not done.damaged
    st = RunState(_plan(tmp_path))
    replay(path, st.apply)
    assert st.finished_ok is True
    # read again from an offset (a checkpoint's tail): the header is looked at, never applied
    tail = replay(path, seen.append, start=len(lines[0]) + len(lines[1]), lines=2)
    assert tail.applied == len(lines) - 2


def test_the_header_is_written_once_with_the_first_records_and_not_again(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    j.close()
    assert path.read_bytes() == b""  # (nothing written: no header alone)
    j = Journal(path)
    j.append(records.note("one", T))
    j.flush()
    j.append(records.note("two", T))
    j.close()
    j = Journal(path)  # (a resumed engine)
    j.append(records.note("three", T))
    j.close()
    kinds = [decode(line)["e"] for line in path.read_bytes().splitlines(keepends=True)]
    assert kinds == [HEADER, "note", "note", "note"]


def test_a_journal_of_version_1_without_a_header_is_read_and_appended_to_as_it_is(tmp_path):
    path = tmp_path / "journal.jsonl"
    old = [encode(r) for r in _records()[:-1]]
    old[1] = json.dumps(_records()[1]).encode() + b"\n"  # (a line without its checksum: older still)
    path.write_bytes(b"".join(old))
    st = RunState(_plan(tmp_path))
    done = replay(path, st.apply)
    assert done.applied == len(old) and not done.damaged
    assert st.nodes["a"].counts[st.nodes["a"].state[0]] and st.finished_ok is None
    j = Journal(path)
    j.append(records.finish(True, T + 3))
    j.close()
    lines = path.read_bytes().splitlines(keepends=True)
    assert decode(lines[0])["e"] == journal.RUN  # (it stays a journal of version 1: no header put in front)
    st = RunState(_plan(tmp_path))
    replay(path, st.apply)
    assert st.finished_ok is True


def _newer(path: Path, v: int = VERSION + 1, by: str = "9.9.9") -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    assert decode(lines[0])["e"] == HEADER
    path.write_bytes(encode({"e": HEADER, "v": v, "pwe": by}) + b"".join(lines[1:]))


def test_a_journal_of_a_newer_version_is_refused_by_replay_and_by_the_writer(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    j.append(records.note("one", T))
    j.close()
    _newer(path)
    size = path.stat().st_size
    for start in (0, size):
        with pytest.raises(JournalTooNew) as got:
            replay(path, lambda r: None, start=start)
        said = str(got.value)
        assert f"version {VERSION + 1}" in said and "pwe 9.9.9" in said and "\n" not in said
        assert got.value.exit_status == 2
    with pytest.raises(JournalTooNew):
        Journal(path)
    assert path.stat().st_size == size  # (nothing appended)


@pytest.mark.parametrize("v", [0, "2", None])
def test_a_header_with_a_version_that_is_no_version_is_refused_too(tmp_path, v):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(encode({"e": HEADER, "v": v, "pwe": "x"}) + encode(records.note("one", T)))
    with pytest.raises(JournalTooNew):
        replay(path, lambda r: None)


def test_a_damaged_header_is_a_damaged_line_and_the_journal_is_read_on(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    j.append(records.note("one", T))
    j.close()
    data = bytearray(path.read_bytes())
    data[10] ^= 1  # (its checksum no longer matches)
    path.write_bytes(bytes(data))
    seen = []
    done = replay(path, seen.append)
    assert done.damaged == [1] and [r["what"] for r in seen] == ["one"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    (tmp / "wf.yaml").write_text(WF)
    rc, _, err = run_cli("run", tmp / "wf.yaml", "--cores", "2", "--run-dir", tmp / "run", cwd=tmp)
    assert rc == 0, err
    return tmp, tmp / "run"


def test_a_real_run_journal_has_the_header_and_every_reader_reads_past_it(finished):
    tmp, run_dir = finished
    first = (run_dir / "journal.jsonl").read_bytes().split(b"\n", 1)[0] + b"\n"
    assert decode(first) == {"e": HEADER, "v": VERSION, "pwe": pwe.__version__}
    for args in (("status", run_dir, "--json"), ("show", run_dir), ("events", run_dir), ("trace", run_dir)):
        rc, out, err = run_cli(*args, cwd=tmp)
        assert rc == 0, (args, err)
        assert "damaged" not in err and "journal" not in out.split("\n", 1)[0], (args, out, err)
    rc, out, err = run_cli("events", run_dir, "--json", cwd=tmp)
    assert HEADER not in {r.get("e") for r in _json_lines(out)}


def _json_lines(text):
    out = []
    for line in text.splitlines():
        try:
            got = json.loads(line)
        except ValueError:
            continue
        out.extend(got if isinstance(got, list) else [got])
    return [r for r in out if isinstance(r, dict)]


def test_a_run_whose_journal_a_newer_pwe_began_is_refused_in_one_line(finished, tmp_path):
    tmp, run_dir = finished
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, symlinks=True)
    _newer(copy / "journal.jsonl")
    before = (copy / "journal.jsonl").read_bytes()
    for args in (("status", copy), ("show", copy), ("resume", copy)):
        rc, out, err = run_cli(*args, cwd=tmp_path)
        assert rc == 2, (args, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, (args, err)
        assert "pwe 9.9.9" in lines[0] and f"version {VERSION + 1}" in lines[0], (args, lines)
    assert (copy / "journal.jsonl").read_bytes() == before


def test_a_journal_holding_its_header_alone_has_no_record_of_a_run_begun(tmp_path):
    from pwe.base.errors import RunDamaged
    from pwe.runstate.runs import check_journal

    (tmp_path / "journal.jsonl").write_bytes(encode(journal.header()) + b'{"e":"run","t":1')  # (its first write torn)
    (tmp_path / "state.json").write_text("{}")  # (begun: an engine wrote its snapshot)
    with pytest.raises(RunDamaged, match="cut off inside its first record"):
        check_journal(tmp_path)


def test_a_background_engine_that_refuses_its_run_is_reaped_by_whoever_started_it(finished, tmp_path):
    # `pwe submit` and the service start the engine in the background and wait for its word:
    # one that refused its run leaves, and is reaped there, never a zombie of a caller that
    # lives on (the service)
    from pwe.base.errors import PweError
    from pwe.engine.control import spawn_engine

    _, run_dir = finished
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, symlinks=True)
    _newer(copy / "journal.jsonl")
    before = child_pids()
    with pytest.raises(PweError) as got:
        spawn_engine(copy)
    assert got.value.exit_status == 2 and "pwe 9.9.9" in str(got.value), got.value
    assert child_pids() - before == set(), "the engine that refused was left unreaped"
