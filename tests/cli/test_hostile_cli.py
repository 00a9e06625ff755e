"""Hostile values at the command line (issue 31, items 10 and 11), through ``pwe``'s own
entry (helpers.call_cli; the runs they read, a refusal by an engine as it begins, what reads
a terminal or a FIFO: in a process of their own): a member's walltime longer than its pilot's is refused at validate on every
host; what members and users made is printed as text (no escape sequence, no rich markup
reaches the terminal); a refusal leaves nothing behind; bad input is exit 2 everywhere; an
empty selection is refused; a workspace that is not a directory is refused at validate."""

import os
import pty
import subprocess
import sys

import pytest

from helpers import ROOT, call_cli, run_cli

ESC = "\x1b"


def _one_line(result, status=2, *phrases):
    rc, out, err = result
    assert rc == status, (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert ESC not in err and ESC not in out, (out, err)
    for phrase in phrases:
        assert phrase in err, (phrase, err)
    return err.strip()


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# -- 10: maxWallTimePerMember longer than the same profile's maxWallTime -------------------------

WALL = {
    "own profile": ("name: w\nnodes:\n  a:\n    run: echo hi\n    scheduling:\n      maxWallTime: 10\n"
                    "      maxWallTimePerMember: 20\n", 7),
    "merged with defaults": ("name: w\ndefaults:\n  scheduling: {maxWallTime: 10}\nnodes:\n  a:\n    run: echo hi\n"
                             "    scheduling: {maxWallTimePerMember: 20}\n", 7),
    "defaults alone": ("name: w\ndefaults:\n  scheduling: {maxWallTime: 10, maxWallTimePerMember: 20}\nnodes:\n"
                       "  a:\n    run: echo hi\n", 3),
}


@pytest.mark.parametrize("case", sorted(WALL))
def test_a_member_walltime_past_the_pilots_is_refused_at_validate_on_every_host(tmp_path, case):
    """Before, it validated and ran on the local host without a word."""
    text, line = WALL[case]
    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    before = _tree(tmp_path)
    for args in (("validate", wf), ("plan", wf), ("run", wf), ("run", wf, "--host", "local")):
        err = _one_line(call_cli(*args, cwd=tmp_path), 2, "maxWallTimePerMember (20 min)", "maxWallTime (10 min)")
        assert err.startswith(f"{wf}:") and f":{line}:" in err, err
    assert _tree(tmp_path) == before  # (no run directory)


# -- 11: what pwe prints of values members and users made ------------------------------------------

SHOWN = """name: shown
nodes:
  a:
    parameters:
      v: ["[bold]x[/]", "\\e]0;param\\a", "plain"]
    run: printf 'k=\\033]0;pwned\\007\\n' >> "$PWE_OUTPUTS"; printf 'said \\033]0;pwned\\007 [bold]y[/]\\n'; exit 3
"""


@pytest.fixture
def hostile_run(tmp_path):
    (tmp_path / "wf.yaml").write_text(SHOWN)
    rc, out, err = run_cli("run", "wf.yaml", cwd=tmp_path, timeout=180)
    assert rc == 1, err  # (its members exit 3)
    run_dir = next((tmp_path / "pwe-runs").iterdir())
    return tmp_path, run_dir.name


def test_values_members_and_users_made_reach_no_terminal_as_escapes(hostile_run):
    """Before, `pwe show` printed a member's outputs as they were: a title-setting sequence
    (ESC ] 0 ; ... BEL) worked."""
    cwd, run_id = hostile_run
    for args in (("show", run_id), ("show", run_id, "--state", "failed"), ("status", run_id), ("trace", run_id),
                 ("events", run_id), ("runs",), ("logs", run_id, "a:1"), ("logs", run_id, "a:1", "--stderr"),
                 ("plan", "wf.yaml"), ("validate", "wf.yaml")):
        rc, out, err = call_cli(*args, cwd=cwd)
        assert rc == 0 and "Traceback" not in err, (args, err)
        if args[0] != "logs":  # (logs' body into a pipe is the member's bytes: below)
            assert ESC not in out + err and "\x07" not in out + err and "\x9b" not in out + err, (args, out, err)
        else:
            assert ESC not in "".join(line for line in out.splitlines() if line.startswith("==> ")) + err, out
    rc, out, err = call_cli("show", run_id, cwd=cwd)
    assert "k=\\x1b]0;pwned\\x07" in out and "v=[bold]x[/]" in out and "v=\\x1b]0;param\\x07" in out, out
    rc, out, err = call_cli("plan", "wf.yaml", cwd=cwd)
    assert "v=[bold]x[/]" in out, out  # rich's markup: shown, not read
    _logs_into_a_pipe_and_on_a_terminal(cwd, run_id)


def _logs_into_a_pipe_and_on_a_terminal(cwd, run_id):
    """pwe logs: the member's bytes into a pipe (for tools), inert on a terminal."""
    rc, out, err = run_cli("logs", run_id, "a:0", cwd=cwd)
    assert rc == 0 and "said \x1b]0;pwned\x07 [bold]y[/]" in out, out  # (a pipe: as written, for tools)
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "logs", run_id, "a:0"], cwd=cwd, env=env, stdout=slave,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # (EIO: the other side closed)
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    assert proc.wait(60) == 0, proc.stderr.read()
    text = got.decode()
    assert "said \\x1b]0;pwned\\x07 [bold]y[/]" in text and ESC not in text and "\x07" not in text, text


