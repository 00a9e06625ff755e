"""The dashboard in a real headless Chromium (issue 24, item 6): a real `pwe ui` serving
real runs (`pwe submit`, `pwe run`), driven by selenium. The runs page updates without a
reload as members finish; a 10^5-member run's page becomes usable; cancel and retry from
the page go through to the run (and its journal says who asked); hostile values render
as text; no token, or another origin, is refused. Each page's screenshot is taken
(into docs/screenshots/ with PWE_SCREENSHOTS=docs/screenshots, to refresh the docs').
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers import ROOT, count_ends, let_time_pass, read_journal, run_cli, wait_for

if not os.environ.get("CI"):  # (under CI the web extra is installed: missing, it is a failure)
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")

#: where each page's screenshot goes: a scratch directory, or (PWE_SCREENSHOTS=docs/screenshots)
#: the docs' own, to refresh them
SHOTS = Path(os.environ.get("PWE_SCREENSHOTS") or Path(tempfile.gettempdir()) / "pwe-screenshots")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PWE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


class UI:
    """A `pwe ui` started for a test: its address (with the login word) and process."""

    def __init__(self, cwd: Path, *args: str):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "pwe", "ui", "--port", "0", *args], cwd=cwd, env=env,
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line.rstrip())
            if "http://" in line:
                self.url = line.split()[2] if line.split()[1].startswith("http") is False else line.split()[1]
                self.url = next(w for w in line.split() if w.startswith("http://"))
                self.base = self.url.split("/login")[0].rstrip("/").replace("0.0.0.0", "127.0.0.1")
                self.url = self.url.replace("0.0.0.0", "127.0.0.1")
                return
        self.proc.kill()
        raise AssertionError(f"pwe ui did not say where it listens: {self.lines}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def driver(chromium):
    return chromium


def no_errors(driver):
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]]
    assert errors == [], errors


def shot(driver, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return Math.min(document.body.scrollHeight, 3000)")
    driver.set_window_size(1400, max(600, height + 40))
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    driver.set_window_size(1400, 1000)


def wait_js(driver, script, timeout=30, what="the page"):
    wait_for(lambda: driver.execute_script(script), timeout, what)


def text_of(driver, element_id: str) -> str | None:
    """The rendered text of the element with that id, trimmed as Selenium's ``.text`` is,
    read in one call inside the page: a live page that renders again between finding an
    element and reading it makes the element found stale (StaleElementReferenceException,
    seen in a full run of the suite). None while it is absent."""
    return driver.execute_script("const e = document.getElementById(arguments[0]); return e ? e.innerText.trim() : null",
                                 element_id)


SLOW = """name: uislow
defaults: {host: local}
nodes:
  prep:
    run: 'true'
  s:
    after: [prep]
    parameters: {i: {range: [0, %d]}}
    run: sleep %s
"""


def submit(cwd: Path, n: int, sleep: str) -> tuple[str, Path]:
    (cwd / "wf.yaml").write_text(SLOW % (n, sleep))
    rc, out, err = run_cli("submit", "wf.yaml", "--cores", "2", cwd=cwd)
    assert rc == 0, err
    return out.strip(), cwd / "pwe-runs" / out.strip()


def test_the_runs_page_lists_a_running_run_and_updates_without_a_reload(home, tmp_path, driver):
    run_id, run = submit(tmp_path, 24, "0.4")
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        wait_js(driver, f"return document.querySelector('tr[data-run=\"{run_id}\"]')", what="the run's row")
        driver.execute_script("window.__same_page = 'yes'")
        cell = f"return document.querySelector('tr[data-run=\"{run_id}\"] td.progress').textContent"
        first = driver.execute_script(cell)
        state = driver.execute_script(f"return document.querySelector('tr[data-run=\"{run_id}\"] .state').textContent")
        assert state == "running", state
        wait_for(lambda: driver.execute_script(cell) != first, 60, "the progress to move")
        shot(driver, "runs")
        wait_for(lambda: driver.execute_script(cell) == "25/25", 90, "the run's end on the page")
        wait_js(driver, f"return document.querySelector('tr[data-run=\"{run_id}\"] .state').textContent"
                        " === 'succeeded'", 30, "succeeded")
        assert driver.execute_script("return window.__same_page") == "yes"  # never reloaded
        assert driver.execute_script("return window.pweStats.events") >= 3
        no_errors(driver)
    finally:
        ui.stop()


def test_cancel_from_the_page_stops_the_run_and_the_state_says_so(home, tmp_path, driver):
    run_id, run = submit(tmp_path, 60, "0.5")
    wait_for(lambda: b'"e":"start"' in (run / "journal.jsonl").read_bytes(), 60, "a member's start")
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        driver.get(f"{ui.base}/#/run/{run_id}")
        wait_js(driver, "return document.querySelector('#members tr.member-row')", what="the members")
        wait_js(driver, "return document.querySelector('#phase').textContent === 'running'", what="running")
        shot(driver, "run")
        driver.execute_script("window.__same_page = 'yes'")
        next(b for b in driver.find_elements("css selector", ".actions button") if b.text == "Cancel").click()
        driver.switch_to.alert.accept()
        wait_js(driver, "return document.querySelector('#phase').textContent === 'cancelled'", 30, "cancelled")
        wait_for(lambda: "cancelled" in (text_of(driver, "notice") or ""), 30, "the notice of the cancel")
        wait_js(driver, "return !document.querySelector('#summary').textContent.includes('engine pid')", 10,
                "the engine gone from the summary")
        assert driver.execute_script("return window.__same_page") == "yes"
        no_errors(driver)
    finally:
        ui.stop()
    rc, out, err = run_cli("status", run_id, "--json", cwd=tmp_path)
    assert json.loads(out)["phase"] == "cancelled"
    (cancel,) = [r for r in read_journal(run) if r["e"] == "cancel"]
    assert cancel["by"].startswith("ui:") and cancel["by"].endswith("@127.0.0.1")


FAILING = """name: uifail
defaults: {host: local}
nodes:
  sweep:
    parameters: {x: {range: [0, 12]}}
    run: |
      if [ $(( {{ x }} % 4 )) = 1 ]; then echo "x={{ x }} failed" >&2; exit 3; fi
