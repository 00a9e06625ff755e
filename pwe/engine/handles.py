"""The engine's pilots registry and the lanes that start them: :class:`PilotState` (a
pilot's life stage, one enum with its allowed transitions), :class:`PilotHandle` (one
pilot: its transport, how far its messages were read, its stage and what the engine
knows of it), :class:`Pilots` (the run's pilots by id), :class:`Lane` (one host, or
host/partition: how its pilots start, the members ready for it, the pace of its status
queries) and :func:`make_lanes` (the run's lanes from run.json).

Why one module over 450 lines: it is the one place where what the engine knows of a
pilot or a lane changes (tests/engine/test_owners.py reads this file for the writers and
finds none elsewhere); most of it is those small methods, one for each thing that happens
to a pilot or a lane. What the engine does with them is in the modules named below.

A pilot's life only goes forward, along this line, skipping any stage before GONE
(:data:`TRANSITIONS`; SEALED is reached from GONE alone)::

    ACTIVE --> DRAINING --> GIVEN_UP --> DOWN --> GONE --> SEALED

ACTIVE takes work; DRAINING (``pwe pilot drain``, or the pilot said ``drain``) takes no
new work and finishes what it runs; GIVEN_UP (silent while its job may run: the job is
cancelled, its end awaited); DOWN (it said it left, not yet given up); GONE (given up: its
unfinished members handed on); SEALED (gone, its spool files compressed). Two facts are
not stages, and are kept beside the stage: ``came_up`` (it said ``up``: history, true or
not in any stage, since a queued pilot may be drained, and a pilot may say ``down``
before ``up``) and ``full`` (a capacity fact: it has had all it may take, maxMembers or
members too long for what its allocation has left; it was told to stop, and may be
ACTIVE or DRAINING meanwhile).

What the engine does with them is :class:`pwe.engine.pilots.PilotWork`,
:class:`pwe.engine.intake.Intake` and :class:`pwe.engine.pilotctl.PilotControl`.

Each fact of a pilot or a lane has one owner, its handle: the engine's parts read the
fields, and change them only through the handle's methods (a stage through ``become``; a
member sent, ended or handed back; a sequence number admitted; a refusal, a back-off), so
that what goes with what (a stage and its reason, a task and the counts it adds to) is
said once, here.
"""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilot.transport import EngineSpool, Transport
from pilot.wire import ACK, STOP

from ..base.errors import BadTransition
from ..runstate.journal import cannot_write
from ..runstate.readyqueue import ReadyQueue
from . import scaling

if TYPE_CHECKING:  # (a local run's engine never starts a process itself: subprocess is the batch hosts')
    import subprocess


class PilotState(Enum):
    """A pilot's life stage as the engine sees it (the module's docstring draws it)."""

    ACTIVE = "active"  # started or submitted: it takes work (unless full)
    DRAINING = "draining"  # told to leave (pwe pilot drain), or said it will: no new work
    GIVEN_UP = "given up"  # silent while its job may run: its job cancelled, its end awaited
    DOWN = "down"  # it said it left; not given up yet
    GONE = "gone"  # given up: its unfinished members handed on
    SEALED = "sealed"  # gone, its spool files compressed: nothing more is written there

    #: (set below from the tables: plain attributes, read on every round)
    alive: bool
    takes_work: bool
    next: frozenset["PilotState"]


#: The transitions a pilot's stage may make; any other is a programming error (BadTransition).
TRANSITIONS: dict[PilotState, frozenset[PilotState]] = {
    PilotState.ACTIVE: frozenset({PilotState.DRAINING, PilotState.GIVEN_UP, PilotState.DOWN, PilotState.GONE}),
    PilotState.DRAINING: frozenset({PilotState.GIVEN_UP, PilotState.DOWN, PilotState.GONE}),
    PilotState.GIVEN_UP: frozenset({PilotState.DOWN, PilotState.GONE}),
    PilotState.DOWN: frozenset({PilotState.GONE}),
    PilotState.GONE: frozenset({PilotState.SEALED}),
    PilotState.SEALED: frozenset(),
}
for _s in PilotState:
    _s.next = TRANSITIONS[_s]
    _s.alive = _s not in (PilotState.GONE, PilotState.SEALED)  # the engine still watches it
    _s.takes_work = _s is PilotState.ACTIVE  # (PilotHandle.takes_work adds ``full``)
