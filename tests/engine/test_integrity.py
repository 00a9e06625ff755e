"""Integrity after a stop mid-write (issue 45, part 1): a member that began in the run's
lineage and did not end ok is never complete by its products, whatever half file it left.

Each member writes its product in two steps (a half, then, after a pause, the rest) and
keeps a ledger outside the run directory; its dependant checks that it reads a whole
product. The stop is real: kill -9 of the engine and of the pilot, or `halt now`.
"""

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from helpers import ROOT, alive, engine_pid, kill_pilot, read_journal, run_cli, wait_for

ENV = dict(os.environ, PYTHONPATH=str(ROOT))

#: a writes its product half, pauses (only on its first attempt: the stop comes then),
#: writes the rest; b fails unless it reads the whole product
HALF_WF = """\
name: half
{halt}
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    products: ["a{{{{ i }}}}.txt"]
    run: |
      echo "a start $PWE_MEMBER $PWE_ATTEMPT" >> {ledger}
      {fail}
      printf half > "$PWE_WORKSPACE/a{{{{ i }}}}.txt"
      if {pause}; then sleep 300; fi
      printf ' whole' >> "$PWE_WORKSPACE/a{{{{ i }}}}.txt"
      echo "a end $PWE_MEMBER $PWE_ATTEMPT" >> {ledger}
  b:
    after: [a]
    parameters: {{i: {{range: [0, {n}]}}}}
    run: |
      got=$(cat "$PWE_WORKSPACE/a{{{{ i }}}}.txt")
      echo "b read $PWE_MEMBER $got" >> {ledger}
      [ "$got" = "half whole" ]
"""


#: a's members pause mid-write on their first attempt (the stop comes then)
ATTEMPT_1 = '[ "$PWE_ATTEMPT" = 1 ]'


def _ledger(path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()]


def test_a_member_stopped_mid_write_by_kill_9_is_not_complete_by_its_half_product_after_resume(tmp_path):
    """The engine and the pilot killed -9 while a's members have written half their
    products; the members are gone. `pwe resume` runs a again (not complete by the half
    file), and b reads whole products."""
    ledger, ws, run = tmp_path / "ledger", tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    wf = tmp_path / "wf.yaml"
    n = 2
    wf.write_text(HALF_WF.format(n=n, ledger=ledger, halt="", fail=":", pause=ATTEMPT_1))
    rc, out, err = run_cli("submit", wf, "--workspace", ws, "--cores", "2", "--run-dir", run, cwd=tmp_path,
                           env={"PWE_ORPHAN_GRACE": "0"})
    assert rc == 0, err
    wait_for(lambda: all((ws / f"a{i}.txt").exists() for i in range(n)), what="both half products")
    engine = engine_pid(run)
    os.kill(engine, signal.SIGKILL)
    kill_pilot(run / "pilots" / "p1" / "events.jsonl")
    starts = [int(r["pid"]) for r in read_journal_started(run)]
    wait_for(lambda: not alive(engine) and not any(alive(p) for p in starts), what="the engine and members gone")
    rc, out, err = run_cli("resume", run, cwd=tmp_path, timeout=180)
    assert rc == 0, (out, err)
    lines = _ledger(ledger)
    ends = Counter((w[2], w[3]) for w in lines if w[:2] == ["a", "end"])
    assert ends == Counter({(str(i), "2"): 1 for i in range(n)}), lines
    assert sorted(" ".join(w[2:]) for w in lines if w[:2] == ["b", "read"]) == [f"{i} half whole" for i in range(n)]
    assert all((ws / f"a{i}.txt").read_text() == "half whole" for i in range(n))


def read_journal_started(run) -> list[dict]:
    """The start records (with a pid) of a run whose engine was killed: the journal read as
    it is, its last line possibly cut."""
    import json

    out = []
    for line in (run / "journal.jsonl").read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        for r in ([rec] if isinstance(rec, dict) else []):
            if r.get("e") == "start" and r.get("pid"):
                out.append(r)
    return out


