"""The dashboard's API (issue 24): its documents are the command line's --json documents,
its OpenAPI description covers them, and its security (token, session, CSRF, Origin,
Host, bounds, paths that stay in the run directory). Requests go through Starlette's
TestClient to the real app; every run is a real `pwe run` (engine, pilot, members).
The page in a real browser: tests/ui/test_ui_browser.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import ROOT, count_ends, read_journal, run_cli, wait_for

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from starlette.testclient import TestClient  # noqa: E402

from pwe.ui.api import Sources  # noqa: E402
from pwe.ui.app import make_app  # noqa: E402
from pwe.ui.security import Guard  # noqa: E402

SECRET = "s" * 43
WORKFLOW = """name: uiseen
defaults: {host: local}
nodes:
  prep:
    run: echo prepared
  sweep:
    after: [prep]
    parameters:
      x: {range: [0, 30]}
    run: |
      echo "x is {{ x }}"
      if [ $(( {{ x }} % 10 )) = 3 ]; then echo "x={{ x }} diverged" >&2; exit 7; fi
      echo energy=$(( {{ x }} * 10 )) >> "$PWE_OUTPUTS"
"""


@pytest.fixture(scope="module")
def done(home, tmp_path_factory):
    """One finished run (3 of 31 members fail): (cwd, run dir)."""
    cwd = tmp_path_factory.mktemp("ui")
    (cwd / "wf.yaml").write_text(WORKFLOW)
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=cwd)
    assert rc == 1, err
    summary = json.loads(out)
    assert summary["totals"]["failed"] == 3 and summary["totals"]["done"] == 28, summary
    return cwd, Path(summary["run_dir"])


def client(cwd, bind="127.0.0.1", base="http://127.0.0.1:8765", launch=None):
    app = make_app(Sources(Path(cwd) / "pwe-runs"), Guard(SECRET, bind, 8765, launch))
    return TestClient(app, base_url=base)


def cli_json(cwd, *args):
    rc, out, err = run_cli(*args, "--json", cwd=cwd)
    assert rc in (0, 1), err
    return json.loads(out)


# -- the documents are the command line's ------------------------------------------------------
def test_runs_run_members_and_logs_are_the_cli_json_documents(done):
    cwd, run = done
    c = client(cwd)
    def same_dir(docs):  # (the CLI names run directories as it found them: ./pwe-runs/..., relative)
        for d in docs:
            d["run_dir"] = str((cwd / d["run_dir"]).resolve())
        return docs

    runs = same_dir(c.get("/api/runs").json())
    assert runs == same_dir(cli_json(cwd, "runs"))  # (a finished run: nothing moves)
    doc = c.get(f"/api/runs/{run.name}").json()
    status = same_dir([cli_json(cwd, "status", run.name)])[0]
    assert {k: doc[k] for k in status if k != "run_dir"} == {k: v for k, v in status.items() if k != "run_dir"}
    assert [n["id"] for n in doc["dag"]["nodes"]] == ["prep", "sweep"]
    assert doc["dag"]["edges"] == [{"from": "prep", "to": "sweep", "matching": "barrier", "on": []}]
    page = c.get(f"/api/runs/{run.name}/members", params={"q": "state=failed; exit=7"}).json()
    assert page["members"] == cli_json(cwd, "show", run.name, "-q", "state=failed; exit=7")
    assert [m["member"] for m in page["members"]] == [3, 13, 23] and page["more"] is False
    logs = c.get(f"/api/runs/{run.name}/members/sweep/13/logs").json()
    said = cli_json(cwd, "logs", run.name, "sweep:13")
    for k in ("stdout", "stderr"):
        said[k]["path"] = str((cwd / said[k]["path"]).resolve())
    assert logs == said
    assert "x=13 diverged" in logs["stderr"]["text"]


def test_members_page_through_a_run_and_say_whether_more_follow(done):
    cwd, run = done
    c = client(cwd)
    everything = cli_json(cwd, "show", run.name, "--limit", "0")
    got, offset = [], 0
    while True:
        page = c.get(f"/api/runs/{run.name}/members", params={"offset": offset, "limit": 7}).json()
        got += page["members"]
        offset += 7
        if not page["more"]:
            break
    assert got == everything and len(got) == 31
    # a page of one state, far down, counted without a record per member passed over
    page = c.get(f"/api/runs/{run.name}/members", params={"state": "done", "offset": 20, "limit": 5}).json()
    assert page["members"] == [m for m in everything if m["state"] == "done"][20:25]
    bad = c.get(f"/api/runs/{run.name}/members", params={"q": "T>abc"})
    assert bad.status_code == 400 and "needs a number" in bad.json()["error"]
    assert c.get(f"/api/runs/{run.name}/members", params={"limit": 5000}).status_code == 400


def test_timeline_has_every_attempt_and_progress_per_pilot_and_machine(done):
    cwd, run = done
    tl = client(cwd).get(f"/api/runs/{run.name}/timeline").json()
    assert tl["attempts"] == 31 and len(tl["records"]) == 31
    (pilot, counts), = tl["by_pilot"].items()
    assert counts == {"done": 28, "failed": 3}
    assert sum(sum(c.values()) for c in tl["by_machine"].values()) == 31
    trace = [json.loads(line) for line in run_cli("trace", run.name, "--format", "json", cwd=cwd)[1].splitlines()]
    assert sorted((r["node"], r["member"], r["state"]) for r in tl["records"]) == \
        sorted((r["node"], r["member"], r["state"]) for r in trace)


def test_member_shows_its_files_and_outputs(done):
    cwd, run = done
    m = client(cwd).get(f"/api/runs/{run.name}/members/sweep/4").json()
    assert m["outputs"] == {"energy": "40"} and m["parameters"] == {"x": 4}
    assert m["output"]["attempt"] == 1 and m["output"]["stdout"] > 0, m["output"]  # (in its pilot's stream)
    assert "outputs" not in {f["name"] for f in m["files"]}  # (its outputs: in its end record, not a file)


# -- the OpenAPI description -------------------------------------------------------------------
def _check(doc, schema, components, where):
    if "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[1]]
    if schema.get("type") == "array":
        assert isinstance(doc, list), where
        for item in doc:
            _check(item, schema.get("items", {}), components, where)
    elif schema.get("type") == "object":
        assert isinstance(doc, dict), where
        missing = [k for k in schema.get("required", []) if k not in doc]
        assert not missing, f"{where}: {missing} missing"
        for k, sub in schema.get("properties", {}).items():
            if k in doc and doc[k] is not None:
                _check(doc[k], sub, components, f"{where}.{k}")


def test_openapi_describes_every_endpoint_and_the_documents_served_match_it(done):
    cwd, run = done
    c = client(cwd)
    spec = c.get("/api/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    paths = spec["paths"]
    app = c.app.app  # (the Starlette app inside the checks)
    routes = {re.sub(r":\w+}", "}", r.path) for r in app.routes  # (a path parameter's convertor left out)
              if getattr(r, "include_in_schema", True) and r.path.startswith("/api/")}
    assert routes - set(paths) == set()
    components = spec["components"]["schemas"]
    for path, ops in paths.items():
        for op in ops.values():
            for resp in op["responses"].values():
                for media in resp.get("content", {}).values():
                    ref = json.dumps(media.get("schema", {}))
                    for name in [p.split("/")[-1].rstrip('"}]') for p in ref.split("#/components/schemas/")[1:]]:
                        assert name in components, (path, name)
    served = {
        "/api/runs": c.get("/api/runs").json(),
        "/api/runs/{run_id}": c.get(f"/api/runs/{run.name}").json(),
        "/api/runs/{run_id}/members": c.get(f"/api/runs/{run.name}/members").json(),
        "/api/runs/{run_id}/members/{node}/{index}": c.get(f"/api/runs/{run.name}/members/sweep/3").json(),
        "/api/runs/{run_id}/members/{node}/{index}/logs": c.get(f"/api/runs/{run.name}/members/sweep/3/logs").json(),
        "/api/runs/{run_id}/timeline": c.get(f"/api/runs/{run.name}/timeline").json(),
        "/api/runs/{run_id}/failures": c.get(f"/api/runs/{run.name}/failures").json(),
        "/api/runs/{run_id}/members/{node}/{index}/explain": c.get(f"/api/runs/{run.name}/members/sweep/3/explain").json(),
        "/api/hosts": c.get("/api/hosts").json(),
        "/api/session": c.get("/api/session").json(),
    }
    for path, doc in served.items():
        schema = paths[path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        _check(doc, schema, components, path)


# -- security --------------------------------------------------------------------------------
def test_bound_elsewhere_every_request_needs_the_token(done):
    cwd, run = done
    c = client(cwd, bind="0.0.0.0", base="http://10.1.2.3:8765")
    assert c.get("/api/runs").status_code == 401
    assert c.get(f"/api/runs/{run.name}/members/sweep/3/logs").status_code == 401
    assert c.get("/api/runs", headers={"Authorization": "Bearer " + "t" * 43}).status_code == 401
    assert c.get("/api/runs", headers={"Authorization": f"Bearer {SECRET}"}).status_code == 200
    assert c.get("/login", params={"token": "wrong"}, follow_redirects=False).status_code == 401
    r = c.get("/login", params={"token": SECRET}, follow_redirects=False)
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert c.get("/api/runs").status_code == 200  # (the session cookie)
    assert c.get("/api/session").json()["csrf"]


def test_actions_need_the_token_csrf_and_the_same_origin(done):
    cwd, run = done
    c = client(cwd, launch="launchword")
    url = f"/api/runs/{run.name}/resume"
    origin = {"Origin": "http://127.0.0.1:8765"}
    assert c.post(url, headers=origin).status_code == 401  # no token: reads only
    assert c.get("/api/session").json() == {"authenticated": False, "reads": True, "csrf": None}
    assert c.get("/login", params={"token": "launchword"}, follow_redirects=False).status_code == 303
    csrf = c.get("/api/session").json()["csrf"]
    assert c.post(url, headers=origin).status_code == 403  # no CSRF value
    assert c.post(url, headers={**origin, "X-PWE-CSRF": "0" * 64}).status_code == 403
    assert c.post(url, headers={"Origin": "http://evil.example", "X-PWE-CSRF": csrf}).status_code == 403
    assert c.post(url, headers={"X-PWE-CSRF": csrf}).status_code == 403  # no Origin at all
    big = c.post(url, headers={**origin, "X-PWE-CSRF": csrf}, content=b"{" + b" " * 70_000 + b"}")
    assert big.status_code == 413
    # a GET of an action's address is no action
    assert c.get(url).status_code == 405


def test_action_rate_is_bounded(done):
    cwd, run = done
    c = client(cwd)
    h = {"Authorization": f"Bearer {SECRET}"}
    codes = [c.post("/api/triggers/none/fire", headers=h).status_code for _ in range(31)]
    assert codes[:30] == [400] * 30 and codes[30] == 429  # (no such trigger: bad input, yet counted)


def test_a_loopback_dashboard_refuses_a_foreign_host_header(done):
    cwd, _ = done
    c = client(cwd, base="http://evil.example:8765")
    assert c.get("/api/runs").status_code == 421
    assert client(cwd, base="http://localhost:8765").get("/api/runs").status_code == 200


def test_pages_carry_a_content_security_policy(done):
    cwd, _ = done
    r = client(cwd).get("/")
    assert "script-src 'self'" in r.headers["content-security-policy"] and r.headers["x-frame-options"] == "DENY"
    assert "innerHTML" not in (ROOT / "pwe/ui/static/app.js").read_text().replace("never innerHTML", "")


def test_logs_cannot_leave_the_run_directory(done, tmp_path):
    cwd, run = done
    c = client(cwd)
    stream = next((run / "pilots").glob("*/out-*.stream"))  # (a member's output is in its pilot's stream)
    kept = stream.read_bytes()
    stream.unlink()
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"not for the dashboard" * (1 + len(kept) // 21))
    stream.symlink_to(secret)
    try:
        r = c.get(f"/api/runs/{run.name}/members/sweep/5/logs")
        assert r.status_code == 400 and "not for the dashboard" not in r.text
    finally:
        stream.unlink()
        stream.write_bytes(kept)
    for bad in ("..", "..%2F..%2Fetc", "%2Fetc", "a" * 300):
        assert c.get(f"/api/runs/{bad}").status_code == 404
    assert c.get(f"/api/runs/{run.name}/members/..%2F..%2F..%2Fetc/0/logs").status_code in (400, 404)
    assert c.get(f"/api/runs/{run.name}/members/sweep/99/logs").status_code == 400


def test_the_token_is_owner_only_made_once_and_rotatable(home):
    from pwe.base.errors import InputError
    from pwe.ui.security import token, token_path

    first, made = token()
    path = token_path()
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    again, made_again = token()
    assert again == first and made_again is False
    rotated, made = token(rotate=True)
    assert made and rotated != first and token()[0] == rotated
    path.chmod(0o644)
    with pytest.raises(InputError, match="mode 600"):
        token()
    path.chmod(0o600)


# -- pwe ui on the command line ----------------------------------------------------------------
def test_pwe_ui_bad_options_are_one_line_exit_2(home, tmp_path):
    for args, phrase in ((["--port", "99999"], "out of range"), (["--port", "abc"], "not a whole number"),
                         (["--runs", str(tmp_path / "none")], "not a directory"),
                         (["--host", "bad host"], "an address to listen on")):
        rc, out, err = run_cli("ui", *args, cwd=tmp_path)
        assert rc == 2 and phrase in err and len(err.strip().splitlines()) == 1, (args, err)
        assert "Traceback" not in err


def _start_ui(cwd, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "ui", "--port", "0", *args], cwd=cwd, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines = []
    deadline = time.time() + 30
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if "http://" in line:
            return proc, lines
    proc.kill()
    raise AssertionError(f"pwe ui did not say where it listens: {lines}")


def test_pwe_ui_elsewhere_shows_a_new_token_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PWE_HOME", str(tmp_path / "home"))
    proc, lines = _start_ui(tmp_path, "--host", "0.0.0.0")
    try:
        made = [l for l in lines if "a new token" in l]
        assert len(made) == 1
        secret = made[0].rsplit(": ", 1)[1]
        assert (tmp_path / "home/state/ui/token").read_text().strip() == secret
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    proc, lines = _start_ui(tmp_path, "--host", "0.0.0.0")
    try:
        assert not any(secret in l for l in lines) and not any("a new token" in l for l in lines)
        port = int(lines[-1].split("http://0.0.0.0:")[1].split("/")[0])
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=10)
        assert refused.value.code == 401
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/runs", headers={"Authorization": f"Bearer {secret}"})
        assert urllib.request.urlopen(req, timeout=10).status == 200
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) in (0, 130, -2)


# -- actions: the CLI's code, who asked in the journal ------------------------------------------
SLOW = """name: uislow
defaults: {host: local}
nodes:
  s:
    parameters: {i: {range: [0, 40]}}
    run: sleep 0.5
