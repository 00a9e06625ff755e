"""The commands that run a workflow and act on a run: ``run``, ``submit``, ``resume``,
``retry``, ``cancel``, ``notify`` and the hidden ``_engine`` (the background engine of
``submit`` and ``--detach``). pwe.cli.main lists them without importing this module.

Why one module over 450 lines: ``run``, ``submit``, ``resume`` and ``retry`` share the
run options and their readers (``--halt``, ``--budget``), the making or staging of a run
(``_create``) and the following of an engine in the foreground (the progress display and
the outcome's last lines); a module per command would import those back. ``cancel``,
``notify`` and ``_engine`` are a few lines each.
"""

from __future__ import annotations

import json
import os
import sys

import click

from .base import (CHOSEN, CORES, ChosenPath, Seconds, Whole, ctrl_c_bounded, echo, fail, find, hosts_option,
                   json_option, leave, warn, who, workspace_option, fresh_option, reuse_from_option,
                   concurrent_option)
from ..base.errors import InputError, PweError, RunStopped, one_line


def _count_or_text(text: str) -> int | str:
    """``--halt``'s count as an int where it is one by the one reader (ASCII digits, bounded:
    int() took '١٢' as 12, and '²' or 5,000 digits were a traceback); else the text, which
    the Halt rule words."""
    from ..base.numbers import NumberError, read_int

    try:
        return read_int(text)
    except NumberError:
        return text


def _halt(ctx, param, value: str | None) -> dict | None:
    """``--halt FAILED[,soon|now]`` (10%, 50, 5%,now): the run's failure budget, as the
    workflow's ``halt:`` says it; a bad one is one line, exit status 2."""
    if value is None:
        return None
    from ..workflow import records

    failed, _, when = value.partition(",")
    failed = failed.strip()
    halt = {"failed": _count_or_text(failed), "when": when.strip() or "soon"}
    try:
        h = records.check("Halt", halt)
    except records.Refused:
        h = None
    if h is None:  # (pydantic words why)
        from pydantic import ValidationError

        from ..workflow.model import Halt

        try:
            h = Halt.model_validate(halt)
        except ValidationError as exc:
            why = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            raise click.BadParameter(f"{value!r}: {why} (e.g. --halt 10% or --halt 50,now)") from None
    return {"failed": h.failed, "when": h.when}


HALT_HELP = "the failure budget: halt when this many members failed (10%, 50; ',now' stops what runs)"


def _budget(ctx, param, value: float | None) -> dict | None:
    """``--budget CORE_HOURS`` (a bounded number: Seconds' checks): the run's core-hour budget
    from now on (pwe/engine/budget.py), as the workflow's ``budget: {coreHours}``."""
    return None if value is None else {"coreHours": value}


BUDGET_HELP = "the run's core-hour budget from now on (replaces the workflow's budget: coreHours)"
CORE_HOURS = Seconds(1e-6, 1e12, unit="core-hours")

_run_options = [
    click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="override or add a property"),
    click.option("--host", type=CHOSEN, default=None, help="run every node on this host"),
    click.option("--run-dir", default=None, type=ChosenPath(), help="run directory (default ./pwe-runs/RUN-ID)"),
    click.option("--cores", type=CORES, default=None, help="cores of this machine to fill (default: all)"),
    hosts_option,
    workspace_option,
    click.option("--halt", default=None, metavar="FAILED[,now]", callback=_halt, help=HALT_HELP),
    fresh_option,
    reuse_from_option,
    concurrent_option,
    click.option("--simulate", is_flag=True, help="rehearse: the engine, the feed and the pilots run, no payload does "
                 "(each member sleeps its node's measured duration, else --duration); see when halt, hold, retry and "
                 "the budget would act"),
    click.option("--duration", default=None, type=Seconds(0.0, 86400.0), metavar="SECONDS",
                 help="with --simulate: how long a member of a node no earlier run measured 'runs' (default 1)"),
    click.option("--fail", "fails", multiple=True, metavar="QUERY[=P%][@REASON]",
                 help="with --simulate: the members this query selects fail (or P%% of them), with reason exit (the "
                 "default), oom or walltime, e.g. 'mesh=fine=20%%@oom'"),
]


