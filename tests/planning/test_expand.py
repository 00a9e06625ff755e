"""Pure tier: expansion, member matching, templates, the DAG."""

import itertools
import json
import subprocess

import pytest

from pwe.planning.params import ListValues, ParameterSpace, RangeValues
from pwe.planning.plan import plan_workflow
from helpers import EXAMPLES, run_cli


def test_product_order_is_last_fastest_like_itertools():
    space = ParameterSpace({"a": ListValues([1, 2, 3]), "b": RangeValues(0, 4), "c": ListValues(["x", "y"])})
    expected = list(itertools.product([1, 2, 3], range(4), ["x", "y"]))
    assert space.size == 24
    for i, combo in enumerate(expected):
        assert tuple(space.values_of(i).values()) == combo
        assert space.index_of(space.positions_of(i)) == i


def test_zip_pairs_by_position():
    space = ParameterSpace({"a": ListValues([1, 2, 3]), "b": ListValues(["x", "y", "z"])}, "zip")
    assert space.size == 3
    assert [space.values_of(i) for i in range(3)] == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": "z"}]
    assert list(space.matching({"b": "y"})) == [1]
    assert list(space.matching({"a": "3", "b": "y"})) == []


def test_float_range_values_read_cleanly():
    r = RangeValues(0, 1, 0.1)
    assert len(r) == 10
    assert [str(v) for v in r][:4] == ["0.0", "0.1", "0.2", "0.3"]
    assert r.positions("0.3") == (3,)
    assert r.positions("0.35") == ()


def test_million_member_space_is_arithmetic():
    space = ParameterSpace({"i": RangeValues(0, 1000), "j": RangeValues(0, 1000)})
    assert space.size == 1_000_000
    assert space.values_of(999_999) == {"i": 999, "j": 999}
    assert list(space.matching({"i": "7", "j": "8"})) == [7008]
    assert space.count_matching({"i": "7"}) == 1000


def _brute_upstream(plan, edge, b):
    """The matching rule, by brute force: every member of A compared with member b."""
    A, B = plan.nodes[edge.src].space, plan.nodes[edge.dst].space
    vb = B.values_of(b)
    return sorted(
        a for a in range(A.size)
        if all(str(A.values_of(a)[n]) == str(vb[n]) for n in edge.shared)
    )


MATCH_WF = """
name: m
nodes:
  a:
    parameters: {x: [1, 2, 3], y: [p, q]}
    run: echo {{ x }} {{ y }}
  b:
    after: [a]
    parameters: {y: [q, p], z: {range: [0, 3]}}
    run: echo {{ y }} {{ z }}
  c:
    after: [b]
    parameters: {z: [0, 1, 2], y: [p, q, p]}
    combine: zip
    run: echo {{ z }}
  d:
    after: [a, c]
    run: echo done
"""


def test_matching_agrees_with_brute_force_both_ways(write):
    plan = plan_workflow(write(MATCH_WF))
    checked = 0
    for edge in plan.edges:
        A, B = plan.nodes[edge.src].space, plan.nodes[edge.dst].space
        down = {a: [] for a in range(A.size)}
        for b in range(B.size):
            up = sorted(plan.upstream(edge, b))
            assert up == _brute_upstream(plan, edge, b), (edge, b)
            assert plan.count_upstream(edge, b) == len(up)
            for a in up:
                down[a].append(b)
            checked += 1
        for a in range(A.size):
            assert sorted(plan.downstream(edge, a)) == down[a]
    assert checked > 10
    kinds = {(e.src, e.dst): e.describe() for e in plan.edges}
    assert kinds == {("a", "b"): "matched on y", ("b", "c"): "matched on z, y", ("a", "d"): "barrier",
                     ("c", "d"): "barrier"}


def test_values_match_by_text_across_sources(write, tmp_path):
    (tmp_path / "t.csv").write_text("T,label\n300,a\n350,b\n")
    wf = write("""
name: t
nodes:
  a: {parameters: {T: [300, 350]}, run: 'echo {{ T }}'}
  b: {after: [a], parameters: {T: {file: t.csv}}, run: 'echo {{ T }}'}
""")
    plan = plan_workflow(wf)
    edge = plan.edges[0]
    assert [list(plan.upstream(edge, i)) for i in range(2)] == [[0], [1]]


def test_jsonl_parameter_values_keep_types(write, tmp_path):
    (tmp_path / "v.jsonl").write_text('{"x": 1.5}\n\n{"x": "a b"}\n')
    plan = plan_workflow(write("name: t\nnodes:\n  a: {parameters: {x: {file: v.jsonl}}, run: 'echo {{ x }}'}\n"))
    assert [plan.nodes["a"].space.values_of(i)["x"] for i in range(2)] == [1.5, "a b"]


