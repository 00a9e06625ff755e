"""Hostile patterns (issue 31, items 3 and 5): the query language's ``~`` matches in linear
time (RE2), whatever the pattern; an empty selection is refused, never "every member";
an ``inputs:`` glob is bounded in its ``**`` parts and in what its walk lists.

Every run is a real ``pwe run``; the commands whose time is the question are the real
``pwe`` in a subprocess (a timeout there is a hang guard only: the assertions are on what
the command said), the refusals in words are ``pwe``'s own entry in this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, call_cli, read_journal, run_cli

#: a member's output that makes a backtracking matcher try 2^64 ways for (a+)+$
AS = "a" * 64
WORKFLOW = f"""name: hostilepat
defaults: {{host: local}}
nodes:
  sweep:
    parameters:
      k: {{range: [0, 4]}}
    run: |
      echo "x={AS}!" >> "$PWE_OUTPUTS"
      if [ {{{{ k }}}} = 2 ]; then echo "x={AS}" > "$PWE_OUTPUTS"; fi
      if [ {{{{ k }}}} = 3 ]; then exit 5; fi
"""
#: patterns a backtracking matcher takes exponential (or high-power) time over 'aaa...a!', and what they select
CATASTROPHIC = [("outputs.x~(a+)+$", [2]), ("outputs.x~(a|aa)*b", []), ("outputs.x~(.*)*y", []),
                ("outputs.x~" + r"\w*" * 12 + "y", []), ("outputs.x~(a|aa)*!$; state=done", [0, 1])]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished run of 4 members (k=3 fails; k=2's output has no '!'): (cwd, run dir)."""
    cwd = tmp_path_factory.mktemp("pat")
    (cwd / "wf.yaml").write_text(WORKFLOW)
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=cwd)
    assert rc == 1, err
    doc = json.loads(out)
    assert doc["totals"]["done"] == 3 and doc["totals"]["failed"] == 1, doc
    return cwd, Path(doc["run_dir"])


def _one_line(rc, err, phrase):
    assert rc == 2, err
    assert phrase in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("query, selected", CATASTROPHIC, ids=[q for q, _ in CATASTROPHIC])
def test_a_catastrophic_pattern_is_matched_in_linear_time(run, query, selected):
    cwd, d = run
    rc, out, err = run_cli("show", d.name, "-q", query, "--json", cwd=cwd, timeout=60)
    assert rc == 0, err
    assert [m["member"] for m in json.loads(out)] == selected, out
    assert err == ""  # (RE2's own log lines are kept off stderr)


@pytest.mark.parametrize("query, phrase", [
    ("outputs.x~a(?=!)", "lookaround"),
    ("outputs.x~(?<!b)a", "lookaround"),
    ("outputs.x~(?>a+)!", "an atomic group"),
    ("outputs.x~a++!", "a possessive"),
    ("outputs.x~a{1,1001}", "not a regular expression"),
])
def test_syntax_only_a_backtracking_matcher_has_is_one_line(run, query, phrase):
    cwd, d = run
    rc, out, err = call_cli("show", d.name, "-q", query, cwd=cwd)
    _one_line(rc, err, phrase)
    assert out == ""


def test_an_empty_query_selects_nothing_it_is_refused(run):
    cwd, d = run
    for query in ("", "   ", " ; ;"):
        rc, out, err = call_cli("show", d.name, "-q", query, cwd=cwd)
        _one_line(rc, err, "no condition")
        assert out == ""
        before = (d / "journal.jsonl").read_bytes()
        rc, out, err = call_cli("retry", d.name, "-q", query, cwd=cwd)
        _one_line(rc, err, "no condition")
        # nothing retried: the journal is as it was, no retry record, the failed member still failed once
        assert (d / "journal.jsonl").read_bytes() == before
        assert not [r for r in read_journal(d) if r["e"] == "retry"]
        rc, out, err = call_cli("show", d.name, "-q", "state=failed", "--json", cwd=cwd)
        assert [(m["member"], m["attempts"]) for m in json.loads(out)] == [(3, 1)], out


def test_the_python_api_refuses_an_empty_query_too(run):
    from pwe import RunResult
    from pwe.base.errors import InputError

    with pytest.raises(InputError, match="no condition"):
        RunResult(run[1]).query("")


# -- inputs: globs bounded -------------------------------------------------------------------
def test_a_pattern_of_many_double_stars_is_refused_at_validate(tmp_path):
    deep = tmp_path / Path(*["d"] * 40)
    deep.mkdir(parents=True)
    (deep / "x.dat").write_text("1")
    many = "/".join(["**"] * 12) + "/x.dat"
    (tmp_path / "wf.yaml").write_text(f"name: globs\ninputs:\n  - data\n  - '{many}'\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("validate", "wf.yaml", cwd=tmp_path, timeout=60)
    _one_line(rc, err, "wf.yaml:4:")
    assert "12 '**' parts, at most 4" in err
    assert not (tmp_path / "pwe-runs").exists()


def test_a_walk_reaches_each_directory_once_per_part(tmp_path):
    """``**/d/**/d/**/d/**/x.dat`` in a chain of 60 directories: a matcher that tries every
    way the parts can split the chain walks C(60, 4) of them (minutes); one that keeps the
    set of paths each part reaches lists each directory 4 times."""
    deep = tmp_path / "ws" / Path(*["d"] * 60)
    deep.mkdir(parents=True)
    (deep / "x.dat").write_text("1")
    (tmp_path / "ws" / "d" / "x.dat").write_text("not under three d's")
    code = ("import json, sys; from pwe.workflow.inputs import expand\n"
            "print(json.dumps(expand(['**/d/**/d/**/d/**/x.dat'], sys.argv[1])))")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ws")], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["/".join(["d"] * 60) + "/x.dat"]


def test_a_walk_past_its_budget_of_entries_is_one_line(tmp_path, monkeypatch):
    from pwe.base.errors import InputError
    from pwe.workflow import inputs

    for k in range(30):
        (tmp_path / f"dir{k}").mkdir()
        (tmp_path / f"dir{k}" / "f.dat").write_text("1")
    assert len(inputs.expand(["**/f.dat"], tmp_path)) == 30
    monkeypatch.setattr(inputs, "MAX_ENTRIES", 40)
    with pytest.raises(InputError) as refused:
        inputs.expand(["**/f.dat"], tmp_path, tmp_path / "wf.yaml")
    said = str(refused.value)
    assert "'**/f.dat' lists more than 40 entries of the workspace" in said and "\n" not in said
    assert said.startswith(str(tmp_path / "wf.yaml"))
