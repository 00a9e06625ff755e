"""More pilots for a running run, and letting one leave (``pwe pilot add / drain / list``),
and the engine's side of per-node setup (``setup_per_node``).

The engine runs in its own process; the CLI asks it, never changes its state behind
its back. A request is one small JSON file, ``control/pilot-<id>.json``, written whole
(a rename) and signed with HMAC-SHA256 under the run's secret, as ``pwe notify``'s edge
events are (:func:`pwe.runstate.notify.sign`). The engine takes requests in with the edge events
(every half second), journals what it does (the ``pilot`` record of an added pilot
carries the request's id, ``added``, and what a resumed engine needs: its lane and the
nodes it serves; ``pilot_drain`` marks a pilot draining), removes the request, and
answers in ``control/pilot-<id>.answer`` (JSON), which the CLI waits for and removes.
A request whose id the journal has already applied is answered again, never acted on
twice. No engine running the run: the CLI says so in one line (exit 2) and writes
nothing.

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

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pilot.nodesetup import SETUP_FAILED
from pilot.wire import BACK, LEAVE, NO_SCRATCH, NODE_SETUP, SETUP, START, STOP

from ..base.errors import InputError, JournalError, PweError, RunStopped
from ..base.regular import read_json, write_json_atomic
from ..runstate.rundir import EngineLock
from ..runstate import journal as kind
from .handles import PilotState

if TYPE_CHECKING:
    from .handles import Lane, PilotHandle, Pilots
    from .ledger import Ledger

#: How long ``pwe pilot add/drain`` waits for the engine's answer (a submission included).
ANSWER_WAIT = 90.0
#: Pilots in a row whose every node failed its setup_per_node before the run stops.
SETUP_FAILURES = 3


# -- the CLI's side -------------------------------------------------------------------------

def ask(run_dir: Path, body: dict[str, Any], wait: float = ANSWER_WAIT) -> dict[str, Any]:
    """Hand a request to the run's engine and return its answer. InputError (exit 2)
    when no engine runs the run (nothing is written then)."""
    from ..runstate.notify import sign

    lock = EngineLock(run_dir)
    if not lock.holder():
        raise InputError(f"no engine is running {run_dir.name}: pilots are added to or drained from a running run "
                         f"(start it again with `pwe resume {run_dir.name} --detach`)")
    rid = os.urandom(8).hex()  # (as secrets.token_hex: secrets imports random, 1 ms of the engine's start)
    d = run_dir / "control"
    d.mkdir(exist_ok=True, mode=0o700)
    msg = sign(run_dir, {**body, "id": rid, "t": round(time.time(), 3)})
    tmp = d / f".pilot-{rid}.tmp"
    tmp.write_text(json.dumps(msg))
    os.replace(tmp, d / f"pilot-{rid}.json")
    answer = d / f"pilot-{rid}.answer"
    deadline = time.time() + wait
    while time.time() < deadline:
        try:
            got = read_json(answer)
        except (OSError, ValueError):
            if not lock.holder():
                (d / f"pilot-{rid}.json").unlink(missing_ok=True)
                raise PweError(f"the engine of {run_dir.name} left before it answered; nothing was done") from None
            time.sleep(0.1)
            continue
        answer.unlink(missing_ok=True)
        return got
    raise PweError(f"the engine of {run_dir.name} has not answered within {wait:g} s; it takes the request in "
                   f"when it can (control/pilot-{rid}.json): see `pwe pilot list {run_dir.name}`")


def add_request(run_dir: Path, host_name: str | None, nodes: int | None,
                hosts_file: str | None = None) -> dict[str, Any]:
    """The request of ``pwe pilot add``, checked here (one line, exit 2, on bad input):
    the host is the run's or one of the registry's, ``--nodes`` fits it, and a helper
    host can hold the members of some node of the run."""
    import hostinfo
    from protocols.registry import info as protocol_info

    from ..planning.placement import pilot_args_for
    from ..runstate.runs import read

    info, plan = read(run_dir)
    lanes = info["lanes"]
    name = host_name or next(iter(lanes))
    if name in lanes:
        from hostinfo.records import host as host_of

        host = host_of(lanes[name]["host_def"])
        body: dict[str, Any] = {"req": "add", "host": name}
    else:
        registry = hostinfo.load(Path(info["workflow"]), hosts_file or info.get("hosts_file"),
                                 cores=info.get("cores_option"))
        try:
            host = registry.get(name)
        except InputError as exc:
            raise InputError(f"--host {name}: {exc.message}") from None
        serves = [nid for nid, pn in plan.nodes.items() if _holds(host, pn.scheduling)]
        if not serves:
            raise InputError(f"--host {name}: host '{name}' ({host.cores_per_node or 1} cores, {host.gpus_per_node} "
                             "GPUs a node) can hold the members of no node of this run")
        body = {"req": "add", "host": name, "serves": serves, "host_def": host.model_dump(),
                "cores": host.cores_per_node or os.cpu_count() or 1, "pilot_args": pilot_args_for(host)}
    if nodes is not None:
        if not protocol_info(host.protocol).allocates:
            raise InputError(f"--nodes {nodes}: host '{name}' ({host.protocol}) allocates no nodes (its pilot runs "
                             "on its own machine); leave --nodes out")
        if host.max_nodes and nodes > host.max_nodes:
            raise InputError(f"--nodes {nodes}: host '{name}' gives a pilot at most {host.max_nodes} nodes "
                             "(its max_nodes)")
        body["nodes"] = nodes
    return body


def _holds(host: Any, sched: Any) -> bool:
    """Whether one node of ``host`` can hold a member with this scheduling profile."""
    per_node = host.cores_per_node or os.cpu_count() or 1
    return (sched.cores_per_member() <= per_node and (sched.gpusPerMember or 0) <= host.gpus_per_node
            and not (sched.memoryPerMember and host.memory_per_node and sched.memoryPerMember > host.memory_per_node))


def listing(run_dir: Path) -> list[dict[str, Any]]:
    """``pwe pilot list``: every pilot of the run with its host, job, state (queued,
    running, draining, gone), slots, and members running and done (from the run's state:
    its checkpoint and the journal after it; queued or running from the engine's last
    snapshot, when it is running)."""
    from ..observe.results import load_state

    _, st = load_state(run_dir)
    running: dict[str, int] = {}
    for ns in st.nodes.values():
        for p in ns.pilot.values():
            running[p] = running.get(p, 0) + 1
    try:
        view = read_json(run_dir / "state.json").get("pilot_view") or {}
    except OSError:
        view = {}
    view = view if isinstance(view, dict) else {}
    live_engine = EngineLock(run_dir).holder() is not None
    out = []
    for pid_, p in sorted(st.pilots.items(), key=lambda kv: int(kv[0].lstrip("p") or 0)):
        if not p.get("alive") or st.finished_ok is not None:
            state = "gone"  # (given up, or told to stop when the run ended)
        elif not live_engine:
            state = "unknown"  # (no engine watches it now: pwe resume)
        elif p.get("draining"):
            state = "draining"
        elif p.get("job") and not (view.get(pid_) or {}).get("up"):
            state = "queued"
        else:
            state = "running"
        out.append({"pilot": pid_, "host": p.get("lane") or p.get("host"), "job": p.get("job"), "state": state,
                    "slots": p.get("slots"), "running": running.get(pid_, 0), "done": p.get("done", 0),
                    "added": bool(p.get("added")), "serves": p.get("serves"), "why": p.get("why")})
    return out


# -- the engine's side ----------------------------------------------------------------------

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
            self.ledger.record({"e": kind.NOTE, "what": f"a pwe pilot request with a bad signature ignored ({name})",
                                "t": time.time()})
            return rid, {"ok": False, "exit": 2, "why": "the request's signature is not the run's"}
        try:
            return rid, self._request(rid, req)
        except (PweError, OSError, ValueError) as exc:  # (a batch system that refused the pilot, a
            # process that could not start: said to the asker; the run goes on)
            if isinstance(exc, JournalError):
                raise
            self.ledger.record({"e": kind.NOTE, "what": f"pwe pilot add refused: {exc}", "t": time.time()})
            return rid, {"ok": False, "exit": 1, "why": str(exc)}

    def _request(self, rid: str, req: dict[str, Any]) -> dict[str, Any]:
        st = self.ledger.state
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
        pilot.serves = extra.get("serves")
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
            self.ledger.record({"e": kind.PILOT_DRAIN, "p": pid_, "req": rid, "t": time.time()})
            pilot.become(PilotState.DRAINING)
            pilot.send({"k": LEAVE})
        return {"ok": True, "pilot": pid_, "host": pilot.lane, "job": pilot.job, "holds": running}

    def view(self) -> dict[str, Any]:
        """What ``pwe pilot list`` and ``pwe status`` read from state.json: whether each
        live pilot came up, and the nodes where its setup_per_node failed."""
        return {p.id: {"up": p.came_up, "setup_failed": p.setup_failed} for p in self.pilots.values() if p.alive}


class Setups:
    """The engine's side of setup_per_node: the run's sets, sent to each pilot before any
    task that names one; a node whose setup failed noted; the run stopped (state intact)
    once the sets failed on every node of SETUP_FAILURES pilots in a row."""

    def __init__(self, sets: dict[str, tuple[list[str], list[str]]], ledger: Ledger):
        self.sets = sets  # {id: (lines, the nodes that need them)}: pwe/engine/tasks.py setup_sets
        self.ledger = ledger
        self.failed_pilots: set[str] = set()  # pilots in a row whose every node failed its setup
        self.stop = ""  # why the run stops (said after the pilots' messages were journaled: check)

    def check(self) -> None:
        """Stop the run once setup_per_node failed on every node of SETUP_FAILURES pilots in a row."""
        if self.stop:
            raise RunStopped(self.stop)

    def send_to(self, pilot: PilotHandle | None) -> PilotHandle | None:
        """Send a new (or reattached) pilot the run's sets (a pilot takes a set it has already once)."""
        if pilot is None:
            return None
        for sid, (lines, _) in self.sets.items():
            pilot.send({"k": SETUP, "id": sid, "lines": lines})
        return pilot

    def news(self, pilot: PilotHandle, ev: dict[str, Any]) -> None:
        """A pilot's ``node_setup``, its first ``start``, or a ``back`` because its setup
        failed on every node or no node had scratch for a member (pilot/tmpdirs.py;
        :meth:`pwe.engine.intake.Intake.take` calls this for those alone): a node whose setup
        failed is journaled (``pwe events``, ``pwe status``); a pilot whose every node failed
        takes no more (a new one runs its members); SETUP_FAILURES such pilots in a row stop
        the run."""
        if ev.get("k") == START:  # (a pilot's first member: the pilots that could start none are no longer in a row)
            if pilot.id not in self.failed_pilots:
                self.failed_pilots = set()
            return
        if ev.get("k") == NODE_SETUP:
            if ev.get("rc") == 0:
                self.failed_pilots = set()
                return
            pilot.setup_failed.append(str(ev.get("node")))
            self.ledger.record({"e": kind.NOTE, "what": f"pilot {pilot.id}: setup_per_node failed on node "
                                f"{ev.get('node')} (exit {ev.get('rc')}): no member that needs it runs there; its "
                                f"output: {ev.get('log')}", "p": pilot.id, "node": ev.get("node"), "t": time.time()})
        elif ev.get("k") == BACK and str(ev.get("why") or "").startswith((SETUP_FAILED, NO_SCRATCH)):
            why = str(ev.get("why"))
            if why.startswith(SETUP_FAILED):
                pilot.refused.add((ev.get("n"), ev.get("m")))
            if not pilot.full:
                pilot.full = True  # (it finishes what it runs and leaves; the next pilot tries its nodes)
                pilot.send({"k": STOP})
                self.failed_pilots.add(pilot.id)
                if why.startswith(NO_SCRATCH):
                    self.ledger.record({"e": kind.NOTE, "what": f"pilot {pilot.id}: {why}: its members go to another "
                                        "pilot, no attempt spent", "p": pilot.id, "t": time.time()})
                if len(self.failed_pilots) < SETUP_FAILURES:
                    return
                if why.startswith(SETUP_FAILED):
                    self.stop = (f"setup_per_node failed on every node of {len(self.failed_pilots)} pilots in a row "
                                 f"(see {pilot.dir}/setup-*.log): fix the lines, then resume")
                else:
                    self.stop = (f"{len(self.failed_pilots)} pilots in a row found no scratch for a member on any "
                                 f"of their nodes; the last: {why[len(NO_SCRATCH):].strip(' ()')}: free the nodes' "
                                 "scratch, or give the host a 'scratch:' that takes files")


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
    pilot.serves = p.get("serves")
    setups.send_to(pilot)
    if p.get("draining"):
        pilot.become(PilotState.DRAINING)
        pilot.send({"k": LEAVE})
