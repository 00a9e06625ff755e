"""The commands that show a run: ``runs``, ``status``, ``show``, ``logs``, ``trace`` and
``report``. Every one takes ``--json``; every RUN may be a unique prefix of a run id.

Heavy modules (jinja2, pydantic, networkx, rich) are imported inside the commands that
need them: ``pwe status`` answers from a snapshot file and must start fast.
"""

from __future__ import annotations

import json
import os
import sys
import time

import click

from .base import CHOSEN, COUNT, ChosenPath, Seconds, Whole, echo, fail, find, json_option, warn
from ..base.text import inert, shown
from ..base.errors import PweError


@click.command()
@click.option("--root", default=None, type=ChosenPath(), help="only the runs under this run root")
@json_option
def runs(root: str | None, as_json: bool) -> None:
    """Every run pwe knows, newest first: where it came from (command line, service, trigger
    NAME), state, progress, started, duration. Runs are under ./pwe-runs and the service's
    run root (pwe service status)."""
    from pathlib import Path

    from ..runstate.rundir import listed, roots
    from ..observe.runview import run_summary

    out = [run_summary(d, where) for d, where in listed(Path(root) if root else None)]
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    if not out:
        looked = f"{root}/" if root else ", ".join(f"{r}/" for r, _ in roots())
        echo(f"no runs (looked in {looked})", err=True)
        return
    for r in out:  # (what run.json says: shown as text)
        r.update({k: shown(r[k]) for k in ("run_id", "from", "state")})
    width = max(len(r["run_id"]) for r in out)
    came = max(len(r["from"]) for r in out + [{"from": "from"}])
    echo(f"{'run':<{width}}  {'from':<{came}}  {'state':<24} {'progress':>19}  {'started':<19}  duration")
    for r in out:
        prog = f"{r['finished']:,}/{r['total']:,}" if r["total"] is not None else "?"
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"])) if r["started"] else "?"
        echo(f"{r['run_id']:<{width}}  {r['from']:<{came}}  {r['state'][:24]:<24} {prog:>19}  {started:<19}  "
                   f"{_duration(r['duration'])}")


