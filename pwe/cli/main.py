"""The ``pwe`` command line: parses, calls the modules that do the work, prints.

The group ``pwe`` and the table of its commands: each command is in a module of its own
(running a workflow and acting on a run: :mod:`pwe.cli.running`; checking input:
:mod:`pwe.cli.check`; showing a run: :mod:`pwe.cli.see`; ...), imported only when it is
invoked, so that ``pwe --help`` imports none of them and ``pwe status`` only its own
(:class:`pwe.cli.base.LazyGroup`). What the commands share is :mod:`pwe.cli.base`. Every
listing takes ``--json``.
"""

from __future__ import annotations

import sys

import click

from .base import LazyGroup, Listed, echo, fail, leave
from ..base.errors import PweError

#: Every command of ``pwe``: where it is, and the first sentence of its help (what ``pwe
#: --help`` lists; tests/cli/test_command_table.py checks each against the command itself).
COMMANDS: dict[str, Listed] = {
    "validate": Listed("pwe.cli.check:validate", "Parse and check FILE (and that every node's host exists and fits "
        "it); print its nodes, members and edges."),
    "plan": Listed("pwe.cli.check:plan", "Show the expansion of FILE and the commands its first members would run (dry "
        "run); how many members earlier runs of it would lend (--explain: why the others run); --estimate: and the "
        "core-hours a run would need, from a sample run here."),
    "hosts": Listed("pwe.cli.check:hosts", "The host registry: built-in local, ~/.config/pwe/hosts.yaml, hosts.yaml "
        "beside a workflow."),
    "service": Listed("pwe.cli.service:service", "pwe as a long-lived service (Celery worker and beat): submissions, "
        "triggers, adopting runs."),
    "trigger": Listed("pwe.cli.service:trigger", "Start workflows on a cron schedule, at the end of another run, or "
        "when a file appears (the service fires them: pwe service start)."),
    "pilot": Listed("pwe.cli.pilot:pilot", "More pilots for a running run; let one finish and leave; list them."),
    "ui": Listed("pwe.cli.ui:ui", "A live dashboard of the runs in the browser: runs, a run's DAG, members, logs, "
        "timeline; triggers; hosts; cancel, retry, resume, trigger now."),
    "runs": Listed("pwe.cli.see:runs", "Every run pwe knows, newest first: where it came from (command line, service, "
        "trigger NAME), state, progress, started, duration."),
    "status": Listed("pwe.cli.see:status", "Per node: members waiting / queued / running / done / failed, and the "
        "core-hours of done, running, eligible and waiting work (newest run by default)."),
    "show": Listed("pwe.cli.see:show", "Members of RUN with parameters, state, attempts, exit status and outputs."),
    "logs": Listed("pwe.cli.see:logs", "A member's stdout and stderr, from its pilot's output stream."),
    "trace": Listed("pwe.cli.see:trace", "One record per member attempt: where and when it ran, how it ended, its CPU "
        "time, peak memory and outputs (docs: how-to/seeing-a-run.md)."),
    "report": Listed("pwe.cli.see:report", "Write one self-contained HTML page about RUN: summary, timeline, "
        "utilisation, durations and memory per node, right-sizing, failures, pilots."),
    "explain": Listed("pwe.cli.why:explain", "Why MEMBER of RUN is in its state, in layers: the member (what it "
        "waits for, what holds it, which change made it run again), its placement, its allocation."),
    "failures": Listed("pwe.cli.why:failures", "RUN's failures summarised: by parameter value (the values most "
        "over-represented first), by reason, by error signature, by the host the attempts ran on."),
    "top": Listed("pwe.cli.top:top", "A live dashboard in the terminal: runs, a run's nodes, pilots, failures by "
        "value, a member's log."),
    "lint": Listed("pwe.cli.lint:lint", "Warnings about FILE, each with its file and line: exit 0 (1 with --strict)."),
    "run": Listed("pwe.cli.running:run", "Run FILE to the end with a progress bar; exit 0 when every member succeeded, "
        "else 1."),
    "submit": Listed("pwe.cli.running:submit", "Start a run of FILE in the background and print its run id."),
    "_engine": Listed("pwe.cli.running:_engine_cmd", "The background engine of `pwe submit` and `--detach` "
        "(internal).", hidden=True),
    "cancel": Listed("pwe.cli.running:cancel", "Stop RUN: its pilots and their members."),
    "resume": Listed("pwe.cli.running:resume", "Pick RUN up after any crash: finished members are kept, the rest run."),
    "retry": Listed("pwe.cli.running:retry", "Rerun RUN's failed, quarantined, cancelled and held members (and "
        "what they held back); -q: only those a query selects."),
    "set": Listed("pwe.cli.running:set_cmd", "Change what RUN's members ask for from their next attempt on: "
        "memoryPerMember, maxWallTimePerMember, threads (cores), gpus, retries, priority, env.NAME."),
    "release": Listed("pwe.cli.running:release", "Let RUN's held members that QUERY selects go: they run (and what "
        "waits for them), and their value is not held again in this run."),
    "notify": Listed("pwe.cli.running:notify", "User-exit callback for a batch job's edge events (called from job "
        "scripts)."),
    "events": Listed("pwe.cli.events:events", "Every event of a run: each pilot message (checked against the run's "
        "secret, with what the engine made of it), then the journal's records."),
}


@click.group(cls=LazyGroup, table=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pwe")
def cli() -> None:
    """pwe: parameterized DAG workflows on HPC clusters, with glide-in pilots."""
    from ..base.settings import check

    check()  # every PWE_* setting, before any command: a bad one is one line, exit status 2


def main() -> None:
    try:
        cli.main(prog_name="pwe", standalone_mode=True)
    except PweError as exc:  # anything a command did not map itself
        fail(exc)
    except KeyboardInterrupt:
        echo("interrupted", err=True)
        sys.exit(130)


def console() -> None:
    """The ``pwe`` program (its console script and ``python -m pwe``): :func:`main`, then
    leave without tearing the interpreter down (:func:`pwe.cli.base.leave`: exit handlers
    run and output is flushed; the usual exit while another thread is alive). Freeing
    click's and pwe's modules cost every command a third of what ``pwe --help`` took
    (bench/BENCHMARKS.md). Callers in a process of their own use :func:`main`, which
    raises SystemExit as click does."""
    try:
        main()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            leave(exc.code or 0)
        raise
    leave(0)
