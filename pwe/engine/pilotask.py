"""The ``pwe pilot`` client (``pwe pilot add / drain / list``): a request to a running
run's engine, and the run's pilots as its state says.

The engine runs in its own process; the CLI asks it, never changes its state behind
its back. A request is one small JSON file, ``control/pilot-<id>.json``, written whole
(a rename) and signed with HMAC-SHA256 under the run's secret, as ``pwe notify``'s edge
events are (:func:`pwe.runstate.notify.sign`); the engine's side is
:class:`pwe.engine.pilotctl.PilotControl`, which answers in ``control/pilot-<id>.answer``
(JSON), which :func:`ask` waits for and removes. No engine running the run: the CLI says
so in one line (exit 2) and writes nothing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..base.errors import InputError, PweError
from ..base.regular import read_json
from ..runstate.locks import EngineLock

#: How long ``pwe pilot add/drain`` waits for the engine's answer (a submission included).
ANSWER_WAIT = 90.0


def ask(run_dir: Path, body: dict[str, Any], wait: float = ANSWER_WAIT) -> dict[str, Any]:
    """Hand a request to the run's engine and return its answer. InputError (exit 2)
    when no engine runs the run (nothing is written then)."""
    if not EngineLock(run_dir).holder():
        raise InputError(f"no engine is running {run_dir.name}: pilots are added to or drained from a running run "
                         f"(start it again with `pwe resume {run_dir.name} --detach`)")
    got = post(run_dir, body, wait)
    if got is None:  # (it left between the two looks)
        raise PweError(f"the engine of {run_dir.name} left before it answered; nothing was done")
    return got


def post(run_dir: Path, body: dict[str, Any], wait: float = ANSWER_WAIT, keep: bool = False) -> dict[str, Any] | None:
    """Leave a request for the run's engine: its answer when one runs it. No engine (or one
    that leaves before it answers): None, the request taken away, or, ``keep``, left in
    ``control/`` for the next engine, which takes it in before it hands out a member (pwe
    set)."""
    from ..runstate.notify import sign

    lock = EngineLock(run_dir)
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
                if not keep:
                    (d / f"pilot-{rid}.json").unlink(missing_ok=True)
                return None
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