def _duration(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


@click.command()
@click.argument("run", required=False)
@click.option("--watch", is_flag=True, help="refresh in place until the run ends")
@click.option("--every", default=2.0, show_default=True, type=Seconds(0.1, 3600), help="seconds between refreshes")
@click.option("--usage", "right_size", is_flag=True,
              help="right-sizing: per node p50/p95/max of duration, peak RSS and CPU time, CPU efficiency, "
                   "core-hours held and used, and the memoryPerMember, maxWallTimePerMember and cores per member "
                   "that would have fitted 99% of the members (reads the whole journal)")
@json_option
def status(run: str | None, watch: bool, every: float, right_size: bool, as_json: bool) -> None:
    """Per node: members waiting / queued / running / done / failed, and the core-hours of
    done, running, eligible and waiting work (newest run by default). --usage: what the
    members used against what they asked for, and what to ask for instead."""
    from ..observe.runview import status as run_status

    if right_size and watch:
        echo("pwe status: --usage reads the whole journal once; give it without --watch", err=True)
        sys.exit(2)
    try:
        d = find(run)
        if right_size:
            return _usage(d, as_json)
        while True:
            snap = run_status(d) if not _remote_unfetched(d) else _remote_status(d)
            _damaged_snapshot(d, snap)
            if as_json:
                click.echo(json.dumps(snap, indent=None if watch else 2))
            else:
                text = "\n".join(_status_lines(d, snap))
                if watch and sys.stdout.isatty():
                    click.echo("\x1b[H\x1b[2J" + inert(text))  # home, clear: the same lines redrawn
                else:
                    echo(text + ("\n" if watch else ""))
            if not watch or snap["phase"] != "running":
                break
            time.sleep(every)
    except PweError as exc:
        fail(exc)
    except KeyboardInterrupt:
        sys.exit(130)
    warn(snap.get("warnings", []))


def _usage(d, as_json: bool) -> None:
    """``pwe status --usage``: pwe/observe/usage.py's document, as JSON or as its lines."""
    from ..observe.usage import lines, load

    doc = load(d)
    if as_json:
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
    else:
        echo("\n".join(shown(line) for line in lines(doc)))


def _damaged_snapshot(d, snap: dict) -> None:
    """A state.json that is there but cannot be read is said (its counts came from the
    journal), with what writes it again."""
    from ..runstate.rundir import run_ref
    from ..observe.runview import snapshot

    path = d / "state.json"
    if path.exists() and snapshot(path) is None:
        ref = run_ref(d)
        snap.setdefault("warnings", []).append(
            f"{path} is damaged: these counts are the journal's; `pwe resume {ref}` writes it again")


def _remote_unfetched(d) -> bool:
    """A run staged to a login node (pwe.engine.remote) whose results are not here yet."""
    if (d / "state.json").is_file():
        return False  # (its results are here: pwe.engine.remote is not imported for a local run)
    from ..engine.remote import is_remote

    return is_remote(d)


def _remote_status(d) -> dict:
    """``pwe status`` of a staged run, asked there (one command over ssh)."""
    from ..engine.remote import RemoteRun

    rr = RemoteRun.open(d)
    if rr.info.get("step") in ("stage", "submit"):
        return {"run_id": rr.run_id, "phase": f"not submitted yet (staging to {rr.host.name}); then: pwe resume",
                "nodes": {}, "totals": {}, "run_dir": str(d)}
    try:
        snap = rr.status()
    finally:
        rr.close()
    snap["run_id"], snap["remote_run_dir"], snap["run_dir"] = rr.run_id, snap.get("run_dir"), str(d)
    return snap


def _budget_lines(snap: dict) -> list[str]:
    """The core-hour budget's lines (pwe/engine/budget.py: the snapshot's ``budget``): spent and
    projected of each budget, and why no pilot is submitted on a lane while it says so."""
    b = snap.get("budget")
    if not isinstance(b, dict):
        return []

    from ..engine.budget import shown_ch  # (only for a run with a budget)

    def ch(v) -> str:
        return shown_ch(float(v or 0.0))

    def line(one: dict, whose: str) -> str:
        return (f"core-hours{whose}: {ch(one.get('spent'))} spent, ~{ch(one.get('projected'))} projected of a "
                f"budget of {one.get('limit'):,g}")

    lines = [line(b, "")] if b.get("limit") is not None else []
    lines += [line(h, f" on host '{shown(name)}'") for name, h in (b.get("hosts") or {}).items()
              if isinstance(h, dict) and h.get("limit") is not None]
    if lines and b.get("unmeasured"):
        lines.append(f"  (projected without node(s) {', '.join(map(shown, b['unmeasured']))}: too few members ended "
                     "to measure yet)")
    if snap["phase"] == "running":
        lines += [shown(str(why)) for why in (b.get("refused") or {}).values()]
    return lines


def _run_notes(snap: dict) -> list[str]:
    """The lines ``pwe status`` says of the run above its table: a halt, hosts that do not
    answer or refuse pilots, setups that failed, pilot messages refused."""
    lines: list[str] = []
    halted = snap.get("halted")
    if isinstance(halted, dict) and snap["phase"] == "running":
        lines.append(f"{shown(str(halted.get('why')))} (when: {shown(str(halted.get('when')))}): no new member starts"
                     + ("; what runs finishes" if halted.get("when") == "soon" else ""))
    for name, u in (snap.get("unreachable") or {}).items():
        since = time.strftime("%H:%M:%S", time.localtime(u["since"]))
        from ..engine.scaling import REFUSED  # (only with such a host: not at every status's start)

        if u["why"].startswith(REFUSED):  # (refused submissions: the back-off, pwe/engine/scaling.py)
            lines.append(f"host '{name}': {shown(u['why'])}; since {since}")
            continue
        lines.append(f"host '{name}': its batch system does not answer, since {since} "
                     f"({time.time() - u['since']:.0f} s): {shown(u['why'])}; waiting, nothing new is submitted there")
    for pid_, view in (snap.get("pilot_view") or {}).items() if snap["phase"] == "running" else ():
        if view.get("setup_failed"):  # (pwe/engine/setups.py)
            lines.append(f"pilot {pid_}: setup_per_node failed on {', '.join(view['setup_failed'])}: no member that "
                         "needs it runs there (pwe events RUN shows each)")
    refused = {k: n for k, n in (snap.get("rejected") or {}).items() if k != "resent"}
    if refused:  # (pwe events RUN shows each)
        lines.append("pilot messages refused, never applied: " + ", ".join(f"{n} {k}" for k, n in refused.items()))
    return lines


def _status_lines(d, snap: dict) -> list[str]:
    cols = ["waiting", "queued", "running", "done", "failed", "skipped", "cancelled"]
    for extra in ("quarantined", "held"):
        if (snap.get("totals") or {}).get(extra):
            cols.append(extra)
    lines = []
    engine = snap.get("engine") if snap["phase"] == "running" else None
    held = f" (engine pid {engine.get('pid')} on {engine.get('host')})" if isinstance(engine, dict) else ""
    lines.append(f"{shown(snap.get('run_id', d.name))}: {shown(snap['phase'])}{held}  ({shown(d)})")
    lines += _run_notes(snap)
    width = max([len(n) for n in snap["nodes"]] + [5])
    lines.append(f"{'node':<{width}}  " + "  ".join(f"{c:>9}" for c in cols))
    rows = list(snap["nodes"].items()) + [("total", snap.get("totals", {}))]
    for name, counts in rows:
        vals = {**counts, "waiting": counts.get("waiting", 0) + counts.get("ready", 0)}
        lines.append(f"{name:<{width}}  " + "  ".join(f"{vals.get(c, 0):>9,}" for c in cols))
    for h in snap.get("holds") or []:  # (pwe/engine/holds.py: a value that only fails)
        lines.append(f"held: {shown(h.get('n'))} {shown(h.get('param'))}={shown(h.get('value'))} ({h.get('failed')} "
                     f"failed, none done); pwe release {shown(snap.get('run_id', d.name))} -q "
                     f"'{shown(h.get('param'))}={shown(h.get('value'))}' lets its members go")
    if snap.get("complete"):  # (pwe.planning.products: done without running)
        lines.append("of the done, complete (products), not run: " + ", ".join(
            f"{n} {c:,}" for n, c in snap["complete"].items()))
    if snap.get("reused"):  # (pwe.runstate.reusable: done without running, from earlier runs)
        lines.append("of the done, reused from earlier runs, not run: " + ", ".join(
            f"{n} {c:,}" for n, c in snap["reused"].items()))
    ch = snap.get("core_hours")
    if ch:
        def fmt(v):
            return "?" if v is None else f"{v:,.2f}"

        lines.append("core-hours: " + ", ".join(f"{k} {fmt(ch[k])}" for k in ("done", "failed", "running",
                                                                                 "eligible", "waiting")))
        pending = {n for n, c in snap["nodes"].items()
                   if any(c.get(k) for k in ("running", "ready", "queued", "waiting"))}
        guess = {n: how for n, how in ch["estimated_from"].items() if how != "maxWallTimePerMember" and n in pending}
        if guess:
            lines.append("  (estimates of work not yet done: " + "; ".join(
                f"{n} {how}" for n, how in guess.items()) + "; maxWallTimePerMember where set)")
    lines.extend(_budget_lines(snap))
    pilots = snap.get("pilots") or {}
    if pilots:
        lines.append("pilots: " + "; ".join(
            f"{pid} {p['state']}"
            + (f" ({p['batch']} job {p['job']})" if p.get("job") else f" (on {p.get('host')})")
            + (f": {shown(p['why'])}" if p.get("why") and p["state"] != "up" else "")
            for pid, p in pilots.items()))
        for pid, p in pilots.items():
            for node, when in (p.get("lost") or {}).items():
                at = time.strftime("%H:%M:%S", time.localtime(when)) if isinstance(when, (int, float)) else "?"
                lines.append(f"pilot {pid}: node {node} lost at {at}; its members ran again on the other nodes")
    return lines


@click.command()
@click.argument("run")
@click.option("-q", "--query", default=None,
              help="conditions joined by ';', e.g. 'state=failed; T>300; outputs.energy<1.5' "
                   "(docs: how-to/seeing-a-run.md)")
@click.option("--node", type=CHOSEN, default=None, help="only this node")
@click.option("--state", "only", type=CHOSEN, default=None, help="only members in this state (done, failed, ...)")
@click.option("--limit", default=200, show_default=True, type=COUNT, help="most members listed (0: all)")
@click.option("--tree", is_flag=True, help="the trees of checked nodes: each member under its parent")
@json_option
def show(run: str, query: str | None, node: str | None, only: str | None, limit: int, tree: bool,
         as_json: bool) -> None:
    """Members of RUN with parameters, state, attempts, exit status and outputs."""
    from ..observe.results import select

    if tree:
        return _show_tree(run, node, as_json)

    try:
        out = select(find(run), query, node, only, limit)
    except PweError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps(out, indent=2, default=str))
        return
    for m in out:  # (parameters, outputs, reasons: the user's and the members' values, shown as text)
        params = " ".join(f"{shown(k)}={shown(v)}" for k, v in m["parameters"].items())
        outs = " ".join(f"{shown(k)}={shown(v)}" for k, v in m["outputs"].items())
        rc = "" if m["exit_status"] is None else f"exit={m['exit_status']}"
        why = f" ({shown(m['why'])})" if m.get("why") else ""
        took = f" T={m['T']:g}s" if m.get("T") is not None else ""
        if m.get("set"):  # (pwe set: what its attempts ask for from then on)
            took += f" set({_set_words(m['set'])})"
        if "iteration" in m:  # a checked node's member: its place in its tree (pwe/planning/trees.py)
            took += f" iteration={m['iteration']}" + (f" parent={m['parent']}" if m["parent"] is not None else "") \
                + (f" {m['verdict']}" if m.get("verdict") else "")
        echo(f"{m['node']}[{m['member']}]  {m['state']:<9} attempts={m['attempts']} {rc}{why}{took}  {params}"
                   + (f"  -> {outs}" if outs else ""))
    if limit and len(out) >= limit:
        click.echo(f"(first {limit}; --limit 0 for all)", err=True)


