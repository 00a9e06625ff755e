"""A pilot that died (kill -9: the pilot and its guardian) has its files sealed like one that
left (pwe/engine/pilots.py, gone): once its process is gone nothing writes them again, and
a run that lost pilots (a node, a recycled machine) does not keep their spools plain. The
seal opens regular files only (pilot/sealing.py); tests/runstate/test_hostile_rundir.py resumes runs
whose pilot directory holds a FIFO, a link to /dev/zero or a link out of the run, through
this same seal."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import LEDGER_WF, ROOT, kill_pilot, ledger_counts, read_journal, run_cli, wait_for

#: LEDGER_WF's members, each also printing a line (so that the pilot has an output stream)
PRINTING = LEDGER_WF.replace('run: echo "start', 'run: echo "says $PWE_NODE $PWE_MEMBER"; echo "start')


def test_a_pilot_killed_has_its_files_sealed_once_its_guardian_is_gone_and_read_back(tmp_path):
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(PRINTING.format(ledger=ledger, n=40, sleep=0.2))
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PWE_SEAL_ABOVE="0")
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p1 = run_dir / "pilots" / "p1"
        wait_for(lambda: ledger.exists() and ledger.read_text().count("end") >= 4, what="members ended on p1")
        kill_pilot(p1 / "events.jsonl")  # (its guardian ends what ran, then goes: the process is gone)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger)
    assert set(ends) == {(n, str(i)) for n in "ab" for i in range(40)}
    names = sorted(os.listdir(p1))
    assert "events.jsonl" not in names and "tasks.jsonl" not in names, names
    assert "events.jsonl.gz" in names and any(n.endswith(".stream.gz") for n in names), names
    rc, out, err = run_cli("show", run_dir, "--json")
    assert rc == 0, err
    ran_on_p1 = [r for r in read_journal(run_dir) if r["e"] == "end" and r.get("p") == "p1" and r.get("rc") == 0]
    assert ran_on_p1, "no member ended on p1"
    n, i = ran_on_p1[0]["n"], ran_on_p1[0]["m"]
    rc, out, err = run_cli("logs", run_dir, f"{n}:{i}")  # (read back from its sealed stream)
    assert rc == 0 and f"says {n} {i}" in out, (out, err)
    rc, out, err = run_cli("trace", run_dir)
    assert rc == 0 and "p1" in out, err


def test_a_pilot_given_up_by_an_engine_killed_before_its_seal_is_sealed_when_the_run_resumes(tmp_path):
    """The engine that gave p1 up did not seal it (here: a threshold no file reaches), and
    was killed -9 before the run's end; the engine that resumes the run seals p1's files
    (its process is gone), and every member ends exactly once, by the members' own ledger."""
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(PRINTING.format(ledger=ledger, n=40, sleep=0.2))
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PWE_SEAL_ABOVE=str(10 ** 12))
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p1 = run_dir / "pilots" / "p1"
    try:
        wait_for(lambda: ledger.exists() and ledger.read_text().count("end") >= 4, what="members ended on p1")
        kill_pilot(p1 / "events.jsonl")
        wait_for(lambda: b'"e":"pilot_gone","p":"p1"' in (run_dir / "journal.jsonl").read_bytes(),
                 what="the engine to give p1 up")
    finally:
        proc.kill()  # (the engine, -9, before the run's end)
        proc.wait()
    assert (p1 / "events.jsonl").exists() and any(n.endswith(".stream") for n in os.listdir(p1))  # (plain)
    rc, out, err = run_cli("resume", run_dir, env={"PWE_SEAL_ABOVE": "0"}, timeout=300)
    assert rc == 0, err
    names = sorted(os.listdir(p1))
    assert "events.jsonl" not in names and "events.jsonl.gz" in names, names
    assert not any(n.endswith(".stream") for n in names) and any(n.endswith(".stream.gz") for n in names), names
    starts, ends = ledger_counts(ledger)
    assert set(ends) == {(n, str(i)) for n in "ab" for i in range(40)}
    assert all(c == 1 for c in ends.values()), [k for k, c in ends.items() if c > 1]
