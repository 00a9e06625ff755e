"""Identity (issue 45, part 2; HOSTILE.md's "identity" class): a process pwe started is
known by its pid and its start time, never found by a pattern over command lines; a
refusal by a run's engine is final, the service never takes the run up again.

On real processes: a real sshd node for the interactive protocol (its pilot's pid and
start time read there through the same runner), a real service (Celery worker and beat,
the embedded broker) for the refusal.
"""

import json
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

from helpers import run_cli, wait_for

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: a run directory's name that is a regular expression matching other names
REGEX_NAME = "r.*[x]+(y)"
#: a name the expression matches and the literal name is not
STRANGER_NAME = "rZZZxxy"


def _alive(pid: int) -> bool:
    from pilot.identity import is_same

    return is_same(pid, None)


def _stranger(tmp_path: Path, script_rel: str) -> subprocess.Popen:
    """A process of somebody else's whose command line holds a path the regular expression
    of the run directory's name matches, but not the literal name."""
    path = tmp_path / STRANGER_NAME / script_rel
    return subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.2)", str(path)],
                            start_new_session=True)


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.fixture
def head_runner(ssh_nodes):
    """A runner on the real sshd of 127.0.0.1:2222 (this machine's processes and files)."""
    from protocols.ssh import SshRunner

    _, addr, port = ssh_nodes.local
    r = SshRunner(f"ssh://root@{addr}:{port}", identity_file=str(ssh_nodes.identity),
                  known_hosts=str(ssh_nodes.known_hosts))
    yield r
    r.close()


class _AnswerLost:
    """The runner, whose answer to the pilot's start is lost (the command ran there; the
    connection dropped before its output came back), as a timeout says it."""

    def __init__(self, runner):
        self.runner, self.lost = runner, False

    def run(self, argv, timeout=30.0, **kw):
        from pwe.base.errors import CommandTimeout

        res = self.runner.run(argv, timeout=timeout, **kw)
        if not self.lost and "nohup" in " ".join(argv):
            self.lost = True
            raise CommandTimeout(argv, timeout)
        return res

    def close(self):
        self.runner.close()


def test_a_pilot_whose_start_timed_out_is_found_by_its_own_record_never_a_stranger_matching_a_pattern(
        head_runner, tmp_path):
    """(a) The run directory's name is a regular expression; a stranger's command line
    matches it. The pilot's start over ssh times out: pwe finds the pilot it started (the
    PID.START its start wrote into the pilot's directory, checked there), never the
    stranger; cancel signals the pilot and leaves the stranger alone."""
    from protocols.interactive import Interactive

    pilot_dir = tmp_path / REGEX_NAME / "pilots" / "p1"
    pilot_dir.mkdir(parents=True)
    script = pilot_dir / "pilot.sh"
    script.write_text("while :; do sleep 0.2; done\n")
    stranger = _stranger(tmp_path, "pilots/p1/pilot.sh")
    pilot_pid = None
    try:
        wait_for(lambda: _alive(stranger.pid), 30, "the stranger to run")
        proto = Interactive(_AnswerLost(head_runner))
        job = types.SimpleNamespace(pilot_dir=str(pilot_dir), job_name="pwe-r-p1")
        job_id = proto.submit(job, str(script))
        pid, _, started = job_id.partition(".")
        assert pid.isdigit() and started.isdigit(), job_id
        pilot_pid = int(pid)
        assert pilot_pid != stranger.pid, "the stranger was taken for the pilot"
        from pilot.identity import start_time

        assert start_time(pilot_pid) == int(started)  # that very process, started then
        assert Path(f"/proc/{pilot_pid}/cwd").resolve() == pilot_dir.resolve()
        assert proto.status([job_id])[job_id].value == "running"
        # the same pid with another start time is another process: not running, never signalled
        other = f"{pilot_pid}.{int(started) + 1}"
        assert proto.status([other])[other].value == "completed"
        proto.cancel([other])
        assert _alive(pilot_pid)
        proto.cancel([job_id])
        wait_for(lambda: not _alive(pilot_pid), 30, "the pilot to end at its cancel")
        assert _alive(stranger.pid), "cancel signalled the stranger"
    finally:
        if pilot_pid is not None and _alive(pilot_pid):
            os.kill(pilot_pid, signal.SIGKILL)
        _end(stranger)