del _s


class PilotHandle:
    """The engine's handle on one pilot: its transport, how far its messages have been
    read (the cursor, opaque), and what the engine knows of it."""

    def __init__(self, pid_: str, directory: Path, os_pid: int, host: str, slots: int,
                 popen: subprocess.Popen | None = None, cursor: Any = 0, job: str | None = None, lane: str = "",
                 transport: Transport | None = None, started: int | None = None):
        self.id = pid_
        self.lane = lane  # the registry host it serves
        self.job = job  # a batch job id: its liveness comes from the scheduler and heartbeats
        self.dir = directory  # its own directory: its log, a batch pilot's job script
        self.os_pid = os_pid
        self.started = started  # its process's start time (pilot/identity.py; None: an older record)
        self.host = host
        self.slots = slots
        self.popen = popen
        self.cursor = cursor  # where the next receive starts (journaled as `offset`)
        self.outstanding = 0
        self.extra = 0  # members of groups beyond one per group: a group holds one slot (see one_less)
        self._groups: dict[tuple[str, int], list[int]] = {}  # a grouped member -> its group's count left
        self.state = PilotState.ACTIVE  # its life stage (become() moves it)
        self.came_up = False  # it said `up` (history, beside the stage: see the module's docstring)
        self.up_at: float | None = None  # when this engine heard its `up` (pwe explain: its walltime left)
        self.ran = False  # it started a member (pwe/engine/setups.py: pilots in a row that could not)
        self.down_why = ""  # what its `down` event said ("error: ..." when it broke)
        self.finished_any = False  # an end event of one of its members was taken in
        self.serves: list[str] | None = None  # (a helper added by pwe pilot add: pwe/engine/pilotctl.py) its nodes
        self.full = False  # given all it may take (maxMembers, or members too long for it): a capacity fact
        self.given = 0
        self.refused: set[tuple[str, int]] = set()
        self.job_state = None
        self.last_heard = time.time()
        self.given_up_why = ""  # (GIVEN_UP, and kept after) why: its job is cancelled, its end awaited
        self.given_up_at = 0.0
        self.transport = transport or EngineSpool(directory)
        self._out: list[dict[str, Any]] = []
        self.envs_sent: set[str] = set()  # the ``env`` messages it was sent (pwe/engine/feed.py _share_env)
        self.q = 0  # the highest sequence number applied (journaled with the cursor)
        self.qs: dict[str, int] = {}  # the highest each transport delivered ("spool", "redis")
        self.acked = 0  # the last ``ack`` sent (a pilot that sends through a broker)
        self.refusals: set[str] = set()  # kinds of refusal said on stderr already (once each)
        self.setup_failed: list[str] = []  # its nodes whose setup_per_node failed (pwe/engine/setups.py)

    def become(self, new: PilotState) -> None:
        """Move to stage ``new``; BadTransition when its stage does not allow it."""
        if new not in self.state.next:
            raise BadTransition(f"pilot {self.id}: {self.state.value} cannot become {new.value}")
        self.state = new

    @property
    def alive(self) -> bool:
        """The engine still watches it (not gone)."""
        return self.state.alive

    @property
    def takes_work(self) -> bool:
        """May be fed new members: the one definition (the feed and helper pilots ask it)."""
        return self.state.takes_work and not self.full

    def send(self, msg: dict[str, Any]) -> None:
        self._out.append(msg)

    # -- what the engine's parts tell it (the fields above change only here) -------------

    def sent_task(self, task: dict[str, Any]) -> None:
        """A member's task sent to it: one more outstanding, one more given (maxMembers)."""
        self._out.append(task)
        self.outstanding += 1
        self.given += 1

    def send_env(self, eb: str, msg: dict[str, Any]) -> None:
        """The shared environment ``eb`` sent to it (the tasks after it name it)."""
        self._out.append(msg)
        self.envs_sent.add(eb)

    def lost_env(self, eb: str) -> None:
        """It said it has no environment ``eb`` (a new process of it): sent again when needed."""
        self.envs_sent.discard(eb)

    def stop_taking(self) -> None:
        """It has had all it may take (maxMembers, members too long for it, setups that
        failed): ``full``, and told to stop (it finishes what it holds and leaves)."""
        self.full = True
        self._out.append({"k": STOP})

    def refuse(self, nid: str, i: int) -> None:
        """Member ``i`` of ``nid`` is not offered to it again (too long for it, its setup failed)."""
        self.refused.add((nid, i))

    def admit(self, via: str, q: int) -> str:
        """Its message numbered ``q``, delivered by transport ``via``: "" when it is new (its
        sequence numbers move on), ``replayed`` when ``via`` delivered it before, ``resent``
        when the other transport did."""
        if q <= self.qs.get(via, 0):
            return "replayed"
        self.qs[via] = q
        if q <= self.q:
            return "resent"
        self.q = q
        return ""

    def numbered(self, q: int, qs: dict[str, int]) -> None:
        """Reattached: the sequence numbers the journal applied (its ``offset`` record)."""
        self.q, self.qs = q, dict(qs)

    def acknowledge(self) -> None:
        """Tell it (a pilot sending through a broker) what the journal holds now, if more."""
        if self.transport.acks and self.q > self.acked:
            self._out.append({"k": ACK, "q": self.q})
            self.acked = self.q

    def first_refusal(self, why: str) -> bool:
        """A message of its refused as ``why``: whether it is the first refused so (said once)."""
        if why in self.refusals:
            return False
        self.refusals.add(why)
        return True

    def first_start(self) -> bool:
        """One of its members started: whether it is its first."""
        if self.ran:
            return False
        self.ran = True
        return True

    def ended_one(self, nid: str, i: int) -> None:
        """A member of its ended: one fewer outstanding; it has finished one."""
        self.one_less(nid, i)
        self.finished_any = True

    def said_up(self) -> None:
        if not self.came_up:  # (when: its allocation's walltime counts from about then)
            self.up_at = time.time()
        self.came_up = True

    def said_down(self, why: str) -> None:
        """It said it left (``why``: idle, error: ...)."""
        if self.state is not PilotState.DOWN:
            self.become(PilotState.DOWN)
        self.down_why = why

    def give_up(self, why: str, now: float) -> None:
        """Silent while its job may run: GIVEN_UP, and why and since when (kept after)."""
        self.become(PilotState.GIVEN_UP)
        self.given_up_why, self.given_up_at = why, now

    def serve(self, nodes: list[str] | None) -> None:
        """A helper (pwe pilot add on a host no node names): the nodes whose members it takes."""
        self.serves = nodes

    def setup_failed_on(self, node: str) -> None:
        self.setup_failed.append(node)

    def job_is(self, state: Any) -> None:
        """What its batch system said of its job at the last poll."""
        self.job_state = state

    def holding(self, n: int) -> None:
        """Reattached: the members the journal says it holds."""
        self.outstanding = n

    def sent_group(self, nid: str, members: list[int]) -> None:
        """A group of ``members`` went to this pilot: they count as one against its window
        (they hold one slot between them), each one as outstanding."""
        left = [len(members)]
        for i in members:
            self._groups[(nid, i)] = left
        self.outstanding += len(members)
        self.given += len(members)
        self.extra += len(members) - 1

    def one_less(self, nid: str, i: int) -> None:
        """A member of this pilot ended or came back: one fewer outstanding (and, while
        its group has more, one fewer extra)."""
        self.outstanding -= 1
        left = self._groups.pop((nid, i), None)
        if left is not None:
            left[0] -= 1
            if left[0] > 0:
                self.extra -= 1

    def let_go(self) -> None:
        """It is gone: it holds nothing now (its members were handed on)."""
        self.outstanding = self.extra = 0
        self._groups.clear()

    @property
    def units(self) -> int:
        """What it holds against its window: members, a group counting as one."""
        return self.outstanding - self.extra

    def flush(self) -> None:
        if self.state is PilotState.SEALED:
            self._out.clear()  # (it has left: a message to it is read by no one, and would make a new file)
        if not self._out:
            return
        out, self._out = self._out, []
        # never a torn task line for the pilot: on a write error the batch is cut back;
        # the journal has these assignments and a resumed engine hands them back (_reattach)
        try:
            self.transport.send(out)
        except OSError as exc:
            raise cannot_write(exc.filename, exc) from None
        self.transport.trim()  # (the journal holds what was read: a broker may forget it)

    def receive(self) -> list[dict[str, Any]]:
        """The pilot's new messages; the cursor moves past them."""
        msgs, self.cursor = self.transport.receive(self.cursor)
        if msgs:
            self.last_heard = time.time()
        return msgs

    def close(self) -> None:
        self.flush()
        self.transport.close()


