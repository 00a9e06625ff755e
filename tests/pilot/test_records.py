"""Records that say what happened (issue 45): an attempt's start and end are the times its
member really started and ended, even for members that fail at once (the trace never shows
more running at once than slots, the report's utilisation never passes 100 %); `pwe logs`
into a pipe or a file gives a member's bytes exactly as written; `pwe trace` holds every
attempt that started, also those a `halt ... now` stopped.

Every run here is real: the engine, its pilot and the members are real processes on this
machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import most_at_once, no_traceback, run_cli
from pilot.endings import when_ended
from pilot.wire import END
from pwe.runstate.journal import unpack


def _trace(cwd: Path, run: Path) -> list[dict]:
    rc, out, err = run_cli("trace", run, "--json", cwd=cwd)
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


# -- members that fail at once ------------------------------------------------------------------

def test_members_that_fail_at_once_end_when_they_ended(tmp_path):
    # killed by a signal nobody here sent (exit 137: the pilot waits a moment for its own
    # SIGTERM before it says so) or a line on stderr and a failing exit, on 2 slots: their
    # ends are when they ended, not when the pilot got round to saying so
    (tmp_path / "wf.yaml").write_text(
        "name: quick\nnodes:\n  a:\n    parameters: {i: {range: [0, 20]}}\n"
        "    run: if [ $(( {{ i }} % 2 )) = 0 ]; then exit 137; fi; echo bad >&2; exit 3\n")
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
    assert rc == 1, err
    run = Path(json.loads(out)["run_dir"])
    recs = _trace(tmp_path, run)
    assert len(recs) == 20 and {r["exit_status"] for r in recs} == {137, 3}, recs
    # the shell returned 137: pwe saw no signal, and says what it saw
    assert not [r for r in recs if r["exit_status"] == 137 and "signal" in str(r["why"] or "")], recs
    rc, out, err = run_cli("show", run, "--state", "failed", cwd=tmp_path)
    assert "exit=137" in out and "signal" not in out, out
    for r in recs:
        # its start is when its end says it began (t - dt), to the rounding of each
        assert r["start"] <= r["end"] and r["end"] - r["duration"] >= r["start"] - 0.002, r
    assert most_at_once([(r["start"], r["end"]) for r in recs]) <= 2, [(r["start"], r["end"]) for r in recs]
    rc, out, err = run_cli("report", run, "-o", tmp_path / "r.html", cwd=tmp_path)
    assert rc == 0, err
    util = re.search(r"([0-9.]+)% of allocated cores", (tmp_path / "r.html").read_text())
    assert util and float(util.group(1)) <= 100.0, util


def _span(started: float, at: float) -> tuple[float, float]:
    """(start, end) as the engine reads them back from a quick member's one END."""
    r = {"e": END, "n": "a", "m": 0, "a": 0, "p": 1, "rc": 0, "ran": 1, **when_ended(at, started)}
    start, end = unpack(r)
    return start["t"], end["t"]


@settings(max_examples=2000, deadline=None, database=None)
@given(st.floats(1.7e9, 2.0e9), st.floats(0, 0.01), st.floats(0, 0.01), st.floats(0, 0.01))
def test_a_start_read_back_from_an_end_never_comes_before_the_end_of_the_member_it_followed(t0, d1, gap, d2):
    # one member from t0 for d1, the next started in its slot gap later for d2: read back
    # from their ENDs (t - dt, each rounded to the millisecond), the second never starts
    # before the first ended (CI saw 3 running at once on 2 slots, by a millisecond)
    s1, e1 = _span(t0, t0 + d1)
    s2, e2 = _span(t0 + d1 + gap, t0 + d1 + gap + d2)
    assert s1 <= e1 <= s2 <= e2, (s1, e1, s2, e2)


# -- pwe logs: the member's bytes -----------------------------------------------------------------

#: what the member writes: a carriage return, bytes that are not UTF-8, an escape sequence, a
#: NUL, and no newline at the end
OUT = b"one\r\ntwo \xff\xfe \x1b[31mred\x1b[0m\x00 last, no newline"
ERR = b"warn\rover\n\xc3(bad\n\x07tail"


