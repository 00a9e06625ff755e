"""Reuse lends what ran (issue 45): a member's key is fixed when it is handed to a pilot, so an
input edited while the run goes on is seen by the members assigned after the edit and not by
those assigned before; a run killed -9 lends the members it finished (an append-only signed
record, written as ends are journaled), and the next `pwe run` names it as one `pwe resume`
could pick up; a lend record edited by hand lends nothing. On real processes: members keep
their own ledger outside the run directory, and what ran twice is read there."""

import base64
import json
import os
import signal
from pathlib import Path

import pytest

from helpers import no_traceback, run_cli, start_run, wait_for

EDITED = """\
name: what-ran
properties: {{ledger: {ledger}, data: {data}, go: {go}}}
nodes:
  early:
    parameters: {{i: [0, 1, 2]}}
    inputs: [data.txt]
    run: echo "early $PWE_MEMBER $(cat {{{{ data }}}})" >> {{{{ ledger }}}}
  gate:
    run: while [ ! -e {{{{ go }}}} ]; do sleep 0.05; done
  late:
    after: [gate]
    parameters: {{i: [0, 1, 2]}}
    inputs: [data.txt]
    run: echo "late $PWE_MEMBER $(cat {{{{ data }}}})" >> {{{{ ledger }}}}
"""

#: members 0..2 end at once; 3..5 wait for `go` (or leave, exit 3, once their own run's `halt-RUN` is there)
KILLED = """\
name: killed
properties: {{ledger: {ledger}, here: {here}}}
nodes:
  work:
    parameters: {{i: {{range: [0, 6]}}}}
    run: |
      if [ "$PWE_MEMBER" -ge 3 ]; then
        echo "wait $PWE_MEMBER $$" >> {{{{ ledger }}}}
        while :; do [ -e {{{{ here }}}}/halt-$PWE_RUN_ID ] && exit 3; [ -e {{{{ here }}}}/go ] && break; sleep 0.05; done
      fi
      echo "v=$PWE_MEMBER" >> "$PWE_OUTPUTS"
      echo "done $PWE_MEMBER" >> {{{{ ledger }}}}
"""


