"""The commands that check and show input before anything runs: ``pwe validate``, ``pwe
plan`` (a workflow) and ``pwe hosts`` (the host registry)."""

from __future__ import annotations

import json
import sys

import click

from ..observe import planview
from ..observe.hostview import check_document, host_rows
from .base import (CHOSEN, ChosenPath, PweGroup, Seconds, Whole, console, echo, fail, hosts_option, json_option, markup,
                   set_option, warn, workspace_option, fresh_option, reuse_from_option)
from ..base.errors import PweError
from ..base.text import shown


@click.command()
@click.argument("file", type=ChosenPath(dir_okay=True))
@set_option
@hosts_option
@json_option
def validate(file: str, sets: tuple[str, ...], hosts_file: str | None, as_json: bool) -> None:
    """Parse and check FILE (and that every node's host exists and fits it); print its nodes, members and edges."""
    try:
        plan, _, warnings = planview.check(file, sets, None, hosts_file)
    except PweError as exc:
        fail(exc)
    summary = planview.summary(plan, warnings)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    from rich.table import Table

    con = console()
    con.print(
        f"[bold]{plan.workflow.name}[/]: {len(plan.nodes)} nodes, "
        f"[bold]{plan.total_members:,}[/] members, {len(plan.edges)} edges  ({markup(plan.file)})"
    )
    table = Table(box=None, pad_edge=False)
    for col, just in (("node", "left"), ("members", "right"), ("parameters", "left"), ("cores", "right"),
                      ("host", "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for n in summary["nodes"]:
        grows = f" roots, checked (max_iterations {n['check']['max_iterations']})" if "check" in n else ""
        table.add_row(n["id"], f"{n['members']:,}{grows}", markup(planview.param_summary(plan, n["id"])),
                      str(n["cores_per_member"]), markup(n["host"]))
    con.print(table)
    if plan.edges:
        et = Table(box=None, pad_edge=False, title=None)
        et.add_column("edge")
        et.add_column("matching")
        for e in plan.edges:
            et.add_row(f"{e.src} -> {e.dst}", markup(e.describe()))
        con.print(et)
    path = summary["critical_path"]
    extra = f" ({summary['critical_path_minutes']:g} min per member chain)" if summary["critical_path_minutes"] else ""
    con.print(f"critical path: {' -> '.join(path)}{extra}")
    warn(warnings)


def _estimate_lines(con, est: dict) -> None:
    """pwe plan --estimate's lines: clearly an estimate, per node from what."""
    budget = f" of a budget of {est['budget']:,g}" if est.get("budget") is not None else ""
    con.print(f"\n[bold]estimate[/] (not a measurement: from a sample run on this machine, members' own time only, "
              f"no idle cores): ~{est['coreHours']:,.4g} core-hours{budget}")
    for nid, n in est["nodes"].items():
        how = (f"{n['sampled']} sampled, mean {n['mean']:,.3g} s x {n['cores']} core(s) x {n['members']:,} members: "
               f"~{n['coreHours']:,.4g}") if n["coreHours"] is not None else "not measured (none ended in the sample)"
        con.print(f"  {markup(nid)}: {how}")
@click.command()
@click.argument("file", type=ChosenPath(dir_okay=True))
@set_option
@click.option("--host", type=CHOSEN, default=None, help="run every node on this host instead of the file's")
@click.option("--members", "show", default=3, show_default=True, type=Whole(0, 1_000_000),
              help="members shown per node")
@click.option("--estimate", is_flag=True, help="estimate the run's core-hours from a sample of its members run "
              "here for real (in a scratch directory, then removed)")
@click.option("--sample", default=2, show_default=True, type=Whole(1, 1000), help="(--estimate) members run per node")
@click.option("--sample-timeout", default=60.0, show_default=True, type=Seconds(1, 86400),
              help="(--estimate) seconds the sample may run")
@hosts_option
@workspace_option
@fresh_option
@reuse_from_option
@click.option("--explain", is_flag=True, help="say per node why the members that would run are not reused")
@json_option
def plan(file: str, sets: tuple[str, ...], host: str | None, show: int, estimate: bool, sample: int,
         sample_timeout: float, hosts_file: str | None, workspace: str | None, fresh: bool, reuse_from: str | None,
         explain: bool, as_json: bool) -> None:
    """Show the expansion of FILE and the commands its first members would run (dry run);
    how many members earlier runs of it would lend (--explain: why the others run);
    --estimate: and the core-hours a run would need, from a sample run here."""
    try:
        p, used, warnings = planview.check(file, sets, host, hosts_file, workspace)
        summary = planview.preview(p, used, warnings, show)
        planview.add_products(summary, p, workspace)
        planview.add_reuse(summary, p, workspace, reuse_from, fresh, explain)
        if estimate:
            from ..engine.estimate import estimate as sample_run
            from ..workflow.load import parse_sets

            summary["estimate"] = sample_run(file, parse_sets(sets), hosts_file, sample, sample_timeout)
    except PweError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    con = console()
    con.print(f"[bold]{p.workflow.name}[/]: {p.total_members:,} members in {len(p.nodes)} nodes")
    for node in summary["nodes"]:
        nid = node["id"]
        deps = ", ".join(f"{e.src} ({e.describe()})" for e in p.edges_into(nid)) or "nothing"
        con.print(f"\n[bold]{nid}[/]  {node['members']:,} members  {markup(planview.param_summary(p, nid))}  "
                  f"host={node['host']}  cores/member={node['cores_per_member']}  after: {deps}")
        if node["scheduling"]:
            con.print("  scheduling: " + ", ".join(f"{k}={markup(v)}" for k, v in node["scheduling"].items()))
        if (part := node["partition"])["partition"]:
            con.print(f"  partition: {markup(part['partition'])} ({markup(part['why'])})")
        if "groups" in node:
            from ..planning.groups import describe

            con.print("  groups: " + markup(describe(node["groups"])))
        if "complete" in node:
            con.print(f"  members: {node['complete']:,} complete (products), {node['eligible']:,} eligible, "
                      f"{node['waiting']:,} waiting")
        if "reused" in node:
            _reuse_lines(con, node)
        last = None
        for m in node["members_shown"]:
            if last is not None and m["member"] != last + 1:
                con.print("  ...")
            params = " ".join(f"{k}={v}" for k, v in m["parameters"].items())
            con.print(f"  [{m['member']}] {markup(params)}")
            con.print(f"      $ {markup(m['command'].rstrip(), lines=True)}")
            last = m["member"]
    _order_and_limits(con, summary)
    _reuse_summary(con, p, summary.get("reuse"))
    if "estimate" in summary:
        _estimate_lines(con, summary["estimate"])
    if "workspace" in summary:
        con.print(f"\nworkspace {markup(summary['workspace'])}: products looked for in {summary['dirs_listed']:,} "
                  "directories (one listing each)")
    for name, script in summary["pilot_scripts"].items():
        con.print(f"\n[bold]first pilot job for host {markup(name)}[/] (RUN_DIR and RUN are filled in at submission):")
        con.print(markup(script, lines=True), end="")
    warn(warnings)


def _runs_text(runs: list[list[int]], most: int = 4) -> str:
    """``3, 10..14, 20..99 (+2 more)``: member index runs [lo, hi) in words."""
    words = [f"{lo}" if hi == lo + 1 else f"{lo}..{hi - 1}" for lo, hi in runs[:most]]
    return ", ".join(words) + (f" (+{len(runs) - most} more)" if len(runs) > most else "")


def _reuse_lines(con, node: dict) -> None:
    """A node's reuse: how many members would be reused and run; with --explain, why they
    run: the changes named and counted, and each member's where few run."""
    con.print(f"  reuse: {node['reused']:,} would be reused, {node['run']:,} would run")
    for c in node.get("changes", []):
        con.print(f"    {c['count']:,} run: {markup(c['reason'])}: members {_runs_text(c['members'])}")
    for m in node.get("members_why", []):
        params = "".join(f" {k}={v}" for k, v in m["parameters"].items())
        con.print(f"    [{m['member']}]{markup(params)}: {markup('; '.join(m['reasons']))}")


def _reuse_summary(con, p, reuse: dict | None) -> None:
    if not reuse:
        return
    if reuse.get("fresh"):
        con.print("\nreuse: none (--fresh: every member runs)")
        return
    if reuse["runs"]:
        con.print(f"\nreuse: from {len(reuse['runs'])} earlier run(s) of {markup(p.workflow.name)} in "
                  f"{markup(reuse['from'])}, newest first: {markup(', '.join(reuse['runs'][:3]))}"
                  f"{' ...' if len(reuse['runs']) > 3 else ''}")
    else:
        con.print(f"\nreuse: no ended run of {markup(p.workflow.name)} in {markup(reuse['from'])} to reuse from")
    for line in reuse.get("not_lending", []):
        con.print(f"  not reused: {markup(line)}")


@click.group(cls=PweGroup)
def hosts() -> None:
    """The host registry: built-in local, ~/.config/pwe/hosts.yaml, hosts.yaml beside a workflow."""


def _registry_options(f):
    """--hosts and --workflow (where the registry is read from, besides the usual places), --json."""
    workflow_option = click.option("--workflow", default=None, type=ChosenPath(),
                                   help="also read the hosts.yaml beside this workflow")
    return hosts_option(workflow_option(json_option(f)))


def _registry(workflow: str | None, hosts_file: str | None):
    from pathlib import Path

    import hostinfo

    return hostinfo.load(Path(workflow) if workflow else None, hosts_file)


@hosts.command(name="list")
@_registry_options
def hosts_list(hosts_file: str | None, workflow: str | None, as_json: bool) -> None:
    """Every known host: protocol, contact, cores per node, nodes, where it was defined."""
    try:
        reg = _registry(workflow, hosts_file)
    except PweError as exc:
        fail(exc)
    rows = host_rows(reg)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    echo(f"{'host':<16} {'protocol':<11} {'contact':<28} {'cores/node':>10} {'nodes':>5}  defined in")
    for r in rows:
        echo(f"{r['name']:<16} {r['protocol']:<11} {shown(r['contact']):<28} {r['cores_per_node'] or '?':>10} "
             f"{r['nodes'] or '-':>5}  {shown(r['source'])}")


@hosts.command(name="show")
@click.argument("name", type=CHOSEN)
@_registry_options
def hosts_show(name: str, hosts_file: str | None, workflow: str | None, as_json: bool) -> None:
    """One host, every property."""
    try:
        reg = _registry(workflow, hosts_file)
        host = reg.get(name)
    except PweError as exc:
        fail(exc)
    data = host.model_dump()
    data["source"] = reg.sources[name]
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for k, v in data.items():
        if v not in (None, [], {}, ""):
            echo(f"{k:<16} {shown(v)}")


@hosts.command(name="check")
@click.argument("name", type=CHOSEN)
@_registry_options
def hosts_check(name: str, hosts_file: str | None, workflow: str | None, as_json: bool) -> None:
    """Reach host NAME and check its commands, python3 and nodes; exit 0 when all pass, else 1."""
    from hostinfo.check import check_host

    try:
        host = _registry(workflow, hosts_file).get(name)
    except PweError as exc:
        fail(exc)
    checks = check_host(host)
    ok = all(c[1] for c in checks)
    if as_json:
        click.echo(json.dumps(check_document(name, checks), indent=2))
    else:
        marks = ("✓", "✗") if sys.stdout.isatty() else ("ok  ", "FAIL")
        for what, good, detail in checks:
            echo(f"{marks[0] if good else marks[1]} {what}: {shown(detail)}")
        failed = sum(not c[1] for c in checks)
        echo(f"{shown(name)}: " + (f"all {len(checks)} checks passed" if ok else
                                  f"{failed} of {len(checks)} checks failed"), err=True)
    sys.exit(0 if ok else 1)


def _order_and_limits(con, summary: dict) -> None:
    """pwe plan's lines on the order members go out in and the limits on user resources."""
    lim = summary["limits"]
    con.print(f"\n[bold]order[/]: {summary['order']}" + ("  (pressure: estimated seconds to the end of the run, "
              "highest first: " + ", ".join(f"{r['node']} {r['pressure_s']:g}" for r in summary["pressure"]) + ")"
              if summary["pressure"] else ""))
    if lim["run"] or lim["hosts"] or lim["nodes"]:
        parts = [f"run {k}={v}" for k, v in lim["run"].items()]
        parts += [f"host {h} {k}={v}" for h, d in lim["hosts"].items() for k, v in d.items()]
        held = ", ".join(f"{n} " + " ".join(f"{k}={v}" for k, v in d.items()) for n, d in lim["nodes"].items())
        con.print("[bold]limits[/]: " + markup(", ".join(parts) or "none") + "; held per member: "
                  + markup(held or "nothing"))
