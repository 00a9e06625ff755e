"""The tiers' marks stay true (issue 46, part 3): tests/conftest.py marks a test ``real`` when
it takes a fixture of :data:`conftest.REAL` and ``slow`` when tests/slow.txt lists it, and
``bash tests/run.sh --quick`` runs the others. Here: each real fixture skips its test (or fails
it under CI) when its service is not there, so a test that takes one needs that service; a
test left unmarked does not reach a test service's address, files or commands by itself; every
line of tests/slow.txt names a test that exists.

The scan for services reads each unmarked test's own body, not the helpers it calls: what a
helper reaches is found by the helper's fixture (a helper that needs SLURM takes
``slurm_cluster`` and so marks whoever uses it)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from conftest import REAL, slow_ids
from helpers import ROOT, TESTS

#: what reaches a test service by itself: its files (its address, its password, its state),
#: its programs (Chromium's driver, Open MPI's mpiexec found on PATH, a redis-server started).
#: (A scheduler's commands and a Redis URL are not signs: the scripted conversations and the
#: refusals name them as words.)
SERVICE_SIGNS = re.compile(r"""/var/tmp/pwe-(slurm|cluster|sge|redis|ssh)|chromedriver|which\(["']mpiexec\.openmpi"""
                           r"""|\[["']redis-server["']""")

#: the guards a real fixture calls so that its test skips (fails under CI) without the service
GUARDS = {"require_services", "require_up", "need"}


#: a pytest run that collects the suite and prints each test's node id and marks as a JSON line
COLLECT = """
import json, sys, pytest
class Marks:
    def pytest_collection_finish(self, session):
        for item in session.items:
            print("MARKS " + json.dumps([item.nodeid, sorted({m.name for m in item.iter_markers()})]))
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", sys.argv[1]],
                     plugins=[Marks()]))
"""


@lru_cache(maxsize=None)
def _marks() -> dict[str, set[str]]:
    """Every test of the suite, by node id, with the names of its marks: one collection by pytest."""
    p = subprocess.run([sys.executable, "-c", COLLECT, str(TESTS)], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    found = dict(json.loads(line[6:]) for line in p.stdout.splitlines() if line.startswith("MARKS "))
    assert found, "pytest collected no tests"
    return {k: set(v) for k, v in found.items()}


def _collected(keep=lambda marks: True) -> list[str]:
    return [nodeid for nodeid, marks in _marks().items() if keep(marks)]


def signs_of_services(source: str) -> list[str]:
    """The test-service signs in ``source`` (:data:`SERVICE_SIGNS`), as found."""
    return [m.group(0) for m in SERVICE_SIGNS.finditer(source)]


@lru_cache(maxsize=None)
def _functions(path: Path) -> tuple[str, dict[str, str]]:
    """A test module's text and the source of each function in it, by name (read once)."""
    text = path.read_text()
    return text, {node.name: ast.get_source_segment(text, node) or "" for node in ast.walk(ast.parse(text))
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _function_source(path: Path, name: str) -> str:
    """The source of the function ``name`` of ``path`` (for a test made at run time, such as
    the harness's TestHunt.runTest, which hypothesis writes: its module's text)."""
    text, functions = _functions(path)
    return functions.get(name, text)


def test_every_real_fixture_needs_its_service():
    tree = ast.parse((TESTS / "conftest.py").read_text())
    fixtures = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)
                and any("fixture" in ast.unparse(d) for d in n.decorator_list)}
    assert REAL <= set(fixtures), f"REAL names fixtures conftest does not define: {sorted(REAL - set(fixtures))}"
    for name in REAL:
        called = {c.func.id for c in ast.walk(fixtures[name]) if isinstance(c, ast.Call)
                  and isinstance(c.func, ast.Name)}
        # (through another real fixture, such as slurm4 through slurm4_cluster, counts)
        takes = {a.arg for a in fixtures[name].args.args}
        assert called & GUARDS or takes & REAL, f"the real fixture {name} does not check that its service is there"


def test_no_unmarked_test_reaches_a_test_service_by_itself():
    found = []
    for nodeid in _collected(lambda marks: "real" not in marks):
        if nodeid.startswith("tests/project/test_tiers.py::"):
            continue  # (its own examples of signs, as text)
        file, _, rest = nodeid.partition("::")
        name = rest.split("::")[-1].split("[", 1)[0]
        signs = signs_of_services(_function_source(ROOT / file, name))
        if signs:
            found.append(f"{nodeid.split('[', 1)[0]}: {sorted(set(signs))}")
    assert not found, ("tests that reach a test service without a real fixture (take the fixture: "
                       f"conftest.REAL): {sorted(set(found))}")


def test_the_scan_finds_a_service_reached_by_hand():
    # the scan above is only worth its silence if it speaks when it should
    assert signs_of_services('Path("/var/tmp/pwe-redis/url").read_text()') == ["/var/tmp/pwe-redis"]
    assert signs_of_services('env = {"SLURM_CONF": "/var/tmp/pwe-cluster/slurm.conf"}') == ["/var/tmp/pwe-cluster"]
    assert signs_of_services('webdriver.Chrome(service=Service("/usr/bin/chromedriver"))') == ["chromedriver"]
    assert signs_of_services('path = shutil.which("mpiexec.openmpi")') == ['which("mpiexec.openmpi']
    assert signs_of_services('subprocess.Popen(["redis-server", conf])') == ['["redis-server"']
    assert signs_of_services('hosts = {"bus": "redis://:pw@127.0.0.1:6391/0"}') == []
    assert signs_of_services('GOLDEN = "#!/bin/bash\\n#SBATCH --nodes=2\\nsrun pilot"') == []


def test_every_slow_line_names_a_test():
    every = {nodeid.split("[", 1)[0] for nodeid in _collected()} | {nodeid.split("::")[0] for nodeid in _collected()}
    listed = slow_ids()
    assert listed, "tests/slow.txt lists no test"
    stale = sorted(listed - every)
    assert not stale, f"tests/slow.txt names tests that are not there (renamed or removed?): {stale}"


def test_the_tiers_hold_what_they_say():
    # the real tier is what takes a real fixture, the quick tier most of the rest
    real = _collected(lambda marks: "real" in marks)
    quick = _collected(lambda marks: not marks & {"real", "slow"})
    assert real and all("::" in n for n in real)
    assert any(n.startswith("tests/cluster/test_cluster.py::") for n in real), "the four-node tests are not real"
    assert any(n.startswith("tests/ui/test_ui_browser.py::") for n in real), "the Chromium tests are not real"
    assert len(quick) > len(_collected()) // 3, f"the quick tier holds {len(quick)} of {len(_collected())} tests"
