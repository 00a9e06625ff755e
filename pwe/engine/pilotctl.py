"""The engine's side of ``pwe pilot add / drain``: more pilots for a running run, and
letting one leave (the client's side: :mod:`pwe.engine.pilotask`; per-node setup's: :mod:`pwe.engine.setups`); and a
resumed engine's helper lanes and draining pilots, as the journal recorded them.

The engine runs in its own process; the CLI asks it, never changes its state behind
its back. A request is one small JSON file, ``control/pilot-<id>.json``, written whole
(a rename) and signed with HMAC-SHA256 under the run's secret, as ``pwe notify``'s edge
events are (:func:`pwe.runstate.notify.sign`). The engine takes requests in with the edge events
(every half second), journals what it does (the ``pilot`` record of an added pilot
carries the request's id, ``added``, and what a resumed engine needs: its lane and the
nodes it serves; ``pilot_drain`` marks a pilot draining), removes the request, and
answers in ``control/pilot-<id>.answer`` (JSON), which the CLI waits for and removes.
A request whose id the journal has already applied is answered again, never acted on
twice.

Added pilots:

- on a host the run uses (default: the run's first host, ``--host H`` for another of
  its hosts): one more pilot of that host, fed like the others; on a batch host one
  more pilot job (``--nodes N`` sizes it, at most the host's ``max_nodes``), beyond
  ``max_pilots``, which bounds what the engine submits on its own: an added pilot is the
  user's decision (the batch system's own limits still apply: a refusal is answered in
  one line, exit 1, and the run goes on);
- on a host of the registry the run does not use (a workstation over ssh helping a
  cluster run): a *helper*. It serves the nodes whose members it can hold (cores,
  GPUs, memory of one of its nodes) and takes their ready members after the nodes' own
  pilots have taken what their windows hold. The engine starts no helper by itself.

A drained pilot gets no new members; it hands back what it holds but has not started
(``back``: no attempt spent), finishes what runs and leaves. What it handed back goes
to the other pilots, or to a new pilot when none is left.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pilot.wire import LEAVE

from ..base.errors import JournalError, PweError
from ..base.regular import read_json, write_json_atomic
from ..runstate import records
from .handles import PilotState

if TYPE_CHECKING:
    from .handles import Lane, PilotHandle, Pilots
    from .ledger import Ledger
    from .setups import Setups


class PilotControl:
    """The engine's side of ``pwe pilot`` requests: given the ledger, the lanes, the pilots
    and the callable that starts a pilot (:meth:`pwe.engine.pilots.PilotWork.start`)."""

    def __init__(self, run_dir: Path, info: dict[str, Any], ledger: Ledger, lanes: dict[str, Lane], pilots: Pilots,
                 start: Callable[..., PilotHandle | None]):
        self.dir = run_dir
        self.info = info
        self.ledger = ledger
        self.lanes = lanes
        self.pilots = pilots
        self.start = start

    def take_requests(self) -> None:
        """Act on the ``pwe pilot`` requests in ``control/``, oldest first: each journaled
        before it is acted on and answered; a forged one is noted and refused."""
        d = self.dir / "control"
        try:
            names = sorted(n for n in os.listdir(d) if n.startswith("pilot-") and n.endswith(".json"))
        except FileNotFoundError:
            return
        for name in names:
            path = d / name
            rid, answer = self._answer(name, path)
            self.ledger.journal.flush()  # what was done is on disk before it is answered
            try:
                write_json_atomic(d / f"pilot-{rid}.answer", answer)
            except OSError:
                pass
            path.unlink(missing_ok=True)

    def _answer(self, name: str, path: Path) -> tuple[str, dict[str, Any]]:
        """The request in ``path``, acted on: its id and the answer."""
        from ..runstate.notify import authentic

        try:
            req = read_json(path, limit=1 << 20)
            ok = isinstance(req, dict) and authentic(self.dir, req)
        except (OSError, ValueError):
            req, ok = {}, False
        rid = str(req.get("id") or name[len("pilot-"):-len(".json")])
        if not ok:
            self.ledger.take(records.note(f"a pwe pilot request with a bad signature ignored ({name})", time.time()))
            return rid, {"ok": False, "exit": 2, "why": "the request's signature is not the run's"}
        try:
            return rid, self._request(rid, req)
        except (PweError, OSError, ValueError) as exc:  # (a batch system that refused the pilot, a
            # process that could not start: said to the asker; the run goes on)
            if isinstance(exc, JournalError):
                raise
            self.ledger.take(records.note(f"pwe pilot add refused: {exc}", time.time()))
            return rid, {"ok": False, "exit": 1, "why": str(exc)}

    def _request(self, rid: str, req: dict[str, Any]) -> dict[str, Any]:
        st = self.ledger.state
        if req.get("req") == "set":  # (pwe set: kept for the next engine when none runs)
            return self._set(rid, req)
        for pid_, p in st.pilots.items():  # applied already (an engine killed before it answered)
            if p.get("added") == rid or p.get("drain_req") == rid:
                return {"ok": True, "pilot": pid_, "host": p.get("lane"), "job": p.get("job"), "again": True}
        if st.cancelled or st.unfinished() == 0:
            return {"ok": False, "exit": 2, "why": "the run is over (or cancelled): no pilot is added or drained"}
        if req.get("req") == "drain":
            return self._drain(rid, str(req.get("pilot")))
        if req.get("req") == "add":
            return self._add(rid, req)
        return {"ok": False, "exit": 2, "why": f"unknown request {req.get('req')!r}"}

    def _set(self, rid: str, req: dict[str, Any]) -> dict[str, Any]:
        """pwe set: journaled (its values checked again: the request is the run's own, signed,
        but this is the one writer), then said: how many members it names that have not
        started (theirs from now on) and that run now (they keep what they asked)."""
        from ..base.states import ASSIGNED, FINAL, RUNNING
        from ..planning.setvalues import checked

        st = self.ledger.state
        if any(s.get("id") == rid for s in st.sets):
            return {"ok": True, "again": True}
        only, values = req.get("only"), checked(self.ledger.state.plan, req.get("values"))
        if only is not None and not isinstance(only, dict):
            raise ValueError("a set request's only is not a mapping")
        self.ledger.take(records.set_values(only, values, rid, req.get("by"), time.time()))
        later = running = 0
        for nid, ns in st.nodes.items():
            spans = [(0, ns.size)] if only is None else [(lo, min(hi, ns.size)) for lo, hi in only.get(nid, ())]
            for lo, hi in spans:
                for i in range(lo, hi):
                    c = ns.state[i]
                    running += c in (ASSIGNED, RUNNING)
                    later += c not in FINAL and c not in (ASSIGNED, RUNNING)
        return {"ok": True, "later": later, "running": running}

    def _add(self, rid: str, req: dict[str, Any]) -> dict[str, Any]:
        from hostinfo.records import host

        from .handles import Lane

        name = str(req.get("host"))
        lane = self.lanes.get(name)
        extra: dict[str, Any] = {"added": rid}
        if req.get("serves"):  # a helper: a host of the registry that no node of the run names
            if lane is None:
                lane = Lane(host(req["host_def"]), int(req.get("cores") or 1), req.get("pilot_args") or [],
                            float(self.info.get("status_every", 5.0)))
                self.lanes[name] = lane
            extra.update(serves=list(req["serves"]), lane_def={k: req.get(k) for k in ("host_def", "cores",
                                                                                       "pilot_args")})
        elif lane is None:
            return {"ok": False, "exit": 2, "why": f"host '{name}' is not a host of this run"}
        pilot = self.start(lane, nodes=req.get("nodes"), extra=extra)
        if pilot is None:
            if lane.refusals:  # (refused: backing off, pwe/engine/pilots.py refused)
                return {"ok": False, "exit": 1, "why": f"host '{name}': {lane.refused_why}"}
            return {"ok": False, "exit": 1, "why": f"the batch system of host '{name}' does not answer "
                    f"({lane.unreachable_why}); the engine submits its next pilot there when it answers"}
        pilot.serve(extra.get("serves"))
        return {"ok": True, "pilot": pilot.id, "host": name, "job": pilot.job, "slots": pilot.slots}

    def _drain(self, rid: str, pid_: str) -> dict[str, Any]:
        pilot = self.pilots.get(pid_)
        if pilot is None:
            known = ", ".join(self.pilots) or "none"
            return {"ok": False, "exit": 2, "why": f"this run has no pilot '{pid_}' (its pilots: {known})"}
        if not pilot.alive:
            return {"ok": False, "exit": 2, "why": f"pilot {pid_} is gone already"}
        running = len(self.ledger.state.inflight(pid_))
        if pilot.state is PilotState.ACTIVE:  # (draining, given up or down: it is leaving already)
            self.ledger.take(records.pilot_drain(pid_, rid, time.time()))
            pilot.become(PilotState.DRAINING)
            pilot.send({"k": LEAVE})
        return {"ok": True, "pilot": pid_, "host": pilot.lane, "job": pilot.job, "holds": running}

    def view(self) -> dict[str, Any]:
        """What ``pwe pilot list`` and ``pwe status`` read from state.json: whether each
        live pilot came up (and when this engine heard it), the nodes where its
        setup_per_node failed, its members queued or running, its stage (pwe explain)."""
        return {p.id: {"up": p.came_up, "setup_failed": p.setup_failed, "up_at": p.up_at, "outstanding": p.outstanding,
                       "state": p.state.value} for p in self.pilots.values() if p.alive}


# -- a resumed engine ----------------------------------------------------------------------

def restore_lane(lanes: dict[str, Lane], info: dict[str, Any], p: dict[str, Any]) -> None:
    """Before a helper pilot is reattached: its lane, as the journal recorded it."""
    from hostinfo.records import host

    from .handles import Lane

    lane_def, name = p.get("lane_def"), p.get("lane")
    if lane_def and name and name not in lanes:
        lanes[name] = Lane(host(lane_def["host_def"]), int(lane_def.get("cores") or 1),
                           lane_def.get("pilot_args") or [], float(info.get("status_every", 5.0)))


def restore_pilot(pilot: PilotHandle, p: dict[str, Any], setups: Setups) -> None:
    """A reattached pilot's helper and draining marks; its setup sets again; a drain
    the last engine may not have sent, sent again (the pilot takes it once)."""
    pilot.serve(p.get("serves"))
    setups.send_to(pilot)
    if p.get("draining"):
        pilot.become(PilotState.DRAINING)
        pilot.send({"k": LEAVE})
