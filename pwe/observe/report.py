"""``pwe report``: one self-contained HTML page about a run (no network needed to open it).

What it shows: the run's summary; a timeline of the attempts, one row per core slot of
each pilot; per node the distributions of durations and peak memory; the failed members
with the last lines of their stderr, and what they have in common (``pwe failures``' views by
parameter value, error signature and host, counted on the same replay: :func:`failure_rows`);
the pilots and their batch jobs; the utilisation of the allocation (busy cores / allocated
cores over time); and right-sizing (what the
members used against what they asked for, and what to ask instead: :mod:`pwe.observe.usage`, the
same document as ``pwe status --usage``).

Everything is worked out here, from the run's trace (:mod:`pwe.observe.trace`, one replay of the
journal), into small arrays that the page's inline script draws as SVG. Where a
timeline cannot show every bar (more than :data:`EXACT_BARS` attempts), the bars of a
row that lie closer together than one pixel of the time axis (the run's span /
:data:`WIDTH`) are merged into one bar, which says how many members it holds, and failed
attempts are drawn on top as red ticks (at most :data:`MAX_TICKS`); the page says so.
Rows beyond :data:`MAX_ROWS` are left out (and the page says how many).
"""

from __future__ import annotations

import heapq
import json
import math
import time
from pathlib import Path
from typing import Any

from ..base.numbers import DIVISOR_LEAST

#: attempts up to which every one is its own bar, with its own tooltip
EXACT_BARS = 5_000
#: pixels of the time axis (the bins of aggregation and of the utilisation curve)
WIDTH = 1200
MAX_ROWS = 400
MAX_TICKS = 2_000
MAX_FAILURES = 200
BINS = 30
PALETTE = ["#4e79a7", "#59a14f", "#9c755f", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#f28e2b", "#bab0ac",
           "#8cd17d"]


