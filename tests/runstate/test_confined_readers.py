"""Every reader of a run directory is confined to that run directory (issue 45, part 2(b)).

Two real runs (`pwe run` on this machine) whose members print distinct words; then run A's
``pilots/p1`` is made a symbolic link to run B's (or to /etc), or a file in it a link to
B's. No reader of A (logs, show, trace, report, status, events, the dashboard) shows B's
word; each says so in a warning line or one error line, never a traceback; and an engine
that resumes A (killed -9 first) takes nothing in from B's files and writes nothing there.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, alive, engine_pid, kill_pilot, pilot_pids, read_journal, run_cli, wait_for

OURS, THEIRS = "ALPHAQX", "BRAVOZK"

WF = """\
name: confine
properties: {word: none, gate: /}
nodes:
  say:
    parameters: {i: {range: [0, 2]}}
    run: 'until [ -e {{ gate }} ]; do sleep 0.05; done; echo "{{ word }}-out-$PWE_MEMBER";
      echo "{{ word }}-err-$PWE_MEMBER" >&2; echo "said={{ word }}-val" >> "$PWE_OUTPUTS"; [ "$PWE_MEMBER" -eq 0 ]'
"""


def _run(tmp_path: Path, name: str, word: str) -> Path:
    """A finished run of WF (say:0 done, say:1 failed), its members printing ``word``."""
    wf = tmp_path / "wf.yaml"
    wf.write_text(WF)
    rc, out, err = run_cli("run", wf, "--set", f"word={word}", "--run-dir", tmp_path / name, "--cores", "2",
                           cwd=tmp_path)
    assert rc == 1, (rc, out, err)  # (say:1 fails on purpose: its stderr is in the report)
    return tmp_path / name


@pytest.fixture
def two_runs(tmp_path):
    return _run(tmp_path, "A", OURS), _run(tmp_path, "B", THEIRS)


def _link(a: Path, b: Path, how: str) -> str:
    """Put the link; the path (relative to A) that a warning or error must name."""
    mine, theirs = a / "pilots" / "p1", b / "pilots" / "p1"
    if how in ("dir", "etc"):
        os.rename(mine, a / "p1.moved")
        os.symlink(theirs if how == "dir" else "/etc", mine)
        return "pilots/p1"
    suffix = ".stream" if how == "stream" else ".index"
    (name,) = [p.name for p in mine.iterdir() if p.name.endswith(suffix)]
    (mine / name).unlink()
    os.symlink(theirs / name, mine / name)
    return f"pilots/p1/{name}"


def _clean(rc, out, err, what):
    assert THEIRS not in out and THEIRS not in err, f"{what} showed the other run's output:\n{out}\n{err}"
    assert "Traceback" not in err, f"{what}: a traceback\n{err}"


@pytest.mark.parametrize("how", ["dir", "stream", "index", "etc"])
def test_no_reader_of_a_run_reads_another_run_through_a_link(two_runs, how):
    a, b = two_runs
    named = _link(a, b, how)
    for member in ("say:0", "say:1"):  # (a member's output: one error line naming the link, exit 2)
        rc, out, err = run_cli("logs", a, member)
        _clean(rc, out, err, f"pwe logs {member}")
        assert rc == 2 and named in err and len(err.strip().splitlines()) == 1, (rc, out, err)
    for args in (("show", a), ("trace", a, "--json"), ("status", a), ("status", a, "--json")):
        rc, out, err = run_cli(*args)
        _clean(rc, out, err, " ".join(map(str, args)))
        assert rc == 0, (args, rc, err)
        assert OURS in out or args[0] == "status", (args, out)  # (A's own outputs, from its journal)
    rc, out, err = run_cli("report", a)
    _clean(rc, out, err, "pwe report")
    assert rc == 0, err
    html = (a / "report.html").read_text()
    assert THEIRS not in html, "the report showed the other run's stderr"
    rc, out, err = run_cli("events", a, "--json")
    _clean(rc, out, err, "pwe events")
    if how in ("dir", "etc"):  # (a pilot's directory not the run's own: skipped, one warning line naming it)
        for what, got in (("report", run_cli("report", a)[2]), ("events", err)):
            warned = [line for line in got.splitlines() if line.startswith("warning:") and named in line]
            assert len(warned) == 1, (what, got)
        assert rc == 0, err
        assert not [ev for ev in map(json.loads, out.splitlines()) if ev.get("pilot") == "p1"], \
            "pwe events read messages from a pilot directory that is not the run's"


def test_the_dashboard_never_shows_another_runs_output(two_runs, tmp_path):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from pwe.ui.api import Sources
    from pwe.ui.app import make_app
    from pwe.ui.security import Guard

    a, b = two_runs
    _link(a, b, "dir")
    secret = "s" * 43
    client = TestClient(make_app(Sources(tmp_path), Guard(secret, "127.0.0.1", 8765, None)),
                        base_url="http://127.0.0.1:8765")
    auth = {"Authorization": f"Bearer {secret}"}
    run_id = json.loads((a / "run.json").read_text())["run_id"]
    listed = client.get("/api/runs", headers=auth)
    assert listed.status_code == 200 and run_id in listed.text, listed.text[:500]
    for route in ("", "/members", "/members/say/0", "/members/say/1", "/members/say/0/logs", "/members/say/1/logs",
                  "/timeline"):
        got = client.get(f"/api/runs/{run_id}{route}", headers=auth)
        assert THEIRS not in got.text, (route, got.text[:500])
        assert "Traceback" not in got.text, (route, got.text[:500])
        if route.endswith("/logs"):  # (one error naming the link, never another run's text)
            assert got.status_code == 400 and "pilots/p1" in got.text, (route, got.status_code, got.text[:500])
        else:
            assert got.status_code == 200, (route, got.status_code, got.text[:500])


def test_resume_after_kill_takes_nothing_from_another_run_through_a_link(tmp_path, reaper):
    b = _run(tmp_path, "B", THEIRS)
    # (B's pilot writes its goodbye as it leaves: B's files as they stay)
    wait_for(lambda: not any(alive(pid) for pid in pilot_pids(b)), what="run B's pilot to leave")
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in (b / "pilots" / "p1").iterdir()}
    gate = tmp_path / "gate"  # (A's members wait for it: they are in flight when its engine is killed)
    a = tmp_path / "A"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PWE_ORPHAN_GRACE="0")
    proc = subprocess.run([sys.executable, "-m", "pwe", "submit", str(tmp_path / "wf.yaml"), "--set", f"word={OURS}",
                           "--set", f"gate={gate}", "--run-dir", str(a), "--cores", "2"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    engine = wait_for(lambda: engine_pid(a), what="an engine.lock after pwe submit")
    events = a / "pilots" / "p1" / "events.jsonl"
    wait_for(lambda: events.exists() and events.read_bytes().count(b'"k":"start"') >= 2, what="both members started")
    guardian = pilot_pids(a)[0]
    reaper(a, engine, guardian)
    os.kill(engine, signal.SIGKILL)
    wait_for(lambda: not alive(engine), what="the killed engine to be gone")
    kill_pilot(events)
    wait_for(lambda: not alive(guardian), what="the pilot's guardian to end its members and leave")
    _link(a, b, "dir")
    rc, out, err = run_cli("status", a, "--json")
    assert rc == 0, err
    p1 = json.loads(out)["pilots"]["p1"]
    assert p1["state"] == "unknown" and "pilots/p1" in p1["why"] and "symbolic link" in p1["why"], p1
    _clean(rc, out, err, "pwe status")
    gate.touch()
    rc, out, err = run_cli("resume", a, timeout=180)
    _clean(rc, out, err, "pwe resume")
    assert rc == 1, (rc, out, err)  # (say:1 fails on purpose)
    assert [line for line in err.splitlines() if "pilots/p1" in line and "symbolic link" in line], err
    recs = read_journal(a)
    assert not [r for r in recs if r["e"] == "reject"], "the resumed engine read another run's messages as its own"
    gone = [r for r in recs if r["e"] == "pilot_gone" and r["p"] == "p1"]
    assert gone and "symbolic link" in gone[-1]["why"], gone
    ends = [r for r in recs if r["e"] == "end"]
    assert {r["m"] for r in ends} == {0, 1} and all(r.get("p") != "p1" for r in ends), ends
    assert all(THEIRS not in json.dumps(r) for r in recs)
    after = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in (b / "pilots" / "p1").iterdir()}
    assert after == before, "the resumed engine wrote into another run's pilot directory"
    rc, out, err = run_cli("logs", a, "say:0")
    assert rc == 0 and f"{OURS}-out-0" in out and THEIRS not in out, (rc, out, err)
