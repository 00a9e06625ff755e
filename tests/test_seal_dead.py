"""A pilot that died (kill -9: the pilot and its guardian) has its files sealed like one that
left (pwe/engine/pilots.py, gone): once its process is gone nothing writes them again, and
a run that lost pilots (a node, a recycled machine) does not keep their spools plain. The
seal opens regular files only (pilot/sealing.py); tests/test_hostile_rundir.py resumes runs
whose pilot directory holds a FIFO, a link to /dev/zero or a link out of the run, through
this same seal."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import LEDGER_WF, ROOT, kill_pilot, ledger_counts, read_journal, run_cli, wait_for

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