def test_a_hosts_file_is_shown_as_text(tmp_path):
    """Before, the name of the file a host came from reached the terminal as it was."""
    name = "h\x1b]0;pwned\x07.yaml"
    (tmp_path / name).write_text('hosts:\n  odd:\n    protocol: local\n'
                                 '    properties: {note: "\\e]0;pwned\\a [bold]z[/]"}\n')
    for args in (("hosts", "list", "--hosts", name), ("hosts", "show", "odd", "--hosts", name)):
        rc, out, err = call_cli(*args, cwd=tmp_path)
        assert rc == 0 and "odd" in out and ESC not in out + err and "\x07" not in out + err, (args, out, err)
    assert "h\\x1b]0;pwned\\x07.yaml" in out and "[bold]z[/]" in out, out


# -- 11: a refusal leaves nothing behind -----------------------------------------------------------

PRODUCTS = "name: prod\nnodes:\n  a:\n    parameters: {i: [1, 2]}\n    products: ['loop/x{{ i }}']\n    run: echo hi\n"


@pytest.mark.parametrize("command", ["run", "submit"])
def test_a_run_refused_for_its_products_leaves_nothing_behind(tmp_path, command):
    """Before, a products: directory that cannot be listed (here a symbolic link to itself)
    was refused by the engine as it began, and the run directory (./pwe-runs too) stayed."""
    (tmp_path / "wf.yaml").write_text(PRODUCTS)
    os.symlink("loop", tmp_path / "loop")
    state = tmp_path / "state"
    env = {"XDG_STATE_HOME": str(state), "PWE_HOME": ""}
    before = _tree(tmp_path)
    _one_line(run_cli(command, "wf.yaml", cwd=tmp_path, env=env, timeout=120), 2, "loop", "products")
    _one_line(run_cli(command, "wf.yaml", "--run-dir", tmp_path / "deep" / "er" / "r", cwd=tmp_path, env=env,
                      timeout=120), 2, "loop")
    assert [p for p in _tree(tmp_path) if not p.startswith("state")] == before  # (no pwe-runs/, no deep/)
    assert not list(state.rglob("*-*")), list(state.rglob("*"))  # (no entry in the registry of runs)


# -- 11: bad input is exit 2 everywhere; an empty selection is refused -------------------------------

def test_an_unknown_node_or_trigger_is_bad_input(hostile_run, tmp_path):
    """Before, `pwe show --node NOSUCH` (and --tree) exited 1, trigger history of no trigger 0."""
    cwd, run_id = hostile_run
    _one_line(call_cli("show", run_id, "--node", "NOSUCH", cwd=cwd), 2, "no node 'NOSUCH'")
    _one_line(call_cli("show", run_id, "--tree", "--node", "NOSUCH", cwd=cwd), 2, "no node 'NOSUCH'")
    _one_line(call_cli("trigger", "history", "NOSUCH", cwd=cwd, env={"PWE_HOME": str(tmp_path / "h")}), 2,
              "no trigger 'NOSUCH'")


EMPTY = [
    ("trigger", "add", "wf.yaml", "--after-run", "success", "--of", ""),
    ("trigger", "add", "wf.yaml", "--cron", "* * * * *", "--id", ""),
    ("show", "RUN", "--node", ""),
    ("show", "RUN", "--state", ""),
    ("status", ""),
    ("show", ""),
    ("logs", "RUN", ""),
    ("run", "wf.yaml", "--host", ""),
    ("run", "wf.yaml", "--run-dir", ""),
    ("plan", "wf.yaml", "--host", ""),
    ("validate", ""),
    ("runs", "--root", ""),
    ("hosts", "show", ""),
    ("pilot", "add", "RUN", "--host", ""),
    ("trigger", "remove", ""),
]


def test_an_empty_selection_is_refused(hostile_run):
    """Before, `pwe trigger add --of ''` was taken (a trigger on every workflow's runs),
    `pwe runs --root ''` listed the current directory, `pwe run --run-dir ''` used it."""
    cwd, run_id = hostile_run
    home = cwd / "h"
    before = _tree(cwd)
    for args in EMPTY:
        args = [run_id if a == "RUN" else a for a in args]
        err = _one_line(call_cli(*args, cwd=cwd, env={"PWE_HOME": str(home)}), 2)
        assert "selects nothing" in err, (args, err)
    assert _tree(cwd) == before


# -- 11: a workspace that is a file ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["file", "fifo", "dangling link"])
def test_a_workspace_that_is_not_a_directory_is_refused_at_validate(tmp_path, kind):
    """Before, `pwe validate` passed it (pwe run refused it, naming no line)."""
    ws = tmp_path / "ws"
    if kind == "file":
        ws.write_text("x")
    elif kind == "fifo":
        os.mkfifo(ws)
    else:
        os.symlink(tmp_path / "gone", ws)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nworkspace: ws\nnodes:\n  a:\n    run: echo hi\n")
    # (a FIFO in a process of its own, under a timeout: were it opened, the call would never end)
    pwe = (lambda *args, **kw: run_cli(*args, timeout=60, **kw)) if kind == "fifo" else call_cli
    for command in ("validate", "plan", "run"):
        err = _one_line(pwe(command, wf, cwd=tmp_path), 2, "workspace: ws", "not a directory")
        assert err.startswith(f"{wf}:2:"), err
    assert not (tmp_path / "pwe-runs").exists()
    rc, out, err = pwe("validate", wf, "--json", cwd=tmp_path)
    assert rc == 2 and not out.strip(), out  # (no document of a workflow refused)
