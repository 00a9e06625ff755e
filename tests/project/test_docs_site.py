"""The documentation site (mkdocs.yml, docs/): it builds in strict mode, the strict build
fails on what it must fail on, every error class has its troubleshooting entry, and the
code samples of every page run as shown.

The samples' rules (docs/development.md says them to writers): a ```sh block is run line by
line in a scratch directory holding a copy of examples/ and a finished quickstart run (RUN
is its id), each command exiting 0, and a line '#> TEXT' under a command is text its output
must hold; a ```python block is run as a script there, 'EXPR  # => VALUE' asserting that
EXPR == VALUE; a block with a title="NAME" is a file written there first; a ```yaml
workflow marked '<!-- workflow: validate -->' (or run) must pass `pwe validate` (and `pwe
run`); a hosts file must load; any other yaml is marked '<!-- fragment: ... -->' and must
parse; '<!-- not run: WHY -->' leaves a block out. (A workflow not marked is an example file
to the letter: tests/project/test_docs.py.)"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import ROOT, example
from test_docs import DOCS, marked_blocks

_spec = importlib.util.spec_from_file_location("pwe_docs_reference", DOCS / "gen" / "reference.py")
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

#: the languages a fenced block of a page may have: each is checked, or is text
LANGUAGES = {"sh", "python", "yaml", "text"}


# -- the strict build ----------------------------------------------------------------------


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, cwd=root, env=env, timeout=300)


def test_the_site_builds_in_strict_mode(tmp_path):
    proc = build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    site = tmp_path / "site"
    # the generated pages hold what they are generated from
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("pwe run", "pwe hosts list", "pwe trigger add", "--cores"):
        assert command in cli, f"the command-line reference has no {command!r}"
    workflow = (site / "reference" / "workflow" / "index.html").read_text()
    for field in ("maxWallTimePerMember", "ranksPerMember", "after", "products"):
        assert f"<code>{field}</code>" in workflow, f"the workflow reference has no field {field}"
    python = (site / "reference" / "python" / "index.html").read_text()
    for name in ("run_workflow", "RunResult", "plan_workflow"):
        assert name in python, f"the Python API page has no {name}"
    trouble = (site / "troubleshooting" / "index.html").read_text()
    assert "Exit status 3" in trouble and "WorkflowSyntaxError" in trouble
    bench = (site / "benchmarks" / "index.html").read_text()
    headings = [l[3:] for l in (ROOT / "bench" / "BENCHMARKS.md").read_text().splitlines()
                if l.startswith("## ") and not re.search(r"[`*<>&_\[]", l)]
    assert headings and all(h in bench for h in headings), "the benchmarks page does not include bench/BENCHMARKS.md"


@pytest.fixture(scope="module")
def site_copy(tmp_path_factory):
    """A copy of what the build reads (mkdocs.yml, docs/, the included files), with the
    source packages linked, for builds that break it on purpose."""
    root = tmp_path_factory.mktemp("docs-copy")
    shutil.copy(ROOT / "mkdocs.yml", root)
    shutil.copytree(DOCS, root / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("ARCHITECTURE.md", "bench/BENCHMARKS.md", "pilot/DESIGN.md"):
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, root / f)
    for d in ("pwe", "protocols", "hostinfo", "schemas"):
        (root / d).symlink_to(ROOT / d)
    return root


@pytest.mark.parametrize("breakage, said", [
    (("docs/how-to/slurm.md", "\nSee [nothing](no-such-page.md).\n"), "no-such-page.md"),
    (("docs/how-to/pbs.md", "\nSee [a heading](slurm.md#no-such-heading).\n"), "no-such-heading"),
    (("docs/orphan.md", "# A page the nav leaves out\n"), "orphan.md"),
    (("docs/benchmarks.md", '\n--8<-- "bench/NO-SUCH-FILE.md"\n'), "NO-SUCH-FILE"),
], ids=["broken-link", "broken-anchor", "page-not-in-nav", "missing-include"])
def test_the_strict_build_fails_on(site_copy, tmp_path, breakage, said):
    path, text = breakage
    target = site_copy / path
    before = target.read_text() if target.exists() else None
    try:
        target.write_text((before or "") + text)
        proc = build(site_copy, tmp_path / "site")
    finally:
        if before is None:
            target.unlink()
        else:
            target.write_text(before)
    assert proc.returncode != 0, f"mkdocs build --strict passed with {path} broken ({text.strip()})"
    assert said in proc.stderr, proc.stderr[-3000:]


# -- every error class has its troubleshooting entry -----------------------------------------


def test_every_error_class_has_a_troubleshooting_entry():
    page = (DOCS / "troubleshooting.md").read_text()
    classes = [c.__name__ for c in reference.error_classes()]
    assert {"PweError", "InputError", "RunStopped", "HostError"} <= set(classes), classes
    assert reference.troubleshooting_problems(page) == []
    # and the check can fail: an entry taken out, or one with no fix, is found
    without = re.sub(r"^## RunTaken\n.*?(?=^## )", "", page, flags=re.S | re.M)
    assert any("RunTaken" in p for p in reference.troubleshooting_problems(without))
    no_fix = page.replace("**Fix.** The run is being worked on", "The run is being worked on")
    assert any("RunTaken" in p and "Fix" in p for p in reference.troubleshooting_problems(no_fix))


def test_the_build_fails_on_an_error_class_without_an_entry(site_copy, tmp_path):
    page = site_copy / "docs" / "troubleshooting.md"
    before = page.read_text()
    try:
        page.write_text(re.sub(r"^## StagingError\n.*", "", before, flags=re.S | re.M))
        proc = build(site_copy, tmp_path / "site")
    finally:
        page.write_text(before)
    assert proc.returncode != 0 and "StagingError" in proc.stderr, proc.stderr[-3000:]


# -- the code samples run ---------------------------------------------------------------------


def pages() -> list[Path]:
    """The site's pages and the README (its samples follow the same rules)."""
    return sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]


