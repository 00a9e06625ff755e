"""``pwe top``'s screens (Textual): the runs, one run (its nodes with progress bars and
rates, its pilots, its members filtered by state, and a pane below them: the selected
member's log tail or why it is in its state, or the run's failures by value), a
confirmation, the keys, and a line saying the terminal is too small. What the screens draw
is pwe/cli/topdraw.py's.

What they show is pwe/observe/topview.py's documents, read in a thread every ``--every``
seconds (the keys answer meanwhile), never under the run's lock; a run's state is read once
and kept up to date from its journal's tail (:class:`pwe.ui.model.Runs`, the web
dashboard's reader). Cancel and retry call what ``pwe cancel`` and ``pwe retry --detach``
call (:mod:`pwe.engine.control`). Every value of a run is drawn as rich ``Text``, never as
markup, and shown (:func:`pwe.base.text.shown`) before: a ``[bold]`` or an escape sequence
in a parameter is drawn as the characters it is.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Static

from ..base.errors import PweError
from ..base.text import shown
from ..observe import topview
from .topdraw import HELP, STATE_STYLE, crop, line, node_lines, pilot_line, run_cells

#: the smallest terminal the screens are drawn in (columns, lines): below, one line says so
SMALLEST = (60, 16)
#: the panes below a run's members, each with its key: the selected member's log tail, why
#: it is in its state, the run's failures by value
PANES = {"log": "l", "explain": "e", "failures": "v"}
CSS = """
Screen { layout: vertical; }
.line { height: 1; }
#title { background: $primary-background; }
#nodes { height: auto; max-height: 6; }
#pilots { height: auto; max-height: 2; }
#members, #runs { height: 1fr; min-height: 3; }
#detail { height: 1fr; min-height: 3; border-top: solid $secondary; display: none; }
#detail.tall { height: 2fr; }
#keys { background: $primary-background; }
ConfirmScreen, HelpScreen { align: center middle; }
#ask, #help { width: auto; max-width: 76; height: auto; border: round $warning; padding: 0 1; }
"""


def on_top(screen: Screen) -> bool:
    """Whether ``screen`` is seen: the top one, or under a question or the keys only (a
    screen under another, or under the line that says the terminal is too small, reads nothing)."""
    stack = screen.app.screen_stack
    return screen in stack and all(isinstance(s, ModalScreen) for s in stack[stack.index(screen) + 1:])


def deliver(screen: Screen, draw: Any, *args: Any) -> None:
    """From a reading thread: ``draw(*args)`` on the app's loop, if ``screen`` is still
    there then (left meanwhile, or the app quit: what was read is dropped)."""
    try:
        screen.app.call_from_thread(lambda: draw(*args) if screen.is_attached else None)
    except RuntimeError:  # (the app has stopped: nothing to draw on)
        pass


class Rows(DataTable):
    """A table of rows (runs, members): home and end (and g, G) go to the first and the
    last row (DataTable's own go to the first and last column)."""

    BINDINGS = [Binding("home,g", "scroll_top", "first", show=False),
                Binding("end,G", "scroll_bottom", "last", show=False)]


class TooSmall(Screen):
    """One line: the terminal is too small, and the size the screens need."""

    BINDINGS = [Binding("q", "app.quit", "quit")]

    def compose(self) -> ComposeResult:
        yield Static(id="small")

    def say(self, size: tuple[int, int]) -> None:
        self.query_one("#small", Static).update(
            Text(f"too small: {size[0]}x{size[1]}; pwe top needs {SMALLEST[0]}x{SMALLEST[1]}"))


class ConfirmScreen(ModalScreen[bool]):
    """A question answered by y (True) or n / escape (False)."""

    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
                Binding("escape", "answer(False)", "no")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Static(Text(f"{self.question}\n\ny: yes   n: no"), id="ask")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class HelpScreen(ModalScreen[None]):
    """The keys; any key closes it."""

    def compose(self) -> ComposeResult:
        yield Static(Text(HELP), id="help")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        self.dismiss(None)


class RunsScreen(Screen):
    """Every run pwe knows (``pwe runs``), newest first; enter opens one."""

    def __init__(self):
        super().__init__()
        self.dirs: list[str] = []  # each row's run directory
        self.reading = False

    def compose(self) -> ComposeResult:
        yield Static(line("pwe top: runs"), id="title", classes="line")
        yield Rows(id="runs", cursor_type="row")
        yield Static(id="note", classes="line")
        yield Static(line("up/down move  enter open  ? keys  q quit"), id="keys", classes="line")

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        table.add_columns("run", "state", "progress", "started")
        self.refresh_data()
        self.set_interval(self.app.every, self.refresh_data)

    def refresh_data(self) -> None:
        if not self.reading and on_top(self):
            self.reading = True
            self.read()

    @work(thread=True, group="runs")
    def read(self) -> None:
        try:
            rows, error = topview.runs(), None
        except (PweError, OSError, ValueError) as exc:
            rows, error = None, shown(str(exc))
        deliver(self, self.show_runs, rows, error)

    def show_runs(self, rows: list[dict[str, Any]] | None, error: str | None) -> None:
        self.reading = False
        note = self.query_one("#note", Static)
        note.update(line(error or "", "red"))
        if rows is None:
            return
        table = self.query_one("#runs", DataTable)
        at = table.cursor_row
        was = self.dirs[at] if 0 <= at < len(self.dirs) else None
        table.clear()
        self.dirs = [r["run_dir"] for r in rows]
        for r in rows:
            table.add_row(*run_cells(r))
        if rows:  # (the same run selected: a new run comes first and moves the others down)
            table.move_cursor(row=self.dirs.index(was) if was in self.dirs else min(at, len(rows) - 1))
        self.query_one("#title", Static).update(line(f"pwe top: runs ({len(rows)})  {time.strftime('%H:%M:%S')}"))
        if not rows:
            note.update(line("no runs under ./pwe-runs nor the service's run root", "dim"))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_open(self) -> None:
        table = self.query_one("#runs", DataTable)
        if self.dirs and 0 <= table.cursor_row < len(self.dirs):
            self.app.push_screen(RunScreen(Path(self.dirs[table.cursor_row])))


class RunScreen(Screen):
    """One run: title, nodes, pilots, members (filtered by state), a pane below them (the
    selected member's log or why it is in its state, or the run's failures), keys."""

    BINDINGS = [Binding("escape", "back", "back"), Binding("f", "filter", "filter"),
                Binding("l", "pane('log')", "log"), Binding("e", "pane('explain')", "explain"),
                Binding("v", "pane('failures')", "failures"), Binding("j", "scroll(1)", "pane down"),
                Binding("k", "scroll(-1)", "pane up"), Binding("c", "cancel", "cancel"),
                Binding("r", "retry", "retry")]

    def __init__(self, run_dir: Path):
        super().__init__()
        self.run_dir = run_dir
        self.which = "all"
        self.mode: str | None = None  # the pane below the members: None or one of PANES
        self.pane: dict[str, Any] | None = None  # what it shows (topview's pane document)
        self.scrolled = 0  # lines the pane is scrolled from its start (a log: up from its end)
        self.view: dict[str, Any] | None = None
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.listed: list[tuple[str, int]] = []  # each row's member: (node, index)
        self.asked: tuple[str, int] | None = None  # the member the pane was last opened on
        self.reading = False

    def compose(self) -> ComposeResult:
        yield Static(line(f"run {shown(self.run_dir.name)}: reading"), id="title", classes="line")
        yield Static(id="nodes")
        yield Static(id="pilots")
        yield Static(id="members-title", classes="line")
        yield Rows(id="members", cursor_type="row")
        yield Static(id="detail")
        yield Static(id="note", classes="line")
        yield Static(line("f filter  l log  e explain  v failures  c cancel  r retry  esc  ? keys  q quit"),
                     id="keys", classes="line")

    def on_mount(self) -> None:
        self.query_one("#members", DataTable).add_columns("member", "state", "tries", "ended", "values")
        self.query_one("#members", DataTable).focus()
        self.refresh_data()
        self.set_interval(self.app.every, self.refresh_data)

    # -- reading (a thread) and drawing ----------------------------------------------------
    def refresh_data(self) -> None:
        if not self.reading and on_top(self):
            self.reading = True
            self.read(self.which, self.mode, self.selected())

    @work(thread=True, group="run")
    def read(self, which: str, mode: str | None, selected: tuple[str, int] | None) -> None:
        try:
            loaded = self.app.runs.get(self.run_dir)
            with loaded.lock:
                view = topview.run_view(self.run_dir, loaded.state)
                rows = topview.members(self.run_dir, loaded.state, which)
            pane = self.pane_of(mode, selected)
        except (PweError, OSError, ValueError) as exc:  # (a run damaged, or gone, while shown: said, not raised)
            deliver(self, self.show_error, shown(str(exc)))
            return
        deliver(self, self.show_run, view, rows, which, pane)

    def pane_of(self, mode: str | None, selected: tuple[str, int] | None, first: bool = False) -> dict[str, Any] | None:
        """The pane's document (topview's) for ``mode`` and the member ``selected``, with
        both in it (a late answer for another is not drawn); ``first``: on opening it (the
        batch system is asked why a pilot job waits then, not at each refresh)."""
        if mode is None:
            return None
        if mode == "failures":
            pane = topview.failures_pane(self.run_dir)
        elif selected is None:
            pane = {"title": mode, "lines": ["no member selected"], "from_end": False}
        elif mode == "log":
            pane = topview.log_tail(self.run_dir, *selected)
        else:
            pane = topview.explained(self.run_dir, *selected, ask=first)
        return {**pane, "mode": mode, "member": selected if mode != "failures" else None}

    def show_error(self, error: str) -> None:
        self.reading = False
        self.query_one("#note", Static).update(line(error, "red"))

    def show_run(self, view: dict[str, Any], rows: list[dict[str, Any]], which: str,
                 pane: dict[str, Any] | None) -> None:
        self.reading = False
        self.view = view
        self.samples = topview.kept(self.samples + [(time.monotonic(), topview.ran(view))])
        width = self.size.width or 80
        failed = view["totals"].get("failed", 0)
        self.query_one("#title", Static).update(line(
            f"run {view['run_id']}: {view['phase']}  {view['finished']:,}/{view['total']:,} finished"
            + (f", {failed:,} failed" if failed else "") + f"  {time.strftime('%H:%M:%S')}"))
        rates = topview.rates(self.samples) if view["running"] else {}  # (of a run that ended: none)
        self.query_one("#nodes", Static).update(node_lines(view, rates, width))
        self.query_one("#pilots", Static).update(pilot_line(view))
        self.show_members(rows, which)
        if pane is not None:
            self.show_pane(pane)
        if view["warnings"]:
            self.query_one("#note", Static).update(line(view["warnings"][0], "yellow"))

    def show_members(self, rows: list[dict[str, Any]], which: str) -> None:
        table = self.query_one("#members", DataTable)
        at = self.selected()
        table.clear()
        self.listed = [(r["node"], r["member"]) for r in rows]
        cells = [(r["label"], r["state"], str(r["attempts"]), r["ended"][:24], r["values"]) for r in rows]
        # the values take what the other columns leave of the width (no column scrolls off it)
        used = sum(max([len(c[k]) for c in cells] + [len(h)]) for k, h in enumerate(("member", "state", "tries",
                                                                                      "ended")))
        room = max(8, (self.size.width or 80) - used - 2 * 5 - 2)
        for label, state, tries, ended, values in cells:
            table.add_row(Text(label), Text(state, style=STATE_STYLE.get(state, "")), Text(tries), Text(ended),
                          crop(values, room))
        if at in self.listed:
            table.move_cursor(row=self.listed.index(at))
        of = self.view["totals"].get(which) if which != "all" else self.view["total"]
        more = f"first {len(rows):,} of {of:,}" if of and of > len(rows) else f"{len(rows):,}"
        self.query_one("#members-title", Static).update(line(f"members: {which} ({more})  f: filter", "bold"))

    def show_pane(self, pane: dict[str, Any] | None = None) -> None:
        """Draw ``pane`` (the one shown when None: scrolled, resized) in the room the pane has."""
        if pane is not None:
            if pane["mode"] != self.mode or pane["member"] not in (None, self.selected()):
                return  # (a late answer: the pane or the member changed since it was asked)
            self.pane = pane
        if self.pane is None:
            return
        widget = self.query_one("#detail", Static)
        room = max(1, widget.size.height - 1)  # (less its title; the size is within its border)
        lines = self.pane["lines"]
        most = max(0, len(lines) - room)
        self.scrolled = min(max(self.scrolled, 0), most)
        start = most - self.scrolled if self.pane["from_end"] else self.scrolled
        key = PANES[self.pane["mode"]]
        more = "  j/k: scroll" if most else ""
        title = Text(f"{self.pane['title']}  ({key}: close{more})", style="bold")
        widget.update(Text("\n", no_wrap=True, overflow="ellipsis").join(
            [title] + [Text(line, no_wrap=True, overflow="ellipsis") for line in lines[start:start + room]]))

    # -- keys --------------------------------------------------------------------------------
    def selected(self) -> tuple[str, int] | None:
        table = self.query_one("#members", DataTable)
        if self.listed and 0 <= table.cursor_row < len(self.listed):
            return self.listed[table.cursor_row]
        return None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # (a refresh redraws the rows, and the cursor comes back to the same member: the
        # pane is not asked again for it, nor the batch system)
        if self.mode in ("log", "explain") and self.selected() != self.asked:
            self.scrolled = 0
            self.asked = self.selected()
            self.read_pane(self.mode, self.asked, True)

    @work(thread=True, group="pane", exclusive=True)
    def read_pane(self, mode: str, selected: tuple[str, int] | None, first: bool) -> None:
        try:
            pane = self.pane_of(mode, selected, first)
        except (PweError, OSError, ValueError) as exc:
            pane = {"title": mode, "lines": [shown(str(exc))], "from_end": False, "mode": mode, "member": selected}
        deliver(self, self.show_pane, pane)

    def on_resize(self, event: events.Resize) -> None:
        self.call_after_refresh(self.show_pane)

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_filter(self) -> None:
        if self.view is None:
            return
        self.which = topview.next_filter(self.which, self.view["totals"])
        self.query_one("#members-title", Static).update(line(f"members: {self.which} (reading)", "bold"))
        self.refresh_data()

    def action_pane(self, mode: str) -> None:
        """Open the pane ``mode`` (its key again: close it)."""
        widget = self.query_one("#detail", Static)
        self.mode = None if self.mode == mode else mode
        self.pane, self.scrolled = None, 0
        widget.display = self.mode is not None
        widget.set_class(self.mode in ("explain", "failures"), "tall")
        if self.mode is not None:
            widget.update(line("reading", "dim"))
            self.asked = self.selected()
            self.read_pane(self.mode, self.asked, True)

    def action_scroll(self, by: int) -> None:
        if self.pane is not None:
            self.scrolled += -by if self.pane["from_end"] else by
            self.show_pane()

    def action_cancel(self) -> None:
        name = shown(self.run_dir.name)
        self.app.push_screen(ConfirmScreen(f"Cancel run {name}?\nIts pilots and their members stop (pwe cancel)."),
                             lambda yes: self.act("cancel") if yes else self.note("cancel: not asked"))

    def action_retry(self) -> None:
        name = shown(self.run_dir.name)
        self.app.push_screen(ConfirmScreen(f"Retry run {name}?\nIts failed, skipped and cancelled members run again, "
                                           "in the background (pwe retry --detach)."),
                             lambda yes: self.act("retry") if yes else self.note("retry: not asked"))

    def note(self, text: str, style: str = "") -> None:
        self.query_one("#note", Static).update(line(text, style))

    def act(self, what: str) -> None:
        self.note(f"{what}: asked; waiting for the run's answer", "yellow")
        self.do(what)

    @work(thread=True, group="act")
    def do(self, what: str) -> None:
        from .base import who

        try:
            said = cancel_run(self.run_dir, who()) if what == "cancel" else retry_run(self.run_dir, who())
            style = ""
        except PweError as exc:
            said, style = f"{what}: {shown(str(exc))}", "red"
        deliver(self, self.note, said, style)


def cancel_run(run_dir: Path, by: str) -> str:
    """``pwe cancel RUN``: what it calls, and what it says."""
    from ..engine.control import cancel
    from ..engine.remote import RemoteRun, is_remote

    done = RemoteRun.open(run_dir).cancel() if is_remote(run_dir) else cancel(run_dir, by=by)
    name = shown(run_dir.name)
    return f"{name}: cancelled" if done else f"{name}: already finished; nothing to cancel"


def retry_run(run_dir: Path, by: str) -> str:
    """``pwe retry --detach RUN``: what it calls, and what it says."""
    from ..base.errors import InputError
    from ..engine.control import detach
    from ..engine.remote import is_remote

    if is_remote(run_dir):
        raise InputError(f"{run_dir.name} runs on a login node: pwe retry {run_dir.name} drives it")
    return f"{shown(detach(run_dir, True, by=by))}: retrying in the background"


class TopApp(App):
    """``pwe top``: the runs screen, and the run screen of ``run_dir`` over it when given."""

    CSS = CSS
    TITLE = "pwe top"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [Binding("q", "quit", "quit"), Binding("question_mark", "help", "keys")]

    def __init__(self, run_dir: Path | None, every: float):
        super().__init__()
        from ..ui.model import Runs

        self.first = run_dir
        self.every = every
        self.runs = Runs(keep=2)
        self.started = False

    def on_mount(self) -> None:
        self.push_screen(RunsScreen())
        if self.first is not None:
            self.push_screen(RunScreen(self.first))
        self.started = True
        self.fit(self.size.width, self.size.height)

    def on_resize(self, event: events.Resize) -> None:
        if self.started:  # (the first comes before the screens are there)
            self.fit(event.size.width, event.size.height)

    def fit(self, width: int, height: int) -> None:
        """Below :data:`SMALLEST`: the one line that says so, over whatever was shown."""
        small = isinstance(self.screen, TooSmall)
        if width < SMALLEST[0] or height < SMALLEST[1]:
            if not small:
                self.push_screen(TooSmall())
            self.call_after_refresh(lambda: isinstance(self.screen, TooSmall) and self.screen.say((width, height)))
        elif small:
            self.pop_screen()

    def action_help(self) -> None:
        if not isinstance(self.screen, (HelpScreen, TooSmall)):
            self.push_screen(HelpScreen())