def _rehearsal(simulate: bool, duration: float | None, fails: tuple[str, ...]) -> dict | None:
    """``--simulate`` with its --duration and --fail, as run.json's ``simulate``; the two
    without --simulate are refused (one line)."""
    if not simulate:
        if duration is not None or fails:
            raise InputError(f"{'--duration' if duration is not None else '--fail'} rehearses a run: give --simulate "
                             "too")
        return None
    from ..engine.simulate import fail_option

    return {"duration": duration, "fail": [fail_option(f) for f in fails]}


def _with_run_options(f):
    for opt in reversed(_run_options):
        f = opt(f)
    return f


def _run_id(value: str | None) -> str | None:
    """``pwe submit --run-id`` (hidden: a staged run's id, given by the machine that staged
    it, pwe.engine.remote): a run id's characters only."""
    from ..base.ids import is_run_id

    if value is not None and not is_run_id(value):
        raise click.BadParameter("a run id is letters, digits, '.', '_' and '-'")
    return value


def _create(file: str, sets: tuple[str, ...], host: str | None, run_dir: str | None, cores: int | None,
            hosts_file: str | None, workspace: str | None = None, run_id: str | None = None,
            halt: dict | None = None, fresh: bool = False, reuse_from: str | None = None, concurrent: bool = False,
            simulate: dict | None = None):
    """An engine for a new run of FILE, or (a host without shared file systems) the run
    staged to its login node (:class:`pwe.engine.remote.RemoteRun`)."""
    from ..engine.loop import Engine
    from ..workflow.load import parse_sets
    from ..planning.placement import plan_for_hosts
    from ..engine.remote import RemoteRun, staged

    values = parse_sets(sets)
    planned = plan_for_hosts(file, values, host=host, hosts_file=hosts_file, cores=cores)
    far = [name for name, h in planned[1].items() if staged(h)]
    if far:
        # (each staged run has a directory of its own there, with no earlier run in it: it
        # reuses nothing, so --fresh changes nothing; these two would be dropped unsaid)
        if reuse_from:
            raise InputError(f"--reuse-from: the runs of host '{far[0]}' are staged to its login node, each into a "
                             "directory of its own with no earlier run to reuse from: run without --reuse-from")
        if halt:
            raise InputError(f"--halt is not passed to a run staged to host '{far[0]}': give the workflow a 'halt:' "
                             "instead")
        if simulate is not None:
            raise InputError(f"--simulate: a run staged to host '{far[0]}' is not rehearsed there; rehearse it on "
                             "this machine (--host local)")
        return RemoteRun.create(file, planned, values, run_dir=run_dir, cores=cores, workspace=workspace)
    if simulate is not None and reuse_from:
        raise InputError("--simulate runs every member (a rehearsal reuses nothing): leave out --reuse-from")
    return Engine.create(file, values, host=host, cores=cores, run_dir=run_dir, hosts_file=hosts_file,
                         workspace=workspace, planned=planned, run_id=run_id, **({"halt": halt} if halt else {}),
                         **({"fresh": True} if fresh else {}), **({"reuse_from": reuse_from} if reuse_from else {}),
                         **({"concurrent": True} if concurrent else {}),
                         **({"simulate": simulate, "fresh": True} if simulate is not None else {}))


def _prestart(host: str | None) -> None:
    """A local pilot's interpreter started before the engine's imports and planning, so
    the two start-ups overlap (protocols/warmpilot.py; unused, it leaves at once); only
    where the run may well be local (no --host, or --host local). The console script's
    front door, pwe/cli/front.py, has usually started it before click; this serves pwe.cli.main's callers."""
    if host in (None, "local"):
        from protocols.warmpilot import prestart

        prestart()


def _follow(engine, as_json: bool = False, announce: str | None = None, **kwargs) -> None:
    """Run the engine in the foreground with a progress display; exit 0 / 1. With
    ``as_json`` the last word on stdout is one JSON object (run_id, run_dir, ok, totals).
    ``announce``: a line said once the run has begun (a run refused before, by a check the
    engine makes as it starts, is one line: its refusal)."""
    from ..runstate.rundir import run_ref

    bar, report = _progress_display(engine, announce)
    try:
        with ctrl_c_bounded(f"`pwe retry {run_ref(engine.dir)}` runs what was left"):
            ok = engine.run(progress=report, **kwargs)
    except RunStopped as exc:
        if bar is not None:
            bar.stop()
        echo(f"{engine.run_id}: stopped with its state intact: {exc}; then: pwe resume {run_ref(engine.dir)}",
                   err=True)
        sys.exit(exc.exit_status)
    except KeyboardInterrupt:
        if bar is not None:
            bar.stop()
        echo(f"cancelled; `pwe retry {run_ref(engine.dir)}` runs what was left", err=True)
        sys.exit(130)
    finally:
        if bar is not None:
            bar.stop()
    _say_outcome(engine, ok, as_json)
    leave(0 if ok else 1)


