"""A workflow's ``inputs:`` (pwe.workflow.inputs): the files staged to a host without shared file
systems. The patterns are checked at validate (one line, exit 2); expand() names the
regular files they mean, relative to the workspace, and refuses what leads out of it."""

from __future__ import annotations

import os

import pytest

from pwe.planning import products
from pwe.base.errors import InputError
from pwe.workflow.inputs import checked_pattern, expand
from pwe.workflow.load import load_workflow
from pwe.planning.plan import plan_workflow
from helpers import run_cli


@pytest.fixture
def ws(tmp_path):
    """A workspace: data/ with CSVs (one hidden), a nested tree, a loose file."""
    root = tmp_path / "ws"
    for rel in ("data/a.csv", "data/b.csv", "data/notes.txt", "data/.hidden.csv", "mesh/coarse/m.msh",
                "mesh/fine/m.msh", "mesh/fine/deep/x.csv", "mesh/.cache/c.csv", "params.json"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    return root


# --- expansion -----------------------------------------------------------------------------


def test_a_glob_names_files_in_one_directory(ws):
    assert expand(["data/*.csv"], ws) == ["data/a.csv", "data/b.csv"]  # not .hidden.csv, as glob
    assert expand(["data/.*.csv"], ws) == ["data/.hidden.csv"]
    assert expand(["data/?.csv", "data/[b]*"], ws) == ["data/a.csv", "data/b.csv"]


def test_double_star_is_any_depth(ws):
    assert expand(["**/*.csv"], ws) == ["data/a.csv", "data/b.csv", "mesh/fine/deep/x.csv"]
    assert expand(["mesh/**/m.msh"], ws) == ["mesh/coarse/m.msh", "mesh/fine/m.msh"]
    # ** at the end matches the directory itself: every file under it, hidden ones too
    assert expand(["mesh/**"], ws) == expand(["mesh"], ws)


def test_a_directory_means_every_file_under_it(ws):
    assert expand(["mesh"], ws) == ["mesh/.cache/c.csv", "mesh/coarse/m.msh", "mesh/fine/deep/x.csv",
                                    "mesh/fine/m.msh"]
    assert expand(["mesh/"], ws) == expand(["./mesh"], ws) == expand(["mesh"], ws)
    assert ".cache" not in str(expand(["mesh/*"], ws))  # ('*' matches no hidden name, as glob)
    assert len(expand(["."], ws)) == 9 and expand(["**"], ws) == expand(["."], ws)  # the whole workspace


def test_sorted_and_each_once(ws):
    got = expand(["params.json", "data", "data/*.csv", "**/a.csv"], ws)
    assert got == sorted(set(got)) and got.count("data/a.csv") == 1 and "params.json" in got
    assert expand([], ws) == []


def test_a_pattern_that_matches_nothing_is_one_line(ws):
    (ws / "empty").mkdir()
    for pattern in ("data/*.dat", "missing.txt", "empty", "nowhere/**/x"):
        with pytest.raises(InputError) as err:
            expand(["data", pattern], ws, source=ws / "wf.yaml")
        text = str(err.value)
        assert text.startswith(f"{ws / 'wf.yaml'}: inputs: {pattern!r} matches no file in the workspace {ws}"), text
        assert "--workspace" in text and "\n" not in text


def test_a_symlink_inside_the_workspace_is_followed(ws):
    os.symlink("data/a.csv", ws / "link.csv")
    os.symlink("mesh/fine", ws / "fine")
    os.symlink("..", ws / "mesh/up")  # a loop: its files are reached by their own paths
    assert "link.csv" in expand(["*.csv"], ws)
    assert expand(["fine"], ws) == ["fine/deep/x.csv", "fine/m.msh"]
    assert expand(["mesh"], ws)[:2] == ["mesh/.cache/c.csv", "mesh/coarse/m.msh"]
    got = expand(["mesh"], ws)
    assert "mesh/up/params.json" in got and not any(p.startswith("mesh/up/mesh/") for p in got)  # (once round)
    assert len(expand(["**/m.msh"], ws)) >= 2


@pytest.mark.parametrize("pattern", ["secret.csv", "*.csv", "out", "out/*", "data"])
def test_a_symlink_out_of_the_workspace_is_refused(ws, tmp_path, pattern):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "s.csv").write_text("secret")
    os.symlink(outside / "s.csv", ws / "secret.csv")
    os.symlink(outside, ws / "out")
    os.symlink(outside / "s.csv", ws / "data" / "s.csv")
    with pytest.raises(InputError) as err:
        expand([pattern], ws, source=ws / "wf.yaml")
    text = str(err.value)
    assert f"outside the workspace {ws}" in text and str(outside) in text and "\n" not in text, text


