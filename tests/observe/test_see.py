"""Seeing a run (issue 12): the trace, queries, run prefixes, --json on every printing
command, logs --tail/--stderr, status's core-hours, and the HTML report in a real
headless browser (Debian's chromium and its driver).

Every run here is real: the engine, its pilot and the members are real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, engine_pid, let_time_pass, no_traceback, on_ssh_nodes, pilot_pids, run_cli, wait_for


ARTIFACTS = ROOT / "tests" / "artifacts"

# A member that burns CPU (until its own CPU clock says 0.6 s) and holds 200 MB, one that
# fails with a line on stderr, and the others returning an output.
BURN = ("python3 -c 'import time; x = bytearray(200 * 1024 * 1024); x[::4096] = b\"1\" * len(x[::4096]); "
        "t = time.process_time()\nwhile time.process_time() - t < 0.6: pass'")
WORKFLOW = f"""name: seen
defaults: {{host: local}}
nodes:
  burn:
    run: {json.dumps(BURN)}
  sweep:
    after: [burn]
    parameters:
      x: [1, 2, 3, 4]
    run: |
      echo "x is {{{{ x }}}}"
      if [ {{{{ x }}}} = 3 ]; then echo "x=3 diverged: energy is NaN" >&2; echo last words >&2; exit 7; fi
      echo energy=$(( {{{{ x }}}} * 10 )) >> "$PWE_OUTPUTS"
"""


def pwe(*args, cwd, timeout=120):
    return run_cli(*args, cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    """One finished run of WORKFLOW under ./pwe-runs of its own directory: (cwd, run dir)."""
    cwd = tmp_path_factory.mktemp("seen")
    (cwd / "wf.yaml").write_text(WORKFLOW)
    rc, out, err = pwe("run", "wf.yaml", "--cores", "2", "--json", cwd=cwd)
    assert rc == 1, err  # one member fails
    summary = json.loads(out)
    assert summary["ok"] is False and summary["totals"]["done"] == 4 and summary["totals"]["failed"] == 1, summary
    return cwd, Path(summary["run_dir"])


def trace_of(cwd, run) -> list[dict]:
    rc, out, err = pwe("trace", run, "--format", "json", cwd=cwd)
    assert rc == 0, err
    return [json.loads(l) for l in out.splitlines()]


# -- the trace --------------------------------------------------------------------------------


def test_trace_has_one_record_per_attempt_with_where_when_and_what_it_cost(seen):
    cwd, run = seen
    recs = trace_of(cwd, run)
    assert sorted((r["node"], r["member"], r["attempt"]) for r in recs) == \
        [("burn", 0, 1)] + [("sweep", i, 1) for i in range(4)]
    for r in recs:
        assert r["host"] == "local", r
        assert r["node_name"] and r["pilot"] == "p1" and r["job"] is None and r["batch"] is None, r
        assert r["submit"] <= r["start"] <= r["end"], r
        assert r["duration"] is not None and r["cpu"] is not None and r["rss_kb"] > 0, r
    burn = next(r for r in recs if r["node"] == "burn")
    # measured by the pilot from the reaped child's rusage: its own CPU clock ran 0.6 s,
    # and it touched every page of 200 MB
    assert burn["cpu"] >= 0.6, burn
    assert burn["rss_kb"] >= 200 * 1024, burn
    assert burn["state"] == "done" and burn["exit_status"] == 0
    by_x = {r["parameters"]["x"]: r for r in recs if r["node"] == "sweep"}
    assert by_x[3]["state"] == "failed" and by_x[3]["exit_status"] == 7 and by_x[3]["outputs"] == {}
    assert by_x[2]["outputs"] == {"energy": "20"} and by_x[2]["exit_status"] == 0
    assert all(r["rss_kb"] < 200 * 1024 for r in by_x.values())  # (the shell, not the burner)
    # the same in TSV: a header, then one line per attempt, the same columns
    rc, out, err = pwe("trace", run, cwd=cwd)
    assert rc == 0, err
    lines = out.splitlines()
    header = lines[0].split("\t")
    assert header[:4] == ["node", "member", "attempt", "state"] and "cpu" in header and "rss_kb" in header
    rows = [dict(zip(header, l.split("\t"))) for l in lines[1:]]
    assert len(rows) == 5 and all(len(l.split("\t")) == len(header) for l in lines[1:])
    tsv_burn = next(r for r in rows if r["node"] == "burn")
    assert float(tsv_burn["cpu"]) == burn["cpu"] and json.loads(tsv_burn["parameters"]) == {}


def test_members_on_other_nodes_are_measured_there_and_named_in_the_trace(ssh_nodes, tmp_path):
    """Members that a node agent runs on other nodes (ssh): their cpu and rss come from
    the agent's wait4 on that node, and the trace names the node each ran on."""
    on_ssh_nodes(tmp_path)
    (tmp_path / "wf.yaml").write_text("name: spread\nnodes:\n  m:\n    parameters: {i: {range: [0, 16]}}\n"
                                      f"    run: {json.dumps(BURN)}\n")
    rc, out, err = pwe("run", "wf.yaml", "--host", "four", "--hosts", "hosts.yaml", "--json", cwd=tmp_path,
                       timeout=300)
    assert rc == 0, err
    recs = trace_of(tmp_path, json.loads(out)["run_id"])
    assert len(recs) == 16
    assert {r["node_name"] for r in recs} == {"pwe-n1", "pwe-n2", "pwe-n3", "pwe-n4"}, recs
    assert all(r["cpu"] >= 0.6 and r["rss_kb"] >= 200 * 1024 and r["host"] == "four" for r in recs), recs