def _progress_display(engine, announce: str | None):
    """(the bar, or None, and the engine's progress callback): a rich progress bar on a
    terminal, else a line on stderr at most every 5 s (and at the end); ``announce`` said
    at the first report."""
    from ..observe.runview import progress

    total = engine.plan.total_members
    bar = None
    last_line = [0.0]
    if sys.stderr.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("{task.fields[extra]}"), TimeElapsedColumn(), transient=False)
        task = bar.add_task(engine.run_id, total=total, extra="")
        bar.start()

    def report(st) -> None:
        nonlocal total, announce
        if announce:
            echo(announce, err=True)
            announce = None
        finished, extra = progress(st.totals())
        total = sum(st.totals())  # (a check grows members as the run goes: pwe/planning/trees.py)
        if bar is not None:
            bar.update(task, completed=finished, total=total, extra=extra)
        else:
            import time

            now = time.time()
            if now - last_line[0] >= 5 or finished == total:
                last_line[0] = now
                echo(f"{engine.run_id}: {finished}/{total} finished, {extra}", err=True)

    return bar, report


def _say_outcome(engine, ok: bool, as_json: bool) -> None:
    """The run's outcome on stdout (one JSON object with ``as_json``), and on stderr the
    trees left unconverged and a few failed members, with where to look next."""
    from ..runstate.rundir import run_ref
    from ..observe.runview import complete_counts, failed_examples, outcome
    from ..observe.treeview import unconverged_lines
    from ..base.states import FAILED, QUARANTINED

    t = engine.state.totals()
    if as_json:
        from ..base.states import NAMES

        click.echo(json.dumps({"run_id": engine.run_id, "run_dir": str(engine.dir), "ok": ok,
                               "totals": dict(zip(NAMES, t)), **complete_counts(engine.state)}))
    else:
        rehearsed = " (simulated: no payload ran)" if getattr(engine, "simulated", False) else ""
        echo(f"{engine.run_id}: {outcome(t, engine.state)} of {sum(t)}{rehearsed}  ({engine.dir})")
    ref = run_ref(engine.dir)  # (it reads the service's store: after the run, not before its first member)
    halted = engine.state.halted
    if halted is not None:
        then = (f"pwe resume {ref} --budget LARGER goes on" if "coreHours" in halted else  # (pwe/engine/budget.py)
                f"pwe retry {ref} runs the failed again (the budget counts anew), pwe resume {ref} --halt LARGER "
                "goes on")
        echo(f"{halted.get('why')}: no new member started after it; {then}", err=True)
    if engine.state.holds:
        from ..engine.holds import Holds

        for line in Holds.said(engine.state):
            echo(f"{line}; see: pwe explain; pwe release {ref} -q QUERY runs them", err=True)
    if t[QUARANTINED]:
        echo(f"{t[QUARANTINED]} quarantined: running when their pilot or node was lost maxLosses times; see: pwe "
             f"show {ref} --state quarantined; pwe retry {ref} -q state=quarantined runs them again", err=True)
    for line in unconverged_lines(engine.state, ref):
        echo(line, err=True)
    if t[FAILED]:
        shown = failed_examples(engine.state, engine.dir, limit=3)
        for _, line in shown:
            echo(line, err=True)
        echo(f"see: pwe show {ref} --state failed", err=True)
        if shown:  # NODE:INDEX, not NODE[INDEX]: brackets are a glob to the shell it is pasted into
            echo(f"see: pwe logs {ref} {shown[0][0]}", err=True)


