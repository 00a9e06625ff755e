"""Records that say what happened (issue 45): an attempt's start and end are the times its
member really started and ended, even for members that fail at once (the trace never shows
more running at once than slots, the report's utilisation never passes 100 %); `pwe logs`
into a pipe or a file gives a member's bytes exactly as written; `pwe trace` holds every
attempt that started, also those a `halt ... now` stopped.

Every run here is real: the engine, its pilot and the members are real processes on this
machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import most_at_once, run_cli


def _trace(cwd: Path, run: Path) -> list[dict]:
    rc, out, err = run_cli("trace", run, "--json", cwd=cwd)
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


# -- members that fail at once ------------------------------------------------------------------

def test_members_that_fail_at_once_end_when_they_ended(tmp_path):
    # killed by a signal nobody here sent (exit 137: the pilot waits a moment for its own
    # SIGTERM before it says so) or a line on stderr and a failing exit, on 2 slots: their
    # ends are when they ended, not when the pilot got round to saying so
    (tmp_path / "wf.yaml").write_text(
        "name: quick\nnodes:\n  a:\n    parameters: {i: {range: [0, 20]}}\n"
        "    run: if [ $(( {{ i }} % 2 )) = 0 ]; then exit 137; fi; echo bad >&2; exit 3\n")
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
    assert rc == 1, err
    run = Path(json.loads(out)["run_dir"])
    recs = _trace(tmp_path, run)
    assert len(recs) == 20 and {r["exit_status"] for r in recs} == {137, 3}, recs
    for r in recs:
        # its start is when its end says it began (t - dt), to the rounding of each
        assert r["start"] <= r["end"] and r["end"] - r["duration"] >= r["start"] - 0.002, r
    assert most_at_once([(r["start"], r["end"]) for r in recs]) <= 2, [(r["start"], r["end"]) for r in recs]
    rc, out, err = run_cli("report", run, "-o", tmp_path / "r.html", cwd=tmp_path)
    assert rc == 0, err
    util = re.search(r"([0-9.]+)% of allocated cores", (tmp_path / "r.html").read_text())
    assert util and float(util.group(1)) <= 100.0, util
