"""`$TMPDIR` per member (issue 14, from open-lmake): each member attempt gets a fresh,
empty, owner-only directory under the host's scratch, removed once it has ended (done,
failed, killed by its walltime); what a pilot killed with SIGKILL left is removed by the
next pilot of the run. Proven from the members' own ledger."""

import json
import os
import signal
import subprocess

import pytest
import sys
from pathlib import Path

from helpers import ROOT, on_ssh_nodes, read_journal, tmpfs, wait_for

ENV = dict(os.environ, PYTHONPATH=str(ROOT))

# each member: one ledger line (member, its TMPDIR, PWE_TMPDIR, what was in it, its mode),
# then it fills the directory (a file, a subdirectory with a file) before it ends
RECORD = ('echo "{{ i }} $TMPDIR $PWE_TMPDIR $(ls -A "$TMPDIR" | wc -l) $(stat -c %a "$TMPDIR")" >> LEDGER; '
          'echo x > "$TMPDIR/f"; mkdir "$TMPDIR/sub"; echo y > "$TMPDIR/sub/g"; ')


def setup(tmp_path: Path, members: int, tail: str, scheduling: str = "") -> tuple[Path, Path, Path]:
    scratch, ledger = tmp_path / "scratch", tmp_path / "ledger"
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  here:\n    protocol: local\n    cores_per_node: 4\n"
                                         f"    scratch: {scratch}\n")
    wf = tmp_path / "wf.yaml"
    run = RECORD.replace("LEDGER", str(ledger)) + tail
    wf.write_text(f"name: t\ndefaults: {{host: here}}\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {members}]}}}}\n"
                  f"    run: {json.dumps(run)}\n" + (f"    scheduling: {{{scheduling}}}\n" if scheduling else ""))
    return wf, scratch, ledger


def ledger_lines(ledger: Path) -> list[list[str]]:
    return [line.split() for line in ledger.read_text().splitlines()]


def check_fresh(lines: list[list[str]], scratch: Path) -> None:
    dirs = [w[1] for w in lines]
    assert len(set(dirs)) == len(dirs), "two attempts shared a $TMPDIR"
    for member, tmpdir, pwe_tmpdir, entries, mode in lines:
        assert tmpdir == pwe_tmpdir and Path(tmpdir).parent.parent == scratch, (tmpdir, scratch)
        assert entries == "0", f"member {member} found {entries} entries in its fresh $TMPDIR"
        assert mode == "700", f"member {member}'s $TMPDIR has mode {mode}"


def test_each_member_gets_a_fresh_empty_tmpdir_removed_when_it_ends(tmp_path):
    # every fifth member fails: its directory goes too
    wf, scratch, ledger = setup(tmp_path, 20, "[ $(( {{ i }} % 5 )) -ne 0 ]")
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(tmp_path / "run")],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0  # (4 members failed, as they were told to)
    lines = ledger_lines(ledger)
    assert sorted(int(w[0]) for w in lines) == list(range(20))  # each ran once
    check_fresh(lines, scratch)
    assert not any(Path(w[1]).exists() for w in lines), "a member's $TMPDIR is still there"
    # the pilot's own directory goes when it leaves (it may outlive the engine by a moment)
    wait_for(lambda: os.listdir(scratch) == [], 30, "the pilot's tmp directory to go")
    ends = [r for r in read_journal(tmp_path / "run") if r["e"] == "end"]
    assert sorted(r["m"] for r in ends if r.get("rc")) == [0, 5, 10, 15]


def test_a_member_killed_by_its_walltime_loses_its_tmpdir(tmp_path):
    wf, scratch, ledger = setup(tmp_path, 3, "exec sleep 60", "maxWallTimePerMember: 0.02")
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(tmp_path / "run")],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    ends = [r for r in read_journal(tmp_path / "run") if r["e"] == "end"]
    assert ends and all(r.get("reason") == "walltime" for r in ends), ends
    lines = ledger_lines(ledger)
    check_fresh(lines, scratch)
    assert {int(w[0]) for w in lines} == {0, 1, 2}
    assert not any(Path(w[1]).exists() for w in lines)
    wait_for(lambda: os.listdir(scratch) == [], 30, "the pilot's tmp directory to go")


