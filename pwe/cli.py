"""The ``pwe`` command line.

Every command that reads input maps :class:`~pwe.errors.InputError` to one line on
stderr (``FILE:LINE: message``) and exit status 2; no traceback reaches a user.
Every listing takes ``--json``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .errors import PweError

# Heavy modules (pydantic, networkx, jinja2, rich) are imported inside the commands that
# need them: `pwe status` answers from a snapshot file and must start fast.


def _console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _fail(exc: PweError) -> None:
    click.echo(str(exc), err=True)
    sys.exit(exc.exit_status)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pwe")
def cli() -> None:
    """pwe: parameterized DAG workflows on HPC clusters, with glide-in pilots."""


def _warn(warnings: list[str]) -> None:
    for w in warnings:
        click.echo(f"warning: {w}", err=True)


_set_option = click.option(
    "--set", "sets", multiple=True, metavar="NAME=VALUE", help="override or add a property (repeatable)"
)
_json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output")


def _param_summary(plan, nid: str) -> str:
    space = plan.nodes[nid].space
    if not space.names:
        return "-"
    sep = " x " if space.combine == "product" else " zip "
    return sep.join(f"{n}({len(space.values[n])})" for n in space.names)


def _checked(file: str, sets: tuple[str, ...], host: str | None, hosts_file: str | None):
    """(plan, hosts used, warnings): as the engine checks a run before it makes anything."""
    from .load import parse_sets
    from .placement import plan_for_hosts

    return plan_for_hosts(file, parse_sets(sets), host=host, hosts_file=hosts_file)


def _summary(plan, warnings: list[str]) -> dict[str, Any]:
    path, length = plan.critical_path()
    return {
        "workflow": plan.workflow.name,
        "file": str(plan.file),
        "total_members": plan.total_members,
        "nodes": [
            {
                "id": nid,
                "members": n.size,
                "parameters": {p: len(n.space.values[p]) for p in n.space.names},
                "combine": n.space.combine,
                "host": n.host,
                "after": list(n.spec.after),
                "retries": n.retries,
                "cores_per_member": n.scheduling.cores_per_member(),
            }
            for nid, n in plan.nodes.items()
        ],
        "edges": [
            {"from": e.src, "to": e.dst, "matching": "barrier" if e.barrier else "matched", "on": list(e.shared)}
            for e in plan.edges
        ],
        "critical_path": path,
        "critical_path_minutes": length,
        "warnings": warnings,
    }


_hosts_option = click.option("--hosts", "hosts_file", default=None, type=click.Path(), help="a hosts.yaml to read too")


@cli.command()
@click.argument("file", type=click.Path(dir_okay=True))
@_set_option
@_hosts_option
@_json_option
def validate(file: str, sets: tuple[str, ...], hosts_file: str | None, as_json: bool) -> None:
    """Parse and check FILE (and that every node's host exists and fits it); print its nodes, members and edges."""
    try:
        plan, _, warnings = _checked(file, sets, None, hosts_file)
    except PweError as exc:
        _fail(exc)
    summary = _summary(plan, warnings)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    from rich.table import Table

    con = _console()
    con.print(
        f"[bold]{plan.workflow.name}[/]: {len(plan.nodes)} nodes, "
        f"[bold]{plan.total_members:,}[/] members, {len(plan.edges)} edges  ({plan.file})"
    )
    table = Table(box=None, pad_edge=False)
    for col, just in (("node", "left"), ("members", "right"), ("parameters", "left"), ("cores", "right"),
                      ("host", "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for n in summary["nodes"]:
        table.add_row(n["id"], f"{n['members']:,}", _param_summary(plan, n["id"]), str(n["cores_per_member"]),
                      n["host"])
    con.print(table)
    if plan.edges:
        et = Table(box=None, pad_edge=False, title=None)
        et.add_column("edge")
        et.add_column("matching")
        for e in plan.edges:
            et.add_row(f"{e.src} -> {e.dst}", e.describe())
        con.print(et)
    path = summary["critical_path"]
    extra = f" ({summary['critical_path_minutes']:g} min per member chain)" if summary["critical_path_minutes"] else ""
    con.print(f"critical path: {' -> '.join(path)}{extra}")
    _warn(warnings)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=True))
@_set_option
@click.option("--host", default=None, help="run every node on this host instead of the file's")
@click.option("--members", "show", default=3, show_default=True, help="members shown per node")
@_hosts_option
@_json_option
def plan(file: str, sets: tuple[str, ...], host: str | None, show: int, hosts_file: str | None,
         as_json: bool) -> None:
    """Show the expansion of FILE and the commands its first members would run (dry run)."""
    try:
        from .placement import preview_pilot_script

        p, used, warnings = _checked(file, sets, host, hosts_file)
        scripts = {name: script for name, h in used.items() if (script := preview_pilot_script(p, h)) is not None}
        shown: dict[str, list[dict[str, Any]]] = {}
        for nid, n in p.nodes.items():
            idx = list(range(min(show, n.size)))
            if n.size > show:
                idx.append(n.size - 1)
            shown[nid] = [
                {"member": i, "parameters": n.space.values_of(i), "command": p.render(nid, i)} for i in idx
            ]
    except PweError as exc:
        _fail(exc)
    summary = _summary(p, warnings)
    if as_json:
        for node in summary["nodes"]:
            node["members_shown"] = shown[node["id"]]
            node["scheduling"] = p.nodes[node["id"]].scheduling.model_dump(exclude_none=True)
        summary["pilot_scripts"] = scripts
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    con = _console()
    from rich.markup import escape

    con.print(f"[bold]{p.workflow.name}[/]: {p.total_members:,} members in {len(p.nodes)} nodes")
    for nid, n in p.nodes.items():
        deps = ", ".join(f"{e.src} ({e.describe()})" for e in p.edges_into(nid)) or "nothing"
        con.print(f"\n[bold]{nid}[/]  {n.size:,} members  {_param_summary(p, nid)}  host={n.host}  "
                  f"cores/member={n.scheduling.cores_per_member()}  after: {deps}")
        sched = n.scheduling.model_dump(exclude_none=True)
        if sched:
            con.print("  scheduling: " + ", ".join(f"{k}={v}" for k, v in sched.items()))
        last = None
        for m in shown[nid]:
            if last is not None and m["member"] != last + 1:
                con.print("  ...")
            params = " ".join(f"{k}={v}" for k, v in m["parameters"].items())
            con.print(f"  [{m['member']}] {escape(params)}")
            con.print(f"      $ {escape(m['command'].rstrip())}")
            last = m["member"]
    for name, script in scripts.items():
        con.print(f"\n[bold]first pilot job for host {name}[/] (RUN_DIR and RUN are filled in at submission):")
        con.print(escape(script), end="")
    _warn(warnings)


# -- running ------------------------------------------------------------------------------

_run_options = [
    click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="override or add a property"),
    click.option("--host", default=None, help="run every node on this host"),
    click.option("--run-dir", default=None, type=click.Path(), help="run directory (default ./pwe-runs/RUN-ID)"),
    click.option("--cores", type=click.IntRange(1), default=None, help="cores of this machine to fill (default: all)"),
    _hosts_option,
]


