"""Controlling a run from the CLI: `pwe submit` returns once its engine holds the run, `pwe
status` tells its phase and its pilots' states, `pwe cancel` and Ctrl-C stop it (and its
members and pilot), `pwe retry` after a cancel finishes it."""

from __future__ import annotations

import json
import os
import secrets
import signal


from helpers import (alive, engine_pid, no_traceback, output, pids_matching, pilot_pids, pwe, show, start_run,
                      status, wait_for)


def test_submit_returns_at_once_then_succeeds(tmp_path, write, reaper):
    wf = write("name: later\nnodes:\n  nap:\n    run: sleep 3; echo woke\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    run_id = out.strip()
    assert run_id == json.loads((run / "run.json").read_text())["run_id"]
    # it returned once its engine held the run, not once the run (a member of 3 s) ended
    reaper(run, engine_pid(run))
    assert status(run)["phase"] == "running" and not output(run, "nap", 0)
    st = wait_for(lambda: (lambda s: s if s["phase"] == "succeeded" else None)(status(run)),
                  what="the submitted run to succeed")
    assert st["totals"]["done"] == 1
    assert output(run, "nap", 0) == "woke\n"



def test_status_and_cancel_just_after_submit_find_the_engine(tmp_path, write, reaper):
    # pwe submit used to return before its engine had taken the run: a status typed at
    # once said "stopped", and a cancel then cancelled the run beside the starting engine
    wf = write("name: quick\nnodes:\n  nap:\n    parameters: {k: {range: [0, 4]}}\n    run: sleep 20\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--cores", "1", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    pid = engine_pid(run)
    assert pid, "pwe submit returned before its engine held the run"
    reaper(run, pid)
    assert status(run)["phase"] == "running"
    rc, out, err = pwe("cancel", run, "--json", cwd=tmp_path, timeout=120)
    assert rc == 0 and json.loads(out)["cancelled"] is True, (out, err)
    assert not engine_pid(run)
    st = status(run)
    assert st["phase"] == "cancelled" and st["totals"]["done"] == 0, st



def test_cancel_stops_a_submitted_run(tmp_path, write, reaper):
    marker = f"30.{secrets.randbelow(10**9):09d}7"  # a unique `sleep` argument: finds our members, only ours
    wf = write("name: long\nnodes:\n  nap:\n    parameters: {k: {range: [0, 6]}}\n    run: sleep {{ t }}\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--set", f"t={marker}", "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    reaper(run, wait_for(lambda: engine_pid(run), what="the engine's lock"))
    try:
        wait_for(lambda: len(pids_matching(marker)) >= 2, what="the submitted members to start")
        pilots = pilot_pids(run)
        reaper(run, *pilots)
        rc, out, err = pwe("cancel", run, cwd=tmp_path, timeout=120)
        assert rc == 0, err
        no_traceback(err)
        st = status(run)
        assert st["phase"] == "cancelled", st
        assert st["totals"]["done"] == 0 and st["totals"]["cancelled"] >= 4, st
        wait_for(lambda: not pids_matching(marker), what="the member processes to end after cancel")
        wait_for(lambda: not any(alive(p) for p in pilots), what="the pilot to end after cancel")
    finally:
        for p in pids_matching(marker):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass



def test_cancel_of_a_finished_run_keeps_its_outcome(tmp_path, write):
    wf = write("name: done\nnodes:\n  a:\n    parameters: {k: [1, 2]}\n    run: echo {{ k }}\n")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    assert status(run)["phase"] == "succeeded"
    rc, out, err = pwe("cancel", run, cwd=tmp_path)
    no_traceback(err)
    st = status(run)
    assert st["phase"] == "succeeded" and st["finished_ok"] is True, (
        "BUG pwe cancel on a run that already succeeded rewrites its outcome: "
        f"phase {st['phase']!r}, finished_ok {st['finished_ok']!r} (pwe/engine/loop.py Engine.run(cancel=True) journals "
        "'cancel' then 'finish ok=false'; pwe/runstate/state.py apply('cancel') sets cancelled even when nothing was left)")
    assert all(r["state"] == "done" for r in show(run))



def test_ctrl_c_cancels_then_retry_finishes(tmp_path, write):
    marker = f"30.{secrets.randbelow(10**9):09d}7"
    go = tmp_path / "go"
    wf = write("""\
name: interrupted
nodes:
  s:
    parameters: {k: {range: [0, 4]}}
    run: if [ -e {{ go }} ]; then echo quick; exit 0; fi; sleep {{ t }}
  after:
    after: [s]
    run: echo after
""")
    run = tmp_path / "run"
    proc = start_run(wf, tmp_path, "--set", f"t={marker}", "--set", f"go={go}", "--cores", "2", "--run-dir", run)
    try:
        wait_for(lambda: len(pids_matching(f"sleep {marker}")) >= 2, what="two members to start")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, f"exit {proc.returncode}\n{err}"
        no_traceback(err)
        assert "pwe retry" in err
        wait_for(lambda: not pids_matching(marker), what="the members to end after Ctrl-C")
        assert status(run)["phase"] == "cancelled"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in pids_matching(marker):
            os.kill(p, signal.SIGKILL)
    go.touch()
    rc, out, err = pwe("retry", run, cwd=tmp_path)
    assert rc == 0, err
    assert all(r["state"] == "done" for r in show(run))
    assert output(run, "after", 0) == "after\n"



def test_retry_after_cancel_reruns_the_cancelled_members(tmp_path, write, reaper):
    """`pwe retry` after `pwe cancel` cancelled again at once (the engine never
    cleared control/cancel). The members wait on a gate; the run is cancelled while they
    wait, the gate opens, and `pwe retry` runs every member to the end, each exactly once
    to completion (the members' own ledger)."""
    gate, ledger = tmp_path / "gate", tmp_path / "ledger"
    wf = write("name: again\nnodes:\n  a:\n    parameters: {k: {range: [0, 4]}}\n"
               # (bounded: a member left behind by a failed test ends by itself within 60 s)
               f"    run: for i in $(seq 1200); do [ -e {gate} ] && break; sleep 0.05; done; "
               f"echo $PWE_MEMBER >> {ledger}\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    reaper(run, wait_for(lambda: engine_pid(run), what="the engine's lock"))
    wait_for(lambda: status(run)["totals"].get("running", 0) >= 2, what="two members running")
    reaper(run, *pilot_pids(run))
    rc, out, err = pwe("cancel", run, cwd=tmp_path, timeout=120)
    assert rc == 0, err
    assert status(run)["phase"] == "cancelled"
    gate.touch()
    rc, out, err = pwe("retry", run, cwd=tmp_path, timeout=60)
    assert rc == 0, err
    no_traceback(err)
    st = status(run)
    assert st["phase"] == "succeeded" and st["totals"]["done"] == 4, st
    assert sorted(ledger.read_text().split()) == ["0", "1", "2", "3"]
    assert not (run / "control" / "cancel").exists()



def test_status_tells_each_pilots_state_the_same_in_text_and_json(tmp_path, write, reaper):
    """After kill -9 of the engine, `pwe status` said `p1 released` while that
    pilot still ran members, and `--json` said alive while the text said released. Now one
    function decides each pilot's state for both: up while it runs, gone once it is."""
    gate = tmp_path / "gate"
    wf = write("name: orphaned\nnodes:\n  a:\n    parameters: {k: {range: [0, 4]}}\n"
               f"    run: for i in $(seq 1200); do [ -e {gate} ] && break; sleep 0.05; done\n")
    run = tmp_path / "run"
    rc, out, err = pwe("submit", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    engine = wait_for(lambda: engine_pid(run), what="the engine's lock")
    reaper(run, engine)
    wait_for(lambda: status(run)["totals"].get("running", 0) >= 2, what="two members running")
    pilot = pilot_pids(run)[0]
    reaper(run, pilot)

    def both():
        rc, text, err = pwe("status", run, cwd=tmp_path)
        assert rc == 0, err
        line = next(l for l in text.splitlines() if l.startswith("pilots:"))
        return line, status(run)["pilots"]["p1"]

    line, p1 = both()
    assert line.startswith("pilots: p1 up") and p1["state"] == "up" and p1["alive"] is True, (line, p1)
    os.kill(engine, signal.SIGKILL)
    wait_for(lambda: not alive(engine), what="the killed engine to be gone")
    line, p1 = both()  # no engine; the pilot runs on with its members
    assert line.startswith("pilots: p1 up") and p1["state"] == "up" and p1["alive"] is True, (line, p1)
    os.kill(pilot, signal.SIGKILL)
    wait_for(lambda: not alive(pilot), what="the killed pilot to be gone")
    line, p1 = both()
    assert line.startswith("pilots: p1 gone") and p1["state"] == "gone" and p1["alive"] is False, (line, p1)
    gate.touch()  # its orphaned members leave; resume runs them again and finishes
    rc, out, err = pwe("resume", run, cwd=tmp_path, timeout=60)
    assert rc == 0, err
    pilots = status(run)["pilots"]
    assert pilots["p1"]["state"] == "gone" and pilots["p2"]["state"] in ("up", "gone"), pilots
