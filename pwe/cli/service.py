"""``pwe service ...``, ``pwe trigger ...`` and ``pwe submit --service``: the command line of
the service (:mod:`pwe.service`). Celery is imported inside these commands only, so that
``pwe --help`` and every other command start without it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from .base import CHOSEN, CORES, COUNT, ChosenPath, PweGroup, Seconds, echo, fail, json_option, set_option, who
from ..base.errors import InputError, PweError


def _store():
    """The service's directory; where an earlier pwe kept it (still used), said on stderr."""
    from ..base.places import state_dir
    from ..runstate.service_store import Store

    store = Store()
    if store.legacy:
        echo(f"warning: the service's directory is {store.root}, where an earlier pwe kept it; it is used "
                   f"while {state_dir() / 'service'} does not exist (move it there while the service is stopped)",
                   err=True)
    return store


def _when(t: float | None) -> str:
    """An instant as the service shows every time: UTC."""
    return "-" if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# -- pwe service ------------------------------------------------------------------------------
@click.group(cls=PweGroup)
def service() -> None:
    """pwe as a long-lived service (Celery worker and beat): submissions, triggers, adopting runs.

    Its directory is $PWE_HOME/state/service, else $XDG_STATE_HOME/pwe/service
    (default ~/.local/state/pwe/service)."""


def _file_glob(text: str, plan: Any) -> str:
    """An --on-file GLOB, absolute; :class:`InputError` (one line) for one that is empty, holds
    a control character, or whose fixed part (up to its first wildcard) is not inside the
    workflow's workspace: the service lists it every second, and its files reach payloads."""
    import os

    from ..planning.products import workspace

    if not text.strip() or any(ord(c) < 32 or ord(c) == 127 for c in text) or len(text) > 4096:
        raise InputError(f"--on-file {text[:80]!r}: a glob of files in the workflow's workspace, e.g. 'incoming/*.dat'")
    ws = workspace(plan)
    full = os.path.abspath(os.path.expanduser(text))  # (relative to here, as every path a command takes)
    fixed = full[: min((full.find(c) for c in "*?[" if c in full), default=len(full))]
    if os.path.commonpath([os.path.realpath(os.path.dirname(fixed) or "/"), os.path.realpath(ws)]) != \
            os.path.realpath(ws):
        raise InputError(f"--on-file {text[:80]!r}: outside the workflow's workspace {ws}; give a glob inside it "
                         "(the workflow's 'workspace:' key chooses it)")
    return full


@service.command()
@click.option("--broker", default=None, metavar="URL",
              help="redis://:PASSWORD@HOST:PORT/DB to serve across machines (default: the embedded broker, "
                   "this machine only; 'embedded' to go back to it)")
@click.option("--queue", default=None, help="the queue's name on the broker (default pwe)")
@click.option("--run-root", default=None, type=ChosenPath(),
              help="where runs go (default: SERVICE_DIR/runs)")
@click.option("--ui", default=None, metavar="[HOST:]PORT",
              help="serve the dashboard (pwe ui) there too, its address in SERVICE_DIR/ui.log ('off': no more)")
@json_option
def start(broker: str | None, queue: str | None, run_root: str | None, ui: str | None, as_json: bool) -> None:
    """Start the service in the background (it adopts the runs a stopped service left)."""
    from ..service import daemon

    try:
        st = daemon.start(_store(), broker, queue, run_root, ui)
    except PweError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    echo(f"pwe service running (pid {st['pid']}; worker {st['worker']}, beat {st['beat']})  "
               f"broker {st['broker']}, queue {st['queue']}; runs under {st['run_root']}"
               + (f"; dashboard on {st['ui']} (its address: {Path(st['service_dir']) / 'ui.log'})" if st.get("ui")
                  else ""))


@service.command()
@json_option
def stop(as_json: bool) -> None:
    """Stop the service (worker and beat); runs already started go on, and a service
    started again picks them up."""
    from ..service import daemon

    held = daemon.stop(_store())
    if as_json:
        click.echo(json.dumps({"stopped": held is not None, "pid": (held or {}).get("pid")}))
    elif held is None:
        echo("pwe service is not running")
    else:
        echo(f"pwe service stopped (pid {held.get('pid')}); runs already started go on")