"""


def _failing_run_page(tmp_path, driver):
    """A finished run of FAILING (x=1, 5, 9 failed) and its page open in the browser, its
    members shown: (the run directory, the dashboard: its caller stops it)."""
    (tmp_path / "wf.yaml").write_text(FAILING)
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
    assert rc == 1, err
    run = Path(json.loads(out)["run_dir"])
    if not run.is_absolute():
        run = tmp_path / run
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        driver.get(f"{ui.base}/#/run/{run.name}")
        wait_js(driver, "return document.querySelector('#members tr.member-row')", what="the members")
    except BaseException:
        ui.stop()
        raise
    return run, ui


def test_retry_from_the_page_reruns_only_the_selected_failed_members(home, tmp_path, driver):
    run, ui = _failing_run_page(tmp_path, driver)
    try:
        box = driver.find_element("id", "query")
        box.send_keys("state=failed; x=5,9")
        next(b for b in driver.find_elements("css selector", ".actions button") if b.text == "Retry selection").click()
        wait_for(lambda: "retrying 2 selected" in (text_of(driver, "notice") or ""), 30, "the retry")
    finally:
        ui.stop()

    def ended():
        kinds = [r["e"] for r in read_journal(run)]
        return "retry" in kinds and "finish" in kinds[kinds.index("retry"):]

    wait_for(ended, 60, "the retried run's end")
    rc, out, err = run_cli("show", run.name, "--json", "--limit", "0", cwd=tmp_path)
    attempts = {m["member"]: m["attempts"] for m in json.loads(out)}
    assert attempts[5] == 2 and attempts[9] == 2 and attempts[1] == 1  # only the selected ran again
    (retry,) = [r for r in read_journal(run) if r["e"] == "retry"]
    assert retry["by"].startswith("ui:") and retry["only"] == {"sweep": [[5, 6], [9, 10]]}


def test_set_from_the_page_changes_what_the_selected_members_ask_for_next(home, tmp_path, driver):
    """pwe set from the run's page: the query box selects, the pairs say what; no engine runs
    the finished run, so the change waits for the next one; pwe retry takes it before it
    hands out a member: the journal's set record names who asked from the page, and the
    retried members' new attempts ask 64 MB (their assign records)."""
    run, ui = _failing_run_page(tmp_path, driver)
    try:
        driver.find_element("id", "query").send_keys("state=failed; x=5,9")
        driver.find_element("id", "set-pairs").send_keys("memoryPerMember=64 priority=3")
        next(b for b in driver.find_elements("css selector", ".actions button")
             if b.text == "Set for what has not started").click()
        wait_for(lambda: "no engine runs it" in (text_of(driver, "notice") or ""), 30, "the set's answer")
        no_errors(driver)
    finally:
        ui.stop()
    rc, out, err = run_cli("retry", run.name, cwd=tmp_path, timeout=300)
    assert rc == 1, err  # (the other failed ones fail again)
    (said,) = [r for r in read_journal(run) if r["e"] == "set"]
    assert said["by"].startswith("ui:") and said["only"] == {"sweep": [[5, 6], [9, 10]]}, said
    assert said["values"] == {"memoryPerMember": 64, "priority": 3}, said
    asks = {r["m"]: r.get("mem") for r in read_journal(run) if r["e"] == "assign" and r["a"] == 2}
    assert asks[5] == asks[9] == 64 and asks[1] is None, asks


