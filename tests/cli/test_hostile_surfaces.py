"""Hostile input on the surfaces added last (issue 22, item 9): the HTML report, queries,
run ids, `pwe notify`, files pwe reads from a run directory, member outputs and logs,
limits, products, the host's scratch directory. Every value a user or a member controls is
refused in one line (exit 2, no traceback) or rendered inert, and nothing is written
outside the run directory. "Bounded in time" is a hang detector (a subprocess timeout far
above any real time) beside a check of the mechanism (a length bound, a refused form),
never a timed assertion.

A test marked "guard" holds already; the others failed before their fix.
"""

import json
import os
import pty
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import ROOT, call_cli, run_cli
from pwe.cli.main import cli
from test_hostile_input import _one_line_refusal

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
ESC = "\x1b"

#: a member that returns, writes and fails with everything a page or a terminal could take
#: as markup or as a command
EVIL_WORKFLOW = r"""name: evil
nodes:
  a:
    parameters:
      v: ["<script>alert(1)</script>", "\"><img src=x onerror=alert(2)>", "</script><!--<script>", "[/]", "[red]x[/red]"]
    run: 'printf "x=<b>bold</b>\nesc=\033[31mred\033[0m\n[/]=[/]\nbig=%s!\n" "$(head -c 5000 /dev/zero | tr "\0" a)" >> "$PWE_OUTPUTS"; echo "</script><img src=y onerror=alert(3)>" >&2; printf "\033]0;title\007\033[2Jcleared\r\n"; exit 1'
"""


@pytest.fixture(scope="module")
def evil_run(tmp_path_factory):
    """One run of EVIL_WORKFLOW (every member fails): its directory."""
    d = tmp_path_factory.mktemp("evil")
    (d / "wf.yaml").write_text(EVIL_WORKFLOW)
    status, out, err = run_cli("run", d / "wf.yaml", "--run-dir", d / "run", cwd=d, timeout=120)
    assert status == 1, err
    return d / "run"


