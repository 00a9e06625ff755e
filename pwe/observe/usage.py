"""Right-sizing: what the members of a run used against what their nodes asked for, and
the requests that would have fitted 99% of them (``pwe status --usage``, ``pwe report``).

Every ``end`` the pilots send carries the attempt's duration (``dt``, s), CPU time (``cpu``,
user+sys s) and peak RSS (``rss``, KB); the trace (:mod:`pwe.observe.trace`, one replay of
the journal, compacted ``ends`` included) holds them per attempt. :func:`usage` turns them
into one document, per node:

- ``attempts`` measured (those with a duration; a ``reused`` result ran in another run),
  ``failed`` of them, and ``reasons``: how many ended ``oom``, ``walltime``... (evidence that
  the request was too small for them; absent from runs whose pilots do not say);
- ``duration_s``, ``rss_mb``, ``cpu_s`` and ``cores_used`` (cpu / dt of each attempt): p50,
  p95, p99, max and mean (nearest-rank percentiles: at least that share of the attempts is
  at or below the value);
- ``cpu_efficiency``: CPU time over the cores held (sum cpu / sum dt x cores per member);
- ``asked``: memoryPerMember, maxWallTimePerMember, ranksPerMember, threadsPerRank, cores;
- ``suggested``: memoryPerMember (p99 RSS plus :data:`MEMORY_HEADROOM`, rounded up to
  :data:`MEMORY_STEPS`), maxWallTimePerMember (p99 duration plus :data:`WALL_HEADROOM`, whole
  minutes), cores (p99 of the cores used, whole, :data:`CORE_SLACK` forgiven), and
  ``covers``: the share of the measured attempts that all three would have fitted;
- ``core_hours``: ``held`` (dt x cores per member), ``used`` (CPU time), ``unused``,
  ``at_suggested_cores``, and ``walltime_reserved`` (attempts x maxWallTimePerMember x cores:
  what a budget or a pilot's walltime counts on) as asked and as suggested;
- ``packing``: members per node as asked and as suggested (cores and memory of a node,
  when the host gives its memory, or this machine's for a local host) and the node
  core-hours the measured attempts took at each;
- ``notes``: what the over-asking cost, in words.

Nothing here divides by a count that can be 0, and every number is finite or None (the
document goes out as JSON with ``allow_nan=False``). A node with nothing measured says
``not measured yet``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable

from ..base.numbers import DIVISOR_LEAST

#: the share of the measured attempts the suggestions fit
FIT = 0.99
#: added to the p99 peak RSS before rounding (0.2: 20 %)
MEMORY_HEADROOM = 0.2
#: added to the p99 duration before rounding to minutes (0.5: 50 %; a member past its
#: walltime is killed and its work lost, a member past its memory too, but RSS varies less)
WALL_HEADROOM = 0.5
#: memoryPerMember suggestions are rounded up to a multiple of the step of the first band
#: they fall in: (up to MB, step MB)
MEMORY_STEPS = ((1024, 64), (8192, 256), (math.inf, 1024))
#: cores used within this much above a whole number count as that number (a single-threaded
#: member's helpers: its shell, its I/O)
CORE_SLACK = 0.1
NOT_MEASURED = "not measured yet"
#: the shortest attempt (s) whose CPU rate (cpu / dt) counts toward ``cores_used``: below it
#: the CPU time is a few clock ticks of its shell starting, and a member of 3 ms that used
#: one core reads as two
MEASURABLE_S = 0.1
TOO_SHORT = "too short to measure"


# ------------------------------------------------------------------ the numbers
def percentile(ordered: list[float], p: float) -> float | None:
    """The nearest-rank ``p`` percentile (0 < p <= 1) of ``ordered`` (sorted): the smallest
    value with at least ``p`` of the values at or below it; None for no values."""
    if not ordered:
        return None
    k = max(1, math.ceil(p * len(ordered) - 1e-9))
    return ordered[min(k, len(ordered)) - 1]


def stats(values: Iterable[float]) -> dict[str, float] | None:
    """p50, p95, p99, max and mean of ``values`` (None for none)."""
    v = sorted(values)
    if not v:
        return None
    return {"p50": _num(percentile(v, 0.5)), "p95": _num(percentile(v, 0.95)), "p99": _num(percentile(v, FIT)),
            "max": _num(v[-1]), "mean": _num(sum(v) / len(v))}


def round_memory(mb: float) -> int:
    """``mb`` rounded up to the step of its band (:data:`MEMORY_STEPS`), at least one step."""
    for upto, step in MEMORY_STEPS:
        if mb <= upto:
            return int(max(step, math.ceil(mb / step - 1e-9) * step))
    raise ValueError(f"{mb!r} MB")  # (only NaN gets here: the last band has no end)


def suggest_memory(rss_mb: float) -> int:
    """memoryPerMember (MB) for a peak RSS of ``rss_mb``: plus :data:`MEMORY_HEADROOM`, rounded up."""
    return round_memory(rss_mb * (1 + MEMORY_HEADROOM))


def suggest_walltime(seconds: float) -> int:
    """maxWallTimePerMember (whole minutes, at least 1) for a duration of ``seconds``."""
    return max(1, math.ceil(seconds * (1 + WALL_HEADROOM) / 60 - 1e-9))


def suggest_cores(used: float) -> int:
    """Cores per member for members that kept ``used`` cores busy (at least 1)."""
    return max(1, math.ceil(used - CORE_SLACK))


def _num(x: Any, digits: int = 4) -> float | None:
    """A finite number rounded, else None (what JSON can carry)."""
    if not _number(x):
        return None
    return round(float(x), digits)


def _finite(x: Any) -> bool:
    return _number(x) and x >= 0


def _number(x: Any) -> bool:
    """A finite int or float (an int too large for a float, as JSON may carry, is not one)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


