"""memoryPerMember is enforced (pilot/memwatch.py) and a member's end says why it ended
(pilot/wire.py REASONS): a member that allocates past its limit is killed with reason
``oom``, one under it runs to its exit with no reason, one past its walltime ends with
reason ``walltime``; by a cgroup of its own where the kernel gives one this process may
write, by the pilot watching its memory everywhere (PWE_NO_CGROUPS forces that here).
Real `pwe run`s through the CLI, the run's journal the witness; the node agent (members of
other nodes, local spawners) told to run members with a ``mem``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, WAIT, by_key, no_traceback, pwe, read_journal, show, wait_for
from pilot import wire
from pilot.cgroups import find_cgroups

#: grows by 16 MB every 50 ms up to 1 GB (touched: resident), then exits 0: killed long before
GROW = "import time\nb = []\nfor _ in range(64):\n    b.append(b'x' * (16 << 20)); time.sleep(0.05)\n"
#: 16 MB, then exits 0
SMALL = "b = b'x' * (16 << 20)\n"

WF = """\
name: memory
nodes:
  grows:
    run: {py} {tmp}/grow.py
    scheduling: {{memoryPerMember: 64}}
  small:
    run: {py} {tmp}/small.py
    scheduling: {{memoryPerMember: 512}}
  plain:
    run: {py} {tmp}/small.py
  slow:
    run: sleep 60
    scheduling: {{maxWallTimePerMember: 0.02}}
