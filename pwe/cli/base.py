"""What every ``pwe`` command shares: one line for an error, warnings, the common options,
a run named on the command line, the console.

Every command that reads input maps :class:`~pwe.base.errors.InputError` to one line on
stderr (``FILE:LINE: message``) and exit status 2; no traceback reaches a user.
Heavy modules (pydantic, jinja2, rich) are imported inside the commands that
need them: ``pwe status`` answers from a snapshot file and must start fast.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from typing import NamedTuple

import click

from ..base.errors import PweError


def usage_line(exc: click.UsageError, path: str | None = None, command: click.Command | None = None) -> str:
    """One line for a usage error of any command (click says three: Usage, Try, Error):
    the command, what is wrong (with the nearest right word), and where the right ones
    are. ``pwe run: no such option '--hots' (did you mean '--hosts'?); `pwe run --help`
    lists them``. ``path`` and ``command``: whose error it is, when click did not say."""
    import difflib
    import re

    from ..base.errors import did_you_mean, one_line

    if exc.ctx is not None:
        path, command = exc.ctx.command_path, exc.ctx.command
    path = path or "pwe"
    text = one_line(exc.format_message())
    hint = "says how it is used"
    unknown = re.match(r"No such command '(.*?)'\.", text)
    if isinstance(exc, click.NoSuchOption) and command is not None:
        names = {o.lstrip("-"): o for p in command.params if not getattr(p, "hidden", False)
                 for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}  # (compared without the dashes)
        close = difflib.get_close_matches(exc.option_name.lstrip("-"), list(names), n=1, cutoff=0.6)
        near = f" (did you mean '{names[close[0]]}'?)" if close else ""
        text, hint = f"no such option '{exc.option_name}'{near}", "lists them"
    elif unknown and isinstance(command, click.Group):
        shown = command.shown() if isinstance(command, PweGroup) else [
            n for n, c in command.commands.items() if not c.hidden]
        text, hint = f"no such command '{unknown.group(1)}'{did_you_mean(unknown.group(1), shown)}", "lists them"
    else:
        text = re.sub(r"\.? ?\(?Did you mean (.*?)\??\)?$", r" (did you mean \1?)", text).rstrip(".")
        if len(text) > 1 and text[0].isupper() and not text[1].isupper():
            text = text[0].lower() + text[1:]
    return f"{path}: {text}; `{path} --help` {hint}"


class PweGroup(click.Group):
    """``pwe`` and its groups of commands: a usage error of any command (an unknown option
    or command, a missing argument, a value not allowed) is one line on stderr, exit
    status 2, like every other error of input. A group alone (``pwe``, ``pwe hosts``)
    still shows its help."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise _one_line_usage(exc) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            sub = self.commands.get(ctx.invoked_subcommand or "")  # (whose options click could not tell)
            raise _one_line_usage(exc, f"{ctx.command_path} {ctx.invoked_subcommand}" if sub else ctx.command_path,
                                  sub or self) from None

    def shown(self) -> list[str]:
        """The names of its commands that are not hidden (what a misspelt one is compared with)."""
        return [n for n, c in self.commands.items() if not c.hidden]


class Listed(NamedTuple):
    """A command of :class:`LazyGroup`, as its table says it: where it is (``module:name``),
    the first sentence of its help (what ``pwe --help`` shows of it) and whether it is hidden."""

    where: str
    short: str
    hidden: bool = False


class LazyCommands(MutableMapping):
    """name -> command, each imported from its module the first time it is asked for
    (``pwe status`` imports pwe.cli.see only; ``pwe --help`` none of them). The table is
    :data:`pwe.cli.main.COMMANDS`; a command added later (``add_command``) is kept as it is."""

    def __init__(self, table: dict[str, Listed]):
        self.table = table
        self.loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.loaded:
            module, _, attr = self.table[name].where.partition(":")  # (KeyError: no such command)
            # (__import__, not importlib.import_module: `python -X importtime` shows what it imports)
            self.loaded[name] = getattr(__import__(module, fromlist=[attr]), attr)
        return self.loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self.loaded.pop(name, None)
        self.table = {n: t for n, t in self.table.items() if n != name}

    def __iter__(self):
        return iter(sorted(set(self.table) | set(self.loaded)))

    def __len__(self) -> int:
        return len(set(self.table) | set(self.loaded))