def test_a_member_stopped_mid_write_by_halt_now_is_not_complete_by_its_half_product_after_resume(tmp_path):
    """`halt: now` stops a's members after they wrote half their products (a[0] fails
    first); `pwe resume --halt 100%` runs them again, not complete by the half file, and b
    reads whole products."""
    ledger, ws, run = tmp_path / "ledger", tmp_path / "ws", tmp_path / "run"
    ws.mkdir()
    wf = tmp_path / "wf.yaml"
    n = 3
    # a[0] waits for the others' halves, then fails: the halt stops them mid-write
    fail = ('if [ "$PWE_MEMBER" = 0 ]; then while [ ! -e "$PWE_WORKSPACE/a1.txt" ] || '
            '[ ! -e "$PWE_WORKSPACE/a2.txt" ]; do sleep 0.05; done; exit 1; fi')
    wf.write_text(HALF_WF.format(n=n, ledger=ledger, halt="halt: {failed: 1, when: now}", fail=fail, pause=ATTEMPT_1))
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--workspace", str(ws), "--cores", "3",
                           "--run-dir", str(run)], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1 and "halted" in proc.stderr, proc.stderr
    assert all((ws / f"a{i}.txt").read_text() == "half" for i in (1, 2))
    recs = read_journal(run)
    assert {r["m"] for r in recs if r["e"] == "unassign" and r.get("halted")} == {1, 2}
    rc, out, err = run_cli("resume", run, "--halt", "100%", cwd=tmp_path, timeout=180)
    assert rc == 1, (out, err)  # (a[0] fails again; its b waits)
    lines = _ledger(ledger)
    assert sorted((w[2], w[3]) for w in lines if w[:2] == ["a", "end"]) == [("1", "2"), ("2", "2")], lines
    assert sorted(" ".join(w[2:]) for w in lines if w[:2] == ["b", "read"]) == ["1 half whole", "2 half whole"]


@pytest.mark.parametrize("stop", ["cancel", "kill"])
def test_a_new_run_after_a_run_stopped_mid_write_runs_the_member_again(tmp_path, stop):
    """Found by the harness (tests/harness.py: submit, cancel, submit): a run stopped while
    a's members wrote their products (`pwe cancel`, or kill -9 of its engine and pilot);
    a NEW `pwe run` in the same workspace (not a resume) took the half files as complete
    by their products and b read 'half'. Now the stopped run's half-made products are
    carried to the next run (pwe/engine/halfmade.py): a runs again, b reads whole products."""
    ledger, ws = tmp_path / "ledger", tmp_path / "ws"
    ws.mkdir()
    wf = tmp_path / "wf.yaml"
    n = 2
    hold = tmp_path / "hold"  # (a's members pause mid-write while it is there)
    hold.touch()
    wf.write_text(HALF_WF.format(n=n, ledger=ledger, halt="", fail=":", pause=f"[ -e {hold} ]"))
    first = tmp_path / "first"
    rc, out, err = run_cli("submit", wf, "--workspace", ws, "--cores", "2", "--run-dir", first, cwd=tmp_path,
                           env={"PWE_ORPHAN_GRACE": "0"})
    assert rc == 0, err
    wait_for(lambda: all((ws / f"a{i}.txt").exists() for i in range(n)), what="both half products")
    engine = engine_pid(first)
    if stop == "cancel":
        rc, out, err = run_cli("cancel", first, cwd=tmp_path)
        assert rc == 0, err
    else:
        os.kill(engine, signal.SIGKILL)
        kill_pilot(first / "pilots" / "p1" / "events.jsonl")
    pids = [int(r["pid"]) for r in read_journal_started(first)]
    wait_for(lambda: not alive(engine) and not any(alive(p) for p in pids), what="the first run gone")
    assert all((ws / f"a{i}.txt").read_text() == "half" for i in range(n))
    hold.unlink()
    rc, out, err = run_cli("run", wf, "--workspace", ws, "--cores", "2", "--run-dir", tmp_path / "second",
                           cwd=tmp_path, timeout=180)
    assert rc == 0, (out, err)
    lines = _ledger(ledger)
    assert sorted(" ".join(w[2:]) for w in lines if w[:2] == ["b", "read"]) == [f"{i} half whole" for i in range(n)]
    # (a ran again in the second run: attempt 1 of that run, after its first attempt in the first)
    assert Counter(w[2] for w in lines if w[:2] == ["a", "start"]) == Counter({str(i): 2 for i in range(n)})
