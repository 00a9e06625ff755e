"""Which change makes a member run again (pwe/runstate/rerun_why.py, the keys' parts kept by
pwe/planning/reuse.py, pwe/runstate/keyring.py, lending.py, reusable.py).

One real run of a small workflow lends; then one thing is changed at a time (an input, a
command, an env value, a property, an upstream member, a new parameter value) and both
``pwe plan --explain`` and :func:`why_run` must name that change. An invariant over random
single changes: the reason named is the change made, and nothing else. A record of an
older pwe (without parts) still lends and says "unknown"; a record whose parts are damaged
or forged lends nothing; an input whose name holds terminal escapes is shown inert."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import no_traceback, run_cli

from pwe.observe import planview
from pwe.runstate import notify, reusable
from pwe.runstate.rerun_why import KINDS, OLDER, Why, explain_member, lenders_of, why_run

# prep (an input that names no parameter, env, a property) -> sim (matched: an input per
# member) -> total (a barrier); mesh: one member fails (coarse, k=1)
WF = """\
name: why
properties: {{P: "{P}"}}
nodes:
  prep:
    parameters: {{i: {{range: [0, {n}]}}}}
    inputs: ["data/mesh.h5"]
    env: {{FOO: "{FOO}", BAR: "x"}}
    host: {host}
    run: echo "prep {{{{ i }}}} {{{{ P }}}}"
  sim:
    after: [prep]
    parameters: {{i: {{range: [0, {n}]}}}}
    inputs: ["data/{{{{ i }}}}.dat"]
    run: echo "{sim}"
  total:
    after: [sim]
    run: echo total
  mesh:
    parameters: {{mesh: [{meshes}], k: [0, 1]}}
    run: test "{{{{ mesh }}}}{{{{ k }}}}" != coarse1