def _copy(run: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(run, to, symlinks=True)
    return to


# -- the HTML report: every value escaped, never markup -----------------------------------------

class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.handlers, self.scripts, self._in = [], [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.handlers += [k for k, v in attrs if k.startswith("on") or "javascript:" in (v or "")]
        self._in = tag == "script"

    def handle_endtag(self, tag):
        self._in = False

    def handle_data(self, data):
        if self._in:
            self.scripts.append(data)


def test_the_report_renders_every_member_value_as_text(evil_run):
    """guard: parameters, outputs, a failed member's stderr, reach the page as text only."""
    status, out, err = run_cli("report", evil_run, timeout=120)
    assert status == 0, err
    html = (evil_run / "report.html").read_text()
    page = _Tags()
    page.feed(html)
    assert page.tags.count("script") == 2 and "img" not in page.tags and not page.handlers, page.tags
    data = json.loads(page.scripts[0])  # (the report's data: still whole JSON)
    assert isinstance(data, dict) and "timeline" in data
    assert "&lt;img src=y onerror=alert(3)&gt;" in html  # (the failure's stderr, shown as text)


@pytest.mark.parametrize("value", ["</script><script>alert(1)</script>", "<!--<script>", "x]]>&amp;<",
                                   "\u2028\u2029", "</SCRIPT >"])
def test_the_reports_data_cannot_leave_its_script_element(value):
    """Before: only '</' was escaped, so '<!--<script>' put the page's parser in the script's
    escaped state and the rest of the page was swallowed. Now no '<', '>' or '&' at all."""
    from pwe.observe.report import script_json

    text = script_json({"k": value, value: [value]})
    assert not set(text) & set("<>&\u2028\u2029"), text
    assert json.loads(text) == {"k": value, value: [value]}


# -- queries: malformed, NaN, unknown operators, huge, slow patterns ----------------------------

BAD_QUERIES = [
    ("T>nan", "needs a finite number"),
    ("T<inf", "needs a finite number"),
    ("cpu>=-1e999", "needs a finite number"),
    ("T=>3", "no operator '=>'"),
    ("T<>3", "no operator '<>'"),
    ("exit=!1", "no operator '=!'"),
    ("T>" + "9" * 5000, "at most 4,096"),
    ("state=failed;" * 400, "at most 4,096"),
    ("why~x\x1b[2J", "control character"),
    ("out.big~(a)\\1*", "a back-reference"),  # (catastrophic patterns are matched in linear time: test_hostile_patterns)
    ("out.big~a{1,1001}", "not a regular expression"),
    ("why~(", "not a regular expression"),
    ("=3", "write FIELD OP VALUE"),
    ("T>", "write FIELD OP VALUE"),
]


@pytest.mark.parametrize("query, phrase", BAD_QUERIES, ids=[q[:40] for q, _ in BAD_QUERIES])
def test_a_hostile_query_is_one_line(evil_run, query, phrase):
    result = CliRunner().invoke(cli, ["show", str(evil_run), "-q", query])
    err = _one_line_refusal(result, phrase=phrase)
    assert ESC not in err


def test_a_search_is_bounded_in_what_it_reads(evil_run, monkeypatch):
    """The hang detector: the slowest patterns taken (two repeats) over a 5000-character
    output end; and the mechanism: a pattern is searched in at most MAX_SUBJECT characters."""
    status, out, err = run_cli("show", evil_run, "-q", "out.big~a*a*b", "--json", timeout=120)
    assert status == 0 and json.loads(out) == [], err
    from pwe.planning import conditions

    seen = []

    class Spy:
        def search(self, text):
            seen.append(len(text))

    cond = conditions.parse("out.big~a", None)[0]
    object.__setattr__(cond, "pattern", Spy())
    cond.test({"outputs": {"big": "a" * 100_000}})
    assert seen == [conditions.MAX_SUBJECT]


def test_ordinary_queries_still_work(evil_run):
    """guard: what the query language is for."""
    for q in ("state=failed", "why~^exit|signal", "out.x~<b>", "exit!=0; member<=2", "T>=0", "out.x~colou?r|bold"):
        result = CliRunner().invoke(cli, ["show", str(evil_run), "-q", q, "--json"])
        assert result.exit_code == 0, (q, result.stderr)


# -- run ids and prefixes -------------------------------------------------------------------------

RUN_IDS = [
    ("traversal", "../../../etc", "no run"),
    ("absolute", "/etc", "no run"),
    ("empty", "", "no run"),
    ("escape", "ev\x1b[31mil", "control character"),
    ("newline", "ev\nil", "control character"),
    ("long", "e" * 5000, "too long"),
    ("long component", "e" * 300, "File name too long"),
    ("glob", "*", "no run"),
]


@pytest.mark.parametrize("command", ["status", "show", "report", "trace"])
@pytest.mark.parametrize("case, run, phrase", RUN_IDS, ids=[c[0] for c in RUN_IDS])
def test_a_hostile_run_id_is_one_line(tmp_path, command, case, run, phrase):
    """'long' and 'long component' were a traceback (ENAMETOOLONG), 'escape' and 'newline'
    reached the terminal as they were (a newline made two lines)."""
    (tmp_path / "pwe-runs").mkdir()
    err = _one_line_refusal(call_cli(command, run, cwd=tmp_path), phrase=phrase)
    assert ESC not in err
    assert os.listdir(tmp_path) == ["pwe-runs"]


# -- identifiers that reach pwe notify ------------------------------------------------------------

NOTIFY_IDS = [
    ("pilot traversal", "../../../OUTSIDE", "12", "not a pilot id"),
    ("pilot slash", "a/b", "12", "not a pilot id"),
    ("pilot option", "-rf", "12", "not a pilot id"),
    ("pilot escape", "p\x1b[2J", "12", "not a pilot id"),
    ("pilot newline", "p1\nx", "12", "not a pilot id"),
    ("pilot empty", "", "12", "not a pilot id"),
    ("pilot long", "p" * 65, "12", "not a pilot id"),
    ("job command", "p1", "$(touch OUTSIDE)", "not a job id"),
    ("job semicolon", "p1", "1;rm -rf x", "not a job id"),
    ("job option", "p1", "--all", "no such option '--all'"),
    ("job empty", "p1", "", "not a job id"),
    ("job newline", "p1", "1\n2", "not a job id"),
    ("job long", "p1", "1" * 201, "not a job id"),
]


@pytest.mark.parametrize("case, pilot, job, phrase", NOTIFY_IDS, ids=[c[0] for c in NOTIFY_IDS])
def test_an_identifier_that_is_not_one_never_reaches_a_file_name(evil_run, tmp_path, case, pilot, job, phrase):
    """Before: the pilot id became part of the edge file's name, so '../../../OUTSIDE' wrote
    a signed file outside the run directory."""
    run = _copy(evil_run, tmp_path / "nested" / "deeper" / "run")
    err = _one_line_refusal(call_cli("notify", "--run", run, "--pilot", pilot, "started", job, cwd=tmp_path),
                            "pwe notify: ", phrase)
    assert ESC not in err and "\n" not in err[:-1]
    assert not (run / "edges").exists()
    assert not [p for p in tmp_path.rglob("*OUTSIDE*")]


def test_good_identifiers_are_one_signed_file_in_the_run(evil_run, tmp_path):
    """guard: what job scripts send (SLURM's array ids, PBS's server suffix)."""
    run = _copy(evil_run, tmp_path / "run")
    for job in ("12345", "123_4", "123[].server.example.org", "login1.example.org.42.0"):
        status, _, err = call_cli("notify", "--run", run, "--pilot", "p1", "ended", job, "0")
        assert status == 0, err
    assert len(os.listdir(run / "edges")) == 4


def test_an_edge_event_that_is_a_fifo_or_huge_is_not_trusted(evil_run, tmp_path):
    """Before: the engine's read of edges/*.json opened a FIFO put there and waited for a
    writer for ever. Now neither a FIFO nor a file larger than any event is read."""
    run = _copy(evil_run, tmp_path / "run")
    (run / "edges").mkdir()
    os.mkfifo(run / "edges" / "a.json")
    (run / "edges" / "b.json").write_text(json.dumps({"pilot": "p1", "x": "y" * 100_000, "mac": "0" * 64}))
    code = ("import sys, json; from pathlib import Path; from pwe.runstate.notify import receive; "
            "print(json.dumps([ok for _, ok in receive(Path(sys.argv[1]), set())]))")
    proc = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, timeout=60, env=ENV)
    assert proc.returncode == 0 and json.loads(proc.stdout) == [False, False], proc.stderr


# -- files pwe reads from a run directory that are no regular files -------------------------------

def test_open_regular_refuses_a_fifo_without_waiting(tmp_path):
    """The mechanism: the one opener of run files (pwe/base/regular.py) opens with O_NONBLOCK and
    checks the kind on the open descriptor."""
    code = ("import os, sys\nfrom pwe.base.regular import read_text\nos.mkfifo(sys.argv[1])\n"
            "try:\n    read_text(sys.argv[1])\nexcept OSError as e:\n    print(e.strerror)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f")], capture_output=True, text=True,
                          timeout=60, env=ENV)
    assert proc.stdout.strip() == "not a regular file (a FIFO)", proc.stderr
    from pwe.base.regular import read_text

    with pytest.raises(OSError, match="a device"):
        read_text("/dev/null")


