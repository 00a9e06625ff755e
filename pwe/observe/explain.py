"""Why a member is in its state (``pwe explain RUN MEMBER``; the dashboards' member page),
in three layers, each a list of sentences with the numbers in them and a document beside:

- **member**: its state, attempts and how its last one ended; each prerequisite (the
  upstream members it waits for, over a matched edge, with their states; over a barrier,
  the upstream node's counts); what holds it (the run halted, cancelled, stopped with no
  engine, quarantined after losses, skipped because an upstream member failed); reused
  from which run and member, or found complete by its products; and, for a member that
  ran where an earlier run could have lent it, which change made it run
  (:func:`pwe.runstate.rerun_why.why_run` where present).
- **placement**: what one attempt asks (:func:`pwe.planning.asks.asks`, grown by
  ``retry.grow``) against its lane's nodes (cores, memory, GPUs, ``$TMPDIR`` per node)
  and against each live pilot of the lane: taken (its members queued or running), up or
  still in the batch queue, its walltime left against the member's.
- **allocation**: the lane's pilot jobs and what holds a new one back (the engine's own
  words in the snapshot: max_pilots, max_queued_pilots, submit_rate, the back-off after
  a refused submission, a batch system that does not answer; the core-hour budget), and
  for a pilot job still in the batch queue, what the batch system says keeps it there
  (SLURM's pending reason, PBS's comment, Grid Engine's scheduling info:
  :meth:`protocols.base.Protocol.why_pending`), asked once, only when ``ask`` is true.

Read-only, no lock; the member's state from the checkpoint and the journal's tail (not a
replay of the whole journal: a member of a run of a million costs what loading its state
costs).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..base.errors import InputError
from ..base.states import (ASSIGNED, CANCELLED, DONE, FAILED, HELD, NAMES, QUARANTINED, READY, RUNNING, SKIPPED,
                           WAITING)
from ..base.text import shown
from ..planning.lanes import grown_lane, lane_of, whole_host
from ..planning.partitions import largest_node

#: upstream members named one by one at most (the rest counted)
UPSTREAM_NAMED = 12


def explain(run_dir: Path, node: str, index: int, ask: bool = True, said: str | None = None,
            loaded: tuple[dict[str, Any], Any] | None = None) -> dict[str, Any]:
    """The document (see the module's docstring) of member ``index`` of ``node``; an
    :class:`InputError` for a member the run does not have. ``ask``: ask the batch system
    why a queued pilot job waits. ``loaded``: (run.json, state) a caller keeps read (the
    dashboard's), so that the state is not loaded again."""
    from .results import load_state, member_record
    from .runview import snapshot
    from ..runstate.locks import EngineLock

    run_dir = Path(run_dir)
    said = said or f"{node}:{index}"
    info, st = loaded if loaded is not None else load_state(run_dir)
    if node not in st.nodes:
        from ..base.source import did_you_mean

        raise InputError(f"{said}: run {run_dir.name} has no node '{node}'{did_you_mean(node, st.nodes)}")
    ns = st.nodes[node]
    if not 0 <= index < ns.size:
        raise InputError(f"{said}: no such member ({node} has {ns.size:,}, 0 to {ns.size - 1:,})")
    snap = snapshot(run_dir / "state.json") or {}
    engine = EngineLock(run_dir).holder()
    rec = member_record(st, node, index)
    doc: dict[str, Any] = {
        "run": info.get("run_id"), "member": f"{node}:{index}", "node": node, "index": index,
        "parameters": rec["parameters"], "state": rec["state"], "attempts": rec["attempts"],
        "exit_status": rec["exit_status"], "reason": rec.get("reason"), "why": rec.get("why"),
        "engine": bool(engine), "prerequisites": _prerequisites(st, node, index),
        "reused_from": rec.get("reused_from"), "rerun": _rerun(run_dir, st, info, node, index, rec),
    }
    code = ns.state[index]
    lane, host = lane_of(info.get("lanes") or {}, st.plan, node)
    doc["lane"], doc["host"] = lane, host
    from ..planning.asks import asks, grown

    # (what its next attempt asks; a member that ended: what its last one asked)
    failures = ns.failures.get(index, 0)
    retried = failures - 1 if code in (FAILED, QUARANTINED) and failures else failures
    settings = st.settings_for(node, index) if st.sets else {}  # (pwe set: over the node's and its growth)
    pn = st.plan.nodes[node]
    # (grow: {cap: true} holds a grown request to the host's largest node, as the engine does)
    whole = whole_host(info.get("lanes") or {}, host and host["name"]) if pn.retry and pn.retry.grow else None
    ceiling = largest_node(whole) if whole is not None and pn.retry.grow.cap else None
    doc["asks"] = asks(pn, retried, settings, ceiling)
    doc["grown"] = bool(grown(pn, retried, ceiling))
    if settings:
        doc["set"] = settings
    doc["host_misfits"] = _misfits(doc["asks"], host) if host else []
    if doc["host_misfits"]:  # (outgrew its node's lane: the engine sends it where a partition holds it)
        to, size, why = grown_lane(info.get("lanes") or {}, st.plan, node, doc["asks"])
        doc["grown_to"] = to
        if to is not None:
            lane, host, doc["host_misfits"] = to, size, []
            doc["lane"], doc["host"] = lane, host
        elif why and whole_host(info.get("lanes") or {}, host and host["name"]).partitions:
            # (the engine's own line: no node of the host, in any of its partitions, holds it)
            doc["host_misfits"] = [why.removeprefix("cannot be placed: ")]
    doc["pilots"] = _pilots(st, snap, lane, doc["asks"], host, node, index)
    doc["layers"] = {"member": _member_layer(run_dir, st, snap, doc, bool(engine))}
    if code in (WAITING, READY, ASSIGNED, RUNNING) or "cannot be placed" in str(doc["why"] or ""):
        doc["layers"]["placement"] = _placement_layer(doc, code)
        doc["allocation"] = _allocation(run_dir, info, snap, lane, doc["pilots"], ask and code in (READY, ASSIGNED))
        doc["layers"]["allocation"] = _allocation_layer(doc["allocation"], code, bool(engine))
    else:
        doc["allocation"] = None
    return doc


# ------------------------------------------------------------------ the member
def _prerequisites(st: Any, node: str, index: int) -> list[dict[str, Any]]:
    plan = st.plan
    out = []
    for e in plan.edges_into(node):
        src = st.nodes[e.src]
        if e.barrier:
            out.append({"node": e.src, "kind": "barrier", "of": src.size, "done": src.counts[DONE],
                        "states": {NAMES[c]: n for c, n in enumerate(src.counts) if n}})
            continue
        ups = plan.upstream(e, index) if index < plan.nodes[node].space.size else iter(())
        named, counts, total = [], {}, 0
        for j in ups:
            total += 1
            name = NAMES[src.state[j]]
            counts[name] = counts.get(name, 0) + 1
            if src.state[j] != DONE and len(named) < UPSTREAM_NAMED:
                named.append({"member": f"{e.src}:{j}", "state": name})
        out.append({"node": e.src, "kind": "matched", "of": total, "done": counts.get("done", 0), "states": counts,
                    "not_done": named})
    return out


def _rerun(run_dir: Path, st: Any, info: dict[str, Any], node: str, index: int, rec: dict[str, Any]) -> Any:
    """Which change made a member run where an earlier run of its workflow beside this one
    could have lent it (the reuse keys' parts: :func:`pwe.runstate.rerun_why.explain_member`),
    the texts; None where there is nothing to say: reused, complete, never run, or no
    earlier run to compare with. Weighed as a run beginning now would weigh it (its inputs
    as they are now), against the runs that ended before this one was made."""
    if rec.get("reused_from") or rec.get("complete") or rec["attempts"] == 0:
        return None
    from ..runstate import rerun_why

    try:
        found, _ = rerun_why.lenders_of(st.plan, run_dir.parent, exclude=run_dir,
                                        started=float(info.get("created") or time.time()))
    except InputError:
        return None
    if not found:
        return None
    doc = rerun_why.explain_member(st.plan, info.get("workspace"), node, index, found)
    return [r["text"] for r in doc["reasons"]] or None


def _member_layer(run_dir: Path, st: Any, snap: dict[str, Any], doc: dict[str, Any], engine: bool) -> list[str]:
    code = st.nodes[doc["node"]].state[doc["index"]]
    out = _state_lines(run_dir, st, doc, code)
    out += _prerequisite_lines(doc["prerequisites"])
    if code not in (DONE, FAILED, SKIPPED, CANCELLED, QUARANTINED):
        out += _holds(st, snap, doc, code, engine)
        if (doc.get("set") or {}).get("priority"):
            out.append(f"priority {doc['set']['priority']} (pwe set): it goes to a pilot before the members of its "
                       "lane with a lower one")
    if doc["rerun"]:
        out.append("ran (not reused) because: " + "; ".join(str(r) for r in doc["rerun"]))
    return out


def _state_lines(run_dir: Path, st: Any, doc: dict[str, Any], code: int) -> list[str]:
    """Its state in words: how it got there, what its last attempt did."""
    ns, i, pn = st.nodes[doc["node"]], doc["index"], st.plan.nodes[doc["node"]]
    att = doc["attempts"]
    if code == WAITING:
        left = sum(p["of"] - p["done"] for p in doc["prerequisites"])
        return ["waiting: " + (f"{left:,} upstream members are not done yet" if left else "for what it depends on")]
    if code == READY:
        again = f" (attempt {att + 1}; {att} before)" if att else ""
        return [f"ready{again}: everything it waits for is done; it waits for a pilot to take it"]
    if code == ASSIGNED:
        return [f"queued on pilot {ns.pilot.get(i, '?')} (attempt {att}): handed to it, not started yet"]
    if code == RUNNING:
        return [f"running on pilot {ns.pilot.get(i, '?')} (attempt {att})"
                + (f", process {ns.pid[i]}" if ns.pid.get(i) else "")]
    if code == DONE:
        if doc["reused_from"]:
            came = doc["reused_from"]
            return [f"done: reused from run {came['run']} member {came['member']} (same key: nothing it depends "
                    "on changed), not run here"]
        if doc.get("why") and "complete (products)" in str(doc["why"]):
            return ["done: found complete by its products in the workspace, not run here"]
        return [f"done: exit 0 after {att} attempt{'s' if att != 1 else ''}"]
    if code in (FAILED, QUARANTINED):
        if code == QUARANTINED:
            out = [f"quarantined: present when its pilot or node was lost {ns.losses.get(i, 0)} times (maxLosses "
                   f"{pn.max_losses}); not run again until pwe retry -q releases it"]
        else:
            policy = f"retries {pn.retries}" if pn.retry is None else f"retry: {pn.retry.attempts} attempts"
            out = [f"failed for good: {_ended(doc)}, after {att} attempt{'s' if att != 1 else ''} ({policy})"]
        tail = _stderr_line(run_dir, doc["node"], i)
        return out + ([f"its last line on stderr: {tail}"] if tail else [])
    if code == HELD:
        space = st.plan.nodes[doc["node"]].space
        mine = [h for h in st.holds if h["n"] == doc["node"]]
        texts = space.texts_of(i, [h["param"] for h in mine]) if i < space.size else {}
        why = [h for h in mine if texts.get(h["param"]) == h["value"]]
        said = "; ".join(f"{h['param']}={h['value']} had {h['failed']:,} failed, none done" for h in why)
        query = "; ".join(f"{h['param']}={h['value']}" for h in why) or "state=held"
        return [f"held: {said or 'its value is held'} (hold: after {pn.hold.after if pn.hold else '?'}); it waits, "
                f"not a failure; pwe release {doc['run']} -q '{query}' lets it go"]
    if code == SKIPPED:
        bad = [u for p in doc["prerequisites"] for u in p.get("not_done", [])
               if u["state"] in ("failed", "skipped", "quarantined", "cancelled")]
        bar = [p for p in doc["prerequisites"] if p["kind"] == "barrier" and p["done"] < p["of"]]
        what = ", ".join(f"{u['member']} ({u['state']})" for u in bad[:5]) or \
            ", ".join(f"all of {p['node']} (barrier: {p['of'] - p['done']:,} not done)" for p in bar) or "upstream"
        return [f"skipped: it can never run, what it waits for did not succeed: {what}"]
    return ["cancelled: the run was cancelled while it waited or ran; pwe retry runs it again"]


def _prerequisite_lines(prerequisites: list[dict[str, Any]]) -> list[str]:
    out = []
    for p in prerequisites:
        if p["kind"] == "barrier":
            out.append(f"waits for all of {p['node']} (barrier): {p['done']:,} of {p['of']:,} done")
            continue
        names = ", ".join(f"{u['member']} {u['state']}" for u in p["not_done"])
        more = p["of"] - p["done"] - len(p["not_done"])
        out.append(f"waits for {p['of']:,} of {p['node']}: {p['done']:,} done"
                   + (f"; not done: {names}" if names else "") + (f" and {more:,} more" if more > 0 else ""))
    return out


def _holds(st: Any, snap: dict[str, Any], doc: dict[str, Any], code: int, engine: bool) -> list[str]:
    """What keeps a member that has not ended from going on: the run's word, not its own."""
    out = []
    if st.halted:
        out.append(f"held: {st.halted.get('why')} (no new member starts; pwe resume --halt LARGER goes on)")
    if st.cancelled:
        out.append("held: the run is cancelled")
    if not engine and code != HELD:  # (a held member waits for pwe release, not for an engine)
        stopped = f" (the last one stopped: {st.stopped})" if st.stopped else ""
        out.append(f"held: no engine runs this run{stopped}; pwe resume {doc['run']} goes on")
    budget = snap.get("budget")
    refused = (budget.get("refused") or {}) if isinstance(budget, dict) else {}
    if code == READY and doc["lane"] in refused:
        out.append(f"held: the core-hour budget: {refused[doc['lane']]}")
    return out


def _ended(doc: dict[str, Any]) -> str:
    if doc.get("reason") and doc["reason"] not in ("exit", "reused"):
        return f"{doc['reason']}" + (f" ({doc['why']})" if doc.get("why") else "")
    if doc.get("why"):
        return str(doc["why"])
    return f"exit {doc['exit_status']}"


def _stderr_line(run_dir: Path, node: str, i: int) -> str:
    from .output import stderr_tail

    return stderr_tail(run_dir, node, i, lines=1)[:200]


# ------------------------------------------------------------------ placement
def _misfits(asks: dict[str, Any], host: dict[str, Any]) -> list[str]:
    """What one attempt asks that no node of the host holds, with the numbers."""
    out = []
    if host["cores_per_node"] and asks["cores"] > host["cores_per_node"]:
        out.append(f"cores: asks {asks['cores']}, a node of {host['name']} has {host['cores_per_node']}")
    if asks["memory_mb"] and host["memory_mb"] and asks["memory_mb"] > host["memory_mb"]:
        out.append(f"memory: asks {asks['memory_mb']:,} MB, a node of {host['name']} has {host['memory_mb']:,} MB")
    if asks["gpus"] and asks["gpus"] > host["gpus_per_node"]:
        out.append(f"GPUs: asks {asks['gpus']}, a node of {host['name']} has {host['gpus_per_node']}")
    if asks["tmp_mb"] and host["tmp_mb"] and asks["tmp_mb"] > host["tmp_mb"]:
        out.append(f"$TMPDIR: asks {asks['tmp_mb']:,} MB, a node of {host['name']} has {host['tmp_mb']:,} MB")
    return out


def _pilots(st: Any, snap: dict[str, Any], lane: str | None, asks: dict[str, Any], host: dict[str, Any] | None,
            node: str, index: int) -> list[dict[str, Any]]:
    """Each live pilot of the run: whether it serves the member's lane, whether it is up,
    how full it is, its walltime left against the member's walltime."""
    view = snap.get("pilot_view") or {}
    now = time.time()
    holder = st.nodes[node].pilot.get(index)
    out = []
    for pid_, p in st.pilots.items():
        if not p.get("alive"):
            continue
        v = view.get(pid_) or {}
        row: dict[str, Any] = {"pilot": pid_, "lane": p.get("lane"), "job": p.get("job"), "batch": p.get("batch"),
                               "slots": p.get("slots"), "up": v.get("up"), "stage": v.get("state"),
                               "taken": v.get("outstanding"), "holds_it": pid_ == holder, "why_not": []}
        wall, up_at = p.get("wall"), v.get("up_at")
        left = (up_at + wall * 60 - now) / 60 if wall and up_at else None
        row["walltime_left_min"] = round(left, 1) if left is not None else None
        why = row["why_not"]
        if lane is not None and p.get("lane") not in (lane, (host or {}).get("name")) and not p.get("serves"):
            why.append(f"it serves {p.get('lane')}, the member's pilots come from {lane}")
        if v.get("state") and v["state"] != "active":
            why.append(f"it is {v['state']}: it takes no new member")
        if v.get("up") is False and p.get("job"):
            why.append("its job is still in the batch queue")
        if row["taken"] is not None and row["slots"] and row["taken"] >= row["slots"]:
            why.append(f"every slot is taken ({row['taken']} members queued or running on {row['slots']} slots)")
        if left is not None and asks.get("walltime_min") and left < asks["walltime_min"]:
            why.append(f"walltime: {left:.0f} min left, the member may run {asks['walltime_min']:g} min")
        out.append(row)
    return out


def _placement_layer(doc: dict[str, Any], code: int) -> list[str]:
    a, host = doc["asks"], doc["host"]
    asked = [f"{a['cores']} core{'s' if a['cores'] != 1 else ''}"]
    if a["memory_mb"]:
        asked.append(f"{a['memory_mb']:,} MB")
    if a["gpus"]:
        asked.append(f"{a['gpus']} GPU{'s' if a['gpus'] != 1 else ''}")
    if a["tmp_mb"]:
        asked.append(f"{a['tmp_mb']:,} MB of $TMPDIR")
    if a["walltime_min"]:
        asked.append(f"{a['walltime_min']:g} min")
    how = ", grown by retry.grow" if doc["grown"] else ""
    how += ", as pwe set says" if set(doc.get("set") or ()) & {"memoryPerMember", "maxWallTimePerMember", "threads",
                                                               "gpus"} else ""
    out = [f"asks {', '.join(asked)} (one attempt{how})"]
    if host:
        size = [f"{host['cores_per_node']} cores" if host["cores_per_node"] else "cores unknown",
                f"{host['memory_mb']:,} MB" if host["memory_mb"] else "memory unknown"]
        if host["gpus_per_node"]:
            size.append(f"{host['gpus_per_node']} GPUs")
        grew = (f"its request outgrew its node's lane: it goes to {doc['lane']}, whose nodes hold it; "
                if doc.get("grown_to") else "")
        out.append(f"{grew}its pilots come from {doc['lane']} ({host['protocol']}): a node has {', '.join(size)}")
    for m in doc["host_misfits"]:
        out.append(f"does not fit any node: {m}")
    pilots = doc["pilots"]
    if not pilots:
        out.append("no pilot is alive")
    for p in pilots:
        where = f"job {p['job']}" if p["job"] else "a process here"
        left = f", {p['walltime_left_min']:g} min left" if p["walltime_left_min"] is not None else ""
        if p["holds_it"]:
            queued = "; its job is still in the batch queue" if p["up"] is False and p["job"] else ""
            out.append(f"pilot {p['pilot']} ({where}{left}) holds it{queued}")
        elif p["why_not"]:
            out.append(f"pilot {p['pilot']} ({where}{left}) cannot take it: " + "; ".join(p["why_not"]))
        elif code == READY:
            out.append(f"pilot {p['pilot']} ({where}{left}) could take it: it is next when a slot frees "
                       f"({p['taken']} of {p['slots']} slots taken)" if p["taken"] is not None else
                       f"pilot {p['pilot']} ({where}{left}) could take it")
    return out


# ------------------------------------------------------------------ allocation
def _allocation(run_dir: Path, info: dict[str, Any], snap: dict[str, Any], lane: str | None,
                pilots: list[dict[str, Any]], ask: bool) -> dict[str, Any]:
    lanes = snap.get("lanes") or {}
    out: dict[str, Any] = {"lane": lanes.get(lane) if lane else None, "pending": {}, "asked": None,
                           "unreachable": (snap.get("unreachable") or {}).get(lane or "")}
    queued = [p["job"] for p in pilots if p["job"] and p["up"] is False and p["lane"] == lane]
    if ask and queued and lane:
        out["asked"], out["pending"] = _ask_batch(info, lane, queued)
    return out


def _ask_batch(info: dict[str, Any], lane: str, jobs: list[str]) -> tuple[str, dict[str, str]]:
    """(what was asked, job -> the batch system's reason) for the lane's queued jobs."""
    from hostinfo.records import host as host_of
    from protocols.registry import get as get_protocol
    from protocols.registry import runner_for

    from ..base.errors import PweError

    name = lane.split("/", 1)[0]
    try:
        h = host_of((info.get("lanes") or {})[name]["host_def"])
        proto = get_protocol(h.protocol, runner_for(h), h)
    except (KeyError, TypeError, ValueError, OSError, PweError) as exc:  # (said, not raised)
        return f"{name}: cannot ask ({exc})"[:200], {}
    try:
        said = proto.why_pending(jobs)
        return (proto.no_answer or "asked") if not said else "asked", said
    finally:
        proto.close()


def _allocation_layer(al: dict[str, Any], code: int, engine: bool) -> list[str]:
    out = []
    ln = al["lane"]
    if ln:
        kind = "batch jobs" if ln.get("batch") else "processes here"
        out.append(f"{ln.get('alive', 0)} pilot{'s' if ln.get('alive') != 1 else ''} alive ({kind}), "
                   f"{ln.get('queued', 0)} in the batch queue; {ln.get('ready', 0):,} members ready for them")
        if ln.get("held"):
            out.append(f"no new pilot now: {ln['held']}")
        elif code == READY and engine:
            out.append("a new pilot may go when the ready members want one")
        if ln.get("refusals"):
            out.append(f"{ln['refusals']} submissions refused in a row: {ln.get('refused', '')}")
    if al.get("unreachable"):
        out.append(f"its batch system does not answer: {al['unreachable'].get('why')}")
    for job, why in al["pending"].items():
        out.append(f"job {job} waits: {why} (the batch system's words)")
    if al["asked"] and al["asked"] != "asked":
        out.append(f"the batch system was asked why its jobs wait and did not say: {al['asked']}")
    return out


def lines(doc: dict[str, Any]) -> list[str]:
    """``pwe explain`` in text: the member, then each layer under its name. Values members
    and users made are shown inert (:func:`pwe.base.text.shown`)."""
    params = " ".join(f"{shown(k)}={shown(v)}" for k, v in doc["parameters"].items())
    out = [f"{shown(doc['member'])} of run {shown(str(doc['run']))}: {doc['state']}"
           + (f"  {params}" if params else "")]
    for layer in ("member", "placement", "allocation"):
        said = doc["layers"].get(layer)
        if said:
            out.append(f"{layer}:")
            out += [f"  {shown(s)}" for s in said]
    return out
