"""Results checked, as written (issue 49 item 4): ``products:`` items that say ``nonEmpty`` or
``minBytes``, and a node's ``validate``, in YAML and XML alike; every bad value one line
naming the file and line, exit 2, at ``pwe validate``; and the pilot's own check of a
product (never opened: stat only)."""

from __future__ import annotations

import os
import socket
import textwrap

import pytest

from helpers import one_line_error, run_cli

from pilot.members import product_fault
from pwe.planning.plan import plan_workflow
from pwe.workflow.load import load_workflow

YAML = """\
name: checked
properties: {tag: "a b; $(id)"}
nodes:
  sim:
    parameters: {seed: [1, 2]}
    products: ["log/{{ seed }}", {path: "out/{{ seed }}.h5", nonEmpty: true}, {path: "big/{{ seed }}", minBytes: 1024}]
    run: ./sim {{ seed }}
    validate: ./check out/{{ seed }}.h5 {{ tag }}
    retry: {attempts: 2, on: [invalid, oom]}
"""

XML = """\
<workflow name="checked">
  <properties><property name="tag">a b; $(id)</property></properties>
  <node id="sim">
    <parameter name="seed"><value>1</value><value>2</value></parameter>
    <product>log/{{ seed }}</product>
    <product nonEmpty="true">out/{{ seed }}.h5</product>
    <product minBytes="1024">big/{{ seed }}</product>
    <run>./sim {{ seed }}</run>
    <validate>./check out/{{ seed }}.h5 {{ tag }}</validate>
    <retry attempts="2" on="invalid oom"/>
  </node>
</workflow>
"""


def test_xml_and_yaml_give_the_same_plan(tmp_path):
    (tmp_path / "w.yaml").write_text(YAML)
    (tmp_path / "w.xml").write_text(XML)
    y, _ = load_workflow(tmp_path / "w.yaml")
    x, _ = load_workflow(tmp_path / "w.xml")
    assert x == y
    yp, xp = plan_workflow(tmp_path / "w.yaml"), plan_workflow(tmp_path / "w.xml")
    for plan in (yp, xp):
        sim = plan.nodes["sim"]
        assert [t.source for t in sim.products] == ["log/{{ seed }}", "out/{{ seed }}.h5", "big/{{ seed }}"]
        assert sim.products_least == [0, 1, 1024]
    for i in (0, 1):
        assert xp.command("sim", i) == yp.command("sim", i)
    # the validate rendered as run is: a value shell-quoted, after the payload, before the end
    cmd = yp.command("sim", 1)
    assert cmd.index("./sim 2") < cmd.index("./check out/2.h5 'a b; $(id)'")


def test_a_node_without_sizes_or_validate_runs_its_payload_as_it_did(tmp_path):
    (tmp_path / "w.yaml").write_text("name: w\nnodes:\n  a:\n    products: ['x', {path: y}]\n    run: ./go\n")
    plan = plan_workflow(tmp_path / "w.yaml")
    assert plan.command("a", 0) == "./go" and plan.nodes["a"].products_least == []


@pytest.mark.parametrize("item, said", [
    ("{path: a, nonEmpty: yes}", "nonEmpty': must be true or false"),
    ("{path: a, nonEmpty: 1}", "nonEmpty': must be true or false"),
    ("{path: a, minBytes: -1}", "minBytes': must be at least 0"),
    ("{path: a, minBytes: 1000000000000}", "must be at most 100000000000"),
    ("{path: a, minBytes: ten}", "minBytes': must be a whole number"),
    ("{path: a, minBytes: 1.5}", "minBytes': must be a whole number"),
    ("{path: a, minBytes: .nan}", "minBytes': must be a whole number"),
    ("{path: a, minByte: 3}", "did you mean 'minBytes'"),
    ("{nonEmpty: true}", "path': missing"),
    ("{path: '', nonEmpty: true}", "path'"),
    ("{path: /etc/passwd, nonEmpty: true}", "not a path inside the workspace"),
    ("{path: ../out, minBytes: 3}", "not a path inside the workspace"),
    ("3", "a product is a path template or {path: TEMPLATE, nonEmpty: true, minBytes: N}"),
])
def test_a_bad_product_is_one_line_at_validate(tmp_path, write, item, said):
    wf = write(f"name: bad\nnodes:\n  a:\n    run: 'true'\n    products:\n      - {item}\n")
    err = one_line_error(*run_cli("validate", wf, cwd=tmp_path))
    assert err.startswith(f"{wf}:") and said in err, err
    assert err.startswith((f"{wf}:5:", f"{wf}:6:")), err


