"""Ids and names, each defined once (pwe/base/ids.py): the same run id is accepted or
refused alike by the command line, the service and the dashboard; the same node id by the
workflow's schema (a real ``pwe validate``) and its JSON Schema; the same job id by the
protocols and ``pwe notify``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

from pwe.base import ids
from pwe.base.errors import InputError, RunNotFound

ENV = dict(os.environ, PYTHONPATH=str(ROOT))

RUN_IDS = [("a" * 200, True), ("a" * 201, False), ("sweep-20261127-101500-ab12", True), ("r.1_x-Y", True),
           ("-r", False), (".r", False), ("a/b", False), ("a b", False), ("", False), ("é", False)]
NODE_IDS = [("n" * 100, True), ("n" * 101, False), ("_x.y-1", True), ("9", True), (".x", False), ("-x", False),
            ("a b", False), ("a/b", False)]
JOB_IDS = [("123", True), ("123_4", True), ("123[].server", True), ("login1.example.org.42.0", True),
           ("1" * 200, True), ("1" * 201, False), ("-1", False), ("1;rm", False), ("", False)]


def pwe(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pwe", *args], env=ENV, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("run_id,ok", RUN_IDS, ids=lambda v: str(v)[:20])
def test_a_run_id_is_taken_or_refused_alike_everywhere(run_id, ok, tmp_path):
    assert ids.is_run_id(run_id) is ok
    # the command line (pwe submit --run-id: a staged run's id)
    res = pwe("submit", "--run-id", run_id, str(tmp_path / "none.yaml"), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert ("a run id is letters" in res.stderr) is not ok, res.stderr
    # the service (a submission: a bad id raised, a good one kept with its error: no such file)
    from pwe.runstate.service_store import Store
    from pwe.service.submit import submit_run

    store = Store(tmp_path / "service").make()
    if ok:
        rec = submit_run(store, {"run_id": run_id, "path": str(tmp_path / "none.yaml")})
        assert rec["run_id"] == run_id and rec["phase"] == "refused"
    else:
        with pytest.raises(InputError, match="run id"):
            submit_run(store, {"run_id": run_id, "path": str(tmp_path / "none.yaml")})
    # the dashboard (no such run either way; refused as no run id only when it is none)
    from pwe.ui.api import Sources

    with pytest.raises(RunNotFound) as said:
        Sources(tmp_path / "runs").find(run_id)
    assert ("not a run id" in str(said.value)) is not ok


@pytest.mark.parametrize("node,ok", NODE_IDS, ids=lambda v: str(v)[:20])
def test_a_node_id_is_taken_or_refused_alike_by_the_schema_and_validate(node, ok, tmp_path):
    assert ids.is_node_id(node) is ok
    wf = tmp_path / "wf.yaml"
    wf.write_text(json.dumps({"name": "ids", "nodes": {node: {"run": "true"}}}))
    res = pwe("validate", str(wf), cwd=tmp_path)
    assert res.returncode == (0 if ok else 2) and "Traceback" not in res.stderr, res.stderr
    # the workflow's name follows the same rule
    wf.write_text(json.dumps({"name": node, "nodes": {"a": {"run": "true"}}}))
    res = pwe("validate", str(wf), cwd=tmp_path)
    assert res.returncode == (0 if ok else 2), res.stderr


def test_the_json_schema_carries_the_one_node_id_rule():
    from pwe.workflow.schema import generate

    schema = json.loads(generate())
    nodes = schema["properties"]["nodes"]
    assert list(nodes["patternProperties"]) == [ids.NODE_ID_PATTERN]
    assert nodes["propertyNames"]["maxLength"] == ids.MAX_NAME
    assert schema["properties"]["name"]["pattern"] == ids.NODE_ID_PATTERN


@pytest.mark.parametrize("job,ok", JOB_IDS, ids=lambda v: str(v)[:20])
def test_a_job_id_is_taken_or_refused_alike_by_the_protocols_and_pwe_notify(job, ok):
    from protocols import base
    from pwe.runstate.notify import check_ids

    assert base.is_job_id is ids.is_job_id and ids.is_job_id(job) is ok
    if ok:
        check_ids("p1", job)
    else:
        with pytest.raises(InputError, match="job id"):
            check_ids("p1", job)


def test_pilot_and_trigger_ids(tmp_path):
    from pwe.runstate.notify import check_ids

    assert ids.is_pilot_id("p" * 64) and not ids.is_pilot_id("p" * 65) and not ids.is_pilot_id("p.1")
    with pytest.raises(InputError, match="at most 64"):
        check_ids("p" * 65, "1")
    for tid, ok in (("t" * 64, True), ("t" * 65, False), ("nightly_1", True), ("a.b", False)):
        assert ids.is_trigger_id(tid) is ok
        res = pwe("trigger", "add", str(tmp_path / "none.yaml"), "--cron", "0 * * * *", "--id", tid, cwd=tmp_path)
        assert res.returncode == 2 and ("--id" in res.stderr) is not ok, res.stderr


def test_queue_names():
    from pwe.runstate.service_store import check_queue

    for name, ok in (("q" * 100, True), ("q" * 101, False), ("q.1_a-b", True), ("a,b", False), ("a/b", False)):
        assert ids.is_queue_name(name) is ok
        if ok:
            assert check_queue(name, "PWE_QUEUE") == name
        else:
            with pytest.raises(InputError, match="PWE_QUEUE"):
                check_queue(name, "PWE_QUEUE")


def test_no_other_module_spells_an_id_pattern():
    """The patterns of pwe/base/ids.py appear nowhere else in the source."""
    spelt = ["[A-Za-z0-9][A-Za-z0-9._-]", "[A-Za-z0-9][A-Za-z0-9_.+", "[A-Za-z0-9][A-Za-z0-9_-]",
             "[A-Za-z0-9_][A-Za-z0-9_.-]"]
    found = []
    for package in ("pwe", "pilot", "hostinfo", "protocols"):
        for path in (ROOT / package).rglob("*.py"):
            if path.relative_to(ROOT).as_posix() == "pwe/base/ids.py" or path.name == "check_table.py":
                continue  # (the checker's tables are derived from the models, which take ids.py's)
            text = path.read_text()
            found += [f"{path.relative_to(ROOT)}: {s}" for s in spelt if s in text]
    # (pilot/ is below pwe.base: its own node names, allocation.NODE_NAME, are hosts, not node ids)
    assert found == ["pilot/allocation.py: [A-Za-z0-9_][A-Za-z0-9_.-]"]