class Pilots(dict[str, PilotHandle]):
    """The run's pilots by id (a dict: the engine walks it every round), with what the engine
    keeps of them as a whole: the number of the next one, and the pilots in a row that broke
    before finishing any member."""

    def __init__(self) -> None:
        super().__init__()
        self.next_number = 1  # the next pilot is p<next_number>
        self.failed_in_a_row = 0  # pilots in a row that broke before finishing any member

    def new_id(self) -> str:
        pid_ = f"p{self.next_number}"
        self.next_number += 1
        return pid_

    def seen(self, pid_: str) -> None:
        """A pilot the journal has: the next one is numbered after it."""
        self.next_number = max(self.next_number, int(pid_.lstrip("p") or 0) + 1)

    def working(self, lane: str) -> list[PilotHandle]:
        """The lane's pilots that take work."""
        return [p for p in self.values() if p.lane == lane and p.takes_work]

    def shared(self, pilot: PilotHandle) -> bool:
        """Whether a pilot shares its members with pilots added to the run (on its host, or
        helpers): then it holds two members a slot, not a deep queue, so that ready
        members spread over all of them (what a pilot holds already stays with it)."""
        return any(p.alive and p is not pilot and (p.serves or p.lane == pilot.lane) for p in self.values())


class Lane:
    """One host of the run: how its pilots start (a process here, or a batch job through
    its protocol), the members ready for it, and the pace of its status queries."""

    def __init__(self, host: Any, cores: int, pilot_args: list[str], status_every: float, name: str = ""):
        self.host = host
        self.name = name or host.name  # host, or host/partition (make_lanes)
        self.cores = cores
        self.pilot_args = [str(a) for a in pilot_args]
        from protocols.registry import get as get_protocol
        from protocols.registry import runner_for

        # commands go to the host's head node: here, or over SSH (host keys verified)
        self.protocol = get_protocol(host.protocol, runner_for(host), host)
        self.ready = ReadyQueue()  # (runs of member indices: a million ready members cost one entry)
        self.status_every = status_every
        self.status_interval = status_every
        self.last_status = 0.0
        # while its batch system does not answer: since when, what it said, when to try a
        # submission again (back-off), and a pilot id whose submission may have taken
        self.unreachable_since: float | None = None
        self.unreachable_why = ""
        self.backoff = status_every
        self.retry_at = 0.0
        self.retry_pilot: tuple[str, bool] | None = None  # (pilot id, maybe submitted)
        # submissions (pwe/engine/scaling.py): when the last sbatch (or qsub...) was made, and
        # after refused ones how many in a row, since when, the batch system's words, and when
        # the next may go (retry_at, shared with the back-off above)
        self.last_submit: float | None = None
        self.refusals = 0
        self.refused_since: float | None = None
        self.refused_why = ""

    # The hosts where nothing new is submitted now, as the engine's snapshot shows them
    # (pwe status): a batch system that does not answer, or one that refused the last
    # submissions (the back-off), in one pair of fields.
    @property
    def unreachable_since(self) -> float | None:
        return self._unreachable_since if self._unreachable_since is not None else self.refused_since

    @unreachable_since.setter
    def unreachable_since(self, value: float | None) -> None:
        self._unreachable_since = value

    @property
    def unreachable_why(self) -> str:
        return self._unreachable_why if self._unreachable_since is not None else self.refused_why

    @unreachable_why.setter
    def unreachable_why(self, value: str) -> None:
        self._unreachable_why = value

    @property
    def not_answering(self) -> bool:
        """Its batch system does not answer (not: it refused)."""
        return self._unreachable_since is not None

    # -- what happened to it (its fields change only here) --------------------------------

    def queue(self, ready: Any) -> None:
        """Its ready members kept in this queue's order (pressure: pwe/engine/feed.py)."""
        self.ready = ready

    def submitting(self, now: float) -> None:
        """A submission goes now (every one counts against submit_rate)."""
        self.last_submit = now

    def submit_again(self, pid_: str, maybe_made: bool) -> None:
        """The submission of ``pid_`` did not go through: the next one is under the same
        id (``maybe_made``: looked up first, never two jobs)."""
        self.retry_pilot = (pid_, maybe_made)

    def submitted(self) -> None:
        self.retry_pilot = None

    def refused(self, words: str, now: float, spacing: float, failures: int) -> None:
        """Its batch system refused a pilot job: one more in a row, and the next try after a
        back-off that grows (:func:`pwe.engine.scaling.backoff`); ``refused_why`` says so."""
        self.refusals += 1
        self.retry_at = max(now + scaling.backoff(self.refusals), now + spacing)
        at = time.strftime("%H:%M:%S", time.localtime(self.retry_at))
        self.refused_since = self.refused_since or now
        self.refused_why = (f"{scaling.REFUSED} {self.refusals} pilot job{'s' if self.refusals > 1 else ''} in a row "
                            f"({words}); the next try at {at}, the run stops after {failures} refusals")

    def accepted(self) -> int:
        """A submission went through: the refusals in a row (how many there were) are over."""
        n, self.refusals, self.refused_since, self.refused_why = self.refusals, 0, None, ""
        return n

    def not_answered(self, why: str, now: float) -> bool:
        """Its batch system did not answer: nothing submitted before ``retry_at`` (a back-off
        up to a minute); whether it answered until now."""
        first = not self.not_answering
        if first:
            self.unreachable_since = now
            self.backoff = self.status_every
        else:
            self.backoff = min(60.0, self.backoff * 1.5)
        self.unreachable_why = why
        self.retry_at = now + self.backoff
        return first

    def answered(self, now: float) -> float | None:
        """Its batch system answered: for how long it had not (None: it had)."""
        if not self.not_answering:
            return None
        out = now - self._unreachable_since
        self.unreachable_since = None
        self.unreachable_why = ""
        return out

    def polled(self, now: float, changed: bool | None = None) -> None:
        """Its jobs' states asked now; ``changed``: whether they changed (or a pilot waits for
        its job's end), then the next poll is soon, else later (kind to the scheduler)."""
        self.last_status = now
        if changed is not None:
            self.status_interval = self.status_every if changed else min(60.0, self.status_interval * 1.5)

    def ask_soon(self) -> None:
        """Poll its jobs at the next round."""
        self.status_interval, self.last_status = self.status_every, 0.0


