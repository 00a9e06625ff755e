"""``pwe events RUN``: the run's event history (:mod:`pwe.observe.history`), as JSON lines."""

from __future__ import annotations

import json

import click

from .base import echo, fail, find, json_option, warn
from ..base.text import shown
from ..base.errors import PweError


@click.command()
@click.argument("run", required=False)
@json_option
def events(run: str | None, as_json: bool) -> None:
    """Every event of a run: each pilot message (checked against the run's secret, with
    what the engine made of it), then the journal's records. --json: one JSON object a
    line."""
    from ..observe.history import events as history

    try:
        run_dir = find(run)
        warnings: list[str] = []
        for ev in history(run_dir, warnings):
            if as_json:
                click.echo(json.dumps(ev, separators=(",", ":")))
            elif "record" in ev:
                rest = {k: v for k, v in ev.items() if k != "record"}
                echo(f"journal {shown(ev['record'])} {json.dumps(rest, separators=(',', ':'))}")
            else:
                rest = {k: v for k, v in ev.items() if k not in ("pilot", "q", "via", "k", "verdict", "v")}
                said = (shown(ev[k]) for k in ("pilot", "via", "k", "verdict"))  # (a forged line's, too)
                echo("{} q={} {} {} {} ".format(next(said), shown(ev.get("q")), *said)
                     + json.dumps(rest, separators=(",", ":")))
        warn(warnings)
    except PweError as exc:
        fail(exc)
