"""The engine's work with its pilots: start or submit one, take in what it says, tell when
it is gone. The handle on each and the lanes (hosts) that start them are
:mod:`pwe.engine.handles`.

A pilot is reached only through its transport (:mod:`pilot.transport`): the engine asks it
for the pilot's new messages after a cursor, journals the cursor it gets back, and sends
batches of tasks. Whether a pilot is a process here or a batch job is its lane's
protocol's business: the engine asks the protocol's capabilities (``batch``,
``polls_status``), never its name.

Nothing a pilot said is lost when it is given up: whatever the reason (its job ended, an
edge event, its process gone, silence), every message it wrote is taken in first. A pilot
gone silent while its job may still run is not given up at once: its job is cancelled, and
its members are handed on only once the batch system says the job ended (or after
``end_wait``), its messages taken in again. A lane whose batch system does not answer
(:attr:`Lane.unreachable_since`) submits nothing new until it does.

Taking in what pilots say (transports, admission, journal records) is the intake
(:mod:`pwe.engine.intake`), which :class:`PilotWork` is given; what a crash left is found by
:mod:`pwe.engine.recovery`'s functions. A pilot's stage is :class:`~pwe.engine.handles.PilotState`.

Why one module over 450 lines: a pilot's life here is one piece, started or submitted,
polled, reattached at resume, given up, sealed, and each step reads what the others wrote
of it (its job, its lane's back-off, its transport); what has a job of its own is apart
already (the intake, recovery, scaling's decision, the pwe pilot requests, setups).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pilot.allocation import hostname
from pilot.identity import start_time
from pilot.streams import STREAM, seal as seal_streams
from pilot.sealing import seal, seal_above, spool_bytes

from ..base.errors import ContactError, RunDamaged, RunStopped, SchedulerUnreachable, SubmitError
from ..base.regular import Outside, open_regular, pilot_dir
from ..base.states import ASSIGNED, DONE, READY, RUNNING
from ..planning.placement import pilot_job, pilot_shape
from ..runstate import records
from . import recovery, scaling
from .handles import Lane, PilotHandle, Pilots, PilotState
from .pilotctl import restore_lane, restore_pilot
from .sizing import restore_partition_lane

if TYPE_CHECKING:
    from ..planning.plan import Plan
    from .budget import CoreHours
    from .intake import Intake
    from .ledger import Ledger
    from .setups import Setups


class PilotWork:
    """The engine's work with its pilots: starting them, watching them, giving them up."""

    def __init__(self, run_dir: Path, plan: Plan, info: dict[str, Any], ledger: Ledger, lanes: dict[str, Lane],
                 pilots: Pilots, intake: Intake, setups: Setups, timing: tuple[float, float, float]):
        self.dir = run_dir
        self.plan = plan
        self.info = info
        self.run_id = info["run_id"]
        self.ledger = ledger
        self.lanes = lanes
        self.pilots = pilots
        self.intake = intake
        self.setups = setups
        self.heartbeat, self.lost_after, self.end_wait = timing  # (the engine's: pwe/engine/loop.py)
        self.sealing: list[threading.Thread] = []  # threads compressing left pilots' spool files (seal)
        self.edges_seen: set[str] = set()  # edge events taken in already: not read again
        self.earlier: dict[str, float] | None = None  # the nodes' mean durations in an earlier run (read once)
        self.budget: CoreHours | None = None  # the core-hour budget (the engine's: pwe/engine/budget.py)

    def start(self, lane: Lane, nodes: int | None = None,
              extra: dict[str, Any] | None = None) -> PilotHandle | None:
        """Start a pilot on ``lane`` (None: its batch system did not answer). ``nodes``,
        ``extra`` (pwe pilot add): the job's nodes; fields of its ``pilot`` record."""
        if lane.protocol.batch:
            return self.setups.send_to(self.submit(lane, nodes, extra))
        pid_ = self.pilots.new_id()
        d = self.dir / "pilots" / pid_
        transport = self.intake.transport(lane.name, pid_)  # before the pilot looks for its tasks
        popen = lane.protocol.start(d, lane.cores, self.heartbeat,
                                    idle_timeout=lane.host.idle_after(batch=False), extra_args=lane.pilot_args,
                                    host_env={k: str(v) for k, v in lane.host.env.items()})
        host = hostname()
        started = start_time(popen.pid)  # (pid and start time: a pid alone is recycled, pilot/identity.py)
        self.ledger.take(records.pilot(pid_, host, lane.name, lane.cores, time.time(), pid=popen.pid, started=started,
                                       **(extra or {})))
        pilot = PilotHandle(pid_, d, popen.pid, host, lane.cores, popen=popen, lane=lane.name, transport=transport,
                            started=started)
        self.pilots[pid_] = pilot
        return self.setups.send_to(pilot)

    def submit(self, lane: Lane, nodes: int | None = None,
                      extra: dict[str, Any] | None = None) -> PilotHandle | None:
        """Glide in: one batch job that becomes a pilot, sized for the members ready now.
        None when the batch system did not answer: tried again after a back-off."""
        host = lane.host
        maybe_taken = False
        if lane.retry_pilot:  # its submission did not get through: the same pilot, the same job name
            pid_, maybe_taken = lane.retry_pilot
        else:
            pid_ = self.pilots.new_id()
        d = self.dir / "pilots" / pid_
        transport = self.intake.transport(lane.name, pid_)  # its tasks are there before the job starts
        st = self.ledger.state
        ready = [(n, i) for n, i in lane.ready if st.nodes[n].state[i] == READY]
        job = pilot_job(self.plan, host, ready, str(self.dir), self.run_id, pid_, lane.pilot_args,
                        heartbeat=self.heartbeat, idle_timeout=host.idle_after(batch=True),
                        created=self.info.get("created"), measured=self.durations(st))
        if nodes:
            job.nodes = nodes  # (pwe pilot add --nodes)
        script = d / "job.sh"
        script.write_text(lane.protocol.render(job))
        try:
            # an earlier submission that may have taken is looked up first: never two jobs
            job_id = lane.protocol.find_job(job) if maybe_taken else None
            if job_id is None:
                lane.submitting(time.time())
                job_id = lane.protocol.submit(job, str(script))
        except SchedulerUnreachable as exc:
            lane.submit_again(pid_, maybe_taken or exc.maybe_ran)
            self.unreachable(lane, str(exc))
            return None
        except ContactError as exc:
            # the run keeps its state: fix the host (hosts.yaml, the cluster) and resume; str(exc)
            # is one line with the host's own answer, the chain keeps command, status, stderr
            raise RunStopped(f"cannot submit a pilot to host '{host.name}': {exc}: fix its contact (hosts.yaml, "
                             "known_hosts, keys)") from exc
        except SubmitError as exc:
            lane.submit_again(pid_, False)  # (the same pilot id and job name next time: nothing was made)
            self.refused(lane, exc)
            return None
        lane.submitted()
        self.reachable(lane)
        self.accepted(lane)
        self.ledger.take(records.pilot(pid_, host.name, lane.name, job.nodes * job.cores_per_node, time.time(),
                                       job=job_id, batch=lane.protocol.name, wall=job.walltime, **(extra or {})))
        pilot = PilotHandle(pid_, d, 0, host.name, job.nodes * job.cores_per_node, job=job_id, lane=lane.name,
                            transport=transport)
        self.pilots[pid_] = pilot
        return pilot

    def durations(self, st: Any) -> dict[str, float]:
        """Per node the mean duration (s) of its members: this run's ends so far, else the
        newest earlier run's of the workflow (:func:`pwe.runstate.pressure.read_durations`,
        read at the first submission); what a pilot is sized from."""
        if self.earlier is None:
            from ..runstate.pressure import read_durations

            self.earlier = read_durations(self.dir, self.plan.workflow.name)
        return {**self.earlier, **measured(st)}

    def poll_jobs(self, lane: Lane) -> None:
        """One batched status query for every live batch pilot of a host, at most every
        status_every s."""
        from protocols.base import JobState

        live = [p for p in self.pilots.values() if p.alive and p.job and p.lane == lane.name]
        now = time.time()
        if not live or now - lane.last_status < lane.status_interval:
            return
        lane.polled(now)
        states = lane.protocol.status([p.job for p in live])  # UNKNOWN when the host does not answer
        if lane.protocol.no_answer:
            self.unreachable(lane, lane.protocol.no_answer)
        else:
            self.reachable(lane)
        # back off while nothing changes (kind to the scheduler); look again soon after a
        # change, and while a pilot given up waits for its job to end
        lane.polled(now, any(states.get(p.job) != p.job_state for p in live) or any(p.given_up_why for p in live))
        for pilot in live:
            state = states.get(pilot.job, JobState.UNKNOWN)
            pilot.job_is(state)
            if state.finished:
                why = f"batch job {pilot.job} {state.value}"
                if state is JobState.TIMEOUT:
                    why += " (walltime: expected for a pilot)"
                self.gone(pilot, why)

    def refused(self, lane: Lane, exc: SubmitError) -> None:
        """The lane's batch system refused a pilot job (a bad account, a full queue): one
        journal note for each refusal (every submission is counted: the ``pilot`` records
        and these), the host's ``pwe status`` line says why and when the next try goes,
        after a back-off that grows (:func:`pwe.engine.scaling.backoff`); the
        ``submit_failures``-th refusal in a row stops the run with the batch system's words
        (the run keeps its state: fix the host, then ``pwe resume``)."""
        host = lane.host
        words = str(exc)  # one line with the host's own answer; the chain keeps command, status, stderr
        now = time.time()
        lane.refused(words, now, scaling.Limits.of(host).spacing, host.submit_failures)
        if lane.refusals >= host.submit_failures:
            tries = f" (refused {lane.refusals} times in a row)" if lane.refusals > 1 else ""
            raise RunStopped(f"the batch system refused a pilot job for host '{host.name}': {words}{tries}: fix the "
                             "host (its hosts.yaml entry, the account or partition it names)") from exc
        self.ledger.take(records.note(f"host '{host.name}': {lane.refused_why}", now, lane=lane.name,
                                      refused=lane.refusals, retry_at=round(lane.retry_at, 3)))

    def accepted(self, lane: Lane) -> None:
        """A submission went through: the refusals in a row (if any) are over."""
        refused = lane.accepted()
        if refused:
            self.ledger.take(records.note(f"host '{lane.host.name}' took a pilot job again, after {refused} refused",
                                          time.time(), lane=lane.name))

    def unreachable(self, lane: Lane, why: str) -> None:
        """The lane's batch system did not answer: say so once (journal, ``pwe status``),
        and submit nothing there before ``retry_at`` (back-off, up to a minute)."""
        now = time.time()
        if lane.not_answered(why, now):
            self.ledger.take(records.note(f"the batch system of host '{lane.name}' does not answer ({why}); waiting "
                                          "for it: no new pilot is submitted there until it answers", now))

    def reachable(self, lane: Lane) -> None:
        now = time.time()
        out = lane.answered(now)
        if out is not None:
            self.ledger.take(records.note(f"the batch system of host '{lane.name}' answers again, after {out:.0f} s",
                                          now))

    def may_submit(self, lane: Lane) -> bool:
        """Whether a new pilot may be started on the lane now (the one place that says so:
        :meth:`held_by`)."""
        return self.held_by(lane) is None

    def held_by(self, lane: Lane, budget: bool = True) -> str | None:
        """What keeps the lane from starting a new pilot now, in words, or None when one may
        go: within the host's limits (:func:`pwe.engine.scaling.decide`: max_pilots alive,
        queued and running, one given up counting until its job ended; max_queued_pilots
        waiting in the batch queue; submit_rate; the back-off after a refused submission);
        and not while its batch system does not answer, except as a retry, after the
        back-off, when no pilot of the lane is polled (a submission is then the only way to
        learn it answers again); never past a core-hour budget (:meth:`within_budget`).
        The snapshot says it per lane (``lanes``: what ``pwe explain`` shows), the budget
        left out (``budget`` False: its weighing shapes a pilot from every ready member; the
        snapshot has the budget's own figures)."""
        if budget and not self.within_budget(lane):
            return "the core-hour budget: a new pilot would go past it"
        if not lane.protocol.batch:
            return None
        alive = [p for p in self.pilots.values() if p.lane == lane.name and p.alive]
        now = time.time()
        queued = sum(1 for p in alive if p.job and not p.came_up)
        said = scaling.decide(scaling.Limits.of(lane.host), len(alive), queued, lane.last_submit,
                              lane.retry_at if lane.refusals else 0.0, now)
        if not said.submit:
            return said.why
        if not lane.not_answering:
            return None
        if now >= lane.retry_at and not any(p.job for p in alive):
            return None
        return f"its batch system does not answer ({lane.unreachable_why or 'no answer'})"

    def lane_view(self, lane: Lane) -> dict[str, Any]:
        """One lane as the snapshot shows it: its host, its pilots alive and queued, the
        members ready for it, and what holds a new pilot back (:meth:`held_by`)."""
        alive = [p for p in self.pilots.values() if p.lane == lane.name and p.alive]
        return {"host": lane.host.name, "protocol": lane.host.protocol, "batch": bool(lane.protocol.batch),
                "alive": len(alive), "queued": sum(1 for p in alive if p.job and not p.came_up),
                "ready": len(lane.ready), "held": self.held_by(lane, budget=False), "refusals": lane.refusals,
                **({"refused": lane.refused_why} if lane.refusals else {})}

    def within_budget(self, lane: Lane) -> bool:
        """Whether a new pilot on the lane stays within the core-hour budgets
        (:mod:`pwe.engine.budget`): a batch pilot costs its slots x its walltime, the job
        :meth:`submit` would ask for now; a local one nothing in advance."""
        if self.budget is None or not self.budget.any:
            return True
        cost = 0.0
        if lane.protocol.batch:
            st = self.ledger.state
            ready = [(n, i) for n, i in lane.ready if st.nodes[n].state[i] == READY]
            shape = pilot_shape(self.plan, lane.host, ready, self.info.get("created"), measured=self.durations(st))
            cost = shape["nodes"] * shape["cores_per_node"] * shape["walltime"] / 60
        return self.budget.allows(lane, cost)

    def take_edges(self) -> None:
        """Batch systems' edge events (pwe notify): journal the authentic ones, each once (by
        its id: a replay is ignored and counted); a job that ended while its pilot still
        looks alive is gone now, not at the next status poll."""
        from ..runstate.notify import receive

        st = self.ledger.state
        take = self.ledger.take
        for msg, ok in receive(self.dir, self.edges_seen):
            if not ok:
                take(records.note("edge event with a bad signature ignored", time.time(), file=msg.get("file"),
                                  pilot=msg.get("pilot")))
                continue
            if msg["id"] in st.edges:
                take(records.note("edge event already applied: its replay ignored", time.time(), replay_of=msg["id"],
                                  replays=st.edges[msg["id"]] + 1, file=msg["file"], pilot=msg.get("pilot")))
                continue
            take(records.edge(*(msg.get(k) for k in ("id", "file", "pilot", "event", "job", "status", "t"))))
            pilot = self.pilots.get(msg.get("pilot"))
            if msg.get("event") == "ended" and pilot is not None and pilot.alive:
                self.gone(pilot, f"batch job {msg.get('job')} ended (status {msg.get('status')})")

    def check(self) -> None:
        """Each round: the lanes' batch systems asked (at their pace), and each live pilot
        that is gone, given up too long, or silent given up or its job cancelled."""
        self.setups.check()  # (setup_per_node failing on every node, pilot after pilot: pwe/engine/pilotctl.py)
        for lane in self.lanes.values():
            if lane.protocol.polls_status:
                self.poll_jobs(lane)
        now = time.time()
        for pilot in list(self.pilots.values()):
            if not pilot.alive:
                continue
            down = pilot.state is PilotState.DOWN
            if down or self.process_gone(pilot):
                # (a pilot that left with nothing to do says so: its idle_timeout gave its nodes back)
                self.gone(pilot, ("exited (idle)" if pilot.down_why == "idle" else "exited") if down else "died")
            elif pilot.state is PilotState.GIVEN_UP:
                if now - pilot.given_up_at > self.end_wait:
                    self.gone(pilot, f"its job did not end within {self.end_wait:.0f} s")
            elif self._silent(pilot, now):
                self._give_up(pilot, now)

    def _give_up(self, pilot: PilotHandle, now: float) -> None:
        """A pilot silent for ``lost_after`` s."""
        why = f"silent for {now - pilot.last_heard:.0f} s"
        if pilot.job is None:  # no job to end: what it said is all there is
            self.gone(pilot, why)
            return
        # its job may still run (a frozen process, a stalled filesystem) and its members
        # with it: end the job, and hand its members on only once it has ended and
        # everything it wrote has been taken in
        lane = self.lanes[pilot.lane]
        lane.protocol.cancel([pilot.job])
        pilot.give_up(why, now)
        lane.ask_soon()
        self.ledger.take(records.note(f"pilot {pilot.id} {why}: its batch job {pilot.job} is cancelled; its members "
                                      "are handed on once the job has ended", now, p=pilot.id))

    def _silent(self, pilot: PilotHandle, now: float) -> bool:
        """A pilot that should be speaking (its job runs, or it is a process on another
        machine) and has said nothing for ``lost_after`` s, even now."""
        if now - pilot.last_heard <= self.lost_after:
            return False
        if pilot.job is not None:
            from protocols.base import JobState

            if not (pilot.came_up and pilot.job_state is JobState.RUNNING):
                return False  # queued, or its batch system does not answer: its word is awaited
        elif pilot.host == hostname():
            return False  # a process here: whether it lives is asked of the process
        self.intake.ingest(pilot)  # what it said while the engine was busy (a slow status query)
        return now - pilot.last_heard > self.lost_after

    def process_gone(self, pilot: PilotHandle) -> bool:
        """A pilot whose process is gone; never one whose liveness the batch system tells
        (asked for all pilots at once: poll_jobs)."""
        protocol = self.lanes[pilot.lane].protocol
        return not protocol.polls_status and not protocol.alive(pilot.os_pid, pilot.host, pilot.popen,
                                                                 pilot.started)

    def _seal(self, pilot: PilotHandle) -> None:
        """A pilot that said it left or whose process is gone, all it said taken in: its spool
        files and output streams are compressed when they are big (:func:`pilot.sealing.seal`),
        in a thread (a million members' take seconds, and zlib lets the loop go on);
        :meth:`await_seals` waits for them."""
        pilot.close()
        pilot.become(PilotState.SEALED)
        t = threading.Thread(target=_seal_quietly, args=(str(pilot.dir),), name=f"seal {pilot.id}")
        t.start()
        self.sealing.append(t)

    def seal_given_up(self, given_up: dict[str, dict[str, Any]]) -> None:
        """At resume: the pilots an earlier engine gave up (``given_up``: id -> the state's
        record) whose files are still plain, because that engine was killed before their
        seal ended or sealed only pilots that said they left, are sealed now, one after
        another in a thread, each once its process is known gone (never one whose
        liveness only its batch system tells: its job may still write)."""
        plain = []
        for pid_, p in given_up.items():
            lane = self.lanes.get(p.get("lane") or "")
            try:  # (its own directory of this run only: another run's files are never sealed)
                directory = Path(pilot_dir(self.dir, pid_))
            except Outside:
                continue
            if lane is None or lane.protocol.polls_status or not directory.is_dir():
                continue
            if not spool_bytes(str(directory)) and not any(directory.glob("*" + STREAM)):
                continue  # (sealed already, or it wrote nothing)
            if not lane.protocol.alive(p.get("pid", 0), p.get("host", ""), None, p.get("started")):
                plain.append(str(directory))
        if plain:
            t = threading.Thread(target=_seal_each, args=(plain,), name="seal given up")
            t.start()
            self.sealing.append(t)

    def await_leaving(self, wait: float = 30.0) -> None:
        """At the end of a finished run: each pilot just told to stop whose spool files are
        big enough to seal is waited for until it says it left (``wait`` s at most, all
        together: a pilot leaves in well under a second on a quiet machine, and the wait
        must not give up on a busy one), then given up as gone (journaled) and sealed. One
        with small files, or whose process is gone without a word, is not waited for: the
        run's end is not held up for nothing."""
        st = self.ledger.state
        if st is None or st.unfinished():
            return
        above = seal_above()
        big = [p for p in self.pilots.values() if p.alive and sum(spool_bytes(str(p.dir)).values()) > above]
        deadline = time.time() + wait
        while big:
            for p in list(big):
                self.intake.ingest(p)
                if p.state is PilotState.DOWN:
                    self.gone(p, "exited")
                    big.remove(p)
                elif self.process_gone(p):
                    big.remove(p)  # (gone without a word: the loop's check says so, not this wait)
            if not big or time.time() > deadline:
                break
            time.sleep(0.02)

    def await_seals(self) -> None:
        """Wait for the seals under way: of left pilots (:meth:`_seal`), and of the parts
        of each pilot's spool behind both readers (its transport's)."""
        while self.sealing:
            self.sealing.pop().join()
        for pilot in self.pilots.values():
            pilot.transport.await_seal()

    def reattach(self, pid_: str, p: dict[str, Any], recovered: list[dict[str, Any]]) -> None:
        """A pilot the journal says is alive, taken up again by a resumed engine: assignments
        journaled but never sent to it (the engine was killed in between) handed back;
        ``recovered``: what it said of itself that a damaged journal lost (up, drain, down:
        :func:`pwe.engine.recovery.recover`); then its messages read on from its cursor."""
        restore_lane(self.lanes, self.info, p)  # (a helper's lane: pwe/engine/pilotctl.py)
        # (a partition's lane an attempt grew into: pwe/engine/sizing.py)
        restore_partition_lane(self.lanes, self.info.get("lanes") or {}, p.get("lane"),
                               float(self.info.get("status_every", 5.0)))
        lane = p.get("lane") if p.get("lane") in self.lanes else next(iter(self.lanes))
        try:
            transport = self.intake.transport(lane, pid_)
        except Outside as exc:
            self.not_ours(pid_, exc)
            return
        pilot = PilotHandle(pid_, self.dir / "pilots" / pid_, p.get("pid", 0), p["host"], p["slots"],
                            cursor=p.get("offset", 0), job=p.get("job"), lane=lane,
                            transport=transport, started=p.get("started"))
        pilot.numbered(p.get("q", 0), p.get("qs") or {})
        self.pilots[pid_] = pilot
        restore_pilot(pilot, p, self.setups)  # (helper, draining, setup_per_node: pwe/engine/pilotctl.py)
        st = self.ledger.state
        queued = {(nid, i, st.nodes[nid].attempt[i]) for nid, i in st.inflight(pid_)
                  if st.nodes[nid].state[i] == ASSIGNED}
        try:
            sent = pilot.transport.sent(among=queued) if queued else {}
        except OSError as exc:  # (a FIFO or a device put there: refused, never waited on)
            raise RunDamaged(f"{exc.filename or pilot.dir} cannot be read ({exc.strerror or exc}): what pilot {pid_} "
                             "was sent is not known; put its own file back, then give this command again") from None
        for nid, i, _ in sorted(queued - sent.keys(), key=lambda k: (k[0], k[1])):
            self.ledger.take(records.unassign(nid, i, pid_))
        pilot.holding(len(st.inflight(pid_)))
        for ev in recovered:
            self.intake.take(pilot, ev)
        self.intake.ingest(pilot)
        if self.process_gone(pilot) and pilot.state is not PilotState.DOWN:
            self.gone(pilot, "lost while the engine was down")

    def not_ours(self, pid_: str, exc: OSError) -> None:
        """At resume: a pilot the journal says is alive whose directory is not the run's own
        (a symbolic link, to another run or anywhere: :class:`~pilot.bounded.Outside`). Its
        files are unreadable: nothing in them is taken in (never another run's events as
        this run's), nothing written there; it is given up (journaled, one warning line) and
        its members run again."""
        why = f"{exc.filename}: {exc.strerror}"
        self.intake.notice(f"pilot {pid_}: {why}; given up, its members run again")
        st, take, now = self.ledger.state, self.ledger.take, time.time()
        for nid, i in st.inflight(pid_):
            take(records.unassign(nid, i, pid_, st.nodes[nid].attempt[i], f"its pilot {pid_} is given up (its "
                                  "directory is not this run's own); it runs again", now))
        take(records.pilot_gone(pid_, f"given up: {why}", now))

    def product_fault(self, nid: str, i: int) -> str | None:
        """Why member ``i``'s products do not count (pilot.members.product_fault, as its
        pilot checks them when it exits 0), or None; for an end its pilot could not judge
        (it died: :func:`pwe.engine.recovery.orphan_ends`). A rehearsal's made none."""
        pn, ws = self.plan.nodes[nid], self.info.get("workspace")
        if not pn.products or not ws or self.info.get("simulate"):
            return None
        from pilot.members import product_fault

        from ..planning.products import absolute

        return product_fault(absolute(self.plan, ws, nid, i), pn.products_least)

    def gone(self, pilot: PilotHandle, why: str, broke: bool = True) -> None:
        """Give a pilot up: take in everything it wrote first (pilot events win), then hand
        its unfinished members on. ``broke``: it counts towards the pilots in a row that
        broke (three stop the run)."""
        if pilot.alive:
            self.intake.ingest(pilot)
        if pilot.given_up_why:
            why = f"{pilot.given_up_why}, its job cancelled; then {why}"
        intake, st, take = self.intake, self.ledger.state, self.ledger.take
        # (not run again; judged as its pilot would have)
        recovery.orphan_ends(pilot, st, self.dir, intake.secret, intake.take, take, self.product_fault)
        inflight = st.inflight(pilot.id)
        if pilot.host == hostname():
            recovery.end_orphans(pilot, inflight, st, self.run_id, take)
        now = time.time()
        for nid, i in inflight:  # (the attempt and why: the trace says it was lost with its pilot)
            # one that was running is counted as lost (maxLosses: it may be what took the pilot down)
            take(records.unassign(nid, i, pilot.id, st.nodes[nid].attempt[i], f"its pilot {pilot.id} is gone ({why}); "
                                  "it runs again", now, lost=st.nodes[nid].state[i] == RUNNING))
        take(records.pilot_gone(pilot.id, why, now))
        said_down = pilot.state is PilotState.DOWN
        pilot.become(PilotState.GONE)
        pilot.let_go()
        if pilot.popen is not None:
            pilot.popen.poll()
        if said_down or self.process_gone(pilot):
            # (one that died: its process, the guardian that outlives the pilot included, is
            # gone, so nothing writes its files again; sealing them keeps a run that lost
            # pilots to kills or a recycled machine from keeping their spools plain for good)
            self._seal(pilot)
        # A pilot that never came up, died without saying goodbye, or left on an error, and
        # finished nothing: three in a row is a pilot that cannot work here (a defect, a
        # broken environment). Stop with its words instead of starting pilots forever.
        broken = not pilot.came_up or not said_down or pilot.down_why.startswith("error")
        if broke and broken and not pilot.finished_any:
            self._broke(pilot)

    def _broke(self, pilot: PilotHandle) -> None:
        self.pilots.failed_in_a_row += 1
        if self.pilots.failed_in_a_row >= 3:
            log = pilot.dir / "pilot.log"
            try:
                with open_regular(log, "rb", within=pilot.dir) as fh:  # (its last 4 KiB: a line of it)
                    fh.seek(max(0, fh.seek(0, 2) - 4096))
                    last = fh.read().decode("utf-8", "replace").strip().splitlines()[-1]
            except (OSError, IndexError):
                last = "(no output)"
            what = "died before starting" if not pilot.came_up else "failed before finishing any member"
            raise RunStopped(f"3 pilots in a row {what}; the last said: {last}  (see {log}): fix what it says")


def measured(st: Any) -> dict[str, float]:
    """Per node the mean duration (s) of its members that ended done so far in this run (the
    nodes with none are left out): what a pilot's size and walltime are worked out from
    (:func:`pwe.planning.placement.pilot_shape`). One pass over the nodes, not the members."""
    return {nid: ns.done_spent / ns.counts[DONE] for nid, ns in st.nodes.items() if ns.counts[DONE]}


def _seal_each(directories: list[str]) -> None:
    for directory in directories:
        _seal_quietly(directory)


def _seal_quietly(directory: str) -> None:
    """Seal a left pilot's spool files and its members' output streams; one the disk
    refuses stays plain (a convenience: readers take either)."""
    try:
        seal(directory)
    except OSError:
        pass
    seal_streams(directory, seal_above())