def make_lanes(plan: Any, recorded: dict[str, Any], status_every: float) -> tuple[dict[str, Lane], dict[str, str]]:
    """The run's lanes from its recorded hosts (run.json ``lanes``): one per host, split
    per partition where its nodes go to different ones (partitions.partition_lanes, each
    lane holding the host as its partition shows it: GPUs, cores, memory), and each
    node's lane. Pilot arguments a caller gave are kept; those pwe derived are derived
    again from the partition's view (its GPUs, its memory)."""
    from hostinfo.records import host

    from ..planning.partitions import partition_lanes

    hosts = {name: host(lane["host_def"]) for name, lane in recorded.items()}
    lanes, lane_of = {}, {}
    for key, (view, nids) in partition_lanes(plan, hosts).items():
        lanes[key] = lane_for(view, hosts[view.name], recorded[view.name], status_every, key)
        lane_of.update(dict.fromkeys(nids, key))
    return lanes, lane_of


def lane_for(view: Any, whole: Any, rec: dict[str, Any], status_every: float, key: str) -> Lane:
    """The lane of ``view`` (host ``whole`` as one of its partitions shows it, or ``whole``
    itself), named ``key``: pilot arguments a caller gave kept, those pwe derived derived
    again from the view (its GPUs, its memory). make_lanes's, and pwe/engine/sizing.py's
    for a partition an attempt grew into."""
    from ..planning.placement import pilot_args_for

    args = rec.get("pilot_args", [])
    if args == pilot_args_for(whole):
        args = pilot_args_for(view)
    cores = view.cores_per_node if view is not whole else rec.get("cores")
    return Lane(view, int(cores or 1), args, status_every, name=key)
