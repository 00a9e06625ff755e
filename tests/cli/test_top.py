"""``pwe top`` in a real terminal: tmux (a server of the test's own, 80x24), keys sent with
``send-keys`` and the screen read with ``capture-pane``, against real runs: a finished one
with a failed member (and a parameter value full of terminal escapes) and a live one
cancelled from the dashboard. Then the refusals: a terminal too small, no terminal at all."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, engine_pid, need, one_line_error, pwe, run_cli, show, status, wait_for

#: a run with a failed member (a[3], a line on stderr) and a member whose parameter value
#: would set the terminal's title, colour it red and be read as rich markup
FINISHED = r"""name: seen
nodes:
  a:
    parameters: {k: {range: [0, 6]}}
    run: |
      echo "hello {{ k }}"
      if [ {{ k }} = 3 ]; then echo "k=3 broke" >&2; exit 3; fi
  h:
    parameters: {v: ["\e]0;pwned\a\e[31m[bold]red[/bold]"]}
    run: echo {{ v }}
"""

#: members that say who they are; but the first two, they then sleep (each ``sleep`` a
#: unique argument, ours alone)
LIVE = """name: live
nodes:
  nap:
    parameters: {{k: {{range: [0, 8]}}}}
    run: echo "napping {{{{ k }}}}"; if [ {{{{ k }}}} -ge 2 ]; then sleep {marker}; fi
"""

#: where the screens are kept, as the terminal showed them (docs/how-to/top.md's captures)
ARTIFACTS = ROOT / "tests" / "artifacts"


class Terminal:
    """A tmux server of its own (``-L``: no other test's, nor the user's), one window of
    ``x`` by ``y`` running ``pwe top ARGS`` in ``cwd``; the pane stays after it exits."""

    def __init__(self, cwd: Path, *args: str, x: int = 80, y: int = 24):
        self.socket = f"pwe-top-{os.getpid()}-{secrets.token_hex(4)}"
        conf = cwd / f"{self.socket}.conf"
        conf.write_text("set -g remain-on-exit on\nset -g status off\n")
        self.conf = conf
        # (COLUMNS and LINES exported, as a shell may: the terminal's own size is still the one drawn in)
        env = {"PYTHONPATH": str(ROOT), "XDG_STATE_HOME": os.environ["XDG_STATE_HOME"], "TERM": "screen",
               "COLUMNS": "80", "LINES": "24"}
        command = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m", "pwe", "top",
                              *args])
        self.tmux("new-session", "-d", "-x", str(x), "-y", str(y), "-c", str(cwd), command)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", str(self.conf), *args], check=True,
                              capture_output=True, text=True, timeout=30).stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def wait(self, cond, what: str) -> str:
        """The screen once ``cond`` (a text on it, or a test of it) holds."""
        test = (lambda s: cond in s) if isinstance(cond, str) else cond
        seen = {"s": ""}

        def shows():
            seen["s"] = self.screen()
            return test(seen["s"])
        try:
            wait_for(shows, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{seen['s']}") from None
        return seen["s"]

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def terminals():
    """terminals(cwd, *args, x=, y=) -> a :class:`Terminal`; each server killed at the end."""
    need(shutil.which("tmux") is not None, "tmux is not installed (apt-get install tmux)")
    made: list[Terminal] = []

    def start(cwd, *args, **size):
        t = Terminal(Path(cwd), *args, **size)
        made.append(t)
        return t
    try:
        yield start
    finally:
        for t in made:
            t.close()


@pytest.fixture
def finished(tmp_path):
    """A finished run of FINISHED under ./pwe-runs of tmp_path: its run id."""
    (tmp_path / "wf.yaml").write_text(FINISHED)
    rc, out, err = pwe("run", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
    assert rc == 1, err  # a[3] fails
    return json.loads(out)["run_id"]


def keep(name: str, screen: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / name).write_text(screen)


def node_line(screen: str, node: str) -> str:
    """The line of ``node`` among the nodes (the lines under the run's), or ''."""
    return next((line for line in screen.splitlines()[1:7] if line.startswith(f"{node} ")), "")


def members_part(screen: str) -> str:
    """The screen's member list: from its header line to the keys line."""
    lines = screen.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("members:"))
    return "\n".join(lines[start:-1])


