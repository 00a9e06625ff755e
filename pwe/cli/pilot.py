"""``pwe pilot add / drain / list``: more pilots for a running run, one let go, and the
list of a run's pilots (the requests and what the engine does with them:
:mod:`pwe.engine.pilotask`)."""

from __future__ import annotations

import json
import sys

import click

from .base import CHOSEN, NODES, PweGroup, echo, fail, find, hosts_option, json_option
from ..base.errors import PweError


@click.group(cls=PweGroup)
def pilot() -> None:
    """More pilots for a running run; let one finish and leave; list them."""


def _answer(got: dict, as_json: bool, said: str) -> None:
    if as_json:
        click.echo(json.dumps(got))
    if not got.get("ok"):
        if not as_json:
            echo(got.get("why") or "refused", err=True)
        sys.exit(int(got.get("exit") or 1))
    if not as_json:
        echo(said)


@pilot.command()
@click.argument("run")
@click.option("--host", type=CHOSEN, default=None,
              help="a host of the run (default: its first) or of the registry (a helper)")
@click.option("--nodes", type=NODES, default=None, help="nodes of the pilot job (batch hosts)")
@hosts_option
@json_option
def add(run: str, host: str | None, nodes: int | None, hosts_file: str | None, as_json: bool) -> None:
    """Start one more pilot for RUN (a batch job, a process here, or over ssh) that joins it
    and takes ready members."""
    from ..engine.pilotask import add_request, ask

    try:
        d = find(run)
        got = ask(d, add_request(d, host, nodes, hosts_file))
    except PweError as exc:
        fail(exc)
    job = f", job {got['job']}" if got.get("job") else ""
    _answer(got, as_json, f"{d.name}: pilot {got.get('pilot')} added on {got.get('host')}{job}")


@pilot.command()
@click.argument("run")
@click.argument("pilot_id", type=CHOSEN, metavar="PILOT")
@json_option
def drain(run: str, pilot_id: str, as_json: bool) -> None:
    """Let PILOT of RUN finish what it runs and leave: it takes no new member and hands back
    what it holds but has not started (no attempt spent)."""
    from ..engine.pilotask import ask

    try:
        d = find(run)
        got = ask(d, {"req": "drain", "pilot": pilot_id})
    except PweError as exc:
        fail(exc)
    _answer(got, as_json, f"{d.name}: pilot {pilot_id} drains: it finishes what it runs, then leaves")


@pilot.command(name="list")
@click.argument("run", required=False)
@json_option
def list_(run: str | None, as_json: bool) -> None:
    """RUN's pilots: id, host, job, state (queued, running, draining, gone), slots, members
    running and done."""
    from ..engine.pilotask import listing

    try:
        rows = listing(find(run))
    except PweError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps(rows))
        return
    echo(f"{'pilot':6} {'host':12} {'job':10} {'state':9} {'slots':>5} {'running':>7} {'done':>6}")
    for r in rows:
        mark = " (added)" if r["added"] else ""
        echo(f"{r['pilot']:6} {str(r['host']):12} {str(r['job'] or '-'):10} {r['state']:9} "
                   f"{str(r['slots']):>5} {r['running']:>7} {r['done']:>6}{mark}")
