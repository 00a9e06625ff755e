"""What the tests share that is not a fixture (tests/conftest.py holds the fixtures): the
paths of the source tree, the one waiting helper (:func:`wait_for`) and its named pause, the
real CLI in a subprocess (:func:`run_cli`) and in this process (:func:`call_cli`), readers of a run's journal and of the members' own ledgers, the
test services' and clusters' handles and set-up, and the processes of a run.

Tests import it by name (``from helpers import wait_for``): tests/ is on ``sys.path`` as
the directory of the suite's conftest."""

import contextlib as _contextlib
import dataclasses as _dataclasses
import json as _json
import os as _os
import signal as _signal
import subprocess as _subprocess
import time as _time
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EXAMPLES = ROOT / "examples"


def read_journal(run_dir) -> list[dict]:
    """A finished run's journal, every line whole (a torn line fails the test), as the
    records its lines stand for (pwe.runstate.journal.unpack: one assign a member, an end carrying
    its start as that start and the end)."""
    import json

    from pwe.runstate.journal import unpack

    out = []
    with open(Path(run_dir) / "journal.jsonl", "rb") as fh:
        for line in fh:
            assert line.endswith(b"\n"), "torn journal line"
            out.extend(unpack(json.loads(line)))
    return out


#: Two nodes of n members each (b[i] after a[i]) that write their own ledger: a line as each
#: starts and as each ends, with node, index and attempt. LEDGER_WF.format(ledger=PATH, n=N, sleep=S)
#: ("end" only when its sleep ran out: a batch system that signals a job's processes one by
#: one may kill the sleep before the shell, which would write "end" for cut-short work.)
LEDGER_WF = """
name: ledger
properties: {{ledger: {ledger}}}
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; sleep {sleep} && echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}
  b:
    after: [a]
    parameters: {{i: {{range: [0, {n}]}}}}
    run: echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; sleep {sleep} && echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}
"""


#: how long a test waits for a condition by default: room for a machine busy with other work
#: (CI shares its machine); a condition that holds returns at once, so only a failure waits it
WAIT = 120.0


def wait_for(cond, timeout: float = WAIT, what: str = "condition", step: float = 0.05):
    """Poll ``cond`` every ``step`` s until it returns something true, and return that; fail
    the test with ``what`` once ``timeout`` s pass without. The one waiting helper: a test
    waits on a condition, never a fixed time (tests/project/test_test_hygiene.py holds every file to it)."""
    deadline = _time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if _time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} ({timeout:g} s)")
        _time.sleep(step)


def let_time_pass(seconds: float, why: str) -> None:
    """Let ``seconds`` pass on purpose, for ``why``: to show that something does NOT happen
    within a span (a second fire, a refused post, an XSS payload), to let a process that runs
    on its own go on meanwhile (the pilot of a killed engine), or to pick a random moment.
    Never to wait for something to happen: that is :func:`wait_for`."""
    assert why, "say why time must pass"
    _time.sleep(seconds)


def count_ends(run_dir) -> int:
    """How many members' ends a run's journal has (0 before it has one): its end records,
    and the rows of its ``ends`` records (pwe/runstate/journal.py; a line being written is not one)."""
    import json

    try:
        data = (Path(run_dir) / "journal.jsonl").read_bytes()
    except FileNotFoundError:
        return 0
    n = data.count(b'"e":"end"')
    for line in data.split(b"\n"):
        if line.startswith(b'{"e":"ends"'):
            try:
                n += len(json.loads(line)["m"])
            except ValueError:
                pass
    return n


def ledger_counts(ledger, attempts: bool = False):
    """(starts, ends): Counters of the ledger's lines by what follows "start" / "end" (the
    node and index, and the attempt with ``attempts``), from the members' own records."""
    from collections import Counter

    lines = [line.split() for line in Path(ledger).read_text().splitlines()]
    cut = None if attempts else -1
    return tuple(Counter(tuple(words[1:cut]) for words in lines if words[0] == what) for what in ("start", "end"))