def _with_run_options(f):
    for opt in reversed(_run_options):
        f = opt(f)
    return f


def _create(file: str, sets: tuple[str, ...], host: str | None, run_dir: str | None, cores: int | None,
            hosts_file: str | None):
    from .engine import Engine
    from .load import parse_sets

    return Engine.create(file, parse_sets(sets), host=host, cores=cores, run_dir=run_dir, hosts_file=hosts_file)


def _follow(engine, **kwargs) -> None:
    """Run the engine in the foreground with a progress display; exit 0 / 1."""
    from .state import NAMES

    total = engine.plan.total_members
    ref = _ref(engine)
    live = sys.stderr.isatty()
    bar = None
    last_line = [0.0]
    if live:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("{task.fields[extra]}"), TimeElapsedColumn(), transient=False)
        task = bar.add_task(engine.run_id, total=total, extra="")
        bar.start()

    def progress(st) -> None:
        t = st.totals()
        finished = t[4] + t[5] + t[6] + t[7]
        extra = f"running {t[3]}  failed {t[5]}" + (f"  skipped {t[6]}" if t[6] else "")
        if bar is not None:
            bar.update(task, completed=finished, extra=extra)
        else:
            import time as _t

            now = _t.time()
            if now - last_line[0] >= 5 or finished == total:
                last_line[0] = now
                click.echo(f"{engine.run_id}: {finished}/{total} finished, {extra}", err=True)

    from .errors import RunStopped

    try:
        ok = engine.run(progress=progress, **kwargs)
    except RunStopped as exc:
        if bar is not None:
            bar.stop()
        click.echo(f"{engine.run_id}: stopped with its state intact: {exc}; then: pwe resume {ref}", err=True)
        sys.exit(exc.exit_status)
    except KeyboardInterrupt:
        if bar is not None:
            bar.stop()
        click.echo(f"cancelled; `pwe retry {ref}` runs what was left", err=True)
        sys.exit(130)
    finally:
        if bar is not None:
            bar.stop()
    t = engine.state.totals()
    parts = [f"{t[k]} {NAMES[k]}" for k in (4, 5, 6, 7) if t[k] or k == 4]
    click.echo(f"{engine.run_id}: {', '.join(parts)} of {total}  ({engine.dir})")
    if t[5]:
        shown = _failed_examples(engine, limit=3)
        for _, line in shown:
            click.echo(line, err=True)
        click.echo(f"see: pwe show {ref} --state failed", err=True)
        if shown:  # NODE:INDEX, not NODE[INDEX]: brackets are a glob to the shell it is pasted into
            click.echo(f"see: pwe logs {ref} {shown[0][0]}", err=True)
    sys.exit(0 if ok else 1)


