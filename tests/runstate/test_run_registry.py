"""Runs by id wherever they live (pwe/runstate/registry.py): a run made with ``--run-dir``
anywhere is found by its id and by a prefix of it, from any directory, by ``pwe status``,
``show`` and ``logs`` and by a real ``pwe ui``; an entry of the registry is used only when
the directory it names holds that run (a forged entry is ignored); runs made at once are
each registered, owner-only."""

import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request

from helpers import ROOT, run_cli

WF = """name: regrun
nodes:
  a:
    parameters: {i: [1, 2]}
    run: echo "said=$PWE_MEMBER" >> "$PWE_OUTPUTS"; echo "hello from $PWE_MEMBER"
"""


def _env(tmp_path):
    return {"XDG_STATE_HOME": str(tmp_path / "state"), "PWE_HOME": ""}


def _run_odd(tmp_path, where):
    """A run of WF made from tmp_path/work with --run-dir ``where``: its id."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "wf.yaml").write_text(WF)
    rc, out, err = run_cli("run", "wf.yaml", "--run-dir", where, cwd=work, env=_env(tmp_path), timeout=180)
    assert rc == 0, err
    return json.loads((where / "run.json").read_text())["run_id"]


def test_a_run_made_with_run_dir_anywhere_is_found_by_id_and_prefix(tmp_path):
    odd = tmp_path / "else" / "where" / "results"
    run_id = _run_odd(tmp_path, odd)
    assert odd.name not in run_id
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env(tmp_path)
    for ref in (run_id, run_id[: len("regrun-") + 4]):
        rc, out, err = run_cli("status", ref, cwd=elsewhere, env=env)
        assert rc == 0 and run_id in out and "done" in out, (ref, out, err)
        rc, out, err = run_cli("show", ref, cwd=elsewhere, env=env)
        assert rc == 0 and "said=0" in out and "said=1" in out, (ref, out, err)
        rc, out, err = run_cli("logs", ref, "a:1", cwd=elsewhere, env=env)
        assert rc == 0 and "hello from 1" in out, (ref, out, err)
    rc, out, err = run_cli("status", "regrun-nosuch", cwd=elsewhere, env=env)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "registry" in err, err


def _start_ui(cwd, env, *args):
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "ui", "--port", "0", *args], cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines = []
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if "http://127.0.0.1:" in line:
            return proc, int(line.split("http://127.0.0.1:")[1].split("/")[0])
    proc.kill()
    raise AssertionError(f"pwe ui did not say where it listens: {lines}")


def _get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        return r.status, json.loads(r.read())


def test_pwe_ui_lists_a_run_dir_run_by_its_id_and_its_link_opens(tmp_path):
    odd = tmp_path / "else" / "results"
    run_id = _run_odd(tmp_path, odd)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args in (("--runs", str(odd.parent)), ()):  # listed through --runs; or only in the registry
        proc, port = _start_ui(elsewhere, _env(tmp_path), *args)
        try:
            if args:
                status, listing = _get(port, "/api/runs")
                assert status == 200 and [r["run_id"] for r in listing] == [run_id]
            status, doc = _get(port, f"/api/runs/{run_id}")
            assert status == 200 and doc["run_id"] == run_id and doc["nodes"]
            status, page = _get(port, f"/api/runs/{run_id}/members")
            assert status == 200 and len(page["members"]) == 2
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)


def test_a_forged_registry_entry_is_ignored(tmp_path):
    odd = tmp_path / "else" / "results"
    run_id = _run_odd(tmp_path, odd)
    reg = tmp_path / "state" / "pwe" / "runs"
    assert (reg / run_id).is_file()
    other = tmp_path / "other-run"
    other.mkdir()
    (other / "run.json").write_text(json.dumps({"run_id": "regrun-someone-else"}))
    forged = {
        run_id + "-x": str(odd),            # a directory of another run id (this one's)
        "regrun-fake-1": str(other),        # a directory whose run.json names another id
        "regrun-fake-2": "/etc",            # outside, no run at all
        "regrun-fake-3": "else/results",    # not an absolute path
        "regrun-fake-4": str(odd) + "\n" + str(odd),
    }
    for name, text in forged.items():
        (reg / name).write_text(text + "\n")
    os.symlink(reg / run_id, reg / "regrun-fake-5")  # a link: not an entry
    (reg / "regrun-with space").write_text(str(odd))  # not a run id's form
    env, cwd = _env(tmp_path), tmp_path
    for name in [*forged, "regrun-fake-5", "regrun-with"]:
        rc, out, err = run_cli("status", name, cwd=cwd, env=env)
        assert rc == 2 and "no run" in err and len(err.strip().splitlines()) == 1, (name, out, err)
    # the real entry still works, and its prefix is not made ambiguous by the forged ones
    rc, out, err = run_cli("status", run_id[:12], cwd=cwd, env=env)
    assert rc == 0 and run_id in out, err
    # a run moved away: its entry no longer names a run, ignored
    odd.rename(tmp_path / "moved")
    rc, out, err = run_cli("status", run_id, cwd=cwd, env=env)
    assert rc == 2 and "no run" in err, err


def test_runs_made_at_once_are_each_registered_owner_only(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "wf.yaml").write_text(WF)
    full = {**os.environ, "PYTHONPATH": str(ROOT), **_env(tmp_path)}
    dirs = [tmp_path / f"odd{i}" / "r" for i in range(3)]
    # (--concurrent: three runs of one workflow in one workspace at once, on purpose)
    procs = [subprocess.Popen([sys.executable, "-m", "pwe", "run", "wf.yaml", "--run-dir", str(d), "--concurrent"],
                              cwd=work, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for d in dirs]
    for p in procs:
        assert p.wait(300) == 0, p.stderr.read()
    reg = tmp_path / "state" / "pwe" / "runs"
    assert stat.S_IMODE(reg.stat().st_mode) == 0o700
    ids = [json.loads((d / "run.json").read_text())["run_id"] for d in dirs]
    assert len(set(ids)) == 3
    entries = sorted(p.name for p in reg.iterdir())
    assert entries == sorted(ids)  # (no temporary file left behind)
    for run_id, d in zip(ids, dirs):
        assert stat.S_IMODE((reg / run_id).stat().st_mode) == 0o600
        rc, out, err = run_cli("status", run_id, cwd=tmp_path, env=_env(tmp_path))
        assert rc == 0 and str(d) in out, err


def test_a_prefix_is_the_nearest_runs_first_and_several_are_named(tmp_path):
    """A start of an id that starts a run under ./pwe-runs is that run, here; from elsewhere,
    where only the registry knows them, one that starts two runs names both, and where."""
    odd = tmp_path / "else" / "results"
    far = _run_odd(tmp_path, odd)
    work = tmp_path / "work"
    rc, out, err = run_cli("run", "wf.yaml", cwd=work, env=_env(tmp_path), timeout=180)
    assert rc == 0, err
    near = next((work / "pwe-runs").iterdir()).name
    rc, out, err = run_cli("status", "regrun-", cwd=work, env=_env(tmp_path))
    assert rc == 0 and near in out and far not in out, (out, err)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rc, out, err = run_cli("status", "regrun-", cwd=elsewhere, env=_env(tmp_path))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "is the start of 2 runs" in err and near in err and far in err and str(odd) in err, err
