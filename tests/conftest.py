"""The suite's fixtures: pwe's state kept out of the user's, files to write, the real test
services and clusters (each a session fixture that skips, or fails under CI, when it cannot
run), and processes to reap. What tests share that is not a fixture is tests/helpers.py.

Tests are marked by the fixtures they use (:func:`pytest_collection_modifyitems`): ``real``
when they need a real service (:data:`REAL`), ``slow`` when they are listed in
tests/slow.txt; ``bash tests/run.sh --quick`` runs the others (docs/development.md)."""

import os as _os
import signal as _signal
import subprocess as _subprocess
import tempfile as _tempfile
from pathlib import Path

import pytest

from helpers import (CLUSTER, SGE_ENV, SGE_SCRIPT, TESTS, Slurm4, SlurmCluster, SshNodes, alive, cmdline,
                     minutes_of_limit, need, require_services, require_up)

#: the fixtures that reach a real service: a test that takes one, itself or through another
#: fixture, is marked ``real`` (tests/project/test_tiers.py holds each to a check that skips,
#: or fails under CI, when its service is not there)
REAL = frozenset({"slurm_cluster", "ssh_nodes", "redis_url", "sge_cell", "slurm4_cluster", "slurm4", "chromium",
                  "open_mpi", "charliecloud", "lmod", "podman"})

#: the tests marked ``slow`` (over a few seconds), one a line: a test function's node id (all
#: its cases) or a file's path (all its tests); tests/slow_list.py writes it from a measured
#: run. ``bash tests/run.sh --quick`` leaves them out
SLOW = TESTS / "slow.txt"


def slow_ids() -> set[str]:
    """The node ids tests/slow.txt lists (blank lines and ``#`` comments aside)."""
    lines = (line.split("#", 1)[0].strip() for line in SLOW.read_text().splitlines())
    return {line for line in lines if line}


def pytest_collection_modifyitems(config, items):
    """Mark each test by what it uses: ``real`` by its fixtures (:data:`REAL`), ``slow`` by
    tests/slow.txt."""
    slow = slow_ids()
    for item in items:
        if REAL.intersection(item.fixturenames):
            item.add_marker(pytest.mark.real)
        if item.nodeid.split("[", 1)[0] in slow or item.nodeid.split("::", 1)[0] in slow:
            item.add_marker(pytest.mark.slow)

# pwe's state (the registry of runs, pwe/runstate/registry.py, the service's directory) in a
# directory of this session, never the user's: every run the suite makes registers itself;
# and each test's own (_own_state), so that no test finds another's runs by a prefix. A test
# that wants its own sets PWE_HOME or XDG_STATE_HOME for its subprocesses.
_os.environ.pop("PWE_HOME", None)
_os.environ["XDG_STATE_HOME"] = _tempfile.mkdtemp(prefix="pwe-test-state-")


@pytest.fixture(autouse=True)
def _own_state(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def write(tmp_path):
    """write(text, name='wf.yaml') -> Path of a file holding text (str or bytes)."""

    def _write(text, name="wf.yaml"):
        p = tmp_path / name
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)
        return p

    return _write


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real one-node SLURM cluster (and qsub over it), or skip/fail (CI) when it cannot run."""
    require_services("slurm:", "pbs:")
    p = _subprocess.run(["sinfo", "-h", "-o", "%P|%l|%c"], capture_output=True, text=True, timeout=30)
    parts, limits, default, cpus = [], {}, None, 0
    for line in p.stdout.split():
        name, limit, c = line.split("|")
        if name.endswith("*"):
            name = default = name[:-1]
        parts.append(name)
        limits[name] = minutes_of_limit(limit)
        cpus = max(cpus, int(c))
    return SlurmCluster(node="localhost", cpus=cpus, partitions=tuple(parts), default_partition=default,
                        time_limits=limits)


@pytest.fixture(scope="session")
def ssh_nodes():
    """The 4 SSH test nodes (an SshNodes list of (name, address)), or skip/fail (CI)."""
    require_services("ssh nodes:", "ssh local:")
    return SshNodes((f"pwe-n{n}", f"10.233.{n}.2") for n in range(1, 5))


@pytest.fixture(scope="session")
def redis_url():
    """The URL (with its password) of the tests' real Redis on 127.0.0.1:6391, or skip/fail (CI)."""
    require_services("redis:")
    return Path("/var/tmp/pwe-redis/url").read_text().strip()


@pytest.fixture(scope="session")
def sge_cell():
    """The cell's environment (SGE_ROOT, SGE_CELL, the ports, SGE_BIN, SGE_HOST, SGE_PE,
    SGE_QUEUE, SGE_SLOTS) as a dict, or skip/fail (CI) when the cell cannot run."""
    require_up(SGE_SCRIPT, "sge:")
    return dict(line.removeprefix("export ").split("=", 1) for line in SGE_ENV.read_text().splitlines()
                if line.startswith("export "))


