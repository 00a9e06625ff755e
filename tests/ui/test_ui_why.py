"""The dashboard's failures and explain (issue 47): ``GET /api/runs/{run}/failures`` is
``pwe failures --json`` and ``GET /api/runs/{run}/members/{node}/{index}/explain`` is ``pwe
explain --json`` (the batch system asked only with ``?ask=1``, bounded as actions are), with
the checks of every other route: a run or member that does not exist is 404 in one line,
hostile ids are refused, values members made come back as JSON text. Through Starlette's
TestClient to the real app, over a real ``pwe run``. The page: tests/ui/test_ui_browser.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import failing_meshes, run_cli

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from starlette.testclient import TestClient  # noqa: E402

from pwe.ui.api import Sources  # noqa: E402
from pwe.ui.app import make_app  # noqa: E402
from pwe.ui.security import ACTIONS_PER_MINUTE, Guard  # noqa: E402

#: one value of one parameter always fails; values and the error line carry markup and a
#: terminal's escapes
WORKFLOW = failing_meshes("uiwhy", "defaults: {host: local}\n")


@pytest.fixture(scope="module")
def done(home, tmp_path_factory):
    """One finished run: the 3 members of mesh=fine failed, the 9 others done. (cwd, run dir)"""
    cwd = tmp_path_factory.mktemp("uiwhy")
    (cwd / "wf.yaml").write_text(WORKFLOW)
    rc, out, err = run_cli("run", "wf.yaml", "--cores", "2", "--json", cwd=cwd)
    assert rc == 1, err
    doc = json.loads(out)
    assert doc["totals"]["failed"] == 3 and doc["totals"]["done"] == 9, doc
    run = Path(doc["run_dir"])
    return cwd, run if run.is_absolute() else cwd / run


def client(cwd):
    app = make_app(Sources(Path(cwd) / "pwe-runs"), Guard("s" * 43, "127.0.0.1", 8765))
    return TestClient(app, base_url="http://127.0.0.1:8765")


def cli_json(cwd, *args):
    rc, out, err = run_cli(*args, "--json", cwd=cwd)
    assert rc == 0, err
    return json.loads(out)


def test_failures_is_the_cli_document_with_the_failing_value_first(done):
    cwd, run = done
    r = client(cwd).get(f"/api/runs/{run.name}/failures")
    assert r.status_code == 200, r.text
    doc = r.json()
    first = doc["by_value"][0]
    assert (first["node"], first["parameter"], first["value"], first["failed"], first["done"], first["difference"]) \
        == ("sim", "mesh", "fine", 3, 0, 100.0)
    assert doc.pop("from_offset") == 0  # (the trace of the whole journal)
    assert doc == cli_json(cwd, "failures", run.name)
    assert [(h["failed"], h["done"]) for h in doc["by_host"]] == [(3, 9)]


def test_explain_is_the_cli_document_of_the_member(done):
    cwd, run = done
    c = client(cwd)
    r = c.get(f"/api/runs/{run.name}/members/sim/3/explain")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["state"] == "failed" and doc["parameters"] == {"mesh": "fine", "seed": 0}
    assert any("exit 3" in line for line in doc["layers"]["member"]), doc["layers"]
    said = cli_json(cwd, "explain", run.name, "sim:3", "--no-ask")
    assert doc == json.loads(json.dumps(said))
    assert c.get(f"/api/runs/{run.name}/members/sim/3/explain?ask=0").json() == doc


def test_the_batch_system_is_asked_only_with_ask_1(done, monkeypatch):
    """A view passes ask=False to explain (the state kept read, no command); ?ask=1 alone
    passes ask=True (explain then asks the batch system about a queued pilot job: real
    SLURM in tests/observe/test_explain.py)."""
    import pwe.observe.explain as module

    asked, real = [], module.explain

    def spy(*args, **kw):
        asked.append(kw["ask"])
        return real(*args, **kw)

    monkeypatch.setattr(module, "explain", spy)
    c = client(done[0])
    url = f"/api/runs/{done[1].name}/members/sim/3/explain"
    assert [c.get(url + q).status_code for q in ("", "?ask=0", "?ask=", "?ask=1")] == [200] * 4
    assert asked == [False, False, False, True]


def test_a_run_or_member_that_does_not_exist_is_404_in_one_line(done):
    cwd, run = done
    c = client(cwd)
    for url, said in ((f"/api/runs/{run.name}/members/sim/12/explain", "no such member (sim has 12, 0 to 11)"),
                      (f"/api/runs/{run.name}/members/nosuch/0/explain", "has no node 'nosuch'"),
                      (f"/api/runs/{run.name[:-1]}x/failures", "no run"),
                      (f"/api/runs/{run.name[:-1]}x/members/sim/0/explain", "no run")):
        r = c.get(url)
        assert r.status_code == 404 and said in r.json()["error"], (url, r.text)
        assert len(r.text.splitlines()) == 1


@pytest.mark.parametrize("url", ["/api/runs/../failures", "/api/runs/..%2F..%2Fetc/failures", "/api/runs/%2Fetc/failures",
                                 "/api/runs/{run}/members/sim/" + "1" + "0" * 30 + "/explain",
                                 "/api/runs/{run}/members/sim/-1/explain", "/api/runs/{run}/members/sim/%EF%BC%91/explain",
                                 "/api/runs/{run}/members/..%2F..%2Fetc/0/explain",
                                 "/api/runs/{run}/members/a%3Cb%3E%1b%5B2J%00/0/explain",
                                 "/api/runs/{run}/members/" + "n" * 3000 + "/0/explain"])
def test_hostile_ids_are_refused_in_one_line(done, url):
    cwd, run = done
    r = client(cwd).get(url.replace("{run}", run.name))
    assert r.status_code in (400, 404), r.text[:200]
    assert len(r.text.splitlines()) == 1 and len(r.text) < 4000 and "Traceback" not in r.text
    assert b"\x1b" not in r.content and b"\x00" not in r.content  # (a name it was given, as JSON text)


def test_ask_is_one_or_zero_and_bounded_as_actions_are(done):
    cwd, run = done
    c = client(cwd)
    url = f"/api/runs/{run.name}/members/sim/3/explain"
    for bad in ("2", "yes", "1" * 40, "\uff11"):
        r = c.get(url, params={"ask": bad})
        assert r.status_code == 400 and r.json()["error"] == "ask: a whole number from 0 to 1", r.text
    codes = [c.get(url, params={"ask": "1"}).status_code for _ in range(ACTIONS_PER_MINUTE + 1)]
    assert codes == [200] * ACTIONS_PER_MINUTE + [429], codes
    assert c.get(url).status_code == 200  # (a view that asks nobody is not counted)


def test_values_members_made_come_back_as_json_text(done):
    cwd, run = done
    c = client(cwd)
    r = c.get(f"/api/runs/{run.name}/failures")
    assert b"\x1b" not in r.content and "\\u001b[31mred" in r.text  # (the escape as JSON's \u001b)
    values = {v["value"] for v in r.json()["by_value"]}
    assert {"<script>alert(1)</script>", "\x1b[31mred"} <= values
    sig = r.json()["by_signature"][0]
    assert sig["members"] == 3 and sig["line"].startswith("Error: /scratch/run") and "\x1b[2J<img src=x>" in sig["line"]
    r = c.get(f"/api/runs/{run.name}/members/sim/6/explain")
    assert r.status_code == 200 and b"\x1b" not in r.content
    assert r.json()["parameters"]["mesh"] == "<script>alert(1)</script>"
