"""The in-process runner (helpers.call_cli) says what the real program says: for a refusal
of each kind the tests take in-process (a workflow's or hosts file's line, a refusal of
``pwe run`` before any engine, a usage error, a bad setting, help, a value from argv), the
same exit status, stdout and stderr as ``python -m pwe`` in a process of its own
(helpers.run_cli). These are also the subprocess tests that keep the real entry point
covered for each kind of refusal."""

import pytest

from helpers import call_cli, run_cli

GOOD = "name: a\nproperties: {nsteps: 10}\nnodes:\n  a:\n    run: echo {{ nsteps }}\n"

FILES = {
    "wf.yaml": GOOD,
    "bad.yaml": "name: a\nnodes:\n  a: {run: x, after: [zz]}\n",
    "syntax.yaml": "name: a\nnodes:\n  a:\n    run: [echo\n",
    "on-c.yaml": "name: w\nnodes:\n  a:\n    host: clustr\n    run: 'true'\n",
    "hosts.yaml": "hosts:\n  cluster: {protocol: slurm, cores_per_node: 8}\n",
    "bad-hosts.yaml": "hosts:\n  c:\n    protocol: slurm\n    contact: 'ssh://-oProxyCommand=x'\n",
    "wf.xml": '<workflow name="a"><property name="p">a&#0;</property><node id="a"><run>echo</run></node></workflow>\n',
    "huge.yaml": "name: a\nnodes:\n  a: {run: x}\n" + ("#" * 79 + "\n") * (4 * 1024 * 1024 // 80 + 1),
}

CASES = [  # (id, arguments, the environment's additions)
    ("validate", ["validate", "wf.yaml"], None),
    ("validate-unknown-node", ["validate", "bad.yaml"], None),
    ("validate-yaml-syntax", ["validate", "syntax.yaml"], None),
    ("validate-xml-nul", ["validate", "wf.xml"], None),
    ("validate-too-large", ["validate", "huge.yaml"], None),
    ("validate-no-such-file", ["validate", "nope.yaml"], None),
    ("unknown-host", ["validate", "on-c.yaml"], None),
    ("bad-hosts-file", ["hosts", "list", "--hosts", "bad-hosts.yaml"], None),
    ("plan-bad-hosts", ["plan", "on-c.yaml", "--hosts", "bad-hosts.yaml"], None),
    ("run-set-unused", ["run", "wf.yaml", "--set", "nstep=3", "--run-dir", "run"], None),
    ("run-too-large", ["run", "huge.yaml"], None),
    ("submit-unknown-node", ["submit", "bad.yaml"], None),
    ("set-surrogate", ["validate", "wf.yaml", "--set", "nsteps=a\udcffb"], None),
    ("unknown-option", ["run", "wf.yaml", "--hots", "h.yaml"], None),
    ("out-of-range", ["run", "wf.yaml", "--cores", "0"], None),
    ("missing-argument", ["hosts", "check"], None),
    ("unknown-command", ["stauts"], None),
    ("no-command", [], None),
    ("help", ["run", "--help"], None),
    ("group-help", ["--help"], None),
    ("bad-setting", ["status"], {"PWE_CHECKPOINT_EVERY": "soon"}),
    ("no-run", ["show", "nope"], None),
]


@pytest.mark.parametrize("args, env", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_in_process_says_what_the_program_says(tmp_path, args, env):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    here = call_cli(*args, cwd=tmp_path, env=env)
    assert here == run_cli(*args, cwd=tmp_path, env=env)
    assert here[0] in (0, 2), here
    assert "Traceback" not in here[2]
    assert not (tmp_path / "run").exists() and not (tmp_path / "pwe-runs").exists()


def test_an_uncaught_exception_fails_the_test_not_exit_status_1(tmp_path, monkeypatch):
    """What pwe does not map to an exit status reaches the test as itself."""
    from pwe.observe import planview

    def broken(*args, **kwargs):
        raise RuntimeError("not mapped")

    (tmp_path / "wf.yaml").write_text(GOOD)
    monkeypatch.setattr(planview, "check", broken)
    with pytest.raises(RuntimeError, match="not mapped"):
        call_cli("validate", "wf.yaml", cwd=tmp_path)


def test_the_call_leaves_no_trace(tmp_path):
    import os
    import sys

    cwd, argv, out, err = os.getcwd(), sys.argv, sys.stdout, sys.stderr
    call_cli("validate", "nope.yaml", cwd=tmp_path, env={"PWE_TEST_ONLY": "1"})
    assert (os.getcwd(), sys.argv, sys.stdout, sys.stderr) == (cwd, argv, out, err)
    assert "PWE_TEST_ONLY" not in os.environ
    import pwe.cli.base

    assert all(getattr(m, "leave", pwe.cli.base.leave) is pwe.cli.base.leave
               for n, m in sys.modules.items() if n.startswith("pwe.cli"))
    assert pwe.cli.base.leave.__module__ == "pwe.cli.base"
