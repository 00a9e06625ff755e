"""requestedStart reaches the batch system: SLURM's --begin (on the real cluster), PBS's
-a and LoadLeveler's startdate (in their scripts), and ``pwe plan --host`` shows it."""

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from helpers import ROOT, read_journal, run_cli, wait_for
from protocols.base import PilotJob, get
from protocols.runner import LocalRunner
from pwe.workflow import starttime

HOSTS = """hosts:
  cluster: {protocol: slurm, cores_per_node: 8, max_nodes: 1, partitions: [{name: debug}]}
"""


def _wf(tmp_path, start):
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: later\nnodes:\n  m:\n    parameters: {i: {range: [0, 3]}}\n    run: 'true'\n"
                  f"    scheduling: {{maxWallTime: 5, requestedStart: {json.dumps(start)}}}\n")
    return wf


def test_the_forms_a_workflow_may_write():
    now = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert starttime.parse("now+90s", now) == now + timedelta(seconds=90)
    assert starttime.parse("now+30min", now) == now + timedelta(minutes=30)
    assert starttime.parse("now + 2h", now) == now + timedelta(hours=2)
    assert starttime.parse("now+1d", now) == now + timedelta(days=1)
    assert starttime.parse("2031-05-06T07:08:09Z") == datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    assert starttime.parse("2031-05-06T09:08+02:00") == datetime(2031, 5, 6, 7, 8, tzinfo=timezone.utc)
    local = starttime.parse("2031-05-06")  # a date: its midnight, here
    assert (local.year, local.month, local.day, local.hour) == (2031, 5, 6, 0)
    for bad in ("tomorrow", "now+", "now+5y", "2031-13-01", "31/05/2031"):
        with pytest.raises(ValueError, match="not a time; write ISO 8601"):
            starttime.parse(bad)


def test_each_scheduler_writes_it_in_its_own_words():
    when = datetime(2031, 5, 6, 7, 8, 9).astimezone()  # this machine's zone
    job = PilotJob("p1", "/r/pilots/p1", "pwe-x-p1", 1, 8, 5.0, begin=when)
    scripts = {name: get(name, LocalRunner()).render(job) for name in ("slurm", "pbs", "loadleveler")}
    assert "#SBATCH --begin=2031-05-06T07:08:09\n" in scripts["slurm"]
    assert "#PBS -a 203105060708.09\n" in scripts["pbs"]
    assert "# @ startdate = 05/06/2031 07:08:09\n" in scripts["loadleveler"]
    plain = PilotJob("p1", "/r/pilots/p1", "pwe-x-p1", 1, 8, 5.0)
    assert not any(w in get(n, LocalRunner()).render(plain) for n in ("slurm", "pbs", "loadleveler")
                   for w in ("--begin", "#PBS -a", "startdate"))


def test_a_start_that_is_not_a_time_is_one_line_at_validate(tmp_path):
    wf = _wf(tmp_path, "tomorrow")
    rc, _, err = run_cli("validate", str(wf), "--hosts", str(tmp_path / "hosts.yaml"))
    assert rc == 2
    line, = err.strip().splitlines()
    assert line.startswith(f"{wf}:6:") and "requestedStart" in line and "now+2h" in line


def test_plan_shows_it_and_a_local_host_warns_it_is_not_used(tmp_path):
    wf = _wf(tmp_path, "2031-05-06T07:08:09")
    rc, out, err = run_cli("plan", str(wf), "--host", "cluster", "--hosts", str(tmp_path / "hosts.yaml"))
    assert rc == 0, err
    assert "#SBATCH --begin=2031-05-06T07:08:09" in out
    rc, out, err = run_cli("plan", str(wf), "--host", "local", "--hosts", str(tmp_path / "hosts.yaml"))
    assert rc == 0 and "requestedStart not used" in out + err


