"""Bad input and hostile input to reuse (pwe/planning/reuse.py, pwe/runstate/reusable.py):
``reuse:`` not a boolean, ``--reuse-from`` not a runs root or a run of another workflow,
``inputs:`` leading out of the workspace or naming a FIFO, a lending run's files that are
not what pwe wrote: one line, exit 2 where the user gave it, nothing made, nothing reused
by mistake."""

import json
import os
from pathlib import Path

import pytest

from helpers import call_cli, run_cli
from pwe.runstate.journal import check

WF = """\
name: {name}
nodes:
  a:
    parameters: {{i: [1, 2, 3]}}
{extra}    run: echo "a {{{{ i }}}}" >> {ledger}
"""


def write(tmp_path, name="w", extra="", file="wf.yaml"):
    wf = tmp_path / file
    wf.write_text(WF.format(name=name, extra=extra, ledger=tmp_path / "ledger"))
    return wf


def one_line_exit_2(rc, out, err, *words):
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err


def made_nothing(tmp_path, root="pwe-runs"):
    d = tmp_path / root
    return not d.exists() or not any(d.iterdir())


@pytest.mark.parametrize("value", ['"yes"', "1", "[true]", "{a: 1}", "null-ish"])
def test_reuse_not_a_boolean_is_one_line_naming_file_and_line(tmp_path, value):
    wf = write(tmp_path, extra=f"    reuse: {value}\n")
    for cmd in ("validate", "plan", "run"):
        rc, out, err = call_cli(cmd, wf, cwd=tmp_path)
        one_line_exit_2(rc, out, err, "wf.yaml:", "reuse")
    assert made_nothing(tmp_path) and not (tmp_path / "ledger").exists()


def test_reuse_in_xml_not_a_boolean_is_refused_by_the_schema(tmp_path):
    wf = tmp_path / "wf.xml"
    wf.write_text('<workflow name="x"><node id="a" reuse="maybe"><run>true</run></node>'
                  '</workflow>')
    rc, out, err = call_cli("validate", wf, cwd=tmp_path)
    assert rc == 2 and "Traceback" not in err and "reuse" in err, err
    wf.write_text('<workflow name="x"><node id="a" reuse="false"><run>true</run></node>'
                  '</workflow>')
    rc, out, err = call_cli("validate", wf, cwd=tmp_path)
    assert rc == 0, err


def test_reuse_from_that_is_no_runs_root_nor_a_run_of_this_workflow(tmp_path):
    wf = write(tmp_path)
    other = write(tmp_path, name="other", file="other.yaml")
    rc, out, err = run_cli("run", other, "--run-dir", tmp_path / "runs" / "o1", cwd=tmp_path)
    assert rc == 0, err
    (tmp_path / "plain").mkdir()
    (tmp_path / "afile").write_text("x")
    cases = [
        (tmp_path / "nowhere", "not a directory"),
        (tmp_path / "afile", "not a directory"),
        (tmp_path / "plain", "not a runs root"),
        (tmp_path / "runs" / "o1", "a run of workflow 'other', not of 'w'"),
        (tmp_path / "runs", "holds no ended run of workflow 'w'"),
    ]
    for where, said in cases:
        for cmd in ("run", "plan", "submit"):
            more = ("--run-dir", tmp_path / "new" / "r") if cmd != "plan" else ()
            rc, out, err = call_cli(cmd, wf, "--reuse-from", where, *more, cwd=tmp_path)
            one_line_exit_2(rc, out, err, "--reuse-from", said)
        assert made_nothing(tmp_path, "new") and not (tmp_path / "ledger").read_text().count("a 1") > 1


