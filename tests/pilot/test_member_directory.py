"""Where a member runs: in its node's directory (``directory: shared``), made once, or in a
directory of its own (``directory: own``); ``$PWE_OUTPUTS`` beside the member's $TMPDIR on
its node, so that a member that writes no outputs costs the run's file system nothing and
no outputs file stays behind. End to end with real processes through the real CLI; the
members' own words (their outputs, a ledger) say where they ran."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers import no_traceback, pwe, read_journal, show

from pilot.spawn import DirectoryError, open_node_dir
from pwe.engine.tasks import directory_of
from pwe.planning.plan import plan_workflow

WHERE = 'echo "where=$(/bin/pwd -P)" >> "$PWE_OUTPUTS"; echo "i=$PWE_MEMBER" >> "$PWE_OUTPUTS"'


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def files_under(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_shared_members_run_in_their_nodes_directory_and_leave_no_file_each(tmp_path):
    n = 30
    wf = write(tmp_path / "wf.yaml", f"name: sh\nnodes:\n  a:\n    parameters: {{i: {{range: [0, {n}]}}}}\n"
               f"    directory: shared\n    run: {json.dumps(WHERE)}\n")
    run_dir = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path)
    assert rc == 0, err
    node_dir = (run_dir / "members" / "a").resolve()
    got = {m["member"]: m["outputs"] for m in show(run_dir)}
    assert got == {i: {"where": str(node_dir), "i": str(i)} for i in range(n)}
    # no directory per member, no outputs file per member: only what the pilot still writes
    # into the member's working directory (its stdout and stderr, until per-pilot streams)
    left = files_under(run_dir / "members")
    assert not [f for f in left if "outputs" in f or f.split("/")[-1].isdigit()], left
    assert set(left) <= {"a", "a/stdout", "a/stderr"}, left


def test_own_members_run_in_their_own_directory_which_stays_only_when_they_wrote_there(tmp_path):
    wf = write(tmp_path / "wf.yaml", "name: own\nnodes:\n  a:\n    parameters: {i: {range: [0, 4]}}\n"
               f"    directory: own\n    run: {json.dumps(WHERE + '; if [ $PWE_MEMBER = 2 ]; then echo x > mine; fi')}\n")
    run_dir = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path)
    assert rc == 0, err
    own = {i: (run_dir / "members" / "a" / "0" / str(i)).resolve() for i in range(4)}
    got = {m["member"]: m["outputs"]["where"] for m in show(run_dir)}
    assert got == {i: str(own[i].resolve()) if own[i].exists() else str(own[i]) for i in range(4)}
    assert files_under(run_dir / "members" / "a" / "0") == ["2", "2/mine"]  # (outputs: in the journal only)


def test_the_default_is_the_nodes_directory_except_for_a_node_with_products(tmp_path):
    wf = write(tmp_path / "wf.yaml", "name: d\nnodes:\n  plain:\n    run: 'true'\n  made:\n    run: 'true'\n"
               "    products: [x.dat]\n  asked:\n    run: 'true'\n    products: [y.dat]\n    directory: shared\n"
               "  mine:\n    run: 'true'\n    directory: own\n")
    plan = plan_workflow(wf)
    got = {nid: directory_of(pn) for nid, pn in plan.nodes.items()}
    assert got == {"plain": "shared", "made": "own", "asked": "shared", "mine": "own"}


def test_attempts_of_a_member_in_its_nodes_directory_keep_their_outputs_apart(tmp_path):
    run = 'echo "try=$PWE_ATTEMPT" >> "$PWE_OUTPUTS"; [ "$PWE_ATTEMPT" = 2 ]'
    wf = write(tmp_path / "wf.yaml", "name: tries\nnodes:\n  a:\n    parameters: {i: {range: [0, 3]}}\n"
               f"    retries: 1\n    directory: shared\n    run: {json.dumps(run)}\n")
    run_dir = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path)
    assert rc == 0, err
    ends = [(r["n"], r["m"], r["a"], r.get("out")) for r in read_journal(run_dir) if r["e"] == "end"]
    assert sorted(ends) == [("a", i, a, {"try": str(a)}) for i in range(3) for a in (1, 2)]
    assert not [f for f in files_under(run_dir / "members") if "outputs" in f]


@pytest.mark.parametrize("value, form", [("mine", "yaml"), ("OWN", "yaml"), ("mine", "xml")])
def test_a_directory_that_is_not_one_of_the_words_is_one_line_naming_file_and_line(tmp_path, value, form):
    if form == "yaml":
        wf = write(tmp_path / "wf.yaml", f"name: bad\nnodes:\n  a:\n    run: 'true'\n    directory: {value}\n")
        where = "wf.yaml:5"
    else:
        wf = write(tmp_path / "wf.xml", f'<workflow name="bad">\n<node id="a" directory="{value}">'
                   '<run>true</run></node>\n</workflow>\n')
        where = "wf.xml:2"
    for cmd in ("validate", "run"):
        rc, out, err = pwe(cmd, wf, cwd=tmp_path)
        assert rc == 2, (cmd, out, err)
        no_traceback(err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].split(": ")[0].endswith(where), err
        assert "own" in lines[0] and "shared" in lines[0], err
    assert not (tmp_path / "pwe-runs").exists() or not any((tmp_path / "pwe-runs").iterdir())


def test_a_member_that_swaps_its_nodes_directory_for_a_link_moves_no_other_member(tmp_path):
    """Member 0 renames the node's directory and puts a link to a directory outside the run
    in its place: the members after it still run in the real directory (the pilot holds it
    open and starts each member there by the descriptor), nothing lands where the link
    leads."""
    outside = tmp_path / "outside"
    outside.mkdir()
    swap = (f'if [ $PWE_MEMBER = 0 ]; then d=$(pwd -P); mv "$d" "$d.moved" && ln -s {outside} "$d"; fi; '
            + WHERE)
    wf = write(tmp_path / "wf.yaml", "name: swap\nnodes:\n  a:\n    parameters: {i: {range: [0, 6]}}\n"
               f"    directory: shared\n    run: {json.dumps(swap)}\n")
    run_dir = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "1", "--run-dir", run_dir, cwd=tmp_path)
    assert rc == 0, err
    moved = str((run_dir / "members" / "a.moved").resolve())
    assert {m["member"]: m["outputs"]["where"] for m in show(run_dir)} == {i: moved for i in range(6)}
    assert list(outside.iterdir()) == []


def test_a_nodes_directory_that_is_a_link_is_refused_before_a_member_starts(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "members").mkdir()
    (tmp_path / "members" / "a").symlink_to(outside)
    with pytest.raises(DirectoryError) as err:
        open_node_dir(str(tmp_path / "members" / "a"))
    assert err.value.filename == str(tmp_path / "members" / "a") and "symbolic link" in err.value.strerror
    assert list(outside.iterdir()) == []


def test_a_member_that_makes_its_nodes_directory_unwritable_costs_no_member_an_attempt(tmp_path):
    """Member 0 makes the node's directory immutable (chattr +i: root is not stopped by
    chmod). The pilot opens nothing there (the members' stdout and stderr are captured on
    the node, their outputs too): the others run there as before, no member fails for it
    and no attempt is spent."""
    if subprocess.run(["which", "chattr"], capture_output=True).returncode != 0:
        pytest.skip("no chattr here")
    probe = tmp_path / "probe"
    probe.mkdir()
    if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
        pytest.skip("this file system takes no immutable flag")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    lock = 'if [ $PWE_MEMBER = 0 ]; then chattr +i "$(pwd -P)"; fi; echo "i=$PWE_MEMBER" >> "$PWE_OUTPUTS"'
    wf = write(tmp_path / "wf.yaml", "name: ro\nnodes:\n  a:\n    parameters: {i: {range: [0, 4]}}\n"
               f"    directory: shared\n    run: {json.dumps(lock)}\n")
    run_dir = tmp_path / "run"
    try:
        rc, out, err = pwe("run", wf, "--cores", "1", "--run-dir", run_dir, cwd=tmp_path)
    finally:
        subprocess.run(["chattr", "-i", str(run_dir / "members" / "a")], capture_output=True)
    no_traceback(err)
    assert rc == 0, (rc, out, err)
    shown = show(run_dir)
    assert not [m for m in shown if m["state"] == "failed" or m["attempts"] > 1], shown
    assert sorted(m["outputs"]["i"] for m in show(run_dir)) == [str(i) for i in range(4)]


def test_outputs_that_are_a_link_or_a_fifo_are_not_read(tmp_path):
    secret = write(tmp_path / "secret", "password=hunter2\n")
    run = (f'if [ $PWE_MEMBER = 0 ]; then ln -s {secret} "$PWE_OUTPUTS"; '
           'else mkfifo "$PWE_OUTPUTS"; fi')
    wf = write(tmp_path / "wf.yaml", "name: links\nnodes:\n  a:\n    parameters: {i: {range: [0, 2]}}\n"
               f"    directory: shared\n    run: {json.dumps(run)}\n")
    run_dir = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path)
    assert rc == 0, err
    assert [m["outputs"] for m in show(run_dir)] == [{}, {}]
    assert os.path.exists(secret)


def test_a_pilot_that_finds_its_nodes_directory_a_link_stops_the_run_with_one_line(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    flag = tmp_path / "ok"
    wf = write(tmp_path / "wf.yaml", "name: relink\nnodes:\n  a:\n    parameters: {i: {range: [0, 2]}}\n"
               f"    directory: shared\n    run: 'test -e {flag}'\n")
    run_dir = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "1", "--run-dir", run_dir, cwd=tmp_path)
    assert rc == 1, err
    node_dir = run_dir / "members" / "a"
    node_dir.rename(tmp_path / "aside")
    node_dir.symlink_to(outside)
    flag.touch()
    rc, out, err = pwe("retry", run_dir, cwd=tmp_path)
    no_traceback(err)
    assert rc == 3, (out, err)
    last = err.strip().splitlines()[-1]
    assert str((run_dir / "members").resolve() / "a") in last and "symbolic link" in last, last
    assert list(outside.iterdir()) == []
    assert not [m for m in show(run_dir) if m["state"] == "done"]