@click.command()
@click.argument("file", type=ChosenPath(dir_okay=True))
@_with_run_options
@json_option
def run(file, sets, host, run_dir, cores, hosts_file, workspace, halt, fresh, reuse_from, concurrent, simulate,
        duration, fails, as_json) -> None:
    """Run FILE to the end with a progress bar; exit 0 when every member succeeded, else 1."""
    _prestart(host)
    from .remote import drive
    from ..engine.remote import RemoteRun

    try:
        engine = _create(file, sets, host, run_dir, cores, hosts_file, workspace, halt=halt, fresh=fresh,
                         reuse_from=reuse_from, concurrent=concurrent,
                         simulate=_rehearsal(simulate, duration, fails))
        said = f"run {engine.run_id}  ({engine.dir})"
        if isinstance(engine, RemoteRun):
            from protocols.warmpilot import dismiss

            echo(said, err=True)
            warn(engine.warnings)
            dismiss()
            return drive(engine, as_json, fresh=True)
        warn(engine.warnings)
        _resumable(engine)
        _follow(engine, as_json, announce=said)
    except PweError as exc:
        fail(exc)


def _resumable(engine) -> None:
    """One line (not an error) when an earlier run of the workflow under the same runs root
    did not finish, was not cancelled and has no engine: `pwe resume` could pick it up, where
    this run begins anew (reusing what that one finished, where it may)."""
    from ..runstate.lending import unfinished

    found = unfinished(engine.dir.parent, engine.plan.workflow.name, exclude=engine.dir)
    if found:
        more = f" (and {len(found) - 1} more: pwe runs)" if len(found) > 1 else ""
        echo(f"pwe: run {found[0]} of workflow '{engine.plan.workflow.name}' did not finish and its engine is gone"
             f"{more}: `pwe resume {found[0]}` would pick it up where it stopped; this run begins anew, reusing "
             "what it finished", err=True)


@click.command()
@click.argument("file", type=ChosenPath(dir_okay=True))
@_with_run_options
@click.option("--service", "to_service", is_flag=True, help="hand it to the pwe service (its broker: --broker)")
@click.option("--broker", default=None, metavar="URL", help="(--service) the service's broker, e.g. redis://...")
@click.option("--run-id", default=None, hidden=True, callback=lambda ctx, p, v: _run_id(v))
@json_option
def submit(file, sets, host, run_dir, cores, hosts_file, workspace, halt, fresh, reuse_from, concurrent, simulate,
           duration, fails, to_service, broker, run_id, as_json) -> None:
    """Start a run of FILE in the background and print its run id."""
    from .remote import drive
    from ..engine.control import spawn_engine
    from ..engine.remote import RemoteRun

    if to_service or broker is not None:
        from .service import submit_to_service

        if halt:
            fail(InputError("--halt is not passed to the service: give the workflow a 'halt:' instead"))
        if fresh or reuse_from or concurrent or simulate:
            fail(InputError("--fresh, --reuse-from, --concurrent and --simulate are not passed to the service: run "
                            "with `pwe run` or `pwe submit` without --service"))

        return submit_to_service(file, sets, host, cores, broker, run_dir, hosts_file, as_json, workspace)
    try:
        engine = _create(file, sets, host, run_dir, cores, hosts_file, workspace, run_id, halt=halt, fresh=fresh,
                         reuse_from=reuse_from, concurrent=concurrent,
                         simulate=_rehearsal(simulate, duration, fails))
        warn(engine.warnings)
        if isinstance(engine, RemoteRun):
            return drive(engine, as_json, follow=False, fresh=True)
    except PweError as exc:
        fail(exc)
    try:
        spawn_engine(engine.dir)
    except PweError as exc:  # its engine could not take it, or refused it (said why): nothing ran, nothing is left
        from ..runstate.runs import unmake

        try:
            began = any((engine.dir / "pilots").iterdir())
        except OSError:
            began = False
        if not began:
            unmake(engine.dir)
        fail(exc)
    click.echo(json.dumps({"run_id": engine.run_id, "run_dir": str(engine.dir)}) if as_json else engine.run_id)