"""
BASE = {"P": "1", "FOO": "1", "n": 4, "sim": "sim {{ i }}", "meshes": "coarse", "host": "local"}
#: beside the workflow: a second host that runs here, for prep's host to change to
HOSTS = "hosts:\n  other: {protocol: local, cores_per_node: 2}\n"


def workflow(where: Path, **change) -> Path:
    (where / "hosts.yaml").write_text(HOSTS)
    wf = where / "wf.yaml"
    wf.write_text(WF.format(**{**BASE, **change}))
    return wf


def inputs(where: Path) -> None:
    (where / "data").mkdir(exist_ok=True)
    (where / "data" / "mesh.h5").write_text("mesh 1\n")
    for i in range(5):
        (where / "data" / f"{i}.dat").write_text(f"dat {i}\n")


@pytest.fixture(scope="module")
def lent(tmp_path_factory):
    """A workspace with one ended run of the workflow under ./runs (mesh[1] failed)."""
    where = tmp_path_factory.mktemp("why")
    inputs(where)
    rc, out, err = run_cli("run", workflow(where), "--run-dir", where / "runs" / "r1", "--json", cwd=where,
                           timeout=300)
    no_traceback(err)
    assert rc != 0 and json.loads(out.strip().splitlines()[-1])["totals"]["failed"] == 1, (out, err)
    assert (where / "runs" / "r1" / reusable.PARTS).is_file()
    return where


def plan_of(where: Path):
    return planview.check(str(where / "wf.yaml"), (), None, None, str(where))[0]


def lenders(where: Path, root: str = "runs"):
    return reusable.lenders(where / root, "why")[0]


def reasons(where: Path, nid: str, i: int, root: str = "runs") -> list[str]:
    return why_run(plan_of(where), str(where), nid, i, lenders(where, root))


def explained(where: Path, root: str = "runs") -> dict:
    rc, out, err = run_cli("plan", where / "wf.yaml", "--workspace", where, "--reuse-from", where / root,
                           "--explain", "--json", cwd=where)
    assert rc == 0, err
    return {n["id"]: n for n in json.loads(out)["nodes"]}


@pytest.fixture
def edits(lent):
    """The lending workspace, its workflow and inputs put back as they were after the test."""
    yield lent
    workflow(lent)
    inputs(lent)


def test_unchanged_everything_is_reused_but_the_failed_member(edits):
    nodes = explained(edits)
    assert {k: n["run"] for k, n in nodes.items()} == {"prep": 0, "sim": 0, "total": 0, "mesh": 1}
    assert nodes["mesh"]["changes"] == [{"reason": "earlier run's member did not finish (failed)", "count": 1,
                                         "members": [[1, 2]]}]
    doc = explain_member(plan_of(edits), str(edits), "sim", 2, lenders(edits))
    assert doc["reused"] and doc["reasons"] == [] and doc["from"]["member"] == 2


def test_an_input_file_changed_is_named_and_so_is_the_upstream_member(edits):
    (edits / "data" / "mesh.h5").write_text("mesh 2\n")
    assert reasons(edits, "prep", 1) == ["input data/mesh.h5 changed"]
    assert reasons(edits, "sim", 1) == ["upstream prep[1] changed"]
    assert reasons(edits, "total", 0) == ["upstream sim[0], sim[1], sim[2] (+1 more) changed"]
    nodes = explained(edits)
    assert nodes["prep"]["changes"] == [{"reason": "input data/mesh.h5 changed", "count": 4, "members": [[0, 4]]}]
    assert nodes["sim"]["changes"] == [{"reason": "upstream prep changed", "count": 4, "members": [[0, 4]]}]
    # the --json shape as it was, with fields added
    assert nodes["prep"]["why"] == {reusable.NEW: [[0, 4]]} and nodes["prep"]["run"] == 4
    rc, out, err = run_cli("plan", edits / "wf.yaml", "--workspace", edits, "--reuse-from", edits / "runs",
                           "--explain", cwd=edits)
    assert "    4 run: input data/mesh.h5 changed: members 0..3" in out
    assert "    4 run: upstream prep changed: members 0..3" in out
    assert "    [0]: upstream sim[0], sim[1], sim[2] (+1 more) changed" in out  # (few: each member)


def test_the_document_of_a_member_and_the_lenders_a_run_had(edits):
    """The shape `pwe explain` reads; the lenders of a run that began before any ended: none."""
    workflow(edits, FOO="2")
    plan = plan_of(edits)
    found, notes = lenders_of(plan, edits / "runs")
    doc = explain_member(plan, str(edits), "prep", 2, found)
    run_id = found[0].run
    assert doc == {"node": "prep", "member": 2, "parameters": {"i": 2}, "reused": False,
                   "compared_with": {"run": run_id, "member": 2},
                   "reasons": [{"kind": "environment", "text": "environment changed (env: FOO)",
                                "group": "environment changed (env: FOO)", "name": "FOO"}]}
    assert all(r["kind"] in KINDS for nid in plan.nodes for i in range(plan.nodes[nid].size)
               for r in explain_member(plan, str(edits), nid, i, found)["reasons"])
    assert lenders_of(plan, edits / "runs", started=found[0].t - 1)[0] == []
    assert lenders_of(plan, edits / "runs", exclude=found[0].dir)[0] == []
    assert why_run(plan, str(edits), "prep", 2, []) == [
        "new: no earlier run had a member with these values (i=2)"]


def test_one_members_own_input_changed_names_that_file_only(edits):
    (edits / "data" / "2.dat").write_text("dat 2, edited\n")
    assert reasons(edits, "sim", 2) == ["input data/2.dat changed"]
    nodes = explained(edits)
    assert nodes["sim"]["changes"] == [{"reason": "input data/2.dat changed", "count": 1, "members": [[2, 3]]}]
    assert nodes["sim"]["members_why"] == [{"member": 2, "parameters": {"i": 2},
                                            "reasons": ["input data/2.dat changed"]}]
    assert nodes["prep"]["run"] == 0


def test_the_command_changed_is_named(edits):
    workflow(edits, sim="sim again {{ i }}")
    assert reasons(edits, "sim", 0) == ["command (run:) changed"]
    assert reasons(edits, "total", 0) == ["upstream sim[0], sim[1], sim[2] (+1 more) changed"]


def test_an_env_value_changed_names_the_variable(edits):
    workflow(edits, FOO="2")
    assert reasons(edits, "prep", 3) == ["environment changed (env: FOO)"]


def test_a_property_changed_is_named(edits):
    workflow(edits, P="2")
    assert reasons(edits, "prep", 0) == ["property P changed"]


def test_the_host_changed_is_named(edits):
    workflow(edits, host="other")
    assert reasons(edits, "prep", 0) == ["host changed"]
    assert reasons(edits, "sim", 0) == ["upstream prep[0] changed"]


def test_a_new_parameter_value_is_new_with_its_values(edits):
    workflow(edits, meshes="coarse, fine", n=5)
    plan = plan_of(edits)
    why = Why(plan, str(edits), lenders(edits))
    fine = [i for i in range(plan.nodes["mesh"].size) if plan.nodes["mesh"].space.values_of(i)["mesh"] == "fine"]
    for i in fine:
        assert [r["text"] for r in why.member("mesh", i)["reasons"]] == [
            "new: no earlier run had a member with these values (mesh=fine)"]
    assert [r["text"] for r in why.member("prep", 4)["reasons"]] == [
        "new: no earlier run had a member with these values (i=4)"]
    nodes = explained(edits)
    assert {"reason": "new: no earlier run had a member with these values (mesh=fine)", "count": 2,
            "members": [[2, 4]]} in nodes["mesh"]["changes"]
    assert nodes["sim"]["changes"] == [{"reason": "upstream prep[4] changed", "count": 1, "members": [[4, 5]]}]


def _as_version_1(run_dir: Path) -> None:
    """Write the run's end record the way pwe wrote it before parts: version 1, no
    ``np``/``failed``, no reusable.parts; signed with the run's secret."""
    body = json.loads((run_dir / reusable.RECORD).read_text())
    body.pop("mac")
    body.pop("parts_sha256")
    body["v"] = 1
    for n in body["nodes"].values():
        n.pop("np", None)
        n.pop("failed", None)
    body["nodes"] = {k: n for k, n in body["nodes"].items() if n["runs"]}
    (run_dir / reusable.RECORD).write_text(json.dumps(notify.sign(run_dir, body)))
    (run_dir / reusable.PARTS).unlink()