def test_the_pilot_end_message_carries_cpu_and_rss_and_the_journal_keeps_them(seen):
    _, run = seen
    ends = [json.loads(l) for l in (run / "pilots" / "p1" / "events.jsonl").read_text().splitlines()
            if '"k":"end"' in l] if (run / "pilots" / "p1" / "events.jsonl").exists() else []
    journal = [json.loads(l) for l in (run / "journal.jsonl").read_text().splitlines()]
    jends = [r for r in journal if r["e"] == "end"]
    assert len(jends) == 5 and all(isinstance(r["cpu"], float) and isinstance(r["rss"], int) for r in jends), jends
    assert all(isinstance(r.get("t"), float) for r in journal if r["e"] in ("assign", "start", "end"))
    from pilot.wire import END, FIELDS

    assert {"cpu", "rss"} <= FIELDS[END]
    assert ends  # (each line as written: the message, then its signature "s", which is the line's, not a field)
    for m in ends:
        assert set(m) - {"k", "s"} <= FIELDS[END], m


def test_a_cancelled_runs_trace_says_which_attempts_the_cancel_ended(tmp_path, reaper):
    gate = tmp_path / "gate"
    (tmp_path / "wf.yaml").write_text("name: stopped\nnodes:\n  a:\n    parameters: {k: [0, 1, 2]}\n"
                                      f"    run: for i in $(seq 1200); do [ -e {gate} ] && break; sleep 0.05; done\n")
    rc, out, err = pwe("submit", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
    assert rc == 0, err
    run = Path(json.loads(out)["run_dir"])
    reaper(run, wait_for(lambda: engine_pid(run), what="the engine's lock"))
    wait_for(lambda: json.loads(pwe("status", run, "--json", cwd=tmp_path)[1])["totals"]["running"] == 2,
             what="two members running")
    reaper(run, *pilot_pids(run))
    rc, out, err = pwe("cancel", run, "--json", cwd=tmp_path)
    assert rc == 0 and json.loads(out)["cancelled"] is True, err
    gate.touch()
    recs = trace_of(tmp_path, run)
    assert sorted(r["state"] for r in recs) == ["cancelled"] * len(recs) and len(recs) >= 2, recs
    assert sum(1 for r in recs if r["start"] is not None) == 2, recs


# -- queries ---------------------------------------------------------------------------------


@pytest.mark.parametrize("query, expect", [
    ("state=failed", [("sweep", 2)]),
    ("state=done; outputs.energy<25", [("sweep", 0), ("sweep", 1)]),
    ("outputs.energy>=30", [("sweep", 3)]),
    ("x=1,4", [("sweep", 0), ("sweep", 3)]),
    ("params.x!=1; node=sweep; exit=0", [("sweep", 1), ("sweep", 3)]),
    ("rc!=0", [("sweep", 2)]),
    ("attempts=1; node=burn", [("burn", 0)]),
    ("T>=0.6; cpu>0.5", [("burn", 0)]),
    ("rss>100000", [("burn", 0)]),
    ("node~^sw; x>2", [("sweep", 2), ("sweep", 3)]),
    ("outputs.nothing=1", []),
])
def test_show_q_selects_members(seen, query, expect):
    cwd, run = seen
    rc, out, err = pwe("show", run, "-q", query, "--json", cwd=cwd)
    assert rc == 0, err
    got = [(m["node"], m["member"]) for m in json.loads(out)]
    assert got == expect, (query, got)


def test_the_python_api_answers_the_same_queries(seen):
    import pwe as api

    _, run = seen
    res = api.RunResult(run)
    assert [(m["node"], m["member"]) for m in res.query("state=failed")] == [("sweep", 2)]
    assert [m["member"] for m in res.query("outputs.energy>15; T>=0")] == [1, 3]
    with pytest.raises(api.InputError):
        res.query("T>>1")


@pytest.mark.parametrize("query, phrase", [
    ("T>>300", "no operator '>>'"),
    ("state=finished", "no state 'finished'"),
    ("nosuch=1", "no field 'nosuch'"),
    ("T>abc", "needs a number"),
    ("  ;  ", "no condition"),
    ("node~(", "not a regular expression"),
    ("outputs.=3", "no field 'outputs.'"),
])
def test_a_bad_query_is_one_line_and_exit_2(seen, query, phrase):
    cwd, run = seen
    rc, out, err = pwe("show", run, "-q", query, cwd=cwd)
    assert rc == 2, (query, rc, out, err)
    assert out == "" and len(err.strip().splitlines()) == 1 and phrase in err, (query, err)
    no_traceback(err)


# -- runs and prefixes --------------------------------------------------------------------------


def test_runs_lists_newest_first_and_a_unique_prefix_names_a_run(tmp_path):
    (tmp_path / "a.yaml").write_text("name: alpha\nnodes:\n  a:\n    run: 'true'\n")
    (tmp_path / "b.yaml").write_text("name: alpine\nnodes:\n  a:\n    run: 'false'\n")
    ids = []
    for wf in ("a.yaml", "a.yaml", "b.yaml"):
        rc, out, err = pwe("run", wf, "--cores", "1", "--json", cwd=tmp_path)
        ids.append(json.loads(out)["run_id"])
        let_time_pass(0.05, "distinct creation times: the listing's order")
    rc, out, err = pwe("runs", "--json", cwd=tmp_path)
    assert rc == 0, err
    listed = json.loads(out)
    assert [r["run_id"] for r in listed] == ids[::-1]
    assert [r["state"] for r in listed] == ["finished with failures", "succeeded", "succeeded"]
    assert all(r["finished"] == 1 and r["total"] == 1 and r["started"] and r["duration"] is not None
               for r in listed), listed
    rc, text, err = pwe("runs", cwd=tmp_path)
    assert rc == 0 and [l.split()[0] for l in text.splitlines()[1:]] == ids[::-1], text
    # 'alpi' names one run; 'al' and 'alpha' more than one: each of those is listed
    rc, out, err = pwe("status", "alpi", "--json", cwd=tmp_path)
    assert rc == 0 and json.loads(out)["run_id"] == ids[2], err
    for prefix, n in (("al", 3), ("alpha", 2)):
        rc, out, err = pwe("show", prefix, cwd=tmp_path)
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert f"start of {n} runs" in err and all(i in err for i in ids if i.startswith(prefix)), err
    rc, out, err = pwe("logs", "zeta", "a", cwd=tmp_path)
    assert rc == 2 and "no run 'zeta'" in err, err
    # each command that takes a RUN takes a prefix: the long way through one of each kind
    rc, out, err = pwe("trace", ids[2][:8], cwd=tmp_path)
    assert rc == 0 and len(out.splitlines()) == 2, err


# -- --json everywhere; logs ---------------------------------------------------------------------


def test_every_command_that_prints_takes_json(seen, tmp_path):
    cwd, run = seen
    rid = run.name
    for args in (["status", rid], ["show", rid], ["show", rid, "-q", "state=failed"], ["logs", rid, "sweep:2"],
                 ["runs"], ["report", rid, "-o", str(tmp_path / "r.html")], ["validate", "wf.yaml"],
                 ["plan", "wf.yaml"], ["hosts", "list"]):
        rc, out, err = pwe(*args, "--json", cwd=cwd)
        assert rc == 0, (args, err)
        json.loads(out)  # the whole of stdout is one JSON document
    rc, out, err = pwe("trace", rid, "--json", cwd=cwd)
    assert rc == 0 and all(json.loads(l) for l in out.splitlines())
    # run, submit, cancel, resume, retry (on a run of their own)
    (tmp_path / "wf.yaml").write_text(WORKFLOW.replace("run: " + json.dumps(BURN), "run: 'true'"))
    rc, out, err = pwe("submit", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
    assert rc == 0, err
    sub = json.loads(out)
    wait_for(lambda: json.loads(pwe("status", sub["run_id"], "--json", cwd=tmp_path)[1])["phase"] != "running",
             what="the submitted run to end")
    rc, out, err = pwe("cancel", sub["run_id"], "--json", cwd=tmp_path)
    assert rc == 0 and json.loads(out) == {"run_id": sub["run_id"], "cancelled": False}, (out, err)
    rc, out, err = pwe("retry", sub["run_id"], "--json", cwd=tmp_path)
    assert rc == 1 and json.loads(out)["totals"]["failed"] == 1, (out, err)
    rc, out, err = pwe("resume", sub["run_id"], "--json", cwd=tmp_path)
    assert json.loads(out)["run_id"] == sub["run_id"], (out, err)
    rc, out, err = pwe("retry", sub["run_id"], "--detach", "--json", cwd=tmp_path)
    assert rc == 0 and json.loads(out)["run_id"] == sub["run_id"], (out, err)
    wait_for(lambda: not engine_pid(Path(sub["run_dir"])) or
             json.loads(pwe("status", sub["run_id"], "--json", cwd=tmp_path)[1])["phase"] != "running",
             what="the detached retry to end")


def test_logs_tail_and_stderr(seen):
    cwd, run = seen
    # into a pipe: one channel's bytes as written, stdout unless --stderr; both under headers
    rc, out, err = pwe("logs", run, "sweep:2", cwd=cwd)
    assert rc == 0 and out == "x is 3\n", out
    rc, out, err = pwe("logs", run, "sweep:2", "--stdout", "--stderr", cwd=cwd)
    assert rc == 0 and "x is 3" in out and "last words" in out and "==> sweep[2] stderr" in out, out
    rc, out, err = pwe("logs", run, "sweep:2", "--stderr", cwd=cwd)
    assert rc == 0 and out == "x=3 diverged: energy is NaN\nlast words\n", out
    rc, out, err = pwe("logs", run, "sweep:2", "--stderr", "--tail", "1", cwd=cwd)
    assert rc == 0 and out == "last words\n", out
    rc, out, err = pwe("logs", run, "sweep:2", "--tail", "1", "--json", cwd=cwd)
    got = json.loads(out)
    assert got["stdout"]["text"] == "x is 3\n" and got["stderr"]["text"] == "last words\n", got
    rc, out, err = pwe("logs", run, "sweep:2", "--tail", "0", cwd=cwd)
    assert rc == 2 and "Traceback" not in err


# -- status: core-hours, --watch -------------------------------------------------------------------


def test_status_gives_core_hours_of_done_running_eligible_and_waiting_work(tmp_path, reaper):
    """Two members of `a` (2 cores each, maxWallTimePerMember 6 min) hold the only 2+2 cores
    ... of 4, behind a gate; `b` (4 members, 1 core, 30 min each) waits for them; `c`
    (no walltime, 3 members) is eligible behind them but has no measure yet."""
    gate = tmp_path / "gate"
    # (order: fifo: all three of c's members queue on the pilot at once; by pressure, c would
    # wait beside b's higher pressure with only as many queued as the pilot has free cores)
    (tmp_path / "wf.yaml").write_text(f"""name: hours
order: fifo
defaults: {{host: local}}
nodes:
  a:
    parameters: {{k: [0, 1]}}
    scheduling: {{threadsPerRank: 2, maxWallTimePerMember: 6}}
    run: for i in $(seq 1200); do [ -e {gate} ] && break; sleep 0.05; done
  b:
    after: [a]
    parameters: {{j: [0, 1, 2, 3]}}
    scheduling: {{maxWallTimePerMember: 30}}
    run: 'true'
  c:
    parameters: {{k: [0, 1, 2]}}
    run: 'true'
""")
    rc, out, err = pwe("submit", "wf.yaml", "--cores", "4", "--json", cwd=tmp_path)
    assert rc == 0, err
    sub = json.loads(out)
    run = Path(sub["run_dir"])
    reaper(run, wait_for(lambda: engine_pid(run), what="the engine's lock"))
    wait_for(lambda: (run / "journal.jsonl").exists() and pilot_pids(run), what="a pilot in the journal")
    reaper(run, *pilot_pids(run))

    def snap():
        return json.loads(pwe("status", sub["run_id"], "--json", cwd=tmp_path)[1])

    s = wait_for(lambda: (lambda x: x if x["totals"]["running"] == 2 and x["totals"]["queued"] == 3 else None)(
        snap()), what="2 members running and 3 queued")
    ch = s["core_hours"]
    assert ch["running"] == pytest.approx(2 * 2 * 6 / 60, abs=1e-3)  # 2 members x 2 cores x 6 min
    assert ch["waiting"] == pytest.approx(4 * 1 * 30 / 60, abs=1e-3)  # b: 4 x 1 core x 30 min
    # c's members wait for a core (eligible), and nothing says how long they take yet
    assert ch["eligible"] is None and ch["done"] == 0 and ch["failed"] == 0, ch
    assert ch["estimated_from"]["a"] == "maxWallTimePerMember" and ch["estimated_from"]["c"].startswith("not known")
    rc, text, err = pwe("status", sub["run_id"], cwd=tmp_path)
    assert "core-hours: done 0.00, failed 0.00, running 0.40, eligible ?, waiting 2.00" in text, text
    # --watch redraws until the run ends, then leaves by itself
    watch = subprocess.Popen([sys.executable, "-m", "pwe", "status", sub["run_id"], "--watch", "--every", "0.2",
                              "--json"], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = watch.stdout.readline()  # (a frame drawn while the run is held at the gate)
    gate.touch()
    out, err = watch.communicate(timeout=60)
    frames = [json.loads(l) for l in (first + out).splitlines()]
    assert watch.returncode == 0 and len(frames) >= 2, err
    assert frames[0]["phase"] == "running" and frames[-1]["phase"] == "succeeded", frames[-1]
    assert frames[-1]["core_hours"]["waiting"] == 0 and frames[-1]["core_hours"]["running"] == 0


def test_core_hours_of_a_node_without_walltime_come_from_its_done_members():
    from pwe.observe.runview import core_hours

    snap = {"nodes": {"n": {"done": 4, "failed": 1, "ready": 2, "queued": 1, "running": 1, "waiting": 10}},
            "work": {"n": {"cores": 3, "wall": None, "spent": 50.0, "done_spent": 40.0}}}
    ch = core_hours(snap)  # each member: 40 s / 4 = 10 s, x 3 cores
    assert ch["done"] == pytest.approx(40 * 3 / 3600, abs=1e-4) and ch["failed"] == pytest.approx(10 * 3 / 3600, abs=1e-4)
    assert ch["running"] == pytest.approx(1 * 30 / 3600, abs=1e-4)
    assert ch["eligible"] == pytest.approx(3 * 30 / 3600, abs=1e-4)
    assert ch["waiting"] == pytest.approx(10 * 30 / 3600, abs=1e-4)
    assert ch["estimated_from"] == {"n": "mean of 4 done"}


# -- the report, in a real browser -------------------------------------------------------------------


def test_the_report_opens_offline_in_a_browser_with_its_timeline(seen, tmp_path, chromium):
    cwd, run = seen
    rc, out, err = pwe("report", run.name[:6], cwd=cwd)
    assert rc == 0, err
    page = Path(out.strip())
    if not page.is_absolute():
        page = cwd / page
    html = page.read_text()
    assert page.parent == run and oct(page.stat().st_mode & 0o777) == "0o600"
    # self-contained: nothing fetched from elsewhere
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    assert "<script src" not in html and "<link" not in html
    assert "x=3 diverged: energy is NaN" in html and "sweep[2]" in html  # the failure, its stderr
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver = chromium
    driver.get(page.as_uri())
    bars = driver.find_elements("css selector", "#timeline g.bars rect")
    assert len(bars) == 5  # every attempt is its own bar (few attempts)
    assert len(driver.find_elements("css selector", "#utilisation path")) == 2
    assert len(driver.find_elements("css selector", "#distributions .dist")) == 2
    rows = driver.find_elements("css selector", "#failures tr")
    assert len(rows) == 2 and "diverged" in rows[1].text
    assert "p1" in driver.find_element("css selector", "#pilots").text
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == [], errors
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, height + 40)
    driver.save_screenshot(str(ARTIFACTS / "report.png"))
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000


def test_a_large_run_is_drawn_with_merged_bars_and_says_so(tmp_path, chromium):
    """More attempts than one bar each can show: merged, and the page says how."""
    (tmp_path / "wf.yaml").write_text("name: many\nnodes:\n  m:\n    parameters: {i: {range: [0, 6000]}}\n"
                                      "    run: test {{ i % 1000 }} -ne 7\n")
    rc, out, err = pwe("run", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path, timeout=300)
    assert rc == 1 and json.loads(out)["totals"]["failed"] == 6, err
    rc, out, err = pwe("report", "many", "-o", tmp_path / "many.html", cwd=tmp_path)
    assert rc == 0, err
    driver = chromium
    driver.get((tmp_path / "many.html").as_uri())
    note = driver.find_element("id", "timeline-note").text
    assert "6,000 attempts" in note and "merged" in note, note
    bars = driver.find_elements("css selector", "#timeline g.bars rect[fill='#cf222e']")
    assert len(bars) == 6  # the failed attempts, as ticks
    merged = driver.find_elements("css selector", "#timeline g.bars rect title")
    assert 0 < len(merged) < 6000
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
    driver.save_screenshot(str(ARTIFACTS / "report-6000.png"))