def sample_pilot_job(**kw):
    """A PilotJob with a value in every field, for job-script and scheduler tests."""
    from protocols.base import PilotJob

    base = dict(pilot_id="p1", pilot_dir="/runs/r1/pilots/p1", job_name="pwe-r1-p1", nodes=2, cores_per_node=8,
                walltime=90, python="/usr/bin/python3", pythonpath="/opt/pwe", partition="short", account="abc123",
                setup=["module load python"], env={"OMP_PLACES": "cores", "ODD": "a b'c"},
                pilot_args=["--heartbeat", "5"], notify=["pwe", "notify", "--run", "/runs/r1", "--pilot", "p1"])
    base.update(kw)
    return PilotJob(**base)


#: The environment of a test whose hosts file describes a cluster that is not this machine's:
#: SLURM's commands find no configuration, so pwe does not check the hosts against the
#: machine's test cluster (pwe/planning/sitecheck.py asks sinfo, and skips the check when it cannot).
NO_SLURM = {"SLURM_CONF": "/dev/null"}


def run_cli(*args, cwd=None, timeout=120, env=None):
    """Run the real console entry point in a subprocess: exit status, stdout, stderr.

    Works from any ``cwd`` (e.g. tmp_path, so that ./pwe-runs lands there): the source
    tree is put on PYTHONPATH. ``env`` adds variables to the inherited environment."""
    import os
    import subprocess

    full = dict(os.environ)
    full["PYTHONPATH"] = str(ROOT) + (os.pathsep + full["PYTHONPATH"] if full.get("PYTHONPATH") else "")
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=full, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout, proc.stderr


def child_pids() -> set[int]:
    """The process ids of this process's children (Linux; elsewhere none)."""
    import glob

    found = set()
    for path in glob.glob("/proc/self/task/*/children"):
        try:
            with open(path) as fh:
                found.update(int(pid) for pid in fh.read().split())
        except OSError:
            pass
    return found


def _end_warm_pilot(before) -> None:
    """End a pilot interpreter started ahead of its order during a call (not ``before``'s)."""
    from protocols import warmpilot

    if warmpilot._warm is not None and warmpilot._warm is not before:
        proc = warmpilot.take()
        proc.kill()
        proc.wait()
        proc.stdin.close()


def call_cli(*args, cwd=None, env=None):
    """:func:`run_cli` in this process: ``pwe ARGS`` through :func:`pwe.cli.main.main` (what
    the console entry point calls, less its exit by ``os._exit``) under click's CliRunner,
    stdout and stderr captured apart: exit status, stdout, stderr, as the subprocess gives
    them (tests/cli/test_in_process.py holds the two alike). For refusals and words, where
    a process of its own adds nothing but its start (~0.5 s); what is about the process (a
    runaway bounded in time or memory, signals, a traceback reaching the terminal, an
    engine, pilots or members, a terminal) stays on :func:`run_cli`.

    ``cwd``: the directory for the call (changed back after); ``env``: variables set for the
    call only (None: unset); the width of help and tables is COLUMNS', else 80, as in a
    subprocess whose streams are pipes. An exception pwe does not map to an exit status is
    raised, as the test's failure, never taken as exit status 1; a command that would leave
    by ``os._exit`` (a run that ran: :func:`pwe.cli.base.leave`) fails the test the same
    way, and so does one that leaves a process behind (an engine, a pilot: such a call
    belongs in a process of its own, which ends them with it). A local pilot's interpreter
    that ``pwe run`` starts ahead of its order (protocols/warmpilot.py) is ended with the
    call, as the program's exit ends it (here it would wait a minute, for the next run in
    this process to take it)."""
    import os

    import click.formatting
    from click.testing import CliRunner

    import pwe.cli.base
    from protocols import warmpilot
    from pwe.cli.main import main

    def no_leaving(status):
        raise AssertionError(f"pwe {' '.join(map(str, args))} left by os._exit({status}) (a run ran): "
                             "call it in a process of its own (run_cli)")

    leave, warm, children = pwe.cli.base.leave, warmpilot._warm, child_pids()
    argv, here = sys.argv, os.getcwd()
    env = dict(env or {})
    if not (env.get("COLUMNS") or os.environ.get("COLUMNS")):
        env["COLUMNS"] = "80"  # (the width click and rich take where no stream is a terminal, as in run_cli)
    with CliRunner().isolation(env=env) as (out, err, _):
        click.formatting.FORCED_WIDTH = None  # (CliRunner's 80: the width is COLUMNS', as in the subprocess)
        sys.argv = ["pwe", *map(str, args)]
        pwe.cli.base.leave = no_leaving  # (and in the modules that import it while this call runs)
        try:
            if cwd is not None:
                os.chdir(cwd)
            main()
            status = 0
        except SystemExit as exc:  # (as the interpreter exits: None is 0, an int itself, anything else said, 1)
            status = exc.code
            if status is None:
                status = 0
            elif not isinstance(status, int):
                sys.stderr.write(f"{status}\n")
                status = 1
        finally:
            _end_warm_pilot(warm)
            for module in [m for name, m in sys.modules.items() if name.startswith("pwe.cli")]:
                if getattr(module, "leave", None) is no_leaving:
                    module.leave = leave
            sys.argv = argv
            os.chdir(here)
            sys.stdout.flush()
            sys.stderr.flush()
        said = status, out.getvalue().decode("utf-8"), err.getvalue().decode("utf-8")
    started = child_pids() - children
    assert not started, (f"pwe {' '.join(map(str, args))} started processes {sorted(started)} (an engine, a pilot): "
                         f"call it in a process of its own (run_cli); it said {said}")
    return said


