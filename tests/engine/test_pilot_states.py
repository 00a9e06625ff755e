"""A pilot's life stage (pwe.engine.handles.PilotState): each allowed transition, a
refused one, and which stages take work."""

from __future__ import annotations

import pytest

from pwe.engine.handles import TRANSITIONS, BadTransition, PilotHandle, Pilots, PilotState

S = PilotState
ALLOWED = [(S.ACTIVE, S.DRAINING), (S.ACTIVE, S.GIVEN_UP), (S.ACTIVE, S.DOWN), (S.ACTIVE, S.GONE),
           (S.DRAINING, S.GIVEN_UP), (S.DRAINING, S.DOWN), (S.DRAINING, S.GONE),
           (S.GIVEN_UP, S.DOWN), (S.GIVEN_UP, S.GONE), (S.DOWN, S.GONE), (S.GONE, S.SEALED)]


def handle(tmp_path, state: PilotState = S.ACTIVE) -> PilotHandle:
    pilot = PilotHandle("p1", tmp_path / "p1", 0, "here", 1)
    pilot.state = state
    return pilot


def test_the_table_allows_exactly_these_transitions():
    assert sorted((a.value, b.value) for a, nxt in TRANSITIONS.items() for b in nxt) == \
        sorted((a.value, b.value) for a, b in ALLOWED)


@pytest.mark.parametrize("before,after", ALLOWED, ids=lambda s: s.value)
def test_each_allowed_transition_is_made(tmp_path, before, after):
    pilot = handle(tmp_path, before)
    pilot.become(after)
    assert pilot.state is after


@pytest.mark.parametrize("before,after", [(S.GONE, S.ACTIVE), (S.DOWN, S.DRAINING), (S.GIVEN_UP, S.DRAINING),
                                          (S.SEALED, S.GONE), (S.ACTIVE, S.SEALED), (S.DOWN, S.DOWN)],
                         ids=lambda s: s.value)
def test_a_transition_the_table_does_not_allow_raises_and_changes_nothing(tmp_path, before, after):
    pilot = handle(tmp_path, before)
    with pytest.raises(BadTransition, match=f"pilot p1: {before.value} cannot become {after.value}"):
        pilot.become(after)
    assert pilot.state is before


def test_a_new_pilot_is_active_and_takes_work(tmp_path):
    pilot = PilotHandle("p1", tmp_path / "p1", 0, "here", 1)
    assert pilot.state is S.ACTIVE and pilot.alive and pilot.takes_work and not pilot.came_up


@pytest.mark.parametrize("state", list(PilotState), ids=lambda s: s.value)
def test_only_an_active_pilot_that_is_not_full_takes_work(tmp_path, state):
    pilot = handle(tmp_path, state)
    assert pilot.takes_work is (state is S.ACTIVE)
    assert pilot.alive is (state not in (S.GONE, S.SEALED))
    pilot.full = True  # (a capacity fact beside the stage: it has had all it may take)
    assert not pilot.takes_work and pilot.alive is (state not in (S.GONE, S.SEALED))


def test_the_registry_lists_a_lanes_pilots_that_take_work(tmp_path):
    pilots = Pilots()
    for lane, state in [("a", S.ACTIVE), ("a", S.DRAINING), ("b", S.ACTIVE), ("a", S.GONE)]:
        pid_ = pilots.new_id()
        pilots[pid_] = PilotHandle(pid_, tmp_path / pid_, 0, "here", 1, lane=lane)
        pilots[pid_].state = state
    assert [p.id for p in pilots.working("a")] == ["p1"] and pilots.new_id() == "p5"
    pilots.seen("p9")
    assert pilots.new_id() == "p10"
