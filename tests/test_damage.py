"""A run directory that something went wrong with: two engines racing for it, a damaged
journal, damaged or missing files. Nothing lost, nothing run twice, and never a traceback."""

import json
import multiprocessing
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from pwe.rundir import EngineLock

TRIALS = 200


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _racer(run_dir, barrier, results, name):
    """Take the run's lock at the same moment as the other racer, TRIALS times."""
    for _ in range(TRIALS):
        barrier.wait()  # the stale holder is in place
        lock = EngineLock(Path(run_dir))
        try:
            lock.acquire()
            got = True
        except Exception:
            got = False
        results.put((name, got))
        barrier.wait()  # both have tried: whoever holds it still holds it
        if got:
            lock.release()
        barrier.wait()


def test_two_engines_racing_for_a_stale_lock_never_both_hold_it(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(3)
    results = ctx.Queue()
    racers = [ctx.Process(target=_racer, args=(str(tmp_path), barrier, results, n)) for n in "AB"]
    for p in racers:
        p.start()
    both = none = 0
    try:
        for _ in range(TRIALS):
            # the lock of an engine that died without releasing it (kill -9), on this host
            (tmp_path / "engine.lock").write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname(),
                                                              "since": 0}))
            barrier.wait()
            got = [results.get(timeout=30)[1] for _ in racers]
            both += all(got)
            none += not any(got)
            barrier.wait()
            barrier.wait()
    finally:
        for p in racers:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert both == 0, f"two engines held the lock at once in {both} of {TRIALS} trials"
    assert none == 0, f"neither engine took a stale lock in {none} of {TRIALS} trials"


def test_status_tells_who_holds_the_lock(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from pwe.rundir import EngineLock; "
         "EngineLock(Path(sys.argv[1])).acquire(); print('held', flush=True); time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout.readline().strip() == "held"
        info = EngineLock(tmp_path).holder()
        assert info and info["pid"] == holder.pid and info["host"] == socket.gethostname()
        with pytest.raises(Exception, match=f"pid {holder.pid} on {socket.gethostname()}"):
            EngineLock(tmp_path).acquire()
        # asking, from this process, twice, takes nothing from the holder
        assert EngineLock(tmp_path).holder()["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
    assert EngineLock(tmp_path).holder() is None  # kill -9 frees it: no stale lock to take over
    lock = EngineLock(tmp_path)
    lock.acquire()
    lock.release()
