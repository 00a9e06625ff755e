"""The journal's compact forms at scale (pwe/runstate/journal.py): plain ends written one
after another are one ``ends`` record of whole-number columns (``"d":1``: milliseconds,
differences from the row before), read back to exactly the ends that were written; the
columns an earlier pwe wrote still read; damaged columns are a damaged record; a cursor
record leaves out what it would only repeat. And the engine's longer round while every
pilot holds a deep queue (pwe/engine/feed.py's ``deep``)."""

import json
import random
import types

import pytest

from pwe.base.states import ASSIGNED, DONE
from pwe.engine.feed import DEEP, Feeder
from pwe.planning.plan import plan_workflow
from pwe.runstate import journal
from pwe.runstate.journal import Journal, decode, encode, replay, unpack
from pwe.runstate.state import RunState

T = 1_795_821_821.882
N = 5000

WF = f"""
name: compact
nodes:
  m:
    parameters: {{i: {{range: [0, {N}]}}}}
    run: 'true'
"""


def _ends(rng: random.Random, count: int, first: int = 0) -> list[dict]:
    """Plain ends as the engine journals them: out of order now and then, times to the ms."""
    order = list(range(first, first + count))
    for i in range(0, count - 1, 7):  # (two slots: a later member can end first)
        order[i], order[i + 1] = order[i + 1], order[i]
    t, out = T, []
    for m in order:
        t = round(t + rng.choice((0.0, 0.001, 0.002, 0.013, 3.5)), 3)
        end = {"e": journal.END, "n": "m", "m": m, "a": 1, "p": "p1", "t": t, "rc": 0,
               "dt": rng.choice((0.0, 0.001, 0.002, 0.25, 3600.125)), "cpu": rng.choice((0.0, 0.001, 0.012, 1799.5)),
               "rss": rng.choice((16640, 16644, 900, 2_000_000))}
        if rng.random() < 0.8:
            end["ran"] = 1
        out.append(end)
    return out


def _written(tmp_path, records):
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    for r in records:
        j.append(dict(r))
    j.close()
    lines = [decode(line) for line in path.read_bytes().splitlines(keepends=True)]
    assert lines[0]["e"] == journal.HEADER  # (a new journal's first line: its version)
    return path, lines[1:]


def _as_read(lines):
    return [one for r in lines for one in unpack(r)]


def _expected(records):
    """What unpack gives back for these ends: each one, and its start before it when it carried one."""
    return [one for r in records for one in unpack(dict(r))]


def test_ends_are_one_record_of_whole_numbers_read_back_exactly(tmp_path):
    records = _ends(random.Random(7), 3000)
    path, lines = _written(tmp_path, records)
    assert len(lines) == 1 and lines[0]["e"] == journal.ENDS and lines[0]["d"] == 1
    for col in ("m", "t", "dt", "cpu", "rss"):
        assert all(type(v) is int for v in lines[0][col]), col
    assert _as_read(lines) == _expected(records)  # (every time, duration, usage and start: equal, not near)
    # whole numbers and differences: a plain end costs a few bytes, not the ~45 of its values
    assert path.stat().st_size / len(records) < 20, path.stat().st_size / len(records)


def test_ends_that_all_carry_their_start_say_so_once(tmp_path):
    records = [dict(r, ran=1) for r in _ends(random.Random(1), 50)]
    _, lines = _written(tmp_path, records)
    assert lines[0]["ran"] == 1 and _as_read(lines) == _expected(records)


def test_an_end_without_its_numbers_keeps_the_columns_as_values(tmp_path):
    records = _ends(random.Random(2), 4)
    records[2]["dt"] = None  # (a pilot's end without its duration: a damaged message, still journaled)
    _, lines = _written(tmp_path, records)
    assert "d" not in lines[0] and lines[0]["dt"][2] is None
    assert _as_read(lines) == _expected(records)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1.5", True])
def test_an_end_whose_numbers_are_not_finite_keeps_the_columns_as_values(tmp_path, bad):
    records = _ends(random.Random(3), 3)
    records[1]["cpu"] = bad  # (what a damaged message could carry: never an engine stopped by it)
    _, lines = _written(tmp_path, records)
    assert len(lines) == 1 and "d" not in lines[0] and lines[0]["cpu"][0] == records[0]["cpu"]


def test_the_columns_an_earlier_pwe_wrote_still_read(tmp_path):
    old = {"e": "ends", "n": "m", "a": 1, "p": "p1", "m": [3920, 3919, 3921], "t": [T, T + 0.001, T + 0.002],
           "dt": [0.001, 0.003, 0.002], "cpu": [0.001, 0.001, 0.0], "rss": [16640, 16640, 16644], "ran": [0, 0, 1]}
    got = unpack(decode(encode(old)))
    assert [(r["e"], r["m"]) for r in got] == [("end", 3920), ("end", 3919), ("start", 3921), ("end", 3921)]
    assert got[1]["t"] == T + 0.001 and got[1]["dt"] == 0.003 and got[3]["rss"] == 16644


