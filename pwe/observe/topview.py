"""What ``pwe top`` shows, as plain documents: the runs (:func:`runs`, ``pwe runs``' rows),
one run's nodes with their progress and pilots (:func:`run_view`, from ``pwe status``'s
snapshot), the rate each node finishes members at (:func:`rates`, from the counts of
successive views), its members in one state (:func:`members`, ``pwe show --state``'s records
as rows of text), and the panes below them: a member's log tail (:func:`log_tail`, ``pwe
logs``' document), why it is in its state (:func:`explained`, ``pwe explain``'s) and the
run's failures by value (:func:`failures_pane`, ``pwe failures``').

Reading only, as runview.py: nothing here takes the run's lock. Every value that a member,
a user or a run file made is given here as text already :func:`~pwe.base.text.shown` (one
line, each control character written visibly): the terminal draws it as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..base.states import FINAL, NAMES
from ..base.text import inert, shown
from .runview import run_summary, status

#: the states the member list is filtered by, in the order its key cycles through them
#: (those that hold no member of the run are passed over)
FILTERS = ("all", "failed", "running", "queued", "ready", "waiting", "done", "skipped", "cancelled", "quarantined",
           "held")
#: the most members the list shows at once (a run of a million: its first, in a state)
MEMBERS_SHOWN = 500
#: the span (seconds) a node's rate is measured over
RATE_WINDOW = 300.0
#: the most lines of a member's output the log pane shows (of stdout and of stderr each)
LOG_LINES = 200
#: failed members whose last line on stderr the failures pane reads (at each refresh)
SIGNATURES_READ = 200
#: the most characters of one line of a member's output drawn (a line of a megabyte: its start)
LINE_MOST = 1000


def runs(root: Path | None = None) -> list[dict[str, Any]]:
    """Every run ``pwe runs`` lists, newest first: :func:`~pwe.observe.runview.run_summary`'s
    row for each, its ``run_id``, ``from`` and ``state`` shown as text."""
    from ..runstate.rundir import listed

    out = [run_summary(d, where) for d, where in listed(root)]
    for r in out:
        r.update({k: shown(r[k]) for k in ("run_id", "from", "state")})
    return out


def run_view(run_dir: Path, state: Any = None) -> dict[str, Any]:
    """One run as the dashboard's run page shows it: ``run_id``, ``phase`` (``pwe status``'s
    words), ``running`` (an engine holds it), ``finished`` and ``total`` members, ``totals``
    (members per state), ``nodes`` (each: ``node``, ``total``, ``finished``, ``counts`` per
    state), ``pilots`` (:func:`pilots`), ``warnings``. ``state``: the run's
    :class:`~pwe.runstate.state.RunState` when the caller holds one, for the members each
    pilot runs."""
    snap = status(run_dir)
    nodes = []
    for nid, counts in snap["nodes"].items():
        counts = {k: v for k, v in counts.items() if isinstance(v, int)}
        nodes.append({"node": shown(nid), "total": sum(counts.values()),
                      "finished": sum(counts.get(NAMES[s], 0) for s in FINAL), "counts": counts})
    totals = {k: v for k, v in (snap.get("totals") or {}).items() if isinstance(v, int)}
    return {"run_id": shown(snap.get("run_id", run_dir.name)), "phase": shown(snap["phase"]),
            "running": snap["phase"] == "running", "totals": totals,
            "finished": sum(totals.get(NAMES[s], 0) for s in FINAL), "total": sum(totals.values()),
            "nodes": nodes, "pilots": pilots(snap.get("pilots") or {}, state),
            "warnings": [shown(w) for w in snap.get("warnings", [])]}


def pilots(seen: dict[str, dict[str, Any]], state: Any = None) -> list[dict[str, Any]]:
    """Each pilot of ``seen`` (``pwe status``'s, :func:`~pwe.observe.pilotview.pilot_states`):
    ``pilot``, ``state`` (up, gone, unknown), ``where`` (its batch job, or the host its
    process runs on), ``slots``, ``running`` (members it runs now, from ``state``; None
    without one), ``lost`` (nodes of its allocation that died) and ``why``."""
    from ..base.states import RUNNING

    running: dict[str, int] = {}
    if state is not None:
        for ns in state.nodes.values():
            for i, p in ns.pilot.items():  # (members handed to it: queued there, or running)
                if ns.state[i] == RUNNING:
                    running[p] = running.get(p, 0) + 1
    out = []
    for pid, p in seen.items():
        where = f"{p.get('batch') or 'batch'} job {p['job']}" if p.get("job") else f"on {p.get('host')}"
        out.append({"pilot": shown(pid), "state": shown(p.get("state", "?")), "where": shown(where),
                    "slots": p.get("slots"), "running": running.get(pid, 0) if state is not None else None,
                    "lost": [shown(n) for n in (p.get("lost") or {})],
                    "why": shown(p["why"]) if p.get("why") else None})
    return out


def ran(view: dict[str, Any]) -> dict[str, int]:
    """Members per node of a :func:`run_view` that ran to their end (done or failed; not
    those skipped or cancelled): one sample of :func:`rates`."""
    return {n["node"]: n["counts"].get("done", 0) + n["counts"].get("failed", 0) for n in view["nodes"]}


def rates(samples: Sequence[tuple[float, dict[str, int]]], window: float = RATE_WINDOW) -> dict[str, float | None]:
    """Members that ran to their end per second, per node, over the last ``window`` seconds
    of ``samples`` ((time, :func:`ran`), oldest first): from the oldest sample within the
    window to the newest. None for a node while there is not a span to measure over (one
    sample, or samples less than a second apart); a count that went down (a retry took
    members back) measures from where it went down."""
    if not samples:
        return {}
    now, last = samples[-1]
    out: dict[str, float | None] = {}
    for node, count in last.items():
        since, after = None, count
        for t, counts in reversed(samples):  # (back from now, while within the window and not above what followed)
            if now - t > window or node not in counts or counts[node] > after:
                break
            since, after = (t, counts[node]), counts[node]
        out[node] = None if since is None or now - since[0] < 1.0 else (count - since[1]) / (now - since[0])
    return out


def kept(samples: list[tuple[float, dict[str, int]]], window: float = RATE_WINDOW) -> list[tuple[float, dict]]:
    """``samples`` less those older than ``window`` before the newest (bounded: the
    dashboard keeps them while it runs)."""
    if not samples:
        return samples
    now = samples[-1][0]
    return [s for s in samples if now - s[0] <= window]


def next_filter(current: str, totals: dict[str, int]) -> str:
    """The filter after ``current`` in :data:`FILTERS`, passing over states that hold no
    member of the run (``totals``); back to ``all`` after the last."""
    order = list(FILTERS)
    i = order.index(current) if current in order else 0
    for f in order[i + 1:]:
        if totals.get(f):
            return f
    return "all"


def members(run_dir: Path, state: Any, which: str = "all", limit: int = MEMBERS_SHOWN) -> list[dict[str, Any]]:
    """The first ``limit`` members of the run in state ``which`` (``all``: any), as rows of
    text: ``node`` and ``member`` (its index) as they are, for opening it, and ``label``
    (``node[index]``), ``state``, ``attempts``, ``ended`` (exit status or why), ``values``
    (its parameters), each shown as text. ``state``: the run's RunState (read once by the
    caller and kept up to date)."""
    from .results import select

    recs = select(run_dir, state=None if which == "all" else which, limit=limit, loaded=(state, None))
    out = []
    for m in recs:
        ended = m.get("why") or m.get("reason") or ("" if m["exit_status"] is None else f"exit {m['exit_status']}")
        out.append({"node": m["node"], "member": m["member"], "label": shown(f"{m['node']}[{m['member']}]"),
                    "state": m["state"], "attempts": m["attempts"], "ended": shown(ended),
                    "values": " ".join(f"{shown(k)}={shown(v)}" for k, v in m["parameters"].items())})
    return out


def log_tail(run_dir: Path, node: str, index: int, lines: int = LOG_LINES) -> dict[str, Any]:
    """A pane (``title``, ``lines``, ``from_end``: drawn from its last line up) of the last
    ``lines`` lines of a member's stdout and of its stderr (its latest attempt with output;
    ``pwe logs --json --tail``'s document, :func:`~pwe.observe.output.logs_document`):
    stdout's lines, then a ``-- stderr --`` line and stderr's when it wrote any, each
    :func:`~pwe.base.text.inert` with a tab as spaces; or the one line saying why there are
    none (it has not run yet, its output is kept as it ends, it cannot be read)."""
    from ..base.errors import PweError
    from .output import logs_document

    label = shown(f"{node}[{index}]")
    try:
        doc = logs_document(run_dir, node, index, f"{node}:{index}", tail=lines)
    except PweError as exc:
        return {"title": f"log of {label}", "lines": [shown(str(exc))], "from_end": False}
    out: list[str] = []
    for name in ("stdout", "stderr"):
        text = doc.get(name, {}).get("text", "")
        if not text:
            continue
        if name == "stderr":
            out.append("-- stderr --")
        out += [inert(line[:LINE_MOST]).expandtabs(4) for line in text.splitlines()]
    said = f" attempt {doc['attempt']}" if doc.get("attempt") else ""
    return {"title": f"log of {label}{said}", "lines": out or ["(none yet: a member's output is kept as it ends)"],
            "from_end": True}


def explained(run_dir: Path, node: str, index: int, ask: bool = False) -> dict[str, Any]:
    """A pane of why a member is in its state (``pwe explain``'s lines: :mod:`pwe.observe.explain`);
    ``ask``: ask the batch system why a queued pilot job waits (once, not at each refresh)."""
    from ..base.errors import PweError
    from .explain import explain, lines

    label = shown(f"{node}[{index}]")
    try:
        said = lines(explain(run_dir, node, index, ask=ask))
    except PweError as exc:
        said = [str(exc)]
    return {"title": f"explain {label}", "lines": [shown(line) for line in said], "from_end": False}


def failures_pane(run_dir: Path, signatures_read: int = SIGNATURES_READ) -> dict[str, Any]:
    """A pane of the run's failures by parameter value, by reason and by error signature
    (``pwe failures``' lines, :mod:`pwe.observe.failures`, without its view by host: that
    one reads the whole journal); the signatures from at most ``signatures_read`` failed
    members (it is read again at each refresh)."""
    from ..base.errors import PweError
    from .failures import failures, lines

    try:
        said = lines(failures(run_dir, hosts=False, signatures_read=signatures_read))
    except PweError as exc:
        said = [str(exc)]
    return {"title": "failures", "lines": [shown(line) for line in said], "from_end": False}
