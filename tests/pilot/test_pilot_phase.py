"""The pilot's life stage (pilot/phase.py) and its shape (issue 46): one enum whose moves
are a table (each allowed move taken, each other refused), each stage's ``down`` word,
and a pilot composed of parts it holds, none of them a base of another."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from pilot.phase import TRANSITIONS, Life, PhaseError, PilotPhase

P = PilotPhase
ALLOWED = {
    P.RUNNING: {P.STOPPING, P.LEAVING, P.DRAINING, P.TERMINATED, P.CANCELLED, P.GONE},
    P.STOPPING: {P.LEAVING, P.DRAINING, P.TERMINATED, P.CANCELLED, P.GONE},
    P.LEAVING: {P.DRAINING, P.TERMINATED, P.CANCELLED, P.GONE},
    P.DRAINING: {P.TERMINATED, P.CANCELLED, P.GONE},
    P.TERMINATED: {P.CANCELLED, P.GONE},
    P.CANCELLED: set(),
    P.GONE: set(),
}


#: pilot classes others may derive from: interfaces, each subclass a whole implementation
INTERFACES = {"pilot.transport.Transport"}


def at(phase: PilotPhase) -> Life:
    life = Life()
    life.phase = phase
    return life


@pytest.mark.parametrize("frm", list(PilotPhase), ids=lambda p: p.name)
def test_each_stage_moves_only_as_the_table_says(frm):
    assert TRANSITIONS[frm] == ALLOWED[frm]
    for to in PilotPhase:
        life = at(frm)
        if to in ALLOWED[frm]:
            life.become(to)
            assert life.phase is to
        else:
            with pytest.raises(PhaseError, match=f"{frm.name} cannot become {to.name}"):
                life.become(to)
            assert life.phase is frm


def test_a_pilot_starts_running_and_its_life_only_goes_forward():
    assert Life().phase is P.RUNNING
    order = list(PilotPhase)
    for frm, tos in ALLOWED.items():
        assert all(order.index(to) > order.index(frm) for to in tos)
        assert frm not in tos


def test_each_stage_carries_its_down_word():
    assert {p: p.word for p in PilotPhase} == {
        P.RUNNING: "idle", P.STOPPING: "stop", P.LEAVING: "leave", P.DRAINING: "walltime",
        P.TERMINATED: "terminated", P.CANCELLED: "cancel", P.GONE: "gone"}
    assert {p for p in PilotPhase if p.drained} == {P.DRAINING, P.TERMINATED}
    assert {p for p in PilotPhase if p.ended} == {P.CANCELLED, P.GONE}
    assert {p: p.back_why for p in PilotPhase if p.back_why} == {
        P.LEAVING: "the pilot is drained", P.DRAINING: "the allocation is ending",
        P.TERMINATED: "the allocation is ending"}


def test_a_request_for_a_stage_already_held_changes_nothing_and_one_off_the_table_raises():
    """at_least: a STOP heard while draining, a drain on each pass, a second cancel: held
    already; a cancelled pilot found gone, or a gone one cancelled: refused."""
    for frm in PilotPhase:
        for to in PilotPhase:
            life = at(frm)
            if to in ALLOWED[frm]:
                assert life.at_least(to) and life.phase is to
            elif to is frm or (frm.rank > to.rank and not to.ended):
                assert not life.at_least(to) and life.phase is frm
            else:
                with pytest.raises(PhaseError):
                    life.at_least(to)
    with pytest.raises(PhaseError):
        at(P.CANCELLED).at_least(P.GONE)
    with pytest.raises(PhaseError):
        at(P.GONE).at_least(P.CANCELLED)


def test_no_pilot_class_has_another_pilot_class_as_a_base():
    """The pilot is composed (issue 46): its parts are held, never inherited; enums and
    exceptions aside, and the one interface whose implementations are the point of it
    (pilot.transport.Transport: the spool's two ends and the broker's, each a whole
    transport, not a part of one)."""
    import importlib
    import inspect
    from enum import Enum

    root = Path(__file__).resolve().parents[2] / "pilot"
    classes = []
    for path in sorted(root.glob("*.py")):
        if path.stem == "__main__":
            continue
        module = importlib.import_module(f"pilot.{path.stem}" if path.stem != "__init__" else "pilot")
        classes += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    assert len(classes) > 10 and any(c.__name__ == "PilotAgent" for c in classes)
    bad = [f"{c.__module__}.{c.__name__}({b.__module__}.{b.__name__})" for c in classes for b in c.__bases__
           if b.__module__.split(".")[0] == "pilot" and not issubclass(c, (BaseException, Enum))
           and f"{b.__module__}.{b.__name__}" not in INTERFACES]
    assert bad == []


def test_the_agent_holds_its_parts_and_gives_them_no_agent(tmp_path):
    from pilot.agent import PilotAgent

    agent = PilotAgent(str(tmp_path), 2)
    parts = [agent.intake, agent.endings, agent.remote, agent.spawners, agent.setups, agent.losses, agent.scratch]
    assert len({type(p) for p in parts}) == len(parts)
    for part in parts:
        assert all(v is not agent for v in vars(part).values())
    # shared state is one object, never a copy
    assert agent.queue is agent.intake.queue is agent.scratch.queue is agent.losses.queue is agent.spawners.queue
    assert agent.running is agent.intake.running is agent.endings.running is agent.remote.running
    assert agent.life is agent.intake.life is agent.endings.life is agent.scratch.life
    assert agent.life.phase is P.RUNNING


def test_the_stage_answers_why_the_pilot_leaves(tmp_path):
    """_why_leave from the stage: a stopping pilot leaves once nothing is queued; a drained,
    cancelled or gone one once nothing runs; each with its stage's word."""
    from pilot.agent import PilotAgent

    agent = PilotAgent(str(tmp_path), 2)
    assert agent._why_leave(0.0, 0.0) is None
    agent.intake.read_tasks()  # (nothing sent: nothing changes)
    agent.life.become(P.STOPPING)
    agent.queue.append({"n": "a", "m": 0, "a": 1})
    assert agent._why_leave(0.0, 0.0) is None
    agent.queue.clear()
    assert agent._why_leave(0.0, 0.0) == "stop"
    agent.life.become(P.LEAVING)
    agent.queue.append({"n": "a", "m": 0, "a": 1})
    assert agent._why_leave(0.0, 0.0) is None
    for phase in (P.DRAINING, P.TERMINATED, P.GONE):
        agent.life.become(phase)
        assert agent._why_leave(0.0, 0.0) == phase.word
    agent.queue.clear()


