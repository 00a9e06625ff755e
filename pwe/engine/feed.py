"""The engine's feeding of pilots: which ready members go to which pilot, and when.

:class:`Feeder`, a part the engine holds (:mod:`pwe.engine.loop`), given the ledger, the
lanes, the pilots, the task builder, and two callables of the pilots' work
(:class:`pwe.engine.pilots.PilotWork`): ``start`` a pilot on a lane, and whether a lane
``may_submit`` one now. What it decides:

- each lane's ready queue is taken in order: by pressure (:mod:`pwe.runstate.pressure`, the
  default) or first in first out;
- a member goes only while its user resources fit their limits (:mod:`pwe.planning.limits`);
- a member of a grouped node brings its group, sent as one ``group`` message
  (:mod:`pwe.planning.groups`);
- a pilot gets members up to its window; a lane without a live pilot starts one, and a
  batch lane starts more while every pilot is busy and the host allows them (its
  max_pilots, max_queued_pilots, submit_rate: :mod:`pwe.engine.scaling`); a pilot with
  nothing to do leaves after its host's idle_timeout, so the pilots follow the demand; the
  pilots of a lane whose nodes have nothing left to run are told to leave at once
  (:meth:`Feeder.let_go`);
- helper pilots (``pwe pilot add`` on a host no node names: :mod:`pwe.engine.pilotctl`) get
  the ready members of the nodes they serve, after the nodes' own pilots.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pilot.wire import ENV, GROUP

from ..base.states import ASSIGNED, FINAL, READY, RUNNING, WAITING
from ..planning import limits
from ..planning.groups import Groups
from ..runstate import pressure
from ..runstate import records
from ..runstate.readyqueue import Prioritized
from .handles import PilotState
from .sizing import NO_PILOT

#: members a pilot holds queued beyond which the engine may take a longer round (loop.py's
#: POLL_DEEP): at the ~2,500 members/s one pilot starts at most, 128 last over 50 ms
DEEP = 128

if TYPE_CHECKING:
    from ..planning.plan import Plan
    from .handles import Lane, PilotHandle, Pilots
    from .ledger import Ledger
    from .sizing import Sizing
    from .tasks import TaskBuilder


class Feeder:
    """Which ready members go to which pilot, and when (see the module's docstring)."""

    def __init__(self, run_dir: Path, plan: Plan, info: dict[str, Any], ledger: Ledger, lanes: dict[str, Lane],
                 lane_of: dict[str, str], pilots: Pilots, builder: TaskBuilder,
                 start: Callable[[Lane], PilotHandle | None], may_submit: Callable[[Lane], bool],
                 fix: Callable[[str, int], None] | None = None):
        self.plan = plan
        self.ledger = ledger
        self.lanes = lanes
        self.lane_of = lane_of  # each node's lane
        self.pilots = pilots
        self.task = builder.build  # a member's task
        self.task_envs = builder.envs  # the nodes' shared environments it names (share_env)
        self.start = start
        self.may_submit = may_submit
        #: a member is handed to a pilot: its key fixed now, inputs as they are (pwe/runstate/keyring.py)
        self.fix = fix or (lambda nid, i: None)
        # the groups of each node that has ``group:`` (formed when first needed: pwe/planning/groups.py)
        self.groups = {nid: Groups(pn) for nid, pn in plan.nodes.items() if pn.spec.group is not None}
        self.held: set[tuple[str, int]] = set()  # submit_whole groups whose members still wait
        self.held_at = 0.0
        # each lane's ready queue by pressure (``order: pressure``, the default; the run's own
        # ``order`` option first) or first in first out; the gate of user resources
        self.pressure: pressure.Pressure | None = None
        if (info.get("order") or plan.workflow.order) == "pressure":
            self.pressure = pressure.Pressure(plan, pressure.read_durations(run_dir, plan.workflow.name))
            for lane in lanes.values():
                lane.queue(pressure.PressureQueue(self.pressure))
        self.lane_nodes = {name: [n for n, ln in lane_of.items() if ln == name] for name in lanes}
        self.limits = limits.Limits.of(plan, lane_of, lanes)
        self.gate: limits.Gate | None = None  # (the gate of the feed under way: _hand_check)
        #: per node, the members that may still be started (a first attempt assigned): None,
        #: no such bound; ``pwe plan --estimate --sample N`` sets N for each node (estimate.py)
        self.sample: dict[str, int] | None = None
        self._sampled: dict[str, set[int]] = {}  # (under a sample: the members of each node that went)
        #: where an attempt goes whose request outgrew its node's lane (pwe/engine/sizing.py; the
        #: engine sets it, with ``ended``: an end the engine made journaled and told to the parts)
        self.sizing: Sizing | None = None
        #: the pwe set records taken into the lanes' order so far, and the nodes a priority of theirs names
        self._sets_seen = 0
        self._first_nodes: set[str] = set()
        self.ended: Callable[[dict[str, Any]], Any] = self.ledger.take

    def feed(self) -> int:
        """Hand ready members to the live pilots of their host; start pilots when a host
        has none (or, on a batch host, when every live pilot is busy and the host allows
        more at once)."""
        st = self.ledger.state
        if st.cancelled or st.halted is not None:  # (halted: no new member starts, pwe/engine/halting.py)
            return 0
        if self.pressure is not None:
            self.pressure.refresh(st)  # (members ended: better estimates; at most every 0.5 s)
        lane_of = self.lane_of  # (one no longer ready is passed over when its turn comes)
        sizing = self.sizing
        if len(st.sets) != self._sets_seen:  # (a pwe set since: a priority it gives reorders the lanes)
            self._sets_seen = self._prioritize_queued(st.sets, self._sets_seen)
        if st.ready:  # to the lane of each member's node, a run of members at a time
            for nid, lo, hi in st.ready.take_runs():
                if nid in self._first_nodes:
                    self._priority_run(nid, lo, hi)
                elif sizing is not None and sizing.weighs(nid, st.sets):
                    self._route_run(nid, lo, hi)
                else:
                    self.lanes[lane_of[nid]].ready.append_run(nid, lo, hi)
        if st.again:  # handed back (its node lost, its pilot gone): it had its turn, so it goes
            for nid, i in reversed(st.again):  # first; its place at the back is then a stale entry
                lane = self._lane_of_member(nid, i)
                if lane is not None:
                    self.lanes[lane].ready.appendleft((nid, i))
            st.again.clear()
        fed = 0
        for lane in self.lanes.values():
            if lane.ready:
                fed += self._feed_lane(lane)
        return fed + self._feed_helpers()  # (pilots added on a host no node names: pwe/engine/pilotctl.py)

    def _prioritize_queued(self, sets: list[dict[str, Any]], seen: int) -> int:
        """The pwe set records from the ``seen``-th on: the members a ``priority`` of theirs
        names that are ready now go to the front of their lanes (the rest, as each becomes
        ready: :meth:`_priority_run`). How many records are seen now."""
        st = self.ledger.state
        for s in sets[seen:]:
            if not (s.get("values") or {}).get("priority"):
                continue
            only = s.get("only")
            for nid in (only if only is not None else self.plan.nodes):
                self._first_nodes.add(nid)
                ns = st.nodes[nid]
                for lo, hi in (only[nid] if only is not None else [(0, ns.size)]):
                    for j in range(lo, min(hi, ns.size)):
                        if ns.state[j] == READY:
                            self._put_first(nid, j)
        return len(sets)

    def _priority_run(self, nid: str, lo: int, hi: int) -> None:
        """Members lo..hi-1 of a node a pwe set gave a priority to (some of its members):
        each with one to the front of its lane, the rest as :meth:`_route_run` sends them."""
        start = lo
        settings = self.ledger.state.settings_for
        for j in range(lo, hi):
            if settings(nid, j).get("priority"):
                self._route_run(nid, start, j)
                start = j + 1
                self._put_first(nid, j)
        self._route_run(nid, start, hi)

    def _put_first(self, nid: str, i: int) -> None:
        """Member ``i`` of ``nid`` before the rest of its lane, by its priority (pwe set)."""
        st = self.ledger.state
        lane_name = self._lane_of_member(nid, i)
        if lane_name is None:
            return
        lane = self.lanes[lane_name]
        if not isinstance(lane.ready, Prioritized):
            lane.queue(Prioritized(lane.ready))
        lane.ready.put(st.settings_for(nid, i).get("priority", 0), (nid, i))

    def _route_run(self, nid: str, lo: int, hi: int) -> None:
        """Members lo..hi-1 of ``nid`` to their lanes: each whose request grew (a retry's
        ``grow``; a pwe set) to the lane whose nodes hold it (pwe/engine/sizing.py), the rest
        to their node's as one run."""
        if hi <= lo:
            return
        if self.sizing is None or not self.sizing.weighs(nid, self.ledger.state.sets):
            self.lanes[self.lane_of[nid]].ready.append_run(nid, lo, hi)
            return
        ns = self.ledger.state.nodes[nid]
        every = self.sizing.set_outgrows(nid, self.ledger.state.sets)
        picks = range(lo, hi) if every else sorted(j for j in ns.failures if lo <= j < hi)
        base, home = self.lanes[self.lane_of[nid]].ready, self.lane_of[nid]
        start = lo
        for j in picks:
            lane = self._lane_of_member(nid, j)
            if lane == home:
                continue
            base.append_run(nid, start, j)
            start = j + 1
            if lane is not None:
                self.lanes[lane].ready.append((nid, j))
        base.append_run(nid, start, hi)

    def _lane_of_member(self, nid: str, i: int) -> str | None:
        """The lane of member ``i``'s next attempt: its node's, or where its request grew
        (pwe/engine/sizing.py); None where no node of its host holds it: it has failed here,
        with the line that says so."""
        if self.sizing is None or not self.sizing.weighs(nid, self.ledger.state.sets):
            return self.lane_of[nid]
        ns = self.ledger.state.nodes[nid]
        lane, why = self.sizing.route(nid, i, ns.failures.get(i, 0))
        if why is not None:
            now = round(time.time(), 3)
            a = ns.attempt[i] + 1
            self.ledger.take(records.assign(nid, i, a, NO_PILOT, now))
            self.ended(records.end(nid, i, a, NO_PILOT, now, 1, 0.0, why=why))
            return None
        if lane not in self.lane_nodes:  # (a lane sizing made just now: a partition the request grew into)
            self.lane_nodes[lane] = []
            if self.pressure is not None:
                self.lanes[lane].queue(pressure.PressureQueue(self.pressure))
        if nid not in self.lane_nodes[lane]:
            self.lane_nodes[lane].append(nid)
        return lane

    def _feed_lane(self, lane: Lane) -> int:
        live = self.pilots.working(lane.name)
        if not live:
            # (not while the lane's batch system does not answer: may_submit; nor while
            # every member ready there is held back by a limit: _worth_a_pilot)
            started = self.start(lane) if self.may_submit(lane) and self._worth_a_pilot(lane) else None
            if started is None:
                return 0
            live = [started]
        fed = sum(self.feed_pilot(p, lane) for p in live)
        # demand: members ready beyond what the live pilots take (each is fed up to its
        # window) add a pilot; how many may be alive, queued, and how often one goes is
        # may_submit's (the host's max_pilots, max_queued_pilots, submit_rate; a lane here: one)
        batch = lane.protocol.batch
        nodes = self.ledger.state.nodes
        while ((batch or not self.pilots.working(lane.name)) and any(nodes[n].state[i] == READY for n, i in lane.ready)
               and all(p.units >= self._window(p) for p in self.pilots.working(lane.name))
               and self.may_submit(lane) and self._worth_a_pilot(lane)):
            started = self.start(lane)
            if started is None:
                break
            fed += self.feed_pilot(started, lane)
        return fed

    def let_go(self) -> int:
        """Tell the pilots of each lane whose nodes have nothing left to run (every member
        final: none waiting, ready, queued or running, and so no retry or tree to come) to
        finish and leave now, not after their host's idle_timeout. A batch pilot of a stage
        that is over would otherwise hold its allocation (its GPUs, its nodes) idle for a
        minute or more while the run's later stages go on, and where nodes are shared keep
        the next stage's pilot waiting in the queue behind it. Helper pilots (``pwe pilot
        add``: they serve nodes, not a lane) keep their idle_timeout. How many were told."""
        nodes = self.ledger.state.nodes
        told = 0
        for name, nids in self.lane_nodes.items():
            pilots = [p for p in self.pilots.working(name) if p.serves is None]
            if not pilots or any(nodes[n].size != sum(nodes[n].counts[s] for s in FINAL) for n in nids):
                continue
            for pilot in pilots:
                pilot.stop_taking()  # (takes no more work: the same mark as maxMembers')
                told += 1
        return told

    def _feed_helpers(self) -> int:
        """Feed helper pilots (added on a host no node names): ready members of the nodes
        they serve, after the nodes' own pilots have taken theirs."""
        helpers = [p for p in self.pilots.values() if p.serves and p.takes_work]
        if not helpers or self.ledger.state.cancelled:
            return 0
        fed = 0
        for pilot in helpers:  # (the one feed, passing over the nodes it does not serve)
            serves = set(pilot.serves)
            for lane in self.lanes.values():
                if lane.ready:
                    fed += self.feed_pilot(pilot, lane, skip=set(self.lane_nodes.get(lane.name, ())) - serves)
        return fed

    def _in_flight(self, nid: str) -> int:
        """Members of node ``nid`` queued on a pilot or running (what its limits count)."""
        counts = self.ledger.state.nodes[nid].counts
        return counts[ASSIGNED] + counts[RUNNING]

    def _worth_a_pilot(self, lane: Lane) -> bool:
        """Whether a new pilot of the lane would get a member now: one ready there whose
        user resources fit their limits. A pilot started for members a limit holds back
        (the licences all taken by another host's members) would wait in the batch queue,
        start, find nothing it may run and idle out: an allocation spent on nothing."""
        if self.limits is None:
            return True
        gate = self.limits.gate(self._in_flight)
        return any(gate.fits(nid) for nid in lane.ready.nodes())

    def deep(self) -> bool:
        """Whether every pilot that takes work holds a deep queue (:data:`DEEP` members and
        four a slot at least): work for longer than the engine's longest busy round, so the
        engine may take one (fewer, larger reads and journal writes; the cores to members)."""
        working = [p for p in self.pilots.values() if p.takes_work]
        return bool(working) and all(p.units >= max(DEEP, 4 * p.slots) for p in working)

    def _window(self, pilot: PilotHandle) -> int:
        # a local pilot gets a deep queue (dispatch rate); a batch pilot that is its lane's
        # only one (max_pilots 1) up to eight members a core, at most 64 (two a core held a
        # 2-core pilot to about 160 short members/s: the round trip of tasks and events),
        # leaving the rest of a sweep to a pilot added later (pwe pilot add); where the host
        # allows several batch pilots, about two members per core, so that the rest can go
        # to the others
        if self.pilots.shared(pilot):  # (added pilots share: pwe/engine/pilotctl.py)
            return max(2 * pilot.slots, 2)
        if pilot.job is None:
            return max(8 * pilot.slots, 256)
        lane = self.lanes.get(pilot.lane)
        if lane is not None and lane.host.max_pilots == 1:
            return max(2 * pilot.slots, min(8 * pilot.slots, 64))
        return max(2 * pilot.slots, 2)

    def feed_pilot(self, pilot: PilotHandle, lane: Lane, skip: set[str] | None = None) -> int:
        """Hand ``pilot`` ready members of ``lane`` up to its window: by the lane's order
        (pressure or FIFO), within the limits of user resources, a group as one unit;
        members of the nodes in ``skip`` keep their places (a helper pilot serves only the
        nodes it can hold: pwe/engine/pilotctl.py). How many went."""
        st = self.ledger.state
        record, assign = self.ledger.take, records.assign
        window = self._window(pilot)
        fed = 0
        refused: list[tuple[str, int]] = []
        ready = lane.ready
        now = round(time.time(), 3)  # (the trace's submit time of what is fed now)
        held: set[str] = set(skip or ())  # nodes held back this feed (a limit, pressure, not served)
        hand = self._hand_check(lane)
        fix = self.fix
        while ready and pilot.units < window and not pilot.full:
            item = ready.pop_next(held)
            if item is None:
                break
            nid, i = item
            ns = st.nodes[nid]
            if ns.state[i] != READY:
                continue  # a stale entry: assigned or finished since it was queued
            if (nid, i) in pilot.refused:
                refused.append((nid, i))  # too long for what is left of this allocation
                continue
            if hand is not None and not hand(nid, pilot):
                ready.appendleft((nid, i))
                held.add(nid)
                continue
            most = self.plan.nodes[nid].scheduling.maxMembers
            if most and pilot.given >= most:
                # this pilot has had its share (maxMembers): it finishes them and leaves;
                # the next ready member goes to a new pilot
                pilot.stop_taking()
                ready.appendleft((nid, i))
                break
            if self.sample is not None and not self._may_begin(nid, i):
                ready.appendleft((nid, i))  # (its node has its sample: estimate.py completes the rest)
                held.add(nid)
                continue
            if nid in self.groups:
                sent = self._feed_group(pilot, nid, i, now)
                if sent is not None:
                    fed += sent
                    continue
            attempt = ns.attempt[i] + 1
            retried = ns.failures.get(i, 0) if attempt > 1 else 0  # (a retry may ask for more: tasks.py)
            task = self.task(nid, i, attempt, retried)
            self.share_env(pilot, task)
            record(assign(nid, i, attempt, pilot.id, now, self._asks(nid, task)))
            fix(nid, i)
            pilot.sent_task(task)
            fed += 1
        if refused:
            ready.extend(refused)
            if lane.protocol.batch and all(not p.alive or p.full or p.state is PilotState.DRAINING or p is pilot
                                           for p in self.pilots.values() if p.lane == lane.name):
                pilot.stop_taking()  # a fresh allocation has its whole walltime ahead of it
        return fed

    def _may_begin(self, nid: str, i: int) -> bool:
        """Under a sample (:attr:`sample`): whether member ``i`` of ``nid`` may go: one of the
        node's first N to go (again: a retry, or one handed back unstarted), or a new one
        while fewer than N went."""
        assert self.sample is not None
        if nid not in self.sample:
            return True
        went = self._sampled.setdefault(nid, set())
        if i not in went:
            if len(went) >= self.sample[nid]:
                return False
            went.add(i)
        return True

    def _hand_check(self, lane: Lane) -> Callable[[str, PilotHandle], bool] | None:
        """For one feed of a pilot: may a member of node ``nid`` go to it now? None when
        anything may. Beyond the pilot's free slots, a member goes only if no node of the
        lane with a higher pressure still has members waiting (the pilot runs its queue in
        order, so a member queued there would start before the other node's members when
        they become ready); and only while its resources fit their limits."""
        gate = self.limits.gate(self._in_flight) if self.limits is not None else None
        self.gate = gate  # (this feed's: the other members of a group are counted by it too)
        press = self.pressure
        deep = press.waiting_max(self.ledger.state, self.lane_nodes[lane.name]) if press is not None else -1.0
        if gate is None and deep < 0:
            return None
        level = press.pressure if press is not None else {}

        def may(nid: str, pilot: PilotHandle) -> bool:
            if deep >= 0 and pilot.units >= pilot.slots and level[nid] < deep:
                return False
            return gate is None or gate.take(nid)
        return may

    def _asks(self, nid: str, task: dict[str, Any]) -> dict[str, Any] | None:
        """What an attempt asks for beyond its node's ``memoryPerMember`` and
        ``maxWallTimePerMember`` (a retry's growth, pwe set), for its ``assign`` record: the
        trace shows each attempt's request. None when it asks for what its node says."""
        sched = self.plan.nodes[nid].scheduling
        out = {k: task[k] for k, base in (("mem", sched.memoryPerMember), ("wall", sched.maxWallTimePerMember))
               if k in task and task[k] != base}
        return out or None

    def share_env(self, pilot: PilotHandle, task: dict[str, Any]) -> None:
        """Send ``pilot`` the shared environment ``task`` names, unless it has it."""
        eb = task.get("eb")
        if eb is not None and eb not in pilot.envs_sent:
            pilot.send_env(eb, {"k": ENV, "id": eb, "env": self.task_envs[eb]})

    def _feed_group(self, pilot: PilotHandle, nid: str, i: int, now: float) -> int | None:
        """Member ``i`` of a grouped node is ready: hand its group to ``pilot`` as one
        ``group`` message, made of the group's members ready now (one journaled ``assign``
        each, so every member keeps its own attempts and events); how many went. None: it
        is in no group (``include`` leaves it out: it goes alone). A ``submit_whole`` group
        whose members still wait is held (:meth:`release_held` looks again)."""
        groups = self.groups[nid]
        g = groups.group_of(i)
        if g is None:
            return None
        ns = self.ledger.state.nodes[nid]
        members = groups.members(g)
        if groups.spec.submit_whole and any(ns.state[j] == WAITING for j in members):
            self.held.add((nid, g))
            return 0
        self.held.discard((nid, g))
        # (i is one of them; a member this pilot refused, too long for what it has left, is not)
        chosen = [j for j in members if ns.state[j] == READY and (nid, j) not in pilot.refused]
        if self.gate is not None:  # (i has its share of the limits already: _hand_check)
            chosen = [j for j in chosen if j == i or self.gate.take(nid)]
        tasks = []
        for j in chosen:
            attempt = ns.attempt[j] + 1
            retried = ns.failures.get(j, 0) if attempt > 1 else 0
            tasks.append(self.task(nid, j, attempt, retried))
            self.share_env(pilot, tasks[-1])  # (before the group that needs it)
            self.ledger.take(records.assign(nid, j, attempt, pilot.id, now, self._asks(nid, tasks[-1])))
            self.fix(nid, j)
        pilot.send({"k": GROUP, "tasks": tasks})
        pilot.sent_group(nid, chosen)
        return len(chosen)

    def release_held(self) -> None:
        """``submit_whole`` groups held back (looked at five times a second at most): once
        none of their members waits (each is ready, or has ended: skipped after a failure
        upstream), their ready members are queued again, so the group goes out."""
        if not self.held or time.time() - self.held_at <= 0.2:
            return
        st = self.ledger.state
        for nid, g in list(self.held):
            ns = st.nodes[nid]
            members = self.groups[nid].members(g)
            if not any(ns.state[j] == WAITING for j in members):
                self.held.discard((nid, g))
                for j in members:
                    if ns.state[j] == READY:
                        self.lanes[self.lane_of[nid]].ready.append((nid, j))
                        break
        self.held_at = time.time()