def build(run_dir: Path, warnings: list[str] | None = None) -> str:
    """The report of the run in ``run_dir``, as the text of one HTML file; ``warnings``,
    when given, gets a line for each pilot's directory not read (not the run's own: a
    symbolic link, to another run or anywhere)."""
    from pilot.streams import Reader
    from .output import stderr_tail
    from ..base.text import inert, shown
    from .runview import status
    from ..base.states import FAILED, NAMES, QUARANTINED
    from ..workflow.templates import render_page
    from .trace import load
    from .usage import usage

    info, plan, st, tr = load(run_dir)
    snap = status(run_dir)
    node_ids = list(plan.nodes)
    color = {nid: PALETTE[k % len(PALETTE)] for k, nid in enumerate(node_ids)}
    cores = {nid: pn.scheduling.cores_per_member() for nid, pn in plan.nodes.items()}
    # the attempts that started, as (start, end, node, member, attempt, failed, pilot)
    ran = []
    for (nid, i, a), v in tr.attempts.items():
        start, end = v[1], v[2]
        if start is None:
            continue
        if end is None:
            end = tr.last if v[3] is None and tr.last and tr.last > start else start
        ran.append((start, max(end, start), nid, i, a, v[3] not in (None, 0) or v[11] == "lost", v[9]))
    ran.sort()
    t0 = min([r[0] for r in ran[:1]] + [x for x in (tr.first,) if x] + [p["t"] for p in tr.pilots.values()
                                                                         if p.get("t")] or [time.time()])
    t1 = max([r[1] for r in ran] + [x for x in (tr.last,) if x] + [t0 + 1e-3])
    span = t1 - t0
    timeline = _timeline(ran, tr.pilots, t0, span, node_ids)
    util = _utilisation(ran, tr.pilots, cores, t0, t1)
    per_node: dict[str, tuple[list[float], list[float]]] = {nid: ([], []) for nid in node_ids}
    for (nid, _i, _a), v in tr.attempts.items():
        if v[5] is not None:
            per_node[nid][0].append(v[5])
        if v[7] is not None:
            per_node[nid][1].append(v[7] / 1024)
    dists = {nid: {"duration": _hist(sorted(d), "s"), "memory": _hist(sorted(m), "MB")}
             for nid, (d, m) in per_node.items()}
    failures = []
    reader = Reader(str(run_dir / "pilots"), many=True)  # (the streams' indexes read once for every failure)
    nfailed = 0
    causes: dict[tuple[str, str], int] = {}
    for nid, ns, gone in ((nid, ns, s) for nid, ns in st.nodes.items() for s in (FAILED, QUARANTINED)):
        i = ns.state.find(gone) if ns.counts[gone] else -1  # (quarantined: their why says so)
        while i >= 0:
            nfailed += 1
            cause = (nid, shown(ns.why.get(i) or f"exit {ns.rc.get(i)}"))
            causes[cause] = causes.get(cause, 0) + 1
            if len(failures) < MAX_FAILURES:
                # (a terminal's escapes in a value or a line written visibly, as pwe failures shows them)
                failures.append({"member": f"{nid}[{i}]", "attempts": ns.attempt[i], "exit": ns.rc.get(i),
                                 "why": shown(ns.why.get(i) or ""), "params": shown(_params(plan, nid, i)),
                                 "stderr": inert(stderr_tail(run_dir, nid, i, reader))})
            i = ns.state.find(gone, i + 1)
    reader.close()
    if warnings is not None:
        warnings.extend(f"{exc.filename}: {exc.strerror}" for exc in reader.refused)
    pilots = []
    by_pilot: dict[str, list[tuple]] = {}
    for r in ran:
        by_pilot.setdefault(r[6], []).append(r)
    for pid, p in tr.pilots.items():
        mine = by_pilot.get(pid, [])
        pilots.append({"id": pid, "host": p.get("lane") or p.get("host"),
                       "batch": p.get("batch") or "(none: a process)",
                       "job": p.get("job") or "", "slots": p.get("slots"), "attempts": len(mine),
                       "from": _clock(mine[0][0]) if mine else "",
                       "to": _clock(max(r[1] for r in mine)) if mine else "",
                       "gone": p.get("gone") or ""})
    totals = st.totals()
    busy_core_s = sum((r[1] - r[0]) * cores.get(r[2], 1) for r in ran)
    cpu_s = sum(v[6] or 0 for v in tr.attempts.values())
    summary = [
        ("run", info["run_id"]), ("workflow", info.get("workflow", "")), ("state", snap["phase"]),
        ("members", f"{plan.total_members:,}"),
        *((NAMES[k], f"{totals[k]:,}") for k in range(len(NAMES)) if totals[k]),
        ("attempts", f"{len(tr.attempts):,}"), ("started", _clock(t0)), ("span", _duration(span)),
        ("core-hours busy", _hours(busy_core_s)), ("CPU-hours (user+sys)", _hours(cpu_s)),
        ("utilisation", f"{util['mean'] * 100:.1f}% of allocated cores" if util["mean"] is not None else "n/a"),
    ]
    data = {"t0": t0, "span": span, "width": WIDTH, "timeline": timeline, "util": util, "dists": dists,
            "colors": color, "nodes": node_ids}
    from .failures import failures as summarise

    common = failure_rows(summarise(run_dir, loaded=(info, st, tr))) if nfailed else None
    return render_page("report.html.j2", {
        "run_id": info["run_id"], "summary": summary, "failures": failures, "nfailed": nfailed,
        "causes": sorted(((n, why, c) for (n, why), c in causes.items()), key=lambda x: -x[2]),
        "max_failures": MAX_FAILURES, "pilots": pilots, "nodes": node_ids, "colors": color,
        "timeline_note": timeline["note"], "data_json": script_json(data),
        "generated": _clock(time.time()), "sizing": sizing_rows(usage(info, plan, tr)), "common": common,
    })


def failure_rows(doc: dict[str, Any], rows: int = 10) -> dict[str, Any]:
    """The failures section's views of ``pwe failures``' document (:mod:`pwe.observe.failures`):
    the first ``rows`` of by value, by error signature and by host, as table cells: text
    with every control character written visibly (a terminal's escapes in a value or an
    error line), which the page's renderer then escapes for HTML."""
    from ..base.text import shown

    def pct(x: float) -> str:
        return f"{x:.0%}"

    return {
        "by_value": [{"node": shown(r["node"]), "parameter": shown(r["parameter"]), "value": shown(r["value"]),
                      "failed": f"{r['failed']:,}", "done": f"{r['done']:,}", "rate": pct(r["rate"]),
                      "difference": f"{r['difference']:+.0f}"} for r in doc["by_value"][:rows]],
        "n_values": len(doc["by_value"]),
        "not_compared": [f"{shown(r['node'])} {shown(r['parameter'])}: {r['values']:,} values, not compared"
                         for r in doc["not_compared"]],
        "by_signature": [{"members": f"{r['members']:,}", "signature": shown(r["signature"]),
                          "example": shown(r["example"])} for r in doc["by_signature"][:rows]],
        "n_signatures": len(doc["by_signature"]),
        "read": (f"read from {doc['signatures_read']:,} of {doc['failed']:,} failed members"
                 if doc["signatures_read"] < doc["failed"] else ""),
        "by_host": [{"host": shown(r["host"]), "failed": f"{r['failed']:,}", "done": f"{r['done']:,}",
                     "rate": pct(r["rate"])} for r in (doc["by_host"] or [])[:rows]],
        "n_hosts": len(doc["by_host"] or []), "rows": rows,
    }