def test_inputs_that_lead_out_of_the_workspace_or_are_no_regular_file(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for bad in ("/etc/passwd", "../secret", "a/../../x"):
        wf = write(tmp_path, extra=f"    inputs: [{json.dumps(bad)}]\n")
        rc, out, err = call_cli("validate", wf, cwd=tmp_path)
        one_line_exit_2(rc, out, err, "inputs")
    # a FIFO, a link out of the workspace, a directory: refused when hashed (never opened for reading)
    os.mkfifo(ws / "fifo")
    (ws / "out").symlink_to("/etc/passwd")
    (ws / "dir").mkdir()
    for name in ("fifo", "out", "dir"):
        wf = write(tmp_path, extra=f"    inputs: [{name}]\n")
        rc, out, err = run_cli("run", wf, "--workspace", ws, "--run-dir", tmp_path / "runs" / "r1", cwd=tmp_path,
                               timeout=120)
        one_line_exit_2(rc, out, err, "inputs", name)
        assert not (tmp_path / "runs" / "r1").exists() and not (tmp_path / "ledger").exists()  # nothing left, ran
        rc, out, err = run_cli("plan", wf, "--workspace", ws, cwd=tmp_path)
        one_line_exit_2(rc, out, err, "inputs", name)


def test_a_lending_run_whose_files_are_not_pwe_s_lends_nothing(tmp_path):
    wf = write(tmp_path)
    led = tmp_path / "ledger"
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "runs" / "r1", cwd=tmp_path)
    assert rc == 0, err
    rec = tmp_path / "runs" / "r1" / "reusable.json"
    good = rec.read_text()
    keys = tmp_path / "runs" / "r1" / "reusable.keys"
    good_keys = keys.read_bytes()

    def ran_again() -> int:
        led.unlink(missing_ok=True)
        rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "runs" / "again", cwd=tmp_path, timeout=120)
        assert rc == 0 and "Traceback" not in err, err
        import shutil

        shutil.rmtree(tmp_path / "runs" / "again")
        return len(led.read_text().splitlines()) if led.exists() else 0

    assert ran_again() == 0  # (as written: all reused)
    # each of: a FIFO where the record is, truncated, not JSON, keys of another length, the
    # record's signature field changed: the run goes on and runs everything (never hangs)
    rec.unlink()
    os.mkfifo(rec)
    assert ran_again() == 3
    rec.unlink()
    rec.write_text(good[: len(good) // 2])
    assert ran_again() == 3
    rec.write_text("[1, 2]")
    assert ran_again() == 3
    rec.write_text(good)
    keys.write_bytes(good_keys + b"x" * 16)
    assert ran_again() == 3
    keys.write_bytes(good_keys)
    body = json.loads(good)
    body["mac"] = "0" * 64
    rec.write_text(json.dumps(body))
    assert ran_again() == 3
    # a run directory that is a symlink into the runs root (a run of elsewhere) is not looked at
    rec.write_text(good)
    (tmp_path / "runs" / "r1").rename(tmp_path / "away")
    (tmp_path / "runs" / "r1").symlink_to(tmp_path / "away")
    (tmp_path / "runs" / "r0").mkdir()  # (the runs root holds a run directory still: no refusal)
    assert ran_again() == 3


def test_damaged_reused_records_are_refused_by_the_journal_check():
    size = {"a": 10}.__getitem__
    good = {"e": "reused", "n": "a", "from": "r1", "r": [[0, 10, 0]], "out": {"3": {"x": "1"}}}
    check(good, size)
    for bad in ({"r": [[0, 11, 0]]}, {"r": [[5, 5, 0]]}, {"r": [[-1, 2, 0]]}, {"r": [[0, 2, -3]]},
                {"from": 7}, {"out": {"12": {}}}, {"out": {"x": {}}}, {"out": {"1": "text"}}):
        with pytest.raises((ValueError, TypeError)):
            check({**good, **bad}, size)


def test_values_that_reach_a_shell_in_a_reused_member_stay_text(tmp_path):
    """A reused member's outputs are data: shown as they were, never run (what pwe prints)."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("""\
name: quoting
nodes:
  a:
    parameters: {v: ["$(touch pwned)", "x; touch pwned2", "\\u001b[31mred"]}
    run: printf 'out=%s\\n' {{ v }} >> "$PWE_OUTPUTS"
""")
    for name in ("r1", "r2"):
        rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "runs" / name, cwd=tmp_path, timeout=120)
        assert rc == 0, err
    rc, out, err = run_cli("show", tmp_path / "runs" / "r2", "--json", cwd=tmp_path)
    got = {m["member"]: m for m in json.loads(out)}
    assert got[0]["reason"] == "reused" and got[0]["outputs"] == {"out": "$(touch pwned)"}
    assert not list(Path(tmp_path).rglob("pwned*"))
    rc, out, err = run_cli("show", tmp_path / "runs" / "r2", cwd=tmp_path)
    assert "\x1b[31m" not in out
