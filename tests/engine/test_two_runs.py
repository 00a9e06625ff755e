"""Two runs of one workflow in one workspace at once (issue 45, part 1): the second is
refused in one line naming the live run, exit 2, nothing made; ``--concurrent`` where a
user means it. Real processes; the members keep their own ledger."""

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from helpers import ROOT, alive, engine_pid, no_traceback, run_cli, wait_for

ENV = dict(os.environ, PYTHONPATH=str(ROOT))

#: members that wait for a gate file, so that the first run is live while the second comes
GATED_WF = """\
name: twice
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: |
      echo "start $PWE_RUN_ID $PWE_MEMBER" >> {ledger}
      while [ ! -e {gate} ]; do sleep 0.05; done
      echo "end $PWE_RUN_ID $PWE_MEMBER" >> {ledger}
"""


def _setup(tmp_path, n: int = 3):
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    wf = tmp_path / "wf.yaml"
    wf.write_text(GATED_WF.format(n=n, ledger=ledger, gate=gate))
    return wf, ledger, gate


def _runs(tmp_path) -> list[str]:
    root = tmp_path / "pwe-runs"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def _ends(ledger) -> Counter:
    return Counter(tuple(w[1:]) for w in (line.split() for line in ledger.read_text().splitlines()) if w[0] == "end")


def test_a_second_run_while_one_is_live_is_refused_in_one_line_and_makes_nothing(tmp_path):
    wf, ledger, gate = _setup(tmp_path)
    rc, out, err = run_cli("submit", wf, "--cores", "3", cwd=tmp_path)
    assert rc == 0, err
    first = out.strip().split()[0]
    wait_for(lambda: ledger.exists() and ledger.read_text().count("start") == 3, what="the first run's members")
    before = _runs(tmp_path)
    for command in ("run", "submit"):
        rc, out, err = run_cli(command, wf, "--cores", "2", cwd=tmp_path)
        assert rc == 2, (command, out, err)
        no_traceback(err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and first in lines[0] and "live run" in lines[0] and "--concurrent" in lines[0], err
        assert _runs(tmp_path) == before, f"`pwe {command}` made a run directory"
    # another run of it with its own --run-dir is refused all the same (the workspace is the thing shared)
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "elsewhere", cwd=tmp_path)
    assert rc == 2 and first in err and not (tmp_path / "elsewhere").exists(), err
    gate.touch()
    wait_for(lambda: engine_pid(tmp_path / "pwe-runs" / first) is None, what="the first run to end")
    # once it has ended, a new run is taken (and reuses what the first made)
    rc, out, err = run_cli("run", wf, "--cores", "2", cwd=tmp_path, timeout=180)
    assert rc == 0, err
    assert set(_ends(ledger).values()) == {1} and len(_ends(ledger)) == 3


def test_concurrent_where_a_user_means_it(tmp_path):
    wf, ledger, gate = _setup(tmp_path, 2)
    rc, out, err = run_cli("submit", wf, "--cores", "2", cwd=tmp_path)
    assert rc == 0, err
    wait_for(lambda: ledger.exists() and ledger.read_text().count("start") == 2, what="the first run's members")
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    gate.touch()
    rc, out, err = run_cli("run", wf, "--cores", "2", "--concurrent", "--workspace", ws2, "--fresh", cwd=tmp_path,
                           timeout=180)
    assert rc == 0, err
    runs = {k[0] for k in _ends(ledger)}
    assert len(runs) == 2