@pytest.mark.parametrize("node, line, said", [
    ("    validate: ''\n", 4, "the validate is blank"),
    ("    validate: '   '\n", 4, "the validate is blank"),
    ("    validate: |\n\n\n", 4, "the validate is blank"),
    ("    validate: 3\n", 4, "'nodes.a.validate': must be text"),
    ("    validate: ./check {{ nosuch }}\n", 4, "'validate' uses undefined name 'nosuch'"),
    ("    validate: ./check {{ x\n", 4, "template error in 'validate'"),
    ("    parameters: {s: [1, 2]}\n    validate: '{% if s > 1 %}true{% endif %}'\n", 5,
     "member 0's 'validate' renders to blank text"),
    ("    scheduling: {ranksPerMember: 2}\n    validate: ./check\n", 5, "once per rank"),
])
def test_a_bad_validate_is_one_line_at_validate_and_nothing_runs(tmp_path, write, node, line, said):
    ran = tmp_path / "ran"
    wf = write(f"name: bad\nnodes:\n  a:\n{node}    run: touch {ran}\n")
    err = one_line_error(*run_cli("validate", wf, cwd=tmp_path))
    assert err.startswith(f"{wf}:{line}:") and said in err, err
    err = one_line_error(*run_cli("run", wf, cwd=tmp_path))
    assert said in err and not ran.exists(), err


@pytest.mark.parametrize("xml, said", [
    ('<product minBytes="-1">a</product>', "minBytes"),
    ('<product minBytes="ten">a</product>', "minBytes"),
    ('<product nonEmpty="yes">a</product>', "nonEmpty"),
    ('<product minBytes="1000000000000">a</product>', "must be at most 100000000000"),
    ("<validate>   </validate>", "the validate is blank"),
])
def test_a_bad_product_or_validate_in_xml_is_one_line(tmp_path, write, xml, said):
    wf = write(textwrap.dedent(f"""\
        <workflow name="bad">
          <node id="a">
            {xml.replace("<validate>", "<run>true</run><validate>") if "validate" in xml else xml + "<run>true</run>"}
          </node>
        </workflow>
        """), "w.xml")
    err = one_line_error(*run_cli("validate", wf, cwd=tmp_path))
    assert err.startswith(f"{wf}:3:") and said in err, err


def test_the_pilot_stats_a_product_and_never_opens_it(tmp_path):
    """What the pilot checks once a member exits 0: a sized product must be a regular file
    with that many bytes; a FIFO, a socket, a directory or a dangling link is not one (stat
    only: a FIFO opened for reading would block)."""
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        assert product_fault([str(f)], [3]) is None
        assert product_fault([str(f)]) is None and product_fault([str(f)], [0]) is None
        assert product_fault([str(f)], [4]) == f"exited 0, but its product {f} has 3 bytes, fewer than the 4 it must have"
        (tmp_path / "e").touch()
        assert product_fault([str(tmp_path / "e")], [1]) == \
            f"exited 0, but its product {tmp_path / 'e'} is empty (0 bytes; nonEmpty)"
        for name in ("fifo", "dir", "sock"):
            assert "is not a regular file" in product_fault([str(tmp_path / name)], [1]), name
        assert product_fault([str(tmp_path / "dangling")], [1]) == \
            f"exited 0 without making its product {tmp_path / 'dangling'}"
        assert product_fault([str(tmp_path / "dangling")]) is None  # (a link exists: existence is all it asks)
        assert product_fault([str(f), str(tmp_path / "none")], [0, 0]) == \
            f"exited 0 without making its product {tmp_path / 'none'}"
    finally:
        sock.close()