def ledger(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def the_run(runs: Path) -> Path:
    got = wait_for(lambda: [d for d in runs.iterdir() if (d / "run.json").exists()] if runs.exists() else [],
                   what="the run's directory")
    assert len(got) == 1, got
    return got[0]


def test_an_input_edited_while_the_run_goes_on_is_seen_by_the_members_assigned_after(tmp_path):
    data, go, led = tmp_path / "data.txt", tmp_path / "go", tmp_path / "ledger"
    data.write_text("old\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(EDITED.format(ledger=led, data=data, go=go))
    proc = start_run(wf, tmp_path)
    try:
        # early's members ran (read the old content), the gate holds late back
        wait_for(lambda: sum(r[0] == "early" for r in ledger(led)) == 3, what="early's members to run")
        data.write_text("new content\n")  # (another size: the edit is seen, whatever the clock)
        go.touch()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    first = ledger(led)
    old = {(r[0], r[1]) for r in first if r[2] == "old"}
    new = {(r[0], r[1]) for r in first if r[2] == "new"}
    assert old == {("early", "0"), ("early", "1"), ("early", "2")}, first
    assert new == {("late", "0"), ("late", "1"), ("late", "2")}, first
    # the plan names the change: the content early's members ran with (the file's now is late's)
    nodes = {n["id"]: n for n in plan_reuse(wf, tmp_path)["nodes"]}
    assert nodes["early"]["changes"] == [{"reason": f"input {data.name} changed", "count": 3, "members": [[0, 3]]}]
    assert nodes["late"]["changes"] == []

    rc, out, err = run_cli("run", wf, cwd=tmp_path, timeout=180)
    assert rc == 0, err
    no_traceback(err)
    again = ledger(led)[len(first):]
    # exactly the members that ran with the old content ran again (now with the new); the
    # members assigned after the edit, and the gate, were reused
    assert sorted((r[0], r[1]) for r in again) == sorted(old), again
    assert all(r[2] == "new" for r in again), again


def killed_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A run of KILLED whose engine and pilot are killed -9 once members 0..2 ended (the
    engine took their ends in: `pwe status`'s counts say so), its members that still waited
    gone too. The workflow, the killed run's directory, the ledger."""
    led = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(KILLED.format(ledger=led, here=tmp_path))
    proc = start_run(wf, tmp_path, "--cores", "2")
    try:
        run_dir = the_run(tmp_path / "pwe-runs")

        def three_done():
            try:
                snap = json.loads((run_dir / "state.json").read_text())
            except (OSError, ValueError):
                return False
            return snap["totals"]["done"] == 3 and snap["nodes"]["work"]["running"] >= 1

        wait_for(three_done, what="three members done and one waiting")
        pilots = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
        pids = [r["pid"] for r in pilots if r.get("e") == "pilot" and r.get("pid")]
        assert pids, "no pilot process in the journal"
        os.kill(proc.pid, signal.SIGKILL)  # the engine (pwe run itself), then its pilot
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    (tmp_path / f"halt-{run_dir.name}").touch()  # (its members that waited leave, writing nothing more)

    def gone():
        for r in ledger(led):
            if r[0] == "wait":
                try:
                    os.kill(int(r[2]), 0)
                    return False
                except ProcessLookupError:
                    pass
        return True

    wait_for(gone, what="the killed run's members to leave")
    assert sorted(r[1] for r in ledger(led) if r[0] == "done") == ["0", "1", "2"]
    return wf, run_dir, led


def plan_reuse(wf: Path, cwd: Path) -> dict:
    rc, out, err = run_cli("plan", wf, "--explain", "--json", cwd=cwd)
    assert rc == 0, err
    return json.loads(out)


def test_a_run_killed_lends_what_it_finished_and_the_next_run_names_it(tmp_path):
    wf, killed, led = killed_run(tmp_path)
    (tmp_path / "go").touch()
    rc, out, err = run_cli("run", wf, "--cores", "2", cwd=tmp_path, timeout=180)
    assert rc == 0, err
    no_traceback(err)
    # the hint: one line, not an error, naming the run that `pwe resume` could pick up
    hints = [line for line in err.splitlines() if f"pwe resume {killed.name}" in line]
    assert len(hints) == 1, err
    done = sorted(int(r[1]) for r in ledger(led) if r[0] == "done")
    assert done == [0, 1, 2, 3, 4, 5], done  # 0..2 not again: reused from the killed run
    new = [d for d in (tmp_path / "pwe-runs").iterdir() if d != killed][0]
    rc, out, err = run_cli("show", new, "--json", "--limit", "0", cwd=tmp_path)
    assert rc == 0, err
    shown = {m["member"]: m for m in json.loads(out)}
    for i in range(3):
        assert shown[i]["reason"] == "reused" and shown[i]["outputs"] == {"v": str(i)}, shown[i]


@pytest.mark.parametrize("what", ["key", "output"])
def test_a_lend_record_edited_lends_nothing(tmp_path, what):
    wf, killed, led = killed_run(tmp_path)
    before = plan_reuse(wf, tmp_path)
    assert {n["id"]: n["reused"] for n in before["nodes"]} == {"work": 3}, before
    # (its members that were running when it was killed: it lent only what finished)
    assert before["nodes"][0]["changes"] == [{"reason": "new: no earlier run finished these values of i", "count": 3,
                                              "members": [[3, 6]]}]
    path = killed / "lending.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    for k, line in enumerate(lines[1:], 1):
        msg = json.loads(line)
        part = msg["nodes"].get("work")
        if not part:
            continue
        if what == "key":
            keys = bytearray(base64.b64decode(part["k"]))
            keys[0] ^= 1
            part["k"] = base64.b64encode(bytes(keys)).decode()
        else:
            if not part.get("out"):
                continue
            first = next(iter(part["out"]))
            part["out"][first] = {"v": "forged"}
        lines[k] = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        break
    else:
        pytest.fail("no line of the lend record to edit")
    path.write_bytes(b"".join(lines))
    after = plan_reuse(wf, tmp_path)
    assert {n["id"]: n["reused"] for n in after["nodes"]} == {"work": 0}, after
    said = after["reuse"]["not_lending"]
    assert any(killed.name in s and "signature" in s for s in said), said
    (tmp_path / "go").touch()
    rc, out, err = run_cli("run", wf, "--cores", "2", cwd=tmp_path, timeout=180)
    assert rc == 0, err
    done = sorted(int(r[1]) for r in ledger(led) if r[0] == "done")
    assert done == [0, 0, 1, 1, 2, 2, 3, 4, 5], done  # every member ran: nothing lent