# ---------------------------------------------------------------------------------------
# Real test services (tests/services/): munge + a one-node SLURM cluster with PBS-style
# qsub/qstat/qdel over it, four SSH "nodes" in network namespaces, and an sshd on
# 127.0.0.1:2222. tests/run.sh starts them before pytest; these fixtures run
# tests/services/setup.sh once per session as well (about 2 s when all is up) so that a
# bare `pytest` works too. Services that cannot start: pytest.fail under CI, else skip.

SERVICES = ROOT / "tests" / "services"
def _services_setup():
    return run_setup_script(SERVICES / "setup.sh")


def service_up(output, prefix):
    """Whether setup.sh's output has a line '<prefix> ... up' (and not FAILED)."""
    return any(l.startswith(prefix) and " up" in l and "FAILED" not in l for l in output.splitlines())


def need(cond: bool, why: str) -> None:
    """Go on when ``cond`` holds; else skip the test with ``why``, or fail it under CI (where
    whatever the tests need is installed: a missing part is a failure, never a skip)."""
    if cond:
        return
    if _os.environ.get("CI"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def require_services(*prefixes):
    """Fail (CI) or skip unless setup.sh reported a line '<prefix> ... up' for each prefix."""
    rc, out = _services_setup()
    missing = [p for p in prefixes if rc is None or not service_up(out, p)]
    if not missing:
        return
    names = ", ".join(p.rstrip(":") for p in missing)
    why = out if rc is None else f"tests/services/setup.sh exited {rc}; not up: {names}\n{out}"
    if _os.environ.get("CI"):
        pytest.fail(f"test services unavailable under CI: {why}", pytrace=False)
    pytest.skip(f"test services unavailable: {why}")


def _scontrol_job(job_id):
    """The fields of `scontrol show job -o ID` as a dict ({} once SLURM forgot the job)."""
    p = _subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        return {}
    return dict(f.split("=", 1) for f in p.stdout.split() if "=" in f)


@_dataclasses.dataclass(frozen=True)
class SlurmCluster:
    """The running one-node SLURM cluster. sbatch/srun/squeue/scontrol/scancel and
    qsub/qstat/qdel (slurm-wlm-torque) are on PATH and talk to it."""
    node: str                    # "localhost"
    cpus: int                    # 8
    partitions: tuple            # ("debug", "short")
    default_partition: str       # "debug"
    time_limits: dict            # minutes per partition, None = no limit: {"debug": None, "short": 10}
    conf: Path = Path("/etc/slurm/slurm.conf")
    log_dir: Path = Path("/var/tmp/pwe-slurm/log")

    FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                       "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})

    def job(self, job_id):
        """`scontrol show job` fields as a dict ({} when SLURM no longer knows it)."""
        return _scontrol_job(job_id)

    def job_state(self, job_id):
        return self.job(job_id).get("JobState")

    # The controller, stopped and started again as tests/services/common.sh (start_slurm)
    # starts it. Whoever stops it holds /tmp/pwe-slurm.lock (other test sessions share this
    # SLURM: run such tests as `flock /tmp/pwe-slurm.lock pytest ...`) and starts it again,
    # whatever happens: use controller_down().
    run_dir: Path = Path("/var/tmp/pwe-slurm/run")

    def _controller_pid(self):
        try:
            pid = int((self.run_dir / "slurmctld.pid").read_text())
            return pid if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld" else None
        except (OSError, ValueError):
            return None

    def stop_controller(self, timeout=30):
        """Stop slurmctld (SIGTERM: it saves its state; slurmd and the jobs run on)."""
        pid = self._controller_pid()
        if pid is None:
            return
        _os.kill(pid, 15)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout, f"slurmctld {pid} to stop", step=0.1)

    def start_controller(self, timeout=60):
        """Start slurmctld again (it recovers its jobs) and wait until it answers."""
        if self._controller_pid() is None:
            with open(self.log_dir / "slurmctld.out", "ab") as out:  # (no inherited lock descriptor: close_fds)
                _subprocess.run(["slurmctld"], stdout=out, stderr=out, stdin=_subprocess.DEVNULL, check=True,
                                timeout=60)
        wait_for(lambda: "UP" in _subprocess.run(["scontrol", "ping"], capture_output=True, text=True,
                                                  timeout=30).stdout,
                 timeout, "slurmctld to answer after it was started", step=0.3)

    @_contextlib.contextmanager
    def controller_down(self):
        """with slurm_cluster.controller_down(): ...  (slurmctld is started again on exit)"""
        self.stop_controller()
        try:
            yield
        finally:
            self.start_controller()

    def wait_job(self, job_id, timeout=120):
        """Poll until the job reaches a final state; return that state (AssertionError on timeout)."""
        seen = [None]

        def final():
            seen[0] = self.job_state(job_id)
            return seen[0] if seen[0] in self.FINAL else None
        try:
            return wait_for(final, timeout, f"SLURM job {job_id} to reach a final state", step=0.3)
        except AssertionError:
            raise AssertionError(f"SLURM job {job_id} still {seen[0]} after {timeout} s") from None


