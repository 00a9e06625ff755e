"""Where pwe keeps its state (pwe.base.places): PWE_HOME over XDG_STATE_HOME over ~/.local/state,
the service's directory of an earlier pwe still used, and the runs found there by every
command (pwe.runstate.rundir.roots). No service runs here: a service's run root is a directory."""

import json
import time
from pathlib import Path

from helpers import run_cli


def fake_run(root: Path, run_id: str, **info) -> Path:
    """A run directory as pwe reads it for `pwe runs` and finds it (run.json alone)."""
    d = root / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"run_id": run_id, "created": time.time(), **info}))
    return d


def service_dir(base: Path) -> Path:
    """A service directory with its config (as `pwe service start` leaves it)."""
    base.mkdir(parents=True)
    (base / "config.json").write_text("{}")
    return base


def pwe(*args, cwd, **env):
    return run_cli(*args, cwd=cwd, env={"PWE_HOME": "", "XDG_STATE_HOME": "", **env})


def test_xdg_state_home_holds_the_service_and_its_runs_are_found(tmp_path):
    svc = service_dir(tmp_path / "xdg" / "pwe" / "service")
    fake_run(svc / "runs", "alpha-20240101-000000-abcd", service={"trigger": "nightly"})
    rc, out, err = pwe("runs", "--json", cwd=tmp_path, XDG_STATE_HOME=str(tmp_path / "xdg"))
    assert rc == 0, err
    [row] = json.loads(out)
    assert row["run_id"] == "alpha-20240101-000000-abcd" and row["from"] == "trigger nightly", row
    rc, out, err = pwe("status", "alpha-2024", cwd=tmp_path, XDG_STATE_HOME=str(tmp_path / "xdg"))
    assert "alpha-20240101-000000-abcd" in out + err and "no run" not in err, err
    rc, out, err = pwe("service", "status", "--json", cwd=tmp_path, XDG_STATE_HOME=str(tmp_path / "xdg"))
    assert json.loads(out)["service_dir"] == str(svc), out


def test_pwe_home_overrides_xdg(tmp_path):
    service_dir(tmp_path / "xdg" / "pwe" / "service")
    fake_run(tmp_path / "xdg" / "pwe" / "service" / "runs", "xdgrun-1")
    svc = service_dir(tmp_path / "home" / "state" / "service")
    fake_run(svc / "runs", "homerun-1")
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg"), "PWE_HOME": str(tmp_path / "home")}
    rc, out, err = pwe("runs", "--json", cwd=tmp_path, **env)
    assert [r["run_id"] for r in json.loads(out)] == ["homerun-1"], out
    assert json.loads(out)[0]["from"] == "service"  # (older run.json: said by its root)
    rc, out, err = pwe("status", "xdgrun", cwd=tmp_path, **env)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"no run 'xdgrun' (looked in pwe-runs/, {svc / 'runs'}/)" in err, err


def test_the_service_directory_of_an_earlier_pwe_is_used_and_said(tmp_path):
    old = service_dir(tmp_path / "home" / "service")
    fake_run(old / "runs", "oldrun-1")
    rc, out, err = pwe("runs", "--json", cwd=tmp_path, PWE_HOME=str(tmp_path / "home"))
    assert [r["run_id"] for r in json.loads(out)] == ["oldrun-1"], (out, err)
    rc, out, err = pwe("service", "status", "--json", cwd=tmp_path, PWE_HOME=str(tmp_path / "home"))
    assert json.loads(out)["service_dir"] == str(old)
    assert f"the service's directory is {old}, where an earlier pwe kept it" in err, err
    # ~/.pwe/service without PWE_HOME: the same
    old = service_dir(tmp_path / "user" / ".pwe" / "service")
    fake_run(old / "runs", "olderrun-1")
    rc, out, err = pwe("runs", "--json", cwd=tmp_path, HOME=str(tmp_path / "user"))
    assert [r["run_id"] for r in json.loads(out)] == ["olderrun-1"], (out, err)


def test_runs_from_the_command_line_say_so_and_an_empty_listing_names_where_it_looked(tmp_path):
    (tmp_path / "a.yaml").write_text("name: alpha\nnodes:\n  a:\n    run: 'true'\n")
    env = {"PWE_HOME": str(tmp_path / "home")}
    rc, out, err = pwe("runs", cwd=tmp_path, **env)
    assert rc == 0 and err.strip() == "no runs (looked in pwe-runs/)", err
    rc, out, err = pwe("run", "a.yaml", "--cores", "1", "--json", cwd=tmp_path, **env)
    run_id = json.loads(out)["run_id"]
    assert json.loads((tmp_path / "pwe-runs" / run_id / "run.json").read_text())["from"] == "command line"
    rc, out, err = pwe("runs", cwd=tmp_path, **env)
    assert out.splitlines()[1].split()[:3] == [run_id, "command", "line"], out


def test_hosts_yaml_is_read_from_pwe_home_config(tmp_path):
    (tmp_path / "home" / "config").mkdir(parents=True)
    (tmp_path / "home" / "config" / "hosts.yaml").write_text(
        "hosts:\n  mine: {protocol: slurm, cores_per_node: 3}\n")
    rc, out, err = pwe("hosts", "list", cwd=tmp_path, PWE_HOME=str(tmp_path / "home"))
    assert rc == 0 and "mine" in out, (out, err)
