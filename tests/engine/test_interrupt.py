"""Ctrl-C of a run followed in the foreground: the run stops within a bound, whatever the
process waits on while it tidies up (pwe/cli/base.py, ctrl_c_bounded); a second Ctrl-C
leaves at once. The real `pwe run` under Ctrl-C: tests/engine/test_run_control.py
(test_ctrl_c_cancels_then_retry_finishes); what it costs: bench/ctrl_c.py."""

import os
import signal
import subprocess
import sys

from helpers import ROOT

# a process that, once interrupted, tidies up for ever (a wait that never ends)
HANGS = """
import sys, time
import pwe.cli.base as base
base.CTRL_C_BOUND = float(sys.argv[1])
with base.ctrl_c_bounded("then: pwe resume RUN"):
    try:
        print("running", flush=True)
        time.sleep(600)
    except KeyboardInterrupt:
        print("tidying", flush=True)
        time.sleep(600)
print("left the block", flush=True)
"""


def _start(bound: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HANGS, str(bound)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "running\n"
    return proc


def test_ctrl_c_leaves_within_the_bound_when_the_tidying_hangs():
    proc = _start(1.0)
    try:
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline() == "tidying\n"  # (the first Ctrl-C is a KeyboardInterrupt, as usual)
        out, err = proc.communicate(timeout=120)  # (a hang guard: the bound is the process's own)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    assert err == "interrupted: the run did not stop within 1 s; leaving now; then: pwe resume RUN\n", err
    assert "left the block" not in out


def test_a_second_ctrl_c_leaves_at_once():
    proc = _start(600.0)  # (the bound is far: only the second Ctrl-C can end it)
    try:
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline() == "tidying\n"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    assert err == "interrupted again: leaving now; then: pwe resume RUN\n", err
