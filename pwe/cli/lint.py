"""``pwe lint FILE``: warnings about a workflow that validates, one line each
(``FILE:LINE: warning: WHAT (what to do)``); the checks are :mod:`pwe.observe.lint`'s."""

from __future__ import annotations

import json
import os
import sys

import click

from ..base.errors import PweError
from .base import CHOSEN, ChosenPath, echo, fail, hosts_option, json_option


@click.command()
@click.argument("file", type=ChosenPath(dir_okay=True))
@click.option("--strict", is_flag=True, help="exit 1 when there is any warning")
@hosts_option
@click.option("--host", type=CHOSEN, default=None, help="lint every node on this host instead of the file's")
@json_option
def lint(file: str, strict: bool, hosts_file: str | None, host: str | None, as_json: bool) -> None:
    """Warnings about FILE, each with its file and line: exit 0 (1 with --strict).

    A script the command calls that inputs: do not name (reuse), a member walltime far
    from what the last runs measured, memory unset on a host that states its nodes'
    memory, a million products on a shared file system, hosts keys that contradict each
    other, a parameter that nothing uses (docs: how-to/lint.md). A FILE that does not
    validate: one line, exit 2."""
    from ..observe.lint import lint as find_warnings

    try:
        found = find_warnings(file, hosts_file, host)
    except PweError as exc:
        fail(exc)
    try:
        if as_json:
            click.echo(json.dumps({"file": file, "warnings": [w.document() for w in found], "count": len(found)},
                                  indent=2))
        else:
            for w in found:
                echo(w.text())
        sys.stdout.flush()
    except BrokenPipeError:  # `pwe lint FILE --json | head -c1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(1 if strict and found else 0)
