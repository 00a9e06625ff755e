"""pwe set from the dashboard's API (POST /api/runs/RUN/set): the command's function
(pwe.engine.control.set_values) with who asked; what it refuses, in one line each, with
nothing left in the run's control/. The button on the page: tests/ui/test_ui_browser.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import read_journal, run_cli

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from pwe.ui.api import Sources  # noqa: E402
from pwe.ui.app import make_app  # noqa: E402
from pwe.ui.security import Guard  # noqa: E402

SECRET = "s" * 43
ORIGIN = "http://127.0.0.1:8765"


@pytest.fixture
def ran(home, tmp_path):
    """A finished run of six members, two failed: (cwd, run dir, a logged-in client, its headers)."""
    (tmp_path / "wf.yaml").write_text("name: uiset\nnodes:\n  a:\n    parameters: {i: {range: [0, 6]}}\n"
                                      "    run: '[ {{ i }} -lt 4 ]'\n")
    rc, out, err = run_cli("run", "wf.yaml", "--json", cwd=tmp_path, timeout=300)
    assert rc == 1, err
    run = Path(json.loads(out)["run_dir"])
    run = run if run.is_absolute() else tmp_path / run
    c = TestClient(make_app(Sources(tmp_path / "pwe-runs"), Guard(SECRET, "127.0.0.1", 8765, None)), base_url=ORIGIN)
    assert c.get("/login", params={"token": SECRET}, follow_redirects=False).status_code == 303
    return tmp_path, run, c, {"Origin": ORIGIN, "X-PWE-CSRF": c.get("/api/session").json()["csrf"]}


def _left(run: Path) -> list[Path]:
    return list((run / "control").glob("*")) if (run / "control").exists() else []


def test_a_set_waits_for_the_next_engine_which_journals_who_asked(ran):
    cwd, run, c, h = ran
    r = c.post(f"/api/runs/{run.name}/set", headers=h, json={"pairs": ["retries=2", "env.MODE=x y"], "query": "i=5"})
    assert r.status_code == 200, r.text
    assert r.json() == {"run_id": run.name, "taken": False}
    rc, out, err = run_cli("retry", run.name, cwd=cwd, timeout=300)
    (said,) = [x for x in read_journal(run) if x["e"] == "set"]
    assert said["by"].startswith("ui:") and said["only"] == {"a": [[5, 6]]}
    assert said["values"] == {"retries": 2, "env": {"MODE": "x y"}}
    # member 5 ran three times more (retries=2 after its retry), member 4 once more
    attempts = {x["m"]: x["a"] for x in read_journal(run) if x["e"] == "end"}
    assert attempts[5] == 4 and attempts[4] == 2, attempts


@pytest.mark.parametrize("body, said", [
    ({}, "pairs: a list"), ({"pairs": "memoryPerMember=1"}, "pairs: a list"), ({"pairs": []}, "pairs: a list"),
    ({"pairs": [1]}, "pairs: a list"), ({"pairs": ["x=1"] * 65}, "pairs: a list"),
    ({"pairs": ["nope=1"]}, "no key 'nope'"), ({"pairs": ["memoryPerMember=-1"]}, "memoryPerMember"),
    ({"pairs": ["priority=1001"]}, "priority"), ({"pairs": ["memoryPerMember=9" * 30]}, "memoryPerMember"),
    ({"pairs": ["gpus=1"], "query": "i=99"}, "selects no member"), ({"pairs": ["gpus=1"], "query": 3}, "query"),
    ({"pairs": ["env.A=\x1b[31m\x00"]}, "without NUL"),
])
def test_bad_requests_are_one_line_and_leave_nothing(ran, body, said):
    cwd, run, c, h = ran
    r = c.post(f"/api/runs/{run.name}/set", headers=h, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert said in err and "\n" not in err and "Traceback" not in err, err
    assert not _left(run)


def test_a_set_needs_the_session_csrf_and_the_same_origin(ran):
    cwd, run, c, h = ran
    url = f"/api/runs/{run.name}/set"
    assert c.post(url, headers={**h, "Origin": "http://evil.example"}, json={"pairs": ["gpus=0"]}).status_code == 403
    assert c.post(url, headers={"Origin": ORIGIN}, json={"pairs": ["gpus=0"]}).status_code == 403
    anon = TestClient(make_app(Sources(cwd / "pwe-runs"), Guard(SECRET, "127.0.0.1", 8765, None)), base_url=ORIGIN)
    assert anon.post(url, headers={"Origin": ORIGIN}, json={"pairs": ["gpus=0"]}).status_code in (401, 403)
    assert not _left(run)