@service.command(name="status")
@json_option
def service_status(as_json: bool) -> None:
    """The service: its processes, broker, queue depth, liveness, runs and triggers (exit 1
    when it does not run)."""
    from ..service import daemon

    st = daemon.status(_store())
    if as_json:
        click.echo(json.dumps(st, indent=2))
        sys.exit(0 if st["running"] else 1)
    if st["running"]:
        age = st["last_tick_age"]
        live = f"last tick {age:g} s ago" if age is not None else "no tick yet"
        if not st["consuming"]:
            live += " (NOT consuming: the service restarts its worker)"
        echo(f"pwe service: running, pid {st['pid']} (worker {st['worker']}, beat {st['beat']}); {live}")
    else:
        echo(f"pwe service: not running ({st['service_dir']}); pwe service start")
    depth = "?" if st["queue_depth"] is None else st["queue_depth"]
    echo(f"broker: {st['broker']}; queue {st['queue']}: {depth} waiting")
    echo(f"runs ({len(st['runs'])}, under {st['run_root']}):")
    for r in st["runs"][-20:]:
        by = f"  trigger {r['trigger']}" if r.get("trigger") else ""
        err = f"  {r['error']}" if r.get("error") else ""
        echo(f"  {r['run_id']}  {r['phase']}{by}{err}")
    echo(f"triggers ({len(st['triggers'])}):")
    for t in st["triggers"]:
        echo(f"  {t['id']}  {t['when']}  overlap {t['overlap']}  -> {t['workflow']}"
                   + (f"  next {t['next']}" if t.get("next") else ""))
    sys.exit(0 if st["running"] else 1)


@service.command(name="_main", hidden=True)
def service_main() -> None:
    """The service process (internal: pwe service start runs it)."""
    from ..service import daemon

    sys.exit(daemon.main(_store()))


# -- pwe submit --service -------------------------------------------------------------------------
def submit_to_service(file: str, sets: tuple[str, ...], host: str | None, cores: int | None,
                      broker: str | None, run_dir: str | None = None, hosts_file: str | None = None,
                      as_json: bool = False, workspace: str | None = None) -> None:
    """Send FILE to the service (this machine's, or the one at --broker / $PWE_BROKER) and
    print the run id it will have (chosen here: a submission delivered twice is one run)."""
    from ..base.settings import BROKER, QUEUE
    from ..workflow.load import parse_sets
    from ..service import daemon
    from ..runstate.service_store import check_queue
    from ..service.submit import prepare

    try:
        if run_dir or hosts_file:
            raise InputError(f"{'--run-dir' if run_dir else '--hosts'} does not go with --service: the service "
                             "keeps its runs under its run root and reads its own hosts")
        req = prepare(file, parse_sets(sets), host, cores, workspace)
        store = _store()
        if broker is not None:
            where, url = "--broker", broker
        elif BROKER.get():
            where, url = BROKER.name, BROKER.get()
        else:
            where, url = f"{store.root / 'config.json'}: broker", store.config().get("broker") or "filesystem://"
        url = daemon.check_broker("filesystem://" if url == "embedded" else url, where)
        queue = check_queue(QUEUE.get(), QUEUE.name) if QUEUE.get() else store.queue()
        if url.startswith("filesystem:"):
            store.make()
        from ..service.app import send

        try:
            send(url, queue, store, "pwe.submit", req=req)
        except Exception as exc:  # the broker's own error, whatever its kind, in one line
            raise PweError(f"cannot reach the broker {daemon.redact(url)}: {daemon.redact_in(str(exc), url)}") from None
    except PweError as exc:
        fail(exc)
    if url.startswith("filesystem:") and daemon._holder(store) is None:
        echo("warning: the service is not running; the run starts when it does (pwe service start)", err=True)
    if as_json:
        import json

        click.echo(json.dumps({"run_id": req["run_id"], "service": daemon.redact(url)}))
    else:
        echo(req["run_id"])


# -- pwe trigger ------------------------------------------------------------------------------------
@click.group(cls=PweGroup)
def trigger() -> None:
    """Start workflows on a cron schedule, at the end of another run, or when a file appears
    (the service fires them: pwe service start)."""


@trigger.command()
@click.argument("file", type=ChosenPath(dir_okay=False))
@click.option("--cron", "cron_expr", type=CHOSEN, default=None, metavar="EXPR",
              help="a cron expression: five fields, or six with seconds last ('* * * * * */10')")
