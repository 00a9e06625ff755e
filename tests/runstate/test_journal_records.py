"""The journal's record kinds, as pwe/runstate/journal.py declares them: each one applied
by a handler of its own, each one written and read back to the same state, a kind not
declared refused as damage is, and a real run writing only the fields declared."""

import json

import pytest

from helpers import read_journal, run_cli
from pwe.base.errors import RunDamaged
from pwe.base.states import DONE, READY
from pwe.observe import trace
from pwe.planning.plan import plan_workflow
from pwe.runstate import journal, state
from pwe.runstate.journal import FIELDS, Journal, encode, replay
from pwe.runstate.state import RunState

WF = """
name: records
nodes:
  a:
    parameters: {i: [1, 2, 3]}
    run: 'true'
  b:
    after: [a]
    run: 'true'
"""

T = 1_700_000_000.0
P = "p1"


def _plan(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(WF)
    return plan_workflow(wf)


def _member(kind, m, **more):
    return {"e": kind, "n": "a", "m": m, "a": 1, "p": P, **more}


#: One record of every kind, in an order a run could write them (a member's end with and
#: without its start, a member handed back, one found complete, one reused, a cancel then a retry).
RECORDS = [
    {"e": journal.RUN, "t": T, "pid": 11, "checks": ["a"]},
    {"e": journal.PILOT, "p": P, "pid": 12, "host": "here", "lane": "local", "slots": 2, "t": T},
    _member(journal.ASSIGN, 0, t=T), _member(journal.ASSIGN, 1, t=T), _member(journal.ASSIGN, 2, t=T),
    _member(journal.START, 0, t=T + 1, pid=13),
    _member(journal.END, 0, t=T + 2, rc=0, dt=1.0, cpu=0.5, rss=900),
    _member(journal.END, 1, t=T + 2, rc=0, dt=1.5, cpu=0.25, rss=800, ran=1),
    _member(journal.UNASSIGN, 2, why="handed back", t=T + 2),
    {"e": journal.NODE_LOST, "p": P, "node": "n2", "why": "its slurmd stopped answering", "t": T + 3},
    {"e": journal.OFFSET, "p": P, "off": 456, "q": 7, "qs": {"spool": 7}},
    {"e": journal.REJECT, "p": P, "why": "forged", "k": "end", "q": 8, "detail": None, "text": "{}", "t": T + 3},
    {"e": journal.PILOT_DRAIN, "p": P, "req": "r1", "t": T + 3},
    {"e": journal.EDGE, "id": "x1", "file": "e1.json", "pilot": P, "event": "ended", "job": "9", "status": "0",
     "t": T + 4},
    {"e": journal.NOTE, "what": "edge event already applied: its replay ignored", "replay_of": "x1", "replays": 1,
     "file": "e2.json", "t": T + 4},
    {"e": journal.PILOT_GONE, "p": P, "why": "batch job 9 ended", "t": T + 4},
    {"e": journal.COMPLETE, "n": "a", "r": [[2, 3]]},
    {"e": journal.REUSED, "n": "b", "from": "records-1", "r": [[0, 1, 0]], "out": {"0": {"x": "1"}}},
    {"e": journal.HALT, "why": "halted: 1 of 3 failed, budget 1", "when": "soon", "failed": 1, "of": 3,
     "budget": "1", "t": T + 5},
    {"e": journal.HOLD, "n": "a", "param": "i", "value": "3", "failed": 2, "t": T + 5},
    {"e": journal.SET, "only": {"a": [[0, 2]]}, "values": {"memoryPerMember": 200, "env": {"A": "b"}}, "id": "r1",
     "by": "someone", "t": T + 5},
    {"e": journal.STOPPED, "why": "the disk is full", "t": T + 5},
    {"e": journal.RESUME, "t": T + 6, "pid": 14, "by": "someone"},
    {"e": journal.CANCEL, "t": T + 7, "by": "someone"},
    {"e": journal.RETRY, "t": T + 8, "by": "someone", "only": None},
    {"e": journal.FINISH, "ok": False, "t": T + 9},
]


def test_every_declared_kind_has_a_handler_and_every_handler_a_declared_kind():
    assert set(state._ON) == set(FIELDS)
    assert set(trace._ON) <= set(FIELDS)


def test_the_records_here_cover_every_kind_with_only_its_declared_fields():
    # (a kind added to the journal without a record here fails: the round trip below misses it;
    # ``ends`` is what the journal makes of plain ends written one after another; its header
    # is the journal's own first line: tests/runstate/test_journal_version.py)
    assert {r["e"] for r in RECORDS} | {journal.ENDS, journal.HEADER} == set(FIELDS)
    for r in RECORDS:
        assert set(r) - {"e"} <= FIELDS[r["e"]], r


def _check_state(st):
    a, b = st.nodes["a"], st.nodes["b"]
    assert list(a.state) == [DONE, DONE, DONE] and a.attempt.tolist() == [1, 1, 0]
    assert a.complete == [[2, 3]] and a.spent == 2.5 and a.done_spent == 2.5
    # (reused from an earlier run: done, with the outputs it had there; the cancel and the retry leave it)
    assert list(b.state) == [DONE] and b.reused == [[0, 1, 0, "records-1"]] and b.outputs == {0: {"x": "1"}}
    assert st.api_checks == {"a"} and st.stopped is None and not st.cancelled and st.finished_ok is False
    pilot = st.pilots[P]
    assert pilot["alive"] is False and pilot["why"] == "batch job 9 ended" and pilot["done"] == 2
    assert pilot["lost"] == {"n2": T + 3} and pilot["draining"] and pilot["drain_req"] == "r1"
    assert pilot["offset"] == 456 and pilot["q"] == 7 and pilot["qs"] == {"spool": 7}
    assert st.rejected == {"forged": 1}
    assert st.edges == {"x1": 1} and st.edge_files == {"e1.json", "e2.json"}


def test_each_kind_written_to_the_journal_and_replayed_gives_the_state_applying_it_gave(tmp_path):
    plan = _plan(tmp_path)
    direct = RunState(plan)
    for r in RECORDS:
        direct.apply(dict(r))
    _check_state(direct)

    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    for r in RECORDS:
        j.append(dict(r))
    j.close()
    lines = path.read_bytes().splitlines(keepends=True)
    on_disk = [journal.decode(line) for line in lines]
    for r in on_disk:
        assert set(r) - {"e"} <= FIELDS[r["e"]], r
    kinds = [r["e"] for r in on_disk]
    assert journal.ENDS in kinds and kinds.count(journal.ASSIGN) == 1  # (compacted, as a run writes them)
    replayed = RunState(_plan(tmp_path))
    done = replay(path, replayed.apply)
    assert done.applied == len(lines) - 1 and not done.damaged and not done.torn  # (the header: applied to nothing)
    _check_state(replayed)
    assert replayed.snapshot() == direct.snapshot()


def test_a_record_of_a_kind_not_declared_is_skipped_as_damage_and_the_rest_replays(tmp_path):
    path = tmp_path / "journal.jsonl"
    lines = [encode(r) for r in RECORDS[:3]]
    lines.insert(2, encode({"e": "unheard_of", "t": T}))  # (its checksum good: only its kind is unknown)
    path.write_bytes(b"".join(lines))
    st = RunState(_plan(tmp_path))
    done = replay(path, st.apply)
    assert done.damaged == [3] and done.applied == 3
    assert done.warnings() == [f"{path} line 3 is damaged (checksum or format); skipped"]
    assert st.nodes["a"].state[0] != READY and st.pilots[P]["alive"]  # (the records around it applied)
    with pytest.raises(ValueError, match="unknown journal record 'unheard_of'"):
        st.apply({"e": "unheard_of"})


def test_a_journal_of_nothing_but_unknown_kinds_is_refused_as_a_damaged_one_is(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(encode({"e": "unheard_of", "t": T}) + encode({"e": "nor_this"}))
    with pytest.raises(RunDamaged, match="none of its 2 lines can be read"):
        replay(path, RunState(_plan(tmp_path)).apply)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    (tmp / "wf.yaml").write_text(WF)
    rc, out, err = run_cli("run", tmp / "wf.yaml", "--cores", "2", "--run-dir", tmp / "run", cwd=tmp)
    assert rc == 0, err
    return tmp, tmp / "run"


def test_a_real_run_writes_only_declared_kinds_and_fields(finished):
    _, run_dir = finished
    records = read_journal(run_dir)
    for r in records:
        assert r["e"] in FIELDS, r
        assert set(r) - {"e", "c"} <= FIELDS[r["e"]], r
    assert {journal.RUN, journal.PILOT, journal.ASSIGN, journal.START, journal.END, journal.FINISH} <= \
        {r["e"] for r in records}


def test_a_real_run_with_a_record_of_an_unknown_kind_reads_with_one_warning(finished):
    tmp, run_dir = finished
    path = run_dir / "journal.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(len(lines) - 1, encode({"e": "unheard_of", "t": T}))
    path.write_bytes(b"".join(lines))
    rc, out, err = run_cli("show", run_dir, "--json", cwd=tmp)
    assert rc == 0, err
    assert f"journal.jsonl line {len(lines) - 1} is damaged" in err and "Traceback" not in err
    assert [m["state"] for m in json.loads(out)] == ["done"] * 4