@pytest.mark.parametrize("guardian", [True, False], ids=["by its guardian", "by the next pilot"])
def test_what_a_pilot_killed_with_sigkill_left_is_removed(tmp_path, guardian):
    """A pilot killed with SIGKILL cannot tidy its members' $TMPDIRs. Its guardian does,
    once the members it left have ended (pilot/guardian.py); where there was none
    (PWE_NO_GUARDIAN=1 here; a guardian killed with its pilot), the next pilot of the run
    on the node removes them, and says so in its log."""
    wf, scratch, ledger = setup(tmp_path, 4, "sleep 2")
    run_dir = tmp_path / "run"
    env = ENV if guardian else dict(ENV, PWE_NO_GUARDIAN="1")
    engine = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(run_dir)], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: ledger.exists() and len(ledger_lines(ledger)) >= 4, 60, "the members to start")
        events = (run_dir / "pilots" / "p1" / "events.jsonl").read_text().splitlines()
        pid = next(json.loads(e)["pid"] for e in events if '"k":"up"' in e)
        left = [Path(w[1]) for w in ledger_lines(ledger)]
        os.kill(pid, signal.SIGKILL)
        out, err = engine.communicate(timeout=180)
    finally:
        if engine.poll() is None:
            engine.kill()
    assert engine.returncode == 0, err
    assert all(p.parent.name.endswith(f"-{pid}") for p in left)
    lines = ledger_lines(ledger)
    check_fresh(lines, scratch)
    # every member finished (those the dead pilot ran: in its guardian's grace, or again on
    # the next), and nothing of the killed pilot, nor of the next, is left under the scratch
    assert {int(w[0]) for w in lines} == {0, 1, 2, 3}
    assert not any(p.exists() for p in left)
    wait_for(lambda: os.listdir(scratch) == [], 30, "the pilots' tmp directories to go")
    if not guardian:  # the next pilot removed them (the killed one could not), and says so in its log
        killed_base = str(left[0].parent)
        logs = "".join(p.read_text() for p in run_dir.glob("pilots/p*/pilot.log") if p.parent.name != "p1")
        assert f"removed {killed_base}, left by a pilot of this run that is gone" in logs, logs


def test_tmpdirs_sweep_only_dead_pilots_of_the_same_run(tmp_path):
    from pilot.tmpdirs import TmpDirs

    run = tmp_path / "run" / "pilots"
    (run / "p1").mkdir(parents=True)
    mine = TmpDirs(str(run / "p1"), str(tmp_path / "s"))
    path = mine.make("n", 3, 1)
    assert os.listdir(path) == [] and oct(os.stat(path).st_mode & 0o777) == "0o700"
    dead = Path(mine.base.rsplit("-", 1)[0] + "-999999999")  # a pilot of this run whose process is gone
    (dead / "n.1.1").mkdir(parents=True)
    other_run = Path(str(tmp_path / "s" / "pwe-0000000000-p1-") + f"{mine.host}-999999999")
    other_run.mkdir()
    assert mine.sweep() == [str(dead)]
    assert not dead.exists() and other_run.exists() and Path(path).exists()  # its own live directory stays
    mine.remove("n", 3, 1)
    mine.close()
    assert sorted(os.listdir(tmp_path / "s")) == [other_run.name]


def max_overlap(ledger: Path) -> int:
    """The most members running at once, from the start and end times in their ledger."""
    events = []
    for w in ledger_lines(ledger):
        if w[0] in ("start", "end"):
            events.append((float(w[2]), 1 if w[0] == "start" else -1))
    running = most = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # (an end before a start at the same instant)
        running += step
        most = max(most, running)
    return most


