"""The tests themselves: they wait on conditions through one helper (tests/helpers.py's
wait_for), never a fixed time.sleep; time let pass on purpose goes through helpers.py's
let_time_pass, which says why. A sleep in a member's own command (a workflow's `sleep 5`) or in a child's program text is a
string, not a call here, and is fine."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: the only functions that may call time.sleep: the waiting helper and its named pause
ALLOWED = {("helpers.py", "wait_for"), ("helpers.py", "let_time_pass")}


def sources():
    """(name, text) of the suite's own Python files (tests/ and its rooms: test modules, the
    conftest, helpers.py, harness.py; not the programs the tests run, such as llemu/), by
    their paths under tests/."""
    return [(str(p.relative_to(TESTS)), p.read_text()) for p in sorted(TESTS.rglob("*.py"))
            if p.name.startswith("test_") or p.parent == TESTS]


def sleeps(source: str, filename: str) -> list[str]:
    """'file:line in function' of each time.sleep call in ``source`` outside ALLOWED (however
    time or its sleep was imported: `import time as t`, `from time import sleep as nap`)."""
    tree = ast.parse(source, filename)
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "time"}
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            functions |= {a.asname or a.name for a in node.names if a.name == "sleep"}
    found = []

    def visit(node, where):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = node.name
        if isinstance(node, ast.Call):
            f = node.func
            if ((isinstance(f, ast.Attribute) and f.attr == "sleep" and isinstance(f.value, ast.Name)
                 and f.value.id in modules) or (isinstance(f, ast.Name) and f.id in functions)):
                if (filename, where) not in ALLOWED:
                    found.append(f"{filename}:{node.lineno} in {where or 'the module'}")
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, None)
    return found


def polling_helpers(source: str, filename: str) -> list[str]:
    """Functions named as a second waiting helper (wait_for outside helpers.py, wait_until anywhere)."""
    return [f"{filename}:{n.lineno} def {n.name}" for n in ast.walk(ast.parse(source, filename))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n.name == "wait_until" or (n.name == "wait_for" and filename != "helpers.py"))]


def test_no_test_sleeps_a_fixed_time_outside_the_waiting_helper():
    found = [s for name, text in sources() for s in sleeps(text, name)]
    assert len(sources()) > 100, "the suite's files were not found"
    assert not found, ("time.sleep outside helpers.py's wait_for / let_time_pass: wait on the condition "
                       f"with wait_for, or let_time_pass(seconds, why): {found}")


def test_there_is_one_waiting_helper():
    found = [s for name, text in sources() for s in polling_helpers(text, name)]
    assert not found, f"a second waiting helper: use helpers.py's wait_for: {found}"


def test_the_guard_finds_a_sleep_however_it_is_imported():
    src = ("import time as t\nfrom time import sleep as nap\n"
           "def test_x():\n    t.sleep(1)\n    nap(2)\n"
           "def wait_for():\n    t.sleep(0.1)\n"
           "def run():\n    return 'time.sleep(3)'\n")
    assert sleeps(src, "test_x.py") == ["test_x.py:4 in test_x", "test_x.py:5 in test_x", "test_x.py:7 in wait_for"]
    assert sleeps(src, "helpers.py") == ["helpers.py:4 in test_x", "helpers.py:5 in test_x"]
    assert polling_helpers(src, "test_x.py") == ["test_x.py:6 def wait_for"]
    assert polling_helpers(src, "helpers.py") == []
