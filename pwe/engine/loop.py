"""The engine: walks the DAG member by member, feeds pilots, takes in their events.

One engine works on a run at a time (``engine.lock``). Its loop:

1. take in the messages pilots sent since last time (``start``/``end``/``down``...,
   :mod:`pwe.engine.intake`), journal them and apply them to the state (which releases
   downstream members);
2. check pilots are alive; a pilot that is gone has its unfinished members handed back
   (queued ones without using an attempt);
3. feed ready members to a live pilot, up to a window, journaling each assignment
   *before* the pilot can see it (so a resumed engine never forgets one);
4. snapshot the counts for ``pwe status``; report progress.

Failure model: the engine may be killed at any point. The journal then holds a prefix
of what happened; the pilots' transports hold the rest. ``resume`` replays the journal,
drops assignments a pilot never received, and reads each pilot's messages on from the
last cursor it journaled; applying a pilot event twice is a no-op. So no member that
finished runs again, and none is lost.

The engine holds its parts, each made once in :meth:`Engine.__init__` with what it needs
(ARCHITECTURE.md draws them): ``ledger`` (state and journal: every record goes through its
``take``), ``pilots`` (the registry: each pilot's ``PilotState``), ``intake`` (1), ``work`` (2:
pilots started, watched, given up), ``feeder`` (3), ``control`` (``pwe pilot`` requests),
``setups`` (setup_per_node); :func:`pwe.engine.recovery.recover` after a damaged journal.

Making a run is :mod:`pwe.runstate.runs`; a member's task message is :mod:`pwe.engine.tasks`;
the Python API's run_workflow and resume_workflow are :mod:`pwe.engine.api`.

Why one module over 450 lines: the loop and the run's creation, start and end share the
engine's state; the parts with a job of their own are already apart (intake, feed, pilots,
recovery, halting, budget, pilotctl, setups).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from pilot import faults
from pilot.allocation import hostname
from pilot.wire import CANCEL, STOP

from ..base.errors import InputError, PweError, RunStopped
from ..base.regular import read_bytes, write_json_atomic
from ..base.text import shown
from ..planning.plan import Plan
from ..runstate import checkpoint, locks, pressure, rundir, runs
from ..runstate.keyring import KeyRing
from ..runstate.lending import Lending
from ..runstate.journal import Journal, JournalError, disk_refusals
from ..runstate.state import RunState, not_begun_runs
from ..runstate import records
from . import halfmade, recovery
from .budget import CoreHours
from .feed import Feeder
from .halting import Halting
from .handles import Lane, PilotHandle, Pilots, PilotState, make_lanes
from .intake import Intake
from .ledger import Ledger
from .pilotctl import PilotControl
from .setups import Setups
from .stragglers import Stragglers
from .holds import Holds
from .simulate import Rehearsal
from .sizing import Sizing
from .pilots import PilotWork
from .tasks import TaskBuilder

__all__ = ["Engine", "Lane", "PilotHandle", "asked_by"]

# The engine never needs to react within a millisecond: each pilot holds a window of
# queued members. Sleeping at least POLL_MIN between rounds batches the work (fewer, larger
# reads and writes) and leaves the cores to the members.
POLL_MIN, POLL_MAX = 0.01, 0.05
# A busy round while every pilot holds a deep queue (Feeder.deep): a round's fixed cost (its
# reads, the cursor's journal record, the assign's, the starts not yet ended) is shared by
# five times the members. At 10^5 x echo on 2 cores the journal went from 90 to 24 bytes
# a member with the compact ends (journal.py) and these rounds (bench/BENCHMARKS.md).
POLL_DEEP = 0.05
SNAPSHOT_EVERY = 0.5
#: Below this many free bytes the run directory's filesystem counts as full: pilots can no
#: longer record events there, so the engine stops (state intact) instead of waiting on them.
MIN_FREE_BYTES = 64 * 1024


def _without(runs: Iterable[tuple[int, int]], skip: set[int]) -> Iterable[tuple[int, int]]:
    """``runs`` of member indices less the members in ``skip``."""
    for lo, hi in runs:
        at = lo
        for i in sorted(j for j in skip if lo <= j < hi):
            if at < i:
                yield at, i
            at = i + 1
        if at < hi:
            yield at, hi


def _never_started(runs: Iterable[tuple[int, int]], attempt: Any) -> Iterable[tuple[int, int]]:
    """``runs`` of member indices less those with an attempt in this run's lineage (their
    ``attempt`` counter is not 0): they began and did not end ok, so a product of theirs
    may be half made. A run with none (the common case) costs one count in C."""
    for lo, hi in runs:
        part = attempt[lo:hi]
        if part.count(0) == hi - lo:
            yield lo, hi
            continue
        at = lo
        for i, a in enumerate(part, lo):
            if a:
                if at < i:
                    yield at, i
                at = i + 1
        if at < hi:
            yield at, hi


class Engine:
    """Runs one run directory to its end. Use :meth:`create` or :meth:`open`.

    Each node runs on its own host (its ``host``, or ``--host`` for all); the engine keeps
    one :class:`Lane` per host used (per partition of a host whose nodes need several),
    each with its own pilots.
    """

    def __init__(self, run_dir: Path, plan: Plan, info: dict[str, Any]):
        self.dir = Path(run_dir).resolve()  # pilots and members run elsewhere: absolute paths only
        self.plan = plan
        self.info = info
        self.run_id = info["run_id"]
        self.heartbeat = float(info.get("heartbeat", 5.0))
        # silence that gives a pilot up: many heartbeats, and two minutes at least (a busy
        # node, or a filesystem that stalls for a minute, must not cost a pilot)
        self.lost_after = float(info.get("lost_after") or max(120.0, 24 * self.heartbeat))
        # how long a pilot given up for silence may take to end once its job is cancelled
        self.end_wait = float(info.get("end_wait") or max(60.0, self.lost_after))
        self.lock = locks.EngineLock(run_dir)
        self.live = locks.LiveLock("", "")  # (the workspace's, once run takes it; never held here)
        self.suspects: set[str] | None = None  # products earlier runs may have left half made (halfmade.py)
        self._ckpt_at, self._ckpt_cost, self._ckpt_offset = time.time(), 0.0, -1  # the last checkpoint
        self.warnings: list[str] = []
        #: says what the engine found wrong but worked around (a damaged journal line); what
        #: it quotes was made by others (a pilot's message, a file): shown as text
        self.notice: Callable[[str], None] = lambda line: print(f"warning: {shown(line)}", file=sys.stderr)
        self.hosts_changed: list[str] = []  # hosts whose definition changed since the run was made (open)
        self.made = False  # this engine made the run (create): a refusal before it began removes it again
        self.info_changed = False  # run.json to be written again by this engine (open: hosts, --halt)
        self._refused = False  # refused before it began (run): the run it made is removed
        self._not_begun = False  # refused before it began, whoever made the run (pwe submit's engine)
        self._first = False  # this engine began the run (its journal was new): reuse is decided then
        self._by: str | None = None  # who asked (the ``by`` of the run's first records)
        # one lane per host, or per (host, partition) where its nodes need several partitions;
        # each node's lane (a node whose host the run did not record runs on the first)
        self.lanes: dict[str, Lane]
        self.lanes, lane_of = make_lanes(plan, info["lanes"], float(info.get("status_every", 5.0)))
        # -- the parts, each given what it needs (the module's docstring lists them) --
        self.ledger = Ledger()
        self.pilots = Pilots()
        self.simulated = bool(info.get("simulate"))  # (pwe run --simulate: pwe/engine/simulate.py)
        rehearsal = Rehearsal(plan, self.run_id, self.dir, info["simulate"]) if self.simulated else None
        builder = TaskBuilder(plan, self.run_id, self.dir, info.get("workspace"), rehearsal)
        # (pwe set's values, from the run's state once it is loaded: its set records)
        builder.overrides = lambda nid, i: self.ledger.state.settings_for(nid, i) if self.ledger.state.sets else None
        # members' keys fixed as each is handed to a pilot; lent as each ends (pwe/runstate/keyring.py, lending.py)
        self.keyring = KeyRing(plan, self.dir, info.get("workspace"))
        if self.simulated:
            self.keyring.on = False  # (a rehearsal lends nothing: its members ran no payload)
        self.lending = Lending(self.dir, plan, self.run_id, info.get("workspace"), self.keyring)
        self.setups = Setups(builder.setups, self.ledger)
        self.halting = Halting(plan, info, self.ledger, self.pilots)
        self.intake = Intake(self.dir, plan, self.ledger, self.lanes, self.pilots, lambda line: self.notice(line),
                             gone=lambda pilot, why, broke: self.work.gone(pilot, why, broke),
                             setup_news=self.setups.news, failed=self.halting.failed)
        self.work = PilotWork(self.dir, plan, info, self.ledger, self.lanes, self.pilots, self.intake, self.setups,
                              (self.heartbeat, self.lost_after, self.end_wait))
        self.feeder = Feeder(self.dir, plan, info, self.ledger, self.lanes, lane_of, self.pilots, builder,
                             start=self.work.start, may_submit=self.work.may_submit,
                             fix=self.keyring.fix if self.keyring.on else None)
        self.intake.ended_well = self._ended_well
        # an attempt whose request outgrew its node's lane: to a partition that holds it (sizing.py)
        self.sizing = Sizing(plan, info["lanes"], self.lanes, lane_of, float(info.get("status_every", 5.0)),
                             builder.overrides)
        builder.ceiling = self.sizing.ceiling
        self.feeder.sizing = self.sizing
        self.feeder.ended = lambda rec: self.intake.after_end(rec, self.ledger.take(rec))
        self.stragglers = Stragglers(plan, self.pilots)  # (stragglers.py: straggler: of the nodes)
        self.holds = Holds(plan, self.ledger, self.pilots)  # (holds.py: hold: a value that only fails)
        if self.holds.any:
            self.intake.settled = self.holds.ended
        if self.stragglers.any:
            self.intake.took = self.stragglers.done
        self.control = PilotControl(self.dir, info, self.ledger, self.lanes, self.pilots, start=self.work.start)
        self.budget = CoreHours(plan, info, self.ledger, self.lanes, lane_of, self.halting)  # (budget.py)
        self.work.budget = self.budget

    @property
    def checks(self) -> dict[str, Callable[[dict], Any]]:
        """Python callables that check a node's members (run_workflow's ``checks``:
        pwe/planning/trees.py), by node; the intake judges each end by them."""
        return self.intake.checks

    @checks.setter
    def checks(self, checks: dict[str, Callable[[dict], Any]]) -> None:
        self.intake.checks = checks

    @property
    def state(self) -> RunState | None:
        """The run's state (None until the run is loaded)."""
        return self.ledger.state

    @property
    def journal(self) -> Journal | None:
        return self.ledger.journal

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def create(cls, workflow: str | Path, sets: dict[str, Any] | None = None, host: str | None = None,
               cores: int | None = None, run_dir: str | Path | None = None, hosts_file: str | Path | None = None,
               **options: Any) -> "Engine":
        """Check the workflow, make its run directory, and return an engine for it."""
        from ..base.confine import one_line

        # (its path goes into every job script and pwe notify's command line there: one line)
        one_line(str(Path(run_dir or rundir.DEFAULT_ROOT).resolve()), "--run-dir" if run_dir else "the run directory")
        path, plan, info, warnings = runs.create(workflow, sets, host, cores, run_dir, hosts_file, **options)
        try:
            engine = cls(path, plan, info)
        except BaseException as exc:  # a run that cannot start leaves no half-made directory behind
            runs.unmake(path)
            runs.not_made(path, exc)
            raise
        engine.warnings = warnings
        engine.made = True  # (refused before it began, in run(): removed again)
        return engine

    @classmethod
    def open(cls, run_dir: Path, reload_hosts: bool = False, halt: dict[str, Any] | None = None,
             budget: dict[str, Any] | None = None) -> "Engine":
        """The engine of an existing run. ``reload_hosts`` (resume, retry): take the hosts'
        current definitions from the registry, so that a host fixed after its batch system
        refused a pilot (a partition, an account) is used as fixed; the change is journaled.
        ``halt`` (pwe resume/retry --halt): the run's failure budget from now on; ``budget``
        (--budget): its core-hour budget."""
        info, plan = runs.read(run_dir)
        changed = runs.current_hosts(run_dir, info) if reload_hosts else []
        if halt:
            info["halt"] = halt
        if budget:
            info["budget"] = budget
        engine = cls(run_dir, plan, info)
        engine.hosts_changed = changed
        engine.info_changed = bool(changed or halt or budget)
        return engine

    # -- the loop -------------------------------------------------------------------------------
    def run(self, progress: Callable[[RunState], None] | None = None, retry: bool = False,
            cancel: bool = False, by: str | None = None, only: dict[str, list[list[int]]] | None = None) -> bool:
        """Run (or resume) to the end. True when every member succeeded.

        ``retry``: first give failed, skipped and cancelled members another go (``only``:
        those of these members alone, ``{node: [[first, end], ...]}``: ``pwe retry -q``).
        ``cancel``: stop the run (its pilots and their members) and return.
        ``by``: who asked (``cli:USER``, ``ui:USER@ADDRESS``), said in the journal's
        ``resume``, ``retry`` and ``cancel`` records.
        Ctrl-C cancels the run; ``pwe retry`` picks it up again.
        """
        self._by = by or None
        try:
            faults.arm("engine")  # (PWE_FAULT: tests stop the engine at a write of its own; pilot/faults.py)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        if not self.lock.held:  # (pwe resume takes it first, before it says anything: pwe/cli/main.py)
            with disk_refusals(self.dir):
                self.lock.acquire()  # atomic: a second engine is refused, naming this one (RunTaken)
        try:
            try:
                self._refused_before(cancel)
                self._take_workspace(cancel)
            except PweError as exc:
                self._refuse(exc)
                raise
            with disk_refusals(self.dir):  # (the run's files refused anywhere: JournalError, not a traceback)
                return self._run(progress, retry, cancel, by, only)
        except RunStopped as exc:
            # said in the journal (when the disk still takes it, and it was opened), so `pwe
            # status` shows why
            try:
                if self.journal is not None:
                    self.ledger.take(records.stopped(str(exc), time.time()))
                    self.journal.flush()
            except (PweError, OSError):
                pass
            raise
        except KeyboardInterrupt:
            if self.journal is not None and self.state is not None and not self.state.cancelled:
                self.cancel()
            raise
        finally:
            self._shutdown()
            if self._refused or self._not_begun:
                self.live.undo()  # (its lock in the workspace too, where this engine made it)
            else:
                if self.live.held and self.state is not None and self.suspects is not None:
                    halfmade.finish(self.dir, self.state, self.suspects)  # (before the next run may take it)
                self.live.release()
            if self._refused:
                runs.unmake(self.dir)  # a refusal leaves nothing behind

    def _refused_before(self, cancel: bool) -> None:
        """A run an engine refused for good (rundir.REFUSED) is not taken up again (a resume
        would skip the checks its first engine made); it may still be cancelled."""
        why = None if cancel else rundir.refusal(self.dir)
        if why is not None:
            raise InputError(f"run {self.run_id} was refused and stays refused: {why}")

    def _refuse(self, exc: PweError) -> None:
        """Refused before it began: a run this engine made is removed; one it did not make
        (pwe submit's, the service's) is marked refused for good when its input was bad
        (InputError: another engine would meet it again), never when it was only taken."""
        self._refused = self.made  # (a run this engine made, refused before it began: removed)
        self._not_begun = True
        if not self.made and isinstance(exc, InputError) and rundir.refusal(self.dir) is None:
            rundir.mark_refused(self.dir, exc)

    def _take_workspace(self, cancel: bool) -> None:
        """One live run per workflow per workspace (:class:`pwe.runstate.locks.LiveLock`),
        held for the engine's life; not for a run made with ``--concurrent``, nor to cancel."""
        ws = self.info.get("workspace")
        if ws and not cancel and not self.info.get("concurrent"):
            self.live = locks.LiveLock(ws, self.plan.workflow.name, self.run_id, self.dir)
            self.live.acquire()
            if self.live.held and any(pn.products for pn in self.plan.nodes.values()):
                # (what the runs before this one may have left half made: never complete)
                self.suspects = halfmade.start(self.dir, self.live.previous)

    def _run(self, progress: Callable[[RunState], None] | None, retry: bool, cancel: bool, by: str | None,
             only: dict[str, list[list[int]]] | None) -> bool:
        """:meth:`run`'s work, inside its lock and its catching of what stops the run."""
        if self.info_changed:  # (written only by the engine holding the run)
            try:
                write_json_atomic(self.dir / "run.json", self.info)
            except OSError:
                pass  # the next engine finds the change again; the journal says it either way
        self._load()
        for name in self.hosts_changed:
            self.ledger.take(records.note(f"host '{name}' is defined differently than when the run began; new pilots "
                                          "use its current definition", time.time()))
        if retry:
            # a cancel request the last engine never took in (it ended first) is stale:
            # retrying is the user asking for the run again
            (self.dir / "control" / "cancel").unlink(missing_ok=True)
            self.ledger.take(records.retry(time.time(), self._by, only))
        if cancel:
            self.cancel(by)
        else:
            try:
                changed = self._reuse()
                self._complete_by_products(changed)
            except InputError as exc:  # (a products: directory that cannot be listed): refused before it began
                self._refuse(exc)
                raise
            self.halting.weigh()  # (a resumed run whose budget is spent already halts again at once)
            self.budget.weigh()
        self.control.take_requests()  # (pwe set left while no engine ran: before any member is handed out)
        return self._loop(progress)

    def _load(self) -> None:
        """Open the run's books (the checkpoint, then the journal's tail), recover what a
        damaged journal lost, and take up the pilots the journal says are alive."""
        self.intake.load_secret()
        self.keyring.open()
        path = self.dir / "journal.jsonl"
        fresh = self._first = not runs.check_journal(self.dir)
        # the checkpoint, then the journal's tail (or the whole journal without one)
        state, replayed, unusable = checkpoint.load(self.dir, self.plan)
        self.work.edges_seen = set(state.edge_files)  # taken in already: not read again
        journal = Journal(path, fsync=bool(self.info.get("fsync")))
        journal.lines = replayed.lines
        self.ledger.open(state, journal)
        take = self.ledger.take
        take((records.run if fresh else records.resume)(time.time(), os.getpid(), _callable_checks(state, self.checks),
                                                         self._by))
        for line in unusable + replayed.warnings():
            self.notice(line)
            take(records.note(line, time.time()))
        recovered: dict[str, list[dict[str, Any]]] = {}
        if replayed.damaged or replayed.torn:
            intake = self.intake
            recovered = recovery.recover(self.ledger, intake.transport, next(iter(self.lanes)),
                                         lambda pid_, ev: intake.judged(intake.event_record(pid_, ev)))
        given_up = {}
        for pid_, p in state.pilots.items():
            self.pilots.seen(pid_)
            if p.get("alive"):
                self.work.reattach(pid_, p, recovered.pop(pid_, []))
            else:
                given_up[pid_] = p
        self.work.seal_given_up(given_up)  # (what an engine killed mid-seal left plain)
        journal.flush()

    def _reuse(self) -> dict[str, set[int]]:
        """When the run begins (its first engine), unless ``--fresh``: journal the members
        reused from earlier runs of the workflow under the runs root (or ``--reuse-from``),
        decided once (:mod:`pwe.runstate.reusable`); done without a pilot, their dependants
        released as if they had run. Returns the members whose products were gone or changed
        (they run: not taken as complete by their products)."""
        from ..planning.reuse import reusable as may_reuse

        if self.info.get("fresh") or not self._first or not any(may_reuse(self.plan, n) for n in self.plan.nodes):
            return {}
        from ..runstate import reusable

        named = self.info.get("reuse_from")
        found, notes = reusable.lenders(Path(named) if named else self.dir.parent, self.plan.workflow.name,
                                        exclude=self.dir, named=bool(named))
        decision = reusable.decide(self.plan, self.info.get("workspace"), found, notes)
        for line in notes:
            self.ledger.take(records.note(f"not reused: {line}", time.time()))
        for rec in decision.records():
            self.ledger.take(rec)
        for nid, spans in decision.reused.items():  # (their keys: those they were found by; lent again)
            self.keyring.take(nid, spans, decision.keys[nid])
            self.lending.reused(nid, spans)
        return decision.changed

    def _ended_well(self, nid: str, i: int) -> None:
        """A member ended done: lent as it ends, unless a ``pwe set`` gave it environment
        values its key does not hold (pwe/runstate/reusable.py: nor at the run's end)."""
        st = self.ledger.state
        if st.sets and any(lo <= i < hi for lo, hi in st.env_set_runs(nid)):
            return
        self.lending.done(nid, i)

    def _lend(self) -> None:
        """At the run's end: the signed record of what it may lend to later runs."""
        from ..planning.reuse import reusable as may_reuse

        if self.simulated or not any(may_reuse(self.plan, n) for n in self.plan.nodes):
            return
        from ..runstate import reusable

        try:
            reusable.write(self.dir, self.plan, self.state, self.run_id, self.info.get("workspace"),
                           recorded=self.keyring.filled, parts=self.keyring)  # (the keys its members were handed with)
        except (OSError, PweError) as exc:  # (later runs reuse nothing of it; this one ended as it did)
            self.notice(f"cannot write what this run may lend to later runs: {exc}")
            return
        self.lending.remove()  # (what it lent as members ended is in the end's record)

    def _complete_by_products(self, changed: dict[str, set[int]] | None = None) -> None:
        """When the run begins, and each time it is resumed or retried: journal the members
        not begun (waiting or ready; after a retry, also those that failed) whose products
        all exist in the workspace as complete (:mod:`pwe.planning.products`: each directory listed
        once, only those members' paths rendered). So products made meanwhile, by hand or by
        another run into the workspace, are not made again. Not with ``--fresh``, nor for
        ``changed`` members (a product that reuse found gone or changed: they run again),
        nor for a member that began in this run's lineage and did not end ok (stopped, lost
        or failed while it may have been writing a product: :func:`_never_started`)."""
        if self.info.get("fresh"):
            return
        if self.info.get("workspace") and any(pn.products for pn in self.plan.nodes.values()):
            from ..planning import products

            nodes = self.state.nodes
            changed = changed or {}

            def not_begun(nid: str) -> Iterable[tuple[int, int]]:
                runs = _never_started(not_begun_runs(nodes[nid].state), nodes[nid].attempt)
                return runs if nid not in changed else _without(runs, changed[nid])

            found = products.scan(self.plan, Path(self.info["workspace"]), not_begun, self.suspects or frozenset())
            for nid, runs in products.complete_runs(found):
                self.ledger.take(records.complete(nid, runs))

    def _loop(self, progress: Callable[[RunState], None] | None) -> bool:
        st = self.state
        assert st is not None
        sleep = POLL_MIN
        last_snap = 0.0
        cancel_file = self.dir / "control" / "cancel"
        ingest = self.intake.ingest
        while True:
            if cancel_file.exists():
                if not st.cancelled:
                    self.cancel(asked_by(cancel_file))  # journaled (and flushed) before the request is taken away
                # consumed: a later `pwe retry` or `pwe resume` must not cancel again
                cancel_file.unlink(missing_ok=True)
            busy = 0
            for pilot in list(self.pilots.values()):
                if pilot.alive:
                    busy += ingest(pilot)
            self.work.check()
            if st.unfinished() == 0 or self.halting.over() or self.holds.over():
                break
            self.feeder.release_held()  # (submit_whole groups whose members waited)
            busy += self.feeder.feed()
            self.keyring.flush()  # (the keys of the assignments first: pwe/runstate/keyring.py)
            self.journal.flush()  # assignments are durable before any pilot can see them
            self.lending.flush(st)  # (what ended well, now journaled: lent)
            self.stragglers.bring()  # (a node's straggler limit, to the pilots that have not had it)
            for pilot in self.pilots.values():
                pilot.flush()
            now = time.time()
            if now - last_snap >= SNAPSHOT_EVERY:
                self.work.take_edges()
                self.control.take_requests()  # (pwe pilot add / drain: pwe/engine/pilotctl.py)
                if self.feeder.let_go():  # (the pilots of a lane with nothing left: leave now)
                    for pilot in self.pilots.values():
                        pilot.flush()
                self._check_space()
                self.budget.weigh()
                self._snapshot()
                last_snap = now
                if checkpoint.due(self._ckpt_at, self._ckpt_cost, now):
                    self._checkpoint()
                if progress:
                    progress(st)
            sleep = (POLL_DEEP if self.feeder.deep() else POLL_MIN) if busy else min(POLL_MAX, sleep * 1.5)
            self.intake.sleep(sleep)  # (woken early by a broker's new events: intake.py)
        ok = not st.cancelled and st.halted is None and st.all_done()  # (a check's members too, trees converged)
        self.ledger.take(records.finish(ok, time.time()))
        self.journal.flush()
        self._lend()
        press = self.feeder.pressure
        if not self.simulated:  # (a rehearsal's sleeps are no measure of the payload)
            pressure.write_durations(self.dir, self.plan.workflow.name, st,
                                     press.earlier if press else None)  # (the next run's estimates)
        if progress:
            progress(st)
        return ok

    def _check_space(self) -> None:
        try:
            fs = os.statvfs(self.dir)
        except OSError:
            return
        free = fs.f_bavail * fs.f_frsize
        if free < MIN_FREE_BYTES:
            raise JournalError(f"the filesystem of {self.dir} is full ({free // 1024} KiB free; pilots hold their "
                               "events meanwhile): free space")

    # -- cancel and shutdown -----------------------------------------------------------------
    def cancel(self, by: str | None = None) -> bool:
        """Stop the run's pilots and mark what is unfinished cancelled; False if nothing was.
        ``by``: who asked (said in the ``cancel`` record)."""
        if self.state.unfinished() == 0:
            return False
        for pilot in self.pilots.values():
            if pilot.alive:
                pilot.send({"k": CANCEL})
                pilot.flush()
        self.ledger.take(records.cancel(time.time(), by))
        self.journal.flush()
        return True

    def _shutdown(self) -> None:
        """Tell pilots there is nothing more, close files, release the run. Never raises
        over an error already on its way out (a full disk fails these writes too)."""
        try:
            over = self.state is not None and (self.state.unfinished() == 0 or self.halting.over()
                                               or self.holds.over())
            pending = self._stop_pilots(over)
            try:
                self.work.await_leaving()  # (a finished run's big spools: sealed once their pilots said they left)
            except (OSError, PweError):
                pass
            for pilot in self.pilots.values():
                try:
                    pilot.close()
                except (OSError, PweError):
                    pass
            for lane in self.lanes.values():
                if pending.get(lane.name):
                    try:
                        lane.protocol.cancel(pending[lane.name])
                    except Exception:  # a scheduler that does not answer must not hide the run's outcome
                        pass
                lane.protocol.close()
            if over:
                for pilot in self.pilots.values():
                    pilot.transport.forget()  # the run is over: its events are journaled and archived in its directory
            self.intake.close_brokers()
            if self.journal is not None:
                self._close_keys(before=True)  # (the keys of the journal's last assignments first)
                try:
                    self.journal.close()
                    self._checkpoint()  # (only of a journal wholly written)
                except PweError:
                    pass
                self._close_keys(before=False)  # (what ended well, journaled now: lent)
                self._snapshot()
        finally:
            self.work.await_seals()
            self.lock.release()

    def _close_keys(self, before: bool) -> None:
        """At shutdown: the recorded keys written (``before`` the journal's last write), or
        what ended well lent (after it). A disk that refuses them: the journal says the rest."""
        try:
            if before:
                self.keyring.close()
            else:
                if self.state is not None:
                    self.lending.flush(self.state)
                self.lending.close()
        except OSError:
            pass

    def _stop_pilots(self, over: bool) -> dict[str, list[str]]:
        """Tell each live pilot to stop; the jobs still queued of a finished (``over``) run,
        by lane: cancelled, they have nothing to do."""
        pending: dict[str, list[str]] = {}
        for pilot in self.pilots.values():
            try:
                if pilot.alive and pilot.state is not PilotState.DOWN:
                    pilot.send({"k": STOP})
                    if pilot.job and not pilot.came_up and over:
                        pending.setdefault(pilot.lane, []).append(pilot.job)  # queued still, nothing to do
                pilot.flush()
            except (OSError, PweError):
                pass  # the pilot keeps running what it has; resume takes its events in
        return pending

    def _checkpoint(self) -> None:
        """The state as of the journal written so far (:mod:`pwe.runstate.checkpoint`): a resumed
        engine and every reader replay only what comes after. Called with the journal
        flushed (every record applied is written, and only those)."""
        j = self.journal
        if j is None or self.state is None or j.pending or j.offset == self._ckpt_offset:
            return
        t0 = time.perf_counter()
        try:
            checkpoint.write(self.dir, self.state, j.offset, j.lines, fsync=j.fsync)
            self._ckpt_offset = j.offset
        except OSError:
            pass  # a convenience, as the snapshot: the journal is the record
        self._ckpt_cost = time.perf_counter() - t0
        self._ckpt_at = time.time()

    def _snapshot(self) -> None:
        snap, snap_t = self.state.snapshot(), time.time()
        snap.update({"run_id": self.run_id, "workflow": self.plan.workflow.name, "updated": snap_t,
                     "engine": {"pid": os.getpid(), "host": hostname()},
                     "total_members": sum(n.size for n in self.state.nodes.values()),  # (with grown ones)
                     # hosts whose batch system does not answer: nothing new is submitted there
                     "unreachable": {lane.name: {"since": lane.unreachable_since, "why": lane.unreachable_why}
                                     for lane in self.lanes.values() if lane.unreachable_since is not None},
                     "pilot_view": self.control.view(),
                     # (each lane's pilots and what holds a new one back: pwe explain's allocation)
                     "lanes": {name: self.work.lane_view(lane) for name, lane in self.lanes.items()},
                     **({"budget": self.budget.figures(snap_t)} if self.budget.any else {})})
        try:
            write_json_atomic(self.dir / "state.json", snap)
        except OSError:
            pass  # a snapshot is a convenience; the journal is the record


def asked_by(request: Path) -> str | None:
    """Who asked, from a request file in ``control/`` (``pwe cancel`` writes ``{"by": ...}``
    there; an empty one, an earlier pwe's, says nobody)."""
    import json

    try:
        said = json.loads(read_bytes(request, 4096) or b"{}")
    except (OSError, ValueError):
        return None
    by = said.get("by") if isinstance(said, dict) else None
    return by[:200] if isinstance(by, str) else None


def _callable_checks(state: RunState, checks: dict[str, Any]) -> list[str] | None:
    """What the ``run``/``resume`` record says of callable checks: the nodes they check.
    A run begun with them is refused by an engine without them (``pwe resume``), rather
    than its trees silently stopping to grow."""
    had = sorted(state.api_checks)
    missing = [n for n in had if n not in checks]
    if missing:
        raise InputError(f"node(s) {', '.join(missing)} of this run are checked by a Python callable "
                         "(run_workflow(checks=...)); resume it from Python: pwe.resume_workflow(RUN_DIR, checks=...)")
    return sorted(checks) if checks else None
