"""Hostile values on the command line (issue 22, item 9): numbers of every numeric option,
the service's broker URL and queue name, and run roots that are not directories. Each is
refused in one line (what is wrong, what to give), exit status 2, no traceback, nothing
written; a broker's password never appears in what is said. The service tests that need a
running service (and Redis) are in test_service_runs.py.
"""

import json
import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from helpers import call_cli, run_cli
from pwe.cli.main import cli
from pwe.cli.base import Seconds, Whole
from test_hostile_input import _one_line_refusal

WF = "name: w\nnodes:\n  a:\n    parameters: {k: [1, 2]}\n    run: 'true'\n"
PASSWORD = "s3cretPW"


def _tree(root: Path) -> list:
    """Every path under ``root`` (names, kinds), to show nothing was written."""
    return sorted((str(p.relative_to(root)), p.is_symlink(), p.is_dir()) for p in root.rglob("*"))


# -- numbers ----------------------------------------------------------------------------------

def _numeric_options():
    """(command path, parameter) of every numeric parameter of every command."""
    out = []

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
            return
        for p in cmd.params:
            if isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType)):
                out.append((" ".join(path), p))
    walk(cli, [])
    return out


#: For each command with a numeric option: the arguments before it (FILE is the workflow,
#: RUN a finished run's directory), and how the value is given (an option, or an argument).
NUMERIC = {
    ("plan", "--members"): ["plan", "FILE"],
    ("plan", "--sample"): ["plan", "FILE", "--estimate"],
    ("plan", "--sample-timeout"): ["plan", "FILE", "--estimate"],
    ("resume", "--budget"): ["resume", "RUN"],
    ("retry", "--budget"): ["retry", "RUN"],
    ("run", "--cores"): ["run", "FILE"],
    ("submit", "--cores"): ["submit", "FILE"],
    ("trigger add", "--settle"): ["trigger", "add", "FILE", "--on-file", "in/*.dat"],
    ("trigger add", "--cores"): ["trigger", "add", "FILE", "--cron", "* * * * *"],
    ("trigger history", "--limit"): ["trigger", "history"],
    ("pilot add", "--nodes"): ["pilot", "add", "RUN"],
    ("status", "--every"): ["status", "RUN", "--watch"],
    ("show", "--limit"): ["show", "RUN"],
    ("logs", "--tail"): ["logs", "RUN", "a:0"],
    ("logs", "--attempt"): ["logs", "RUN", "a:0"],
    ("_engine", "--ready-fd"): ["_engine", "RUN"],
    ("notify", "status"): ["notify", "--run", "RUN", "--pilot", "p1", "started", "42", "--"],
    ("ui", "--port"): ["ui"],
    ("failures", "--signatures"): ["failures", "RUN"],
    ("failures", "--rows"): ["failures", "RUN"],
    ("top", "--every"): ["top"],
    ("run", "--duration"): ["run", "FILE", "--simulate"],
    ("submit", "--duration"): ["submit", "FILE", "--simulate"],
}
BAD_NUMBERS = ["-1", "nan", "inf", "-inf", "1e30", "99999999999999999999999999", "abc", "", "1\n2"]


