"""One owner per fact in the engine (issue 46): a pilot's handle and a lane change only
through their own methods (pwe/engine/handles.py); the other parts read their fields.
Checked over the source, and the methods' own rules checked here."""

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from pwe.base.errors import BadTransition
from pwe.engine import scaling
from pwe.engine.handles import Lane, PilotHandle, PilotState

ENGINE = Path(__file__).resolve().parents[2] / "pwe" / "engine"
#: what changes a container in place
MUTATORS = {"add", "append", "discard", "remove", "clear", "pop", "update", "extend", "setdefault", "insert"}


def _fields(cls_name: str) -> set[str]:
    """The attributes a class of handles.py sets on itself."""
    tree = ast.parse((ENGINE / "handles.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    out = set()
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for one in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(one, ast.Attribute) and isinstance(one.value, ast.Name) and one.value.id == "self":
                    out.add(one.attr.lstrip("_"))
    return out


def _writes(path: Path, fields: set[str], names: set[str]) -> list[str]:
    """Where ``path`` sets a field of an object named one of ``names`` (``pilot.full = ``,
    ``lane.retry_at += ``, ``pilot.refused.add(..)``, ``pilot.qs[via] = ``)."""
    found = []

    def owner(node):
        return isinstance(node, ast.Attribute) and node.attr in fields and isinstance(node.value, ast.Name) \
            and node.value.id in names

    for node in ast.walk(ast.parse(path.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for one in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if owner(one) or isinstance(one, ast.Subscript) and owner(one.value):
                    found.append(f"{path.name}:{node.lineno}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS \
                and owner(node.func.value):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_part_of_the_engine_sets_a_field_of_a_pilot_handle_or_a_lane_but_their_own_methods():
    pilot_fields = _fields("PilotHandle") - {"state"}  # (become() is the stage's one way; checked below)
    lane_fields = _fields("Lane")
    assert {"full", "outstanding", "given", "q", "qs", "refused", "serves"} <= pilot_fields
    assert {"refusals", "retry_at", "retry_pilot", "last_status", "status_interval", "ready"} <= lane_fields
    found = []
    for path in sorted(ENGINE.glob("*.py")):
        if path.name == "handles.py":
            continue
        found += _writes(path, pilot_fields, {"pilot", "p", "handle"})
        found += _writes(path, lane_fields, {"lane"})
        found += _writes(path, {"state"}, {"pilot", "p"})
    assert not found, f"a handle's fields set outside pwe/engine/handles.py: {found}"


def _handle():
    return PilotHandle("p1", Path("/nonexistent/p1"), 0, "here", 4,
                       transport=SimpleNamespace(acks=True, send=lambda out: None, trim=lambda: None))


def test_a_pilots_sequence_numbers_admit_each_message_once_whichever_transport_brings_it():
    p = _handle()
    assert p.admit("spool", 1) == "" and p.admit("spool", 2) == ""
    assert p.admit("spool", 2) == "replayed"
    assert p.admit("redis", 2) == "resent"  # (the other transport delivered it first)
    assert p.admit("redis", 3) == "" and (p.q, p.qs) == (3, {"spool": 2, "redis": 3})
    p.acknowledge()
    p.acknowledge()
    assert p._out == [{"k": "ack", "q": 3}] and p.acked == 3
    p.numbered(7, {"spool": 7})
    assert p.admit("spool", 7) == "replayed" and p.admit("spool", 8) == ""


def test_a_pilots_counts_move_with_what_it_is_sent_and_what_ends():
    p = _handle()
    p.sent_task({"k": "task", "n": "a", "m": 0})
    p.sent_group("a", [1, 2, 3])
    assert (p.outstanding, p.given, p.units) == (4, 4, 2)
    p.ended_one("a", 0)
    p.ended_one("a", 1)
    assert (p.outstanding, p.units, p.finished_any) == (2, 1, True)
    assert p.first_start() and not p.first_start()
    assert p.first_refusal("forged") and not p.first_refusal("forged")
    p.stop_taking()
    assert p.full and not p.takes_work and p._out[-1] == {"k": "stop"}
    p.send_env("e1", {"k": "env", "id": "e1"})
    assert "e1" in p.envs_sent
    p.lost_env("e1")
    assert "e1" not in p.envs_sent


def test_a_pilots_stage_and_its_reason_move_together():
    p = _handle()
    p.give_up("silent for 60 s", 100.0)
    assert (p.state, p.given_up_why, p.given_up_at) == (PilotState.GIVEN_UP, "silent for 60 s", 100.0)
    p.said_down("idle")
    p.said_down("idle")  # (said twice: down once)
    assert (p.state, p.down_why) == (PilotState.DOWN, "idle")
    with pytest.raises(BadTransition):
        p.give_up("again", 200.0)


def _lane():
    lane = Lane.__new__(Lane)  # (no protocol: the lane's own bookkeeping alone)
    lane.name, lane.status_every, lane.status_interval, lane.last_status = "h", 5.0, 5.0, 0.0
    lane.unreachable_since, lane.unreachable_why, lane.backoff, lane.retry_at = None, "", 5.0, 0.0
    lane.retry_pilot, lane.last_submit, lane.refusals, lane.refused_since, lane.refused_why = None, None, 0, None, ""
    return lane


def test_a_lanes_refusals_back_off_and_end_when_one_goes_through():
    lane = _lane()
    lane.refused("account closed", 1000.0, 0.0, 5)
    lane.refused("account closed", 1010.0, 0.0, 5)
    assert lane.refusals == 2 and lane.refused_since == 1000.0
    assert lane.retry_at == 1010.0 + scaling.backoff(2) and "2 pilot jobs in a row" in lane.refused_why
    assert lane.unreachable_since == 1000.0 and not lane.not_answering  # (pwe status: one pair of fields)
    assert lane.accepted() == 2 and (lane.refusals, lane.refused_since, lane.refused_why) == (0, None, "")


def test_a_lane_whose_batch_system_does_not_answer_backs_off_and_says_for_how_long():
    lane = _lane()
    assert lane.not_answered("timeout", 100.0) is True
    assert lane.not_answered("timeout", 105.0) is False
    assert lane.retry_at == 105.0 + 7.5 and lane.unreachable_why == "timeout" and lane.not_answering
    assert lane.answered(130.0) == 30.0 and not lane.not_answering and lane.answered(131.0) is None
    lane.polled(200.0, changed=False)
    assert (lane.last_status, lane.status_interval) == (200.0, 7.5)
    lane.ask_soon()
    assert (lane.last_status, lane.status_interval) == (0.0, 5.0)
    lane.submit_again("p3", True)
    assert lane.retry_pilot == ("p3", True)
    lane.submitted()
    assert lane.retry_pilot is None