def _on_a_terminal(*args, cwd) -> bytes:
    """What `pwe ARGS` writes to a pseudo-terminal, as a user sees it."""
    import os
    import pty
    import subprocess
    import sys

    from helpers import ROOT

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pwe", *map(str, args)], cwd=cwd, stdout=slave,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # (EIO: the other side closed)
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    assert proc.wait(60) == 0, proc.stderr.read()
    return got


def test_logs_into_a_file_or_a_pipe_is_the_members_bytes_exactly(tmp_path):
    import subprocess
    import sys

    from helpers import ROOT

    (tmp_path / "out.bin").write_bytes(OUT)
    (tmp_path / "err.bin").write_bytes(ERR)
    (tmp_path / "wf.yaml").write_text(f"name: raw\nnodes:\n  a:\n    run: cat {tmp_path}/out.bin; "
                                      f"cat {tmp_path}/err.bin >&2\n")
    rc, out, err = run_cli("run", "wf.yaml", "--json", cwd=tmp_path)
    assert rc == 0, err
    run = json.loads(out)["run_dir"]

    def logs(*extra: str, into=subprocess.PIPE) -> bytes:
        proc = subprocess.run([sys.executable, "-m", "pwe", "logs", run, "a:0", *extra], cwd=tmp_path,
                              stdout=into, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=120,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
        no_traceback(proc.stderr.decode())
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    with open(tmp_path / "got", "wb") as fh:  # `pwe logs RUN a:0 > got`
        logs(into=fh)
    assert (tmp_path / "got").read_bytes() == OUT
    assert logs() == OUT and logs("--stdout") == OUT and logs("--stderr") == ERR
    assert logs("--tail", "1") == b"two \xff\xfe \x1b[31mred\x1b[0m\x00 last, no newline"  # (\r ends no line)
    assert logs("--stderr", "--tail", "2") == b"\xc3(bad\n\x07tail"
    both = logs("--stdout", "--stderr")  # (both asked for: each under its header)
    assert b"==> a[0] stdout (" in both and b"==> a[0] stderr (" in both and OUT in both and ERR in both, both
    # on a terminal: both, under headers, what a terminal would act on written visibly
    shown = _on_a_terminal("logs", run, "a:0", cwd=tmp_path)
    assert b"==> a[0] stdout (" in shown and b"==> a[0] stderr (" in shown, shown
    assert b"\x1b" not in shown and b"\x07" not in shown and b"\\x1b[31mred" in shown and b"\\xff\\xfe" in shown, shown
    assert b"\\x07tail" in _on_a_terminal("logs", run, "a:0", "--stderr", cwd=tmp_path)


# -- a halt now: every attempt that started is in the trace ---------------------------------------

def test_the_trace_holds_every_attempt_that_started_before_a_halt_now(tmp_path):
    # two members fail at once and spend the budget; the pilot starts the next ones before
    # it hears the halt: their starts come after the halt's unassigns, and are in the trace
    ledger = tmp_path / "ledger"
    (tmp_path / "wf.yaml").write_text(
        f"name: now\nhalt: {{failed: 2, when: now}}\nproperties: {{ledger: '{ledger}'}}\nnodes:\n  sweep:\n"
        "    parameters: {i: {range: [0, 200]}}\n"
        "    run: echo \"start $PWE_MEMBER $PWE_ATTEMPT\" >> {{ ledger }}; [ $PWE_MEMBER -ge 2 ] || exit 1; sleep 0.2\n")
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 1 and "halted" in err, err
    no_traceback(err)
    started = {(int(m), int(a)) for _, m, a in (line.split() for line in ledger.read_text().splitlines())}
    recs = {(r["member"], r["attempt"]): r for r in _trace(tmp_path, tmp_path / "run")}
    assert started <= set(recs), sorted(started - set(recs))  # (the members' own ledger: each one that started)
    assert set(recs) <= started, sorted(set(recs) - started)  # (and none that did not)
    assert {recs[(m, 1)]["state"] for m in (0, 1)} == {"failed"}
    stopped = [r for k, r in recs.items() if k[0] >= 2]
    assert all(r["state"] == "halted" and r["start"] is not None and r["end"] is not None for r in stopped), stopped
    rc, out, err = run_cli("status", tmp_path / "run", "--json", cwd=tmp_path)
    totals = json.loads(out)["totals"]
    assert totals["failed"] == 2 and totals["running"] == 0 and totals["done"] == 0, totals  # (halted: not failed)
