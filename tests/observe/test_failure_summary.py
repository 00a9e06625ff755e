"""pwe failures: a run's failures by parameter value, reason, error signature and host.

Real runs for what a user sees (the value that always fails comes first; a real signal;
the signature folds what varies); an invariant over random parameter spaces and states for
the counting, which works on the state's bytes by arithmetic and must agree with counting
member by member."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ROOT, no_traceback, one_line_error, run_cli

from pwe.base.source import value_text
from pwe.base.states import DONE, FAILED, QUARANTINED
from pwe.observe.failures import _by_value, signature
from pwe.planning.params import ListValues, ParameterSpace, RangeValues

MESHES = """\
name: meshes
nodes:
  sim:
    parameters: {mesh: [coarse, medium, fine], seed: {range: [0, 6]}}
    run: >-
      if [ {{ mesh }} = fine ]; then echo "Error: /scratch/u/run{{ seed }}/m.h5: residual {{ seed }}.5e-3 too large" >&2;
      exit 3; fi; echo ok
  killed:
    parameters: {k: [1, 2]}
    run: 'if [ {{ k }} = 2 ]; then kill -KILL $$; fi; true'
"""


def _failures(run, cwd, *more):
    rc, out, err = run_cli("failures", run, "--json", *more, cwd=cwd)
    assert rc == 0, err
    return json.loads(out)


def test_the_value_that_always_fails_comes_first_with_its_reason_signature_and_host(tmp_path, write):
    wf = write(MESHES)
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 1, err
    doc = _failures(tmp_path / "run", tmp_path)
    assert doc["failed"] == 7 and doc["done"] == 13
    first = doc["by_value"][0]
    assert (first["node"], first["parameter"], first["value"]) == ("sim", "mesh", "fine")
    assert (first["failed"], first["done"], first["rate"], first["difference"]) == (6, 0, 1.0, 100.0)
    # each seed fails once in three: no more over-represented than its share
    seeds = [r for r in doc["by_value"] if r["parameter"] == "seed"]
    assert len(seeds) == 6 and all((r["failed"], r["done"], r["difference"]) == (1, 2, 0.0) for r in seeds)
    killed = next(r for r in doc["by_value"] if r["node"] == "killed" and r["value"] == "2")
    assert killed["failed"] == 1 and killed["done"] == 0
    # the shell killed itself: the pilot saw the signal, and says so
    assert {r["reason"]: r["members"] for r in doc["by_reason"]} == {"exit 3": 6, "signal 9": 1}
    # six error lines differing in a path and a number are one signature
    sig = doc["by_signature"][0]
    assert sig["members"] == 6 and sig["signature"] == "Error: <path>: residual <n> too large", sig
    assert doc["signatures_read"] == 7
    # every attempt ran on this machine: one host, with every attempt counted
    assert len(doc["by_host"]) == 1 and (doc["by_host"][0]["failed"], doc["by_host"][0]["done"]) == (7, 13)
    # the light pass over the journal says what the trace says (the report counts on its trace)
    from pwe.observe.failures import _by_host, _hosts_of
    from pwe.observe.trace import load

    _, _, st, tr = load(tmp_path / "run")
    assert _hosts_of(tmp_path / "run", st) == _by_host(tr) == doc["by_host"]
    rc, out, err = run_cli("failures", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    rows = out.splitlines()
    at = rows.index(next(r for r in rows if r.startswith("by parameter value")))
    assert rows[at + 2].split()[:3] == ["sim", "mesh", "fine"], out
    assert "6  Error: <path>: residual <n> too large" in out


def test_a_run_without_failures_and_the_signatures_read_from_a_few(tmp_path, write):
    wf = write("name: fine\nnodes:\n  a:\n    parameters: {i: {range: [0, 3]}}\n    run: 'true'\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "ok", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    doc = _failures(tmp_path / "ok", tmp_path)
    assert doc["failed"] == 0 and doc["by_value"] == [] and doc["by_signature"] == []
    rc, out, err = run_cli("failures", tmp_path / "ok", cwd=tmp_path)
    assert rc == 0 and "no member failed" in out, out
    wf = write("name: many\nnodes:\n  a:\n    parameters: {i: {range: [0, 9]}}\n    run: echo bad {{ i }} >&2; exit 1\n")
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "bad", cwd=tmp_path, timeout=300)
    assert rc == 1, err
    doc = _failures(tmp_path / "bad", tmp_path, "--signatures", "3", "--no-hosts")
    assert doc["signatures_read"] == 3 and doc["by_signature"][0] == {
        "signature": "bad <n>", "members": 3, "example": "a:0", "line": "bad 0"}, doc["by_signature"]
    assert doc["by_host"] is None
    rc, out, err = run_cli("failures", tmp_path / "bad", "--signatures", "3", cwd=tmp_path)
    assert "(read from 3 of 9)" in out, out


def test_bad_input_is_one_line(tmp_path, write):
    assert "no-such-run" in one_line_error(*run_cli("failures", "no-such-run", cwd=tmp_path))
    assert "--signatures" in one_line_error(*run_cli("failures", tmp_path / "x", "--signatures", "-1", cwd=tmp_path))
    # a FIFO where the run's journal goes: refused without reading it
    wf = write("name: tiny\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    (tmp_path / "run" / "journal.jsonl").unlink()
    os.mkfifo(tmp_path / "run" / "journal.jsonl")
    no_traceback(one_line_error(*run_cli("failures", tmp_path / "run", cwd=tmp_path, timeout=60)))


def test_values_and_lines_members_made_are_shown_as_text_and_a_closed_pipe_is_quiet(tmp_path, write):
    wf = write("name: esc\nnodes:\n  a:\n    parameters: {v: [\"\\e[31mred\", plain]}\n"
               "    run: printf '\\033]0;title\\007 boom\\n' >&2; exit 2\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 1, err
    rc, out, err = run_cli("failures", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[31mred" in out, out
    # a reader that closes the pipe early has what it wanted: no traceback, exit 0
    p = subprocess.run(f"{sys.executable} -m pwe failures {tmp_path / 'run'} --json | head -c1", shell=True,
                       cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.stdout == "{" and "Traceback" not in p.stderr, p.stderr


def test_signatures_fold_what_varies():
    a = signature("Error: /scratch/u/run7/x.h5 at 0x7ffd12ab: 1.5e-3 > 0.5")
    b = signature("Error:   /home/v/run12/y.h5 at 0x7aaa0000: 2e-4 > 0.25")
    assert a == b == "Error: <path> at <hex>: <n> > <n>"
    assert signature("x" * 10_000).startswith("x") and len(signature("x" * 10_000)) <= 200


# ------------------------------------------------------- the counting, against member by member
@st.composite
def _spaces(draw):
    sizes = draw(st.lists(st.integers(1, 7), min_size=1, max_size=3))
    combine = "zip" if len(set(sizes)) == 1 and draw(st.booleans()) else "product"
    values = {}
    for k, n in enumerate(sizes):
        if draw(st.booleans()):
            values[f"p{k}"] = RangeValues(0, n)
        else:  # (texts that repeat: two positions of one value are counted together)
            values[f"p{k}"] = ListValues(draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=n,
                                                       max_size=n)))
    space = ParameterSpace(values, combine)
    codes = draw(st.lists(st.sampled_from([DONE, FAILED, QUARANTINED, 0, 3]), min_size=space.size,
                          max_size=space.size))
    return space, bytearray(codes)


@settings(max_examples=300, deadline=None, database=None)
@given(_spaces())
def test_counting_by_value_agrees_with_counting_member_by_member(case):
    space, state = case
    failed = sum(1 for c in state if c in (FAILED, QUARANTINED))
    done = state.count(DONE)
    rows = _by_value("n", space, state, failed, done, [])
    want: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(state):
        for name, v in space.values_of(i).items():
            got = want.setdefault((name, value_text(v)), [0, 0])
            got[0] += c in (FAILED, QUARANTINED)
            got[1] += c == DONE
    want = {k: v for k, v in want.items() if v != [0, 0]}
    assert {(r["parameter"], r["value"]): [r["failed"], r["done"]] for r in rows} == want
    for r in rows:  # the difference: share among the failed less share among the done, in points
        exp = 100 * ((r["failed"] / failed if failed else 0) - (r["done"] / done if done else 0))
        assert abs(r["difference"] - exp) <= 0.05 + 1e-9  # (rounded to 0.1)


def test_a_parameter_with_too_many_values_is_not_compared(monkeypatch):
    import pwe.observe.failures as f

    monkeypatch.setattr(f, "VALUES_COMPARED", 5)
    space = ParameterSpace({"x": RangeValues(0, 10), "y": ListValues(["u", "v"])})
    skipped: list = []
    rows = f._by_value("n", space, bytearray([FAILED] * 20), 20, 0, skipped)
    assert skipped == [{"node": "n", "parameter": "x", "values": 10}]
    assert {r["parameter"] for r in rows} == {"y"}
