"""The XML form: same workflow as the YAML form, and one clear line for every bad input."""

from __future__ import annotations

import textwrap

import pytest

from pwe.workflow import model
from pwe.base.errors import InputError, WorkflowSchemaError, WorkflowSyntaxError
from pwe.workflow.load import load_workflow
from pwe.planning.plan import plan_workflow
from pwe.workflow.xml_convert import schema
from pwe.workflow.xml_reader import read_xml

from helpers import EXAMPLES


def _plain(tree):
    """A raw tree as plain dicts and lists, so that YAML and XML trees compare by value."""
    if isinstance(tree, dict):
        return {k: _plain(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_plain(v) for v in tree]
    return tree


# --- the same workflow in both forms ----------------------------------------------------


@pytest.mark.parametrize("name", ["wide", "quickstart"])
def test_examples_xml_equal_yaml(name):
    yaml_wf, yaml_raw = load_workflow(EXAMPLES / f"{name}.yaml")
    xml_wf, xml_raw = load_workflow(EXAMPLES / f"{name}.xml")
    assert xml_wf == yaml_wf
    assert _plain(xml_raw) == _plain(yaml_raw)


def test_wide_has_2804_members():
    plan = plan_workflow(EXAMPLES / "wide.xml")
    assert plan.total_members == 1 + 700 + 1400 + 700 + 2 + 1


FULL_YAML = """\
name: full-demo
workspace: ws
description: Every element of the XML form.
properties:
  nsteps: 1000
  label: "007"
  plain: 007
  ratio: 0.5
  verbose: true
defaults:
  host: local
  retries: 1
  scheduling:
    account: abc123
    maxWallTime: 60
    queue: normal
inputs: [data/*.csv, "**/*.msh", params.json]
nodes:
  prepare:
    description: make the inputs
    run: ./prepare --steps {{ nsteps }}
  simulate:
    after: [prepare]
    combine: zip
    retries: 2
    host: local
    parameters:
      temperature: {range: [300, 400, 50]}
      seed: {range: [0.0, 1.0, 0.5]}
    run: ./sim --T {{ temperature }} --seed {{ seed }}
    scheduling: {maxWallTime: 30, minWallTime: 2.5}
  fromfile:
    after: [prepare]
    parameters:
      sample: {file: values.csv, column: name}
      size: {file: values.csv}
    products: ["out/{{ sample }}.txt", "log/{{ size }}/done"]
    run: echo {{ sample }} {{ size }}
  analyze:
    after: [simulate, fromfile]
    parameters:
      code: ["007", 7, true, 1.5, x y, " padded "]
    env:
      OMP_PLACES: cores
      OMP_NUM: 4
      TAG: "01"
    run: |
      if [ -n "$PWE_PARAM_CODE" ] && [ 1 -lt 2 ]; then
        echo {{ code }} {{ label }} < /dev/null

      fi
    scheduling:
      submissionType: glidein
      ranksPerMember: 2
      threadsPerRank: 4
      maxWallTimePerMember: 1.5
      shareNodes: false
      maxTotalMemory: 4096
      nodeAttributes: gpu&ib
      priority: -5
      gpusPerMember: 0
      stdout: out.%j
"""

FULL_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- every element of the XML form -->
<workflow name="full-demo" workspace="ws">
  <description>
    Every element of the XML form.
  </description>
  <properties>
    <property name="nsteps">1000</property>
    <property name="label" type="string">007</property>
    <property name="plain">007</property>
    <property name="ratio">0.5</property>
    <property name="verbose">true</property>
  </properties>
  <defaults host="local" retries="1">
    <scheduling>
      <maxWallTime>60</maxWallTime>
      <account>abc123</account>
      <queue> normal </queue>
    </scheduling>
  </defaults>
  <inputs>
    <input>data/*.csv</input>
    <input> **/*.msh </input>
    <input>params.json</input>
  </inputs>
  <node id="prepare">
    <description>make the inputs</description>
    <run>./prepare --steps {{ nsteps }}</run>
  </node>
  <node id="simulate" combine="zip" retries="2" host="local">
    <after>prepare</after>
    <parameter name="temperature"><range start="300" stop="400" step="50"/></parameter>
    <parameter name="seed"><range start="0.0" stop="1.0" step="0.5"/></parameter>
    <run>./sim --T {{ temperature }} --seed {{ seed }}</run>
    <scheduling><maxWallTime>30</maxWallTime><minWallTime>2.5</minWallTime></scheduling>
  </node>
  <node id="fromfile">
    <after>prepare</after>
    <parameter name="sample"><file path="values.csv" column="name"/></parameter>
    <parameter name="size"><file path="values.csv"/></parameter>
    <product>out/{{ sample }}.txt</product>
    <product> log/{{ size }}/done </product>
    <run>echo {{ sample }} {{ size }}</run>
  </node>
  <node id="analyze">
    <after>simulate</after>
    <after>fromfile</after>
    <parameter name="code">
      <value type="string">007</value>
      <value>7</value>
      <value>true</value>
      <value>1.5</value>
      <value>x y</value>
      <value type="string"> padded </value>
    </parameter>
    <env name="OMP_PLACES">cores</env>
    <env name="OMP_NUM">4</env>
    <env name="TAG" type="string">01</env>
    <run><![CDATA[
      if [ -n "$PWE_PARAM_CODE" ] && [ 1 -lt 2 ]; then
        echo {{ code }} {{ label }} < /dev/null

      fi
    ]]></run>
    <scheduling>
      <submissionType>glidein</submissionType>
      <ranksPerMember>2</ranksPerMember>
      <threadsPerRank>4</threadsPerRank>
      <maxWallTimePerMember>1.5</maxWallTimePerMember>
      <shareNodes>false</shareNodes>
      <maxTotalMemory>4096</maxTotalMemory>
      <nodeAttributes>gpu&amp;ib</nodeAttributes>
      <priority>-5</priority>
      <gpusPerMember>0</gpusPerMember>
      <stdout>out.%j</stdout>
    </scheduling>
  </node>
</workflow>
"""


@pytest.fixture
def full_pair(tmp_path):
    (tmp_path / "values.csv").write_text("name,size\nalpha,1\nbeta,2\ngamma,3\n")
    (tmp_path / "full.yaml").write_text(FULL_YAML)
    (tmp_path / "full.xml").write_text(FULL_XML)
    return tmp_path / "full.yaml", tmp_path / "full.xml"


def test_every_element_equals_yaml(full_pair):
    yaml_path, xml_path = full_pair
    yaml_wf, yaml_raw = load_workflow(yaml_path)
    xml_wf, xml_raw = load_workflow(xml_path)
    assert xml_wf == yaml_wf
    assert _plain(xml_raw) == _plain(yaml_raw)
    # the typing rules, spelled out
    props = xml_wf.properties
    assert props == {"nsteps": 1000, "label": "007", "plain": "007", "ratio": 0.5, "verbose": True}
    code = xml_wf.nodes["analyze"].parameters["code"]
    assert code == ["007", 7, True, 1.5, "x y", " padded "]
    analyze = xml_wf.nodes["analyze"]
    assert analyze.env == {"OMP_PLACES": "cores", "OMP_NUM": 4, "TAG": "01"}
    assert analyze.scheduling.shareNodes is False and analyze.scheduling.nodeAttributes == "gpu&ib"
    assert analyze.run == (
        'if [ -n "$PWE_PARAM_CODE" ] && [ 1 -lt 2 ]; then\n  echo {{ code }} {{ label }} < /dev/null\n\nfi\n'
    )
    assert xml_wf.nodes["simulate"].combine == "zip" and xml_wf.nodes["simulate"].retries == 2
    assert xml_wf.nodes["simulate"].parameters["seed"].range == [0.0, 1.0, 0.5]
    assert list(xml_wf.nodes) == ["prepare", "simulate", "fromfile", "analyze"]
    assert xml_wf.inputs == ["data/*.csv", "**/*.msh", "params.json"]  # (an <input>'s spaces around it dropped)


def test_every_element_plans_alike(full_pair):
    yaml_plan, xml_plan = (plan_workflow(p) for p in full_pair)
    assert xml_plan.total_members == yaml_plan.total_members == 1 + 2 + 3 * 3 + 6
    for node in ("simulate", "fromfile", "analyze"):
        for member in range(len(xml_plan.nodes[node].space)):
            assert xml_plan.render(node, member) == yaml_plan.render(node, member)


def test_line_numbers_kept(full_pair):
    _, xml_path = full_pair
    raw = read_xml(xml_path)  # text=None: the reader reads the file itself
    lines = FULL_XML.splitlines()
    simulate = raw["nodes"]["simulate"]
    assert lines[simulate.line - 1].lstrip().startswith('<node id="simulate"')
    assert lines[simulate.key_lines["run"] - 1].lstrip().startswith("<run>./sim")
    after = raw["nodes"]["analyze"]["after"]
    assert [lines[n - 1].strip() for n in after.item_lines] == ["<after>simulate</after>", "<after>fromfile</after>"]


def test_model_error_names_the_xml_line(tmp_path):
    """A rule only the model knows (min > max) still points at the XML line."""
    path = tmp_path / "w.xml"
    path.write_text(
        '<workflow name="w">\n<node id="a">\n<run>x</run>\n<scheduling>\n'
        "<maxWallTime>5</maxWallTime>\n<minWallTime>10</minWallTime>\n</scheduling>\n</node>\n</workflow>\n"
    )
    with pytest.raises(WorkflowSchemaError) as err:
        load_workflow(path)
    assert err.value.line == 4 and "minWallTime (10) is larger than maxWallTime (5)" in err.value.message


def test_xsd_scheduling_matches_model():
    """Every model.Scheduling field is a <scheduling> child, and nothing else is."""
    shapes = schema()[1]
    assert set(shapes["scheduling"].children) == set(model.Scheduling.model_fields)
    # a node's fields: attributes or children; <parameter> spells 'parameters', and 'id' is its key
    node_xml = set(shapes["node"].attrs) | set(shapes["node"].children)
    # (<resource> spells 'resources', <product> 'products', <input> 'inputs': one element each, as <parameter>)
    assert node_xml == (set(model.Node.model_fields) - {"parameters", "resources", "products", "inputs"}
                        | {"parameter", "resource", "product", "input", "id"})
    assert set(shapes["defaults"].attrs) | set(shapes["defaults"].children) == set(model.Defaults.model_fields)
    # the workflow's: <node> spells 'nodes'; <inputs> holds one <input> per pattern
    workflow_xml = set(shapes["workflow"].attrs) | set(shapes["workflow"].children)
    assert workflow_xml == set(model.Workflow.model_fields) - {"nodes"} | {"node"}
    assert shapes["inputs"].children == ("input",)


# --- one clear line for every bad input ---------------------------------------------------

W = '<workflow name="w">\n'  # line 1; a case's own text starts on line 2

MALFORMED = [
    # (id, file text, error class, line, phrase)
    ("unclosed tag", W + '<node id="a">\n<run>x\n</node>\n</workflow>\n', WorkflowSyntaxError, 4,
     "<run> opened on line 3 is not closed"),
    ("end of file", W + '<node id="a">\n<run>x</run>\n', WorkflowSyntaxError, 4, "the file ends before"),
    ("bad entity", W + '<node id="a">\n<run>echo &nbsp;</run>\n</node>\n</workflow>\n', WorkflowSyntaxError, 3,
     "unknown entity '&nbsp;'"),
    ("bare ampersand", W + '<node id="a">\n<run>make && run</run>\n</node>\n</workflow>\n', WorkflowSyntaxError, 3,
     "write '&' as &amp;"),
    ("unknown element", W + '<node id="a">\n<run>x</run>\n<scheduling>\n<acount>abc</acount>\n</scheduling>\n</node>\n</workflow>\n',
     WorkflowSchemaError, 5, "unknown element <acount> in <scheduling> in node 'a' (did you mean 'account'?)"),
    ("unknown attribute", W + '<node id="a" retires="2">\n<run>x</run>\n</node>\n</workflow>\n', WorkflowSchemaError, 2,
     "unknown attribute 'retires' on <node id=\"a\"> (did you mean 'retries'?)"),
    ("missing run", W + '<node id="a">\n<after>b</after>\n</node>\n</workflow>\n', WorkflowSchemaError, 2,
     "<node id=\"a\"> has no <run>"),
    ("two runs", W + '<node id="a">\n<run>x</run>\n<run>y</run>\n</node>\n</workflow>\n', WorkflowSchemaError, 4,
     "<run> given twice in <node id=\"a\"> (first given on line 3)"),
    ("non-integer retries", W + '<node id="a" retries="two">\n<run>x</run>\n</node>\n</workflow>\n', WorkflowSchemaError, 2,
     'retries="two" is not a whole number, 0 or more'),
    ("negative walltime", W + '<node id="a">\n<run>x</run>\n<scheduling>\n<maxWallTime>-5</maxWallTime>\n</scheduling>\n</node>\n</workflow>\n',
     WorkflowSchemaError, 5, "<maxWallTime>-5</maxWallTime> in node 'a' is not a number of minutes greater than 0"),
    ("bad combine", W + '<node id="a" combine="prodcut">\n<run>x</run>\n</node>\n</workflow>\n', WorkflowSchemaError, 2,
     "combine=\"prodcut\" is not one of product, zip (did you mean 'product'?)"),
    ("value and range", W + '<node id="a">\n<parameter name="p">\n<value>1</value>\n<range start="0" stop="2"/>\n</parameter>\n<run>x</run>\n</node>\n</workflow>\n',
     WorkflowSchemaError, 5, "mixes <range> and <value>"),
    ("duplicate node id", W + '<node id="a"><run>x</run></node>\n<node id="b"><run>x</run></node>\n<node id="a"><run>y</run></node>\n</workflow>\n',
     WorkflowSchemaError, 4, "duplicate node id 'a' (first given on line 2)"),
    ("duplicate parameter", W + '<node id="a">\n<parameter name="p"><value>1</value></parameter>\n<parameter name="p"><value>2</value></parameter>\n<run>x</run>\n</node>\n</workflow>\n',
     WorkflowSchemaError, 4, "duplicate parameter 'p' in <node id=\"a\"> (first given on line 3)"),
    ("duplicate property", W + '<properties>\n<property name="n">1</property>\n<property name="n">2</property>\n</properties>\n<node id="a"><run>x</run></node>\n</workflow>\n',
     WorkflowSchemaError, 4, "duplicate property 'n' (first given on line 3)"),
    ("out of order", W + '<node id="a">\n<run>x</run>\n<after>b</after>\n</node>\n</workflow>\n', WorkflowSchemaError, 4,
     "<after> is out of place in <node id=\"a\">"),
    ("empty file", "", WorkflowSchemaError, 1, "the file is empty"),
    ("blank file", "\n  \n", WorkflowSchemaError, 1, "the file is empty"),
    ("not xml", "just some words\n", WorkflowSyntaxError, 1, "not an XML document"),
    ("control character", W + '<node id="a"><run>x\x01</run></node>\n</workflow>\n', WorkflowSyntaxError, 2,
     "control character 0x01"),
    ("root not workflow", '<workflw name="w">\n<node id="a"><run>x</run></node>\n</workflw>\n', WorkflowSchemaError, 1,
     "the root element is <workflw>; an XML workflow's root element is <workflow name=\"...\"> (did you mean 'workflow'?)"),
    ("namespaced root", '<workflow xmlns="http://example.org/wf" name="w">\n<node id="a"><run>x</run></node>\n</workflow>\n',
     WorkflowSchemaError, 1, "pwe workflows use no namespace"),
    ("no nodes", W + "</workflow>\n", WorkflowSchemaError, 1, "the workflow has no <node>"),
    ("missing name", '<workflow>\n<node id="a"><run>x</run></node>\n</workflow>\n', WorkflowSchemaError, 1,
     '<workflow> needs the attribute name="..."'),
    ("bad parameter name", W + '<node id="a">\n<parameter name="1p"><value>1</value></parameter>\n<run>x</run>\n</node>\n</workflow>\n',
     WorkflowSchemaError, 3, 'name="1p" is not a valid name'),
    ("bad boolean", W + '<node id="a"><run>x</run>\n<scheduling><shareNodes>yes</shareNodes></scheduling>\n</node>\n</workflow>\n',
     WorkflowSchemaError, 3, "<shareNodes>yes</shareNodes> in node 'a' is not true or false"),
    ("element in run", W + '<node id="a">\n<run>if [ $a <lt/> 2 ]</run>\n</node>\n</workflow>\n', WorkflowSchemaError, 3,
     "<run> in node 'a' holds text only"),
]


@pytest.mark.parametrize("case, text, error, line, phrase", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed(tmp_path, case, text, error, line, phrase):
    path = tmp_path / "bad.xml"
    path.write_text(text)
    with pytest.raises(error) as err:
        load_workflow(path)
    assert err.value.file == str(path)
    assert err.value.line == line, err.value.message
    assert phrase in err.value.message
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert "{" not in err.value.message.replace("{{", "")  # no lxml namespace noise


def test_binary_junk(tmp_path):
    path = tmp_path / "junk.xml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(WorkflowSyntaxError) as err:
        load_workflow(path)
    assert err.value.file == str(path) and err.value.line == 1 and "not UTF-8" in err.value.message


SECRET = "s3cr3t-c0ntent-that-must-never-leak"


@pytest.mark.parametrize(
    "doctype",
    [
        '<!DOCTYPE workflow [<!ENTITY xxe SYSTEM "file://{secret}">]>',
        '<!DOCTYPE workflow SYSTEM "file://{secret}">',
        '<!DOCTYPE workflow [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>',
    ],
    ids=["external entity", "external dtd", "entity expansion"],
)
def test_doctype_refused(tmp_path, doctype):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    path = tmp_path / "xxe.xml"
    path.write_text(
        '<?xml version="1.0"?>\n<!-- a comment first -->\n'
        + doctype.format(secret=secret)
        + '\n<workflow name="w">\n<node id="a"><run>echo &xxe;</run></node>\n</workflow>\n'
    )
    with pytest.raises(WorkflowSyntaxError) as err:
        load_workflow(path)
    assert err.value.file == str(path) and err.value.line == 3
    assert "<!DOCTYPE> is not allowed" in err.value.message
    assert SECRET not in str(err.value)


def test_doctype_refused_even_past_the_prolog_check(tmp_path, monkeypatch):
    """The check after parsing catches a DOCTYPE the prolog pattern missed; nothing is read."""
    import pwe.workflow.xml_reader

    monkeypatch.setattr(pwe.workflow.xml_reader, "_DOCTYPE_RE", __import__("re").compile("(?!)"))
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    path = tmp_path / "xxe.xml"
    path.write_text(
        f'<!DOCTYPE workflow [<!ENTITY xxe SYSTEM "file://{secret}">]>\n'
        '<workflow name="w"><node id="a"><run>echo &xxe;</run></node></workflow>\n'
    )
    with pytest.raises(WorkflowSyntaxError) as err:
        load_workflow(path)
    assert err.value.line == 1 and "<!DOCTYPE> is not allowed" in err.value.message
    assert SECRET not in str(err.value)


def test_every_input_error_is_one_line(tmp_path):
    for case, text, *_ in MALFORMED:
        path = tmp_path / "bad.xml"
        path.write_text(text)
        with pytest.raises(InputError) as err:
            load_workflow(path)
        assert "\n" not in str(err.value), case


def test_multiline_run_keeps_its_lines(tmp_path):
    path = tmp_path / "w.xml"
    path.write_text(textwrap.dedent("""\
        <workflow name="w">
          <node id="a">
            <run>
              for i in 1 2; do
                echo $i &gt; out.$i

              done
            </run>
          </node>
        </workflow>
        """))
    wf, _ = load_workflow(path)
    assert wf.nodes["a"].run == "for i in 1 2; do\n  echo $i > out.$i\n\ndone\n"


def test_straggler_in_both_forms(tmp_path):
    """``straggler:`` of a node and of the defaults (issue 48): the XML form's <straggler>
    element is the YAML form's mapping."""
    (tmp_path / "s.yaml").write_text(
        "name: strag\ndefaults: {straggler: {factor: 2.5}}\nnodes:\n  a:\n    straggler: {factor: 3, after: 5}\n"
        "    retry: {attempts: 2, on: [straggler]}\n    run: 'true'\n  b:\n    run: 'true'\n")
    (tmp_path / "s.xml").write_text(textwrap.dedent("""\
        <workflow name="strag">
          <defaults><straggler factor="2.5"/></defaults>
          <node id="a"><run>true</run><retry attempts="2" on="straggler"/><straggler factor="3" after="5"/></node>
          <node id="b"><run>true</run></node>
        </workflow>
        """))
    y, _ = load_workflow(tmp_path / "s.yaml")
    x, _ = load_workflow(tmp_path / "s.xml")
    assert x == y
    plan = plan_workflow(tmp_path / "s.xml")
    assert (plan.nodes["a"].straggler.factor, plan.nodes["a"].straggler.after) == (3, 5)
    assert (plan.nodes["b"].straggler.factor, plan.nodes["b"].straggler.after) == (2.5, 20)