@pytest.mark.parametrize("damage", [
    {"dt": [1, 2.5, 3]},                 # not whole milliseconds
    {"m": [5, 1]},                       # a column shorter than the rest
    {"ran": 0},                          # neither 1 nor a list
    {"t": [1795821821882, "x", 1]},      # not a number
    {"m": "5,1,1"},                      # not a list
])
def test_damaged_columns_are_a_damaged_record_and_the_rest_replays(tmp_path, damage):
    good = {"e": "ends", "n": "m", "a": 1, "p": "p1", "d": 1, "m": [5, 1, 1], "t": [1795821821882, 1, 2],
            "dt": [1, 2, 3], "cpu": [0, 1, 0], "rss": [16640, 0, 4], "ran": 1}
    assert [r["m"] for r in unpack(dict(good)) if r["e"] == "end"] == [5, 6, 7]
    with pytest.raises(ValueError):
        unpack({**good, **damage})
    wf = tmp_path / "wf.yaml"
    wf.write_text(WF)
    path = tmp_path / "journal.jsonl"
    assign = {"e": "assign", "n": "m", "m": 0, "a": 1, "p": "p1", "t": T, "len": 8}
    pilot = {"e": "pilot", "p": "p1", "host": "here", "lane": "local", "slots": 2, "t": T, "pid": 1}
    path.write_bytes(encode(pilot) + encode(assign) + encode({**good, **damage}) +
                     encode({**good, "m": [0, 1]} | {k: good[k][:2] for k in ("t", "dt", "cpu", "rss")}))
    st = RunState(plan_workflow(wf))
    done = replay(path, st.apply)
    assert done.damaged == [3] and done.applied == 3
    # members 0 and 1 ended (the good record after it); 5..7, which the damaged one named, did not
    assert list(st.nodes["m"].state[:8]) == [DONE] * 2 + [ASSIGNED] * 6


def test_a_cursor_record_leaves_out_a_spool_only_pilots_transports(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(WF)
    st = RunState(plan_workflow(wf))
    st.apply({"e": "pilot", "p": "p1", "host": "here", "lane": "local", "slots": 2, "t": T, "pid": 1})
    st.apply({"e": "offset", "p": "p1", "off": 10, "q": 7})
    assert st.pilots["p1"]["qs"] == {"spool": 7}
    st.apply({"e": "offset", "p": "p1", "off": 11, "q": 9, "qs": {"spool": 8, "redis": 9}})
    assert st.pilots["p1"]["qs"] == {"spool": 8, "redis": 9}


def _pilot(units: int, slots: int = 2, takes_work: bool = True):
    return types.SimpleNamespace(units=units, slots=slots, takes_work=takes_work)


@pytest.mark.parametrize("pilots, deep", [
    ([], False),                                        # no pilot: the short round
    ([_pilot(DEEP)], True),
    ([_pilot(DEEP - 1)], False),
    ([_pilot(DEEP), _pilot(3)], False),                 # one pilot about to run dry: short rounds
    ([_pilot(DEEP), _pilot(0, takes_work=False)], True),  # (one leaving is not fed anyway)
    ([_pilot(DEEP, slots=64)], False),                  # 64 slots drain 128 members quickly
    ([_pilot(4 * 64, slots=64)], True),
])
def test_the_engine_takes_a_longer_round_only_while_every_pilot_holds_a_deep_queue(pilots, deep):
    feeder = types.SimpleNamespace(pilots={str(i): p for i, p in enumerate(pilots)})
    assert Feeder.deep(feeder) is deep


def test_a_real_run_journals_its_ends_compactly_and_shows_every_member(tmp_path):
    from helpers import run_cli

    wf = tmp_path / "wf.yaml"
    wf.write_text(WF.replace(str(N), "600"))
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    records = [decode(line) for line in (tmp_path / "run" / "journal.jsonl").read_bytes().splitlines(keepends=True)]
    assert any(r["e"] == "ends" and r.get("d") == 1 for r in records)
    assert all("qs" not in r for r in records if r["e"] == "offset")  # (a local pilot: its spool only)
    rc, out, err = run_cli("show", tmp_path / "run", "--json", "--limit", "0", cwd=tmp_path)
    assert rc == 0, err
    shown = json.loads(out)
    assert len(shown) == 600 and {m["state"] for m in shown} == {"done"}
    # pwe events gives each end with its values, never the columns of differences
    rc, out, err = run_cli("events", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    ends = [json.loads(line.split(" ", 2)[2]) for line in out.splitlines() if line.startswith("journal end ")]
    assert sorted(e["m"] for e in ends) == list(range(600)) and "journal ends " not in out
    assert all(e["rc"] == 0 and 1.7e9 < e["t"] < 1e10 and 0 <= e["dt"] < 60 for e in ends), ends[:3]
