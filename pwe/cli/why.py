"""``pwe explain`` and ``pwe failures``: why a member is in its state; what a run's failures
have in common. The documents are :mod:`pwe.observe.explain` and :mod:`pwe.observe.failures`
(the dashboards show the same); here they are printed, as JSON or as their lines, each
value shown as text (:func:`pwe.base.text.shown`)."""

from __future__ import annotations

import json
import sys

import click

from .base import COUNT, fail, find, json_option, out
from ..base.errors import PweError


@click.command()
@click.argument("run", required=False)
@click.option("--signatures", "read", type=COUNT, default=2000, show_default=True,
              help="failed members whose stderr is read for the error signatures (spread over them; 0: none)")
@click.option("--no-hosts", is_flag=True, help="leave out the view by host (it reads the whole journal)")
@click.option("--rows", type=COUNT, default=10, show_default=True, help="rows of each view in the text (0: all)")
@json_option
def failures(run: str | None, read: int, no_hosts: bool, rows: int, as_json: bool) -> None:
    """RUN's failures summarised: by parameter value (the values most over-represented
    first), by reason, by error signature, by the host the attempts ran on.

    RUN is the newest run when not given. By value: each value's failed and done members,
    its failure rate, and how over-represented it is among the failures (the share of the
    failed members with it less the share of the done ones, in points). By signature: the
    last line on stderr, with numbers and paths folded."""
    from ..observe.failures import failures as summarise, lines

    try:
        doc = summarise(find(run), hosts=not no_hosts, signatures_read=read)
    except PweError as exc:
        fail(exc)
    if as_json:
        out(json.dumps(doc, indent=2, allow_nan=False))
    else:
        out("\n".join(lines(doc, rows or sys.maxsize)))


@click.command()
@click.argument("run")
@click.argument("member")
@click.option("--no-ask", is_flag=True, help="do not ask the batch system why a queued pilot job waits")
@json_option
def explain(run: str, member: str, no_ask: bool, as_json: bool) -> None:
    """Why MEMBER of RUN is in its state, in layers: the member (what it waits for, what
    holds it, which change made it run again), its placement, its allocation.

    MEMBER is NODE:INDEX (or 'NODE[INDEX]', quoted: brackets are a glob to zsh). The member:
    its state and last attempt, each prerequisite with its state, a halt, a cancel, no
    engine, quarantine. Placement: what one attempt asks against its host's nodes and each
    live pilot (taken, queued, walltime left). Allocation: the pilot jobs and what holds a
    new one back (max_pilots, max_queued_pilots, submit_rate, a refused submission), and
    what the batch system says keeps a queued pilot job waiting (SLURM's pending reason)."""
    from ..base.ids import member_spec
    from ..observe.explain import explain as why, lines

    spec = member_spec(member)
    if spec is None:
        click.echo(f"member {member[:40]!r}: write NODE:INDEX (an index of at most 18 digits), e.g. simulate:3",
                   err=True)
        sys.exit(2)
    try:
        doc = why(find(run), spec[0], spec[1], ask=not no_ask, said=member)
    except PweError as exc:
        fail(exc)
    if as_json:
        out(json.dumps(doc, indent=2, allow_nan=False, default=str))
    else:
        out("\n".join(lines(doc)))