WHY = """name: uiwhy
defaults: {host: local}
nodes:
  sim:
    parameters: {mesh: [coarse, fine, medium], seed: {range: [0, 3]}}
    run: |
      if [ {{ mesh }} = fine ]; then echo "residual {{ seed }}.5e-3 too large" >&2; exit 3; fi
"""


def test_the_failures_panel_and_a_members_explain(home, tmp_path, driver):
    """pwe failures on a run's page (mesh=fine, which always failed, its first row) and pwe
    explain on a member's (its layers' sentences)."""
    (tmp_path / "wf.yaml").write_text(WHY)
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
    assert rc == 1, err
    run_id = Path(json.loads(out)["run_dir"]).name
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        driver.get(f"{ui.base}/#/run/{run_id}")
        wait_js(driver, "return document.querySelector('#failures-by-value tr:nth-child(2)')", what="the failures panel")
        first = driver.execute_script("return [...document.querySelectorAll('#failures-by-value tr:nth-child(2) td')]"
                                      ".map(td => td.textContent)")
        assert first == ["sim", "mesh", "fine", "3", "0", "100%", "+100"], first
        assert "exit 3 × 3" in text_of(driver, "failures-by-reason")
        assert "residual <n> too large" in text_of(driver, "failures-by-signature")
        by_host = driver.execute_script("return [...document.querySelectorAll('#failures-by-host tr:nth-child(2) td')]"
                                        ".map(td => td.textContent)")
        assert by_host[1:] == ["3", "6", "33%"], by_host
        assert "[object" not in text_of(driver, "failures-box")
        driver.execute_script("document.querySelector('#members tr.member-row[data-member=\"sim:4\"]').click()")
        wait_js(driver, "return document.querySelector('#explain-member li')", what="the member's explain")
        said = text_of(driver, "explain-member")
        assert "failed for good: exit 3" in said and "residual 1.5e-3 too large" in said, said
        shot(driver, "explain")
        no_errors(driver)
    finally:
        ui.stop()


LATE = """name: uilate
defaults: {host: local}
nodes:
  sim:
    parameters: {mesh: [coarse, fine], seed: {range: [0, 2]}}
    run: |
      while [ ! -e %s ]; do sleep 0.05; done
      if [ {{ mesh }} = fine ]; then exit 4; fi
"""


def test_the_failures_panel_follows_a_live_run(home, tmp_path, driver):
    """The panel says no member failed, then, as members fail (their end records pushed),
    shows the value they have in common first, without a reload."""
    gate = tmp_path / "gate"
    (tmp_path / "wf.yaml").write_text(LATE % gate)
    rc, out, err = run_cli("submit", "wf.yaml", "--cores", "2", cwd=tmp_path)
    assert rc == 0, err
    run_id = out.strip()
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        driver.get(f"{ui.base}/#/run/{run_id}")
        wait_js(driver, "return document.querySelector('#no-failures')", what="no failure yet")
        driver.execute_script("window.__same_page = 'yes'")
        gate.write_text("")
        first = "return [...document.querySelectorAll('#failures-by-value tr:nth-child(2) td')].map(td => td.textContent)"
        wait_for(lambda: driver.execute_script(first) == ["sim", "mesh", "fine", "2", "0", "100%", "+100"], 90,
                 "the failing value first, once both its members failed")
        assert driver.execute_script("return window.__same_page") == "yes"
        no_errors(driver)
    finally:
        ui.stop()
        gate.write_text("")


