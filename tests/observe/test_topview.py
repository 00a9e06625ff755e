"""pwe/observe/topview.py, what ``pwe top`` shows, without a terminal: rates from successive
counts, the filter's cycle, and the documents of a real finished run (its view, its
members as rows, a member's log tail, explain and failures panes), every value of it shown
as text (an escape sequence written visibly)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import run_cli
from pwe.base.states import FAILED, RUNNING
from pwe.observe import topview

#: a[3] fails with a line on stderr; b[*] after a (b[3] skipped); h prints its hostile value
#: and a line of 5,000 characters
WORKFLOW = r"""name: topview
nodes:
  a:
    parameters: {k: {range: [0, 6]}}
    run: |
      echo "hello {{ k }}"
      if [ {{ k }} = 3 ]; then echo "k=3 broke" >&2; exit 3; fi
  b:
    after: [a]
    parameters: {k: {range: [0, 6]}}
    run: echo b
  h:
    parameters: {v: ["\e]0;pwned\a\e[31m[bold]red"]}
    run: |
      echo {{ v }}
      printf 'x%.0s' $(seq 5000); echo
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("topview")
    (cwd / "wf.yaml").write_text(WORKFLOW)
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=cwd)
    assert rc == 1, err
    return Path(json.loads(out)["run_dir"])


def loaded(run_dir: Path):
    from pwe.observe.results import load_state

    return load_state(run_dir)[1]


def test_rates_measure_over_the_window_from_successive_counts():
    assert topview.rates([]) == {}
    assert topview.rates([(0.0, {"a": 5})]) == {"a": None}  # one sample: no span yet
    assert topview.rates([(0.0, {"a": 5}), (0.5, {"a": 9})]) == {"a": None}  # (under a second)
    samples = [(0.0, {"a": 0}), (10.0, {"a": 20}), (20.0, {"a": 40})]
    assert topview.rates(samples) == {"a": 2.0}
    # only what lies within the window counts: the last 10 s
    assert topview.rates([(0.0, {"a": 0}), (100.0, {"a": 10}), (110.0, {"a": 110})], window=10) == {"a": 10.0}
    # a count that went down (a retry took members back): measured from the drop
    assert topview.rates([(0.0, {"a": 50}), (10.0, {"a": 2}), (20.0, {"a": 12})]) == {"a": 1.0}
    # a node that appeared later: from when it did
    assert topview.rates([(0.0, {"a": 0}), (10.0, {"a": 10, "b": 0}), (20.0, {"a": 20, "b": 5})]) == \
        {"a": 1.0, "b": 0.5}


def test_kept_samples_are_bounded_by_the_window():
    samples = [(float(t), {"a": t}) for t in range(0, 1000, 10)]
    kept = topview.kept(samples, window=100)
    assert kept[0][0] == 890.0 and kept[-1][0] == 990.0 and len(kept) == 11
    assert topview.kept([]) == []


def test_the_filter_cycles_through_the_states_the_run_has():
    totals = {"failed": 2, "running": 0, "done": 5, "waiting": 1}
    seen, f = [], "all"
    for _ in range(5):
        f = topview.next_filter(f, totals)
        seen.append(f)
    assert seen == ["failed", "waiting", "done", "all", "failed"]
    assert topview.next_filter("all", {}) == "all"
    assert topview.next_filter("nonsense", {"done": 1}) == "done"


def test_pilots_count_members_running_and_show_what_they_were_told_as_text():
    ns = SimpleNamespace(pilot={0: "p1", 1: "p1", 2: "p2"}, state=bytearray([RUNNING, RUNNING, FAILED]))
    state = SimpleNamespace(nodes={"a": ns})
    seen = {"p1": {"state": "up", "host": "login\x1b[2J", "slots": 4},
            "p2": {"state": "gone", "job": "77", "batch": "slurm", "slots": 8, "why": "walltime\x07",
                   "lost": {"n3": 1.0}}}
    p1, p2 = topview.pilots(seen, state)
    assert p1 == {"pilot": "p1", "state": "up", "where": "on login\\x1b[2J", "slots": 4, "running": 2, "lost": [],
                  "why": None}
    assert p2["where"] == "slurm job 77" and p2["running"] == 0 and p2["why"] == "walltime\\x07" \
        and p2["lost"] == ["n3"]
    assert topview.pilots(seen)[0]["running"] is None  # (no state: not counted)


def test_run_view_and_runs_of_a_finished_run(run):
    view = topview.run_view(run, loaded(run))
    assert view["run_id"] == run.name and not view["running"] and view["phase"] == "finished with failures"
    nodes = {n["node"]: n for n in view["nodes"]}
    assert nodes["a"]["total"] == 6 and nodes["a"]["finished"] == 6 and nodes["a"]["counts"]["failed"] == 1
    assert nodes["b"]["counts"]["skipped"] == 1 and nodes["b"]["finished"] == 6
    assert view["total"] == 13 and view["finished"] == 13 and view["totals"]["failed"] == 1
    assert topview.ran(view) == {"a": 6, "b": 5, "h": 1}  # (done or failed: the skipped did not run)
    assert [p["pilot"] for p in view["pilots"]] == ["p1"] and view["pilots"][0]["running"] == 0
    listed = topview.runs(run.parent)
    assert [r["run_id"] for r in listed] == [run.name] and listed[0]["finished"] == 13


def test_members_as_rows_in_one_state_values_shown_as_text(run):
    st = loaded(run)
    failed = topview.members(run, st, "failed")
    assert [(m["node"], m["member"], m["label"], m["ended"]) for m in failed] == [("a", 3, "a[3]", "exit 3")]
    assert len(topview.members(run, st, "all", limit=4)) == 4
    (h,) = [m for m in topview.members(run, st) if m["node"] == "h"]
    assert h["values"] == r"v=\x1b]0;pwned\x07\x1b[31m[bold]red" and "\x1b" not in h["values"]
    assert [m["label"] for m in topview.members(run, st, "skipped")] == ["b[3]"]


def test_log_tail_explain_and_failures_panes(run):
    log = topview.log_tail(run, "a", 3)
    assert log["title"] == "log of a[3] attempt 1" and log["from_end"]
    assert log["lines"] == ["hello 3", "-- stderr --", "k=3 broke"]
    h = topview.log_tail(run, "h", 0)
    assert h["lines"][0] == r"\x1b]0;pwned\x07\x1b[31m[bold]red"  # written visibly, never sent as it is
    assert len(h["lines"][1]) == topview.LINE_MOST  # (a long line: its start)
    never = topview.log_tail(run, "b", 3)  # skipped: it never ran
    assert never["lines"] == ["b[3] has not run yet"] and not never["from_end"]
    why = topview.explained(run, "a", 3)
    assert why["title"] == "explain a[3]" and any("exit 3" in line for line in why["lines"])
    assert topview.explained(run, "a", 99)["lines"][0].startswith("a:99: no such member")
    fails = topview.failures_pane(run)
    first = next(i for i, line in enumerate(fails["lines"]) if line.startswith("by parameter value"))
    assert fails["lines"][first + 2].split()[:3] == ["a", "k", "3"]
    assert not any("\x1b" in line for line in fails["lines"] + why["lines"] + h["lines"])


def test_a_snapshot_that_is_a_fifo_is_not_opened_the_journal_counts(run, tmp_path):
    import os
    import shutil

    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    (copy / "state.json").unlink()
    os.mkfifo(copy / "state.json")  # (opened for reading, it would wait for a writer for ever)
    view = topview.run_view(copy)
    assert view["phase"] == "finished with failures" and view["finished"] == 13 and view["totals"]["failed"] == 1