def _set_words(said: dict) -> str:
    """pwe set's values of a member, short: ``memoryPerMember=200, env.FOO=fixed``."""
    words = [f"{k}={v}" for k, v in said.items() if k != "env"]
    words += [f"env.{shown(k)}={shown(v)[:20]}" for k, v in (said.get("env") or {}).items()]
    return ", ".join(words)


def _show_tree(run: str, node: str | None, as_json: bool) -> None:
    """``pwe show RUN --tree``: pwe/observe/treeview.py."""
    from ..observe.treeview import show_trees, tree_lines

    try:
        data = show_trees(find(run), node)
    except PweError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    elif not data:
        echo("no node of this run has a check: no trees", err=True)
    else:
        echo("\n".join(tree_lines(data)))


@click.command()
@click.argument("run")
@click.argument("member", type=CHOSEN)
@click.option("--tail", "tail", type=Whole(1, 1_000_000_000), default=None, metavar="N",
              help="only the last N lines (of each)")
@click.option("--stdout", "want_stdout", is_flag=True,
              help="stdout alone (the default into a pipe or a file; with --stderr: both)")
@click.option("--stderr", "want_stderr", is_flag=True, help="stderr alone (with --stdout: both)")
@click.option("--attempt", "attempt", type=Whole(1, 1_000_000), default=None, metavar="N",
              help="that attempt's (default: the latest that wrote anything)")