@click.option("--tz", type=CHOSEN, default="UTC", show_default=True,
              help="the time zone the expression is read in (IANA name)")
@click.option("--catch-up", "catchup", is_flag=True,
              help="a schedule missed while the service was down fires once on its return (default: not at all)")
@click.option("--after-run", "after", type=CHOSEN, default=None, metavar="success|failure|any",
              help="fire when a run ends so")
@click.option("--of", "of", type=CHOSEN, default=None, metavar="WORKFLOW",
              help="(--after-run) only runs of this workflow (its name)")
@click.option("--on-file", "on_file", default=None, metavar="GLOB",
              help="fire for each file that appears matching GLOB")
@click.option("--settle", default=5.0, show_default=True, type=Seconds(0, 86400),
              help="(--on-file) seconds a file must stay unchanged before it is taken")
@click.option("--overlap", type=CHOSEN, default="skip", show_default=True, metavar="allow|skip|queue",
              help="while this trigger's previous run runs: start another (allow), do not (skip), "
                   "start it after (queue)")
@click.option("--id", "tid", type=CHOSEN, default=None, help="the trigger's name (default t1, t2, ...)")
@set_option
@click.option("--host", type=CHOSEN, default=None, help="run every node on this host")
@click.option("--cores", type=CORES, default=None, help="cores of this machine to fill")
@json_option
def add(file, cron_expr, tz, catchup, after, of, on_file, settle, overlap, tid, sets, host, cores, as_json) -> None:
    """Add a trigger that starts FILE. Runs get, as properties their payloads may use:
    scheduled_time (ISO UTC), trigger_run (the run that ended), trigger_file (the file)."""
    import glob
    import os

    from ..base.ids import MAX_TRIGGER_ID, is_trigger_id
    from ..workflow.load import parse_sets
    from ..planning.plan import plan_workflow
    from ..service import cron
    from ..service.supervisor import ENDS, OVERLAPS

    try:
        kinds = [k for k, v in (("--cron", cron_expr), ("--after-run", after), ("--on-file", on_file)) if v is not None]
        if len(kinds) != 1:
            raise InputError("give exactly one of --cron, --after-run, --on-file"
                             + (f" (not {' and '.join(kinds)})" if kinds else ""))
        if overlap not in OVERLAPS:
            raise InputError(f"--overlap {overlap}: one of {', '.join(OVERLAPS)}")
        if tid is not None and not is_trigger_id(tid):
            raise InputError(f"--id {tid!r}: letters, digits, '_' and '-', at most {MAX_TRIGGER_ID}")
        path = Path(file).resolve()
        plan = plan_workflow(path, parse_sets(sets), host=host)  # bad input is said now, not at 3 a.m.
        trig: dict[str, Any] = {"workflow": str(path), "name": plan.workflow.name, "sets": parse_sets(sets),
                                "host": host, "cores": cores, "overlap": overlap, "created": time.time()}
        if cron_expr is not None:
            expr = cron.check_expression(cron_expr)
            cron.check_zone(tz)
            trig.update(kind="cron", cron=expr, tz=tz, catchup=catchup)
        elif after is not None:
            if after not in ENDS:
                raise InputError(f"--after-run {after}: one of {', '.join(ENDS)}")
            trig.update(kind="run-end", on=after, of=of)
        else:
            trig.update(kind="file", glob=_file_glob(on_file, plan), settle=settle)
            # files already there are not new: only files that appear from now on fire
            trig["taken"] = {}
            for p in glob.glob(trig["glob"]):
                try:
                    st = os.stat(p)
                    trig["taken"][p] = [st.st_size, st.st_mtime]
                except OSError:
                    pass
        store = _store().make()
        with store.locked():
            triggers = store.triggers()
            if tid is None:
                n = 1
                while f"t{n}" in triggers:
                    n += 1
                tid = f"t{n}"
            elif tid in triggers:
                raise InputError(f"--id {tid}: a trigger of that name exists (pwe trigger remove {tid} first)")
            trig["id"] = tid
            triggers[tid] = trig
            store.save_triggers(triggers)
    except PweError as exc:
        fail(exc)
    from ..service.daemon import describe

    if as_json:
        click.echo(json.dumps(describe(trig), indent=2))
    else:
        echo(f"trigger {tid}: {describe(trig)['when']}, overlap {overlap} -> {trig['workflow']}")