"""

CGROUPS = find_cgroups()
NO_CGROUP = "the kernel gives this process no memory cgroup it may write (cgroup v1 or v2): the RSS watch only"


def _cgroups_left() -> set[str]:
    if CGROUPS is None:
        return set()
    return {n for n in os.listdir(CGROUPS.own) if n.startswith("pwe-")}


def _sweep(tmp_path: Path, write) -> tuple[Path, dict, str]:
    (tmp_path / "grow.py").write_text(GROW)
    (tmp_path / "small.py").write_text(SMALL)
    wf = write(WF.format(py=sys.executable, tmp=tmp_path))
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "4", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err  # (two members failed: killed)
    no_traceback(err)
    ends = {r["n"]: r for r in read_journal(run) if r["e"] == "end"}
    log = "".join(p.read_text() for p in run.glob("pilots/*/pilot.log"))
    return run, ends, log


def _check(run: Path, ends: dict) -> None:
    recs = by_key(show(run))
    grows = ends["grows"]
    assert grows["reason"] == wire.REASON_OOM, grows
    assert grows["rc"] != 0 and grows["why"].endswith("of its memoryPerMember 64 MB"), grows
    assert recs[("grows", 0)]["state"] == "failed"
    for node in ("small", "plain"):
        assert ends[node]["rc"] == 0 and "reason" not in ends[node] and "why" not in ends[node], ends[node]
        assert recs[(node, 0)]["state"] == "done"
    slow = ends["slow"]
    assert slow["reason"] == wire.REASON_WALLTIME, slow
    assert slow["why"] == "ran past its maxWallTimePerMember of 0.02 min", slow
    assert recs[("slow", 0)]["state"] == "failed"


def test_a_member_past_its_memory_is_killed_by_the_watch(tmp_path, write, monkeypatch):
    monkeypatch.setenv("PWE_NO_CGROUPS", "1")
    before = _cgroups_left()
    run, ends, log = _sweep(tmp_path, write)
    _check(run, ends)
    used = int(ends["grows"]["why"].split()[1])
    assert used > 64, ends["grows"]  # (what the watch saw: over the limit)
    assert "members' memory is looked at every" in log, log
    assert _cgroups_left() <= before


@pytest.mark.skipif(CGROUPS is None, reason=NO_CGROUP)
def test_a_member_past_its_memory_is_killed_in_its_cgroup(tmp_path, write, monkeypatch):
    monkeypatch.delenv("PWE_NO_CGROUPS", raising=False)
    before = _cgroups_left()
    run, ends, log = _sweep(tmp_path, write)
    _check(run, ends)
    assert "each member in a cgroup of its own under" in log, log
    assert _cgroups_left() <= before, "a member's cgroup (or the pilot's) was left behind"


def _agent(tmp_path: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pilot.nodeagent"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "agent.log", "ab"), env=env, cwd=tmp_path, bufsize=0)


def _said(proc: subprocess.Popen, want: int) -> list[dict]:
    got: list[dict] = []
    buf = b""

    def more():
        nonlocal buf
        buf += os.read(proc.stdout.fileno(), 1 << 16)
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            got.append(json.loads(line))
        return len(got) >= want

    wait_for(more, WAIT, f"the agent's {want} messages")
    return got


@pytest.mark.parametrize("cgroup", [False, True], ids=["watch", "cgroup"])
def test_the_node_agent_enforces_memory_of_members_on_other_nodes(tmp_path, cgroup):
    if cgroup and CGROUPS is None:
        pytest.skip(NO_CGROUP)
    (tmp_path / "grow.py").write_text(GROW)
    (tmp_path / "small.py").write_text(SMALL)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PWE_NO_CGROUPS", None)
    if not cgroup:
        env["PWE_NO_CGROUPS"] = "1"
    before = _cgroups_left()
    asked = [{"k": wire.AGENT_RUN, "id": i, "argv": [sys.executable, str(tmp_path / script)], "cmd": script,
              "cwd": str(tmp_path / f"m{i}"), "env": {}, "mem": mem}
             for i, script, mem in ((1, "grow.py", 64), (2, "small.py", 512))]
    for msg in asked:
        assert set(msg) - {"k"} <= wire.AGENT_FIELDS[msg["k"]]
    proc = _agent(tmp_path, env)
    try:
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in asked))
        said = _said(proc, 4)  # (two started, two ended)
        proc.stdin.close()
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for m in said:
        assert set(m) - {"k"} <= wire.AGENT_FIELDS[m["k"]], m
    ended = {m["id"]: m for m in said if m["k"] == wire.AGENT_ENDED}
    assert ended[1]["reason"] == wire.REASON_OOM and ended[1]["rc"] != 0, ended
    assert ended[1]["why"].endswith("of its memoryPerMember 64 MB"), ended
    assert ended[2]["rc"] == 0 and "reason" not in ended[2], ended
    log = (tmp_path / "agent.log").read_text()
    assert ("each member in a cgroup of its own" if cgroup else "members' memory is looked at") in log, log
    assert _cgroups_left() <= before


def test_members_of_local_spawners_are_held_to_their_memory(tmp_path, write, monkeypatch):
    """Through `pwe run` with local spawners: the spawner (a node agent) kills it, the
    pilot reports its reason."""
    monkeypatch.setenv("PWE_SPAWNERS", "1")
    monkeypatch.setenv("PWE_NO_CGROUPS", "1")
    run, ends, _ = _sweep(tmp_path, write)
    _check(run, ends)


@pytest.mark.skipif(CGROUPS is None, reason=NO_CGROUP)
def test_cgroups_a_killed_process_left_are_removed_by_the_next(tmp_path):
    """A pilot killed with SIGKILL leaves its pwe-<pid> (and a member's cgroup in it): the
    next process that limits a member on the node removes them (pilot.cgroups.sweep_left)."""
    from pilot.cgroups import Cgroups
    from pilot.memwatch import MemoryWatch

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)  # (a pid that has exited: nothing of it runs)
    left = Path(CGROUPS.own) / f"pwe-{dead}"
    left.mkdir()
    try:
        (left / "c1").mkdir()
        w = MemoryWatch()
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                                 start_new_session=True)
        try:
            w.attach(child.pid, child.pid, 256)
            assert not left.exists()
            assert isinstance(w.cgroups, Cgroups) and str(child.pid) in (
                Path(w.limits[child.pid][2]) / "cgroup.procs").read_text().split()
        finally:
            child.communicate(b"")
        assert w.ended(child.pid) is None  # (it ended on its own: no reason)
        w.close()
        assert not Path(w.cgroups.base).exists()
    finally:
        for d in (left / "c1", left):
            if d.exists():
                d.rmdir()


@pytest.mark.parametrize("layout", ["v1", "v1-namespaced", "v2"])
def test_the_memory_cgroup_is_found_where_proc_says(tmp_path, layout):
    """find_cgroups reads /proc/self/cgroup and mountinfo (a made-up pair here, over plain
    directories standing for the mounts): v1's memory hierarchy, mounted from its root or
    from ours (a cgroup namespace: the mount's root is our cgroup); v2's, with memory in
    its subtree_control."""
    proc, mnt = tmp_path / "proc", tmp_path / "mnt"
    proc.mkdir()
    own = mnt / "jobs" / "j7"
    own.mkdir(parents=True)
    if layout == "v2":
        (proc / "cgroup").write_text("0::/jobs/j7\n")
        (proc / "mountinfo").write_text(f"30 25 0:26 / {mnt} rw,nosuid - cgroup2 cgroup2 rw\n")
        (own / "cgroup.subtree_control").write_text("cpu memory\n")
        cg = find_cgroups(str(proc))
        assert cg is not None and cg.v2 and Path(cg.own) == own
        return
    (proc / "cgroup").write_text("5:cpu,cpuacct:/jobs/j7\n4:memory:/jobs/j7\n0::/\n")
    root, point = ("/jobs/j7", own) if layout == "v1-namespaced" else ("/", mnt)
    (proc / "mountinfo").write_text(f"31 25 0:27 / {tmp_path} rw - cgroup cgroup rw,cpu,cpuacct\n"
                                    f"30 25 0:26 {root} {point} rw,nosuid - cgroup cgroup rw,memory\n")
    cg = find_cgroups(str(proc))
    assert cg is not None and not cg.v2 and Path(cg.own) == own


def test_an_end_with_a_reason_the_wire_does_not_list_is_malformed():
    """A signed ``end`` whose reason is none of wire.REASONS is never applied (the engine
    counts it malformed), whatever the reason holds; each listed one is taken."""
    key = wire.channel_key(b"s" * 32, "p1", True)
    end = {"k": wire.END, "n": "a", "m": 0, "a": 1, "rc": -9, "dt": 1.0, "out": {}, "t": 1.0, "q": 1}
    for bad in ("bogus", "", None, ["oom"], "OOM", "<b>oom</b>\x1b[31m"):
        (got,), _ = wire.decode(wire.encode([dict(end, reason=bad)], key), key)
        assert got["k"] == wire.MALFORMED and "unknown reason" in got["why"], got
    for reason in wire.REASONS:
        (got,), _ = wire.decode(wire.encode([dict(end, reason=reason)], key), key)
        assert got["k"] == wire.END and got["reason"] == reason
    assert wire.REASONS == ("exit", "oom", "walltime", "straggler", "lost", "halted", "quarantined", "reused",
                            "invalid")
