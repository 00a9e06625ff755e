"""Right-sizing (pwe/observe/usage.py): `pwe status --usage [--json]` and the report's
"Right-sizing" section, from real runs whose members use known, spread-out memory; the
suggestions checked against the members' own measured figures (`pwe trace`); the
percentile and rounding functions on fixed inputs; what a run with nothing measured, a
failed node, a NaN in a journal and a hostile reason give."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from helpers import no_traceback, pwe

from pwe.observe.trace import Trace
from pwe.observe.usage import (MEASURABLE_S, NOT_MEASURED, lines, percentile, round_memory, stats, suggest_cores,
                               suggest_memory, suggest_walltime, usage)
from pwe.runstate.journal import decode, encode
from pwe.workflow.model import Scheduling

#: most members use little memory, a few much: MB each member allocates and touches
SIZES = [8] * 14 + [24, 24, 48, 48, 96, 160]

SPREAD_WF = """\
name: spread
nodes:
  mem:
    parameters:
      mb: {sizes}
    run: >-
      python3 -c "import sys; n = {{{{ mb }}}} << 20; b = bytearray(n); b[::4096] = b'x' * len(range(0, n, 4096))"
    scheduling: {{memoryPerMember: 4096, maxWallTimePerMember: 30}}
""".format(sizes=json.dumps(SIZES))

DOC_KEYS = {"run_id", "fit", "headroom", "nodes", "total"}
NODE_KEYS = {"members", "attempts", "failed", "reasons", "duration_s", "rss_mb", "cpu_s", "cores_used",
             "cpu_efficiency", "asked", "suggested", "core_hours", "packing", "node", "notes"}


def _no_nan(text: str):
    """JSON that holds no NaN or infinity (json.loads would take them)."""
    def refuse(c):
        raise AssertionError(f"{c} in the JSON")
    return json.loads(text, parse_constant=refuse)


def _usage_json(run, cwd):
    rc, out, err = pwe("status", run, "--usage", "--json", cwd=cwd)
    assert rc == 0, err
    no_traceback(err)
    return _no_nan(out)


# ---------------------------------------------------------------- the functions, fixed inputs
def test_percentile_nearest_rank():
    hundred = [float(i) for i in range(1, 101)]
    assert percentile(hundred, 0.99) == 99.0
    assert percentile(hundred, 0.5) == 50.0
    assert percentile(hundred, 1.0) == 100.0
    assert percentile([7.0], 0.99) == 7.0 and percentile([7.0], 0.5) == 7.0
    assert percentile([], 0.99) is None
    # 20 values: p95 is the 19th, p99 the 20th (19 of 20 is 95%, under 99%)
    twenty = [float(i) for i in range(20)]
    assert percentile(twenty, 0.95) == 18.0 and percentile(twenty, 0.99) == 19.0
    assert stats([]) is None
    assert stats([2.0, 1.0]) == {"p50": 1.0, "p95": 2.0, "p99": 2.0, "max": 2.0, "mean": 1.5}


def test_rounding_and_suggestions():
    assert [round_memory(x) for x in (0.5, 1, 64, 64.01, 1000, 1024, 1025, 8192, 8193)] == \
        [64, 64, 64, 128, 1024, 1024, 1280, 8192, 9216]
    assert suggest_memory(100) == 128  # 120 MB, rounded up to 64 MB steps
    assert suggest_memory(1000) == 1280  # 1,200 MB, in 256 MB steps above 1 GiB
    assert [suggest_walltime(s) for s in (0.0, 0.1, 40, 40.1, 600)] == [1, 1, 1, 2, 15]
    assert [suggest_cores(u) for u in (0.0, 0.3, 1.05, 1.1, 1.2, 3.95)] == [1, 1, 1, 1, 2, 4]


# ---------------------------------------------------------------- from a journal's records
def _plan(**nodes):
    return SimpleNamespace(nodes={nid: SimpleNamespace(scheduling=Scheduling(**sched), host="local", size=size)
                                  for nid, (size, sched) in nodes.items()})


def test_nothing_measured_and_one_member():
    plan = _plan(a=(3, {"memoryPerMember": 100}), b=(1, {}))
    tr = Trace()
    info = {"run_id": "r", "lanes": {"local": {"cores": 4, "host_def": {"cores_per_node": 4}}}}
    doc = usage(info, plan, tr)
    text = json.dumps(doc, allow_nan=False)  # (ValueError on a NaN)
    assert doc["total"] == {"attempts": 0, "failed": 0, "core_hours": dict.fromkeys(doc["total"]["core_hours"])}
    for u in doc["nodes"].values():
        assert u["attempts"] == 0 and u["suggested"] is None and u["notes"] == [NOT_MEASURED], text
    # one member, measured: every figure is its own, nothing divided by zero
    for r in ({"e": "assign", "n": "b", "m": 0, "a": 1, "p": "p1", "t": 1.0},
              {"e": "end", "n": "b", "m": 0, "a": 1, "p": "p1", "t": 3.0, "rc": 0, "dt": 0.0, "cpu": 0.0,
               "rss": 2048, "ran": 1}):
        tr.take(r)
    u = usage(info, plan, tr)["nodes"]["b"]
    json.dumps(u, allow_nan=False)
    assert u["attempts"] == 1 and u["rss_mb"]["p99"] == 2.0 and u["cpu_efficiency"] is None
    assert u["suggested"] == {"memoryPerMember": 64, "maxWallTimePerMember": 1, "cores": None, "covers": 1.0}


def test_compacted_ends_nan_and_reasons():
    """Plain ends compacted into one `ends` record count like any; a NaN figure is not
    counted; ends that say oom are counted and named, whatever else they say."""
    plan = _plan(a=(4, {"memoryPerMember": 1000, "maxWallTimePerMember": 10}))
    tr = Trace()
    tr.take({"e": "assign", "n": "a", "m": 0, "a": 1, "p": "p1", "t": 1.0, "len": 4})
    tr.take({"e": "ends", "n": "a", "a": 1, "p": "p1", "m": [0, 1], "t": [5.0, 6.0], "dt": [2.0, 4.0],
             "cpu": [2.0, 4.0], "rss": [102400, 204800], "ran": [1, 1]})
    tr.take({"e": "end", "n": "a", "m": 2, "a": 1, "p": "p1", "t": 7.0, "rc": 137, "dt": 3.0, "cpu": 1.0,
             "rss": 1024000, "ran": 1, "reason": "oom"})
    tr.take({"e": "end", "n": "a", "m": 3, "a": 1, "p": "p1", "t": 7.0, "rc": 0, "dt": math.nan, "cpu": 1.0,
             "rss": 1024, "ran": 1})
    doc = usage({"run_id": "r", "lanes": {}}, plan, tr)
    json.dumps(doc, allow_nan=False)
    u = doc["nodes"]["a"]
    assert u["attempts"] == 3 and u["failed"] == 1 and u["reasons"] == {"oom": 1}
    assert u["duration_s"]["max"] == 4.0 and u["rss_mb"]["max"] == 1000.0
    assert u["cpu_efficiency"] == round(7.0 / 9.0, 4)
    assert u["suggested"]["memoryPerMember"] == 1280  # the oom member's 1,000 MB + 20 %: above the ask
    assert any("killed for memory" in n for n in u["notes"]) and any("too small" in n for n in u["notes"])
    assert u["core_hours"]["held"] == round(9.0 / 3600, 4) and u["core_hours"]["walltime_reserved"] == 0.5


def test_hostile_figures_are_bounded():
    """Negative, infinite and absurd figures in a journal (a damaged or forged end): the
    unusable ones are not counted, the document stays finite JSON."""
    plan = _plan(a=(5, {"memoryPerMember": 100, "maxWallTimePerMember": 1}))
    tr = Trace()
    tr.take({"e": "assign", "n": "a", "m": 0, "a": 1, "p": "p1", "t": 1.0, "len": 4})
    # (the largest figures in range, pwe/base/numbers.py: dt 1e8 s, cpu 1e12 s, rss 1e13 KB; past
    # them, as 1e300, a figure is absent: that attempt is not counted)
    for m, (dt, cpu, rss) in enumerate([(-1.0, 1.0, 1024), (math.inf, 1.0, 1024), (1.0, -5.0, -1),
                                        (1e8, 1e12, 1e13), (1e300, 1e300, 1e300)]):
        tr.take({"e": "end", "n": "a", "m": m, "a": 1, "p": "p1", "t": 9.0, "rc": 0, "dt": dt, "cpu": cpu,
                 "rss": rss, "ran": 1})
    doc = usage({"run_id": "r", "lanes": {}}, plan, tr)
    json.dumps(doc, allow_nan=False)
    u = doc["nodes"]["a"]
    assert u["attempts"] == 2 and u["rss_mb"]["max"] == round(1e13 / 1024, 4)
    assert u["cpu_s"]["max"] == 1e12 and u["suggested"]["covers"] == 1.0
    assert any(line.startswith("a: to fit 99% of 2 attempts") for line in lines(doc))


# ---------------------------------------------------------------- real runs through the CLI
def test_spread_memory_suggestion_covers_the_members(tmp_path, write):
    wf = write(SPREAD_WF)
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    doc = _usage_json(run, tmp_path)
    assert DOC_KEYS <= set(doc) and NODE_KEYS <= set(doc["nodes"]["mem"])
    u = doc["nodes"]["mem"]
    assert u["members"] == u["attempts"] == len(SIZES) and u["failed"] == 0
    for key in ("duration_s", "rss_mb", "cpu_s"):
        assert set(u[key]) == {"p50", "p95", "p99", "max", "mean"}
        assert all(isinstance(v, (int, float)) for v in u[key].values())
    sug = u["suggested"]
    # the members' own figures, from the trace: the suggestion fits at least 99% of them
    rc, out, err = pwe("trace", run, "--format", "json", cwd=tmp_path)
    assert rc == 0, err
    recs = [json.loads(line) for line in out.splitlines()]
    assert len(recs) == len(SIZES)
    fit = sum(1 for r in recs if r["rss_kb"] / 1024 <= sug["memoryPerMember"]
              and r["duration"] <= sug["maxWallTimePerMember"] * 60)
    assert fit / len(recs) >= 0.99 and sug["covers"] >= 0.99
    # what they touched, they used: the largest member's peak is above what it allocated
    assert u["rss_mb"]["max"] >= max(SIZES)
    # asked far too much: the suggestions are below the asks
    assert sug["memoryPerMember"] < 4096 and sug["maxWallTimePerMember"] < 30
    assert sug["memoryPerMember"] % 64 == 0 and isinstance(sug["maxWallTimePerMember"], int)
    ch = u["core_hours"]
    assert ch["held"] >= ch["used"] >= 0 and ch["walltime_reserved"] == round(len(SIZES) * 30 / 60, 4)
    assert any("memoryPerMember: 4,096 MB asked" in n for n in u["notes"])
    # the table says the same
    rc, out, err = pwe("status", run, "--usage", cwd=tmp_path)
    assert rc == 0, err
    assert f"memoryPerMember {sug['memoryPerMember']:,} (asked 4,096)" in out
    assert f"maxWallTimePerMember {sug['maxWallTimePerMember']} (asked 30)" in out
    # the report's section is built from the same document
    rc, out, err = pwe("report", run, "-o", tmp_path / "r.html", cwd=tmp_path)
    assert rc == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Right-sizing</h2>" in page and f"4,096 / {sug['memoryPerMember']:,} MB" in page


def test_failed_node_and_a_node_never_measured(tmp_path, write):
    wf = write("""\
