"""The dashboard under hostile requests (issue 31, items 3 and 6), against a real ``pwe ui``
process over HTTP, its runs made by a real ``pwe run``:

- a query runs off the server's loop, in linear time (``~`` is RE2), within a time budget
  and at most a few at once: a catastrophic pattern is answered, a query over a
  million members is cut short with 503 while the other requests are answered;
- a retry of an empty selection is refused, nothing retried;
- bound elsewhere than loopback, EVERY route of the app (pages, the API and its
  description, static files, streams) needs the token: the routes are enumerated from
  the app itself, so a route added later is asked too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from helpers import ROOT, read_journal, run_cli, wait_for

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

AS = "a" * 64
WORKFLOW = f"""name: hostileui
defaults: {{host: local}}
nodes:
  first:
    run: echo "x={AS}!" >> "$PWE_OUTPUTS"; exit 3
  big:
    after: [first]
    parameters: {{i: {{range: [0, 1000000]}}}}
    run: "true"
"""


@pytest.fixture(scope="module")
def run(home, tmp_path_factory):
    """A finished run: first[0] fails (its output 'aaa...a!'), so big's 10^6 members are skipped."""
    cwd = tmp_path_factory.mktemp("uihostile")
    (cwd / "wf.yaml").write_text(WORKFLOW)
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "1", "--json", cwd=cwd, timeout=300)
    assert rc == 1, err
    doc = json.loads(out)
    assert doc["totals"]["failed"] == 1 and doc["totals"]["skipped"] == 1_000_000, doc
    return cwd, Path(doc["run_dir"])


def _start(cwd, host):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "ui", "--port", "0", "--host", host, "--runs", "pwe-runs"],
                            cwd=cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines = []
    while True:
        line = proc.stderr.readline()  # (the hang guard: the test's own timeout; pwe ui says where, or ends)
        if not line:
            raise AssertionError(f"pwe ui ended without saying where it listens: {lines}")
        lines.append(line.rstrip())
        m = re.search(r"http://[^:/]+:(\d+)/", line)
        if m:
            return proc, int(m.group(1))


@pytest.fixture(scope="module")
def loopback(run):
    proc, port = _start(run[0], "127.0.0.1")
    yield f"http://127.0.0.1:{port}"
    proc.send_signal(signal.SIGINT)
    proc.wait(30)


@pytest.fixture(scope="module")
def elsewhere(run):
    proc, port = _start(run[0], "0.0.0.0")
    yield f"http://127.0.0.1:{port}"
    proc.send_signal(signal.SIGINT)
    proc.wait(30)


def token(home) -> str:
    return (Path(home) / "state" / "ui" / "token").read_text().strip()


