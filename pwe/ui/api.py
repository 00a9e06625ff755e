"""The dashboard's JSON documents, each built by the function the command line's ``--json``
uses, so the page and a script see one schema:

=====================  ==========================================================
document               the command whose ``--json`` it is (the function)
=====================  ==========================================================
runs                   ``pwe runs`` (:func:`pwe.observe.runview.run_summary`)
run                    ``pwe status`` (:func:`pwe.observe.runview.status`), with ``dag``:
                       ``pwe validate``'s nodes and edges (:func:`pwe.observe.planview.summary`)
members                ``pwe show -q`` (:func:`pwe.observe.results.select`), a page of them
logs                   ``pwe logs`` (:func:`pwe.observe.output.logs_document`), bounded
timeline               ``pwe trace`` (:meth:`pwe.observe.trace.Trace.records`), the newest
failures               ``pwe failures`` (:func:`pwe.observe.failures.failures`), of the run kept read
explain                ``pwe explain`` (:func:`pwe.observe.explain.explain`), the batch system
                       asked only when the request says so
triggers               ``pwe trigger list`` (:func:`pwe.service.daemon.trigger_rows`)
hosts, host check      ``pwe hosts list`` / ``check`` (:mod:`pwe.observe.hostview`)
=====================  ==========================================================

A run is named by its id only (never a path): a run :func:`runs` lists, or one of the registry of
runs (:mod:`pwe.runstate.registry`: the user's own runs, each verified by its run.json).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..base.errors import InputError, PweError, RunNotFound
from .model import Runs

#: The most of a member's log file the dashboard reads (its last bytes).
LOG_BYTES = 256 * 1024
#: The most members one page holds, and the most attempts the timeline draws.
PAGE_MAX, TIMELINE_MAX = 1000, 5000


class Sources:
    """Where the dashboard's runs are: ``runs_root`` (``--runs DIR``; None: ./pwe-runs),
    and the service's runs always (:func:`pwe.runstate.rundir.roots`)."""

    def __init__(self, runs_root: Path | None = None):
        self.runs_root = runs_root
        self.cache = Runs()

    def listed(self) -> list[tuple[Path, str]]:
        from ..runstate.rundir import COMMAND_LINE, listed

        if self.runs_root is None:
            return listed()
        found = listed(self.runs_root) + [(d, w) for d, w in listed() if w != COMMAND_LINE]
        seen: set[str] = set()
        out = []
        for d, w in found:
            if str(d.resolve()) not in seen:
                seen.add(str(d.resolve()))
                out.append((d, w))
        return out

    def find(self, run_id: str) -> Path:
        """The run directory of ``run_id`` (the id its run.json names, as :func:`runs` shows
        it): among those listed, else in the registry of runs (a run made with ``--run-dir``
        anywhere: :mod:`pwe.runstate.registry`); :class:`RunNotFound` else."""
        from ..base.ids import is_run_id
        from ..runstate.registry import lookup, run_id_of

        if not is_run_id(run_id):
            raise RunNotFound(f"run {run_id[:60]!r}: not a run id")
        listed = [d for d, _ in self.listed()]
        for d in listed:
            if d.name == run_id and run_id_of(d) in (run_id, None):
                return d
        there = lookup(run_id)
        if there is not None:
            return there
        for d in listed:  # (listed under another name, and not registered: made before the registry)
            if d.name != run_id and run_id_of(d) == run_id:
                return d
        raise RunNotFound(f"no run '{run_id}' here")


def runs(src: Sources) -> list[dict[str, Any]]:
    """``pwe runs --json``."""
    from ..observe.runview import run_summary

    return [run_summary(d, where) for d, where in src.listed()]


def run(src: Sources, run_id: str) -> dict[str, Any]:
    """``pwe status --json`` of the run, with ``dag`` (``pwe validate --json``'s nodes and
    edges, for its plan as run) and ``run_id``."""
    from ..observe.planview import summary
    from ..observe.runview import status

    d = src.find(run_id)
    doc = status(d)
    loaded = src.cache.get(d)
    dag = summary(loaded.plan, [])
    doc["dag"] = {k: dag[k] for k in ("workflow", "total_members", "nodes", "edges", "critical_path")}
    doc.setdefault("run_id", run_id)
    return doc