@trigger.command(name="list")
@json_option
def list_triggers(as_json: bool) -> None:
    """The triggers: what fires each, its overlap rule, its workflow, its last run."""
    from ..service.daemon import trigger_rows

    triggers = trigger_rows(_store())
    if as_json:
        click.echo(json.dumps(triggers, indent=2))
        return
    if not triggers:
        echo("no triggers (pwe trigger add)")
    for t in triggers:
        echo(f"{t['id']}  {t['when']}  overlap {t['overlap']}  -> {t['workflow']}"
                   + ("" if t.get("enabled", True) else "  (disabled)")
                   + (f"  next {t['next']}" if t.get("next") else "")
                   + (f"  last run {t['last_run']}" if t.get("last_run") else "")
                   + (f"  ({t['pending']} queued)" if t.get("pending") else ""))


@trigger.command()
@click.argument("tid", type=CHOSEN, metavar="ID")
@json_option
def remove(tid: str, as_json: bool) -> None:
    """Remove trigger ID (runs it started go on)."""
    from ..base.source import did_you_mean

    try:
        store = _store().make()
        with store.locked():
            triggers = store.triggers()
            if tid not in triggers:
                raise InputError(f"no trigger '{tid}'{did_you_mean(tid, triggers)}; pwe trigger list")
            del triggers[tid]
            store.save_triggers(triggers)
    except PweError as exc:
        fail(exc)
    click.echo(json.dumps({"removed": tid}) if as_json else f"trigger {tid} removed")


@trigger.command()
@click.argument("tid", type=CHOSEN, metavar="[ID]", required=False)
@click.option("--limit", default=50, show_default=True, type=COUNT, help="the newest N (0: all)")
@json_option
def history(tid: str | None, limit: int, as_json: bool) -> None:
    """What the triggers did, oldest first: fired (with the run), skipped, queued, missed."""
    store = _store()
    rows = store.history(tid)
    if tid is not None and not rows and tid not in store.triggers():  # (a removed trigger's history stays)
        from ..base.errors import did_you_mean

        echo(f"no trigger '{tid}'{did_you_mean(tid, store.triggers())}; pwe trigger list", err=True)
        sys.exit(2)
    if limit:
        rows = rows[-limit:]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        echo("nothing yet" + (f" for trigger {tid}" if tid else ""))
    for r in rows:
        extra = " ".join(f"{k}={v}" for k, v in r.items() if k not in ("id", "trigger", "what", "t"))
        echo(f"{_when(r['t'])}  {r['trigger']}  {r['what']}  {extra}")


def _enable(tid: str, on: bool, as_json: bool) -> None:
    from ..service.supervisor import set_enabled

    try:
        changed = set_enabled(_store().make(), tid, on, who())
    except PweError as exc:
        fail(exc)
    word = "enabled" if on else "disabled"
    if as_json:
        click.echo(json.dumps({"trigger": tid, "enabled": on, "changed": changed}))
    else:
        echo(f"trigger {tid} {word}" if changed else f"trigger {tid} was {word} already")


@trigger.command()
@click.argument("tid", type=CHOSEN, metavar="ID")
@json_option
def enable(tid: str, as_json: bool) -> None:
    """Let trigger ID fire again (a cron trigger from now on: no catch-up of what it missed)."""
    _enable(tid, True, as_json)


@trigger.command()
@click.argument("tid", type=CHOSEN, metavar="ID")
@json_option
def disable(tid: str, as_json: bool) -> None:
    """Keep trigger ID from firing until it is enabled again (pwe trigger enable)."""
    _enable(tid, False, as_json)


@trigger.command()
@click.argument("tid", type=CHOSEN, metavar="ID")
@json_option
def fire(tid: str, as_json: bool) -> None:
    """Fire trigger ID now, as its schedule would (its overlap rule holds); prints the run id."""
    from ..service.supervisor import fire_now

    try:
        run_id = fire_now(_store().make(), tid, who())
    except PweError as exc:
        fail(exc)
    click.echo(json.dumps({"trigger": tid, "run_id": run_id}) if as_json else run_id)