@click.command(name="_engine", hidden=True)
@click.argument("run_dir", type=ChosenPath(exists=True, file_okay=False))
@click.option("--retry", is_flag=True)
@click.option("--ready-fd", type=Whole(0, 2**31 - 1), default=None)
@click.option("--by", type=CHOSEN, default=None)
@click.option("--only", "only_file", default=None, type=ChosenPath(dir_okay=False))
def _engine_cmd(run_dir: str, retry: bool, ready_fd: int | None, by: str | None, only_file: str | None) -> None:
    """The background engine of `pwe submit` and `--detach` (internal). With ``--ready-fd``
    it says on that pipe, once, that it holds the run, or why it could not take it
    (pwe.engine.control.spawn_engine waits for that word)."""
    from pathlib import Path

    _prestart(None)
    from ..engine.control import REFUSED, TAKEN
    from ..engine.loop import Engine

    def say(word: str) -> None:
        nonlocal ready_fd
        if ready_fd is None:
            return
        try:
            os.write(ready_fd, (one_line(word) + "\n").encode())
        except OSError:
            pass  # (the command that started it stopped waiting)
        finally:
            try:
                os.close(ready_fd)
            except OSError:
                pass  # (not a descriptor this process has: nobody to tell)
            ready_fd = None

    only = None
    if only_file:  # (pwe.engine.control.spawn_engine: the members a retry takes, in a file of control/)
        try:
            only = json.loads(Path(only_file).read_text())
        except (OSError, ValueError):
            only = {}  # (unreadable: retry nothing rather than everything)
        Path(only_file).unlink(missing_ok=True)
    try:
        engine = Engine.open(Path(run_dir), reload_hosts=True)
        engine.lock.acquire()
        # "taken" once the run has begun: a refusal as the engine starts it (a products:
        # directory that cannot be listed) is the command's to say, in its one line
        ok = engine.run(retry=retry, by=by, only=only, progress=lambda st: say(TAKEN))
    except PweError as exc:
        say(f"{REFUSED}{exc.exit_status} {exc}")  # (only when it did not take the run: once said, said)
        fail(exc)
    sys.exit(0 if ok else 1)


@click.command()
@click.argument("run")
@json_option
def cancel(run: str, as_json: bool) -> None:
    """Stop RUN: its pilots and their members."""
    from ..engine.control import cancel as cancel_run
    from ..engine.remote import RemoteRun, is_remote

    try:
        d = find(run)
        done = RemoteRun.open(d).cancel() if is_remote(d) else cancel_run(d, by=who())
    except PweError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps({"run_id": d.name, "cancelled": done}))
    else:
        echo(f"{d.name}: cancelled" if done else f"{d.name}: already finished; nothing to cancel")


@click.command()
@click.argument("run", required=False)
@click.option("--detach", is_flag=True, help="go on in the background, like pwe submit")
@click.option("--halt", default=None, metavar="FAILED[,now]", callback=_halt, help=HALT_HELP + "; replaces the run's")
@click.option("--budget", default=None, metavar="CORE_HOURS", type=CORE_HOURS, callback=_budget, help=BUDGET_HELP)
@json_option
def resume(run: str | None, detach: bool, halt: dict | None, budget: dict | None, as_json: bool) -> None:
    """Pick RUN up after any crash: finished members are kept, the rest run. A halted run
    goes on only with a larger --halt (or after pwe retry), or --budget (its core-hours)."""
    _continue(run, detach, retry=False, as_json=as_json, halt=halt, budget=budget)


@click.command()
@click.argument("run", required=False)
@click.option("--detach", is_flag=True, help="go on in the background, like pwe submit")
@click.option("-q", "--query", default=None,
              help="only the failed, skipped, cancelled, quarantined or held members this query selects, e.g. "
              "'node=sim; exit=7', 'state=quarantined'")
@click.option("--halt", default=None, metavar="FAILED[,now]", callback=_halt, help=HALT_HELP + "; replaces the run's")
@click.option("--budget", default=None, metavar="CORE_HOURS", type=CORE_HOURS, callback=_budget, help=BUDGET_HELP)
@json_option
def retry(run: str | None, detach: bool, query: str | None, halt: dict | None, budget: dict | None,
          as_json: bool) -> None:
    """Rerun RUN's failed, quarantined, cancelled and held members (and what they held back);
    -q: only those a query selects. The failure budget counts anew (the core-hours spent do not)."""
    _continue(run, detach, retry=True, as_json=as_json, query=query, halt=halt, budget=budget)


@click.command()
@click.argument("run")
@click.option("-q", "--query", required=True,
              help="the held members to let go, e.g. 'mesh=fine', 'node=sim; mesh=fine' (pwe show -q's language)")