def _failed_examples(engine: Any, limit: int) -> list[tuple[str, str]]:
    """(NODE:INDEX, a line) for the first few failed members: exit status or reason, and
    the last line the member wrote to stderr (what a user looks for first)."""
    from .rundir import member_dir
    from .state import FAILED

    lines: list[tuple[str, str]] = []
    for nid, ns in engine.state.nodes.items():
        i = ns.state.find(FAILED) if ns.counts[FAILED] else -1
        while i >= 0 and len(lines) < limit:
            what = ns.why.get(i) or f"exit {ns.rc.get(i)}"
            tail = ""
            try:
                with open(member_dir(engine.dir, nid, i) / "stderr", "rb") as fh:
                    fh.seek(max(0, fh.seek(0, 2) - 4096))
                    last = fh.read().decode("utf-8", "replace").strip().splitlines()
                tail = f"  | {last[-1][:120]}" if last else ""
            except OSError:
                pass
            lines.append((f"{nid}:{i}", f"  {nid}[{i}] failed: {what}{tail}"))
            i = ns.state.find(FAILED, i + 1)
        if len(lines) >= limit:
            break
    return lines


def _ref(engine) -> str:
    """How to name this run on the command line: its id under ./pwe-runs, else its path."""
    from .rundir import DEFAULT_ROOT

    try:
        if (DEFAULT_ROOT / engine.run_id).resolve() == engine.dir:
            return engine.run_id
    except OSError:
        pass
    return str(engine.dir)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=True))
@_with_run_options
def run(file, sets, host, run_dir, cores, hosts_file) -> None:
    """Run FILE to the end with a progress bar; exit 0 when every member succeeded, else 1."""
    try:
        engine = _create(file, sets, host, run_dir, cores, hosts_file)
        click.echo(f"run {engine.run_id}  ({engine.dir})", err=True)
        _warn(engine.warnings)
        _follow(engine)
    except PweError as exc:
        _fail(exc)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=True))
@_with_run_options
def submit(file, sets, host, run_dir, cores, hosts_file) -> None:
    """Start a run of FILE in the background and print its run id."""
    try:
        engine = _create(file, sets, host, run_dir, cores, hosts_file)
    except PweError as exc:
        _fail(exc)
    _warn(engine.warnings)
    _spawn_engine(engine.dir)
    click.echo(engine.run_id)


@cli.command()
@click.option("--run", "run_dir", required=True, type=click.Path(), help="the run directory")
@click.option("--pilot", required=True, help="the pilot id (p1, p2, ...)")
@click.argument("event", type=click.Choice(["queued", "started", "ended"]))
@click.argument("job")
@click.argument("status", required=False, type=int)
def notify(run_dir: str, pilot: str, event: str, job: str, status: int | None) -> None:
    """User-exit callback for a batch job's edge events (called from job scripts)."""
    from pathlib import Path

    from .notify import send

    d = Path(run_dir)
    if not (d / "secret").is_file():
        click.echo(f"{d}: not a pwe run directory (no secret)", err=True)
        sys.exit(2)
    send(d, pilot, event, job, status)


@cli.group()
def hosts() -> None:
    """The host registry: built-in local, ~/.config/pwe/hosts.yaml, hosts.yaml beside a workflow."""