def test_a_waiting_members_explain_asks_the_batch_system_only_from_its_button(home, tmp_path, driver):
    """A member waiting behind two running ones: its page shows its placement and allocation
    layers and asks the batch system (``?ask=1``) only when the button is pressed, never as
    the page renders it again (its row clicked; every 2 s while it is queued; on each journal
    record of it)."""
    run_id, run = submit(tmp_path, 6, "30")
    wait_for(lambda: b'"e":"start","n":"s"' in (run / "journal.jsonl").read_bytes(), 60, "an s member's start")
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        driver.get(f"{ui.base}/#/run/{run_id}/member/s/5")  # (the same page: a new hash)
        driver.execute_script("window.__urls = []; const f = window.fetch; "
                              "window.fetch = (u, o) => { window.__urls.push(String(u)); return f(u, o); }")
        wait_js(driver, "return document.querySelector('#explain-allocation li')", what="the allocation layer")
        assert "pilot" in text_of(driver, "explain-placement"), text_of(driver, "explain")
        for _ in range(2):  # (viewed again: its row clicked)
            driver.execute_script("document.querySelector('#members tr.member-row[data-member=\"s:5\"]').click()")
        views = "return window.__urls.filter(u => u.endsWith('/members/s/5/explain')).length"
        wait_for(lambda: driver.execute_script(views) >= 2, 60, "the member's page rendered again")
        asks = "return window.__urls.filter(u => u.includes('ask=1')).length"
        assert driver.execute_script(asks) == 0
        driver.execute_script("[...document.querySelectorAll('#explain button')]"
                              ".find(b => b.textContent === 'Ask the batch system').click()")
        wait_for(lambda: driver.execute_script(asks) == 1, 30, "the question to the batch system")
        wait_js(driver, "return document.querySelector('#explain-allocation li')", what="the layers again")
        # (a member that has not run has no logs yet: the logs route says so, 409, and the page shows it as text)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]
                  and not ("/members/s/5/logs?" in e["message"] and "409" in e["message"])]
        assert errors == [], errors
    finally:
        ui.stop()
        run_cli("cancel", run_id, cwd=tmp_path)


HOSTILE = r"""name: uievil
defaults: {host: local}
nodes:
  evil:
    parameters:
      v: ["<img src=x onerror=\"window.__pwned=1\">", "<script>window.__pwned=2</script>"]
    run: |
      echo '<img src=y onerror="window.__pwned=3">'
      echo 'note=<b onmouseover=window.__pwned=4>bold</b>' >> "$PWE_OUTPUTS"
      echo '<script>window.__pwned=5</script>' >&2
"""


def test_hostile_values_render_as_text_and_no_script_runs(home, tmp_path, driver):
    (tmp_path / "wf.yaml").write_text(HOSTILE)
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
    assert rc == 0, err
    run_id = Path(json.loads(out)["run_dir"]).name
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        driver.get(f"{ui.base}/#/run/{run_id}")
        wait_js(driver, "return document.querySelectorAll('#members tr.member-row').length === 2", what="members")
        rows = text_of(driver, "members")
        assert '<img src=x onerror="window.__pwned=1">' in rows and "<script>window.__pwned=2</script>" in rows
        assert "<b onmouseover=window.__pwned=4>bold</b>" in rows
        driver.find_elements("css selector", "#members tr.member-row")[0].click()
        wait_js(driver, "return document.querySelector('#log-stdout')", what="the member's logs")
        wait_for(lambda: '<img src=y onerror="window.__pwned=3">' in (text_of(driver, "log-stdout") or ""), 30,
                 "the member's stdout, as text")
        wait_for(lambda: "<script>window.__pwned=5</script>" in (text_of(driver, "log-stderr") or ""), 30,
                 "the member's stderr, as text")
        shot(driver, "member")
        let_time_pass(0.5, "a payload in the page would have run by now")
        assert driver.execute_script("return window.__pwned") is None
        assert driver.find_elements("css selector", "#main img, #main script, #main b") == []
        no_errors(driver)
    finally:
        ui.stop()


def test_no_token_is_refused_and_another_origin_cannot_act(home, tmp_path, driver):
    run_id, run = submit(tmp_path, 60, "0.5")
    ui = UI(tmp_path, "--host", "0.0.0.0")
    secret = (home / "state" / "ui" / "token").read_text().strip()
    try:
        driver.get(f"{ui.base}/")
        wait_js(driver, "return document.body.dataset.ready === '1' || document.querySelector('#main p')")
        assert "needs its token" in text_of(driver, "main")
        status = driver.execute_script("return await fetch('/api/runs').then(r => r.status)")
        assert status == 401
        driver.get(f"{ui.base}/login?token={secret}")
        wait_js(driver, f"return document.querySelector('tr[data-run=\"{run_id}\"]')", what="the runs, logged in")
        # another origin (a page served from another port) posts a cancel with the session cookie
        page = tmp_path / "site"
        page.mkdir()
        (page / "index.html").write_text(
            "<!doctype html><script>fetch(%s, {method: 'POST', credentials: 'include', mode: 'no-cors', "
            "body: '{}'}).then(() => document.title = 'sent', () => document.title = 'sent');</script>"
            % json.dumps(f"{ui.base}/api/runs/{run_id}/cancel"))
        handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(page), **kw)  # noqa: E731
        other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            driver.get(f"http://localhost:{other.server_address[1]}/index.html")
            wait_for(lambda: driver.title == "sent", 20, "the other origin's post")
        finally:
            other.shutdown()
        let_time_pass(1.0, "a cancel the other origin's post made would be in the journal by now")
        assert not [r for r in read_journal(run) if r["e"] == "cancel"]
        rc, out, err = run_cli("status", run_id, "--json", cwd=tmp_path)
        assert json.loads(out)["phase"] == "running"
    finally:
        ui.stop()
        run_cli("cancel", run_id, cwd=tmp_path)


