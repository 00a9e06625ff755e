"""``pwe ui``: the live dashboard in the browser (:mod:`pwe.ui`). Starlette and uvicorn
are imported inside the command (the ``web`` extra): ``pwe --help`` never loads them.
"""

from __future__ import annotations

import sys

import click

from .base import CHOSEN, ChosenPath, Whole, echo, fail
from ..base.errors import InputError, PweError


def _needs_web() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise InputError("pwe ui needs the web extra: pip install 'pwe[web]' (starlette, uvicorn)") from None


def start(runs_root: str | None, host: str, port: int, rotate: bool = False, say=None) -> None:
    """Check, then serve the dashboard (``pwe ui``; the service calls it with its own
    ``say``). Bound to a non-loopback address, it needs the token (made and shown once
    if there is none); bound to loopback, the address said holds a one-time login word."""
    import secrets
    from pathlib import Path

    _needs_web()
    from ..ui.security import is_loopback, token, token_path

    say = say or (lambda line: echo(line, err=True))
    if not host or any(ord(c) < 33 for c in host) or len(host) > 255:
        raise InputError(f"--host {host[:60]!r}: an address to listen on, e.g. 127.0.0.1")
    root = Path(runs_root) if runs_root else None
    if root is not None and not root.is_dir():  # (bad input said before a token is made: one line, nothing written)
        raise InputError(f"--runs {runs_root}: not a directory of runs")
    secret, made = token(rotate)
    if made:
        say(f"pwe ui: a new token (shown this once; kept owner-only in {token_path()}): {secret}")
    launch = secrets.token_urlsafe(24) if is_loopback(host) else None
    from ..ui.api import Sources
    from ..ui.app import serve
    from ..ui.security import Guard

    shown = f"[{host}]" if ":" in host else host

    def ready(server) -> None:
        real = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
        if launch:
            say(f"pwe ui: http://{shown}:{real}/login?token={launch}  (this machine only; Ctrl-C stops it)")
        else:
            say(f"pwe ui: http://{shown}:{real}/  (every request needs the token: open "
                f"http://{shown}:{real}/login?token=TOKEN once; Ctrl-C stops it)")

    try:
        serve(Sources(root), Guard(secret, host, port, launch), host, port, ready)
    except OSError as exc:
        raise InputError(f"pwe ui: cannot listen on {host}:{port} ({exc.strerror or exc})") from None


@click.command()
@click.option("--runs", "runs_root", default=None, type=ChosenPath(file_okay=False),
              help="the runs under this run root (default ./pwe-runs), and the service's")
@click.option("--host", type=CHOSEN, default="127.0.0.1", show_default=True,
              help="the address to listen on (any but loopback needs the token)")
@click.option("--port", default=8765, show_default=True, type=Whole(0, 65535), help="the port (0: any free one)")
@click.option("--rotate-token", "rotate", is_flag=True, help="make a new token (shown once); the old one stops working")
def ui(runs_root: str | None, host: str, port: int, rotate: bool) -> None:
    """A live dashboard of the runs in the browser: runs, a run's DAG, members, logs, timeline;
    triggers; hosts; cancel, retry, resume, trigger now."""
    try:
        start(runs_root, host, port, rotate)
    except PweError as exc:
        fail(exc)
    except KeyboardInterrupt:
        sys.exit(130)
