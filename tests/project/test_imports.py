"""The import graph of pwe, pilot, protocols and hostinfo has no loop: two modules that import
each other (directly or round a longer ring) are one room split in two, or miss an
interface. grimp (import-linter's graph) counts every import: at the top of a module, inside
a function, under ``if TYPE_CHECKING``. The layers between the rooms are import-linter's
contracts in pyproject.toml (``lint-imports``); this is the loop check beside them."""

from __future__ import annotations

import grimp
import networkx as nx

PACKAGES = ("pwe", "pilot", "protocols", "hostinfo")


def test_no_import_loop_between_modules():
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    g = nx.DiGraph()
    g.add_nodes_from(graph.modules)
    g.add_edges_from((m, d) for m in graph.modules for d in graph.find_modules_directly_imported_by(m))
    loops = sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)
    said = []
    for loop in loops:
        ring = nx.find_cycle(g.subgraph(loop))
        said.append(" -> ".join([a for a, _ in ring] + [ring[0][0]]))
    assert not loops, "import loops (move the shared piece down, or pass a callable):\n" + "\n".join(said)


#: The loose cap on a module's length (ARCHITECTURE.md, "Complexity per function, length per
#: module"): what is capped is a function's complexity (ruff's C901, pyproject.toml).
MAX_LINES = 800


def test_no_module_over_the_line_cap_but_those_architecture_names():
    """A module over MAX_LINES lines is two jobs in one file, unless ARCHITECTURE.md
    ("Complexity per function, length per module") says why it is one piece."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "ARCHITECTURE.md").read_text()
    section = text.split("### Complexity per function, length per module", 1)[1].split("\n## ", 1)[0]
    assert f"at {MAX_LINES} lines" in section, "ARCHITECTURE.md's section names another cap than MAX_LINES"
    named = set(re.findall(r"^- `([\w/]+\.py)`", section, re.M))
    long = {str(p.relative_to(root)) for pkg in PACKAGES for p in (root / pkg).rglob("*.py")
            if sum(1 for _ in p.open()) > MAX_LINES}
    assert long <= named, f"over {MAX_LINES} lines, and not in ARCHITECTURE.md's list: {sorted(long - named)}"
    assert named <= long, f"ARCHITECTURE.md names modules no longer over {MAX_LINES} lines: {sorted(named - long)}"