def test_pwe_cancel_of_a_run_in_a_directory_named_by_a_pattern_signals_its_pilot_alone(head_runner, ssh_nodes,
                                                                                       tmp_path):
    """(a) A real run on the interactive protocol in a run directory named with regular
    expression characters, a stranger whose command line matches that expression:
    the journal records the pilot by pid and start time, and pwe cancel leaves the
    stranger alive."""
    _, addr, port = ssh_nodes.local
    (tmp_path / "hosts.yaml").write_text(f"""
hosts:
  head:
    protocol: ssh
    contact: ssh://root@{addr}:{port}
    identity_file: {ssh_nodes.identity}
    known_hosts: {ssh_nodes.known_hosts}
    cores_per_node: 2
""")
    go = tmp_path / "go"
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: ident\nnodes:\n  m:\n    parameters: {{i: {{range: [0, 2]}}}}\n"
                  f"    run: 'while [ ! -e {go} ]; do sleep 0.1; done'\n    scheduling: {{maxWallTime: 5}}\n")
    run_dir = tmp_path / REGEX_NAME
    stranger = _stranger(tmp_path, "pilots/p1/job.out")
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home)}
    try:
        rc, out, err = run_cli("submit", wf, "--host", "head", "--run-dir", run_dir, cwd=tmp_path, env=env)
        assert rc == 0, err

        def pilot_record():
            try:
                recs = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
            except (OSError, ValueError):
                return None
            return next((r for r in recs if r.get("e") == "pilot"), None)
        rec = wait_for(pilot_record, 90, "the pilot's record")
        pid, _, started = rec["job"].partition(".")
        from pilot.identity import start_time

        assert int(pid) != stranger.pid and start_time(int(pid)) == int(started)
        rc, out, err = run_cli("cancel", run_dir, cwd=tmp_path, env=env, timeout=120)
        assert rc == 0, err
        wait_for(lambda: not _alive(int(pid)), 60, "the pilot to end")
        assert _alive(stranger.pid), "pwe cancel signalled the stranger"
    finally:
        go.touch()
        _end(stranger)


# -- (c) a refusal is final ----------------------------------------------------------------------
LINK_WF = """name: refusal
nodes:
  m:
    inputs: [data.txt]
    run: 'cat data.txt >> {ledger}'
"""


def test_the_service_never_takes_up_again_a_run_its_engine_refused(tmp_path):
    """(c) Submitted while the service is down (the embedded broker keeps it); its input
    became a link out of the workspace meanwhile. The engine refuses the run as it begins:
    the refusal is recorded in the run, the supervisor starts no engine again (a resume
    would skip the check), the service says refused, nothing ran."""
    from helpers import Service

    ws = tmp_path / "ws"
    ws.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    ledger = tmp_path / "ledger"
    (ws / "data.txt").write_text("data\n")
    wf = ws / "wf.yaml"
    wf.write_text(LINK_WF.format(ledger=ledger))
    svc = Service(tmp_path / "home")
    try:
        rc, out, err = svc.pwe("submit", "--service", wf)
        assert rc == 0, err
        run_id = out.strip()
        (ws / "data.txt").unlink()
        (ws / "data.txt").symlink_to(secret)  # a link out of the workspace now
        svc.ok("service", "start", "--json")
        record = svc.dir / "submissions" / f"{run_id}.json"
        wait_for(lambda: record.is_file() and json.loads(record.read_text()).get("final"), 90,
                 "the service to settle the run")
        rec = json.loads(record.read_text())
        assert rec["phase"] == "refused", rec
        assert "a link out of" in rec["error"] and "\n" not in rec["error"]
        assert int(rec.get("spawns") or 0) == 1, rec  # one engine, the one that refused
        assert not ledger.exists(), "the refused run's member ran"
        assert (Path(rec["run_dir"]) / "refused.json").is_file()
        assert svc.run(run_id)["phase"] == "refused"
        # pwe resume of it is refused too, in one line
        rc, out, err = svc.pwe("resume", run_id)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "refused" in err and "Traceback" not in err, err
        assert not ledger.exists()
    finally:
        svc.cleanup()


def test_pwe_submit_service_says_an_input_the_engine_would_refuse_in_one_line(tmp_path):
    """(c) The client checks what the run's engine would refuse (an input that links out of
    the workspace) and says it: one line, exit 2; nothing is sent."""
    from helpers import Service, one_line_error

    ws = tmp_path / "ws"
    ws.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    (ws / "data.txt").symlink_to(secret)
    wf = ws / "wf.yaml"
    wf.write_text(LINK_WF.format(ledger=tmp_path / "ledger"))
    svc = Service(tmp_path / "home")
    line = one_line_error(*svc.pwe("submit", "--service", wf))
    assert "data.txt" in line and "a link out of" in line
    assert not (svc.dir / "submissions").is_dir() or not any((svc.dir / "submissions").iterdir())