# ------------------------------------------------------------------ what was asked
def asked(sched: Any) -> dict[str, Any]:
    """What a node's scheduling profile asks of each member."""
    return {"memoryPerMember": sched.memoryPerMember, "maxWallTimePerMember": sched.maxWallTimePerMember,
            "ranksPerMember": sched.ranksPerMember or 1, "threadsPerRank": sched.threadsPerRank or 1,
            "cores": sched.cores_per_member()}


def node_size(info: dict[str, Any], host: str) -> dict[str, Any]:
    """A host's node: ``cores`` and ``memory_mb`` (None where not known) and where the memory
    figure came from: the host's memory_per_node, or this machine's for a local host."""
    lane = (info.get("lanes") or {}).get(host) or {}
    hd = lane.get("host_def") or {}
    cores = hd.get("cores_per_node") or lane.get("cores")
    memory, source = hd.get("memory_per_node"), "memory_per_node"
    if memory is None and hd.get("protocol", "local") == "local" and hd.get("contact", "local") == "local":
        memory, source = _this_machine_mb(), "this machine's"
    return {"cores": cores if isinstance(cores, int) and cores > 0 else None,
            "memory_mb": memory if isinstance(memory, int) and memory > 0 else None,
            "memory_from": source if memory else None}


def _this_machine_mb() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
    except (ValueError, OSError, AttributeError):
        return None


# ------------------------------------------------------------------ one node
class _Measured:
    """A node's measured attempts, column by column."""

    def __init__(self) -> None:
        self.dt: list[float] = []
        self.cpu: list[float] = []
        self.rss_mb: list[float] = []
        self.used: list[float] = []  # cpu / dt
        self.rows: list[tuple[float | None, float | None, float | None]] = []  # (dt, rss MB, cores used)
        self.failed = 0
        self.too_short = 0  # attempts shorter than MEASURABLE_S: no CPU rate from them
        self.reasons: dict[str, int] = {}

    def take(self, rc: Any, dt: Any, cpu: Any, rss: Any, reason: Any) -> None:
        if reason is not None and reason != "exit":
            self.reasons[str(reason)] = self.reasons.get(str(reason), 0) + 1
        if not _finite(dt):
            return
        self.dt.append(dt)
        if rc not in (0, None):
            self.failed += 1
        mb = rss / 1024 if _finite(rss) else None
        used = cpu / dt if _finite(cpu) and dt >= MEASURABLE_S else None  # (1e-300 s: no rate)
        if _finite(cpu) and dt < MEASURABLE_S:
            self.too_short += 1
        if _finite(cpu):
            self.cpu.append(cpu)
        if mb is not None:
            self.rss_mb.append(mb)
        if used is not None:
            self.used.append(used)
        self.rows.append((dt, mb, used))