def test_the_tmp_pool_holds_members_to_what_it_allows(tmp_path):
    """tmp_per_node 300 MB, tmpPerMember 100: never more than 3 at once on 4 cores, and 3 is
    reached; with tmpPerMember 200, one at a time."""
    ledger = tmp_path / "ledger"
    run = (f'echo "start {{{{ i }}}} $(date +%s.%N)" >> {ledger}; sleep 1; '
           f'echo "end {{{{ i }}}} $(date +%s.%N)" >> {ledger}')
    for tmp, allowed in ((100, 3), (200, 1)):
        ledger.unlink(missing_ok=True)
        (tmp_path / "hosts.yaml").write_text("hosts:\n  here:\n    protocol: local\n    cores_per_node: 4\n"
                                             f"    tmp_per_node: 300\n    scratch: {tmp_path / 'scratch'}\n")
        wf = tmp_path / "wf.yaml"
        wf.write_text(f"name: t\ndefaults: {{host: here}}\nnodes:\n  m:\n    parameters: {{i: {{range: [0, 6]}}}}\n"
                      f"    run: {json.dumps(run)}\n    scheduling: {{tmpPerMember: {tmp}}}\n")
        proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--fresh",  # (the second: not reused)
                               "--run-dir", str(tmp_path / f"run{tmp}")],
                              cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        starts = [w[1] for w in ledger_lines(ledger) if w[0] == "start"]
        assert sorted(map(int, starts)) == list(range(6))  # each ran once
        assert max_overlap(ledger) == allowed, ledger.read_text()


def test_a_member_no_node_can_hold_fails_at_once_with_the_reason(tmp_path):
    # the host states its pool: refused before anything runs, in one line
    (tmp_path / "hosts.yaml").write_text("hosts:\n  here:\n    protocol: local\n    tmp_per_node: 300\n"
                                         "  measured:\n    protocol: local\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: t\nnodes:\n  m:\n    host: here\n    run: 'true'\n    scheduling: {tmpPerMember: 400}\n")
    proc = subprocess.run([sys.executable, "-m", "pwe", "validate", str(wf)], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "needs 400 MB of $TMPDIR (tmpPerMember) but host 'here' has 300 MB per node" in proc.stderr
    # the pool measured by the pilot (free space under the tmp root): far more than any disk
    wf.write_text("name: t\nnodes:\n  m:\n    host: measured\n    run: 'true'\n"
                  "    scheduling: {tmpPerMember: 900000000}\n")  # (under the bound of 10^9, past any disk)
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(tmp_path / "run")],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    ends = [r for r in read_journal(tmp_path / "run") if r["e"] == "end"]
    assert len(ends) == 1 and "needs 900000000 MB of $TMPDIR (tmpPerMember)" in ends[0].get("why", ""), ends


def test_on_slurm_each_member_gets_its_own_tmpdir_and_the_pool_holds(slurm_cluster, tmp_path):
    """The same inside a real SLURM pilot job: fresh directories under the host's scratch,
    gone afterwards, and tmp_per_node 200 / tmpPerMember 100 running 2 at once on 8 cores."""
    scratch, ledger = tmp_path / "scratch", tmp_path / "ledger"
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  cluster:\n    protocol: slurm\n    cores_per_node: 8\n    max_nodes: 1\n"
        f"    partitions: [{{name: debug}}]\n    scratch: {scratch}\n    tmp_per_node: 200\n")
    run = RECORD.replace("LEDGER", str(ledger)) + (
        f'echo "start {{{{ i }}}} $(date +%s.%N)" >> {ledger}.t; sleep 1; echo "end {{{{ i }}}} $(date +%s.%N)" >> {ledger}.t')
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: t\ndefaults: {{host: cluster}}\nnodes:\n  m:\n    parameters: {{i: {{range: [0, 6]}}}}\n"
                  f"    run: {json.dumps(run)}\n    scheduling: {{tmpPerMember: 100, maxWallTime: 5}}\n")
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(tmp_path / "run")],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = ledger_lines(ledger)
    assert sorted(int(w[0]) for w in lines) == list(range(6))
    check_fresh(lines, scratch)
    assert not any(Path(w[1]).exists() for w in lines)
    wait_for(lambda: os.listdir(scratch) == [], 60, "the pilot's tmp directory to go")
    assert max_overlap(Path(f"{ledger}.t")) == 2