def test_a_record_of_an_older_pwe_still_lends_and_says_unknown(edits):
    shutil.rmtree(edits / "old", ignore_errors=True)
    shutil.copytree(edits / "runs", edits / "old")
    _as_version_1(edits / "old" / "r1")
    nodes = explained(edits, "old")
    assert {k: n["reused"] for k, n in nodes.items()} == {"prep": 4, "sim": 4, "total": 1, "mesh": 1}
    workflow(edits, sim="sim again {{ i }}")
    assert reasons(edits, "sim", 1, "old") == [OLDER]
    assert reasons(edits, "prep", 1, "old") == []  # (still reused)
    # its signature is still checked
    body = json.loads((edits / "old" / "r1" / reusable.RECORD).read_text())
    body["nodes"]["prep"]["runs"] = [[0, 3]]
    (edits / "old" / "r1" / reusable.RECORD).write_text(json.dumps(body))
    assert "does not match its signature" in reusable.read(edits / "old" / "r1", "why")


def test_a_lending_file_of_an_older_pwe_still_lends_and_says_unknown(edits):
    """lending.jsonl (a run killed before its end) as version 1 wrote it: no ``p``, no ``np``."""
    shutil.rmtree(edits / "oldl", ignore_errors=True)
    shutil.copytree(edits / "runs", edits / "oldl")
    run_dir = edits / "oldl" / "r1"
    lender = reusable.read(run_dir, "why")
    head = {"kind": "pwe-lending", "v": 1, "workflow": "why", "run": lender.run, "workspace": str(edits), "t": 1.0}
    node = lender.nodes["prep"]
    keys = lender.keys[node["at"] * 16:(node["at"] + 4) * 16]
    line = {"t": 2.0, "nodes": {"prep": {"r": node["runs"], "k": base64.b64encode(keys).decode()}}}
    (run_dir / "lending.jsonl").write_text("".join(json.dumps(notify.sign(run_dir, m)) + "\n" for m in (head, line)))
    (run_dir / reusable.RECORD).unlink()
    assert explained(edits, "oldl")["prep"]["reused"] == 4
    workflow(edits, FOO="2")
    assert reasons(edits, "prep", 0, "oldl") == [OLDER]


@pytest.mark.parametrize("how", ["parts", "np", "failed"])
def test_a_record_whose_parts_are_damaged_or_forged_lends_nothing(edits, how):
    shutil.rmtree(edits / "bad", ignore_errors=True)
    shutil.copytree(edits / "runs", edits / "bad")
    run_dir = edits / "bad" / "r1"
    if how == "parts":
        blob = bytearray((run_dir / reusable.PARTS).read_bytes())
        blob[3] ^= 1
        (run_dir / reusable.PARTS).write_bytes(bytes(blob))
    else:
        body = json.loads((run_dir / reusable.RECORD).read_text())
        if how == "np":
            body["nodes"]["prep"]["np"]["run"] = "000000000000"  # (a forged part: blames the command)
        else:
            body["nodes"]["mesh"]["failed"]["runs"] = [[0, 1]]
        (run_dir / reusable.RECORD).write_text(json.dumps(body))
    rc, out, err = run_cli("plan", edits / "wf.yaml", "--workspace", edits, "--reuse-from", edits / "bad",
                           "--explain", "--json", cwd=edits)
    assert rc == 0, err
    doc = json.loads(out)
    assert all(n["reused"] == 0 for n in doc["nodes"])
    note = " ".join(doc["reuse"]["not_lending"])
    assert "do not match its signed record" in note or "does not match its signature" in note


