"""The engine taking in what its pilots say: the transport to each pilot (spool or broker,
signed with keys made from the run's secret), the check of every message before it is
applied, and the journal records made of them: :class:`Intake`, a part the engine holds
(:mod:`pwe.engine.loop`), given the ledger, the lanes and the pilots, and the two
callables it calls back: ``gone`` (give a pilot up: :meth:`pwe.engine.pilots.PilotWork.gone`)
and ``setup_news`` (a node's setup_per_node outcome: :class:`pwe.engine.setups.Setups`).

Every message a pilot sends is checked before it is applied (:meth:`Intake.admit`):
its signature (the transport gives a bad one as ``forged``), its form (``malformed``)
and its sequence number ``q``: each ``q`` is applied once per pilot, so a message read
twice changes nothing. One that the same transport already delivered is ``replayed``;
one that came the other way first (a pilot that left its broker for the spool sends
again what the engine had not acknowledged) is ``resent``. Each refusal is journaled
(``reject``: counted in ``pwe status --json`` as ``rejected``), never applied.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pilot.transport import EngineSpool, Transport
from pilot.wire import (BACK, CANCEL, DAMAGED, DOWN, DRAIN, END, FORGED, MALFORMED, NO_ENV, NO_SCRATCH,
                        NODE_LOST, NODE_SETUP, START, UNWRITABLE, UP, VERSION, channel_key)

from pilot.nodesetup import SETUP_FAILED

from ..base.errors import RunDamaged, RunStopped
from ..base.regular import pilot_dir, read_secret
from ..base.states import DONE, FAILED
from ..planning.trees import decide
from ..runstate import journal as kind
from ..runstate import records
from .handles import PilotState

#: seconds an engine with pilots on a broker sleeps before it waits on the broker for events
BATCH = 0.01

if TYPE_CHECKING:
    from ..planning.plan import Plan
    from .handles import Lane, PilotHandle, Pilots
    from .ledger import Ledger


class Intake:
    """Transports, admission and journal records of pilot messages."""

    def __init__(self, run_dir: Path, plan: Plan, ledger: Ledger, lanes: dict[str, Lane], pilots: Pilots,
                 notice: Callable[[str], None],
                 gone: Callable[[PilotHandle, str, bool], None],
                 setup_news: Callable[[PilotHandle, dict[str, Any]], None],
                 failed: Callable[[str], None] = lambda nid: None):
        self.dir = run_dir
        self.plan = plan
        self.ledger = ledger
        self.lanes = lanes
        self.pilots = pilots
        #: Python callables that check a node's members, by node (run_workflow's ``checks``)
        self.checks: dict[str, Callable[[dict], Any]] = {}
        self.notice = notice
        self.gone = gone
        self.setup_news = setup_news
        self.failed = failed  # a member of the node failed for good: the failure budget (pwe/engine/halting.py)
        #: a member ended well, its end journaled: lent as it ends (pwe/runstate/lending.py)
        self.ended_well: Callable[[str, int], None] = lambda nid, i: None
        #: a member ended done, after so many seconds (pwe/engine/stragglers.py: the node's median)
        self.took: Callable[[str, Any], None] = lambda nid, dt: None
        #: a member ended for good, failed or done (pwe/engine/holds.py: its values' counts)
        self.settled: Callable[[str, int, int], None] = lambda nid, i, code: None
        #: members a pilot said were on a node it lost (its ``node_lost``): their ``back`` is a loss
        self.on_lost_node: set[tuple[str, str, int]] = set()
        self.secret: bytes | None = None  # the run's: every line to and from a pilot is signed with it (load_secret)
        self.brokers: dict[str, Any] = {}  # the engine's connection to each broker its hosts name
        self.unwritable = ""  # a pilot could not make a member's directory: why (the run stops)
        self.unwritable_backs: dict[tuple[str, int], int] = {}  # (node, member) -> such hand-backs

    def load_secret(self) -> None:
        try:
            self.secret = read_secret(self.dir / "secret")
        except FileNotFoundError:
            self.secret = None  # (a run made by a pwe before secrets: its pilots sign nothing)
        except OSError as exc:  # (a FIFO, a device, one too long: refused, never waited on)
            raise RunDamaged(f"{exc.filename or self.dir / 'secret'} cannot be read ({exc.strerror or exc}): the "
                             "pilots' messages cannot be checked; put the run's own secret back (a regular file, "
                             "owner-only), then give this command again") from None

    def close_brokers(self) -> None:
        for broker in self.brokers.values():
            broker.close()

    def transport(self, lane: str, pid_: str) -> Transport:
        """The transport to a pilot of a lane: its host's (``transport``), signed with the
        run's secret; on the pilot's directory confined to the run (its real path: a
        ``pilots/ID`` that is a symbolic link, to another run or anywhere, or resolves out of
        the run is :class:`~pilot.bounded.Outside`, never read nor written)."""
        d = Path(pilot_dir(self.dir, pid_))
        key_in = key_out = None
        if self.secret is not None:
            key_in, key_out = channel_key(self.secret, pid_, True), channel_key(self.secret, pid_, False)
        host = self.lanes[lane].host if lane in self.lanes else None
        if host is not None and host.transport == "redis":
            from pilot.broker import EngineRedis

            return EngineRedis(str(d), self.broker(host), key_in, key_out)
        return EngineSpool(d, key_in, key_out)

    def broker(self, host: Any) -> Any:
        """The engine's one connection to a host's broker."""
        from pilot.broker import Broker, read_password

        broker = self.brokers.get(host.broker)
        if broker is None:
            try:
                password = read_password(host.broker_password_file) if host.broker_password_file else None
            except OSError as exc:
                raise RunStopped(f"host '{host.name}': broker_password_file {host.broker_password_file}: "
                                 f"{exc.strerror or exc}: fix it (an owner-only file with the password)") from None
            broker = self.brokers[host.broker] = Broker(host.broker, password)
        return broker

    def sleep(self, seconds: float) -> None:
        """Wait between rounds of the loop; with pilots on one broker, :data:`BATCH` s and
        then until one of them adds an event (a blocking read, up to ``seconds`` in all):
        an idle engine takes their events in at once, not at the next round, and a busy one
        still takes them in batches (woken by every event, it took a round per member start:
        5,000 x true ran at 0.67 of the spool's rate)."""
        waits: dict[Any, dict[str, str]] = {}
        for p in self.pilots.values():
            on = p.transport.wait_on(p.cursor) if p.alive else None  # (Transport.wait_on: a broker's)
            if on is not None:
                waits.setdefault(on[0], {})[on[1]] = on[2]
        if len(waits) == 1 and seconds > BATCH:
            time.sleep(BATCH)
            broker, streams = next(iter(waits.items()))
            if not broker.wait(streams, seconds - BATCH):
                time.sleep(seconds - BATCH)  # (it did not answer: as without one)
            return
        time.sleep(seconds)

    def admit(self, pilot: PilotHandle, ev: dict[str, Any]) -> str:
        """Why a pilot's message must not be applied ("" when it may): see the module's
        docstring. Moves the pilot's sequence numbers on."""
        k = ev["k"]
        if k == FORGED:
            return "forged"
        if k == MALFORMED or k == DAMAGED:
            return "malformed"
        via = ev.pop("via", "spool")
        q = ev.get("q")
        if type(q) is not int:
            return "malformed" if self.secret is not None else ""  # (unsigned: a pilot of a hand-made run)
        return pilot.admit(via, q)

    def reject(self, pilot: PilotHandle, ev: dict[str, Any], why: str) -> None:
        """Journal (and so count) a refused message; say the first of each kind on stderr."""
        text = str(ev.get("text") or {k: v for k, v in ev.items() if k != "via"})[:80]
        self.ledger.take(records.reject(pilot.id, why, ev.get("k"), ev.get("q"), ev.get("why"), text, time.time()))
        if why != "resent" and pilot.first_refusal(why):
            self.notice(f"pilot {pilot.id}: a {why} message refused (never applied; counted in pwe status --json): "
                        f"{text}")

    def ingest(self, pilot: PilotHandle) -> int:
        """Take in what ``pilot`` sent since last time: each message admitted, journaled and
        applied (or refused), then the pilot's cursor; how many there were. The journal holds
        the batch's starts meanwhile, so that an end in the same batch carries its start
        (:meth:`pwe.runstate.journal.Journal.hold`)."""
        try:
            events = pilot.receive()
        except OSError as exc:  # (its events file is not a regular file of its own, or damaged: pilot/bounded.py)
            raise RunDamaged(f"{exc.filename or pilot.transport.where}: cannot be read ({exc.strerror or exc}); pilot "
                             f"{pilot.id}'s messages must be its own regular file: put it back, then pwe resume "
                             f"{self.dir.name}") from None
        record = self.ledger.take
        for broker in self.brokers.values():
            while broker.notes:
                record(records.note(broker.notes.pop(0), time.time()))
        if not events:
            return 0
        admit, take = self.admit, self.take
        journal = self.ledger.journal
        journal.hold()
        for ev in events:
            why = admit(pilot, ev)
            if why:
                self.reject(pilot, ev, why)
            else:
                take(pilot, ev)
        journal.release()  # (started, not ended in this batch: journaled before the offset)
        # (qs absent: all through the spool, journal.py; a record each round)
        record(records.offset(pilot.id, pilot.cursor, pilot.q, dict(pilot.qs) if pilot.qs != {"spool": pilot.q}
                              else None))
        pilot.acknowledge()  # (sent after the journal is flushed: the loop flushes it before the pilots)
        if self.unwritable:
            # the members' directories cannot be made: the run's cause, not theirs
            # (the pilot's words are the system's: "No space left on device" is no permission to fix)
            full = any(os.strerror(e) in self.unwritable for e in kind.FULL)
            raise RunStopped(f"{self.unwritable}: {kind.remedy(full)}")
        return len(events)

    @staticmethod
    def event_record(pid_: str, ev: dict[str, Any], host: str | None = None) -> dict[str, Any] | None:
        """The journal record of a pilot's ``start``, ``end`` or ``back``; None for a
        message without the fields its kind has (damaged). A start's ``nodes`` are left
        out when they are only ``host``, the pilot's own (its journal record says it)."""
        k = ev["k"]
        get = ev.get
        try:
            if k == BACK:  # handed back unstarted (or stopped by the allocation's end)
                return records.unassign(ev["n"], ev["m"], pid_, ev["a"], get("why"), get("t") or None)
            if k == START:  # (pid 0: its spawner's child, not known here; nodes, for the trace: where it ran)
                nodes = get("nodes")
                return records.start(ev["n"], ev["m"], ev["a"], pid_, get("t"), get("pid"),
                                     nodes if nodes != [host] else None)
            # (reason: oom, walltime, pilot/wire.py's REASON_*, absent: its own exit; cpu, rss: measured by the pilot)
            return records.end(ev["n"], ev["m"], ev["a"], pid_, get("t"), ev["rc"], get("dt"), get("out"), get("why"),
                               get("reason"), get("cpu"), get("rss"))
        except KeyError:
            return None

    def judged(self, rec: dict[str, Any] | None) -> dict[str, Any] | None:
        """An ``end`` record with its check's verdict (children, converged, ...) in it, for a
        member of a checked node (pwe/planning/trees.py): journaled with the end, in one record."""
        if rec is not None and rec["e"] == kind.END:
            try:
                decide(self.plan, self.ledger.state, self.checks, rec)
            except (KeyError, TypeError, AttributeError):
                pass  # (a damaged message: apply refuses it below)
        return rec

    def take(self, pilot: PilotHandle, ev: dict[str, Any]) -> None:
        """Act on one message of a pilot."""
        k = ev["k"]
        if (k == START or k == END or k == BACK) and not self._member_event(pilot, ev, k):
            k = DAMAGED
        if k == START and pilot.first_start():  # (its first member: "pilots in a row" that could run none end here)
            self.setup_news(pilot, ev)
        if k == NODE_LOST:
            self._node_lost(pilot, ev)
        elif k == DRAIN:
            if pilot.state is PilotState.ACTIVE:  # (one given up, or down, is leaving already)
                pilot.become(PilotState.DRAINING)
        elif k == DOWN:
            pilot.said_down(ev.get("why") or "")
        elif k == UP:
            if ev.get("v") != VERSION:
                self._refuse(pilot, ev.get("v"))
            pilot.said_up()
        elif k == DAMAGED:  # (what admit let through: a run without a secret)
            self.ledger.take(records.note(f"pilot {pilot.id}: a damaged message skipped", time.time(),
                                          text=str(ev.get("text", ev))[:80]))
        elif k == NODE_SETUP:
            self.setup_news(pilot, ev)
        if ev["k"] == BACK and str(ev.get("why") or "").startswith((SETUP_FAILED, NO_SCRATCH)):
            # (setup_per_node failed, or no scratch for a member, on every node of the pilot:
            # pwe/engine/setups.py)
            self.setup_news(pilot, ev)

    def _member_event(self, pilot: PilotHandle, ev: dict[str, Any], k: str) -> bool:
        """A member's ``start``, ``end`` or ``back``: journaled and applied (see :meth:`ingest`);
        False when it is damaged (fields missing, a node or member this run does not have)."""
        rec = self.judged(self.event_record(pilot.id, ev, pilot.host))
        if rec is None:
            return False
        if k == BACK and (pilot.id, rec["n"], rec["m"]) in self.on_lost_node:
            self.on_lost_node.discard((pilot.id, rec["n"], rec["m"]))
            rec["lost"] = 1  # (it ran on a node that died: counted against maxLosses)
        try:
            applied = self.ledger.take(rec)
        except (KeyError, ValueError, TypeError, IndexError):
            return False
        if applied is not None and k == END:
            pilot.ended_one(ev["n"], ev["m"])
            self.pilots.failed_in_a_row = 0
            self.after_end(rec, applied)
        elif k == BACK:
            self._back(pilot, ev, applied is not None)
        return True

    def after_end(self, rec: dict[str, Any], applied: Any) -> None:
        """The parts told of an end journaled (a pilot's, or one the engine made itself:
        pwe/engine/sizing.py): the failure budget, holds, lending, the stragglers' medians."""
        if applied == FAILED:
            self.failed(rec["n"])
            self.settled(rec["n"], rec["m"], FAILED)
        elif applied == DONE:
            self.settled(rec["n"], rec["m"], DONE)
            self.ended_well(rec["n"], rec["m"])
            self.took(rec["n"], rec.get("dt"))

    def _back(self, pilot: PilotHandle, ev: dict[str, Any], applied: bool) -> None:
        """A member handed back (``applied``: it was the pilot's): one fewer on the pilot; an
        environment it lost is sent again; one refused as too long is not offered again;
        a directory it could not write may stop the run."""
        why = str(ev.get("why"))
        if applied:
            pilot.one_less(ev["n"], ev["m"])
            if why.startswith(NO_ENV):  # (it lost it: a new handle sends it again)
                pilot.lost_env(why[len(NO_ENV):])
            if (ev.get("why") or "").startswith("needs "):
                pilot.refuse(ev["n"], ev["m"])
        if why.startswith(UNWRITABLE):
            from pilot.spawn import writable

            # the run stops once this batch is journaled, if it still cannot write
            # there (not for what a stopped run's pilot handed back meanwhile)
            where = why[len(UNWRITABLE):].rsplit(": ", 1)[0]
            # a directory that looks writable and still refused (no space, a quota,
            # an I/O error) the same member twice: not a passing thing; stop and say it
            seen = self.unwritable_backs
            seen[(ev["n"], ev["m"])] = seen.get((ev["n"], ev["m"]), 0) + 1
            if not writable(where) or seen[(ev["n"], ev["m"])] >= 2:
                self.unwritable = why

    def _node_lost(self, pilot: PilotHandle, ev: dict[str, Any]) -> None:
        """A node of a pilot's allocation died (the pilot hands its members back, each with
        a ``back``): journaled once per node, so that ``pwe status`` names it."""
        node = ev.get("node")
        if isinstance(ev.get("n"), str) and isinstance(ev.get("m"), int):  # (the member it ran: its back comes next)
            self.on_lost_node.add((pilot.id, ev["n"], ev["m"]))
        if not isinstance(node, str) or node in (self.ledger.state.pilots.get(pilot.id) or {}).get("lost", {}):
            return
        self.ledger.take(records.node_lost(pilot.id, node, str(ev.get("why") or "")[:300], ev.get("t") or time.time()))
        self.notice(f"pilot {pilot.id}: node {node} lost; its members run again on the other nodes")

    def _refuse(self, pilot: PilotHandle, version: Any) -> None:
        """A pilot that speaks another version of the messages: tell it to leave, hand its
        members back, and stop the run with one line."""
        pilot.send({"k": CANCEL})
        pilot.flush()
        self.gone(pilot, f"speaks wire version {version}", False)
        raise RunStopped(f"pilot {pilot.id} on {pilot.host} speaks version {version} of the engine-pilot messages, "
                         f"this engine speaks {VERSION}: run the same pwe on both sides (its pilot package)")