def test_a_run_killed_9_holds_nothing_and_resume_of_another_run_is_refused_while_one_is_live(tmp_path):
    wf, ledger, gate = _setup(tmp_path, 2)
    rc, out, err = run_cli("submit", wf, "--cores", "2", cwd=tmp_path)
    assert rc == 0, err
    first = tmp_path / "pwe-runs" / out.strip().split()[0]
    wait_for(lambda: ledger.exists() and ledger.read_text().count("start") == 2, what="the first run's members")
    engine = engine_pid(first)
    os.kill(engine, signal.SIGKILL)
    wait_for(lambda: not alive(engine), what="the killed engine to be gone")
    # the kernel dropped its lock: a second run is taken
    rc, out, err = run_cli("submit", wf, "--cores", "2", cwd=tmp_path)
    assert rc == 0, err
    second = tmp_path / "pwe-runs" / out.strip().split()[0]
    wait_for(lambda: engine_pid(second) is not None, what="the second run's engine")
    # and the first cannot be resumed while the second is live
    rc, out, err = run_cli("resume", first, cwd=tmp_path)
    assert rc == 2 and second.name in err and len(err.strip().splitlines()) == 1, err
    no_traceback(err)
    gate.touch()
    wait_for(lambda: engine_pid(second) is None, what="the second run to end")
    rc, out, err = run_cli("resume", first, cwd=tmp_path, timeout=180)
    assert rc == 0, err


def test_two_runs_started_at_once_one_runs_the_other_is_refused(tmp_path):
    """Both pass the check before either made its run: the engines' lock decides; the
    refused one leaves nothing behind, and each member ran once."""
    wf, ledger, gate = _setup(tmp_path, 3)
    gate.touch()
    procs = [subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2"], cwd=tmp_path, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=180) + (p.returncode,) for p in procs]
    codes = sorted(r[2] for r in results)
    # (one ran; the other was refused, or found the first over and reused its members)
    assert codes in ([0, 2], [0, 0]), results
    for _out, err, code in results:
        no_traceback(err)
        if code == 2:
            assert "live run" in err and len(err.strip().splitlines()) == 1, err
    assert set(_ends(ledger).values()) == {1}
    assert {k[1] for k in _ends(ledger)} == {"0", "1", "2"}
    assert len({k[0] for k in _ends(ledger)}) == 1, "two runs ran members"
    assert len(_runs(tmp_path)) == (1 if codes == [0, 2] else 2)


@pytest.mark.parametrize("what", ["link", "fifo", "dir-link"])
def test_a_lock_path_that_is_not_a_file_of_its_own_is_one_line(tmp_path, what):
    wf, ledger, gate = _setup(tmp_path, 1)
    gate.touch()
    live = tmp_path / ".pwe" / "live"
    outside = tmp_path / "outside"
    outside.mkdir()
    if what == "dir-link":
        (tmp_path / ".pwe").mkdir()
        live.symlink_to(outside)
    else:
        live.mkdir(parents=True)
        if what == "link":
            (live / "twice.lock").symlink_to(outside / "victim")
        else:
            os.mkfifo(live / "twice.lock")
    rc, out, err = run_cli("run", wf, "--cores", "1", cwd=tmp_path, timeout=60)
    assert rc == 2, (out, err)
    no_traceback(err)
    assert len(err.strip().splitlines()) == 1 and "remove it" in err, err
    assert not list(outside.iterdir()), "a file was written outside the workspace"
    assert _runs(tmp_path) == [], "the refused run left its directory"


def test_a_refused_run_removes_only_its_own_lock_and_what_it_made(tmp_path):
    """A run refused before it began (a products: directory that cannot be listed) removes
    the lock file it made, never the directory other workflows' locks are in."""
    (tmp_path / "wf.yaml").write_text("name: prod\nnodes:\n  a:\n    parameters: {i: [1, 2]}\n"
                                      "    products: ['loop/x{{ i }}']\n    run: echo hi\n")
    os.symlink("loop", tmp_path / "loop")
    live = tmp_path / ".pwe" / "live"
    live.mkdir(parents=True)
    (live / "other.lock").write_text("")
    rc, out, err = run_cli("run", "wf.yaml", cwd=tmp_path, timeout=120)
    assert rc == 2 and "loop" in err, err
    no_traceback(err)
    assert sorted(p.name for p in live.iterdir()) == ["other.lock"]