def sizing_rows(doc: dict[str, Any]) -> dict[str, Any]:
    """The "Right-sizing" section: pwe/observe/usage.py's document as table cells (text; the
    page's renderer escapes them)."""
    from .usage import NOT_MEASURED, cores_suggested

    def three(s: dict | None, digits: str = ".3g") -> str:
        return " / ".join(format(s[k], digits) for k in ("p50", "p95", "max")) if s else ""

    def ask_sug(ask: Any, sug: Any, unit: str) -> str:
        return f"{'none' if ask is None else f'{ask:,g}'} / {'?' if sug is None else f'{sug:,g}'}" + \
            (f" {unit}" if unit else "")

    def hours(h: float | None) -> str:
        return "" if h is None else _hours(h * 3600)

    rows = []
    for nid, u in doc["nodes"].items():
        sug, ask, ch = u["suggested"] or {}, u["asked"], u["core_hours"] or {}
        rows.append({"node": nid, "attempts": u["attempts"], "failed": u["failed"],
                     "reasons": ", ".join(f"{r} {n:,}" for r, n in u["reasons"].items()),
                     "duration": three(u["duration_s"]), "rss": three(u["rss_mb"], ",.0f"), "cpu": three(u["cpu_s"]),
                     "eff": f"{u['cpu_efficiency']:.0%}" if u["cpu_efficiency"] is not None else "",
                     "held": hours(ch.get("held")), "used": hours(ch.get("used")),
                     "memory": ask_sug(ask["memoryPerMember"], sug.get("memoryPerMember"), "MB"),
                     "wall": ask_sug(ask["maxWallTimePerMember"], sug.get("maxWallTimePerMember"), "min"),
                     "cores": (f"{ask['cores']:,g} / {cores_suggested(u)}" if u["attempts"]
                               else ask_sug(ask["cores"], None, "")),
                     "covers": f"{sug['covers']:.1%}" if sug.get("covers") is not None else "",
                     "notes": u["notes"] if u["attempts"] else [NOT_MEASURED]})
    return {"rows": rows, "fit": f"{doc['fit']:.0%}", "memory": f"{doc['headroom']['memory']:.0%}",
            "wall": f"{doc['headroom']['walltime']:.0%}"}


def _timeline(ran: list[tuple], pilots: dict[str, dict], t0: float, span: float, node_ids: list[str]) -> dict:
    """Rows (pilot, slot) and their bars [row, x0, x1, node index, failed, count, label]
    in pixels of :data:`WIDTH`; merged bars where there are too many to draw each."""
    exact = len(ran) <= EXACT_BARS
    px = span / WIDTH
    nix = {nid: k for k, nid in enumerate(node_ids)}
    rows: list[str] = []
    free: dict[str, list[tuple[float, int]]] = {}  # pilot -> heap of (free from, row)
    bars: list[list[Any]] = []
    open_bar: dict[int, list[Any]] = {}
    ticks: list[list[float]] = []
    per_pilot: dict[str, int] = {}
    dropped_rows = 0
    for start, end, nid, i, a, failed, pid in ran:
        heap = free.setdefault(pid, [])
        if heap and heap[0][0] <= start + 1e-3:
            _, row = heapq.heappop(heap)
        else:  # a new row for this pilot (each pilot's rows appear as it fills its cores)
            row = len(rows)
            rows.append(f"{pid} #{per_pilot.get(pid, 0)}")
            per_pilot[pid] = per_pilot.get(pid, 0) + 1
        heapq.heappush(heap, (end, row))
        if row >= MAX_ROWS:
            continue
        x0, x1 = (start - t0) / px, (end - t0) / px
        if failed and not exact and len(ticks) < MAX_TICKS:
            ticks.append([row, round(x0, 1)])
        if exact:
            bars.append([row, round(x0, 2), round(max(x1 - x0, 0.5), 2), nix[nid], int(bool(failed)), 1,
                         f"{nid}[{i}] attempt {a}: {end - start:.3f} s" + (" (failed)" if failed else "")])
            continue
        cur = open_bar.get(row)
        if cur is not None and x0 - (cur[1] + cur[2]) < 1.0 and cur[3] == nix[nid]:
            cur[2] = max(cur[2], x1 - cur[1])
            cur[4] += int(bool(failed))
            cur[5] += 1
        else:
            cur = [row, x0, max(x1 - x0, 0.5), nix[nid], int(bool(failed)), 1, ""]
            bars.append(cur)
            open_bar[row] = cur
    if len(rows) > MAX_ROWS:
        dropped_rows = len(rows) - MAX_ROWS
        rows = rows[:MAX_ROWS]
    if not exact:
        for b in bars:
            b[1], b[2] = round(b[1], 1), round(max(b[2], 0.5), 1)
            b[6] = f"{node_ids[b[3]]}: {b[5]:,} attempts" + (f", {b[4]} failed" if b[4] else "")
    note = (f"every attempt is one bar ({len(ran):,})" if exact else
            f"{len(ran):,} attempts: more than {EXACT_BARS:,}, so the bars of a row closer together than one pixel "
            f"({_duration(px)}) are merged into one bar (its tooltip says how many attempts it holds); "
            f"failed attempts are red ticks" + (f" (the first {MAX_TICKS:,})" if len(ticks) >= MAX_TICKS else ""))
    if dropped_rows:
        note += f"; the first {MAX_ROWS} rows are drawn, {dropped_rows} more are left out"
    return {"rows": rows, "bars": bars, "ticks": ticks, "note": note}