def test_wide_graph_counts():
    plan = plan_workflow(EXAMPLES / "wide.yaml")
    assert {n: p.size for n, p in plan.nodes.items()} == {
        "start": 1, "prep": 700, "sim": 1400, "post": 700, "reduce": 2, "final": 1}
    assert plan.total_members == 2804
    post_edge = [e for e in plan.edges if e.dst == "post"][0]
    assert sorted(plan.upstream(post_edge, 5)) == [10, 11]
    reduce_edge = [e for e in plan.edges if e.dst == "reduce"][0]
    assert reduce_edge.barrier and plan.count_upstream(reduce_edge, 1) == 700


def test_cli_validate_wide_reports_2804():
    status, out, err = run_cli("validate", EXAMPLES / "wide.yaml")
    assert status == 0, err
    assert "2,804 members" in out
    assert "sim -> post" in out and "matched on i" in out and "barrier" in out
    status, out, _ = run_cli("validate", "--json", EXAMPLES / "wide.yaml")
    data = json.loads(out)
    assert data["total_members"] == 2804
    assert data["critical_path"] == ["start", "prep", "sim", "post", "reduce", "final"]


@pytest.mark.parametrize("value", [
    "a b", "it's", 'say "hi"', "x; touch pwned", "$(touch pwned)", "`touch pwned`", "*", "$HOME", "a\nb", "",
])
def test_template_values_reach_the_program_as_one_literal_argument(write, tmp_path, value):
    wf = write(f"name: q\nnodes:\n  a:\n    parameters: {{v: [{json.dumps(value)}]}}\n"
               "    run: printf '%s\\n' {{ v }} | wc -l; printf '[%s]' {{ v }}\n")
    cmd = plan_workflow(wf).render("a", 0)
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path).stdout
    lines, _, arg = out.partition("\n")
    assert lines.strip() == str(1 + value.count("\n")) or value == "a\nb"
    assert arg == f"[{value}]"
    assert not (tmp_path / "pwned").exists()


def test_raw_filter_opts_out_of_quoting(write):
    wf = write("name: q\nproperties: {flags: '-v -x'}\nnodes:\n  a: {run: 'prog {{ flags | raw }} {{ flags }}'}\n")
    assert plan_workflow(wf).render("a", 0) == "prog -v -x '-v -x'"


def test_set_overrides_a_property(write):
    wf = write("name: q\nproperties: {n: 1}\nnodes:\n  a: {run: 'echo {{ n }} {{ extra }}'}\n")
    status, out, err = run_cli("plan", wf, "--set", "n=5", "--set", "extra=a b")
    assert status == 0, err
    assert "echo 5 'a b'" in out


def test_parameter_shadows_property(write):
    wf = write("name: q\nproperties: {x: 1}\nnodes:\n  a: {parameters: {x: [7]}, run: 'echo {{ x }}'}\n")
    assert plan_workflow(wf).render("a", 0) == "echo 7"


def test_scheduling_defaults_merge_field_by_field(write):
    wf = write("""
name: s
defaults: {retries: 2, scheduling: {account: abc, maxWallTime: 60, threadsPerRank: 2}}
nodes:
  a: {run: 'true', retries: 0, scheduling: {maxWallTime: 10, ranksPerMember: 4}}
""")
    node = plan_workflow(wf).nodes["a"]
    assert node.scheduling.account == "abc" and node.scheduling.maxWallTime == 10
    assert node.scheduling.cores_per_member() == 8
    assert node.retries == 0


def test_critical_path_weighted_by_walltime(write):
    wf = write("""
name: c
nodes:
  a: {run: 'true', scheduling: {maxWallTimePerMember: 1}}
  slow: {after: [a], run: 'true', scheduling: {maxWallTimePerMember: 50}}
  fast1: {after: [a], run: 'true', scheduling: {maxWallTimePerMember: 2}}
  fast2: {after: [fast1], run: 'true', scheduling: {maxWallTimePerMember: 2}}
  z: {after: [slow, fast2], run: 'true', scheduling: {maxWallTimePerMember: 1}}
""")
    assert plan_workflow(wf).critical_path() == (["a", "slow", "z"], 52)


def test_plan_json_shows_rendered_commands():
    status, out, err = run_cli("plan", "--json", EXAMPLES / "quickstart.yaml")
    assert status == 0, err
    data = json.loads(out)
    sim = [n for n in data["nodes"] if n["id"] == "simulate"][0]
    assert sim["members"] == 12
    assert sim["members_shown"][0]["parameters"] == {"temperature": 300, "seed": 0}
    assert "energy=$(( 300 * 3 + 0 ))" in sim["members_shown"][0]["command"]


def test_unmatched_values_are_warned(write):
    wf = write("""
name: w
nodes:
  a: {parameters: {s: {range: [0, 10]}}, run: 'true'}
  b: {after: [a], parameters: {s: {range: [0, 20]}}, run: 'true'}
""")
    status, _, err = run_cli("validate", wf)
    assert status == 0
    assert "s=19 match no member of 'a'" in err


def test_json_schema_has_not_drifted():
    from pwe.workflow import schema

    assert schema.SCHEMA_FILE.read_text() == schema.generate(), "run: python -m pwe.workflow.schema"
