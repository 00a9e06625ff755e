"""What every ``pwe`` command shares: one line for an error, warnings, the common options,
a run named on the command line, the console.

Every command that reads input maps :class:`~pwe.errors.InputError` to one line on
stderr (``FILE:LINE: message``) and exit status 2; no traceback reaches a user.
Heavy modules (pydantic, jinja2, rich) are imported inside the commands that
need them: ``pwe status`` answers from a snapshot file and must start fast.
"""

from __future__ import annotations

import sys

import click

from .errors import PweError


def console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def fail(exc: PweError) -> None:
    click.echo(str(exc), err=True)
    sys.exit(exc.exit_status)


def warn(warnings: list[str]) -> None:
    for w in warnings:
        click.echo(f"warning: {w}", err=True)


def find(run: str | None):
    """The run directory RUN names (a run id under ./pwe-runs, or a path; None: the newest)."""
    from .rundir import find

    return find(run)


set_option = click.option(
    "--set", "sets", multiple=True, metavar="NAME=VALUE", help="override or add a property (repeatable)"
)
json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output")
hosts_option = click.option("--hosts", "hosts_file", default=None, type=click.Path(), help="a hosts.yaml to read too")
workspace_option = click.option(
    "--workspace", default=None, type=click.Path(), metavar="DIR",
    help="the directory products are relative to (PWE_WORKSPACE; default: the workflow's 'workspace:', else its "
    "directory)")