def test_a_large_runs_page_becomes_usable(home, tmp_path, driver):
    """A 10^5-member run (cancelled after it began): its page, its member table and its last
    page. (How fast: bench/ui.py; a test asserts no time.)"""
    run_id, run = submit(tmp_path, 100_000, "0")
    wait_for(lambda: count_ends(run) > 200, 120, "members ending")
    rc, out, err = run_cli("cancel", run_id, cwd=tmp_path)
    assert rc == 0, err
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        driver.get(f"{ui.base}/#/run/{run_id}")
        wait_js(driver, "return document.querySelectorAll('#members tr.member-row').length === 50", 60, "members")
        total = driver.execute_script("return document.querySelector('#progress').textContent")
        assert total.endswith("/100,001 finished"), total
        driver.find_element("id", "state-filter").send_keys("cancelled")
        wait_js(driver, "return [...document.querySelectorAll('#members .state')].every(e => e.textContent === "
                        "'cancelled') && document.querySelectorAll('#members tr.member-row').length === 50", 30)
        no_errors(driver)
    finally:
        ui.stop()


def test_triggers_and_hosts_pages(home, tmp_path, driver):
    (tmp_path / "wf.yaml").write_text("name: uitrig\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("trigger", "add", tmp_path / "wf.yaml", "--cron", "0 3 * * *", "--id", "nightly",
                           cwd=tmp_path)
    assert rc == 0, err
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        driver.get(f"{ui.base}/#/triggers")
        wait_js(driver, "return document.querySelector('tr[data-trigger=\"nightly\"]')", what="the trigger")
        row = driver.find_element("css selector", "tr[data-trigger='nightly']")
        assert "cron '0 3 * * *' UTC" in row.text and "yes" in row.text
        next(b for b in row.find_elements("css selector", "button") if b.text == "Disable").click()
        wait_js(driver, "return document.querySelector('tr[data-trigger=\"nightly\"]').textContent.includes('Enable')")
        shot(driver, "triggers")
        driver.get(f"{ui.base}/#/hosts")
        wait_js(driver, "return document.querySelector('tr[data-host=\"local\"]')", what="the hosts")
        driver.find_element("css selector", "tr[data-host='local'] button").click()
        wait_js(driver, "return document.querySelector('tr[data-host=\"local\"] .check div')", 60, "the check")
        shot(driver, "hosts")
        no_errors(driver)
    finally:
        ui.stop()
    rc, out, err = run_cli("trigger", "list", "--json", cwd=tmp_path)
    assert json.loads(out)[0]["enabled"] is False


def test_a_run_that_reused_its_members_says_so_on_its_page(home, tmp_path, driver):
    """The second run of an unchanged workflow reuses every member (pwe.runstate.reusable):
    its page says how many of the done were reused and did not run, as pwe status does."""
    (tmp_path / "wf.yaml").write_text("name: uireuse\nnodes:\n  a:\n    parameters: {i: {range: [0, 5]}}\n"
                                      "    run: 'true'\n  b:\n    after: [a]\n    run: 'true'\n")
    for _ in range(2):
        rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
        assert rc == 0, err
    second = json.loads(out)
    assert second.get("reused") == {"a": 5, "b": 1}, second
    ui = UI(tmp_path)
    try:
        driver.get(ui.url)
        driver.get(f"{ui.base}/#/run/{second['run_id']}")
        wait_js(driver, "return document.querySelector('#not-run')", what="the reused count")
        assert text_of(driver, "not-run") == "· of the done, 6 reused from earlier runs, not run"
        labels = driver.execute_script("return [...document.querySelectorAll('.dag-node text')].map(t => t.textContent)")
        assert "done 5 (5 reused)" in labels and "done 1 (1 reused)" in labels, labels
        no_errors(driver)
    finally:
        ui.stop()
