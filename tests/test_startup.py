"""Start-up: the commands that must answer fast do not import what they do not need.

Every `pwe status` and every pilot pays for what it imports before it can do anything
(issue 13: pydantic's models, networkx and jinja2 cost ~0.2 s together). These tests run
each command in a fresh interpreter and read which modules it loaded: a check of what is
imported, not a timing (speed is measured by bench/startup.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT

HEAVY = ("networkx", "pydantic", "jinja2", "rich", "lxml", "paramiko", "celery", "yaml")

# runs the pwe CLI with ARGV in this interpreter, then prints the top-level modules loaded
_PROBE = """
import json, sys
argv = json.loads(sys.argv[1])
sys.argv = ["pwe"] + argv
from pwe.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
sys.stdout.flush()
print("\\nMODULES " + json.dumps([code, sorted({m.split(".")[0] for m in sys.modules})]))
"""


def loaded(argv: list[str], cwd) -> tuple[int, set[str], str]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES ")]
    assert line, proc.stdout + proc.stderr
    code, mods = json.loads(line[-1][len("MODULES "):])
    return code, set(mods), proc.stdout + proc.stderr


def test_help_status_and_logs_load_no_heavy_module(tmp_path):
    wf = tmp_path / "two.yaml"
    wf.write_text("name: two\nnodes:\n  m:\n    parameters: {i: {range: [0, 2]}}\n    run: echo hi $PWE_MEMBER\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                          cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr

    code, mods, out = loaded(["--help"], tmp_path)
    assert code == 0 and "Usage: pwe" in out
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))

    code, mods, out = loaded(["status", str(run_dir)], tmp_path)
    assert code == 0 and "succeeded" in out and "total" in out, out
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))

    code, mods, out = loaded(["logs", str(run_dir), "m:1"], tmp_path)
    assert code == 0 and "hi 1" in out, out
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))


def test_run_path_does_not_load_networkx(tmp_path):
    """The planner's graph is pwe.dag (standard library): `pwe validate` and `pwe run`
    no longer import networkx (117 ms of every run)."""
    wf = tmp_path / "dag.yaml"
    wf.write_text("name: d\nnodes:\n  a: {run: 'true'}\n  b: {run: 'true', after: [a]}\n")
    code, mods, out = loaded(["validate", str(wf)], tmp_path)
    assert code == 0, out
    assert "networkx" not in mods
    assert "pydantic" in mods  # (validating does need the models: the probe sees real imports)


def test_pilot_imports_only_the_standard_library():
    code = ("import sys, json; before = set(sys.modules); import pilot.agent, pilot.nodeagent; "
            "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    new = set(json.loads(proc.stdout))
    assert "pilot" in new
    assert not new & set(HEAVY + ("pwe", "hostinfo", "protocols")), sorted(new)
    stdlib = set(sys.stdlib_module_names)
    assert new - stdlib == {"pilot"}, sorted(new - stdlib)