@pytest.fixture(scope="session")
def slurm4_cluster():
    require_up(CLUSTER / "up.sh", "slurm4:")
    return Slurm4()


@pytest.fixture
def slurm4(slurm4_cluster):
    """The real four-node SLURM cluster (a Slurm4), or skip/fail (CI) when it cannot run.
    Whatever job a test leaves there (a pilot of a run it gave up on) is cancelled after it,
    so the next test finds the nodes free."""
    yield slurm4_cluster
    slurm4_cluster.run("scancel", "--user", "root")


@pytest.fixture
def chromium():
    """A real headless Chromium through its driver (Debian's chromium and chromium-driver,
    tests/services/setup.sh), quit after the test; a skip, or a failure under CI, when missing."""
    missing = [p for p in ("/usr/bin/chromium", "/usr/bin/chromedriver") if not Path(p).exists()]
    need(not missing, f"{', '.join(missing)} missing: apt-get install chromium chromium-driver "
                      "(tests/services/setup.sh)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.binary_location = "/usr/bin/chromium"
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    yield driver
    driver.quit()


@pytest.fixture
def charliecloud():
    """Charliecloud's ch-run and a static busybox for the tests' directory image (Debian's
    charliecloud and busybox-static, tests/services/setup.sh); a skip, or a failure under CI,
    when missing."""
    import shutil

    busybox = Path("/bin/busybox")
    static = busybox.exists() and b"ld-linux" not in busybox.read_bytes()[:65536]
    need(shutil.which("ch-run") is not None and static,
         "ch-run or a static busybox missing: apt-get install charliecloud busybox-static (tests/services/setup.sh)")


class Podman:
    """Podman for a test: ``env`` (its CONTAINERS_CONF, for the pwe it runs), ``load`` (a
    directory image imported into its store under a name; removed at the test's end)."""

    def __init__(self, conf: Path):
        self.env = {"CONTAINERS_CONF": str(conf)}
        self.names: list[str] = []

    def load(self, image: Path, name: str) -> str:
        from images import podman_import

        self.names.append(name)
        return podman_import(image, name, self.env)


@pytest.fixture
def podman(tmp_path):
    """Debian's podman with runc (tests/services/setup.sh), set to start containers here
    (tests/images.py ``PODMAN_CONF``); a skip, or a failure under CI, when missing."""
    import shutil

    from images import PODMAN_CONF

    need(shutil.which("podman") is not None and shutil.which("runc") is not None,
         "podman or runc missing: apt-get install podman runc (tests/services/setup.sh)")
    conf = tmp_path / "containers.conf"
    conf.write_text(PODMAN_CONF)
    p = Podman(conf)
    yield p
    for name in p.names:
        _subprocess.run(["podman", "rmi", "-f", name], capture_output=True, env={**_os.environ, **p.env}, timeout=120)


#: where Debian's Lmod keeps the shell's init script
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"


@pytest.fixture
def lmod():
    """Debian's Lmod (tests/services/setup.sh): its init script's path; a skip, or a failure
    under CI, when missing."""
    need(_os.path.exists(LMOD_INIT), "Lmod missing: apt-get install lmod (tests/services/setup.sh)")
    return LMOD_INIT


@pytest.fixture(scope="session")
def open_mpi():
    """The path of Open MPI's mpiexec (Debian openmpi-bin, tests/services/setup.sh), or a skip
    (a failure under CI) when it is not installed."""
    import shutil

    path = shutil.which("mpiexec.openmpi")
    need(path is not None, "Open MPI is not installed (Debian openmpi-bin; tests/services/setup.sh installs it)")
    return path


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A PWE_HOME of the module's own (the dashboard's token, the service's directory); a
    module that needs one per test defines its own ``home``."""
    h = tmp_path_factory.mktemp("pwehome")
    old = _os.environ.get("PWE_HOME")
    _os.environ["PWE_HOME"] = str(h)
    yield h
    if old is None:
        _os.environ.pop("PWE_HOME", None)
    else:
        _os.environ["PWE_HOME"] = old


@pytest.fixture
def reaper():
    """reaper(run_dir, pid...): processes a test started in the background for that run
    (its engine, its pilots); killed at the end if still alive and still about that run
    (the command line names the run directory, so a reused pid is never touched)."""
    owned: list[tuple[int, str]] = []

    def add(run_dir, *pids):
        owned.extend((p, str(run_dir)) for p in pids if p)

    yield add
    for pid, needle in owned:
        if alive(pid) and needle in cmdline(pid):
            try:
                _os.kill(pid, _signal.SIGKILL)
            except ProcessLookupError:
                pass