"""


def test_cancel_from_the_api_stops_the_run_and_the_journal_says_who(home, tmp_path):
    (tmp_path / "wf.yaml").write_text(SLOW)
    rc, out, err = run_cli("submit", "wf.yaml", "--cores", "2", cwd=tmp_path)
    assert rc == 0, err
    run_id = out.strip()
    run = tmp_path / "pwe-runs" / run_id
    wait_for(lambda: count_ends(run) >= 1, 60, "a member's end")
    c = client(tmp_path)
    login = c.get("/login", params={"token": SECRET}, follow_redirects=False)
    assert login.status_code == 303
    csrf = c.get("/api/session").json()["csrf"]
    r = c.post(f"/api/runs/{run_id}/cancel", headers={"Origin": "http://127.0.0.1:8765", "X-PWE-CSRF": csrf})
    assert r.status_code == 200 and r.json() == {"run_id": run_id, "cancelled": True}
    cancels = [rec for rec in read_journal(run) if rec["e"] == "cancel"]
    assert len(cancels) == 1 and cancels[0]["by"].startswith("ui:") and cancels[0]["by"].endswith("@testclient")
    assert cli_json(tmp_path, "status", run_id)["phase"] == "cancelled"
    assert c.get(f"/api/runs/{run_id}").json()["phase"] == "cancelled"
    # resumed from the API: the resume record names who asked too
    r = c.post(f"/api/runs/{run_id}/retry", headers={"Origin": "http://127.0.0.1:8765", "X-PWE-CSRF": csrf})
    assert r.status_code == 200, r.text
    def retried_and_ended():
        kinds = [rec["e"] for rec in read_journal(run)]
        return "retry" in kinds and "finish" in kinds[kinds.index("retry"):]

    wait_for(retried_and_ended, 120, "the retried run's end")
    retry = [rec for rec in read_journal(run) if rec["e"] == "retry"]
    assert len(retry) == 1 and retry[0]["by"].startswith("ui:")
    assert cli_json(tmp_path, "status", run_id)["phase"] == "succeeded"


def test_triggers_enable_disable_and_fire_from_the_api(home, tmp_path):
    (tmp_path / "wf.yaml").write_text("name: uitrig\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("trigger", "add", tmp_path / "wf.yaml", "--cron", "0 3 * * *", "--id", "nightly",
                           "--json", cwd=tmp_path)
    assert rc == 0, err
    c = client(tmp_path)
    h = {"Authorization": f"Bearer {SECRET}"}
    (t,) = [t for t in c.get("/api/triggers").json() if t["id"] == "nightly"]
    assert t["enabled"] is True and t["next"] and t == [x for x in cli_json(tmp_path, "trigger", "list")
                                                        if x["id"] == "nightly"][0]
    assert c.post("/api/triggers/nightly/disable", headers=h).json() == {"trigger": "nightly", "enabled": False,
                                                                         "changed": True}
    (t,) = [t for t in c.get("/api/triggers").json() if t["id"] == "nightly"]
    assert t["enabled"] is False and t["next"] is None
    assert c.post("/api/triggers/nightly/enable", headers=h).json()["changed"] is True
    fired = c.post("/api/triggers/nightly/fire", headers=h).json()
    assert fired["run_id"].startswith("uitrig-")
    rc, out, err = run_cli("trigger", "history", "nightly", "--json", cwd=tmp_path)
    hist = json.loads(out)
    assert [h["what"] for h in hist] == ["disabled", "enabled", "fired", "asked"]
    assert all(h["by"].startswith("ui:") for h in hist if h["what"] != "fired")
    run_dir = Path(next(h["run"] for h in hist if h["what"] == "fired"))
    assert run_dir.name == fired["run_id"], (run_dir, fired)
    assert c.post("/api/triggers/nightly/explode", headers=h).status_code == 404


def test_pwe_retry_q_selects_failed_members_or_says_why_not(done, tmp_path):
    cwd, run = done
    rc, out, err = run_cli("retry", run.name, "-q", "state=done", cwd=cwd)
    assert rc == 2 and "selects no failed, skipped, cancelled, quarantined or held member" in err and len(err.splitlines()) == 1
    rc, out, err = run_cli("retry", run.name, "-q", "T>abc", cwd=cwd)
    assert rc == 2 and "needs a number" in err
    # a run of its own (the fixture's stays as it is): x=13 alone of the three failed runs again
    (tmp_path / "wf.yaml").write_text(WORKFLOW)
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=tmp_path)
    assert rc == 1, err
    mine = Path(json.loads(out)["run_dir"])
    mine = mine if mine.is_absolute() else tmp_path / mine
    before = len(read_journal(mine))
    rc, out, err = run_cli("retry", mine.name, "-q", "x=13", cwd=tmp_path)
    assert rc == 1, err  # (x=13 fails again: still failed, as are the two not retried)
    recs = read_journal(mine)[before:]
    (retry,) = [r for r in recs if r["e"] == "retry"]
    assert retry["only"] == {"sweep": [[13, 14]]} and retry["by"].startswith("cli:")
    assert {(r["n"], r["m"]) for r in recs if r["e"] == "end"} == {("sweep", 13)}
    failed = cli_json(tmp_path, "show", mine.name, "-q", "state=failed")
    assert sorted((m["member"], m["attempts"]) for m in failed) == [(3, 1), (13, 2), (23, 1)], failed


def test_a_selection_is_runs_of_consecutive_members():
    from pwe.engine.control import selection

    picked = [{"node": "b", "member": 7}, {"node": "a", "member": 3}, {"node": "a", "member": 4},
              {"node": "a", "member": 9}, {"node": "a", "member": 4}]
    assert selection(picked) == {"a": [[3, 5], [9, 10]], "b": [[7, 8]]}


def test_pwe_service_serves_the_dashboard_with_its_runs(tmp_path, monkeypatch):
    import socket
    import urllib.request

    monkeypatch.setenv("PWE_HOME", str(tmp_path / "home"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, err = run_cli("service", "start", "--ui", str(port), cwd=tmp_path, env={"PWE_SERVICE_STALE": "30"})
    assert rc == 0, err
    try:
        assert f"dashboard on 127.0.0.1:{port}" in out
        rc, out, err = run_cli("submit", "--service", ROOT / "examples" / "quickstart.yaml", cwd=tmp_path)
        assert rc == 0, err
        run_id = out.strip()

        def listed():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5) as r:
                    return [x for x in json.loads(r.read()) if x["run_id"] == run_id and x["from"] == "service"]
            except OSError:
                return []

        wait_for(listed, 60, "the service's run on its dashboard")
        log = tmp_path / "home" / "state" / "service" / "ui.log"
        assert f"http://127.0.0.1:{port}/login?token=" in log.read_text() and oct(log.stat().st_mode & 0o777) == "0o600"
    finally:
        run_cli("service", "stop", cwd=tmp_path)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5)
    rc, out, err = run_cli("service", "start", "--ui", "99999", cwd=tmp_path)
    assert rc == 2 and "--ui" in err and len(err.strip().splitlines()) == 1