FIFO_WHERE = ["run.json", "state.json", "journal.jsonl", "checkpoint.bin", "secret", "pilots/p1/out-pilot.stream",
              "pilots/p1/out-pilot.index"]


@pytest.mark.parametrize("where", FIFO_WHERE)
def test_a_fifo_where_a_run_file_should_be_never_hangs_a_command(evil_run, tmp_path, where):
    """Each reading command ends (the hang detector: 60 s) with no traceback; the journal and
    run.json, without which nothing can be said, are one line of exit status 2."""
    run = _copy(evil_run, tmp_path / "run")
    (run / where).unlink()
    os.mkfifo(run / where)
    for args in (["status", run], ["show", run], ["trace", run], ["report", run, "-o", tmp_path / "r.html"],
                 ["events", run], ["logs", run, "a:0"]):
        status, out, err = run_cli(*args, cwd=tmp_path, timeout=60)
        assert "Traceback" not in err, (args, err)
        if where == "run.json" and args[0] != "logs" or where == "journal.jsonl" and args[0] not in ("logs", "status"):
            _one_line_refusal((status, out, err), phrase="not a regular file" if where != "run.json" else None)
        elif args[0] == "status":  # (the journal's counts, or with a warning the last snapshot's)
            assert status == 0 and err.count("\n") <= 1, err
        if where.startswith("pilots") and args[0] == "logs":
            _one_line_refusal((status, out, err), phrase="not a regular file (a FIFO)")


