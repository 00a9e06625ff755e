"""What a run's failures have in common (``pwe failures``, the report, the dashboards).

One document, four views of the members that failed for good (state ``failed``, and
``quarantined``: lost with their pilot or node ``maxLosses`` times):

- ``by_value``: each parameter's each value, per node, with the members of that value
  that failed and that are done, its failure rate, and the **difference**: the share of
  the node's failed members that have this value less the share of its done members that
  have it (FireWorks' ``lpad introspect``), in points. A value that every failure has and
  no success has is +100; the values most over-represented come first. Counted on the
  state's bytes by arithmetic (a value of a product of parameters is a strided slice of
  them), never member by member: a million members cost milliseconds here.
- ``by_reason``: ``exit N``, ``signal N`` (only when the pilot saw one), ``oom``,
  ``walltime``, ``straggler``, ``invalid`` (exited 0, but a product was missing or short, or
  its ``validate`` failed), ``lost`` (quarantined), ``no product`` (runs before ``invalid``), ...
- ``by_signature``: the last line a failed member wrote to stderr, with numbers, paths
  and hexadecimal folded (``<n>``, ``<path>``, ``<hex>``), so that one error with many
  values is one line; from at most :data:`SIGNATURES_READ` failed members, spread over
  them (the document says how many were read).
- ``by_host``: each machine the attempts ran on, with the attempts that failed and that
  succeeded there (attempts, not members: a member that failed on a bad node and then
  succeeded elsewhere still counts against that node). This view reads the journal
  whole (:mod:`pwe.observe.trace`); ``hosts=False`` leaves it out.

Read-only: no lock, no engine.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..base.states import DONE, FAILED, QUARANTINED
from ..base.source import value_text
from ..base.text import shown
from ..runstate.byvalue import value_counts

#: failed members whose stderr is read for their signature (spread evenly over them)
SIGNATURES_READ = 2000
#: values of one parameter compared at most: past it the parameter is counted as one row
#: saying so (a parameter with a value a member says nothing in common)
VALUES_COMPARED = 10_000
#: rows a view lists in the text (the JSON has them all)
SHOWN = 10

_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.\-~]*/)+[\w.\-]+")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-fA-F]{8,}\b")
_NUM = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def signature(line: str) -> str:
    """An error line with what varies from member to member folded: paths, hexadecimal,
    numbers; blanks squeezed. ``'Error: /scratch/u/run7/x.h5: 1e-3 > 0.5'`` and the same
    error of another member are one signature."""
    s = _PATH.sub("<path>", line.strip()[:400])
    s = _HEX.sub("<hex>", s)
    s = _NUM.sub("<n>", s)
    return " ".join(s.split())[:200]


def failures(run_dir: Path, hosts: bool = True, signatures_read: int = SIGNATURES_READ,
             loaded: tuple[dict[str, Any], Any, Any] | None = None) -> dict[str, Any]:
    """The document (see the module's docstring) of the run in ``run_dir``. ``loaded``:
    (run.json, state, trace or None) a caller has read already (the report's one replay,
    the dashboard's runs kept read), so that the journal is not replayed again; its trace
    None leaves the view by host out."""
    from .results import load_state

    tr = None
    if loaded is not None:
        info, st, tr = loaded
        tr = tr if hosts else None
    else:
        info, st = load_state(Path(run_dir))
    nodes: dict[str, dict[str, int]] = {}
    by_value: list[dict[str, Any]] = []
    not_compared: list[dict[str, Any]] = []
    reasons: dict[str, int] = {}
    failed_total = done_total = 0
    for nid, ns in st.nodes.items():
        f = ns.counts[FAILED] + ns.counts[QUARANTINED]
        d = ns.counts[DONE]
        nodes[nid] = {"members": ns.size, "failed": f, "done": d}
        failed_total += f
        done_total += d
        if not f:
            continue
        by_value += _by_value(nid, st.plan.nodes[nid].space, ns.state, f, d, not_compared)
        for i in _failed(ns):
            why = _reason(ns, i)
            reasons[why] = reasons.get(why, 0) + 1
    by_value.sort(key=lambda r: (-r["difference"], -r["failed"], r["node"], r["parameter"], r["value"]))
    doc: dict[str, Any] = {
        "run": info.get("run_id"), "failed": failed_total, "done": done_total, "nodes": nodes,
        "by_value": by_value, "not_compared": not_compared,
        "by_reason": [{"reason": k, "members": n} for k, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))],
    }
    doc.update(_signatures(Path(run_dir), st, failed_total, signatures_read))
    if tr is not None:
        doc["by_host"] = _by_host(tr)
    elif hosts and loaded is None:
        doc["by_host"] = _hosts_of(Path(run_dir), st)
    else:
        doc["by_host"] = None
    return doc


def _failed(ns: Any):
    """The members of a node that failed for good, in order."""
    for code in (FAILED, QUARANTINED):
        if not ns.counts[code]:
            continue
        i = ns.state.find(code)
        while i >= 0:
            yield i
            i = ns.state.find(code, i + 1)


def _reason(ns: Any, i: int) -> str:
    reason = ns.reason.get(i)
    if reason == "quarantined":
        return "lost"
    if reason and reason != "exit":
        return str(reason)
    why = ns.why.get(i) or ""
    if why.startswith("killed by signal "):
        return "signal " + why[len("killed by signal "):]
    if "without making its product" in why:
        return "no product"
    return f"exit {ns.rc.get(i, '?')}"


def _by_value(nid: str, space: Any, state: bytearray, failed: int, done: int,
              skipped: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each value of each parameter of one node: failed, done, rate, difference (points);
    a parameter with more than :data:`VALUES_COMPARED` values goes to ``skipped``."""
    rows: list[dict[str, Any]] = []
    for k, name in enumerate(space.names):
        values = space.values[name]
        n = len(values)
        if n > VALUES_COMPARED:
            skipped.append({"node": nid, "parameter": name, "values": n})
            continue
        counts: dict[str, list[int]] = {}
        for p, (fp, dp) in enumerate(value_counts(space, state, k)):
            got = counts.setdefault(value_text(values[p]), [0, 0])
            got[0] += fp
            got[1] += dp
        for text, (fp, dp) in counts.items():
            if not fp and not dp:
                continue
            diff = (fp / failed if failed else 0.0) - (dp / done if done else 0.0)
            rows.append({"node": nid, "parameter": name, "value": text, "failed": fp, "done": dp,
                         "rate": round(fp / (fp + dp), 4), "difference": round(100 * diff, 1)})
    return rows


def _signatures(run_dir: Path, st: Any, failed_total: int, most: int) -> dict[str, Any]:
    """The failed members' last stderr lines, folded, counted; from at most ``most``."""
    from pilot.streams import Reader

    from .output import stderr_tail

    every = max(1, -(-failed_total // most)) if most else 0
    sigs: dict[str, list[Any]] = {}
    read = 0
    if every:
        with Reader(str(run_dir / "pilots"), many=failed_total > 50) as reader:
            k = 0
            for nid, ns in st.nodes.items():
                for i in _failed(ns):
                    k += 1
                    if (k - 1) % every:
                        continue
                    read += 1
                    last = stderr_tail(run_dir, nid, i, reader, lines=1)
                    sig = signature(last) if last.strip() else "(nothing on stderr)"
                    got = sigs.setdefault(sig, [0, f"{nid}:{i}", last.strip()[:200]])
                    got[0] += 1
    rows = [{"signature": s, "members": c, "example": ex, "line": line}
            for s, (c, ex, line) in sorted(sigs.items(), key=lambda kv: (-kv[1][0], kv[0]))]
    return {"by_signature": rows, "signatures_read": read}


def _by_host(tr: Any) -> list[dict[str, Any]]:
    """Attempts that ended, by the machine they ran on: failed and done there."""
    hosts: dict[str, list[int]] = {}
    pilots = tr.pilots
    for a in tr.attempts.values():
        rc, nodes, ended, reason = a[3], a[10], a[11], a[12]
        if a[1] is None or ended in ("halted", "cancelled") or (rc is None and ended != "lost"):
            continue  # (not started, or not ended there: running, stopped by a halt or a cancel)
        where = nodes[0] if nodes else (pilots.get(a[9]) or {}).get("host") or "?"
        got = hosts.setdefault(str(where), [0, 0])
        if ended == "lost" or rc != 0 or reason:
            got[0] += 1
        else:
            got[1] += 1
    return _rows(hosts)


class _HostTally:
    """Attempts that ended, by the machine they ran on, from one pass over the journal's
    records (:func:`pwe.runstate.journal.replay`): only the attempts in flight are held, not
    a trace of every attempt (at a million members, a tenth of the time and the memory).
    The same rules as :class:`pwe.observe.trace.Trace` where they touch this: a start
    without nodes ran on its pilot's host; an attempt taken back after it started (its pilot
    or node lost) failed there, one stopped by a halt did not end there."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = sizes
        self.host_of: dict[str, str] = {}  # pilot -> its host
        self.live: dict[tuple[str, int, int], list[Any]] = {}  # (node, member, attempt) -> [pilot, machine]
        self.tally: dict[str, list[int]] = {}  # machine -> [failed, done]

    def take(self, r: dict[str, Any]) -> None:
        from ..runstate.journal import each

        for one in each(r, self.sizes.__getitem__):
            self._take(one)

    def _take(self, r: dict[str, Any]) -> None:
        from ..runstate.journal import ASSIGN, END, PILOT, START, UNASSIGN

        e = r["e"]
        if e == ASSIGN:
            self.live[(r["n"], r["m"], r["a"])] = [r["p"], None]
        elif e == START:
            got = self.live.get((r["n"], r["m"], r["a"]))
            if got is not None and got[1] is None:
                nodes = r.get("nodes")
                got[1] = str(nodes[0]) if nodes else self.host_of.get(got[0], "?")
        elif e == END or e == UNASSIGN:
            got = self.live.pop((r["n"], r["m"], r.get("a")), None)
            if got is None or got[1] is None or (e == UNASSIGN and r.get("halted")):
                return
            row = self.tally.setdefault(got[1], [0, 0])
            row[0 if e == UNASSIGN or r.get("rc") or r.get("reason") else 1] += 1
        elif e == PILOT:
            self.host_of[r["p"]] = str(r.get("host") or "?")


def _hosts_of(run_dir: Path, st: Any) -> list[dict[str, Any]]:
    """:func:`_by_host`'s rows from one light pass over the journal (:class:`_HostTally`)."""
    from ..runstate.journal import replay

    tally = _HostTally({nid: ns.size for nid, ns in st.nodes.items()})
    replay(run_dir / "journal.jsonl", tally.take)
    return _rows(tally.tally)


def _rows(hosts: dict[str, list[int]]) -> list[dict[str, Any]]:
    rows = [{"host": h, "failed": f, "done": d, "rate": round(f / (f + d), 4)} for h, (f, d) in hosts.items()]
    rows.sort(key=lambda r: (-r["rate"], -r["failed"], r["host"]))
    return rows


def lines(doc: dict[str, Any], shown_rows: int = SHOWN) -> list[str]:
    """``pwe failures`` in text: each view's first rows. What members and users named
    (values, lines, hosts) is shown inert (:func:`pwe.base.text.shown`)."""
    out = [f"run {shown(str(doc['run']))}: {doc['failed']:,} failed, {doc['done']:,} done"]
    if not doc["failed"]:
        out.append("no member failed")
        return out
    out.append("")
    out.append("by parameter value (the values most over-represented among the failures first):")
    out.append(f"  {'node':<12} {'parameter':<12} {'value':<16} {'failed':>8} {'done':>8} {'rate':>6} {'diff':>7}")
    for r in doc["by_value"][:shown_rows]:
        out.append(f"  {shown(r['node']):<12} {shown(r['parameter']):<12} {shown(r['value'])[:16]:<16} "
                   f"{r['failed']:>8,} {r['done']:>8,} {r['rate']:>6.0%} {r['difference']:>+7.0f}")
    out += [f"  ({shown(r['node'])} {shown(r['parameter'])}: {r['values']:,} values, not compared)"
            for r in doc["not_compared"]]
    out.append("")
    out.append("by reason:")
    out += [f"  {r['members']:>8,}  {shown(r['reason'])}" for r in doc["by_reason"][:shown_rows]]
    out.append("")
    of = f" (read from {doc['signatures_read']:,} of {doc['failed']:,})" if doc["signatures_read"] < doc["failed"] \
        else ""
    out.append(f"by error signature, the last line on stderr{of}:")
    out += [f"  {r['members']:>8,}  {shown(r['signature'])}  (e.g. {shown(r['example'])})"
            for r in doc["by_signature"][:shown_rows]]
    if doc.get("by_host"):
        out.append("")
        out.append("by host (attempts: failed / done there):")
        out += [f"  {r['failed']:>8,} / {r['done']:<8,} {r['rate']:>5.0%}  {shown(r['host'])}"
                for r in doc["by_host"][:shown_rows]]
    return out