def _utilisation(ran: list[tuple], pilots: dict[str, dict], cores: dict[str, int], t0: float, t1: float) -> dict:
    """Busy and allocated cores per bin of the time axis (WIDTH / 4 bins), and the mean
    of busy / allocated over the run. A pilot's cores count as allocated from its first
    member's start (a batch job waits in its queue before) to its last member's end or
    its end, whichever is later."""
    n = WIDTH // 4
    w = (t1 - t0) / n
    busy = [0.0] * n
    alloc = [0.0] * n

    def add(arr: list[float], a: float, b: float, k: float) -> None:
        lo, hi = (a - t0) / w, (b - t0) / w
        i = max(0, min(n - 1, int(lo)))
        j = max(0, min(n - 1, int(hi)))
        if i == j:
            arr[i] += (hi - lo) * k
            return
        arr[i] += (i + 1 - lo) * k
        for m in range(i + 1, j):
            arr[m] += k
        arr[j] += (hi - j) * k

    span_of: dict[str, list[float]] = {}
    for start, end, nid, _i, _a, _f, pid in ran:
        add(busy, start, end, cores.get(nid, 1))
        s = span_of.setdefault(pid, [start, end])
        s[1] = max(s[1], end)
    for pid, p in pilots.items():
        if pid in span_of:
            a, b = span_of[pid]
            b = max(b, p.get("gone_t") or b)
            add(alloc, a, min(b, t1), p.get("slots") or 1)
    total_alloc = sum(alloc)
    mean = sum(busy) / total_alloc if total_alloc else None
    return {"busy": [round(x, 2) for x in busy], "alloc": [round(x, 2) for x in alloc], "mean": mean, "bin": w}


def _hist(vals: list[float], unit: str) -> dict | None:
    if not vals:
        return None

    def q(p: float) -> float:
        return vals[min(len(vals) - 1, int(p * (len(vals) - 1) + 0.5))]

    lo, hi = vals[0], vals[-1]
    # (a log scale from a least value of a millisecond or a KB up: 5e-324 would make hi / lo infinite)
    log = lo >= DIVISOR_LEAST and hi / lo > 100
    edges = ([lo * (hi / lo) ** (k / BINS) for k in range(BINS + 1)] if log else
             [lo + (hi - lo) * k / BINS for k in range(BINS + 1)])
    counts = [0] * BINS
    if hi == lo:
        counts[0] = len(vals)
    else:
        for v in vals:
            x = (math.log(v / lo) / math.log(hi / lo)) if log else (v - lo) / (hi - lo)
            counts[min(BINS - 1, int(x * BINS))] += 1
    return {"n": len(vals), "unit": unit, "log": log, "edges": [round(e, 4) for e in edges], "counts": counts,
            "min": round(lo, 4), "p50": round(q(0.5), 4), "p90": round(q(0.9), 4), "p99": round(q(0.99), 4),
            "max": round(hi, 4), "mean": round(sum(vals) / len(vals), 4)}


def script_json(data: Any) -> str:
    """JSON to stand inside a ``<script type="application/json">`` element: ``<``, ``>`` and
    ``&`` written as ``\\u003c`` and friends, so no value (a node's name, a pilot's host, a
    parameter) can close the element, open a comment (``<!--``) or start markup; the text
    parses back to the same data."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") \
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _params(plan: Any, nid: str, i: int) -> str:
    return " ".join(f"{k}={v}" for k, v in plan.nodes[nid].space.values_of(i).items())


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _duration(s: float) -> str:
    if s < 1:
        return f"{s * 1000:.1f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _hours(seconds: float) -> str:
    h = seconds / 3600
    return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"