def minutes_of_limit(limit):
    if limit in ("infinite", "UNLIMITED", "n/a"):
        return None
    days, _, rest = limit.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return (int(days) if days else 0) * 1440 + h * 60 + m + (1 if s else 0)


class SshNodes(list):
    """[(name, address), ...] of the test nodes: [("pwe-n1", "10.233.1.2"), ... ("pwe-n4", ...)].

    Each node is a network namespace (own hostname pwe-nN) with its own sshd on port 22;
    all share this machine's filesystem. Reach them with the ssh_config below
    (``ssh -F ssh_config pwe-n2 CMD``, or paramiko with identity + known_hosts). From a
    node, this machine (the head) is 10.233.0.1 (name pwe-head), the other nodes by name.
    ``local`` is an sshd on this machine's loopback (host pwe-local, 127.0.0.1:2222)."""

    ssh_dir = Path("/var/tmp/pwe-ssh")
    ssh_config = ssh_dir / "ssh_config"
    known_hosts = ssh_dir / "known_hosts"
    identity = ssh_dir / "id_ed25519"
    user = "root"
    port = 22
    head_address = "10.233.0.1"
    local = ("pwe-local", "127.0.0.1", 2222)
    node_sh = SERVICES / "node.sh"

    @property
    def names(self):
        return [n for n, _ in self]

    def address(self, name):
        return dict(self)[name]

    def ssh_args(self, host):
        return ["ssh", "-F", str(self.ssh_config), host]

    def ssh(self, host, command, timeout=60, check=False, **kw):
        """Run a shell command on a node (or "pwe-local"): CompletedProcess with text output."""
        return _subprocess.run(self.ssh_args(host) + [command], capture_output=True, text=True, timeout=timeout,
                               check=check, stdin=kw.pop("stdin", _subprocess.DEVNULL), **kw)

    @staticmethod
    def _index(node):
        return int(str(node).removeprefix("pwe-n"))

    def kill(self, node):
        """Node death: its link goes down, every process in it is killed. node: 3 or "pwe-n3"."""
        _subprocess.run(["bash", str(self.node_sh), "kill", str(self._index(node))], check=True,
                        capture_output=True, text=True, timeout=60)

    def revive(self, node):
        """Link up, sshd restarted; returns when ssh to it works again."""
        _subprocess.run(["bash", str(self.node_sh), "revive", str(self._index(node))], check=True,
                        capture_output=True, text=True, timeout=60)

    @_contextlib.contextmanager
    def killed(self, node):
        """with ssh_nodes.killed(3): ...  (the node is revived on exit, whatever happens)"""
        self.kill(node)
        try:
            yield
        finally:
            self.revive(node)


