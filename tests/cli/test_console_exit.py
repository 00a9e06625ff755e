"""The ``pwe`` program leaves without tearing the interpreter down (pwe.cli.front.console,
pwe.cli.base.leave): its exit status is the command's, every exit handler runs and all
it printed is written, to a pipe as to a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

_PROGRAM = """
import atexit, sys
atexit.register(lambda: print("exit handler ran", file=sys.stderr))
sys.argv = ["pwe"] + sys.argv[1:]
from pwe.cli.front import console
console()
print("not reached")
"""


@pytest.mark.parametrize("argv, status, said", [
    (["--help"], 0, "Usage: pwe"),
    (["--version"], 0, "version"),
    (["stauts"], 2, "pwe: no such command 'stauts' (did you mean 'status'?)"),
    (["status", "no-such-run-anywhere"], 2, "no-such-run-anywhere"),
])
def test_the_program_keeps_its_exit_status_output_and_exit_handlers(tmp_path, argv, status, said):
    proc = subprocess.run([sys.executable, "-c", _PROGRAM, *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == status, proc.stderr
    assert said in proc.stdout + proc.stderr
    assert "not reached" not in proc.stdout
    assert proc.stderr.rstrip().endswith("exit handler ran"), proc.stderr


def test_all_of_a_long_listing_reaches_a_pipe(tmp_path):
    """More than a pipe's buffer of output, block-buffered: all of it is flushed before
    the process leaves."""
    wf = tmp_path / "many.yaml"
    wf.write_text("name: many\nnodes:\n  m:\n    parameters: {i: {range: [0, 3000]}}\n    run: 'true'\n")
    proc = subprocess.run([sys.executable, "-m", "pwe", "plan", str(wf), "--json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)  # (whole: cut short, it would not parse)