def test_a_pilot_takes_only_a_missing_or_other_directory_for_its_run_gone(tmp_path, monkeypatch):
    """Endings.look_home (as a part now): "no such directory" or another directory at its
    path, seen twice in a row, moves the pilot to GONE; an error of any other kind (a
    network file system that does not answer now), or one look alone, never does."""
    from pilot.agent import PilotAgent

    home = tmp_path / "pilots" / "p1"
    home.mkdir(parents=True)
    agent = PilotAgent(str(home), 2)
    p = agent.endings

    answers: list = []
    real_stat = os.stat

    def stat(path, *a, **kw):
        if path == str(home) and answers:
            got = answers.pop(0)
            if isinstance(got, OSError):
                raise got
        return real_stat(path, *a, **kw)

    monkeypatch.setattr(os, "stat", stat)
    answers.extend([OSError(errno.EIO, "I/O error"), OSError(errno.ESTALE, "Stale file handle"),
                    OSError(errno.EACCES, "Permission denied")] * 2)
    for _ in range(6):
        p.look_home()
    assert agent.life.phase is P.RUNNING
    answers.append(FileNotFoundError(errno.ENOENT, "No such file or directory"))
    p.look_home()
    p.look_home()  # (there again: a look alone is forgotten)
    answers.append(FileNotFoundError(errno.ENOENT, "No such file or directory"))
    p.look_home()
    assert agent.life.phase is P.RUNNING and p.gone_looks == 1
    p.look_home()
    assert agent.life.phase is P.RUNNING and p.gone_looks == 0
    shutil.rmtree(home)
    home.mkdir()  # another directory at its path (removed, then made again: its inode is not the held one's)
    p.look_home()
    assert agent.life.phase is P.RUNNING
    p.look_home()
    assert agent.life.phase is P.GONE
    p.look_home()  # (gone: it looks no more)
    assert agent.life.phase is P.GONE


def test_the_engines_words_move_the_stage_and_what_comes_after_goes_back(tmp_path):
    """stop -> STOPPING; leave -> LEAVING (what is queued goes back, and what comes after);
    cancel -> CANCELLED (queue cleared); a second cancel changes nothing."""
    import json

    from pilot.agent import PilotAgent
    from pilot.transport import EngineSpool, PilotSpool

    engine = EngineSpool(tmp_path)
    agent = PilotAgent(str(tmp_path), 2, transport=PilotSpool(str(tmp_path)))
    task = {"k": "task", "n": "a", "a": 1, "cmd": "true", "cwd": str(tmp_path / "m"), "env": {}}
    engine.send([{**task, "m": 0}, {"k": "stop"}])
    assert agent.read_tasks()
    assert agent.life.phase is P.STOPPING and len(agent.queue) == 1
    engine.send([{"k": "leave"}, {**task, "m": 1}, {"k": "leave"}])
    agent.read_tasks()
    assert agent.life.phase is P.LEAVING and not agent.queue
    engine.send([{"k": "stop"}, {"k": "cancel"}, {"k": "cancel"}])
    agent.read_tasks()
    assert agent.life.phase is P.CANCELLED
    agent.flush()
    backs = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["k"], e["m"], e["why"]) for e in backs] == [("back", 0, "the pilot is drained"),
                                                          ("back", 1, "the pilot is drained")]
    assert agent._why_leave(0.0, 0.0) == "cancel"


def test_a_drain_says_drain_once_and_a_sigterm_after_it_makes_it_terminated(tmp_path):
    from pilot.agent import PilotAgent

    agent = PilotAgent(str(tmp_path), 2)
    agent.queue.append({"n": "a", "m": 0, "a": 1})
    agent.endings.drain(0.0)
    agent.endings.drain(1.0)
    assert agent.life.phase is P.DRAINING and not agent.queue
    assert [e["k"] for e in agent._out] == ["drain", "back"]
    agent._on_term(15, None)
    assert agent.life.phase is P.DRAINING  # (the handler only notes it: the loop moves the stage)
    agent._stop_if_told(2.0)
    assert agent.life.phase is P.TERMINATED and [e["k"] for e in agent._out] == ["drain", "back"]
    assert agent._why_leave(2.0, 2.0) == "terminated"
