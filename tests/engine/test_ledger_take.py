"""Ledger.take (pwe/engine/ledger.py): every record checked, journaled, then applied; a
damaged one neither. A pilot's batch taken with the journal holding its starts
(Journal.hold): an end carries its start, a hand-back follows it, the rest are written
at the batch's end, before its offset."""

import pytest

from pwe.base.states import ASSIGNED, DONE, READY, RUNNING
from pwe.engine.ledger import Ledger
from pwe.planning.plan import plan_workflow
from pwe.runstate import journal, records
from pwe.runstate.journal import Journal, decode, replay
from pwe.runstate.state import RunState

WF = """
name: books
nodes:
  a:
    parameters: {i: [1, 2, 3, 4]}
    run: 'true'
"""
T = 1_700_000_000.0


@pytest.fixture
def books(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(WF)
    plan = plan_workflow(wf)
    ledger = Ledger()
    ledger.open(RunState(plan), Journal(tmp_path / "journal.jsonl"))
    ledger.take(records.run(T, 1))
    ledger.take(records.pilot("p1", "here", "local", 4, T, pid=2, started=3))
    for i in range(4):
        ledger.take(records.assign("a", i, 1, "p1", T))
    return plan, ledger, tmp_path / "journal.jsonl"


def _lines(path):
    return [decode(line) for line in path.read_bytes().splitlines(keepends=True)][1:]  # (after the header)


def test_take_journals_then_applies_and_returns_what_apply_gave(books):
    plan, ledger, path = books
    assert ledger.state.nodes["a"].state[0] == ASSIGNED
    assert ledger.take(records.start("a", 0, 1, "p1", T + 1, 9)) is True
    assert ledger.take(records.start("a", 0, 2, "p1", T + 1, 9)) is None  # (not its attempt: changes nothing)
    ledger.journal.flush()
    st = RunState(plan)
    replay(path, st.apply)
    assert st.nodes["a"].state[0] == RUNNING and st.nodes["a"].pid[0] == 9


@pytest.mark.parametrize("bad", [records.start("zz", 0, 1, "p1", T), records.end("a", 99, 1, "p1", T, 0, 1.0),
                                 {"e": "nonsense", "t": T}, records.end("a", 0, 1, "p1", T, "0", 1.0)])
def test_a_damaged_record_is_neither_journaled_nor_applied(books, bad):
    _, ledger, _ = books
    before = ledger.journal.pending, bytes(ledger.state.nodes["a"].state)
    with pytest.raises((KeyError, ValueError)):
        ledger.take(bad)
    assert (ledger.journal.pending, bytes(ledger.state.nodes["a"].state)) == before


def test_a_held_batch_writes_an_end_with_its_start_a_back_after_its_start_the_rest_before_the_offset(books):
    plan, ledger, path = books
    ledger.journal.flush()
    skip = len(_lines(path))
    take, j = ledger.take, ledger.journal
    j.hold()
    s0 = records.start("a", 0, 1, "p1", T + 1, 10, nodes=["n1", "n2"])
    e0 = records.end("a", 0, 1, "p1", T + 2, 0, 1.0, cpu=0.5, rss=100)
    take(s0)
    take(records.start("a", 1, 1, "p1", T + 1, 11))
    take(records.start("a", 2, 1, "p1", T + 1, 12))
    assert ledger.state.nodes["a"].state[0] == RUNNING  # (applied as taken: the journal holds it meanwhile)
    take(e0)
    take(records.unassign("a", 1, "p1", 1, "handed back", T + 2))
    j.release()
    take(records.offset("p1", 100, 5))
    j.flush()
    assert "ran" not in e0 and "ran" not in s0  # (the caller's records are not changed)
    got = _lines(path)[skip:]
    assert [(r["e"], r.get("m"), r.get("ran")) for r in got] == [
        ("end", 0, 1), ("start", 1, None), ("unassign", 1, None), ("start", 2, None), ("offset", None, None)]
    assert got[0]["nodes"] == ["n1", "n2"]
    st = RunState(plan)
    replay(path, st.apply)
    assert list(st.nodes["a"].state) == [DONE, READY, RUNNING, ASSIGNED]
    assert bytes(st.nodes["a"].state) == bytes(ledger.state.nodes["a"].state)


def test_plain_ends_carrying_their_starts_are_one_ends_record(books):
    plan, ledger, path = books
    ledger.journal.flush()
    skip = len(_lines(path))
    j = ledger.journal
    j.hold()
    for i in range(4):
        ledger.take(records.start("a", i, 1, "p1", T + 1, 20 + i))
        ledger.take(records.end("a", i, 1, "p1", T + 2, 0, 1.0, cpu=0.5, rss=100))
    j.release()
    j.flush()
    got = _lines(path)[skip:]
    assert [r["e"] for r in got] == [journal.ENDS] and got[0]["ran"] == 1
    st = RunState(plan)
    replay(path, st.apply)
    assert list(st.nodes["a"].state) == [DONE] * 4


def test_a_batch_cut_short_is_written_whole_by_the_next_flush(books):
    plan, ledger, path = books
    ledger.journal.hold()
    ledger.take(records.start("a", 3, 1, "p1", T + 1, 30))
    ledger.journal.flush()  # (no release: an error mid-batch, then the engine's last flush)
    assert _lines(path)[-1]["e"] == journal.START
    ledger.take(records.start("a", 2, 1, "p1", T + 1, 31))  # (no batch held now: written at once)
    assert ledger.journal.pending == 1