def test_top_opens_a_run_its_nodes_a_log_and_the_failed(tmp_path, finished, terminals):
    term = terminals(tmp_path)
    term.wait(finished, "the run in the list of runs")
    term.keys("Enter")
    term.wait(lambda s: f"run {finished}: finished with failures  7/7 finished, 1 failed" in s
              and all(t in node_line(s, "a") for t in ("6/6", "run 0", "fail 1")) and "1/1" in node_line(s, "h")
              and "pilots: p1 gone" in s and "members: all (7)" in s and "h[0]" in s,
              "the run's page: its nodes with their counts, its pilot, its members")
    # the log pane follows the selected member
    term.keys("l")
    term.wait("hello 0", "a[0]'s log")
    term.keys("Down", "Down", "Down")
    term.wait(lambda s: "log of a[3] attempt 1" in s and "hello 3\n-- stderr --\nk=3 broke" in s,
              "a[3]'s log: its stdout, then its stderr")
    term.keys("l")  # (closed)
    term.wait(lambda s: "log of" not in s, "the log pane to close")
    term.keys("f")
    screen = term.wait(lambda s: "members: failed (1)" in s and "a[3]" in s, "the failed members alone")
    shown = members_part(screen)
    assert "a[3]    failed  1      exit 3  k=3" in shown, screen
    assert not any(f"a[{i}]" in shown for i in (0, 1, 2, 4, 5)) and "h[0]" not in shown, screen
    # why it failed (pwe explain), then the run's failures by value (pwe failures): k=3 first
    term.keys("e")
    term.wait(lambda s: "explain a[3]" in s and "exit 3" in s.split("explain a[3]")[1], "a[3] explained")
    term.keys("v")
    screen = term.wait(lambda s: "by parameter value" in s and len(s.split("by parameter value")[1].splitlines()) > 3,
                       "the failures by value")
    first = screen.split("by parameter value")[1].splitlines()[2].split()
    assert first[:3] == ["a", "k", "3"] and first[-1] == "+100", screen  # the value every failure has
    keep("top-failures-80x24.txt", screen)


def test_top_draws_escapes_and_markup_in_values_as_text(tmp_path, finished, terminals):
    term = terminals(tmp_path, finished)  # (RUN given: its page at once)
    # the characters, written visibly, markup and all
    term.wait(r"h[0]    done    1      exit 0  v=\x1b]0;pwned\x07\x1b[31m[bold]red[/bold]", "h[0]'s value as text")
    term.keys("End", "l")
    screen = term.wait("log of h[0]", "h[0]'s log")
    assert r"\x1b]0;pwned\x07\x1b[31m[bold]red[/bold]" in screen, screen
    assert "pwned" not in term.tmux("display-message", "-p", "#{pane_title}")  # the title was never set


