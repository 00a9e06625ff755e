"""``pwe lint FILE``: warnings about a workflow that validates, each with its file and line.

Here, in the room that reads runs back, because one check reads earlier runs: a member
walltime (``maxWallTimePerMember``) far from what the last runs of this workflow in its
workspace measured (:func:`walltimes_far`, from their journals through
:mod:`pwe.observe.trace` and :mod:`pwe.observe.usage`, read-only). That is above
:mod:`pwe.planning` in the layers contract; the checks that need the plan and its hosts
alone are :mod:`pwe.planning.lint`'s, run from here with it, so the command asks one
function. The workflow is loaded as ``pwe validate`` loads it
(:func:`pwe.observe.planview.check`): what does not validate is that one-line error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.errors import PweError
from ..planning.lint import Lint

#: the last runs of the workflow (newest first) whose measured durations count
LAST_RUNS = 3
#: run directories looked into at most for them (run.json read, nothing more, for the rest)
LOOKED_AT = 50
#: a walltime more than this many times the longest member measured is far from it
FAR = 10
#: seconds a member is taken to last at least when its walltime is weighed: a walltime of a
#: few minutes is never far from members of a second (batch systems count whole minutes)
LEAST_S = 60.0


def lint(file: str, hosts_file: str | None = None, host: str | None = None,
         root: Path | None = None) -> list[Lint]:
    """Every warning about ``file`` (``--hosts``, ``--host`` as ``pwe validate`` takes them;
    ``root``: the runs root earlier runs are looked for in, ./pwe-runs by default), by file
    and line. :class:`~pwe.base.errors.PweError` (one line) when it does not validate."""
    import hostinfo

    from ..planning import products
    from ..planning.lint import lint_plan
    from ..workflow.load import load_workflow
    from . import planview

    plan, hosts, _ = planview.check(file, (), host, hosts_file)
    _, raw = load_workflow(plan.file)
    registry = hostinfo.load(plan.file, hosts_file)
    workspace = products.workspace(plan)
    found = lint_plan(plan, hosts, registry, raw, workspace) + walltimes_far(plan, workspace, root)
    return sorted(found, key=lambda w: (w.file != str(plan.file), w.file, w.line or 0))


def earlier_runs(plan: Any, workspace: Path, root: Path | None = None) -> list[Path]:
    """The run directories of this workflow file into ``workspace`` under ``root``, newest
    first, at most :data:`LAST_RUNS` (run.json alone read to choose them)."""
    from ..base.regular import read_json
    from ..runstate import rundir

    try:
        dirs = rundir.run_dirs(root or rundir.DEFAULT_ROOT)[:LOOKED_AT]
    except PweError:  # (a runs root that is not a directory: no earlier run to weigh)
        return []
    src, out = str(plan.file.resolve()), []
    for d in dirs:
        try:
            info = read_json(d / "run.json", limit=1 << 20)
        except (OSError, ValueError, PweError):
            continue
        if info.get("workflow") == src and info.get("workspace") == str(workspace):
            out.append(d)
            if len(out) == LAST_RUNS:
                break
    return out


def measured_longest(runs: list[Path]) -> dict[str, tuple[float, int, list[str]]]:
    """Per node id: the longest attempt (s) the ``runs`` measured, how many attempts they
    measured, and the runs that measured any. A run that cannot be read is passed over."""
    from .trace import load
    from .usage import usage

    out: dict[str, tuple[float, int, list[str]]] = {}
    for d in runs:
        try:
            info, plan, _, tr = load(d, with_state=False)
        except (PweError, OSError, ValueError):  # (damaged, of a newer pwe, half made: it says nothing here)
            continue
        for nid, u in usage(info, plan, tr)["nodes"].items():
            if not u["attempts"] or not u["duration_s"]:
                continue
            longest, count, names = out.get(nid, (0.0, 0, []))
            out[nid] = (max(longest, u["duration_s"]["max"]), count + u["attempts"], names + [d.name])
    return out


def walltimes_far(plan: Any, workspace: Path, root: Path | None = None) -> list[Lint]:
    """A node's ``maxWallTimePerMember`` below the longest member the last runs measured
    (members like it would be killed), or more than :data:`FAR` times it (pilots and the
    core-hour budget count every member's walltime), with the numbers."""
    asked = {nid: pn.scheduling.maxWallTimePerMember for nid, pn in plan.nodes.items()}
    if not any(asked.values()):
        return []
    runs = earlier_runs(plan, workspace, root)
    if not runs:
        return []
    from .usage import suggest_walltime

    out = []
    for nid, (longest, count, names) in measured_longest(runs).items():
        minutes = asked.get(nid)
        if not minutes:
            continue
        pn = plan.nodes[nid]
        said = (f"node '{nid}': maxWallTimePerMember {minutes:g} min ({minutes * 60:,.0f} s), and the longest of "
                f"{count:,} attempts the last {len(names)} run(s) of this workflow here measured took {longest:,.3g} s "
                f"({', '.join(names)})")
        give = f"give maxWallTimePerMember: {suggest_walltime(longest)} (the longest and half again, in minutes)"
        if minutes * 60 < longest:
            what = f"{said}: members like it would be killed at their walltime"
        elif minutes * 60 > FAR * max(longest, LEAST_S):
            what = (f"{said}: more than {FAR}x; pilot jobs are sized to hold it, a pilot hands a member back "
                    "when less than that is left, and the core-hour budget counts it")
        else:
            continue
        out.append(Lint(str(plan.file), pn.scheduling_lines.get("maxWallTimePerMember") or pn.line, "walltime-far",
                        what, give))
    return out