@_contextlib.contextmanager
def tmpfs(where: Path, options: str):
    """A real tmpfs mounted at ``where`` (made if missing) with ``options`` (``size=1m``,
    ``nr_inodes=9``: a filesystem to fill, of bytes or of files), unmounted after. Where
    mounting is not allowed the test is skipped, and under CI it fails."""
    where.mkdir(parents=True, exist_ok=True)
    res = _subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if res.returncode != 0:
        if _os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs: {res.stderr}")
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield where
    finally:
        _subprocess.run(["umount", "-l", str(where)])


def kill_pilot(events: Path) -> None:
    """kill -9 of the pilot whose events file this is (its pid is in its first line, `up`)."""
    import json
    import signal

    up = json.loads(events.read_text().splitlines()[0])
    assert up["k"] == "up"
    _os.kill(up["pid"], signal.SIGKILL)


def run_killing_its_pilot(wf: Path, run_dir: Path, cwd: Path, ledger: Path, running: int, gate: Path,
                          timeout: float = 240):
    """``pwe run WF`` (2 cores) whose first pilot is killed -9 once ``running`` members have
    written their start to ``ledger`` (they then wait for ``gate``); the gate is opened
    after the kill, so that they end in the grace the pilot's guardian gives them and their
    ends come from it (pilot/guardian.py). The run's (returncode, stderr) once it ended."""
    proc = _subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                             cwd=cwd, env={**_os.environ, "PYTHONPATH": str(ROOT)}, stdout=_subprocess.PIPE,
                             stderr=_subprocess.PIPE, text=True, stdin=_subprocess.DEVNULL)
    try:
        events = run_dir / "pilots" / "p1" / "events.jsonl"
        wait_for(lambda: events.exists() and b'"k":"up"' in events.read_bytes(), what="the pilot to come up")
        wait_for(lambda: ledger.exists() and ledger.read_text().count("start") >= running,
                 timeout=120, what=f"{running} members running")
        kill_pilot(events)
        gate.touch()
        _, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    return proc.returncode, err


def on_ssh_nodes(where: Path, wf: Path | None = None, extra: str = "") -> None:
    """A ``hosts.yaml`` in ``where`` whose host ``four`` is the tests' four ssh nodes (the
    ``ssh_nodes`` fixture), with ``extra`` (more lines of that host); ``wf``, a workflow
    whose defaults then name that host."""
    (where / "hosts.yaml").write_text(
        "hosts:\n  four:\n    protocol: local\n    cores_per_node: 2\n    nodes: [pwe-n1, pwe-n2, pwe-n3, pwe-n4]\n"
        f"    ssh_config: /var/tmp/pwe-ssh/ssh_config\n{extra}")
    if wf is not None:
        wf.write_text(wf.read_text().replace("nodes:\n", "defaults: {host: four}\nnodes:\n", 1))