def test_top_cancel_asks_first(tmp_path, write, reaper, terminals):
    marker = f"60.{secrets.randbelow(10**9):09d}3"
    wf = write(LIVE.format(marker=marker))
    run = tmp_path / "pwe-runs" / "live"
    rc, out, err = pwe("submit", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    run_id = out.strip()
    reaper(run, engine_pid(run))
    try:
        term = terminals(tmp_path, run_id)
        term.wait(lambda s: f"run {run_id}: running  2/8 finished" in s
                  and all(t in node_line(s, "nap") for t in ("2/8", "run 2", "fail 0"))
                  and "pilots: p1 up on" in s and "running 2" in s,
                  "the live run: two members done, two running on its pilot")
        term.keys("l")
        keep("top-80x24.txt", term.wait("napping 0", "the log of nap[0], done in the live run"))
        term.keys("c")
        term.wait("y: yes   n: no", "the question before a cancel")
        term.keys("n")
        term.wait(lambda s: "y: yes" not in s and "cancel: not asked" in s, "the question gone, nothing done")
        assert status(run)["phase"] == "running"
        term.keys("c")
        term.wait("y: yes   n: no", "the question again")
        term.keys("y")
        wait_for(lambda: status(run)["phase"] == "cancelled", what="the run cancelled from the dashboard")
        term.wait(f"run {run_id}: cancelled", "the page saying so")
    finally:
        for pid in subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass


def test_top_retry_asks_first_then_reruns_the_failed(tmp_path, finished, terminals, reaper):
    run = tmp_path / "pwe-runs" / finished
    term = terminals(tmp_path, finished)
    term.wait("a[3]", "the run's page")
    term.keys("r")
    term.wait("y: yes   n: no", "the question before a retry")
    term.keys("n")
    term.wait(lambda s: "y: yes" not in s and "retry: not asked" in s, "the question gone, nothing done")
    assert {(m["node"], m["member"]): m["attempts"] for m in show(run)}[("a", 3)] == 1  # nothing ran again
    term.keys("r")
    term.wait("y: yes   n: no", "the question again")
    term.keys("y")
    term.wait(f"{finished}: retrying in the background", "the dashboard saying the retry began")
    reaper(run, engine_pid(run))
    # a[3] ran again (and failed again: k=3 always does), the run ended again; the
    # dashboard, reading it all along, never held it
    wait_for(lambda: {(m["node"], m["member"]): m["attempts"] for m in show(run)}[("a", 3)] == 2
             and status(run)["phase"] == "finished with failures", what="a[3] retried to its end")
    term.wait(lambda s: f"run {finished}: finished with failures" in s, "the page after the retry")


def test_top_too_small_says_so_then_draws_when_grown(tmp_path, terminals):
    term = terminals(tmp_path, x=50, y=12)
    screen = term.wait("too small", "the line saying the terminal is too small")
    assert screen.strip() == "too small: 50x12; pwe top needs 60x16", screen
    term.tmux("resize-window", "-x", "80", "-y", "24")
    term.wait(lambda s: "pwe top: runs (0)" in s and "no runs under" in s, "the runs page once there is room")


def test_top_without_a_terminal_refuses_in_one_line(tmp_path):
    line = one_line_error(*run_cli("top", cwd=tmp_path))
    assert line.startswith("pwe top: no terminal"), line


def test_top_without_textual_says_which_extra_in_one_line(tmp_path):
    hidden = tmp_path / "no-textual" / "textual"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('textual is not installed here')\n")
    rc, out, err = run_cli("top", cwd=tmp_path, env={"PYTHONPATH": f"{hidden.parent}{os.pathsep}{ROOT}"})
    assert one_line_error(rc, out, err) == "pwe top needs the tui extra: pip install 'pwe[tui]'"


def test_top_of_no_such_run_or_a_bad_every_is_one_line(tmp_path):
    assert "no run 'nope'" in one_line_error(*run_cli("top", "nope", cwd=tmp_path))
    for bad in ("nan", "0", "1e400", "-1"):
        assert "--every" in one_line_error(*run_cli("top", "--every", bad, cwd=tmp_path))


# -- what the screens draw (pwe/cli/topdraw.py), without a terminal --------------------------

def test_node_lines_fit_the_width_and_sum_the_nodes_past_five():
    from pwe.cli.topdraw import NODES_SHOWN, node_lines

    big = 10**12  # (counts past any run: the line still fits)
    nodes = [{"node": f"node-with-a-long-name-{k}", "total": big, "finished": big // 2,
              "counts": {"done": big // 3, "failed": big // 6, "running": 123_456}} for k in range(8)]
    view = {"nodes": nodes}
    for width in (60, 80, 200):
        lines = node_lines(view, {nodes[0]["node"]: 12345.6}, width).plain.splitlines()
        assert len(lines) == NODES_SHOWN and all(len(line) <= width for line in lines), (width, lines)
    assert lines[-1] == "… 4 nodes more: 2T/4T finished"
    assert lines[0].startswith("node-with-a-long ") and "500G/1T  run 123,456 fail 167G" in lines[0]


def test_counts_take_seven_characters_at_most():
    from pwe.cli.topdraw import count

    assert [count(n) for n in (0, 999_999, 1_000_000, 12_345_678, 999_999_999, 10**12, 10**15, 10**30)] == \
        ["0", "999,999", "1M", "12.3M", "1G", "1T", "1e+15", "1e+30"]
    assert all(len(count(10**k + 7)) <= 7 for k in range(40))


def test_the_bar_draws_done_failed_and_the_rest_in_its_width():
    from pwe.cli.topdraw import bar

    assert bar(0, 0, 0, 10).plain == " " * 10  # (no members: no bar)
    assert bar(5, 0, 10, 10).plain == "█" * 5 + "░" * 5
    assert bar(0, 1, 10**9, 10).plain == "█" + "░" * 9  # (one failure shows)
    assert bar(10, 0, 10, 0).plain == ""
    for done, failed in ((7, 3), (10, 0), (0, 10), (3, 3)):
        assert len(bar(done, failed, 10, 7).plain) == 7


def test_the_pilots_line_counts_them_and_puts_those_up_first():
    from pwe.cli.topdraw import pilot_line

    def pilot(pid, state, running=0):
        return {"pilot": pid, "state": state, "where": "on login1", "slots": 4, "running": running, "lost": [],
                "why": None}
    assert pilot_line({"pilots": []}).plain == "pilots: none yet"
    assert pilot_line({"pilots": [pilot("p1", "up", 2)]}).plain == "pilots: p1 up on login1 4 slots running 2"
    many = [pilot(f"p{k}", "gone") for k in range(1, 200)] + [pilot("p200", "up", 3)]
    assert pilot_line({"pilots": many}).plain.startswith(
        "pilots (199 gone, 1 up): p200 up on login1 4 slots running 3; p1 gone")