@click.option("--detach", is_flag=True, help="go on in the background, like pwe submit")
@json_option
def release(run: str, query: str, detach: bool, as_json: bool) -> None:
    """Let RUN's held members that QUERY selects go: they run (and what waits for them), and
    their value is not held again in this run.

    A value is held (hold: {after: N}) when N of its members failed and none is done; its
    members not yet started wait, as state held, and the run ends once nothing else can
    go. pwe retry lets every held member go too, with the failed ones."""
    _continue(run, detach, retry=True, as_json=as_json, query=query, held_only=True)


@click.command("set")
@click.argument("run")
@click.argument("pairs", nargs=-1, metavar="KEY=VALUE...")
@click.option("-q", "--query", default=None, help="only the members this query selects, e.g. 'mesh=fine' (pwe show "
              "-q's language); default: every member")
@json_option
def set_cmd(run: str, pairs: tuple[str, ...], query: str | None, as_json: bool) -> None:
    """Change what RUN's members ask for from their next attempt on: memoryPerMember,
    maxWallTimePerMember, threads (cores), gpus, retries, priority, env.NAME.

    priority=N (0-1000): the members it names go to their pilots before the rest of their
    lane, the highest first.

    A member running now keeps what it asked (said with the count); one not yet started,
    or retried later, asks for the new values. A running engine takes the change in at
    once; with none, it waits in the run's control/ for the next (pwe resume, pwe retry),
    which takes it before it hands out a member. Journaled: pwe explain, show and trace
    say what each attempt asked."""
    from ..engine.control import set_values

    try:
        d = find(run)
        said = set_values(d, pairs, query, who())
    except PweError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps({"run_id": d.name, "taken": said is not None, **(said or {})}))
    elif said is None:
        echo(f"{d.name}: no engine runs it; the change waits in its control/ and the next engine (pwe resume, pwe "
             "retry) takes it before it hands out a member")
    elif not said.get("ok"):
        echo(f"pwe set: {said.get('why')}", err=True)
        sys.exit(int(said.get("exit") or 1))
    else:
        echo(f"{d.name}: set for {said.get('later', 0):,} members not started; {said.get('running', 0):,} running "
             "keep what they asked" + (" (taken once already)" if said.get("again") else ""))


def _continue(run: str | None, detach: bool, retry: bool, as_json: bool = False, query: str | None = None,
              halt: dict | None = None, budget: dict | None = None, held_only: bool = False) -> None:
    from .remote import drive
    from ..engine.control import retry_selection
    from ..engine.remote import RemoteRun, is_remote

    try:
        d = find(run)
        if is_remote(d):
            if query is not None:
                raise InputError("retry -q: a run staged to a login node is retried whole (pwe retry RUN)")
            return drive(RemoteRun.open(d), as_json, follow=not detach, again="retry" if retry else "resume")
        # ('' is refused: it selects nothing)
        only = retry_selection(d, query, held_only=held_only) if query is not None else None
        if detach and (halt or budget):
            raise InputError(f"--{'halt' if halt else 'budget'} is taken by an engine in the foreground: leave out "
                             "--detach")
        if detach:
            from ..engine.control import detach as go_on

            run_id = go_on(d, retry, by=who(), only=only)
            click.echo(json.dumps({"run_id": run_id, "run_dir": str(d)}) if as_json else run_id)
            return
        from ..engine.loop import Engine

        engine = Engine.open(d, reload_hosts=True, halt=halt, budget=budget)
        engine.lock.acquire()  # before a word is said: of two at once, one takes it, the other says who has it
        _follow(engine, as_json, retry=retry, by=who(), only=only)
    except PweError as exc:
        fail(exc)


@click.command()
@click.option("--run", "run_dir", required=True, type=ChosenPath(), help="the run directory")
@click.option("--pilot", required=True, help="the pilot id (p1, p2, ...)")
@click.argument("event", type=click.Choice(["queued", "started", "ended"]))
@click.argument("job")
@click.argument("status", required=False, type=Whole(-1024, 1024))
def notify(run_dir: str, pilot: str, event: str, job: str, status: int | None) -> None:
    """User-exit callback for a batch job's edge events (called from job scripts)."""
    from pathlib import Path

    from ..runstate.notify import check_ids, send

    d = Path(run_dir)
    try:
        check_ids(pilot, job)
        if not (d / "secret").is_file():
            raise InputError(f"{d}: not a pwe run directory (no secret)")
        send(d, pilot, event, job, status)
    except PweError as exc:
        fail(exc)