def members(src: Sources, run_id: str, query: str | None = None, node: str | None = None,
            state: str | None = None, offset: int = 0, limit: int = 50, budget: Any = None) -> dict[str, Any]:
    """A page of ``pwe show -q QUERY --json``: ``members`` (its records), ``offset``,
    ``limit`` and ``more`` (whether a next page has any). No query (or an empty box):
    every member. ``budget``: the query's (:class:`pwe.planning.conditions.Budget`)."""
    from ..observe.results import select
    from ..planning.conditions import needs_trace, parse

    if not 0 <= offset <= 10**9 or not 1 <= limit <= PAGE_MAX:
        raise InputError(f"offset 0 to 1000000000, limit 1 to {PAGE_MAX}")
    d = src.find(run_id)
    loaded = src.cache.get(d)
    trace = loaded.traced() if query and needs_trace(parse(query, None)) else None
    # (the run's state is read under its lock: a query waits for it within its budget, not past it)
    if not loaded.lock.acquire(timeout=budget.left() if budget is not None else -1):
        raise budget.over()
    try:
        page = select(d, query or None, node or None, state or None, limit + 1, offset, (loaded.state, trace),
                      budget)
    finally:
        loaded.lock.release()
    return {"run_id": run_id, "query": query or "", "offset": offset, "limit": limit, "more": len(page) > limit,
            "members": page[:limit]}


def member(src: Sources, run_id: str, node: str, index: int) -> dict[str, Any]:
    """One member as ``pwe show`` lists it, with ``files``: what its directory holds
    (name and size: its outputs file and what it wrote there; in a run made before output
    streams, its stdout and stderr), ``output``: its latest attempt with output in the
    run's streams (``attempt``, bytes of ``stdout`` and ``stderr``, ``left_out`` of each by
    the cap; null when it wrote nothing or it cannot be read), and ``products``: the paths
    its node names for it, each with whether it exists."""
    from ..observe.results import member_record
    from ..runstate.rundir import member_dir

    d = src.find(run_id)
    loaded = src.cache.get(d)
    with loaded.lock:
        ns = loaded.state.nodes.get(node)
        if ns is None or not 0 <= index < ns.size:
            raise InputError(f"{node}[{index}]: no such member of {run_id}")
        rec = member_record(loaded.state, node, index)
    from .security import inside

    md = member_dir(d, node, index)
    files = []
    if inside(d, md) and md.is_dir():
        for entry in sorted(os.scandir(md), key=lambda e: e.name)[:200]:
            try:
                if entry.is_file(follow_symlinks=False):
                    files.append({"name": entry.name, "bytes": entry.stat(follow_symlinks=False).st_size})
            except OSError:
                continue
    rec["files"] = files
    rec["output"] = _output(d, node, index)
    rec["products"] = _products(loaded, node, index)
    return rec


def _output(d: Path, node: str, index: int) -> dict[str, Any] | None:
    """A member's output in sizes (:func:`pwe.observe.output.member_output`), or None."""
    from ..observe.output import member_output

    try:
        got = member_output(d, node, index)
    except PweError:
        return None
    if not got.attempts:
        return None
    return {"attempt": got.attempt, "stdout": len(got.stdout), "stderr": len(got.stderr), "left_out": got.left_out}


def _products(loaded: Any, node: str, index: int) -> list[dict[str, Any]]:
    """The product paths of a member (pwe.planning.products), each with whether it is there."""
    pn = loaded.plan.nodes[node]
    if not getattr(pn, "products", None) or not loaded.info.get("workspace"):
        return []
    from ..planning.products import absolute

    try:
        paths = absolute(loaded.plan, loaded.info["workspace"], node, index)
    except (PweError, ValueError, TypeError, OSError):
        return []
    return [{"path": str(p), "exists": Path(p).exists()} for p in paths]


def logs(src: Sources, run_id: str, node: str, index: int, tail: int | None = None) -> dict[str, Any]:
    """``pwe logs --json`` of a member, each of stdout and stderr its last :data:`LOG_BYTES`
    bytes at most (``cut``: how many were left out); from the run's output streams, or a
    run made before them, the member's own files. A file that is a symbolic link out of the
    run directory, or not a regular file, is refused."""
    from ..observe.output import logs_document, node_sizes
    from .security import inside

    d = src.find(run_id)
    sizes = node_sizes(d)
    if node not in sizes or not 0 <= index < sizes[node]:
        raise InputError(f"{node}[{index}]: no such member of {run_id}")
    from ..runstate.rundir import member_dir

    md = member_dir(d, node, index)
    for name in ("stdout", "stderr"):
        if os.path.lexists(md / name) and not inside(d, md / name):
            raise InputError(f"{node}[{index}] {name}: not a file inside the run directory")
    return logs_document(d, node, index, f"{node}:{index}", tail, max_bytes=LOG_BYTES)


