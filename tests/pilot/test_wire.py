"""The messages between engine and pilot (pilot/wire.py) and their transport."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pilot import wire
from pilot.transport import EngineSpool, PilotSpool


def test_what_both_ends_write_is_what_the_wire_module_lists(tmp_path):
    """Every message a real run writes, each way, is of a kind pilot/wire.py names, with
    only the fields it lists for that kind; the pilot says its version when it comes up."""
    from pwe.engine.loop import Engine

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    parameters: {i: [1, 2, 3]}\n"
                  "    run: echo x=$PWE_PARAM_I >> $PWE_OUTPUTS\n"
                  "    scheduling: {maxWallTimePerMember: 1, shareNodes: false}\n"
                  "  b:\n    after: [a]\n    run: exit 3\n")
    engine = Engine.create(wf, cores=2, run_dir=tmp_path / "run")
    assert engine.run() is False
    engine.pilots["p1"].popen.wait(30)  # told to stop: it says `down` and leaves
    seen = set()
    for name in ("tasks.jsonl", "events.jsonl"):
        for line in (tmp_path / "run" / "pilots" / "p1" / name).read_text().splitlines():
            msg = json.loads(line)
            assert len(msg.pop("s")) == 32, f"{name}: a line that is not signed (128 bits): {line}"
            kind = msg.pop("k")
            assert kind in wire.FIELDS, f"{name}: kind {kind!r} is not in pilot/wire.py"
            assert set(msg) <= wire.FIELDS[kind], f"{name}: {kind} has fields {set(msg) - wire.FIELDS[kind]} " \
                                                  "that pilot/wire.py does not list"
            seen.add(kind)
            if kind == wire.UP:
                assert msg["v"] == wire.VERSION
    assert {wire.TASK, wire.STOP, wire.UP, wire.START, wire.END, wire.DOWN} <= seen, seen


def test_a_pilot_of_another_version_is_refused_with_one_line(tmp_path):
    from pwe.engine.loop import Engine, PilotHandle
    from pwe.base.errors import RunStopped

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    run: 'true'\n")
    engine = Engine.create(wf, cores=1, run_dir=tmp_path / "run")
    engine._load()
    try:
        d = engine.dir / "pilots" / "p1"
        pilot = PilotHandle("p1", d, 0, "elsewhere", 1, lane="local", transport=engine.intake.transport("local", "p1"))
        engine.pilots["p1"] = pilot
        key = wire.channel_key((engine.dir / "secret").read_bytes().strip(), "p1", True)
        (d / "events.jsonl").write_bytes(wire.encode([{"k": "up", "v": wire.VERSION + 1, "pid": 1, "t": 0, "q": 1}],
                                                     key))
        with pytest.raises(RunStopped) as err:
            engine.intake.ingest(pilot)
        assert str(err.value) == (f"pilot p1 on elsewhere speaks version {wire.VERSION + 1} of the engine-pilot "
                                  f"messages, this engine speaks {wire.VERSION}: run the same pwe on both sides "
                                  "(its pilot package)")
        assert not pilot.alive
        sent = json.loads((d / "tasks.jsonl").read_text())
        assert sent.pop("s") and sent == {"k": "cancel"}
        pilot.close()
    finally:
        engine.journal.close()


def test_the_spool_holds_back_a_partial_line_and_reads_on_from_a_cursor(tmp_path):
    engine = EngineSpool(tmp_path)
    pilot = PilotSpool(str(tmp_path))
    engine.send([{"k": "task", "n": "a", "m": 0, "a": 1}, {"k": "stop"}])
    got, cursor = pilot.receive(0)
    assert [m["k"] for m in got] == ["task", "stop"]
    assert pilot.receive(cursor) == ([], cursor)
    assert engine.sent() == {("a", 0, 1): 1}
    with open(tmp_path / "events.jsonl", "ab") as fh:
        fh.write(b'{"k":"up","v":1}\n{"k":"hb"')  # a line its writer is still writing
    got, cursor = engine.receive(0)
    assert got == [{"k": "up", "v": 1}] and cursor == len(b'{"k":"up","v":1}\n')
    with open(tmp_path / "events.jsonl", "ab") as fh:
        fh.write(b',"running":0}\n')
    got, after = engine.receive(cursor)
    assert got == [{"k": "hb", "running": 0}]
    # a fresh reader (a resumed engine) from a journaled cursor reads the same
    assert EngineSpool(tmp_path).receive(cursor) == (got, after)
    engine.close()
    pilot.close()


def test_the_wire_knows_the_group_kind_and_a_resumed_engine_counts_its_tasks(tmp_path):
    """A group is one signed line; a group that holds something not a task is malformed;
    the tasks file's count of what was sent (resume) sees each task inside a group."""
    key = b"k" * 32
    good = {"k": "group", "tasks": [{"k": "task", "n": "a", "m": m, "a": 1, "cmd": "true", "cwd": "/x"}
                                    for m in (3, 4)]}
    msgs, rest = wire.decode(wire.encode([good], key), key)
    assert msgs == [good] and rest == b""
    for bad, why in (({"k": "group", "tasks": []}, "group: no tasks"),
                     ({"k": "group", "tasks": [{"k": "stop"}]}, "group: not a task"),
                     ({"k": "group", "tasks": [{"k": "task", "n": "a", "m": 1, "a": 1, "evil": 1}]}, "not a task")):
        got = wire.decode(wire.encode([bad], key), key)[0][0]
        assert got["k"] == wire.MALFORMED and why in got["why"], got
    spool = EngineSpool(tmp_path)
    spool.send([good, {"k": "task", "n": "a", "m": 5, "a": 1, "cmd": "true", "cwd": "/x"}])
    assert spool.sent() == Counter({("a", 3, 1): 1, ("a", 4, 1): 1, ("a", 5, 1): 1})
    assert spool.sent(among={("a", 4, 1)})[("a", 4, 1)] == 1
    spool.close()
