"""What ``pwe top``'s screens draw, as rich ``Text`` (pwe/cli/topapp.py places it): the lines
of a run's nodes with progress bars and rates, its pilots' line, a run's row in the list of
runs, the keys. The values come from pwe/observe/topview.py, shown as text already; they
are put into ``Text`` as they are, never read as markup."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text

#: the most nodes the run page lists (a line each); more are said in one line
NODES_SHOWN = 5

#: how a member's state is drawn
STATE_STYLE = {"failed": "bold red", "running": "yellow", "done": "green", "quarantined": "red",
               "cancelled": "dim", "skipped": "dim", "held": "magenta"}


def line(text: str, style: str = "") -> Text:
    """``text`` on one line, cut with an ellipsis where the room ends."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def crop(text: str, most: int) -> Text:
    """``text`` cut to ``most`` characters, the last an ellipsis when cut."""
    return Text(text if len(text) <= most else text[:most - 1] + "…")


def bar(done: int, failed: int, total: int, width: int) -> Text:
    """A progress bar of ``width`` cells: done in green, failed in red, the rest dim."""
    if total <= 0 or width <= 0:
        return Text(" " * max(width, 0))
    ok = round(width * done / total)
    bad = min(width - ok, round(width * failed / total) or (1 if failed else 0))
    return Text.assemble(("█" * ok, "green"), ("█" * bad, "red"), ("░" * (width - ok - bad), "dim"))


def count(n: int) -> str:
    """A count in at most 7 characters: 123,456 as it is, past it 1.23M, 45.6G, 789T, 1e+15."""
    if n < 10**6:
        return f"{n:,}"
    for unit, size in (("M", 10**6), ("G", 10**9), ("T", 10**12)):
        said = f"{n / size:.3g}"
        if "e" not in said:  # (999.9996M is 1G, not 1e+03M)
            return said + unit
    return f"{n:.0e}"


def _rate(r: float | None) -> str:
    if r is None:
        return "-"
    return f"{r:.2g}/s" if r < 10 else f"{count(round(r))}/s"


def node_lines(view: dict[str, Any], rates: dict[str, float | None], width: int) -> Text:
    """The run page's nodes, a line each of ``width`` at most: name, bar, finished/total,
    running, failed, rate; past :data:`NODES_SHOWN` nodes, the others summed on one line."""
    nodes = view["nodes"]
    shown_nodes = nodes if len(nodes) <= NODES_SHOWN else nodes[:NODES_SHOWN - 1]
    name_w = min(16, max([len(n["node"]) for n in shown_nodes] + [4]))
    rows = []
    for n in shown_nodes:
        c = n["counts"]
        finished = f"{count(n['finished'])}/{count(n['total'])}"
        tail = (f" {finished:>11}  run {count(c.get('running', 0)):<4} fail {count(c.get('failed', 0)):<4} "
                f"{_rate(rates.get(n['node'])):>7}")
        bar_w = max(4, width - name_w - len(tail) - 2)
        rows.append(Text.assemble(f"{n['node'][:name_w]:<{name_w}} ", bar(c.get("done", 0), c.get("failed", 0),
                                                                          n["total"], bar_w), tail))
    if len(nodes) > len(shown_nodes):
        rest = nodes[len(shown_nodes):]
        rows.append(Text(f"… {len(rest):,} nodes more: {count(sum(n['finished'] for n in rest))}/"
                         f"{count(sum(n['total'] for n in rest))} finished"))
    for r in rows:  # (a narrow terminal: each line cut, never wrapped onto the next)
        r.truncate(width, overflow="ellipsis")
    return Text("\n", no_wrap=True).join(rows)


def pilot_line(view: dict[str, Any]) -> Text:
    """The run's pilots (two lines at most are drawn): how many in each state, then each,
    those up first: id, state, where, slots, members it runs, nodes of it lost."""
    ps = view["pilots"]
    if not ps:
        return line("pilots: none yet", "dim")
    states: dict[str, int] = {}
    for p in ps:
        states[p["state"]] = states.get(p["state"], 0) + 1
    said = []
    for p in sorted(ps, key=lambda p: p["state"] != "up"):
        run = f" running {p['running']}" if p["running"] else ""
        lost = f" lost {','.join(p['lost'])}" if p["lost"] else ""
        said.append(f"{p['pilot']} {p['state']} {p['where']} {p['slots'] or '?'} slots{run}{lost}")
    head = "pilots: " if len(ps) == 1 else f"pilots ({', '.join(f'{n} {k}' for k, n in states.items())}): "
    return Text(head + "; ".join(said))


def run_cells(r: dict[str, Any]) -> list[Text]:
    """A run's row: id, state, progress, when it started (80 columns hold it: each cell is cropped)."""
    prog = f"{r['finished']:,}/{r['total']:,}" if r["total"] is not None else "?"
    started = "?"
    if r["started"]:
        fmt = "%H:%M:%S" if time.time() - r["started"] < 86400 else "%Y-%m-%d"
        started = time.strftime(fmt, time.localtime(r["started"]))
    bar_cells = bar(r["finished"], 0, r["total"] or 0, 6) if r["total"] else Text("")
    return [crop(r["run_id"], 26), crop(r["state"], 16), Text.assemble(bar_cells, f" {prog}"), Text(started)]


#: the keys (? shows them)
HELP = """pwe top: keys

runs   up/down  move                     enter  open the run
run    up/down  move among the members   pgup/pgdn, home/end (g/G)
       f  filter the members by state: all, failed, running, ...
       l  the log tail of the selected member   (the key again: close)
       e  why the selected member is in its state (pwe explain)
       v  the run's failures by parameter value, reason, error
       j/k  scroll that pane down/up
       c  cancel the run (asks y/n: pwe cancel)
       r  retry its failed members (asks y/n: pwe retry --detach)
       escape  back to the runs
any    ?  these keys (any key closes them)    q  quit

Refreshes every --every seconds; reads the runs, never takes their lock."""