name: broken
nodes:
  bad:
    parameters: {k: [1, 2]}
    run: exit 3
  after:
    after: [bad]
    run: "true"
""")
    rc, out, err = pwe("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 1, err
    doc = _usage_json(tmp_path / "run", tmp_path)
    bad, after = doc["nodes"]["bad"], doc["nodes"]["after"]
    assert bad["attempts"] == 2 and bad["failed"] == 2 and bad["suggested"]["covers"] == 1.0
    assert after["attempts"] == 0 and after["suggested"] is None and after["duration_s"] is None
    assert after["notes"] == [NOT_MEASURED]
    rc, out, err = pwe("status", tmp_path / "run", "--usage", cwd=tmp_path)
    assert rc == 0, err
    assert any(line.startswith("after") and NOT_MEASURED in line for line in out.splitlines()), out


def test_usage_with_watch_is_refused(tmp_path):
    rc, out, err = pwe("status", "--usage", "--watch", cwd=tmp_path)
    assert rc == 2 and err.count("\n") == 1 and "--usage" in err and "--watch" in err, err
    no_traceback(err)


def test_hostile_reason_and_outputs_are_text(tmp_path, write):
    """A reason and outputs as a pilot or member could send them (HTML, terminal escapes)
    reach the page escaped and the terminal written visibly."""
    wf = write("""\