def ask(url, method="GET", headers=None, body=None, timeout=300):
    """(status, the body's first 64 KiB as text): the answer, whatever its status."""
    req = urllib.request.Request(url, method=method, headers=headers or {},
                                 data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(65536).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(65536).decode(errors="replace")


def members(base, run_dir, q, **extra):
    return ask(f"{base}/api/runs/{run_dir.name}/members?" + urllib.parse.urlencode({"q": q, **extra}))


# -- queries ------------------------------------------------------------------------------
@pytest.mark.parametrize("q, selected", [("outputs.x~(a+)+$", []), ("outputs.x~(a|aa)*b", []),
                                         ("outputs.x~(.*)*y", []), ("outputs.x~(a|aa)*!$", [("first", 0)])])
def test_a_catastrophic_query_is_answered(loopback, run, q, selected):
    status, text = members(loopback, run[1], q, node="first")
    assert status == 200, text
    assert [(m["node"], m["member"]) for m in json.loads(text)["members"]] == selected


def test_a_heavy_query_is_cut_short_and_the_others_are_answered_meanwhile(loopback, run):
    """Queries that look at every one of 10^6 members, as many as the dashboard evaluates
    at once, each asked again as soon as it is answered (so that on a machine of any load
    they come to be in flight together); a query past that many, even a light one, is
    answered at once that there are too many: the server answers while they run, and so
    it lists the runs. Each heavy one is answered: its page, or 503 (past its budget, or
    too many at once), one line."""
    from pwe.ui.security import MAX_QUERIES

    heavy: list[tuple[int, str]] = []
    stop = threading.Event()

    def again():
        while not stop.is_set():
            heavy.append(members(loopback, run[1], "i~^none$", node="big"))

    threads = [threading.Thread(target=again) for _ in range(MAX_QUERIES)]
    for t in threads:
        t.start()
    try:
        probes: list[tuple[int, str]] = []

        def all_busy():
            probes.append(members(loopback, run[1], "state=failed", node="first"))
            return probes[-1][0] == 503 and "queries at once" in probes[-1][1]
        wait_for(all_busy, timeout=300, what="the heavy queries to be in flight together")
        status, text = ask(f"{loopback}/api/runs")
        assert status == 200 and run[1].name in [r["run_id"] for r in json.loads(text)], text
    finally:
        stop.set()
        for t in threads:
            t.join(300)
    assert heavy and not any(t.is_alive() for t in threads)
    for (status, text), selected in [(h, []) for h in heavy] + [(p, [0]) for p in probes[:-1]]:
        assert status in (200, 503), text
        if status == 503:
            said = json.loads(text)["error"]
            assert ("the query took over" in said or "queries at once" in said) and "\n" not in said, said
        else:
            assert [m["member"] for m in json.loads(text)["members"]] == selected, text
    # and the dashboard goes on answering queries
    status, text = members(loopback, run[1], "state=failed", node="first")
    assert status == 200 and [m["member"] for m in json.loads(text)["members"]] == [0]


def test_a_retry_of_an_empty_selection_is_refused(loopback, run, home):
    d = run[1]
    for query in ("", "   "):
        before = (d / "journal.jsonl").read_bytes()
        status, text = ask(f"{loopback}/api/runs/{d.name}/retry", "POST", body={"query": query},
                           headers={"Authorization": f"Bearer {token(home)}", "Content-Type": "application/json"})
        assert status == 400, text
        said = json.loads(text)["error"]
        assert "no condition" in said and "\n" not in said
        assert (d / "journal.jsonl").read_bytes() == before
        assert not [r for r in read_journal(d) if r["e"] == "retry"]


# -- the token on every route ------------------------------------------------------------------
SAMPLES = {"run_id": None, "node": "first", "index": "0", "tid": "t1", "what": "fire", "name": "local"}


def _routes(run_dir):
    """(method, path) for every route of the app, its parameters filled in; a Mount's
    files listed (the static files)."""
    from starlette.routing import Mount, Route

    from pwe.ui.api import Sources
    from pwe.ui.app import make_app
    from pwe.ui.security import Guard

    app = make_app(Sources(run_dir.parent), Guard("s" * 43, "0.0.0.0", 8765)).app
    out = []
    for r in app.routes:
        if isinstance(r, Mount):
            files = sorted(p.name for p in Path(r.app.directory).iterdir() if p.is_file())
            assert files, r.path
            out += [("GET", f"{r.path}/{name}") for name in files] + [("GET", f"{r.path}/none.js")]
            continue
        assert isinstance(r, Route), f"a route of another kind ({type(r).__name__}): ask it here too"
        path = r.path
        for name in re.findall(r"{(\w+)(?::\w+)?}", path):
            assert name in SAMPLES, f"route {r.path}: give a sample value of {{{name}}} in SAMPLES"
            value = run_dir.name if name == "run_id" else SAMPLES[name]
            path = re.sub(r"{%s(?::\w+)?}" % name, value, path)
        out += [(m, path) for m in sorted(r.methods or ["GET"])]
    return out


def test_bound_elsewhere_every_route_needs_the_token(elsewhere, run, home):
    routes = _routes(run[1])
    paths = {p for _, p in routes}
    assert {"/", "/api/openapi.json", "/api/session", "/api/live/runs", "/login"} <= paths, paths
    assert any(p.startswith("/static/") for p in paths)
    secret = token(home)
    wrong = [{}, {"Authorization": "Bearer " + "t" * len(secret)}, {"Cookie": "pwe_ui_session=" + "0" * 64}]
    for method, path in routes + [("GET", "/no/such/route")]:
        for headers in wrong:
            status, text = ask(elsewhere + path, method, headers=headers,
                               body={} if method == "POST" else None)
            assert status == 401, (method, path, headers, status, text[:200])
            if method != "HEAD":
                assert len(text.strip().splitlines()) == 1, text
    # with the token every read is served (a refusal above is the token's, not a missing page)
    for method, path in routes:
        if method == "GET" and path != "/login" and not path.endswith("/none.js"):
            if "/live/" in path:  # (a stream: its headers, then it is closed)
                req = urllib.request.Request(elsewhere + path, headers={"Authorization": f"Bearer {secret}"})
                with urllib.request.urlopen(req, timeout=120) as r:
                    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
                continue
            status, text = ask(elsewhere + path, headers={"Authorization": f"Bearer {secret}"})
            assert status == 200, (path, status, text[:200])
    status, text = ask(elsewhere + "/api/openapi.json", headers={"Authorization": f"Bearer {secret}"})
    assert status == 200 and json.loads(text)["openapi"].startswith("3.")