def node_usage(m: _Measured, ask: dict[str, Any], node: dict[str, Any], size: int) -> dict[str, Any]:
    """One node's part of the document (see the module's docstring)."""
    n = len(m.dt)
    out: dict[str, Any] = {
        "members": size, "attempts": n, "failed": m.failed, "reasons": dict(sorted(m.reasons.items())),
        "duration_s": stats(m.dt), "rss_mb": stats(m.rss_mb), "cpu_s": stats(m.cpu), "cores_used": stats(m.used),
        "cpu_efficiency": None, "asked": ask, "suggested": None, "core_hours": None, "packing": None, "node": node,
        "too_short": m.too_short, "notes": []}
    if not n:
        out["notes"].append(NOT_MEASURED)
        return out
    cores = ask["cores"]
    held_s = sum(m.dt)
    if m.cpu and held_s >= DIVISOR_LEAST:
        out["cpu_efficiency"] = _num(sum(m.cpu) / (held_s * cores))
    sug = {"memoryPerMember": suggest_memory(out["rss_mb"]["p99"]) if out["rss_mb"] else None,
           "maxWallTimePerMember": suggest_walltime(out["duration_s"]["p99"]),
           "cores": suggest_cores(out["cores_used"]["p99"]) if out["cores_used"] else None}
    sug["covers"] = _num(_covered(m.rows, sug) / n)
    out["suggested"] = sug
    out["core_hours"] = _core_hours(m, ask, sug)
    out["packing"] = _packing(held_s, ask, sug, node)
    out["notes"] = _notes(out)
    return out


def _covered(rows: list[tuple], sug: dict[str, Any]) -> int:
    """How many attempts every suggestion fits (a figure not measured fits)."""
    mem, wall, cores = sug["memoryPerMember"], sug["maxWallTimePerMember"], sug["cores"]
    return sum(1 for dt, mb, used in rows
               if dt <= wall * 60 and (mb is None or mem is None or mb <= mem)
               and (used is None or cores is None or used <= cores + CORE_SLACK))


def _core_hours(m: _Measured, ask: dict[str, Any], sug: dict[str, Any]) -> dict[str, Any]:
    held = sum(m.dt) * ask["cores"] / 3600
    used = sum(m.cpu) / 3600 if m.cpu else None
    wall = ask["maxWallTimePerMember"]
    n = len(m.dt)
    return {"held": _num(held), "used": _num(used), "unused": _num(held - used) if used is not None else None,
            "at_suggested_cores": _num(sum(m.dt) * sug["cores"] / 3600) if sug["cores"] else None,
            "walltime_reserved": _num(n * wall * 60 * ask["cores"] / 3600) if wall else None,
            "walltime_reserved_suggested": _num(n * sug["maxWallTimePerMember"] * 60
                                                * (sug["cores"] or ask["cores"]) / 3600)}