name: hostile
nodes:
  h:
    run: printf 'x=<b>bold</b>\\n' >> "$PWE_OUTPUTS"
""")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    evil = "<script>alert(1)</script>\x1b[2J"
    journal = run / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    for k, line in enumerate(lines):
        r = decode(line)
        if r and r["e"] == "end" and r["n"] == "h":
            r.pop("c", None)
            r["reason"] = evil  # (as the engine journals a pilot's reason: as it came)
            lines[k] = encode(r)
            break
    else:
        pytest.fail("no end of h in the journal")
    journal.write_bytes(b"".join(lines))
    doc = _usage_json(run, tmp_path)
    assert doc["nodes"]["h"]["reasons"] == {evil: 1}
    rc, out, err = pwe("status", run, "--usage", cwd=tmp_path)
    assert rc == 0 and "\x1b" not in out and "\\x1b[2J" in out, out
    rc, out, err = pwe("report", run, "-o", tmp_path / "r.html", cwd=tmp_path)
    assert rc == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>bold</b>" not in page


def test_run_with_nothing_measured(tmp_path, write):
    """Every member complete by its products: the run succeeds with nothing run, so
    nothing measured; the document says so, with no figure made up."""
    wf = write("""\
name: ready
nodes:
  made:
    parameters: {k: [1, 2]}
    products: ["out{{ k }}.txt"]
    run: "false"
    scheduling: {memoryPerMember: 512}