@json_option
def logs(run: str, member: str, tail: int | None, want_stdout: bool, want_stderr: bool, attempt: int | None,
         as_json: bool) -> None:
    """A member's stdout and stderr, from its pilot's output stream. MEMBER is NODE:INDEX
    (or 'NODE[INDEX]', quoted: brackets are a glob to zsh; NODE alone for index 0). Into a
    pipe or a file: one channel's bytes exactly as the member wrote them, nothing added
    (stdout unless --stderr is given; --stdout --stderr: both, each under a header). On a
    terminal: both (or the one asked for), each under a header, with control characters and
    bytes that are not UTF-8 written visibly (\\x1b, \\xff)."""
    from ..base.ids import member_spec
    from ..observe.output import last_lines, logs_document, member_output

    spec = member_spec(member)  # (the index in ASCII digits, bounded: \d took '٣', int() of 5,000 a traceback)
    if spec is None:
        echo(f"member {member[:40]!r}: write NODE:INDEX (an index of at most 18 digits), e.g. simulate:3", err=True)
        sys.exit(2)
    node, idx = spec
    tty = sys.stdout.isatty()
    names = _channels(want_stdout, want_stderr, tty or as_json)
    try:
        if as_json:
            click.echo(json.dumps(logs_document(find(run), node, idx, member, tail, channels=names,
                                                attempt=attempt), indent=2))
            return
        got = member_output(find(run), node, idx, member, attempt=attempt)
    except PweError as exc:
        fail(exc)
    out = click.get_binary_stream("stdout")
    try:
        for name in names:
            data = got.text(name)
            if tail:
                data = last_lines(data, tail)
            if not tty and len(names) == 1:  # (the member's bytes, exactly: `pwe logs RUN a:3 > out`)
                out.write(data)
                continue
            said = f" attempt {got.attempt}" if got.attempt else ""
            echo(f"==> {node}[{idx}] {name} ({shown(got.path)}){said} <==")
            nl = bool(data) and not data.endswith(b"\n")  # (the next header on a line of its own)
            # (on a terminal, control characters written visibly: a member's escape
            # sequences would be the terminal's to act on)
            click.echo(inert(data.decode("utf-8", "backslashreplace")) if tty else data, nl=nl)
        out.flush()
    except BrokenPipeError:  # `pwe logs RUN a:3 | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