class LazyGroup(PweGroup):
    """A group whose commands are imported only when one is invoked (or its help asked
    for): ``pwe --help`` lists them from their table (:class:`Listed`), click formatting
    each line as it would from the command itself (tests/cli/test_command_table.py holds the two
    alike). The one parser of every command stays click's."""

    def __init__(self, *args, table: dict[str, Listed], **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(table)

    def shown(self) -> list[str]:
        table, loaded = self.commands.table, self.commands.loaded
        return [n for n in self.commands if not (loaded[n].hidden if n in loaded else table[n].hidden)]

    def format_commands(self, ctx, formatter) -> None:
        """click's own listing (Group.format_commands), each line from the table unless its
        command is imported already."""
        from gettext import gettext

        names = self.shown()
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        table, loaded = self.commands.table, self.commands.loaded
        rows = [(n, (loaded[n] if n in loaded else click.Command(n, help=table[n].short)).get_short_help_str(limit))
                for n in names]
        with formatter.section(gettext("Commands")):
            formatter.write_dl(rows)


def _one_line_usage(exc: click.UsageError, path: str | None = None,
                    command: click.Command | None = None) -> click.UsageError:
    """``exc`` as a usage error that shows itself in one line (click's own class, so its
    exit status and handling stay click's; the class tree of pwe's errors is pwe.base.errors)."""
    if getattr(exc, "one_line", False) or type(exc).__name__ == "NoArgsIsHelpError":
        return exc  # (said already; `pwe` or `pwe hosts` alone: the help it asks for)
    line = usage_line(exc, path, command)
    said = click.UsageError(line, exc.ctx)
    said.one_line = True
    said.show = lambda file=None: click.echo(line, err=True)
    return said


def console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def echo(text: object = "", err: bool = False, nl: bool = True) -> None:
    """Print lines that hold values members, users or run files made: every control
    character but newline and tab written visibly (:func:`pwe.base.text.inert`), so nothing
    of theirs reaches the terminal as an escape sequence. Each value is :func:`~pwe.base.text.shown`
    as well where it is put into a line (a newline of its own cannot make a line up)."""
    from ..base.text import inert

    click.echo(inert(str(text)), err=err, nl=nl)


def markup(value: object, lines: bool = False) -> str:
    """A value put into rich's markup (``con.print``, a table's cell): shown as text, its
    control characters written visibly (``lines``: but newline and tab, a script's) and its
    brackets not read as markup (``[bold]``)."""
    from rich.markup import escape

    from ..base.text import inert, shown

    return escape(inert(str(value)) if lines else shown(value))


def fail(exc: PweError) -> None:
    echo(str(exc), err=True)
    sys.exit(exc.exit_status)


def out(text: str) -> None:
    """Print a command's output whole to stdout; a reader that closed the pipe early
    (``pwe failures RUN --json | head -c1``) has what it wanted: exit 0, no traceback, as
    ``pwe trace | head`` does."""
    import os

    try:
        click.echo(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


def warn(warnings: list[str]) -> None:
    for w in warnings:
        echo(f"warning: {w}", err=True)


def find(run: str | None):
    """The run directory RUN names (:func:`pwe.runstate.rundir.find`: a run id or unique prefix, under
    ./pwe-runs or the service's run root; a path; None: the newest under ./pwe-runs)."""
    from ..runstate.rundir import find

    return find(run)


def who() -> str:
    """Who asked, as the record of an action (cancel, retry, resume, a trigger fired)
    says it: ``cli:<user>`` (the dashboard says ``ui:<user>@<address>``)."""
    import getpass
    import os

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return f"cli:uid {os.getuid()}"


def _said(value: object) -> str:
    """A value a user gave, as a refusal shows it: short, and any control character escaped."""
    text = str(value)
    if not text:
        return "''"
    text = text if text.isprintable() else repr(text)[1:-1]
    return text if len(text) <= 40 else text[:40] + "..."


class Whole(click.IntRange):
    """A whole number between two bounds, both always given (``1e30``, ``-1``, ``abc`` and
    ``2.5`` are refused alike, in one line saying what to give, e.g. ``--cores: -1 is out of
    range; give a whole number from 1 to 100000``). With :class:`Seconds`, the one type of
    every numeric option: no command checks a number itself."""

    name = "integer"

    def __init__(self, low: int, high: int):
        super().__init__(low, high)

    def _describe_range(self) -> str:
        return f"{self.min} to {self.max}"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            from ..base.numbers import NumberError, read_int

            try:  # (ASCII digits only, bounded: int() takes '١٢', '1_0', and fails past 4,300 digits)
                number = read_int(str(value).strip())
            except NumberError:
                self.fail(f"{_said(value)} is not a whole number; give one from {self._describe_range()}", param, ctx)
        if not self.min <= number <= self.max:
            self.fail(f"{_said(value)} is out of range; give a whole number from {self._describe_range()}",
                      param, ctx)
        return number


class Seconds(click.FloatRange):
    """A number of seconds between two bounds, finite (``nan``, ``inf``, ``-1``, ``1e30``
    refused in one line: a watch that waits for ever, a file never taken); ``unit``: what
    else it counts (``core-hours``: pwe resume --budget)."""

    name = "seconds"

    def __init__(self, low: float, high: float, unit: str = "seconds"):
        super().__init__(low, high)
        self.unit = self.name = unit

    def _describe_range(self) -> str:
        return f"{self.min:g} to {self.max:g}"

    def convert(self, value, param, ctx):
        import math

        from ..base.numbers import NumberError

        try:  # (ASCII only: float() takes '١.٥' and '1_0'; those are not numbers here)
            number = math.nan if isinstance(value, bool) else float(value) if isinstance(value, (int, float)) \
                else _float_text(str(value).strip(), NumberError)
        except NumberError:
            self.fail(f"{_said(value)} is not a number; give {self.unit} from {self._describe_range()}", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{_said(value)} is not a finite number; give {self.unit} from {self._describe_range()}", param,
                      ctx)
        if not self.min <= number <= self.max:
            self.fail(f"{_said(value)} is out of range; give {self.unit} from {self._describe_range()}", param, ctx)
        return number


def _float_text(text: str, number_error: type) -> float:
    """An option's number in ASCII and without '_' (float() takes '١.٥' and '1_0'); NaN, inf
    and 1e400 are read as what they are and refused after as not finite, in the option's words."""
    if not text.isascii() or "_" in text:
        raise number_error(text)
    try:
        return float(text)
    except ValueError:
        raise number_error(text) from None


class Chosen(click.ParamType):
    """A value that selects something (a host, a node, a state, a run, a trigger, a
    workflow): an empty one is refused in one line (``--of: an empty value selects
    nothing``), never taken as nothing or as everything. The type of every selecting
    option and argument without a type of its own."""

    name = "text"

    def convert(self, value, param, ctx):
        _not_empty(self, value, param, ctx)
        return value


class ChosenPath(click.Path):
    """:class:`click.Path` that refuses an empty value (``Path('')`` is the current
    directory: an option left empty would select it)."""

    def convert(self, value, param, ctx):
        _not_empty(self, value, param, ctx)
        return super().convert(value, param, ctx)


def _not_empty(kind: click.ParamType, value: object, param, ctx) -> None:
    if isinstance(value, str) and not value.strip():
        kind.fail(f"{_said(value)} selects nothing; give a value, or leave the option out", param, ctx)


CHOSEN = Chosen()


#: The bounds of the numbers commands take (a machine's cores, a pilot's nodes: far beyond
#: any there is, far below what would overflow or never end).
CORES = Whole(1, 100_000)
NODES = Whole(1, 100_000)
#: How many lines or members a listing shows (0: all, where the option says so).
COUNT = Whole(0, 1_000_000_000)


set_option = click.option(
    "--set", "sets", multiple=True, metavar="NAME=VALUE", help="override or add a property (repeatable)"
)
json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output")
hosts_option = click.option("--hosts", "hosts_file", default=None, type=ChosenPath(), help="a hosts.yaml to read too")
workspace_option = click.option(
    "--workspace", default=None, type=ChosenPath(), metavar="DIR",
    help="the directory products are relative to (PWE_WORKSPACE; default: the workflow's 'workspace:', else its "
    "directory)")


fresh_option = click.option(
    "--fresh", is_flag=True, help="run every member: reuse nothing from earlier runs, take nothing as complete by "
    "its products")
concurrent_option = click.option(
    "--concurrent", is_flag=True, help="run even while another run of this workflow is live in the workspace "
    "(refused otherwise: both would run every member and write the same products); give each its own --workspace")
reuse_from_option = click.option(
    "--reuse-from", "reuse_from", default=None, type=ChosenPath(), metavar="DIR",
    help="reuse unchanged members of the runs of this workflow in DIR (a runs root, or one run) instead of those "
    "beside the new run")


def leave(status: int) -> None:
    """Exit once a run is over, without tearing the interpreter down: freeing every module
    and object of the engine (pydantic's models, jinja2) takes ~60 ms after the last
    member has ended, in every `pwe run`. The journal and snapshot are closed by now;
    exit handlers still run and output is flushed. With another thread alive, the usual
    exit (which waits for it)."""
    import threading

    if threading.active_count() > 1:
        sys.exit(status)
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


#: seconds a run followed in the foreground has to stop after Ctrl-C (:func:`ctrl_c_bounded`)
CTRL_C_BOUND = 10.0


class ctrl_c_bounded:
    """While a run is followed in the foreground: the first Ctrl-C raises KeyboardInterrupt
    as usual (the engine cancels the run, journals it and tidies up), and from then on the
    process leaves within :data:`CTRL_C_BOUND` s whatever it is waiting on; a second Ctrl-C
    leaves at once. Leaving early loses nothing: the journal is written as it goes and
    ``pwe resume`` / ``pwe retry`` take the run up (a stopped engine's lock is stale)."""

    def __init__(self, then: str):
        self.then = then  # what the user does next, said when the bound cuts the tidying short
        self.hit = False

    def __enter__(self) -> "ctrl_c_bounded":
        import signal

        self.before = signal.signal(signal.SIGINT, self._on_int)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        signal.signal(signal.SIGINT, self.before)

    def _leave(self, why: str) -> None:
        import os

        os.write(2, f"{why}; {self.then}\n".encode())
        os._exit(130)

    def _on_int(self, signum: int, frame: object) -> None:
        import threading

        if self.hit:
            self._leave("interrupted again: leaving now")
        self.hit = True
        timer = threading.Timer(CTRL_C_BOUND, self._leave,
                                args=(f"interrupted: the run did not stop within {CTRL_C_BOUND:g} s; leaving now",))
        timer.daemon = True
        timer.start()
        raise KeyboardInterrupt