def _registry(workflow: str | None, hosts_file: str | None):
    from pathlib import Path

    import hostinfo

    return hostinfo.load(Path(workflow) if workflow else None, hosts_file)


@hosts.command(name="list")
@_hosts_option
@click.option("--workflow", default=None, type=click.Path(), help="also read the hosts.yaml beside this workflow")
@_json_option
def hosts_list(hosts_file: str | None, workflow: str | None, as_json: bool) -> None:
    """Every known host: protocol, contact, cores per node, nodes, where it was defined."""
    try:
        reg = _registry(workflow, hosts_file)
    except PweError as exc:
        _fail(exc)
    rows = [{"name": n, "protocol": h.protocol, "contact": h.contact, "cores_per_node": h.cores_per_node,
             "nodes": len(h.nodes) or None, "source": reg.sources[n]} for n, h in sorted(reg.hosts.items())]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'host':<16} {'protocol':<11} {'contact':<28} {'cores/node':>10} {'nodes':>5}  defined in")
    for r in rows:
        click.echo(f"{r['name']:<16} {r['protocol']:<11} {r['contact']:<28} {r['cores_per_node'] or '?':>10} "
                   f"{r['nodes'] or '-':>5}  {r['source']}")


@hosts.command(name="show")
@click.argument("name")
@_hosts_option
@click.option("--workflow", default=None, type=click.Path(), help="also read the hosts.yaml beside this workflow")
@_json_option
def hosts_show(name: str, hosts_file: str | None, workflow: str | None, as_json: bool) -> None:
    """One host, every property."""
    try:
        reg = _registry(workflow, hosts_file)
        host = reg.get(name)
    except PweError as exc:
        _fail(exc)
    data = host.model_dump()
    data["source"] = reg.sources[name]
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for k, v in data.items():
        if v not in (None, [], {}, ""):
            click.echo(f"{k:<16} {v}")


@hosts.command(name="check")
@click.argument("name")
@_hosts_option
@click.option("--workflow", default=None, type=click.Path(), help="also read the hosts.yaml beside this workflow")
@_json_option
def hosts_check(name: str, hosts_file: str | None, workflow: str | None, as_json: bool) -> None:
    """Reach host NAME and check its commands, python3 and nodes; exit 0 when all pass, else 1."""
    from hostinfo.check import check_host

    try:
        host = _registry(workflow, hosts_file).get(name)
    except PweError as exc:
        _fail(exc)
    checks = check_host(host)
    ok = all(c[1] for c in checks)
    if as_json:
        click.echo(json.dumps({"host": name, "ok": ok, "checks": [{"check": w, "ok": g, "detail": d}
                                                                  for w, g, d in checks]}, indent=2))
    else:
        marks = ("✓", "✗") if sys.stdout.isatty() else ("ok  ", "FAIL")
        for what, good, detail in checks:
            click.echo(f"{marks[0] if good else marks[1]} {what}: {detail}")
        failed = sum(not c[1] for c in checks)
        click.echo(f"{name}: " + (f"all {len(checks)} checks passed" if ok else
                                  f"{failed} of {len(checks)} checks failed"), err=True)
    sys.exit(0 if ok else 1)


def _spawn_engine(run_dir, *extra: str) -> None:
    import os
    import subprocess

    log = open(run_dir / "engine.log", "ab")
    subprocess.Popen([sys.executable, "-m", "pwe", "_engine", str(run_dir), *extra], stdin=subprocess.DEVNULL,
                     stdout=log, stderr=log, start_new_session=True, cwd=os.getcwd())
    log.close()


@cli.command(name="_engine", hidden=True)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--retry", is_flag=True)
def _engine_cmd(run_dir: str, retry: bool) -> None:
    """The background engine of `pwe submit` (internal)."""
    from pathlib import Path

    from .engine import Engine

    try:
        ok = Engine.open(Path(run_dir), reload_hosts=True).run(retry=retry)
    except PweError as exc:
        _fail(exc)
    sys.exit(0 if ok else 1)


def _find(run: str | None):
    from .rundir import find

    return find(run)