def test_resume_refuses_a_journal_that_is_a_fifo(evil_run, tmp_path):
    """Before: 'journal.jsonl is empty' (a FIFO's size is 0), a wrong reason."""
    run = _copy(evil_run, tmp_path / "run")
    (run / "journal.jsonl").unlink()
    os.mkfifo(run / "journal.jsonl")
    _one_line_refusal(run_cli("resume", run, cwd=tmp_path, timeout=60), phrase="is not a regular file (a FIFO)")


# -- member outputs and logs: huge, terminal escapes, odd keys -----------------------------------

def test_member_outputs_are_bounded_and_inert_in_show(evil_run):
    """guard: outputs are cut at their bound, odd keys kept as text, and no escape sequence
    reaches the terminal from `pwe show` (its JSON keeps the value, escaped by JSON)."""
    status, out, err = call_cli("show", evil_run)
    assert status == 0 and ESC not in out and "\r" not in out, out
    status, out, err = call_cli("show", evil_run, "--json")
    rows = json.loads(out)
    assert all(len(json.dumps(r["outputs"])) < 70_000 for r in rows)
    assert rows[0]["outputs"]["[/]"] == "[/]"


def _on_a_terminal(*args):
    """stdout of `pwe ARGS` written to a pseudo-terminal, as a user sees it."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pwe", *map(str, args)], stdout=slave, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=ENV)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


def test_logs_on_a_terminal_show_a_members_escape_sequences_as_text(evil_run):
    """Before: `pwe logs` wrote what the member wrote, so its ESC sequences cleared the
    screen and set the window's title. On a terminal they are now written visibly; into a
    pipe or a file the bytes are the member's own (a user redirecting logs keeps them)."""
    status, shown = _on_a_terminal("logs", evil_run, "a:0")
    assert status == 0 and ESC not in shown and "\x07" not in shown, shown
    assert "\\x1b]0;title\\x07\\x1b[2Jcleared" in shown
    status, piped, err = run_cli("logs", evil_run, "a:0", timeout=60)
    assert "\x1b]0;title\x07" in piped