def _channels(want_stdout: bool, want_stderr: bool, both: bool) -> tuple[str, ...]:
    """The channels pwe logs shows: those asked for; neither asked for, both on a terminal
    (and in --json), else stdout alone (its bytes into a pipe or a file)."""
    if want_stdout or want_stderr:
        return tuple(n for n, w in (("stdout", want_stdout), ("stderr", want_stderr)) if w)
    return ("stdout", "stderr") if both else ("stdout",)


@click.command()
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["tsv", "json"]), default="tsv", show_default=True,
              help="tsv: a header and one line per attempt; json: one JSON object per line")
@click.option("--json", "as_json", is_flag=True, help="the same as --format json")
def trace(run: str, fmt: str, as_json: bool) -> None:
    """One record per member attempt: where and when it ran, how it ended, its CPU time,
    peak memory and outputs (docs: how-to/seeing-a-run.md)."""
    from ..observe.trace import COLUMNS, load, tsv_value

    try:
        _, plan, _, tr = load(find(run), with_state=False)
    except PweError as exc:
        fail(exc)
    out = sys.stdout
    try:
        if as_json or fmt == "json":
            enc = json.JSONEncoder(separators=(",", ":"), default=str).encode
            for rec in tr.records(plan):
                out.write(enc(rec) + "\n")
        else:
            out.write("\t".join(COLUMNS) + "\n")
            for rec in tr.records(plan):
                out.write("\t".join(tsv_value(rec[c]) for c in COLUMNS) + "\n")
        out.flush()
    except BrokenPipeError:  # `pwe trace RUN | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


@click.command()
@click.argument("run")
@click.option("-o", "--output", default=None, type=ChosenPath(dir_okay=False),
              help="where to write it (default: report.html in the run directory)")
@json_option
def report(run: str, output: str | None, as_json: bool) -> None:
    """Write one self-contained HTML page about RUN: summary, timeline, utilisation,
    durations and memory per node, right-sizing, failures, pilots. Prints where it is."""
    import os
    from pathlib import Path

    from ..observe.report import build

    warnings: list[str] = []
    try:
        d = find(run)
        html = build(d, warnings)
    except PweError as exc:
        fail(exc)
    warn(warnings)
    path = Path(output) if output else d / "report.html"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            fh.write(html)  # owner-only, as the run directory is
        os.replace(tmp, path)  # a reader never opens half a page
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        echo(f"{path}: cannot write the report ({exc.strerror}): give another place with -o", err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps({"report": str(path), "bytes": len(html.encode())}))
    else:
        echo(str(path))


COMMANDS = (runs, status, show, logs, trace, report)