@cli.command()
@click.argument("run", required=False)
@_json_option
def status(run: str | None, as_json: bool) -> None:
    """Per node: members waiting / queued / running / done / failed (newest run by default)."""
    from .rundir import EngineLock

    try:
        d = _find(run)
    except PweError as exc:
        _fail(exc)
    try:
        snap = json.loads((d / "state.json").read_text())
    except (OSError, ValueError):
        snap = {"run_id": d.name, "nodes": {}, "totals": {}, "finished_ok": None}
    holder = EngineLock(d).holder()
    if not holder and _mtime(d / "journal.jsonl") > _mtime(d / "state.json"):
        # the engine stopped before its last snapshot (killed, disk full): the journal is
        # the record, so count from it
        try:
            from .results import load_state

            info, st = load_state(d)
            snap = {**snap, **st.snapshot(), "run_id": info["run_id"], "total_members": st.plan.total_members}
        except PweError as exc:
            _fail(exc)
    if holder:
        phase = "running"
    elif snap.get("cancelled"):
        phase = "cancelled"
    elif snap.get("finished_ok") is True:
        phase = "succeeded"
    elif snap.get("finished_ok") is False:
        phase = "finished with failures"
    elif snap.get("stopped"):
        phase = f"stopped: {snap['stopped']}; then: pwe resume"
    else:
        phase = "stopped (pwe resume continues it)"
    snap["phase"] = phase
    snap["run_dir"] = str(d)
    from .rundir import pilot_states

    heartbeat = 5.0
    try:
        heartbeat = float(json.loads((d / "run.json").read_text()).get("heartbeat", 5.0))
    except (OSError, ValueError, TypeError):
        pass
    snap["pilots"] = pilot_states(d, snap.get("pilots") or {}, bool(holder), heartbeat)
    if as_json:
        click.echo(json.dumps(snap, indent=2))
        return
    cols = ["waiting", "queued", "running", "done", "failed", "skipped", "cancelled"]
    click.echo(f"{snap.get('run_id', d.name)}: {phase}  ({d})")
    width = max([len(n) for n in snap["nodes"]] + [4])
    click.echo(f"{'node':<{width}}  " + "  ".join(f"{c:>9}" for c in cols))
    rows = list(snap["nodes"].items()) + [("total", snap.get("totals", {}))]
    for name, counts in rows:
        vals = {**counts, "waiting": counts.get("waiting", 0) + counts.get("ready", 0)}
        click.echo(f"{name:<{width}}  " + "  ".join(f"{vals.get(c, 0):>9,}" for c in cols))
    pilots = snap.get("pilots") or {}
    if pilots:
        click.echo("pilots: " + "; ".join(
            f"{pid} {p['state']}"
            + (f" ({p['batch']} job {p['job']})" if p.get("job") else f" (on {p.get('host')})")
            + (f": {p['why']}" if p.get("why") and p["state"] != "up" else "")
            for pid, p in pilots.items()))


