"""The documentation (docs/, the site mkdocs.yml builds; README.md) and examples/ as a new
user meets them: every workflow the docs show is a file in examples/ (unless it is marked
as one to validate or run: tests/project/test_docs_site.py), every example workflow validates and
runs, the run directory the docs draw is the one a run makes, and the command table lists
every command the CLI has.

The pages are parsed, not copied here, so that these tests fail when they drift. The site's
strict build and its code samples are tests/project/test_docs_site.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from helpers import EXAMPLES, ROOT, example, run_cli

README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: the pages that hold what the README held before the site: the run directory's drawing,
#: the command table, the examples table
RUN_DIRECTORY_PAGE = DOCS / "concepts" / "run-directory.md"
COMMANDS_PAGE = DOCS / "reference" / "commands.md"
EXAMPLES_PAGE = DOCS / "reference" / "examples.md"


def doc_pages() -> list[Path]:
    """Every markdown page of the site (docs/**/*.md) and the README."""
    return sorted(DOCS.rglob("*.md")) + [README]


def marked_blocks(text: str) -> list[tuple[str, str, str, str]]:
    """The fenced blocks of a page as (language, title, body, marker): the marker is the
    HTML comment on the line right before the fence ('' when none), e.g. 'workflow: validate'."""
    out = []
    for m in re.finditer(r"^```(\w*)([^\n]*)\n(.*?)^```\s*$", text, re.S | re.M):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = re.fullmatch(r"<!-- (.*?) -->", before.strip())
        title = re.search(r'title="([^"]+)"', m.group(2))
        out.append((m.group(1), title.group(1) if title else "", m.group(3), marker.group(1) if marker else ""))
    return out


def fenced_blocks(text: str, lang: str | None = None) -> list[str]:
    """The contents of the ``` blocks of a markdown text (only ```LANG ones when given)."""
    out = []
    for m in re.finditer(r"^```([^\n]*)\n(.*?)^```\s*$", text, re.S | re.M):
        if lang is None or m.group(1).strip() == lang:
            out.append(m.group(2))
    return out


def example_workflows() -> list[Path]:
    """The workflow files of examples/ (hosts.yaml and README.md are not workflows)."""
    out = []
    for p in sorted(EXAMPLES.iterdir()):
        if p.suffix in (".yaml", ".yml"):
            doc = yaml.safe_load(p.read_text())
            if isinstance(doc, dict) and "nodes" in doc:
                out.append(p)
        elif p.suffix == ".xml":
            out.append(p)
    return out


# -- the workflows the docs show are example files ------------------------------------------


def test_every_workflow_in_the_docs_is_an_example_file():
    """A workflow a page shows is an example file, to the letter, so that a new user can
    run it as shown (and test_every_example_workflow_validates_and_runs runs it); one that
    is not is marked '<!-- workflow: validate -->' or '<!-- workflow: run -->' and
    tests/project/test_docs_site.py validates (and runs) it."""
    examples = {p.name: p.read_text() for p in example_workflows()}
    shown = []
    for page in doc_pages():
        for lang, _title, block, marker in marked_blocks(page.read_text()):
            if lang != "yaml" or marker.startswith(("workflow:", "fragment:")):
                continue
            doc = yaml.safe_load(block)
            if not (isinstance(doc, dict) and "nodes" in doc):
                continue  # e.g. a hosts.yaml
            shown.append(doc.get("name"))
            same = [name for name, text in examples.items() if text.strip() == block.strip()]
            assert same, (f"{page.relative_to(ROOT)} shows workflow {doc.get('name')!r} that is not, to the letter, a "
                          "file in examples/: a new user cannot run it as shown. Show an example file verbatim, or "
                          "mark it <!-- workflow: validate --> (or run) for tests/project/test_docs_site.py.")
    assert "quickstart" in shown, "the docs do not show examples/quickstart.yaml, the workflow the first command runs"


def test_the_markers_are_known():
    """A marker mistyped would leave its block unchecked: every HTML comment right before a
    fence is one tests/project/test_docs_site.py reads, and a 'not run' or a 'fragment' says why."""
    for page in doc_pages():
        for lang, _title, _block, marker in marked_blocks(page.read_text()):
            if not marker:
                continue
            ok = (marker in ("workflow: validate", "workflow: run")
                  or re.fullmatch(r"(not run|fragment): \S.{9,}", marker)
                  or marker.startswith("pwe: "))
            assert ok, f"{page.relative_to(ROOT)}: unknown marker <!-- {marker} --> before a ```{lang} block"


# -- every example workflow validates, and runs where it runs on this machine -----------------

# Extra arguments for a run in the tests: watch.yaml is meant to take ~15 s to be watched.
RUN_ARGS = {"watch.yaml": ["--set", "seconds=0"],
            "products.yaml": ["--workspace", "."]}  # (its products in tmp_path, not in examples/)
# Runs elsewhere, against the real services it needs.
RUN_ELSEWHERE = {"hybrid.yaml": "needs SLURM: tests/protocols/test_batch.py::test_hybrid_example_runs_here_and_on_slurm",
                 "gpu_partition.yaml": "needs SLURM: tests/planning/test_partition.py::test_gpu_partition_example_runs_on_slurm"}


@pytest.mark.parametrize("wf", example_workflows(), ids=lambda p: p.name)
def test_every_example_workflow_validates_and_runs(wf, tmp_path):
    wf = example(tmp_path, wf.name)  # (wide.yaml and wide.xml are one workflow: never one workspace at once)
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert rc == 0, f"pwe validate {wf.name}: exit {rc}\n{err}"
    if wf.name in RUN_ELSEWHERE:
        return  # validated here; its run is the test RUN_ELSEWHERE names
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--run-dir", run, *RUN_ARGS.get(wf.name, []), cwd=tmp_path, timeout=180)
    assert rc == 0, f"pwe run {wf.name}: exit {rc}\n{out}\n{err}"
    assert "Traceback" not in err


def test_every_example_is_in_the_examples_table():
    """examples/README.md lists each workflow file of examples/, and so does the site's
    examples page (as `examples/NAME`)."""
    table = (EXAMPLES / "README.md").read_text()
    missing = [p.name for p in example_workflows() if f"`{p.name}`" not in table]
    assert not missing, f"examples/README.md does not list {missing}"
    page = EXAMPLES_PAGE.read_text()
    missing = [p.name for p in example_workflows() if f"`examples/{p.name}`" not in page]
    assert not missing, f"{EXAMPLES_PAGE.relative_to(ROOT)} does not list {missing}"


# -- the run directory drawn in the docs is the one a run makes -------------------------------

SOURCES = [p for d in ("pwe", "pilot", "protocols") for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".j2")]


def drawn_layout() -> dict[str, tuple[str, bool]]:
    """From the run directory page's drawing of pwe-runs/<run-id>/: {top-level entry: (path
    as drawn, made by every run)}. An entry whose description starts with '(' exists only at times."""
    blocks = [b for p in DOCS.rglob("*.md") for b in fenced_blocks(p.read_text()) if b.startswith("pwe-runs/<run-id>/")]
    assert len(blocks) == 1, ("the docs should draw the run directory once, in a block starting pwe-runs/<run-id>/ "
                              f"({RUN_DIRECTORY_PAGE.relative_to(ROOT)})")
    assert blocks[0] in RUN_DIRECTORY_PAGE.read_text(), f"the drawing is not on {RUN_DIRECTORY_PAGE.relative_to(ROOT)}"
    entries = {}
    for line in blocks[0].splitlines()[1:]:
        # two spaces, then an entry (to two spaces or the end), then what it is; more spaces: that goes on
        m = re.match(r"^  (\S(?:.*?\S)?)(?: {2,}(.*))?$", line)
        if not m:
            continue
        path, what = m.group(1), (m.group(2) or "")
        top = path.split("/")[0]
        assert top not in entries, f"the drawing names {top} twice"
        entries[top] = (path, not what.startswith("("))
    return entries


def test_run_directory_drawing_matches_a_quickstart_run(tmp_path):
    rc, out, err = run_cli("run", example(tmp_path, "quickstart.yaml"), cwd=tmp_path)
    assert rc == 0, err
    (run,) = (tmp_path / "pwe-runs").iterdir()
    drawn = drawn_layout()
    made = {p.name for p in run.iterdir()}
    undrawn = made - set(drawn)
    assert not undrawn, f"a run makes {sorted(undrawn)}, which the drawing of the run directory (docs) leaves out"
    fill = {"<run-id>": run.name, "<id>": "p1", "<node>": "simulate", "<index // 1000>": "0", "<index>": "3"}
    for top, (path, always) in drawn.items():
        for k, v in fill.items():
            path = path.replace(k, v)
        if always:
            assert (run / path).exists(), f"the docs draw {path} in every run directory; a quickstart run has none"
        else:  # made only at times (while an engine runs, by pwe submit, by batch pilots): pwe must still name it
            assert top in made or any(f'"{top}"' in p.read_text() for p in SOURCES), (
                f"the docs draw {top}, which no run made and no source file names")


# -- the command table lists every command -----------------------------------------------------


def cli_commands(*group: str) -> list[str]:
    rc, out, err = run_cli(*group, "--help")
    assert rc == 0, err
    listed = out.split("Commands:", 1)[1]
    return [line.split()[0] for line in listed.splitlines() if line.startswith("  ") and line.split()]


def test_command_table_lists_every_command():
    """The table of the commands page (one table: a blank line would end it) names each
    command of `pwe --help`, each subcommand of every group (`pwe hosts`, `pilot`,
    `service`, `trigger`), and nothing else."""
    text = COMMANDS_PAGE.read_text()
    lines = text[text.index("| command"):].strip().splitlines()
    assert lines[0].startswith("| command"), f"{COMMANDS_PAGE.relative_to(ROOT)} should have the commands' table"
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append(re.split(r"(?<!\\)\|", line)[1].strip())  # a cell may hold an escaped pipe
    named = [re.match(r"`pwe (\w+)", r).group(1) for r in rows if re.match(r"`pwe (\w+)", r)]
    commands = cli_commands()
    assert sorted(set(named)) == sorted(commands), (
        f"{COMMANDS_PAGE.relative_to(ROOT)}'s table names {sorted(set(named))}; `pwe --help` lists {sorted(commands)}"
        " (a blank line inside the table ends it there)")
    for group in ("hosts", "pilot", "service", "trigger"):
        row = " ".join(r for r in rows if r.startswith(f"`pwe {group}"))
        assert row, f"no row of the table names `pwe {group}`"
        for sub in cli_commands(group):
            assert re.search(rf"`(pwe {group} )?{sub}\b|/ `?{sub}\b", row), (
                f"the {group} row does not name `pwe {group} {sub}`")


def test_readme_and_docs_stand_alone():
    """A clone has no ../shared/: neither the README nor a page may send its reader there,
    and every relative link of the README resolves in the repository (the pages' links are
    checked by the strict build, tests/project/test_docs_site.py)."""
    for page in doc_pages():
        assert "shared/DESIGN.md" not in page.read_text(), f"{page.relative_to(ROOT)} names ../shared/DESIGN.md"
    text = README.read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):  # every relative link resolves in the repository
        if "://" not in target:
            assert (ROOT / target).resolve().is_relative_to(ROOT) and (ROOT / target).exists(), (
                f"README.md links {target}, which a clone does not have")
