"""Environment modules (``modules:``; pwe/engine/environs.py, pilot/nodesetup.py), for real:
Debian's Lmod over a module tree each test writes. Its modulefile sets a variable, puts a
directory on PATH and appends a line to a count file each time it is loaded: the members'
own ledger shows what they saw, the count file how often the site's ``module load`` ran
(once per pilot node, not per member). A module that does not load is a setup failure of
the node: no member runs or fails, the run stops with the line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import no_traceback, run_cli


@pytest.fixture
def tree(lmod, tmp_path) -> Path:
    root = tmp_path / "modulefiles"
    for version in ("1.0", "2.0"):
        f = root / "testmod" / f"{version}.lua"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f'setenv("PWE_TESTMOD", "loaded-{version}")\nprepend_path("PATH", "/opt/testmod/bin")\n'
                     f'if mode() == "load" then\n  local f = io.open("{tmp_path}/loads", "a")\n'
                     '  f:write("load\\n")\n  f:close()\nend\n')
    (root / "dropper").mkdir()
    (root / "dropper" / "1.0.lua").write_text('unsetenv("PWE_TEST_GONE")\nsetenv("PWE_DROPPER", "on")\n')
    return root


def workflow(where: Path, modules: str, n: int = 6) -> Path:
    wf = where / "wf.yaml"
    wf.write_text(f"name: mods\nnodes:\n  sim:\n    parameters: {{x: {{range: [0, {n}]}}}}\n    modules: {modules}\n"
                  '    run: echo "$PWE_MEMBER $PWE_TESTMOD ${PATH%%:*}" >> ' f"{where}/ledger\n")
    return wf


def test_members_get_their_modules_loaded_once_per_pilot_node(tree, tmp_path):
    wf = workflow(tmp_path, "[testmod/1.0]")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, env={"MODULEPATH": str(tree)})
    assert rc == 0, err
    lines = sorted(line.split() for line in (tmp_path / "ledger").read_text().splitlines())
    assert [w[0] for w in lines] == [str(i) for i in range(6)]
    assert {(w[1], w[2]) for w in lines} == {("loaded-1.0", "/opt/testmod/bin")}
    # one load per pilot node (this host has one node): each pilot that ran a member loaded it once
    pilots = [p for p in (tmp_path / "run" / "pilots").iterdir() if list(p.glob("setup-*.log"))]
    assert (tmp_path / "loads").read_text().count("load") == len(pilots) >= 1


def test_a_module_that_does_not_load_is_a_setup_failure_not_a_members(tree, tmp_path):
    wf = workflow(tmp_path, "[testmod/1.0, nosuch/1]", n=2)
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, env={"MODULEPATH": str(tree)},
                           timeout=180)
    assert rc == 3, err
    no_traceback(err)
    last = err.strip().splitlines()[-1]
    assert "pwe: modules: module load testmod/1.0 nosuch/1 failed" in last, last
    assert not (tmp_path / "ledger").exists()
    from pwe.observe.results import load_state

    _, st = load_state(tmp_path / "run")
    assert list(st.nodes["sim"].attempt) == [0, 0]  # handed back, never failed


def test_changed_modules_make_the_members_run_again(tree, tmp_path):
    from pwe.planning.plan import plan_workflow
    from pwe.runstate.rerun_why import why_run

    wf = workflow(tmp_path, "[testmod/1.0]", n=2)
    rc, out, err = run_cli("run", wf, cwd=tmp_path, env={"MODULEPATH": str(tree)})
    assert rc == 0, err
    wf = workflow(tmp_path, "[testmod/2.0]", n=2)
    assert why_run(plan_workflow(wf), str(tmp_path), "sim", 0, root=tmp_path / "pwe-runs") == ["modules changed"]
    rc, out, err = run_cli("run", wf, cwd=tmp_path, env={"MODULEPATH": str(tree)})
    assert rc == 0, err
    seen = sorted(line.split()[1] for line in (tmp_path / "ledger").read_text().splitlines())
    assert seen == ["loaded-1.0", "loaded-1.0", "loaded-2.0", "loaded-2.0"]


def test_a_variable_a_module_unsets_is_unset_for_commands_and_function_workers(tree, tmp_path):
    """A module that unsets a variable the pilot had (a site's default environment, a
    module swapped out): its members, commands and Python function workers alike, start
    without it."""
    (tmp_path / "fns.py").write_text("import os\n\n\ndef seen(x):\n"
                                     "    return {'gone': os.environ.get('PWE_TEST_GONE', 'unset'),"
                                     " 'dropper': os.environ.get('PWE_DROPPER', '-')}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: unset\nnodes:\n  sim:\n    parameters: {x: [0, 1]}\n    modules: [dropper/1.0]\n"
                  f'    run: echo "$PWE_MEMBER ${{PWE_TEST_GONE-unset}} $PWE_DROPPER" >> {tmp_path}/ledger\n'
                  "  fn:\n    parameters: {x: [0, 1]}\n    modules: [dropper/1.0]\n    python: fns:seen\n"
                  "  plain:\n    parameters: {x: [0]}\n"
                  f'    run: echo "plain ${{PWE_TEST_GONE-unset}}" >> {tmp_path}/ledger\n')
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path,
                           env={"MODULEPATH": str(tree), "PWE_TEST_GONE": "stale"})
    assert rc == 0, err
    lines = sorted((tmp_path / "ledger").read_text().splitlines())
    assert lines == ["0 unset on", "1 unset on", "plain stale"], lines  # (a node without the module keeps it)
    from helpers import show

    outs = [r["outputs"] for r in show(tmp_path / "run") if r["node"] == "fn"]
    assert outs == [{"gone": "unset", "dropper": "on"}] * 2, outs