def test_every_numeric_option_has_bounds_and_is_listed_here():
    """Every numeric option of every command is a bounded Whole or Seconds (no bare int or
    float, which take -1, nan, inf and 1e30), and the matrix below tries each."""
    found = {(path, p.opts[0] if p.opts[0].startswith("-") else p.name): p for path, p in _numeric_options()}
    assert set(found) == set(NUMERIC), set(found) ^ set(NUMERIC)
    for key, p in found.items():
        assert isinstance(p.type, (Whole, Seconds)), (key, p.type)
        assert p.type.min is not None and p.type.max is not None, key


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A workflow file and a finished run of it."""
    d = tmp_path_factory.mktemp("numbers")
    (d / "wf.yaml").write_text(WF)
    (d / "in").mkdir()
    rc, out, err = run_cli("run", d / "wf.yaml", "--run-dir", d / "run", "--cores", "1", cwd=d)
    assert rc == 0, err
    return d


@pytest.mark.parametrize("key", sorted(NUMERIC))
@pytest.mark.parametrize("bad", BAD_NUMBERS)
def test_a_bad_number_is_refused_in_one_line(finished, tmp_path, monkeypatch, key, bad):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home").mkdir()
    args = [str(finished / "wf.yaml") if a == "FILE" else str(finished / "run") if a == "RUN" else a
            for a in NUMERIC[key]]
    option = key[1]
    if key == ("notify", "status") and bad == "-1":
        bad = "-2000"  # (an exit status may be negative: PBS's are)
    args += [bad] if not option.startswith("-") else [option, bad]
    before = _tree(finished), _tree(tmp_path)
    result = CliRunner().invoke(cli, args, env={"PWE_HOME": str(tmp_path / "home")}, prog_name="pwe")
    err = _one_line_refusal(result, f"pwe {key[0]}: invalid value for ")
    assert "give " in err and " to " in err and "--help` says how it is used" in err, err
    shown = "''" if not bad else bad if bad.isprintable() else repr(bad)[1:-1]
    assert f"': {shown[:40]}{'...' if len(shown) > 40 else ''} is " in err, err
    assert (_tree(finished), _tree(tmp_path)) == before


def test_numbers_in_range_still_work(finished, tmp_path):
    """The bounds take what users give: 0 for 'all', a fraction of a second, a float for
    seconds, the highest value."""
    run = finished / "run"
    assert call_cli("show", run, "--limit", "0")[0] == 0
    assert call_cli("show", run, "--limit", "1000000000")[0] == 0
    assert call_cli("logs", run, "a:0", "--tail", "1")[0] == 0
    assert call_cli("plan", finished / "wf.yaml", "--members", "0")[0] == 0
    rc, out, err = run_cli("status", run, "--watch", "--every", "0.1", "--json")  # (a watch: bounded by a process)
    assert rc == 0 and json.loads(out)["phase"] == "succeeded", err


def test_a_watch_every_nan_seconds_is_refused_not_a_hang(finished):
    """A real call: before, nan and inf passed click's FloatRange(0.1) (a comparison with
    nan is false) and a watch slept for ever."""
    for bad in ("nan", "inf"):
        err = _one_line_refusal(run_cli("status", finished / "run", "--watch", "--every", bad, timeout=30),
                                "pwe status: invalid value for '--every': ")
        assert f"{bad} is not a finite number; give seconds from 0.1 to 3600" in err, err


# -- the service's broker URL and queue name ----------------------------------------------------

BAD_BROKERS = [
    ("redis://", "no host"),
    (f"redis://:{PASSWORD}@/0", "no host"),
    (f"redis://:{PASSWORD}@127.0.0.1:99999/0", "the port is a number from 1 to 65535"),
    (f"redis://:{PASSWORD}@127.0.0.1:0/0", "the port is a number from 1 to 65535"),
    (f"redis://:{PASSWORD}@127.0.0.1:abc/0", "the port is a number from 1 to 65535"),
    (f"redis://:{PASSWORD}@127.0.0.1:6391/x", "the database is a number"),
    (f"redis://:{PASSWORD}@127.0.0.1:6391/0\n", "a space or control character"),
    (f"redis://:{PASSWORD}@127.0\x1b[2J.0.1/0", "a space or control character"),
    (f"redis://:{PASSWORD}@127.0.0.1/0 -x", "a space or control character"),
    (f"http://:{PASSWORD}@127.0.0.1/0", "not a redis:// or rediss:// URL"),
    (f"amqp://guest:{PASSWORD}@127.0.0.1//", "not a redis:// or rediss:// URL"),
    ("filesystem:///etc", "not a redis:// or rediss:// URL"),
    (f"{PASSWORD}@127.0.0.1", "not a redis:// or rediss:// URL"),
    ("redis://h/" + "0" * 3000, "longer than 2048 characters"),
    ("", "empty"),
]


@pytest.mark.parametrize("url, words", BAD_BROKERS)
def test_a_bad_broker_url_is_refused_without_its_password_and_writes_nothing(tmp_path, url, words):
    home = tmp_path / "home"
    (tmp_path / "wf.yaml").write_text(WF)
    for args, env, where in ((["service", "start", "--broker", url], {}, "--broker "),
                             (["submit", "--service", "--broker", url, "wf.yaml"], {}, "--broker "),
                             (["submit", "--service", "wf.yaml"], {"PWE_BROKER": url}, "PWE_BROKER ")):
        if not url and where == "PWE_BROKER ":
            continue  # (an empty variable is no variable)
        err = _one_line_refusal(call_cli(*args, cwd=tmp_path, env={"PWE_HOME": str(home), **env}), where, words)
        assert PASSWORD not in err and "\x1b" not in err, err
        assert not home.exists() and not (tmp_path / "pwe-runs").exists(), args


BAD_QUEUES = ["a b", "a,b", "a/../b", "../x", "$(touch pwned)", "x;y", "-Q", "", "q" * 101, "a\nb"]


@pytest.mark.parametrize("queue", BAD_QUEUES)
def test_a_bad_queue_name_is_refused_and_writes_nothing(tmp_path, queue):
    """Before, a queue with a space, a comma or '/' was taken: the service then waited 60 s
    for a tick its worker never took (-Q split it), with messages in files named by it."""
    home = tmp_path / "home"
    (tmp_path / "wf.yaml").write_text(WF)
    shown = repr(queue[:100])
    err = _one_line_refusal(call_cli("service", "start", "--queue", queue, cwd=tmp_path, env={"PWE_HOME": str(home)}),
                            f"--queue {shown}", "queue's name is")
    assert "letters, digits" in err
    if queue:
        err = _one_line_refusal(call_cli("submit", "--service", "wf.yaml", cwd=tmp_path,
                                         env={"PWE_HOME": str(home), "PWE_QUEUE": queue}), "PWE_QUEUE ")
    assert not home.exists() and not (tmp_path / "pwned").exists()


def test_a_bad_queue_or_broker_in_the_services_config_is_said_naming_it(tmp_path):
    """config.json edited by hand: the service does not start on it, and says which file."""
    home = tmp_path / "home"
    config = home / "state" / "service" / "config.json"
    config.parent.mkdir(parents=True)
    for cfg, words in (({"queue": "a b"}, "queue 'a b'"),
                       ({"broker": f"redis://:{PASSWORD}@h:99999/0"}, "the port is a number")):
        config.write_text(json.dumps(cfg))
        before = _tree(home)
        err = _one_line_refusal(call_cli("service", "start", cwd=tmp_path, env={"PWE_HOME": str(home)}),
                                f"{config}: ", words)
        assert PASSWORD not in err and _tree(home) == before


def test_a_bad_broker_in_a_hosts_file_is_said_without_its_password(tmp_path):
    """Before, a hosts file's broker URL that did not parse was printed whole, password and all
    (and a port past 65535 was said without naming the broker)."""
    for url, words in ((f"redis://:{PASSWORD}@h/xyz", "the database is a number"),
                       (f"redis://:{PASSWORD}@h:99999/0", "the port is a number from 1 to 65535"),
                       (f"http://:{PASSWORD}@h/0", "not a redis:// URL")):
        hosts = tmp_path / "hosts.yaml"
        hosts.write_text(f"hosts:\n  r:\n    protocol: local\n    transport: redis\n    broker: {json.dumps(url)}\n")
        err = _one_line_refusal(call_cli("hosts", "list", "--hosts", hosts, cwd=tmp_path), f"{hosts}:5: ", words)
        assert PASSWORD not in err and "'hosts.r.broker'" in err, err


def test_a_hosts_files_bad_value_is_shown_inert_short_and_without_a_password(tmp_path):
    """A hosts file's bad value is shown after 'got', as a workflow's is (it was not shown at
    all): as its repr (a control character escaped, the error one line), cut at 60
    characters, and a URL's password as ***, whatever key it is under."""
    hosts = tmp_path / "hosts.yaml"
    for value, shown in ((f"redis://:{PASSWORD}@h/0", "(got 'redis://:***@h/0')"),
                         ("2\x1b[31m\nred", "(got '2\\x1b[31m\\nred')"),
                         ("9" * 100 + "x", "(got '" + "9" * 56 + "...)")):
        hosts.write_text(f"hosts:\n  r:\n    protocol: local\n    cores_per_node: {json.dumps(value)}\n")
        err = _one_line_refusal(call_cli("hosts", "list", "--hosts", hosts, cwd=tmp_path), f"{hosts}:4: ",
                                "'hosts.r.cores_per_node': must be a whole number " + shown)
        assert PASSWORD not in err and "\x1b" not in err, err