def test_tmp_per_member_reads_the_same_from_yaml_and_xml(tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts:\n  here: {protocol: local, cores_per_node: 4, tmp_per_node: 300}\n")
    (tmp_path / "wf.yaml").write_text("name: t\nnodes:\n  m:\n    host: here\n    parameters: {i: {range: [0, 3]}}\n"
                                      "    run: 'true'\n    scheduling: {tmpPerMember: 100}\n")
    (tmp_path / "wf.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<workflow name="t">\n  <node id="m" host="here">\n'
        '    <parameter name="i"><range start="0" stop="3"/></parameter>\n    <run>true</run>\n'
        '    <scheduling><tmpPerMember>100</tmpPerMember></scheduling>\n  </node>\n</workflow>\n')
    plans = []
    for name in ("wf.yaml", "wf.xml"):
        proc = subprocess.run([sys.executable, "-m", "pwe", "plan", "--json", name], cwd=tmp_path, env=ENV,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        d = json.loads(proc.stdout)
        plans.append([(n["id"], n["members"], n["scheduling"]) for n in d["nodes"]])
    assert plans[0] == plans[1] and plans[0][0][2] == {"tmpPerMember": 100}
    # a bad value is one line with the file and line, in both forms
    (tmp_path / "bad.xml").write_text((tmp_path / "wf.xml").read_text().replace(">100<", ">0<"))
    proc = subprocess.run([sys.executable, "-m", "pwe", "validate", "bad.xml"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "bad.xml:" in proc.stderr, \
        proc.stderr


def test_members_on_ssh_nodes_get_their_own_tmpdir_from_the_node_agent(ssh_nodes, tmp_path):
    """Members the pilot runs on other nodes (its node agents over ssh) get the same: a fresh
    owner-only directory, made and removed by the agent on that node."""
    scratch, ledger = tmp_path / "scratch", tmp_path / "ledger"
    on_ssh_nodes(tmp_path, extra=f"    scratch: {scratch}\n")
    run = RECORD.replace("LEDGER", str(ledger)) + f'echo "where {{{{ i }}}} $(hostname)" >> {ledger}.where'
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: t\ndefaults: {{host: four}}\nnodes:\n  m:\n    parameters: {{i: {{range: [0, 16]}}}}\n"
                  f"    run: {json.dumps(run)}\n")
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(tmp_path / "run")],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    lines = ledger_lines(ledger)
    assert sorted(int(w[0]) for w in lines) == list(range(16))
    where = {w[2] for w in ledger_lines(Path(f"{ledger}.where"))}
    assert len(where - {os.uname().nodename}) >= 2, where  # members ran on the ssh nodes
    check_fresh(lines, scratch)
    assert not any(Path(w[1]).exists() for w in lines)
    wait_for(lambda: os.listdir(scratch) == [], 30, "the pilot's tmp directories to go")


def test_an_empty_tmpdir_is_handed_on_anything_else_goes(tmp_path):
    from pilot.tmpdirs import TmpDirs

    (tmp_path / "run" / "pilots" / "p1").mkdir(parents=True)
    t = TmpDirs(str(tmp_path / "run" / "pilots" / "p1"), str(tmp_path / "s"))
    first = t.make("n", 0, 1)
    t.remove("n", 0, 1)  # left empty: the next member gets it, as fresh as a new one
    assert t.make("n", 1, 1) == first and os.listdir(first) == []
    Path(first, "f").write_text("x")  # member 1 leaves a file: the directory goes
    t.remove("n", 1, 1)
    assert not os.path.exists(first)
    second = t.make("n", 2, 1)
    assert second != first and os.listdir(second) == []
    os.chmod(second, 0o755)  # member 2 opens it to others: not handed on
    t.remove("n", 2, 1)
    assert not os.path.exists(second)
    t.remove("n", 2, 1)  # (said twice: nothing more happens)
    t.close()
    assert os.listdir(tmp_path / "s") == []


@pytest.mark.parametrize("inodes, what", [(2, "$TMPDIR"), (3, "output file")])
def test_a_node_whose_scratch_takes_no_directory_fails_no_member_and_the_run_stops_intact(tmp_path, inodes, what):
    """A "black hole" node: its scratch full (a real tmpfs whose inodes are all taken, as a
    job before this one can leave a node's /tmp). Left to fail, every member would fail
    there in a millisecond, retries and all. Instead none fails and none spends an attempt:
    each pilot hands its members back and leaves; three such pilots in a row stop the run
    in one line (exit 3); with room again, `pwe resume` runs every member once, as its
    first attempt (the members' own ledger and `pwe show`). With one inode left the
    member's $TMPDIR cannot be made; with two (the pilot's directory and the member's
    $TMPDIR), its output file cannot."""
    n = 12
    wf, scratch, ledger = setup(tmp_path, n, "", scheduling="")
    wf.write_text(wf.read_text().replace("    run:", "    retries: 2\n    run:", 1))
    with tmpfs(scratch, f"size=4m,nr_inodes={inodes}"):
        if inodes == 2:
            (scratch / "left-by-another-job").touch()  # (its last inode)
            with pytest.raises(OSError):
                (scratch / "one-more").touch()
        run_dir = tmp_path / "run"
        proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(run_dir)],
                              cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert "3 pilots in a row found no scratch for a member on any of their nodes" in last, last
        assert f"the last: cannot make a member's {what} under {scratch}: No space left on device" in last, last
        assert "free the nodes' scratch" in last, last
        assert not ledger.exists(), "a member ran without its $TMPDIR"
        recs = read_journal(run_dir)
        assert not [r for r in recs if r["e"] in ("end", "ends", "start")], "a member started, or was failed"
        status = json.loads(subprocess.run([sys.executable, "-m", "pwe", "status", str(run_dir), "--json"],
                                           env=ENV, capture_output=True, text=True, timeout=60).stdout)
        assert status["totals"]["failed"] == 0 and status["totals"]["done"] == 0, status["totals"]
        subprocess.run(["mount", "-o", "remount,nr_inodes=10000", str(scratch)], check=True)
        again = subprocess.run([sys.executable, "-m", "pwe", "resume", str(run_dir)], cwd=tmp_path, env=ENV,
                               capture_output=True, text=True, timeout=180)
        assert again.returncode == 0, again.stderr
        assert sorted(int(w[0]) for w in ledger_lines(ledger)) == list(range(n))
        shown = json.loads(subprocess.run([sys.executable, "-m", "pwe", "show", str(run_dir), "--json"], env=ENV,
                                          capture_output=True, text=True, timeout=60).stdout)
        assert [(m["state"], m["attempts"]) for m in shown] == [("done", 1)] * n, shown


def test_pilots_that_could_start_nothing_stop_the_run_only_in_a_row():
    """pwe/engine/setups.py Setups: a pilot that starts a member between two that handed
    everything back (no $TMPDIR on any node) breaks the row; three in a row stop the run."""
    from pilot.wire import NO_SCRATCH
    from pwe.base.errors import RunStopped
    from pwe.engine.setups import Setups

    class Ledger:
        def __init__(self):
            self.records = []

        def take(self, rec):
            self.records.append(rec)

    class Pilot:  # (what Setups asks of a PilotHandle, and tells it)
        def __init__(self, pid):
            self.id, self.dir, self.full, self.refused, self.sent = pid, f"/run/pilots/{pid}", False, set(), []

        def send(self, msg):
            self.sent.append(msg)

        def stop_taking(self):
            self.full = True
            self.send({"k": "stop"})

        def refuse(self, nid, i):
            self.refused.add((nid, i))

    setups = Setups({}, Ledger())
    back = {"k": "back", "n": "a", "m": 0, "why": f"{NO_SCRATCH} (cannot make a member's $TMPDIR under /s: No space)"}
    p1, p2, p3, p4, p5 = (Pilot(f"p{i}") for i in range(1, 6))
    for p in (p1, p2):
        setups.news(p, back)
        setups.news(p, back)  # (one STOP a pilot, however many come back)
        assert p.full and [m["k"] for m in p.sent] == ["stop"]
    setups.news(p3, {"k": "start", "n": "a", "m": 1})  # (p3 ran a member: the row is broken)
    setups.news(p4, back)
    setups.news(p5, back)
    setups.check()  # (two in a row since)
    setups.news(Pilot("p6"), back)
    with pytest.raises(RunStopped, match=r"3 pilots in a row found no scratch for a member.*under /s: No space"):
        setups.check()