def test_double_star_does_not_enter_a_link_out_of_the_workspace(ws, tmp_path):
    (tmp_path / "scratch" / "big").mkdir(parents=True)
    (tmp_path / "scratch" / "big" / "y.csv").write_text("y")
    os.symlink(tmp_path / "scratch", ws / "scratch")
    assert expand(["**/*.csv"], ws) == ["data/a.csv", "data/b.csv", "mesh/fine/deep/x.csv"]


def test_a_dangling_link_and_a_fifo_are_no_files(ws):
    os.symlink("gone.csv", ws / "data" / "dangling.csv")
    os.mkfifo(ws / "data" / "pipe")
    assert expand(["data"], ws) == ["data/.hidden.csv", "data/a.csv", "data/b.csv", "data/notes.txt"]
    with pytest.raises(InputError, match="matches no file"):
        expand(["data/pipe"], ws)


@pytest.mark.parametrize("pattern", ["/etc/passwd", "../x", "data/../../x", "a/..", "", "  ", "a\nb", "a\0b"])
def test_a_pattern_out_of_the_workspace_is_refused_by_expand_too(ws, pattern):
    assert checked_pattern(pattern) is None
    with pytest.raises(InputError, match="is not a path inside the workspace"):
        expand([pattern], ws)


def test_expand_with_the_runs_workspace(tmp_path, ws):
    """The workspace is products.workspace()'s: --workspace, else 'workspace:', else the file's directory."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nworkspace: ws\ninputs: [data/*.csv, params.json]\nnodes:\n  a: {run: x}\n")
    plan = plan_workflow(wf)
    assert expand(plan.workflow.inputs, products.workspace(plan), plan.file) == [
        "data/a.csv", "data/b.csv", "params.json"]
    assert expand(["*.csv"], products.workspace(plan, ws / "data")) == ["a.csv", "b.csv"]  # (--workspace)


# --- validation: one line, exit 2 ----------------------------------------------------------

BAD = [
    ("absolute", '["/etc/passwd"]', "no leading '/'"),
    ("climbs out", '["data/../../x"]', "no '..' part"),
    ("dot-dot", '[".."]', "no '..' part"),
    ("empty", '[""]', "not blank"),
    ("line break", '["a\\nb"]', "no line break"),
    ("NUL", '["a\\0b"]', "NUL byte"),
    ("not a list", '"data"', "must be a list"),
    ("not text", "[3]", "must be text"),
]


@pytest.mark.parametrize("case,value,phrase", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs_are_one_line_exit_2(tmp_path, write, case, value, phrase):
    wf = write(f"name: bad\ninputs: {value}\nnodes:\n  a: {{run: x}}\n")
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert rc == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"{wf}:2: ") and phrase in err, err


def test_bad_xml_input_names_its_line(tmp_path, write):
    wf = write('<workflow name="bad">\n  <inputs>\n    <input>data</input>\n    <input>/etc</input>\n  </inputs>\n'
               '  <node id="a"><run>x</run></node>\n</workflow>\n', name="wf.xml")
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"{wf}:4: 'inputs[1]'") and "no leading '/'" in err, err


# --- the same in YAML and XML --------------------------------------------------------------


def test_yaml_and_xml_agree(tmp_path, write):
    y = write("name: w\ninputs:\n  - data/*.csv\n  - '**/m.msh'\n  - params.json\nnodes:\n  a: {run: x}\n")
    x = write('<workflow name="w">\n  <inputs>\n    <input>data/*.csv</input>\n    <input> **/m.msh </input>\n'
              '    <input>params.json</input>\n  </inputs>\n  <node id="a"><run>x</run></node>\n</workflow>\n',
              name="wf.xml")
    (yw, _), (xw, _) = load_workflow(y), load_workflow(x)
    assert xw == yw and xw.inputs == ["data/*.csv", "**/m.msh", "params.json"]
    # no inputs: an empty list in both forms
    empty = write('<workflow name="w">\n  <inputs/>\n  <node id="a"><run>x</run></node>\n</workflow>\n', name="e.xml")
    assert load_workflow(empty)[0].inputs == [] == load_workflow(write("name: w\nnodes:\n  a: {run: x}\n"))[0].inputs