def agent_replies(proc, want: int, held: bytearray) -> list[dict]:
    """A node agent's (pilot/nodeagent.py: a real process over pipes) next ``want`` messages,
    its stdout's lines, waiting at most WAIT s; ``held``: what was read of the lines after
    them (kept for the next call)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = _time.monotonic() + WAIT
    got: list[dict] = []
    while True:
        while b"\n" in held and len(got) < want:
            line, _, rest = bytes(held).partition(b"\n")
            held[:] = rest
            got.append(_json.loads(line))
        if len(got) == want:
            return got
        assert sel.select(timeout=max(0.0, deadline - _time.monotonic())), f"the agent said only {got}"
        data = _os.read(proc.stdout.fileno(), 1 << 16)
        assert data, f"the agent left after saying {got}"
        held += data


def most_at_once(ivs) -> int:
    """The largest number of (start, end) intervals that overlap (an end before a start at a
    tie): the most members running at once, from their own ledgers."""
    points = sorted([(s, 1) for s, _ in ivs] + [(e, -1) for _, e in ivs], key=lambda p: (p[0], p[1]))
    now = most = 0
    for _, d in points:
        now += d
        most = max(most, now)
    return most


# ---------------------------------------------------------------------------------------
# The test clusters' set-up scripts (tests/cluster/): each run once per session.

CLUSTER = ROOT / "tests" / "cluster"
_SCRIPT_RUNS: dict = {}  # script -> (returncode or None when not root, output), once per session


def run_setup_script(script: Path, timeout: int = 900):
    """(returncode, output) of a root set-up script, run once per session (None: not root)."""
    if script not in _SCRIPT_RUNS:
        if _os.geteuid() != 0:
            _SCRIPT_RUNS[script] = (None, f"not root: {script.relative_to(ROOT)} needs root (packages, daemons, "
                                          "network namespaces)")
        else:
            try:
                p = _subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=timeout,
                                    stdin=_subprocess.DEVNULL)
                _SCRIPT_RUNS[script] = (p.returncode, p.stdout + p.stderr)
            except _subprocess.TimeoutExpired:
                _SCRIPT_RUNS[script] = (-1, f"{script.relative_to(ROOT)} timed out after {timeout} s")
    return _SCRIPT_RUNS[script]


def require_up(script: Path, prefix: str):
    """Fail (CI) or skip unless ``script`` printed a line '<prefix> ... up'."""
    rc, out = run_setup_script(script)
    if rc is not None and service_up(out, prefix):
        return
    why = out if rc is None else f"{script.relative_to(ROOT)} exited {rc}; not up: {prefix.rstrip(':')}\n{out}"
    if _os.environ.get("CI"):
        pytest.fail(f"test cluster unavailable under CI: {why}", pytrace=False)
    pytest.skip(f"test cluster unavailable: {why}")


# ---------------------------------------------------------------------------------------
# A real Grid Engine cell (tests/cluster/sge.sh): sge_qmaster and one sge_execd on this
# machine, queue all.q (8 slots), parallel environment "pwe". Its commands are not on PATH
# (/usr/bin/qsub is slurm-wlm-torque's): tests/cluster/sge.env names them (SGE_BIN).

SGE_SCRIPT = CLUSTER / "sge.sh"
SGE_ENV = CLUSTER / "sge.env"


# ---------------------------------------------------------------------------------------
# The four-node SLURM cluster (tests/cluster/up.sh): slurmctld as pwe-head, one slurmd in
# each ssh node's namespace pwe-n1..pwe-n4, reached with SLURM_CONF=/var/tmp/pwe-cluster/
# slurm.conf (tests/cluster/env.sh); hosts slurm4 (srun steps) and slurm4-ssh in
# tests/cluster/hosts.yaml.

@_dataclasses.dataclass(frozen=True)
class Slurm4:
    """The four-node cluster: ``env`` reaches it (SLURM_CONF), ``hosts`` is its hosts.yaml."""
    nodes: tuple = ("pwe-n1", "pwe-n2", "pwe-n3", "pwe-n4")
    conf: Path = Path("/var/tmp/pwe-cluster/slurm.conf")
    hosts: Path = CLUSTER / "hosts.yaml"
    node_sh: Path = SERVICES / "node.sh"

    @property
    def env(self):
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv, timeout=60):
        return _subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                               env={**_os.environ, **self.env}, stdin=_subprocess.DEVNULL)

    def node_states(self):
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def kill(self, node):
        """A node dies: its link goes down, every process in its namespace (slurmd, the
        members there) is killed -9 (tests/services/node.sh)."""
        _subprocess.run(["bash", str(self.node_sh), "kill", node.removeprefix("pwe-n")], check=True,
                        capture_output=True, text=True, timeout=60)

    def revive(self, node, timeout=240):
        """Link up, sshd and slurmd back; returns once SLURM has the node idle again (on a
        busy machine slurmctld may take minutes to ping it back: the deadline is generous)."""
        _subprocess.run(["bash", str(self.node_sh), "revive", node.removeprefix("pwe-n")], check=True,
                        capture_output=True, text=True, timeout=60)

        def back() -> bool:
            state = self.node_states().get(node, "")
            if state.startswith(("down", "drain")):
                self.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
            return state in ("idle", "mix", "alloc")
        wait_for(back, timeout, f"SLURM to have {node} idle again after its revival", step=0.5)


# ---------------------------------------------------------------------------------------
# A run on this machine and its processes, through the real CLI (the end-to-end tests:
# test_quickstart, test_members, test_failures, test_packing, test_run_control, test_run_dir,
# test_crash, test_see).

def pwe(*args, cwd, timeout=120):
    """The real CLI from ``cwd``: (exit status, stdout, stderr)."""
    return run_cli(*args, cwd=cwd, timeout=timeout)


def start_run(wf: Path, cwd: Path, *args) -> _subprocess.Popen:
    """`pwe run WF ARGS` in the background, in a session of its own (a test signals it)."""
    return _subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), *map(str, args)], cwd=cwd,
                             env=dict(_os.environ, PYTHONPATH=str(ROOT)), stdout=_subprocess.PIPE,
                             stderr=_subprocess.PIPE, text=True, start_new_session=True)


def mdir(run_dir: Path, node: str, i: int) -> Path:
    """A member's directory, as the contract lays it out."""
    return Path(run_dir) / "members" / node / str(i // 1000) / str(i)


def output(run_dir: Path, node: str, i: int, name: str = "stdout", attempt: int | None = None) -> str:
    """What a member attempt wrote on its stdout (or stderr), read as ``pwe logs`` reads it
    (the run's output streams, pilot/streams.py); "" when it has not written anything yet."""
    from pwe.base.errors import PweError
    from pwe.observe.output import member_output

    try:
        got = member_output(Path(run_dir), node, i, attempt=attempt)
    except PweError:
        return ""
    return getattr(got, name).decode("utf-8", "replace")


def show(run_dir: Path, *extra: str) -> list[dict]:
    rc, out, err = pwe("show", run_dir, "--json", "--limit", "0", *extra, cwd=Path(run_dir).parent)
    assert rc == 0, f"pwe show failed: {err}"
    return _json.loads(out)


def status(run_dir: Path) -> dict:
    rc, out, err = pwe("status", run_dir, "--json", cwd=Path(run_dir).parent)
    assert rc == 0, f"pwe status failed: {err}"
    return _json.loads(out)


def by_key(records: list[dict]) -> dict[tuple[str, int], dict]:
    return {(r["node"], r["member"]): r for r in records}


def no_traceback(err: str) -> None:
    assert "Traceback" not in err, f"a traceback reached the user:\n{err}"


def pids_matching(pattern: str) -> list[int]:
    proc = _subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in proc.stdout.split()]