def _per_node(node_cores: int, node_mb: int, cores: int, mem: int | None) -> int:
    fit = node_cores // cores
    return min(fit, node_mb // mem) if mem else fit


def _packing(held_s: float, ask: dict[str, Any], sug: dict[str, Any], node: dict[str, Any]) -> dict[str, Any] | None:
    """Members per node as asked and as suggested, and the node core-hours the measured
    attempts took at each (a node's cores over the members it holds, for their time)."""
    nc, nm = node["cores"], node["memory_mb"]
    if not nc or not nm:
        return None
    a = _per_node(nc, nm, ask["cores"], ask["memoryPerMember"])
    s = _per_node(nc, nm, sug["cores"] or ask["cores"], sug["memoryPerMember"])
    by_memory = _per_node(nc, nm, ask["cores"], sug["memoryPerMember"])  # (the cores as asked)
    return {"node_cores": nc, "node_memory_mb": nm, "members_per_node_asked": a,
            "members_per_node_suggested_memory": by_memory, "members_per_node_suggested": s,
            "node_core_hours_asked": _num(held_s * nc / a / 3600) if a else None,
            "node_core_hours_suggested": _num(held_s * nc / s / 3600) if s else None}


def _notes(u: dict[str, Any]) -> list[str]:
    """What the over-asking (or under-asking) cost, in words."""
    ask, sug, ch, pk = u["asked"], u["suggested"], u["core_hours"], u["packing"]
    notes = []
    for reason, why in (("oom", "killed for memory"), ("walltime", "killed at their walltime")):
        if u["reasons"].get(reason):
            notes.append(f"{u['reasons'][reason]:,} attempts were {why}: the request was too small for them "
                         "(their figures are where they were stopped, so the suggestion is a lower bound)")
    mem = ask["memoryPerMember"]
    if sug["memoryPerMember"] is not None and mem:
        if sug["memoryPerMember"] < mem:
            text = (f"memoryPerMember: {mem:,} MB asked, p99 used {u['rss_mb']['p99']:,.0f} MB; "
                    f"{sug['memoryPerMember']:,} MB would have fitted {FIT:.0%}")
            if pk and pk["members_per_node_suggested_memory"] > pk["members_per_node_asked"]:
                text += (f"; a node ({pk['node_memory_mb']:,} MB, {pk['node_cores']} cores) held "
                         f"{pk['members_per_node_asked']:,} as asked, {pk['members_per_node_suggested_memory']:,} "
                         "with it")
            notes.append(text)
        elif u["rss_mb"]["p99"] > mem:
            notes.append(f"memoryPerMember: {mem:,} MB asked is too small: p99 used {u['rss_mb']['p99']:,.0f} MB")
    wall = ask["maxWallTimePerMember"]
    if wall and sug["maxWallTimePerMember"] < wall:
        notes.append(f"maxWallTimePerMember: {wall:g} min asked, p99 took {u['duration_s']['p99']:,.1f} s; "
                     f"{sug['maxWallTimePerMember']} min would have fitted {FIT:.0%}: "
                     f"{_fmt_h(ch['walltime_reserved'])} core-hours reserved by walltime instead of "
                     f"{_fmt_h(ch['walltime_reserved_suggested'])}")
    elif wall and u["duration_s"]["p99"] > wall * 60:
        notes.append(f"maxWallTimePerMember: {wall:g} min asked is too short: p99 took {u['duration_s']['p99']:,.1f} s")
    if pk and pk["members_per_node_suggested"] > pk["members_per_node_asked"]:
        notes.append(f"members a node: {pk['members_per_node_asked']:,} as asked, "
                     f"{pk['members_per_node_suggested']:,} as suggested: {_fmt_h(pk['node_core_hours_asked'])} "
                     f"node core-hours instead of {_fmt_h(pk['node_core_hours_suggested'])}")
    if sug["cores"] is not None and sug["cores"] < ask["cores"]:
        notes.append(f"cores per member: {ask['cores']} asked (ranksPerMember {ask['ranksPerMember']} x "
                     f"threadsPerRank {ask['threadsPerRank']}), p99 used {u['cores_used']['p99']:.2f}: "
                     f"{_fmt_h(ch['held'])} core-hours held, {_fmt_h(ch['used'])} used; "
                     f"{sug['cores']} would have held {_fmt_h(ch['at_suggested_cores'])}")
    elif sug["cores"] is not None and sug["cores"] > ask["cores"]:
        notes.append(f"cores per member: {ask['cores']} asked, p99 used {u['cores_used']['p99']:.2f}: "
                     "members use more cores than they ask for (they compete for them)")
    return notes


def _fmt_h(h: float | None) -> str:
    if h is None:
        return "?"
    return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"


# ------------------------------------------------------------------ the run
def usage(info: dict[str, Any], plan: Any, tr: Any) -> dict[str, Any]:
    """The right-sizing document of a run from its run.json, plan and trace
    (:func:`pwe.observe.trace.load`)."""
    measured: dict[str, _Measured] = {nid: _Measured() for nid in plan.nodes}
    for key, a in tr.attempts.items():
        m = measured.get(key[0])
        reason = a[12]  # (why its end came, where not its own exit: pwe.observe.trace)
        if m is None or reason == "reused":
            continue
        m.take(a[3], a[5], a[6], a[7], reason)
    nodes = {nid: node_usage(measured[nid], asked(pn.scheduling), node_size(info, pn.host),
                             pn.size + len(tr.grown.get(nid, ())))
             for nid, pn in plan.nodes.items()}
    return {"run_id": info.get("run_id"), "fit": FIT,
            "headroom": {"memory": MEMORY_HEADROOM, "walltime": WALL_HEADROOM}, "nodes": nodes,
            "total": _total(nodes.values())}


def _total(nodes: Iterable[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"attempts": 0, "failed": 0}
    sums: dict[str, float | None] = {k: 0.0 for k in ("held", "used", "unused", "walltime_reserved",
                                                       "walltime_reserved_suggested")}
    for u in nodes:
        out["attempts"] += u["attempts"]
        out["failed"] += u["failed"]
        ch = u["core_hours"] or {}
        for k in sums:
            if ch.get(k) is not None and sums[k] is not None:
                sums[k] += ch[k]  # type: ignore[operator]
            elif u["attempts"] and k != "walltime_reserved":
                sums[k] = None  # (a node measured without it: no total)
    if not out["attempts"]:
        sums = dict.fromkeys(sums)
    out["core_hours"] = {k: _num(v) for k, v in sums.items()}
    return out


def load(run_dir: Path) -> dict[str, Any]:
    """:func:`usage` of the run in ``run_dir`` (one replay of its journal)."""
    from .trace import load as load_trace

    info, plan, _st, tr = load_trace(run_dir, with_state=False)
    return usage(info, plan, tr)


# ------------------------------------------------------------------ as text
def lines(doc: dict[str, Any]) -> list[str]:
    """``pwe status --usage``: a table of the measured figures per node, then each node's
    suggestions and what the asking cost. Node ids are shown by the caller's echo."""
    nodes = doc["nodes"]
    width = max([len(n) for n in nodes] + [5])
    head = (f"{'node':<{width}}  {'attempts':>8}  {'duration s p50/p95/max':>24}  {'peak RSS MB p50/p95/max':>24}  "
            f"{'CPU s p50/p95/max':>24}  {'CPU eff':>7}  {'core-h held/used':>17}")
    out = [head]
    for nid, u in nodes.items():
        if not u["attempts"]:
            out.append(f"{nid:<{width}}  {0:>8}  {NOT_MEASURED}")
            continue
        eff = f"{u['cpu_efficiency']:.0%}" if u["cpu_efficiency"] is not None else "?"
        ch = u["core_hours"]
        out.append(f"{nid:<{width}}  {u['attempts']:>8,}  {_three(u['duration_s']):>24}  {_three(u['rss_mb']):>24}  "
                   f"{_three(u['cpu_s']):>24}  {eff:>7}  {_fmt_h(ch['held']) + '/' + _fmt_h(ch['used']):>17}")
    for nid, u in nodes.items():
        sug = u["suggested"]
        if not sug:
            continue
        ask = u["asked"]
        out.append(f"{nid}: to fit {doc['fit']:.0%} of {u['attempts']:,} attempts (covers {sug['covers']:.1%}): "
                   f"memoryPerMember {_or_q(sug['memoryPerMember'])} (asked {_or_dash(ask['memoryPerMember'])}), "
                   f"maxWallTimePerMember {sug['maxWallTimePerMember']} "
                   f"(asked {_or_dash(ask['maxWallTimePerMember'])}), "
                   f"cores {cores_suggested(u)} (asked {ask['cores']})")
        if u["reasons"]:
            out.append("  ended by reason: " + ", ".join(f"{r} {n:,}" for r, n in u["reasons"].items()))
        out.extend(f"  {note}" for note in u["notes"])
    t = doc["total"]["core_hours"]
    out.append(f"core-hours: held {_fmt_h(t['held'])}, used {_fmt_h(t['used'])} (CPU), unused {_fmt_h(t['unused'])}"
               + (f"; reserved by maxWallTimePerMember {_fmt_h(t['walltime_reserved'])}, as suggested "
                  f"{_fmt_h(t['walltime_reserved_suggested'])}" if t["walltime_reserved"] else ""))
    out.append(f"(suggestions: p99 peak RSS + {doc['headroom']['memory']:.0%} rounded up, p99 duration + "
               f"{doc['headroom']['walltime']:.0%} in whole minutes, p99 cores used)")
    return out


def _three(s: dict[str, float] | None) -> str:
    if not s:
        return "?"
    return "/".join(_short(s[k]) for k in ("p50", "p95", "max"))


def _short(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def cores_suggested(u: dict[str, Any]) -> str:
    """The cores suggestion of a node's part, in words: ``?`` when its pilots measured no CPU
    time, :data:`TOO_SHORT` when every attempt was shorter than :data:`MEASURABLE_S`."""
    sug = u["suggested"] or {}
    if sug.get("cores") is not None:
        return str(sug["cores"])
    return TOO_SHORT if u.get("too_short") and not u["cores_used"] else "?"


def _or_q(v: Any) -> str:
    return "?" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:g}"


def _or_dash(v: Any) -> str:
    return "none" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:g}"