def test_every_block_has_a_checked_language():
    """A block without a language (or another one) would not be run or checked."""
    for page in pages():
        for lang, title, _body, _marker in marked_blocks(page.read_text()):
            assert lang in LANGUAGES, (f"{page.relative_to(ROOT)}: a ```{lang} block ({title or 'untitled'}); "
                                       f"use one of {sorted(LANGUAGES)} (```text for output)")


def sandbox_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PWE_HOME"] = str(home)  # the sandbox's own configuration and service state
    env["SLURM_CONF"] = "/dev/null"  # the docs' clusters are the reader's, not the test services'
    return env


def sh(command: str, cwd: Path, env: dict[str, str], timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def squash(text: str) -> str:
    return " ".join(text.split())


def sh_steps(body: str) -> list[tuple[str, list[str]]]:
    """A sh block's commands, each with the '#> TEXT' lines that follow it."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        s = line.strip()
        if s.startswith("#>"):
            assert steps, f"'{s}' comes before any command"
            steps[-1][1].append(s[2:].strip())
        elif s and not s.startswith("#"):
            steps.append((s, []))
    return steps


def python_script(body: str) -> str:
    """The block with each 'EXPR  # => VALUE' line made an assertion."""
    out = []
    for line in body.splitlines():
        m = re.match(r"^(\s*)(.*?)\s+# => (.*?)(?:\s{2,}\(.*)?$", line)
        if m:
            indent, expr, value = m.groups()
            out.append(f"{indent}assert ({expr}) == ({value}), ({expr!r}, {expr})")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def runnable_pages() -> list[Path]:
    keep = []
    for page in pages():
        for lang, title, _body, marker in marked_blocks(page.read_text()):
            if marker.startswith("not run:"):
                continue
            if lang in ("sh", "python") or title or (lang == "yaml"):
                keep.append(page)
                break
    return keep


@pytest.fixture
def sandbox(tmp_path):
    """A scratch directory with a copy of examples/ and a finished quickstart run: (dir,
    env, the run's id)."""
    example(tmp_path, "quickstart.yaml")  # (tmp_path/examples: a copy of examples/)
    env = sandbox_env(tmp_path / ".pwe-home")
    proc = sh("pwe run examples/quickstart.yaml", tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "pwe-runs").iterdir()
    return tmp_path, env, run.name


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_code_samples_of_the_page_run(page, sandbox):
    where, env, run_id = sandbox
    ran = 0
    for n, (lang, title, body, marker) in enumerate(marked_blocks(page.read_text()), 1):
        what = f"{page.relative_to(ROOT)}, block {n} (```{lang} {title})"
        if marker.startswith("not run:"):
            continue
        if title:
            (where / title).write_text(body)
        if lang == "yaml":
            ran += check_yaml(body, title, marker, where, env, what)
        elif lang == "sh":
            for command, expected in sh_steps(body):
                command = re.sub(r"\bRUN\b", run_id, command)
                proc = sh(command, where, env)
                said = proc.stdout + proc.stderr
                assert proc.returncode == 0, f"{what}: `{command}` exited {proc.returncode}:\n{said[-3000:]}"
                assert "Traceback" not in said, f"{what}: `{command}`:\n{said[-3000:]}"
                for text in expected:
                    assert squash(text) in squash(said), f"{what}: `{command}` did not print {text!r}:\n{said[-3000:]}"
                ran += 1
        elif lang == "python" and not title:
            script = where / f"sample{n}.py"
            script.write_text(python_script(body))
            proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=where, env=env,
                                  timeout=300)
            assert proc.returncode == 0, f"{what} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            ran += 1
    assert ran, f"{page.relative_to(ROOT)}: nothing was run or checked"


def check_yaml(body: str, title: str, marker: str, where: Path, env: dict[str, str], what: str) -> int:
    """A yaml block by its kind (see the module's docstring); 1 when something was checked."""
    doc = yaml.safe_load(body)  # every yaml block parses
    if marker.startswith("fragment:"):
        assert doc is not None, f"{what}: an empty fragment"
        return 1
    assert isinstance(doc, dict), f"{what}: not a mapping: mark it <!-- fragment: WHAT -->"
    if "nodes" in doc:
        if not marker:
            return 0  # an example file to the letter: tests/project/test_docs.py checks it, and runs every example
        path = where / (title or "docs-workflow.yaml")
        path.write_text(body)
        proc = sh(f"pwe validate {path.name}", where, env)
        assert proc.returncode == 0, f"{what}: pwe validate exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        if marker == "workflow: run":
            proc = sh(f"pwe run {path.name} --run-dir docs-run-{path.stem}", where, env)
            assert proc.returncode == 0, f"{what}: pwe run exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        return 1
    if "hosts" in doc:
        path = where / "docs-hosts.yaml"
        path.write_text(body)
        proc = sh(f"pwe hosts list --hosts {path.name} --json", where, env)
        assert proc.returncode == 0, f"{what}: pwe hosts list exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        missing = [h for h in doc["hosts"] if f'"{h}"' not in proc.stdout]
        assert not missing, f"{what}: pwe hosts list does not list {missing}"
        return 1
    raise AssertionError(f"{what}: neither a workflow nor a hosts file: mark it <!-- fragment: WHAT -->")


def test_the_sample_rules_can_fail(sandbox):
    """The checks above fail on a wrong sample: a command that fails, output not printed,
    a wrong '# =>'."""
    where, env, run_id = sandbox
    assert sh("pwe show no-such-run", where, env).returncode != 0
    (command, expected), = sh_steps(f"pwe show {run_id}\n#> simulate[1]  done")
    said = sh(command, where, env).stdout
    assert squash(expected[0]) in squash(said)
    assert squash("simulate[1]  failed") not in squash(said)
    script = where / "wrong.py"
    script.write_text(python_script("1 + 1   # => 3"))
    assert subprocess.run([sys.executable, str(script)], capture_output=True).returncode != 0
    script.write_text(python_script("1 + 1   # => 2   (two)"))
    assert subprocess.run([sys.executable, str(script)], capture_output=True).returncode == 0