def test_an_input_whose_name_holds_terminal_escapes_is_shown_inert(tmp_path):
    (tmp_path / "data").mkdir()
    odd = "data/\x1b[31mred\x07.h5"
    (tmp_path / odd).write_text("1\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text('name: odd\nnodes:\n  a:\n    inputs: ["data/\\e[31mred\\a.h5"]\n    run: "true"\n')
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "runs" / "r1", cwd=tmp_path)
    assert rc == 0, err
    (tmp_path / odd).write_text("2\n")
    rc, out, err = run_cli("plan", wf, "--reuse-from", tmp_path / "runs", "--explain", cwd=tmp_path)
    assert rc == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "red" in out and ".h5 changed: members 0" in out
    rc, out, err = run_cli("plan", wf, "--reuse-from", tmp_path / "runs", "--explain", "--json", cwd=tmp_path)
    assert json.loads(out)["nodes"][0]["changes"][0]["reason"] == f"input {odd} changed"


# -- the invariant: one change at a time, and the reason named is that change ------------------

_VALUE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e, blacklist_characters='"\\{}%#'),
                 min_size=1, max_size=8)
CHANGES = st.one_of(
    st.tuples(st.just("input"), st.integers(0, 4)),
    st.tuples(st.just("member input"), st.integers(0, 3)),
    st.tuples(st.just("env"), _VALUE.filter(lambda v: v != BASE["FOO"])),
    st.tuples(st.just("property"), _VALUE.filter(lambda v: v != BASE["P"])),
    st.tuples(st.just("command"), _VALUE),
    st.tuples(st.just("mesh"), st.sampled_from(["fine", "medium", "x1"])),
    st.tuples(st.just("host"), st.just("other")),
)


FAILED = {("mesh", 1): ["earlier run's member did not finish (failed)"]}


def _apply(where: Path, change: tuple) -> dict[tuple[str, int], list[str]]:
    """Make one change; what each member it makes run must say (every other: reused; but
    mesh[1], which failed, :data:`FAILED`)."""
    kind, v = change
    workflow(where)
    if kind == "input":
        (where / "data" / "mesh.h5").write_text(f"mesh {v + 2}\n")
        return {**{("prep", i): ["input data/mesh.h5 changed"] for i in range(4)},
                **{("sim", i): [f"upstream prep[{i}] changed"] for i in range(4)},
                ("total", 0): ["upstream sim[0], sim[1], sim[2] (+1 more) changed"]}
    if kind == "member input":
        (where / "data" / f"{v}.dat").write_text("edited\n")
        return {("sim", v): [f"input data/{v}.dat changed"],
                ("total", 0): [f"upstream sim[{v}] changed"]}
    if kind in ("env", "property", "command", "host"):
        workflow(where, **{"env": {"FOO": v}, "property": {"P": v}, "command": {"sim": f"sim {{{{ i }}}} {v}"},
                           "host": {"host": v}}[kind])
        if kind == "command":
            return {**{("sim", i): ["command (run:) changed"] for i in range(4)},
                    ("total", 0): ["upstream sim[0], sim[1], sim[2] (+1 more) changed"]}
        said = {"env": "environment changed (env: FOO)", "property": "property P changed", "host": "host changed"}[kind]
        return {**{("prep", i): [said] for i in range(4)},
                **{("sim", i): [f"upstream prep[{i}] changed"] for i in range(4)},
                ("total", 0): ["upstream sim[0], sim[1], sim[2] (+1 more) changed"]}
    workflow(where, meshes=f"coarse, {v}")
    return {**{("mesh", i): [f"new: no earlier run had a member with these values (mesh={v})"] for i in (2, 3)}}


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=CHANGES)
def test_the_reason_named_is_the_change_made(edits, change):
    try:
        expected = _apply(edits, change)
        plan = plan_of(edits)
        why = Why(plan, str(edits), lenders(edits))
        for nid, pn in plan.nodes.items():
            for i in range(pn.size):
                got = [r["text"] for r in why.member(nid, i)["reasons"]]
                assert got == {**FAILED, **expected}.get((nid, i), []), (change, nid, i, got)
    finally:
        workflow(edits)
        inputs(edits)
