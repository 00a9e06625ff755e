"""Pilots that follow the demand: a host's max_pilots (queued and running together),
max_queued_pilots, submit_rate, idle_timeout and submit_failures.

The decisions are plain functions, tested first without a batch system
(pwe.engine.scaling.decide, backoff; pwe.planning.placement.fit_to_work, pilot_shape);
every new key's bad values are refused at `pwe validate` / `pwe hosts check` in one line
naming the hosts file and line (exit 2); then, on the real four-node SLURM of
tests/cluster/ (the slurm4 fixture), three waves of demand grow and shrink the pilots within
the limits, every sbatch counted (a shim writes each call first), every member's own ledger
line there once; and a pilot job SLURM refuses backs off (the journal's note, `pwe status`'s
line), is tried again after the delay, and stops the run with SLURM's words.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers import ROOT, read_journal, run_cli, wait_for
from hostinfo.model import Host
from pwe.engine import scaling
from pwe.planning.placement import DEFAULT_WALLTIME, MIN_WALLTIME, fit_to_work, walltime_for

PY = sys.executable
LIMITS = scaling.Limits(max_pilots=2, max_queued=1, submit_rate=30.0, submit_failures=3)


# ---------------------------------------------------------------------------------------
# The decision, without a batch system


def test_a_pilot_goes_when_the_host_allows_it():
    assert scaling.decide(LIMITS, alive=0, queued=0, last_submit=None, retry_at=0.0, now=100.0).submit
    assert scaling.decide(LIMITS, alive=1, queued=0, last_submit=50.0, retry_at=0.0, now=100.0).submit


def test_max_pilots_counts_queued_and_running_pilots_together():
    d = scaling.decide(LIMITS, alive=2, queued=0, last_submit=None, retry_at=0.0, now=100.0)
    assert not d.submit and "max_pilots 2" in d.why and d.next_at == 0.0  # (only a pilot leaving changes it)


def test_max_queued_pilots_holds_the_next_while_one_waits_in_the_queue():
    d = scaling.decide(LIMITS, alive=1, queued=1, last_submit=None, retry_at=0.0, now=100.0)
    assert not d.submit and "max_queued_pilots 1" in d.why


def test_submissions_are_spaced_by_submit_rate():
    # 30 a minute: one every 2 s after the last
    d = scaling.decide(LIMITS, alive=1, queued=0, last_submit=99.0, retry_at=0.0, now=100.0)
    assert not d.submit and d.next_at == pytest.approx(101.0)
    assert scaling.decide(LIMITS, alive=1, queued=0, last_submit=99.0, retry_at=0.0, now=101.0).submit
    slow = LIMITS._replace(submit_rate=0.5)  # (a float: one every two minutes)
    assert slow.spacing == 120.0
    assert not scaling.decide(slow, alive=0, queued=0, last_submit=0.0, retry_at=0.0, now=119.0).submit


def test_a_refused_submission_is_tried_again_only_after_its_back_off():
    d = scaling.decide(LIMITS, alive=0, queued=0, last_submit=None, retry_at=104.0, now=100.0)
    assert not d.submit and d.next_at == 104.0 and "backing off" in d.why
    assert scaling.decide(LIMITS, alive=0, queued=0, last_submit=None, retry_at=104.0, now=104.0).submit
    # the back-off grows with each refusal in a row, a few seconds first, never unbounded
    delays = [scaling.backoff(n) for n in range(1, 12)]
    assert delays[:3] == [2.0, 4.0, 8.0]
    assert all(b >= a for a, b in zip(delays, delays[1:])) and max(delays) == scaling.BACKOFF_MOST_S


def test_limits_come_from_the_host_with_their_defaults():
    host = Host(name="c", protocol="slurm", max_pilots=3)
    limits = scaling.Limits.of(host)
    assert limits == scaling.Limits(3, 3, 20.0, 3)  # max_queued_pilots defaults to max_pilots
    assert host.idle_after(batch=True) == 60.0 and host.idle_after(batch=False) == 300.0
    assert Host(name="c", protocol="slurm", idle_timeout=7).idle_after(batch=True) == 7.0


# ---------------------------------------------------------------------------------------
# A pilot's size and walltime from measured durations and the ready queue


def test_a_pilot_for_a_little_short_work_is_small_and_short():
    # 100 members of 2 s on 1 core each: 200 core-seconds; four nodes of 2 cores asked for
    # by their cores, one node finishes them well within the shortest walltime
    assert fit_to_work([(1, 100, 2.0)], nodes=4, usable=2, walltime=None, cap=None, per_member=None) == \
        (1, MIN_WALLTIME)


def test_a_pilot_for_much_long_work_keeps_its_nodes_and_the_longest_walltime_allowed():
    nodes, walltime = fit_to_work([(1, 100000, 20.0)], nodes=4, usable=2, walltime=None, cap=None, per_member=None)
    assert (nodes, walltime) == (4, DEFAULT_WALLTIME)
    # within the partition's limit
    assert fit_to_work([(1, 100000, 20.0)], nodes=4, usable=2, walltime=None, cap=30, per_member=None) == (4, 30.0)


def test_the_users_walltime_is_kept_and_a_member_always_fits():
    assert fit_to_work([(1, 100, 2.0)], nodes=4, usable=2, walltime=30.0, cap=None, per_member=None) == (1, 30.0)
    _, walltime = fit_to_work([(1, 2, 1.0)], nodes=1, usable=2, walltime=None, cap=None, per_member=20)
    assert walltime >= walltime_for(20)


def test_pilot_shape_sizes_from_measured_durations_only_when_every_ready_node_has_them(tmp_path):
    from pwe.planning.placement import pilot_shape
    from pwe.planning.plan import plan_workflow

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: s\nnodes:\n  a:\n    parameters: {i: {range: [0, 16]}}\n    run: 'true'\n"
                  "  b:\n    parameters: {i: {range: [0, 16]}}\n    run: 'true'\n")
    plan = plan_workflow(wf)
    host = Host(name="c", protocol="slurm", cores_per_node=2, max_nodes=8)
    ready = [("a", i) for i in range(16)]
    assert pilot_shape(plan, host, ready)["nodes"] == 8  # by their cores, as before
    assert pilot_shape(plan, host, ready)["walltime"] == DEFAULT_WALLTIME
    shaped = pilot_shape(plan, host, ready, measured={"a": 3.0})
    assert (shaped["nodes"], shaped["walltime"]) == (1, MIN_WALLTIME)
    mixed = ready + [("b", i) for i in range(16)]  # b not measured yet: sized as before
    assert pilot_shape(plan, host, mixed, measured={"a": 3.0})["nodes"] == 8


# ---------------------------------------------------------------------------------------
# Bad values of each key: one line naming the hosts file and line, exit 2, nothing made


BAD = [
    ("submit_rate: 0", "submit_rate", "above 0 (at least 1e-06) and at most 1e+06 (got 0.0)"),
    ("submit_rate: -1", "submit_rate", "above 0"),
    ("submit_rate: .nan", "submit_rate", "above 0"),
    ("submit_rate: .inf", "submit_rate", "above 0"),
    ("submit_rate: 1.0e+12", "submit_rate", "at most"),
    ("submit_rate: fast", "submit_rate", "must be a number (got 'fast')"),
    ("max_queued_pilots: 0", "max_queued_pilots", "must be at least 1 (got 0)"),
    ("max_queued_pilots: 3", "max_queued_pilots", "max_queued_pilots (3) is more than max_pilots (2)"),
    ("max_queued_pilots: -1", "max_queued_pilots", "must be at least 1"),
    ("max_queued_pilots: 1000000000000", "max_queued_pilots", "must be at most"),
    ("idle_timeout: 0", "idle_timeout", "above 0"),
    ("idle_timeout: -5", "idle_timeout", "above 0"),
    ("idle_timeout: .nan", "idle_timeout", "above 0"),
    ("idle_timeout: soon", "idle_timeout", "must be a number"),
    ("submit_failures: 0", "submit_failures", "must be at least 1"),
    ("submit_failures: 1000", "submit_failures", "must be at most 100 (got 1000)"),
    ("submit_failures: 2.5", "submit_failures", "must be a whole number (got 2.5)"),
]


def _bad_hosts(tmp_path: Path, line: str) -> Path:
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  c:\n    protocol: slurm\n    max_pilots: 2\n    {line}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\ndefaults: {host: c}\nnodes:\n  a:\n    run: 'true'\n")
    return wf


@pytest.mark.parametrize("line,key,said", BAD, ids=[b[0] for b in BAD])
def test_a_bad_value_is_refused_at_validate_with_its_file_and_line(tmp_path, line, key, said):
    wf = _bad_hosts(tmp_path, line)
    status, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert status == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"{tmp_path / 'hosts.yaml'}:5: 'hosts.c.{key}'") and said in lines[0], lines[0]
    assert lines[0].count("(got ") <= 1, lines[0]   # the value said once, by the validator or after its words


def test_a_bad_value_is_refused_by_hosts_check_and_run_makes_nothing(tmp_path):
    wf = _bad_hosts(tmp_path, "submit_rate: 0")
    status, _, err = run_cli("hosts", "check", "c", "--hosts", tmp_path / "hosts.yaml", cwd=tmp_path)
    assert status == 2 and "hosts.yaml:5: 'hosts.c.submit_rate'" in err and len(err.strip().splitlines()) == 1, err
    status, _, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert status == 2 and "submit_rate" in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "pwe-runs").exists()


# ---------------------------------------------------------------------------------------
# On the four-node SLURM (tests/cluster/up.sh): demand in waves; a refused submission

#: A member that writes its own ledger: a line as it starts, and one when its work ran to its end.
LEDGER_RUN = ('echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT $(hostname)" >> {{ ledger }}; '
              'sleep {{ pause }} && echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT $(hostname)" >> {{ ledger }}')


def _host(tmp_path: Path, extra: str = "") -> Path:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  auto:\n    protocol: slurm\n    cores_per_node: 2\n    memory_per_node: 2000\n"
                     "    max_pilots: 2\n    max_queued_pilots: 1\n    submit_rate: 30\n    idle_timeout: 3\n"
                     f"    partitions: [{{name: batch, max_nodes: 1}}]\n{extra}")  # (a pilot: one node)
    return hosts


def _counted(tmp_path: Path, slurm4) -> tuple[dict, Path]:
    """The environment of the run: the cluster's, and an sbatch that writes each call (its
    time) to a file before it runs the real one."""
    shims, calls = tmp_path / "shims", tmp_path / "calls"
    shims.mkdir()
    real = shutil.which("sbatch")
    (shims / "sbatch").write_text(f'#!/bin/sh\necho "$(date +%s.%N) sbatch" >> {calls}\nexec {real} "$@"\n')
    (shims / "sbatch").chmod(0o755)
    return {**os.environ, **slurm4.env, "PYTHONPATH": str(ROOT), "PATH": f"{shims}:{os.environ['PATH']}"}, calls


def _sbatch_times(calls: Path) -> list[float]:
    return sorted(float(line.split()[0]) for line in calls.read_text().splitlines()) if calls.exists() else []


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans (start, end) open at one time."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def _up_at(run_dir: Path, pid_: str) -> float | None:
    """When the pilot said it came up (its own events file), or None."""
    events = run_dir / "pilots" / pid_ / "events.jsonl"
    for line in events.read_text().splitlines() if events.exists() else ():
        ev = json.loads(line)
        if ev.get("k") == "up":
            return float(ev["t"])
    return None


def test_pilots_grow_and_shrink_with_three_waves_of_demand(slurm4, tmp_path):
    """12 members, a barrier of 8 s, 12 more, a barrier, 12 more, on a host of at most two
    pilots (one queued at a time, 30 a minute, idle after 3 s): pilots are added while more
    members are ready than the live ones take, and one with nothing to do during a barrier
    gives its node back; never more alive or queued than allowed, the sbatch calls spaced,
    each one a `pilot` record, every member's ledger line there once."""
    env, calls = _counted(tmp_path, slurm4)
    hosts = _host(tmp_path)
    wave = f"    parameters: {{i: {{range: [0, 12]}}}}\n    run: {json.dumps(LEDGER_RUN)}\n"
    wf = tmp_path / "waves.yaml"
    wf.write_text(f"name: waves\nproperties: {{ledger: {tmp_path / 'ledger'}, pause: 2}}\ndefaults: {{host: auto}}\n"
                  f"nodes:\n  w1:\n{wave}  b1:\n    after: [w1]\n    run: sleep 8\n  w2:\n    after: [b1]\n{wave}"
                  f"  b2:\n    after: [w2]\n    run: sleep 8\n  w3:\n    after: [b2]\n{wave}")
    run_dir = tmp_path / "run"
    proc = subprocess.run([PY, "-m", "pwe", "run", wf, "--hosts", hosts, "--run-dir", run_dir], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    # every member ran once, to its end (the members' own word)
    lines = [line.split() for line in (tmp_path / "ledger").read_text().splitlines()]
    want = Counter((n, str(i)) for n in ("w1", "w2", "w3") for i in range(12))
    assert Counter((x[1], x[2]) for x in lines if x[0] == "start") == want
    assert Counter((x[1], x[2]) for x in lines if x[0] == "end") == want
    journal = read_journal(run_dir)
    pilots = [r for r in journal if r["e"] == "pilot"]
    gone = {r["p"]: r for r in journal if r["e"] == "pilot_gone"}
    # every sbatch is a pilot record (and each pilot record an sbatch)
    times = _sbatch_times(calls)
    assert len(times) == len(pilots), (times, pilots)
    # pilots were added beyond the first, and one returned its node while the run still had work
    last_end = max(r["t"] for r in journal if r["e"] == "end")
    idle = [g for g in gone.values() if "idle" in g["why"] and g["t"] < last_end]
    assert len(pilots) >= 3 and idle, ([(p["p"], p["t"]) for p in pilots], list(gone.values()))
    # never more than max_pilots alive (from its submission to the engine giving it up)
    end = journal[-1]["t"]
    alive = [(p["t"], gone[p["p"]]["t"] if p["p"] in gone else end) for p in pilots]
    assert _most_at_once(alive) == 2, alive  # (the first wave asks for both)
    # never more than max_queued_pilots queued (from its submission to its own 'up')
    queued = [(p["t"], _up_at(run_dir, p["p"]) or (gone[p["p"]]["t"] if p["p"] in gone else end)) for p in pilots]
    assert _most_at_once(queued) <= 1, queued
    # sbatch calls spaced by submit_rate (30 a minute: 2 s; load only makes the gaps longer)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(g >= 2.0 - 0.05 for g in gaps), gaps


def test_a_refused_pilot_job_backs_off_and_then_stops_with_the_batch_systems_words(slurm4, tmp_path):
    """SLURM refuses the pilot job (a reservation it does not have: a bad account is not
    checked by this cluster, which keeps no accounting): the engine notes it in the journal,
    `pwe status` says why and when it tries again, it tries after 2 s and 4 s more, and the
    third refusal stops the run (exit 3) with sbatch's own words; three sbatch calls, no
    tight loop, no member run."""
    env, calls = _counted(tmp_path, slurm4)
    hosts = _host(tmp_path)
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: refused\ndefaults: {host: auto}\nnodes:\n  a:\n    parameters: {i: {range: [0, 4]}}\n"
                  f"    run: echo $PWE_MEMBER >> {ledger}\n    scheduling: {{reservation: nosuch}}\n")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([PY, "-m", "pwe", "run", wf, "--hosts", hosts, "--run-dir", run_dir], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def backing_off():
            st = subprocess.run([PY, "-m", "pwe", "status", run_dir], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=60)
            return next((line for line in st.stdout.splitlines() if "the batch system refused" in line), None)
        line = wait_for(backing_off, 120, "pwe status to say the host refused a pilot job", step=0.2)
        assert line.startswith("host 'auto': the batch system refused 1 pilot job in a row") or \
            line.startswith("host 'auto': the batch system refused 2 pilot jobs in a row"), line
        assert "Requested reservation is invalid" in line and "the next try at" in line, line
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err
    assert "the batch system refused a pilot job for host 'auto': sbatch failed: " in last, last
    assert "Requested reservation is invalid (refused 3 times in a row): fix the host" in last, last
    assert last.endswith(f"then: pwe resume {run_dir}"), last
    notes = [r for r in read_journal(run_dir) if r["e"] == "note" and r.get("refused")]
    assert [n["refused"] for n in notes] == [1, 2], notes
    assert all("Requested reservation is invalid" in n["what"] for n in notes)
    # three sbatch calls, each after the back-off the note before it named
    times = _sbatch_times(calls)
    assert len(times) == 3, times
    assert times[1] >= notes[0]["retry_at"] - 0.05 and times[2] >= notes[1]["retry_at"] - 0.05, (times, notes)
    assert times[2] - times[1] >= scaling.backoff(2) - 0.05
    assert not [r for r in read_journal(run_dir) if r["e"] == "pilot"] and not ledger.exists()
