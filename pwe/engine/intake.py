"""The engine taking in what its pilots say: the transport to each pilot (spool or broker,
signed with keys made from the run's secret), the check of every message before it is
applied, and the journal records made of them. A mixin of :class:`pwe.engine.pilots.PilotWork`,
apart by job (as :mod:`pwe.engine.recovery` is).

Every message a pilot sends is checked before it is applied (:meth:`Intake._admit`):
its signature (the transport gives a bad one as ``forged``), its form (``malformed``)
and its sequence number ``q``: each ``q`` is applied once per pilot, so a message read
twice changes nothing. One that the same transport already delivered is ``replayed``;
one that came the other way first (a pilot that left its broker for the spool sends
again what the engine had not acknowledged) is ``resent``. Each refusal is journaled
(``reject``: counted in ``pwe status --json`` as ``rejected``), never applied.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pilot.transport import EngineSpool, Transport
from pilot.wire import (ACK, BACK, CANCEL, DAMAGED, DOWN, DRAIN, END, FORGED, MALFORMED, NO_ENV, NODE_LOST,
                        START, UNWRITABLE, UP, VERSION, channel_key)

from ..base.errors import RunDamaged, RunStopped
from ..planning.trees import decide

#: seconds an engine with pilots on a broker sleeps before it waits on the broker for events
BATCH = 0.01

if TYPE_CHECKING:
    from .handles import PilotHandle


class Intake:
    """Transports, admission and journal records of pilot messages; uses the engine's
    state, journal (``_record``), lanes, pilots and ``_pilot_gone``."""

    def _transport(self, lane: str, pid_: str) -> Transport:
        """The transport to a pilot of a lane: its host's (``transport``), signed with the
        run's secret."""
        d = self.dir / "pilots" / pid_
        key_in = key_out = None
        if self._secret is not None:
            key_in, key_out = channel_key(self._secret, pid_, True), channel_key(self._secret, pid_, False)
        host = self.lanes[lane].host if lane in self.lanes else None
        if host is not None and host.transport == "redis":
            from pilot.broker import EngineRedis

            return EngineRedis(str(d), self._broker(host), key_in, key_out)
        return EngineSpool(d, key_in, key_out)

    def _broker(self, host: Any) -> Any:
        """The engine's one connection to a host's broker."""
        from pilot.broker import Broker, read_password

        broker = self._brokers.get(host.broker)
        if broker is None:
            try:
                password = read_password(host.broker_password_file) if host.broker_password_file else None
            except OSError as exc:
                raise RunStopped(f"host '{host.name}': broker_password_file {host.broker_password_file}: "
                                 f"{exc.strerror or exc}: fix it (an owner-only file with the password)") from None
            broker = self._brokers[host.broker] = Broker(host.broker, password)
        return broker

    def _sleep(self, seconds: float) -> None:
        """Wait between rounds of the loop; with pilots on one broker, :data:`BATCH` s and
        then until one of them adds an event (a blocking read, up to ``seconds`` in all):
        an idle engine takes their events in at once, not at the next round, and a busy one
        still takes them in batches (woken by every event, it took a round per member start:
        5,000 x true ran at 0.67 of the spool's rate)."""
        waits: dict[Any, dict[str, str]] = {}
        for p in self.pilots.values():
            broker = getattr(p.transport, "broker", None)
            if p.alive and broker is not None and isinstance(p.cursor, list):
                waits.setdefault(broker, {})[p.transport.stream] = p.cursor[1]
        if len(waits) == 1 and seconds > BATCH:
            time.sleep(BATCH)
            broker, streams = next(iter(waits.items()))
            if not broker.wait(streams, seconds - BATCH):
                time.sleep(seconds - BATCH)  # (it did not answer: as without one)
            return
        time.sleep(seconds)

    def _admit(self, pilot: PilotHandle, ev: dict[str, Any]) -> str:
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
            return "malformed" if self._secret is not None else ""  # (unsigned: a pilot of a hand-made run)
        if q <= pilot.qs.get(via, 0):
            return "replayed"
        pilot.qs[via] = q
        if q <= pilot.q:
            return "resent"
        pilot.q = q
        return ""

    def _reject(self, pilot: PilotHandle, ev: dict[str, Any], why: str) -> None:
        """Journal (and so count) a refused message; say the first of each kind on stderr."""
        text = str(ev.get("text") or {k: v for k, v in ev.items() if k != "via"})[:80]
        self._record({"e": "reject", "p": pilot.id, "why": why, "k": ev.get("k"), "q": ev.get("q"),
                      "detail": ev.get("why"), "text": text, "t": time.time()})
        if why != "resent" and why not in pilot.refusals:
            pilot.refusals.add(why)
            self.notice(f"pilot {pilot.id}: a {why} message refused (never applied; counted in pwe status --json): "
                        f"{text}")

    def _ingest(self, pilot: PilotHandle) -> int:
        try:
            events = pilot.receive()
        except OSError as exc:  # (its events file is not a regular file of its own, or damaged: pilot/bounded.py)
            raise RunDamaged(f"{exc.filename or pilot.transport.where}: cannot be read ({exc.strerror or exc}); pilot "
                             f"{pilot.id}'s messages must be its own regular file: put it back, then pwe resume "
                             f"{self.dir.name}") from None
        for broker in self._brokers.values():
            while broker.notes:
                self._record({"e": "note", "what": broker.notes.pop(0), "t": time.time()})
        if not events:
            return 0
        held: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
        for ev in events:
            why = self._admit(pilot, ev)
            if why:
                self._reject(pilot, ev, why)
            else:
                self._take(pilot, ev, held)
        for rec in held.values():  # (started, not ended in this batch: journaled before the offset)
            self.journal.append(rec)
        self._record({"e": "offset", "p": pilot.id, "off": pilot.cursor, "q": pilot.q, "qs": dict(pilot.qs)})
        if getattr(pilot.transport, "acks", False) and pilot.q > pilot.acked:
            # sent after the journal is flushed (the loop flushes it before the pilots)
            pilot.send({"k": ACK, "q": pilot.q})
            pilot.acked = pilot.q
        if self._unwritable:
            # the members' directories cannot be made: the run's cause, not theirs
            raise RunStopped(f"{self._unwritable}: make it writable")
        return len(events)

    @staticmethod
    def _event_record(pid_: str, ev: dict[str, Any], host: str | None = None) -> dict[str, Any] | None:
        """The journal record of a pilot's ``start``, ``end`` or ``back``; None for a
        message without the fields its kind has (damaged). A start's ``nodes`` are left
        out when they are only ``host``, the pilot's own (its journal record says it)."""
        k = ev["k"]
        try:
            if k == BACK:  # handed back unstarted (or stopped by the allocation's end)
                return {"e": "unassign", "n": ev["n"], "m": ev["m"], "a": ev["a"], "p": pid_, "why": ev.get("why")}
            rec = {"e": k, "n": ev["n"], "m": ev["m"], "a": ev["a"], "p": pid_, "t": ev.get("t")}
            if k == START:
                if ev.get("pid"):  # (0: its spawner's child, pid not known here)
                    rec["pid"] = ev["pid"]
                if ev.get("nodes") and ev["nodes"] != [host]:
                    rec["nodes"] = ev["nodes"]  # (for the trace: where it ran)
            else:
                rec["rc"] = ev["rc"]
                if ev.get("out"):
                    rec["out"] = ev["out"]
                if ev.get("why"):
                    rec["why"] = ev["why"]
                rec["dt"] = ev.get("dt")
                for key in ("cpu", "rss"):  # measured by the pilot (the trace's)
                    if key in ev:
                        rec[key] = ev[key]
        except KeyError:
            return None
        return rec

    def _judged(self, rec: dict[str, Any] | None) -> dict[str, Any] | None:
        """An ``end`` record with its check's verdict (children, converged, ...) in it, for a
        member of a checked node (pwe/planning/trees.py): journaled with the end, in one record."""
        if rec is not None and rec["e"] == END:
            try:
                decide(self.plan, self.state, self.checks, rec)
            except (KeyError, TypeError, AttributeError):
                pass  # (a damaged message: apply refuses it below)
        return rec

    def _take(self, pilot: PilotHandle, ev: dict[str, Any], held: dict[Any, dict[str, Any]] | None = None) -> None:
        """Act on one message of a pilot. ``held``: the batch's start records not yet
        journaled, by (node, member, attempt): a start is held there and its end, when it
        comes in the same batch, is journaled as one record carrying it (``ran``: the
        journal's compacted form, pwe/runstate/journal.py); the caller journals what is left held."""
        k = ev["k"]
        if k == START or k == END or k == BACK:
            rec = self._judged(self._event_record(pilot.id, ev, pilot.host))
            if rec is None:
                k = DAMAGED
            else:
                try:
                    applied = self.state.apply(rec)
                except (KeyError, ValueError, TypeError, IndexError):
                    applied, k = None, DAMAGED  # (a node or member this run does not have)
                if k != DAMAGED:
                    start = held.pop((rec["n"], rec["m"], rec["a"]), None) if held else None
                    if k == START and applied is not None and held is not None:
                        held[(rec["n"], rec["m"], rec["a"])] = rec
                    elif k == END and start is not None:
                        rec["ran"] = 1  # (its start: at t - dt, pwe/runstate/journal.py)
                        if "nodes" in start:
                            rec["nodes"] = start["nodes"]
                        self.journal.append(rec)
                    else:
                        if start is not None:
                            self.journal.append(start)  # (handed back after it started: in that order)
                        self.journal.append(rec)
                if applied is not None and k == END:
                    pilot.one_less(ev["n"], ev["m"])
                    pilot.finished_any = True
                    self._failed_pilots = 0
                elif applied is not None and k == BACK:
                    pilot.one_less(ev["n"], ev["m"])
                    if str(ev.get("why")).startswith(NO_ENV):  # (it lost it: a new handle sends it again)
                        pilot.envs_sent.discard(str(ev["why"])[len(NO_ENV):])
                    if (ev.get("why") or "").startswith("needs "):
                        pilot.refused.add((ev["n"], ev["m"]))
                if k == BACK and str(ev.get("why")).startswith(UNWRITABLE):
                    from pilot.spawn import writable

                    # the run stops once this batch is journaled, if it still cannot write
                    # there (not for what a stopped run's pilot handed back meanwhile)
                    where = str(ev["why"])[len(UNWRITABLE):].rsplit(": ", 1)[0]
                    # a directory that looks writable and still refused (no space, a quota,
                    # an I/O error) the same member twice: not a passing thing; stop and say it
                    seen = self._unwritable_backs
                    seen[(ev["n"], ev["m"])] = seen.get((ev["n"], ev["m"]), 0) + 1
                    if not writable(where) or seen[(ev["n"], ev["m"])] >= 2:
                        self._unwritable = str(ev["why"])
        if k == NODE_LOST:
            self._node_lost(pilot, ev)
        elif k == DRAIN:
            pilot.draining = True
        elif k == DOWN:
            pilot.down = True
            pilot.down_why = ev.get("why") or ""
        elif k == UP:
            if ev.get("v") != VERSION:
                self._refuse(pilot, ev.get("v"))
            pilot.came_up = True
        elif k == DAMAGED:  # (what _admit let through: a run without a secret)
            self._record({"e": "note", "what": f"pilot {pilot.id}: a damaged message skipped", "text":
                          str(ev.get("text", ev))[:80], "t": time.time()})
        self._pilot_news(pilot, ev)  # (setup_per_node's outcomes: pwe/engine/pilotctl.py)

    def _node_lost(self, pilot: PilotHandle, ev: dict[str, Any]) -> None:
        """A node of a pilot's allocation died (the pilot hands its members back, each with
        a ``back``): journaled once per node, so that ``pwe status`` names it."""
        node = ev.get("node")
        if not isinstance(node, str) or node in (self.state.pilots.get(pilot.id) or {}).get("lost", {}):
            return
        self._record({"e": "node_lost", "p": pilot.id, "node": node, "why": str(ev.get("why") or "")[:300],
                      "t": ev.get("t") or time.time()})
        self.notice(f"pilot {pilot.id}: node {node} lost; its members run again on the other nodes")

    def _refuse(self, pilot: PilotHandle, version: Any) -> None:
        """A pilot that speaks another version of the messages: tell it to leave, hand its
        members back, and stop the run with one line."""
        pilot.send({"k": CANCEL})
        pilot.flush()
        self._pilot_gone(pilot, f"speaks wire version {version}", broke=False)
        raise RunStopped(f"pilot {pilot.id} on {pilot.host} speaks version {version} of the engine-pilot messages, "
                         f"this engine speaks {VERSION}: run the same pwe on both sides (its pilot package)")
