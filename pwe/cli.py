"""The ``pwe`` command line: parses, calls the modules that do the work, prints.

The commands that check input (``validate``, ``plan``, ``hosts``) are in
:mod:`pwe.cli_check`; what the commands share is :mod:`pwe.cli_base`. Every listing takes
``--json``.
"""

from __future__ import annotations

import json
import sys
import time

import click

from .cli_base import fail, find, hosts_option, json_option, warn
from .cli_events import events
from .cli_check import hosts, plan, validate
from .errors import PweError, RunStopped


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pwe")
def cli() -> None:
    """pwe: parameterized DAG workflows on HPC clusters, with glide-in pilots."""


for _command in (validate, plan, hosts):
    cli.add_command(_command)


# -- running ------------------------------------------------------------------------------

_run_options = [
    click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="override or add a property"),
    click.option("--host", default=None, help="run every node on this host"),
    click.option("--run-dir", default=None, type=click.Path(), help="run directory (default ./pwe-runs/RUN-ID)"),
    click.option("--cores", type=click.IntRange(1), default=None, help="cores of this machine to fill (default: all)"),
    hosts_option,
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
    from .runview import failed_examples, outcome, progress, run_ref
    from .state import FAILED

    total = engine.plan.total_members
    ref = run_ref(engine.dir, engine.run_id)
    bar = None
    last_line = [0.0]
    if sys.stderr.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("{task.fields[extra]}"), TimeElapsedColumn(), transient=False)
        task = bar.add_task(engine.run_id, total=total, extra="")
        bar.start()

    def report(st) -> None:
        finished, extra = progress(st.totals())
        if bar is not None:
            bar.update(task, completed=finished, extra=extra)
        else:
            import time

            now = time.time()
            if now - last_line[0] >= 5 or finished == total:
                last_line[0] = now
                click.echo(f"{engine.run_id}: {finished}/{total} finished, {extra}", err=True)

    try:
        ok = engine.run(progress=report, **kwargs)
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
    click.echo(f"{engine.run_id}: {outcome(t)} of {total}  ({engine.dir})")
    if t[FAILED]:
        shown = failed_examples(engine.state, engine.dir, limit=3)
        for _, line in shown:
            click.echo(line, err=True)
        click.echo(f"see: pwe show {ref} --state failed", err=True)
        if shown:  # NODE:INDEX, not NODE[INDEX]: brackets are a glob to the shell it is pasted into
            click.echo(f"see: pwe logs {ref} {shown[0][0]}", err=True)
    sys.exit(0 if ok else 1)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=True))
@_with_run_options
def run(file, sets, host, run_dir, cores, hosts_file) -> None:
    """Run FILE to the end with a progress bar; exit 0 when every member succeeded, else 1."""
    try:
        engine = _create(file, sets, host, run_dir, cores, hosts_file)
        click.echo(f"run {engine.run_id}  ({engine.dir})", err=True)
        warn(engine.warnings)
        _follow(engine)
    except PweError as exc:
        fail(exc)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=True))
@_with_run_options
def submit(file, sets, host, run_dir, cores, hosts_file) -> None:
    """Start a run of FILE in the background and print its run id."""
    from .control import spawn_engine

    try:
        engine = _create(file, sets, host, run_dir, cores, hosts_file)
    except PweError as exc:
        fail(exc)
    warn(engine.warnings)
    spawn_engine(engine.dir)
    click.echo(engine.run_id)


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
        fail(exc)
    sys.exit(0 if ok else 1)


@cli.command()
@click.argument("run")
def cancel(run: str) -> None:
    """Stop RUN: its pilots and their members."""
    from .control import cancel as cancel_run

    try:
        d = find(run)
        if not cancel_run(d):
            click.echo(f"{d.name}: already finished; nothing to cancel")
            return
    except PweError as exc:
        fail(exc)
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
    try:
        d = find(run)
        if detach:
            from .control import detach as go_on

            click.echo(go_on(d, retry))
            return
        from .engine import Engine

        _follow(Engine.open(d, reload_hosts=True), retry=retry)
    except PweError as exc:
        fail(exc)


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


# -- reading a run --------------------------------------------------------------------------

cli.add_command(events)  # pwe events RUN: the run's event history (pwe/cli_events.py)

@cli.command()
@click.argument("run", required=False)
@json_option
def status(run: str | None, as_json: bool) -> None:
    """Per node: members waiting / queued / running / done / failed (newest run by default)."""
    from .runview import status as run_status

    try:
        d = find(run)
        snap = run_status(d)
    except PweError as exc:
        fail(exc)
    warn(snap.get("warnings", []))
    if as_json:
        click.echo(json.dumps(snap, indent=2))
        return
    cols = ["waiting", "queued", "running", "done", "failed", "skipped", "cancelled"]
    engine = snap.get("engine") if snap["phase"] == "running" else None
    held = f" (engine pid {engine.get('pid')} on {engine.get('host')})" if isinstance(engine, dict) else ""
    click.echo(f"{snap.get('run_id', d.name)}: {snap['phase']}{held}  ({d})")
    for name, u in (snap.get("unreachable") or {}).items():
        since = time.strftime("%H:%M:%S", time.localtime(u["since"]))
        click.echo(f"host '{name}': its batch system does not answer, since {since} "
                   f"({time.time() - u['since']:.0f} s): {u['why']}; waiting, nothing new is submitted there")
    refused = {k: n for k, n in (snap.get("rejected") or {}).items() if k != "resent"}
    if refused:  # (pwe events RUN shows each)
        click.echo("pilot messages refused, never applied: " + ", ".join(f"{n} {k}" for k, n in refused.items()))
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


@cli.command()
@click.argument("run")
@click.option("--node", default=None, help="only this node")
@click.option("--state", "only", default=None, help="only members in this state (done, failed, ...)")
@click.option("--limit", default=200, show_default=True, help="most members listed (0: all)")
@json_option
def show(run: str, node: str | None, only: str | None, limit: int, as_json: bool) -> None:
    """Members of RUN with parameters, state, attempts, exit status and outputs."""
    from .runview import members

    try:
        out = members(find(run), node, only, limit)
    except PweError as exc:
        fail(exc)
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

    from .runview import member_output

    m = re.fullmatch(r"([A-Za-z0-9_][A-Za-z0-9_.-]*?)(?:[\[:/](\d+)\]?)?", member)
    if not m:
        click.echo(f"member {member!r}: write NODE:INDEX, e.g. simulate:3", err=True)
        sys.exit(2)
    node, idx = m.group(1), int(m.group(2) or 0)
    try:
        files = member_output(find(run), node, idx, member)
    except PweError as exc:
        fail(exc)
    for name, path, text in files:
        click.echo(f"==> {node}[{idx}] {name} ({path}) <==")
        click.echo(text, nl=not text.endswith("\n") and bool(text))


def main() -> None:
    try:
        cli.main(prog_name="pwe", standalone_mode=True)
    except PweError as exc:  # anything a command did not map itself
        fail(exc)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)