def test_run_end_summary_shows_a_failures_stderr_inert(tmp_path):
    (tmp_path / "wf.yaml").write_text("name: e\nnodes:\n  a: {run: 'printf \"\\033[2Jgone\\n\" >&2; exit 3'}\n")
    status, out, err = run_cli("run", tmp_path / "wf.yaml", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert status == 1 and "\\x1b[2Jgone" in out + err and ESC not in out + err, out + err


# -- resource limits and pools; products -----------------------------------------------------------

LIMITS = [("-1", "must be at least 1"), ("0", "must be at least 1"), ("1.5", "must be a whole number"),
          ("'x'", "must be a whole number"), ("1e400", "must be a whole number"), (".nan", "must be a whole number"),
          ("[1]", "")]


def _limits(where, value):
    limit, res = (value, "1") if where == "limit" else ("2", value)
    return f"name: w\nlimits: {{lic: {limit}}}\nnodes:\n  a: {{run: 'true', resources: {{lic: {res}}}}}\n"


@pytest.mark.parametrize("where", ["limit", "resource"])
@pytest.mark.parametrize("value, phrase", LIMITS, ids=[v for v, _ in LIMITS])
def test_a_limit_or_resource_that_is_no_count(tmp_path, where, value, phrase):
    """guard: validate, plan and run refuse the same, naming the line."""
    (tmp_path / "wf.yaml").write_text(_limits(where, value))
    line = 2 if where == "limit" else 4
    for args in (["validate", "wf.yaml"], ["plan", "wf.yaml"], ["run", "wf.yaml", "--run-dir", "run"]):
        _one_line_refusal(call_cli(*args, cwd=tmp_path), f"wf.yaml:{line}: ", phrase)
    assert sorted(os.listdir(tmp_path)) == ["wf.yaml"]


PRODUCTS = [("/etc/passwd", "not a path inside the workspace"), ("../out", "not a path inside the workspace"),
            ("a/../../x", "not a path inside the workspace"), ('"a\\nb"', "not a path inside the workspace"),
            ("'{{ k }}/../../x'", "renders to '1/../../x'"), ('""', "at least 1 character")]


@pytest.mark.parametrize("product, phrase", PRODUCTS, ids=[p for p, _ in PRODUCTS])
def test_a_product_outside_the_workspace(tmp_path, product, phrase):
    """guard: absolute, '..', a newline, rendered per member: refused alike everywhere."""
    (tmp_path / "wf.yaml").write_text(f"name: w\nnodes:\n  a:\n    parameters: {{k: [1]}}\n    run: 'true'\n"
                                      f"    products: [{product}]\n")
    for args in (["validate", "wf.yaml"], ["plan", "wf.yaml"], ["run", "wf.yaml", "--run-dir", "run"]):
        _one_line_refusal(call_cli(*args, cwd=tmp_path), "wf.yaml:6: ", phrase)
    assert sorted(os.listdir(tmp_path)) == ["wf.yaml"]


# -- the host's scratch: environment variables, a symlink swapped in ------------------------------

def test_an_unset_variable_in_scratch_is_an_error_naming_it(tmp_path, monkeypatch):
    """Before: os.path.expandvars left '$PWE_NO_SUCH/tmp' as it was, and the pilot made a
    folder of that literal name in its working directory."""
    from pilot.tmpdirs import TmpDirs, expand

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PWE_NO_SUCH", raising=False)
    monkeypatch.setenv("PWE_EMPTY", "")
    monkeypatch.setenv("PWE_SET", str(tmp_path / "s"))
    for text in ("$PWE_NO_SUCH/tmp", "${PWE_NO_SUCH}/tmp", "$PWE_EMPTY/tmp"):
        with pytest.raises(ValueError, match=re.escape(text.split("/")[0].replace("{", "").replace("}", ""))):
            expand(text)
    with pytest.raises(ValueError, match="not a variable's name"):
        expand("${a b}/x")
    assert expand("${PWE_SET}/x") == str(tmp_path / "s" / "x")
    pilot_dir = tmp_path / "run" / "pilots" / "p1"
    pilot_dir.mkdir(parents=True)
    dirs = TmpDirs(str(pilot_dir), "$PWE_NO_SUCH/scratch")
    with pytest.raises(OSError, match=r"\$PWE_NO_SUCH is not set"):
        dirs.make("a", 0, 1)
    with pytest.raises(OSError, match=r"\$PWE_NO_SUCH is not set"):
        dirs.path("a", 0, 1)
    assert dirs.sweep() == [] and dirs.free_mb() is None
    assert not [p for p in tmp_path.rglob("*") if "$" in p.name]


def test_a_symlink_swapped_in_under_scratch_leads_nowhere(tmp_path):
    """guard (and the pilot's own directory, new): a member's directory replaced by a link
    to a directory outside is neither followed when removed nor handed to the next member;
    the pilot's directory itself a link is refused."""
    from pilot.tmpdirs import TmpDirs

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    pilot_dir = tmp_path / "run" / "pilots" / "p1"
    pilot_dir.mkdir(parents=True)
    dirs = TmpDirs(str(pilot_dir), str(tmp_path / "scratch"))
    path = dirs.make("a", 0, 1)
    os.rmdir(path)
    os.symlink(outside, path)
    dirs.remove("a", 0, 1)
    assert (outside / "keep").exists() and not dirs._spare
    dirs.close()
    assert (outside / "keep").exists()
    other = TmpDirs(str(pilot_dir), str(tmp_path / "scratch2"))
    os.makedirs(other.root)
    os.symlink(outside, other.base)
    with pytest.raises(OSError, match="symbolic link"):
        other.make("a", 0, 1)
    assert sorted(os.listdir(outside)) == ["keep"]


# -- trigger specifications -----------------------------------------------------------------------

TRIGGERS = [
    ("never 30 Feb", ["--cron", "0 0 30 2 *"], "never fires"),
    ("never 31 Apr", ["--cron", "0 0 31 4 *"], "never fires"),
    ("cron escape", ["--cron", "\x1b[2J * * * *"], "'\\x1b[2J * * * *': not a cron expression"),
    ("cron huge", ["--cron", "1," * 2000 + "2 * * * *"], "not a cron expression"),
    ("tz escape", ["--cron", "* * * * *", "--tz", "\x1b]0;t\x07"], "unknown time zone"),
    ("file outside", ["--on-file", "/etc/*"], "outside the workflow's workspace"),
    ("file climbs out", ["--on-file", "../../*"], "outside the workflow's workspace"),
    ("file in home", ["--on-file", "~/*"], "outside the workflow's workspace"),
    ("file empty", ["--on-file", ""], "a glob of files"),
    ("file blank", ["--on-file", "  "], "a glob of files"),
    ("file escape", ["--on-file", "in/\x1b[2J*"], "a glob of files"),
    ("settle NaN", ["--on-file", "in/*", "--settle", "nan"], "'--settle': nan is not a finite number"),
    ("settle inf", ["--on-file", "in/*", "--settle", "inf"], "'--settle': inf is not a finite number"),
    ("settle huge", ["--on-file", "in/*", "--settle", "1e400"], "'--settle': 1e400 is not a finite number"),
]


@pytest.mark.parametrize("case, args, phrase", TRIGGERS, ids=[t[0] for t in TRIGGERS])
def test_a_hostile_trigger_is_one_line_and_stores_nothing(tmp_path, case, args, phrase):
    """Before: a never-firing schedule was stored (its listing then failed in croniter), the
    time zone and schedule reached the terminal as written, a glob anywhere (or empty) was
    watched every second, and a NaN or infinite settle time took no file ever."""
    wf = tmp_path / "ws" / "wf.yaml"
    wf.parent.mkdir()
    wf.write_text("name: w\nnodes:\n  a:\n    run: echo hi\n")
    # (a schedule of 2,000 values: in a process of its own, the hang detector's timeout over it)
    pwe = (lambda *a, **kw: run_cli(*a, timeout=60, **kw)) if case == "cron huge" else call_cli
    err = _one_line_refusal(pwe("trigger", "add", wf, *args, cwd=wf.parent, env={"PWE_HOME": str(tmp_path / "h")}),
                            phrase=phrase)
    assert ESC not in err and "\x00" not in err
    assert not list((tmp_path / "h").rglob("triggers.json"))


def test_a_glob_inside_the_workspace_is_taken(tmp_path):
    """guard: relative to where the command is given, inside the workflow's workspace."""
    wf = tmp_path / "ws" / "wf.yaml"
    wf.parent.mkdir()
    wf.write_text("name: w\nnodes:\n  a:\n    run: echo hi\n")
    status, out, err = call_cli("trigger", "add", wf, "--on-file", "in/*.dat", "--json", cwd=wf.parent,
                                env={"PWE_HOME": str(tmp_path / "h")})
    assert status == 0, err


def test_a_stored_schedule_that_never_fires_lists_as_never():
    """A trigger stored before such schedules were refused: no slot, no next one, no error."""
    import time

    from pwe.service import cron

    zone = cron.check_zone("UTC")
    assert cron.next_slot("0 0 30 2 *", zone, time.time()) is None
    assert cron.slots("0 0 30 2 *", zone, time.time() - 400 * 86400, time.time()) == []


# -- bus events: oversized, unsigned, forged ------------------------------------------------------

def test_a_line_longer_than_any_message_is_dropped_as_forged_not_held(tmp_path, monkeypatch):
    """Before: a line without its end was held back whole, however long it grew (a writer
    appending without a newline took the engine's memory). Now at most MAX_LINE is held: the
    rest is one forged record, and the good lines after it are read as ever."""
    from pilot import transport, wire

    monkeypatch.setattr(transport, "MAX_LINE", 1000)
    monkeypatch.setattr(transport, "READ_CHUNK", 1000)
    key_in, key_out = wire.channel_key(b"s", "p1", True), wire.channel_key(b"s", "p1", False)
    engine = transport.EngineSpool(tmp_path, key_in, key_out)
    pilot = transport.PilotSpool(str(tmp_path), key_out=key_in, key_in=key_out)
    with open(tmp_path / transport.EVENTS, "ab") as fh:
        fh.write(b"x" * 5000)
    got, cursor, kinds = [], 0, []
    for _ in range(10):
        msgs, cursor = engine.receive(cursor)
        got += msgs
        kinds.append(len(engine._in._partial))
    assert max(kinds) <= 1000 and any(m["k"] == wire.FORGED for m in got)
    with open(tmp_path / transport.EVENTS, "ab") as fh:
        fh.write(b"tail\n")
    pilot.send([{"k": "hb", "running": 0, "queued": 0, "t": 0}])
    for _ in range(10):
        msgs, cursor = engine.receive(cursor)
        got += msgs
    assert [m["k"] for m in got if m["k"] != wire.FORGED] == ["hb"]
    engine.close()
    pilot.close()


@pytest.mark.parametrize("line", [
    b'{"k":"hb","running":0,"queued":0,"t":0,"q":1}\n',  # unsigned
    b'{"k":"hb","running":0,"queued":0,"t":0,"q":1,"s":"' + b"0" * 64 + b'"}\n',  # forged
    b'{"k":"end","n":"../../x","m":-1,"q":1,"s":"' + b"f" * 64 + b'"}\n',  # forged, odd keys
])
def test_an_unsigned_or_forged_event_is_never_a_message(tmp_path, line):
    """guard: the signature is checked before anything of the line is believed."""
    from pilot import transport, wire

    key_in, key_out = wire.channel_key(b"s", "p1", True), wire.channel_key(b"s", "p1", False)
    engine = transport.EngineSpool(tmp_path, key_in, key_out)
    (tmp_path / transport.EVENTS).write_bytes(line)
    msgs, _ = engine.receive(0)
    assert [m["k"] for m in msgs] == [wire.FORGED]
    engine.close()


# -- patterns users write: globs ------------------------------------------------------------------

@pytest.mark.parametrize("pattern", ["*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", "**/*a*a*a*a*a*a*a*a*a*a*a*a*b",
                                     "[a-a][a-a]*" * 20 + "b", "*" * 200 + "b"])
def test_a_pathological_glob_ends(tmp_path, pattern):
    """guard: inputs' globs (fnmatch, per path part) against names made to be their worst
    case end (the hang detector: 60 s); the mechanism: Python's fnmatch turns each '*' run
    into an atomic group emulation, so a name is matched without backtracking."""
    import fnmatch

    assert "(?>" in fnmatch.translate("*a*b") or "(?=(?P<" in fnmatch.translate("*a*b")
    ws = tmp_path / "ws"
    (ws / ("a" * 200)).mkdir(parents=True)
    (ws / ("a" * 200) / ("a" * 250)).write_text("x")
    (ws / ("a" * 250)).write_text("x")
    code = ("import sys; from pathlib import Path; from pwe.workflow.inputs import expand\n"
            "try:\n    print(expand([sys.argv[1]], Path(sys.argv[2])))\nexcept Exception as e:\n"
            "    print(type(e).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code, pattern, str(ws)], capture_output=True, text=True, timeout=60,
                          env=ENV)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
