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
from .plan import Plan, plan_workflow
from .load import parse_sets


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


_set_option = click.option(
    "--set", "sets", multiple=True, metavar="NAME=VALUE", help="override or add a property (repeatable)"
)
_json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output")


def _load(file: str, sets: tuple[str, ...], host: str | None = None) -> Plan:
    return plan_workflow(file, parse_sets(sets), host=host)


def _param_summary(plan: Plan, nid: str) -> str:
    space = plan.nodes[nid].space
    if not space.names:
        return "-"
    sep = " x " if space.combine == "product" else " zip "
    return sep.join(f"{n}({len(space.values[n])})" for n in space.names)


def _summary(plan: Plan) -> dict[str, Any]:
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
        "warnings": plan.warnings,
    }


@cli.command()
@click.argument("file", type=click.Path(dir_okay=True))
@_set_option
@_json_option
def validate(file: str, sets: tuple[str, ...], as_json: bool) -> None:
    """Parse and check FILE; print its nodes, members and edges."""
    try:
        plan = _load(file, sets)
    except PweError as exc:
        _fail(exc)
    summary = _summary(plan)
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
    for w in plan.warnings:
        click.echo(f"warning: {w}", err=True)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=True))
@_set_option
@click.option("--host", default=None, help="run every node on this host instead of the file's")
@click.option("--members", "show", default=3, show_default=True, help="members shown per node")
@_json_option
def plan(file: str, sets: tuple[str, ...], host: str | None, show: int, as_json: bool) -> None:
    """Show the expansion of FILE and the commands its first members would run (dry run)."""
    try:
        p = _load(file, sets, host)
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
    summary = _summary(p)
    if as_json:
        for node in summary["nodes"]:
            node["members_shown"] = shown[node["id"]]
            node["scheduling"] = p.nodes[node["id"]].scheduling.model_dump(exclude_none=True)
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
    for w in p.warnings:
        click.echo(f"warning: {w}", err=True)


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
