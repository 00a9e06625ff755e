"""``pwe top [RUN]``: a live dashboard in the terminal, for a login node over ssh (80x24 and
up, inside tmux or screen): the runs; a run's nodes with progress and rates, its pilots, its
members by state, a member's log tail and why it is in its state, the run's failures by
value; cancel and retry, each after a y/n. The screens are
pwe/cli/topapp.py's (Textual, the ``tui`` extra, imported only here and only when a terminal
is there to draw on); what they show is pwe/observe/topview.py's."""

from __future__ import annotations

import sys

import click

from .base import Seconds, echo, fail, find
from ..base.errors import PweError


@click.command()
@click.argument("run", required=False)
@click.option("--every", default=2.0, show_default=True, type=Seconds(0.2, 3600), help="seconds between refreshes")
def top(run: str | None, every: float) -> None:
    """A live dashboard in the terminal: runs, a run's nodes, pilots, failures by value, a
    member's log. Enter opens a run: its nodes with progress and rates, its pilots, its
    members (f: filter by state); l: the selected member's log tail, e: why it is in its
    state, v: the run's failures by parameter value; c cancels the run and r retries its
    failed members, each after a y/n; ? the keys, q quits. RUN: open that run at once. It
    reads the runs, never takes their lock (docs: how-to/top.md)."""
    try:
        run_dir = find(run) if run is not None else None
    except PweError as exc:
        fail(exc)
    try:
        import textual  # noqa: F401  (the tui extra)
    except ImportError:
        echo("pwe top needs the tui extra: pip install 'pwe[tui]'", err=True)
        sys.exit(2)
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        echo("pwe top: no terminal (stdin and stdout must be one) to draw on; `pwe runs` and `pwe status RUN` "
             "print what it shows", err=True)
        sys.exit(2)
    import os

    from .topapp import TopApp

    # the terminal's own size, on every resize: shutil.get_terminal_size (Textual's) takes
    # COLUMNS and LINES first when they are exported, and would keep the window's first size
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

    TopApp(run_dir, every).run()