def timeline(src: Sources, run_id: str, limit: int = TIMELINE_MAX) -> dict[str, Any]:
    """The run's trace (``pwe trace --format json``'s records) for its timeline: the
    ``limit`` attempts that started last, with ``attempts`` (how many in all), and the
    progress of each pilot and each machine (``by_pilot``, ``by_machine``: attempts
    per state). Of a very long journal, the attempts of its last 16 MiB (``from_offset``:
    where they begin; 0: all)."""
    d = src.find(run_id)
    loaded = src.cache.get(d)
    tr = loaded.traced()
    with loaded.lock:
        recs = list(tr.records(None))
    by_pilot: dict[str, dict[str, int]] = {}
    by_machine: dict[str, dict[str, int]] = {}
    for r in recs:
        for key, into in ((r["pilot"], by_pilot), (r["node_name"], by_machine)):
            if key is not None:
                c = into.setdefault(str(key), {})
                c[r["state"]] = c.get(r["state"], 0) + 1
    recs.sort(key=lambda r: r["start"] or r["submit"] or 0)
    shown = recs[-limit:]
    for r in shown:
        r.pop("parameters", None)
    return {"run_id": run_id, "attempts": len(recs), "records": shown, "by_pilot": by_pilot,
            "from_offset": loaded.partial,  # (0: the whole journal; else the attempts assigned after it)
            "by_machine": by_machine, "pilots": {p: {k: v for k, v in info.items() if k in
                                                    ("host", "lane", "batch", "job", "slots", "gone")}
                                                for p, info in tr.pilots.items()}}


def failures(src: Sources, run_id: str, budget: Any = None) -> dict[str, Any]:
    """``pwe failures --json`` of the run, from its state and trace kept read (no replay of
    its journal per request), with ``from_offset``: where the trace's attempts begin, as
    :func:`timeline` says it (the view by host counts those). ``budget``: how long to wait
    for the run's lock (:class:`pwe.planning.conditions.Budget`)."""
    from ..observe.failures import failures as summarise

    d = src.find(run_id)
    loaded = src.cache.get(d)
    tr = loaded.traced()
    if not loaded.lock.acquire(timeout=budget.left() if budget is not None else -1):
        raise budget.over()
    try:  # (under the lock: the state is not brought up to date while it is counted)
        doc = summarise(d, loaded=(loaded.info, loaded.state, tr))
    finally:
        loaded.lock.release()
    doc["run"] = doc["run"] or run_id
    doc["from_offset"] = loaded.partial
    return doc


def explain(src: Sources, run_id: str, node: str, index: int, ask: bool = False,
            budget: Any = None) -> dict[str, Any]:
    """``pwe explain --json`` of a member: ``ask`` false (the page's every view), from the
    state kept read, no command run; ``ask`` true, the batch system asked why a queued
    pilot job waits (the state read afresh, so that no lock is held while it answers). A
    member the run does not have: :class:`InputError` (one line)."""
    from ..observe.explain import explain as why

    d = src.find(run_id)
    said = f"{node[:60]}:{index}"
    if ask:
        return why(d, node, index, ask=True, said=said)
    loaded = src.cache.get(d)
    if not loaded.lock.acquire(timeout=budget.left() if budget is not None else -1):
        raise budget.over()
    try:
        return why(d, node, index, ask=False, said=said, loaded=(loaded.info, loaded.state))
    finally:
        loaded.lock.release()


def triggers() -> list[dict[str, Any]]:
    """``pwe trigger list --json``."""
    from ..service.daemon import trigger_rows
    from ..runstate.service_store import Store

    store = Store()
    return trigger_rows(store) if store.root.is_dir() else []


def hosts() -> list[dict[str, Any]]:
    """``pwe hosts list --json``."""
    import hostinfo

    from ..observe.hostview import host_rows

    return host_rows(hostinfo.load())


def host_check(name: str) -> dict[str, Any]:
    """``pwe hosts check NAME --json`` (a live check: it reaches the host)."""
    import hostinfo
    from hostinfo.check import check_host

    from ..observe.hostview import check_document

    return check_document(name, check_host(hostinfo.load().get(name)))