def _mtime(path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


@cli.command()
@click.argument("run")
@click.option("--node", default=None, help="only this node")
@click.option("--state", "only", default=None, help="only members in this state (done, failed, ...)")
@click.option("--limit", default=200, show_default=True, help="most members listed (0: all)")
@_json_option
def show(run: str, node: str | None, only: str | None, limit: int, as_json: bool) -> None:
    """Members of RUN with parameters, state, attempts, exit status and outputs."""
    from .results import load_state, member_record

    try:
        d = _find(run)
        _, st = load_state(d)
        if node is not None and node not in st.nodes:
            from .source import did_you_mean

            raise PweError(f"run {d.name} has no node '{node}'{did_you_mean(node, st.nodes)}")
    except PweError as exc:
        _fail(exc)
    from .state import NAMES

    want = None if only is None else only.lower()
    if want is not None and want not in NAMES:
        click.echo(f"--state: one of {', '.join(NAMES)}", err=True)
        sys.exit(2)
    out = []
    for nid, ns in st.nodes.items():
        if node and nid != node:
            continue
        for i in range(ns.size):
            if want is not None and NAMES[ns.state[i]] != want:
                continue
            out.append(member_record(st, nid, i))
            if limit and len(out) >= limit:
                break
        if limit and len(out) >= limit:
            break
    if as_json:
        click.echo(json.dumps(out, indent=2, default=str))
        return
    for m in out:
        params = " ".join(f"{k}={v}" for k, v in m["parameters"].items())
        outs = " ".join(f"{k}={v}" for k, v in m["outputs"].items())
        rc = "" if m["exit_status"] is None else f"exit={m['exit_status']}"
        why = f" ({m['why']})" if m.get("why") else ""
        click.echo(f"{m['node']}[{m['member']}]  {m['state']:<9} attempts={m['attempts']} {rc}{why}  {params}"
                   + (f"  -> {outs}" if outs else ""))
    if limit and len(out) >= limit:
        click.echo(f"(first {limit}; --limit 0 for all)", err=True)


@cli.command()
@click.argument("run")
@click.argument("member")
def logs(run: str, member: str) -> None:
    """A member's stdout and stderr. MEMBER is NODE:INDEX (or 'NODE[INDEX]', quoted: brackets
    are a glob to zsh; NODE alone for index 0)."""
    import re

    from .rundir import member_dir

    m = re.fullmatch(r"([A-Za-z0-9_][A-Za-z0-9_.-]*?)(?:[\[:/](\d+)\]?)?", member)
    if not m:
        click.echo(f"member {member!r}: write NODE:INDEX, e.g. simulate:3", err=True)
        sys.exit(2)
    try:
        d = _find(run)
    except PweError as exc:
        _fail(exc)
    node, idx = m.group(1), int(m.group(2) or 0)
    md = member_dir(d, node, idx)
    if not md.is_dir():
        try:
            sizes = _node_sizes(d)
        except PweError as exc:
            _fail(exc)
        if node in sizes and idx >= sizes[node]:
            click.echo(f"{member}: no such member ({node} has {sizes[node]})", err=True)
            sys.exit(2)
        if node not in sizes:
            from .source import did_you_mean

            known = [p.name for p in (d / "members").iterdir()] if (d / "members").is_dir() else []
            click.echo(f"run {d.name} has no member output for node '{node}'{did_you_mean(node, sizes or known)}"
                       + (f"; nodes with output: {', '.join(sorted(known))}" if known else ""), err=True)
            sys.exit(2)
        click.echo(f"{node}[{idx}] has not run yet (no {md})", err=True)
        sys.exit(1)
    for name in ("stdout", "stderr"):
        p = md / name
        text = p.read_text(errors="replace") if p.exists() else ""
        click.echo(f"==> {node}[{idx}] {name} ({p}) <==")
        click.echo(text, nl=not text.endswith("\n") and bool(text))


def _node_sizes(d) -> dict[str, int]:
    """Members per node of the run in ``d``: from state.json (each member is counted in
    exactly one state), else, when the engine never wrote one, from the run's plan."""
    try:
        counts = json.loads((d / "state.json").read_text())["nodes"]
        return {n: sum(c.values()) for n, c in counts.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    from .runs import read

    return {nid: n.size for nid, n in read(d)[1].nodes.items()}


@cli.command()
@click.argument("run")
def cancel(run: str) -> None:
    """Stop RUN: its pilots and their members."""
    import time

    from .engine import Engine
    from .rundir import EngineLock

    try:
        d = _find(run)
        if EngineLock(d).holder():
            (d / "control" / "cancel").touch()
            for _ in range(200):
                if not EngineLock(d).holder():
                    break
                time.sleep(0.05)
            else:
                raise PweError(f"the engine of {d.name} did not stop within 10 s")
        else:
            engine = Engine.open(d)
            engine.run(cancel=True)
            if not engine.state.cancelled:
                click.echo(f"{d.name}: already finished; nothing to cancel")
                return
    except PweError as exc:
        _fail(exc)
    click.echo(f"{d.name}: cancelled")


@cli.command()
@click.argument("run", required=False)
@click.option("--detach", is_flag=True, help="go on in the background, like pwe submit")
def resume(run: str | None, detach: bool) -> None:
    """Pick RUN up after any crash: finished members are kept, the rest run."""
    _continue(run, detach, retry=False)


@cli.command()
@click.argument("run", required=False)
@click.option("--detach", is_flag=True, help="go on in the background, like pwe submit")
def retry(run: str | None, detach: bool) -> None:
    """Rerun RUN's failed members (and what they held back)."""
    _continue(run, detach, retry=True)


def _continue(run: str | None, detach: bool, retry: bool) -> None:
    from .engine import Engine

    try:
        d = _find(run)
        engine = Engine.open(d, reload_hosts=True)
        if detach:
            if engine.lock.holder():
                raise PweError(f"an engine is already working on {d.name}")
            _spawn_engine(d, *(["--retry"] if retry else []))
            click.echo(engine.run_id)
            return
        _follow(engine, retry=retry)
    except PweError as exc:
        _fail(exc)


def main() -> None:
    try:
        cli.main(prog_name="pwe", standalone_mode=True)
    except PweError as exc:  # anything a command did not map itself
        _fail(exc)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