""")
    for k in (1, 2):
        (tmp_path / f"out{k}.txt").write_text("made before\n")
    rc, out, err = pwe("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    doc = _usage_json(tmp_path / "run", tmp_path)
    u = doc["nodes"]["made"]
    assert u["members"] == 2 and u["attempts"] == 0 and u["notes"] == [NOT_MEASURED]
    assert u["suggested"] is None and u["cpu_efficiency"] is None and u["core_hours"] is None
    assert doc["total"]["attempts"] == 0 and set(doc["total"]["core_hours"].values()) == {None}
    rc, out, err = pwe("status", tmp_path / "run", "--usage", cwd=tmp_path)
    assert rc == 0 and NOT_MEASURED in out, err
    no_traceback(err)
    rc, out, err = pwe("report", tmp_path / "run", "-o", tmp_path / "r.html", cwd=tmp_path)
    assert rc == 0, err
    assert f"<li>made: {NOT_MEASURED}</li>" in (tmp_path / "r.html").read_text()


def test_members_of_a_few_milliseconds_are_too_short_to_measure_their_cores(tmp_path, write):
    # (their CPU time is a few clock ticks of the shell starting: cpu / dt said "cores 2
    # (asked 1)" of members that used one)
    wf = write("name: quick\nnodes:\n  q:\n    parameters: {i: {range: [0, 6]}}\n    run: 'true'\n")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    u = _usage_json(run, tmp_path)["nodes"]["q"]
    rc, out, err = pwe("trace", run, "--format", "json", cwd=tmp_path)
    short = sum(1 for line in out.splitlines() if json.loads(line)["duration"] < MEASURABLE_S)
    # (a `true` takes a few ms; on a very busy machine one may take longer, and is measured)
    assert u["attempts"] == 6 and u["too_short"] == short >= 1
    rc, out, err = pwe("status", run, "--usage", cwd=tmp_path)
    assert rc == 0
    if short == 6:
        assert u["cores_used"] is None and u["suggested"]["cores"] is None
        assert "cores too short to measure (asked 1)" in out, out
        rc, _, err = pwe("report", run, "-o", tmp_path / "r.html", cwd=tmp_path)
        assert rc == 0 and "1 / too short to measure" in (tmp_path / "r.html").read_text()
    else:
        assert "too short" not in out and u["suggested"]["cores"] is not None, out


def test_a_rate_is_counted_from_attempts_long_enough():
    tr = Trace()
    tr.take({"e": "assign", "n": "a", "m": 0, "a": 1, "p": "p1", "t": 1.0, "len": 2})
    tr.take({"e": "end", "n": "a", "m": 0, "a": 1, "p": "p1", "t": 9.0, "rc": 0, "dt": 0.003, "cpu": 0.006,
             "rss": 1024, "ran": 1})
    tr.take({"e": "end", "n": "a", "m": 1, "a": 1, "p": "p1", "t": 9.0, "rc": 0, "dt": 4.0, "cpu": 3.9,
             "rss": 1024, "ran": 1})
    u = usage({"run_id": "r", "lanes": {}}, _plan(a=(2, {})), tr)["nodes"]["a"]
    assert u["too_short"] == 1 and u["cores_used"]["max"] == round(3.9 / 4.0, 4) and u["suggested"]["cores"] == 1
