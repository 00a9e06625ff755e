"""The README and examples/ as a new user meets them: every workflow the README shows is a
file in examples/, every example workflow validates and runs, the run directory the README
draws is the one a run makes, and the command table lists every command the CLI has.

The README is parsed, not copied here, so that these tests fail when it drifts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLES, ROOT, run_cli

README = ROOT / "README.md"


def fenced_blocks(text: str, lang: str | None = None) -> list[str]:
    """The contents of the ``` blocks of a markdown text (only ```LANG ones when given)."""
    out = []
    for m in re.finditer(r"^```([^\n]*)\n(.*?)^```\s*$", text, re.S | re.M):
        if lang is None or m.group(1).strip() == lang:
            out.append(m.group(2))
    return out


def section(text: str, title: str) -> str:
    """The text under a '## title' heading, up to the next heading of that level."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"README.md has no '## {title}' section"
    return m.group(1)


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


# -- the workflows the README shows are example files ----------------------------------------


def test_every_workflow_in_the_readme_is_an_example_file():
    examples = {p.name: p.read_text() for p in example_workflows()}
    shown = []
    for block in fenced_blocks(README.read_text(), "yaml"):
        doc = yaml.safe_load(block)
        if not (isinstance(doc, dict) and "nodes" in doc):
            continue  # e.g. the hosts.yaml fragment
        shown.append(doc.get("name"))
        same = [name for name, text in examples.items() if text.strip() == block.strip()]
        assert same, (f"README.md shows workflow {doc.get('name')!r} that is not, to the letter, a file in examples/: "
                      "a new user cannot run it as shown. Show an example file verbatim.")
    assert shown, "README.md shows no workflow at all"


# -- every example workflow validates, and runs where it runs on this machine -----------------

# Extra arguments for a run in the tests: watch.yaml is meant to take ~15 s to be watched.
RUN_ARGS = {"watch.yaml": ["--set", "seconds=0"],
            "products.yaml": ["--workspace", "."]}  # (its products in tmp_path, not in examples/)
# Runs elsewhere, against the real services it needs.
RUN_ELSEWHERE = {"hybrid.yaml": "needs SLURM: tests/test_batch.py::test_hybrid_example_runs_here_and_on_slurm",
                 "gpu_partition.yaml": "needs SLURM: tests/test_partition.py::test_gpu_partition_example_runs_on_slurm"}


@pytest.mark.parametrize("wf", example_workflows(), ids=lambda p: p.name)
def test_every_example_workflow_validates_and_runs(wf, tmp_path):
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert rc == 0, f"pwe validate {wf.name}: exit {rc}\n{err}"
    if wf.name in RUN_ELSEWHERE:
        return  # validated here; its run is the test RUN_ELSEWHERE names
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--run-dir", run, *RUN_ARGS.get(wf.name, []), cwd=tmp_path, timeout=180)
    assert rc == 0, f"pwe run {wf.name}: exit {rc}\n{out}\n{err}"
    assert "Traceback" not in err


def test_every_example_is_in_the_examples_table():
    """examples/README.md lists each workflow file of examples/."""
    table = (EXAMPLES / "README.md").read_text()
    missing = [p.name for p in example_workflows() if f"`{p.name}`" not in table]
    assert not missing, f"examples/README.md does not list {missing}"


# -- the run directory drawn in the README is the one a run makes -----------------------------

SOURCES = [p for d in ("pwe", "pilot", "protocols") for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".j2")]


def drawn_layout() -> dict[str, tuple[str, bool]]:
    """From README.md's drawing of pwe-runs/<run-id>/: {top-level entry: (path as drawn,
    made by every run)}. An entry whose description starts with '(' exists only at times."""
    blocks = [b for b in fenced_blocks(README.read_text()) if b.startswith("pwe-runs/<run-id>/")]
    assert len(blocks) == 1, "README.md should draw the run directory once, in a block starting pwe-runs/<run-id>/"
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


def test_readme_run_directory_drawing_matches_a_quickstart_run(tmp_path):
    rc, out, err = run_cli("run", EXAMPLES / "quickstart.yaml", cwd=tmp_path)
    assert rc == 0, err
    (run,) = (tmp_path / "pwe-runs").iterdir()
    drawn = drawn_layout()
    made = {p.name for p in run.iterdir()}
    undrawn = made - set(drawn)
    assert not undrawn, f"a run makes {sorted(undrawn)}, which README.md's drawing of the run directory leaves out"
    fill = {"<run-id>": run.name, "<id>": "p1", "<node>": "simulate", "<index // 1000>": "0", "<index>": "3"}
    for top, (path, always) in drawn.items():
        for k, v in fill.items():
            path = path.replace(k, v)
        if always:
            assert (run / path).exists(), f"README.md draws {path} in every run directory; a quickstart run has none"
        else:  # made only at times (while an engine runs, by pwe submit, by batch pilots): pwe must still name it
            assert top in made or any(f'"{top}"' in p.read_text() for p in SOURCES), (
                f"README.md draws {top}, which no run made and no source file names")


# -- the command table lists every command -----------------------------------------------------


def cli_commands(*group: str) -> list[str]:
    rc, out, err = run_cli(*group, "--help")
    assert rc == 0, err
    listed = out.split("Commands:", 1)[1]
    return [line.split()[0] for line in listed.splitlines() if line.startswith("  ") and line.split()]


def test_readme_command_table_lists_every_command():
    """The table under '## Commands' (one table: a blank line would end it) names each
    command of `pwe --help`, each subcommand of `pwe hosts --help`, and nothing else."""
    text = section(README.read_text(), "Commands")
    lines = text.strip().splitlines()
    assert lines[0].startswith("| command"), "the Commands section should start with its table"
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip())
    named = [re.match(r"`pwe (\w+)", r).group(1) for r in rows if re.match(r"`pwe (\w+)", r)]
    commands = cli_commands()
    assert sorted(set(named)) == sorted(commands), (
        f"README.md's command table names {sorted(set(named))}; `pwe --help` lists {sorted(commands)}"
        " (a blank line inside the table ends it there)")
    hosts_row = next(r for r in rows if r.startswith("`pwe hosts"))
    for sub in cli_commands("hosts"):
        assert re.search(rf"`(pwe hosts )?{sub}\b", hosts_row), f"the hosts row does not name `pwe hosts {sub}`"


def test_readme_stands_alone():
    """A clone has no ../shared/: the README must not send its reader there."""
    text = README.read_text()
    assert "shared/DESIGN.md" not in text
    for target in re.findall(r"\]\(([^)#]+)\)", text):  # every relative link resolves in the repository
        if "://" not in target:
            assert (ROOT / target).resolve().is_relative_to(ROOT) and (ROOT / target).exists(), (
                f"README.md links {target}, which a clone does not have")