def test_redact_hides_the_password_of_any_url():
    from pilot.broker import redact

    for url in (f"redis://:{PASSWORD}@h:1/0", f"redis://user:{PASSWORD}@h", f"redis://{PASSWORD}@h",
                f"redis://:{PASSWORD}@h:99999", f"redis://:p@ss{PASSWORD}@h", f"redis://:{PASSWORD}@", "x://@",
                f"{PASSWORD}@h", f"redis:{PASSWORD}@h", f"redis://:{PASSWORD}/x@h"):
        assert PASSWORD not in redact(url), url
    assert redact("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert redact("redis://h:1/0") == "redis://h:1/0"


# -- run roots and run directories that are not directories -----------------------------------

def _blocker(path: Path, kind: str) -> None:
    if kind == "regular file":
        path.write_text("not a directory\n")
    elif kind == "FIFO":
        os.mkfifo(path)
    else:
        path.symlink_to(path.parent / "gone" / "runs")


KINDS = ["regular file", "FIFO", "dangling symbolic link"]


def _pwe(kind):
    """How a test of a runs root of ``kind`` calls pwe: a FIFO in a process of its own, under
    a timeout (were it opened, the call would never end), the others in this one."""
    if kind == "FIFO":
        return lambda *args, **kw: run_cli(*args, timeout=60, **kw)
    return call_cli


@pytest.mark.parametrize("kind", KINDS)
def test_a_runs_root_that_is_not_a_directory_is_refused_by_run_runs_and_status(tmp_path, kind):
    """./pwe-runs a file, a FIFO or a dangling symbolic link: one line naming it and what it
    is, exit 2, no hang (a FIFO is never opened), nothing written. Before, `pwe runs` said
    "no runs" with exit 0, and `pwe run` called a dangling link "already exists"."""
    (tmp_path / "wf.yaml").write_text(WF)
    _blocker(tmp_path / "pwe-runs", kind)
    env = {"PWE_HOME": str(tmp_path / "home")}
    before = _tree(tmp_path)
    want = f"pwe-runs is a {kind}" if kind != "dangling symbolic link" else "pwe-runs is a dangling symbolic link to"
    pwe = _pwe(kind)
    _one_line_refusal(pwe("run", "wf.yaml", cwd=tmp_path, env=env), "cannot create run directory pwe-runs/", want)
    _one_line_refusal(pwe("submit", "wf.yaml", cwd=tmp_path, env=env), "cannot create run directory pwe-runs/", want)
    for args in (["runs"], ["runs", "--json"], ["status"], ["status", "--json"], ["resume"], ["retry"]):
        err = _one_line_refusal(pwe(*args, cwd=tmp_path, env=env), "run root pwe-runs/ is a ")
        assert kind in err and "not a directory of runs; move it away" in err, (args, err)
    err = _one_line_refusal(pwe("status", "w-2026", cwd=tmp_path, env=env), "no run 'w-2026'")
    assert f"pwe-runs/ (a {kind}" in err, err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_dir_that_is_not_a_directory_is_refused_naming_it(tmp_path, kind):
    (tmp_path / "wf.yaml").write_text(WF)
    _blocker(tmp_path / "there", kind)
    before = _tree(tmp_path)
    for target in ("there", "there/run"):
        for command in ("run", "submit"):
            err = _one_line_refusal(call_cli(command, "wf.yaml", "--run-dir", target, cwd=tmp_path),
                                    f"cannot create run directory {target}: there is a ")
            assert kind in err and "choose another --run-dir" in err, err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("kind", KINDS)
def test_a_service_run_root_that_is_not_a_directory_is_refused(tmp_path, kind):
    """--run-root at `pwe service start`, and one a config.json names (listed by `pwe runs`)."""
    home = tmp_path / "home"
    _blocker(tmp_path / "runs", kind)
    pwe = _pwe(kind)
    err = _one_line_refusal(pwe("service", "start", "--run-root", tmp_path / "runs", cwd=tmp_path,
                                env={"PWE_HOME": str(home)}))
    assert kind in err and not home.exists(), err
    config = home / "state" / "service" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"run_root": str(tmp_path / "runs")}))
    err = _one_line_refusal(pwe("runs", cwd=tmp_path, env={"PWE_HOME": str(home)}), f"run root {tmp_path / 'runs'}/ is a ")
    assert kind in err, err


def test_a_run_root_with_a_control_character_is_refused(tmp_path):
    home = tmp_path / "home"
    err = _one_line_refusal(call_cli("service", "start", "--run-root", "a\nb", cwd=tmp_path, env={"PWE_HOME": str(home)}),
                            "--run-root 'a\\nb'")
    assert "no control characters" in err and not home.exists()