def test_slurm_holds_the_pilot_until_the_requested_start(slurm_cluster, tmp_path):
    """A run whose start is an hour away: its pilot job is on the real cluster, pending for
    BeginTime with the StartTime asked for; cancelling the run removes it."""
    wf = _wf(tmp_path, "now+1h")
    run_dir = tmp_path / "run"
    made = datetime.now().astimezone()
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--host", "cluster", "--run-dir",
                             str(run_dir), "--hosts", str(tmp_path / "hosts.yaml")], cwd=tmp_path,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/local/bin:/usr/bin:/bin"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job = wait_for(lambda: next((r["job"] for r in (read_journal(run_dir) if (run_dir / "journal.jsonl").exists()
                                                         else []) if r["e"] == "pilot" and r.get("job")), None),
                       timeout=60, what="the pilot job's submission")
        fields = wait_for(lambda: (f := slurm_cluster.job(job)) and f.get("Reason") == "BeginTime" and f,
                          timeout=30, what="SLURM to hold the job for its begin time")
        assert fields["JobState"] == "PENDING"
        start = datetime.fromisoformat(fields["StartTime"]).astimezone()
        assert abs((start - (made + timedelta(hours=1))).total_seconds()) < 60, (fields["StartTime"], made)
        assert not (run_dir / "pilots" / "p1" / "events.jsonl").exists()  # nothing ran
    finally:
        run_cli("cancel", str(run_dir))
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err  # cancelled members (README: exit statuses)
    assert "3/3 finished" in err
    wait_for(lambda: slurm_cluster.job_state(job) in (None, "CANCELLED") or not slurm_cluster.job(job),
             timeout=60, what="the pilot job to be cancelled")


# -- the original PWE's own form (issue 22, item 6) ---------------------------------------------

def test_the_seeds_own_form_is_the_same_instant_as_iso():
    """yyyy/MM/dd HH:mm:ss (what PWE's profiles hold) was refused: 'not a time; write ISO 8601'."""
    assert starttime.parse("2026/12/01 08:00:00") == starttime.parse("2026-12-01T08:00:00")
    assert starttime.parse("2026/12/01 08:00") == starttime.parse("2026-12-01T08:00")
    assert starttime.parse("2026/12/01") == starttime.parse("2026-12-01")
    assert starttime.parse("  2026/12/01 08:00:00 ") == starttime.parse("2026-12-01T08:00:00")
    for bad in ("2026/13/01 08:00:00", "2026/12/01 24:00:00", "2026/12/1 8:00:00", "01/12/2026 08:00:00",
                "2026/12/01 08:00:00 +02:00"):
        with pytest.raises(ValueError, match="not a time; write ISO 8601"):
            starttime.parse(bad)


@pytest.mark.parametrize("text", ["2026/12/01 08:00:00", "2026-12-01T08:00:00"])
def test_a_time_without_a_zone_is_this_machines_local_time(text):
    """Both forms, zone-less, are read in the zone of the machine reading them (TZ here)."""
    code = f"from pwe.workflow import starttime; t = starttime.parse({text!r}); print(t.isoformat())"
    for tz, offset in (("Asia/Tokyo", "+09:00"), ("UTC", "+00:00"), ("America/New_York", "-05:00")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONPATH": str(ROOT), "TZ": tz, "PATH": "/usr/bin:/bin"}).stdout
        assert out.strip() == f"2026-12-01T08:00:00{offset}", (tz, out)


def test_the_seeds_form_validates_and_reaches_the_job_script(tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts:\n  cl: {protocol: pbs, cores_per_node: 8, max_nodes: 1}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: later\nnodes:\n  m:\n    run: 'true'\n"
                  "    scheduling: {maxWallTime: 5, requestedStart: '2031/05/06 07:08:09'}\n")
    rc, out, err = run_cli("validate", wf, "--hosts", tmp_path / "hosts.yaml")
    assert rc == 0, err
    rc, out, err = run_cli("plan", wf, "--host", "cl", "--hosts", tmp_path / "hosts.yaml")
    assert rc == 0, err
    assert "#PBS -a 203105060708.09\n" in out


def test_garbage_in_the_seeds_shape_is_one_line(tmp_path):
    wf = _wf(tmp_path, "2031/02/30 07:08:09")
    rc, _, err = run_cli("validate", str(wf), "--hosts", str(tmp_path / "hosts.yaml"))
    assert rc == 2 and "Traceback" not in err
    line, = err.strip().splitlines()
    assert line.startswith(f"{wf}:6:") and "requestedStart" in line and "yyyy/MM/dd HH:mm:ss" in line, line