def pilot_pids(run_dir: Path) -> list[int]:
    pids = []
    for line in (Path(run_dir) / "journal.jsonl").read_text().splitlines():
        rec = _json.loads(line)
        if rec.get("e") == "pilot":
            pids.append(rec["pid"])
    return pids


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def engine_pid(run_dir: Path) -> int | None:
    try:
        return _json.loads((Path(run_dir) / "engine.lock").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------
# What tests of several rooms share about the test services' hosts and the service.

#: the SSH test nodes' keys and ssh_config (tests/services/setup.sh)
SSH = Path("/var/tmp/pwe-ssh")

#: hosts on the one-node test SLURM (the pilot's own launcher, and srun) and on PBS over it
SLURM_HOSTS = """
hosts:
  cluster:
    protocol: slurm
    cores_per_node: 8
    max_nodes: 1
    partitions:
      - {name: short, max_walltime: 10}
      - {name: debug}
  cluster-srun:
    protocol: slurm
    cores_per_node: 8
    max_nodes: 1
    launcher: srun
  torque:
    protocol: pbs
    cores_per_node: 8
    max_nodes: 1
"""


def ssh_hosts_yaml(tmp_path: Path, nodes=("pwe-n1", "pwe-n2", "pwe-n3", "pwe-n4")) -> Path:
    """A hosts.yaml of one host over the SSH test nodes ``nodes``, in ``tmp_path``."""
    p = tmp_path / "hosts.yaml"
    p.write_text(f"hosts:\n  four:\n    protocol: local\n    cores_per_node: 2\n    nodes: [{', '.join(nodes)}]\n"
                 f"    ssh_config: {SSH / 'ssh_config'}\n")
    return p


class Service:
    """One service directory ($PWE_HOME) and the pwe commands run against it."""

    def __init__(self, home: Path):
        self.home = home
        self.dir = home / "state" / "service"

    def pwe(self, *args, env=None, timeout=120):
        return run_cli(*args, cwd=self.home.parent, env={"PWE_HOME": str(self.home), **(env or {})}, timeout=timeout)

    def ok(self, *args, **kw):
        rc, out, err = self.pwe(*args, **kw)
        assert rc == 0, f"pwe {' '.join(map(str, args))}: exit {rc}\n{out}\n{err}"
        return out

    def status(self):
        rc, out, err = self.pwe("service", "status", "--json")
        assert rc in (0, 1), err
        return _json.loads(out)

    def run(self, run_id):
        return next((r for r in self.status()["runs"] if r["run_id"] == run_id), None)

    def wait_phase(self, run_id, phases=("succeeded",), timeout=90):
        seen = {}

        def done():
            seen["r"] = self.run(run_id)
            return seen["r"] is not None and seen["r"]["phase"] in phases
        wait_for(done, timeout, f"run {run_id} to reach {phases} (last: {seen.get('r')})")
        return seen["r"]

    def processes(self):
        """pids of the service process, its worker and beat (from service.json)."""
        info = _json.loads((self.dir / "service.json").read_text())
        return [int(info[k]) for k in ("pid", "worker", "beat")]

    def engines(self):
        """pids of the engines holding locks on the service's runs."""
        out = []
        for lock in (self.dir / "runs").glob("*/engine.lock"):
            try:
                info = _json.loads(lock.read_text() or "{}")
            except ValueError:
                continue
            if info.get("pid") and alive(int(info["pid"])):
                out.append(int(info["pid"]))
        return out

    def cleanup(self):
        self.pwe("service", "stop")
        for pid in self.engines():
            _os.kill(pid, _signal.SIGKILL)
        # pilots of this service's runs (their command line names the run directory)
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmd = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if str(self.dir).encode() in cmd and b"pilot" in cmd:
                    try:
                        _os.kill(int(proc.name), _signal.SIGKILL)
                    except ProcessLookupError:
                        pass


def one_line_error(rc, out, err):
    """The one line of a refusal (exit status 2, no traceback): the test fails otherwise."""
    assert rc == 2, (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def failing_meshes(name: str, defaults: str = "") -> str:
    """A sweep where one value always fails (mesh=fine, a line on stderr with a path, a
    number, a terminal escape and HTML), beside values holding HTML and an escape: what
    pwe failures, the report and the dashboard must show first, and show as text."""
    return (f"name: {name}\n{defaults}" + r"""nodes:
  sim:
    parameters:
      mesh: [coarse, fine, "<script>alert(1)</script>", "\e[31mred"]
      seed: {range: [0, 3]}
    run: >-
      if [ "{{ mesh }}" = fine ]; then printf 'Error: /scratch/run{{ seed }}/m.h5 \033[2J<img src=x>\n' >&2;
      exit 3; fi; echo ok
""")


def example(tmp_path: Path, name: str) -> Path:
    """``examples/NAME`` in a copy of examples/ under ``tmp_path``: a run of it has that copy
    as its workspace. Two runs of one workflow in one workspace at once are refused (a live
    run there), so tests side by side never run examples/ itself."""
    import shutil

    if not (tmp_path / "examples").exists():
        shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("pwe-runs", ".pwe*"))
    return tmp_path / "examples" / name
