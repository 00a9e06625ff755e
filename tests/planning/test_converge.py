"""Iteration until convergence (pwe/planning/trees.py): a checked node's members grow trees, end to end.

Every run here is real: the engine and its pilot are processes, the members and their
checks are shell commands, the engine is killed with SIGKILL. The trees are compared with
the same rule worked out in Python, and the members' own ledger (a line as each starts and
ends) proves what ran, how often, and in which order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import ROOT, let_time_pass, read_journal, wait_for

ENV = dict(os.environ, PYTHONPATH=str(ROOT))

#: Bisection for the root of x*x - f on [lo, hi], two children per member (the halves),
#: a member whose interval holds no root or is narrower than eps converged. Each member
#: and each report writes its ledger lines.
BISECT = """
name: bisect
properties: {{ledger: {ledger}, eps: {eps}}}
nodes:
  bisect:
    parameters:
      f: [2, 3]
      lo: [0.0]
      hi: [2.0]
    max_iterations: {max_iterations}
    run: |
      echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT $PWE_ITERATION ${{PWE_PARENT:--}}" >> {{{{ ledger }}}}
      sleep {sleep}
      echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}
{check}  report:
    after: [bisect]
    parameters:
      f: [2, 3]
    run: echo "start report $PWE_MEMBER 1" >> {{{{ ledger }}}}; echo "end report $PWE_MEMBER 1" >> {{{{ ledger }}}}
"""

CHECK = """    check: |
      awk -v f={{ f }} -v lo={{ lo }} -v hi={{ hi }} -v eps={{ eps }} 'BEGIN {
        if ((lo * lo - f) * (hi * hi - f) > 0 || hi - lo < eps) { print "converged=true"; exit }
        mid = (lo + hi) / 2
        printf "next.1.hi=%.17g\\nnext.2.lo=%.17g\\n", mid, mid }' >> "$PWE_OUTPUTS"
"""


def bisect_rule(f: float, lo: float, hi: float, eps: float) -> list[dict] | None:
    """The check's rule in Python: None (converged) or the two halves."""
    if (lo * lo - f) * (hi * hi - f) > 0 or hi - lo < eps:
        return None
    mid = (lo + hi) / 2
    return [{"hi": mid}, {"lo": mid}]


def expected_trees(eps: float, max_iterations: int) -> dict[int, list[tuple]]:
    """Per f, every member of its tree as (lo, hi, iteration), by the rule above."""
    out = {}
    for f in (2, 3):
        todo, seen = [(0.0, 2.0, 1)], []
        while todo:
            lo, hi, depth = todo.pop(0)
            seen.append((lo, hi, depth))
            kids = bisect_rule(f, lo, hi, eps)
            if kids and depth < max_iterations:
                todo += [({"lo": lo, "hi": hi, **k}["lo"], {"lo": lo, "hi": hi, **k}["hi"], depth + 1) for k in kids]
        out[f] = sorted(seen)
    return out


def write_wf(tmp_path: Path, eps=0.3, max_iterations=10, sleep=0.0, check=CHECK) -> tuple[Path, Path]:
    ledger = tmp_path / "ledger"
    wf = tmp_path / "bisect.yaml"
    wf.write_text(BISECT.format(ledger=ledger, eps=eps, max_iterations=max_iterations, sleep=sleep, check=check))
    return wf, ledger


def pwe(*args, cwd, check=None, env=ENV, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def members_of(run_dir: Path, cwd: Path) -> list[dict]:
    return json.loads(pwe("show", run_dir, "--json", "--limit", "0", cwd=cwd, check=0).stdout)


def grown_trees(members: list[dict]) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for m in members:
        if m["node"] == "bisect":
            p = m["parameters"]
            out.setdefault(p["f"], []).append((p["lo"], p["hi"], m["iteration"]))
    return {f: sorted(v) for f, v in out.items()}


def check_ledger_once(ledger: Path, members: list[dict]) -> list[list[str]]:
    """Every member started and ended exactly once; the ledger's lines."""
    from collections import Counter

    lines = [line.split() for line in ledger.read_text().splitlines()]
    starts, ends = (Counter(tuple(w[1:3]) for w in lines if w[0] == what) for what in ("start", "end"))
    want = {(m["node"], str(m["member"])) for m in members}
    assert set(ends) == want and set(starts) == want
    assert all(c == 1 for c in starts.values()), [k for k, c in starts.items() if c > 1]
    assert all(c == 1 for c in ends.values()), [k for k, c in ends.items() if c > 1]
    return lines


def test_trees_grow_until_the_check_says_converged_and_dependents_wait_for_their_tree(tmp_path):
    wf, ledger = write_wf(tmp_path)
    run_dir = tmp_path / "run"
    proc = pwe("run", wf, "--cores", "3", "--run-dir", run_dir, cwd=tmp_path, check=0)
    members = members_of(run_dir, tmp_path)
    assert grown_trees(members) == expected_trees(0.3, 10)
    n = len(members)
    assert f"{n} done of {n}" in proc.stdout and n > 10  # (the trees grew: 2 roots + 2 reports alone are 4)
    lines = check_ledger_once(ledger, members)
    # each member's parent, from pwe show, is the one its ledger line says (PWE_PARENT)
    by_index = {m["member"]: m for m in members if m["node"] == "bisect"}
    for words in lines:
        if words[0] == "start" and words[1] == "bisect":
            m = by_index[int(words[2])]
            assert words[4] == str(m["iteration"]) and words[5] == ("-" if m["parent"] is None else str(m["parent"]))
            if m["parent"] is not None:
                assert by_index[m["parent"]]["iteration"] == m["iteration"] - 1
                assert by_index[m["parent"]]["verdict"] == "grew"
    # report[k] (f) started only after every member of f's tree ended
    position = {(w[0], w[1], w[2]): k for k, w in enumerate(lines)}
    for k, f in enumerate((2, 3)):
        tree = [i for i, m in by_index.items() if m["parameters"]["f"] == f]
        assert position[("start", "report", str(k))] > max(position[("end", "bisect", str(i))] for i in tree)
    # pwe show (text): each grown member's parent and iteration
    shown = pwe("show", run_dir, "--node", "bisect", "--limit", "0", cwd=tmp_path, check=0).stdout.splitlines()
    for m in by_index.values():
        (line,) = [x for x in shown if x.startswith(f"bisect[{m['member']}] ")]
        assert f"iteration={m['iteration']}" in line and (m["parent"] is None) == ("parent=" not in line)
        if m["parent"] is not None:
            assert f"parent={m['parent']} " in line
    # pwe show --tree: each tree drawn, converged; --json the same trees
    drawn = pwe("show", run_dir, "--tree", cwd=tmp_path, check=0).stdout
    assert drawn.count("=> converged") == 2 and drawn.count("[") == len(by_index)
    data = json.loads(pwe("show", run_dir, "--tree", "--json", cwd=tmp_path, check=0).stdout)["bisect"]
    assert [t["outcome"] for t in data["trees"]] == ["converged", "converged"]

    def count(t):
        return 1 + sum(count(c) for c in t["children"])

    assert sum(count(t) for t in data["trees"]) == len(by_index) == data["members"]
    # pwe trace: one attempt per member, the grown ones with their journaled values
    trace = [json.loads(line) for line in pwe("trace", run_dir, "--json", cwd=tmp_path, check=0).stdout.splitlines()]
    assert {(r["node"], r["member"]): r["parameters"] for r in trace} == \
        {(m["node"], m["member"]): m["parameters"] for m in members}


def test_the_example_converges_to_square_roots(tmp_path):
    example = ROOT / "examples" / "converge.yaml"
    nodes = json.loads(pwe("validate", example, "--json", cwd=tmp_path, check=0).stdout)["nodes"]
    assert [n.get("check") for n in nodes] == [{"max_iterations": 30}, None]
    run_dir = tmp_path / "run"
    pwe("run", ROOT / "examples" / "converge.yaml", "--run-dir", run_dir, cwd=tmp_path, check=0)
    data = json.loads(pwe("show", run_dir, "--tree", "--json", cwd=tmp_path, check=0).stdout)["newton"]
    for t in data["trees"]:
        assert t["outcome"] == "converged"
        while t["children"]:
            (t,) = t["children"]  # Newton's method: one child per step
        a = t["parameters"]["a"]
        assert abs(float(t["outputs"]["x_next"]) - a ** 0.5) < 1e-9 * a ** 0.5


def test_max_iterations_reached_is_reported_and_the_tree_dependents_are_skipped(tmp_path):
    wf, ledger = write_wf(tmp_path, eps=1e-6, max_iterations=3)
    run_dir = tmp_path / "run"
    proc = pwe("run", wf, "--run-dir", run_dir, cwd=tmp_path, check=1)
    assert "tree(s) reached max_iterations (3) without converging" in proc.stderr
    members = members_of(run_dir, tmp_path)
    assert grown_trees(members) == expected_trees(1e-6, 3)
    assert max(m["iteration"] for m in members if m["node"] == "bisect") == 3
    limited = [m for m in members if m.get("verdict") == "max_iterations"]
    assert limited and all(m["iteration"] == 3 and "max_iterations (3) reached" in m["why"] for m in limited)
    assert {m["state"] for m in members if m["node"] == "report"} == {"skipped"}
    assert not any(line.split()[1] == "report" for line in ledger.read_text().splitlines())
    data = json.loads(pwe("show", run_dir, "--tree", "--json", cwd=tmp_path, check=0).stdout)["bisect"]
    assert [t["outcome"] for t in data["trees"]] == ["unconverged", "unconverged"]
    status = json.loads(pwe("status", run_dir, "--json", cwd=tmp_path, check=0).stdout)
    assert status["phase"] != "succeeded"
    # pwe retry: nothing failed, the trees stay unconverged, and the run ends again (exit 1)
    proc = pwe("retry", run_dir, cwd=tmp_path, check=1)
    assert "reached max_iterations" in proc.stderr
    assert {m["state"] for m in members_of(run_dir, tmp_path) if m["node"] == "report"} == {"skipped"}


def test_retry_after_a_failed_check_grows_the_tree_on_to_convergence(tmp_path):
    broken = tmp_path / "broken"
    broken.touch()
    check = CHECK.replace("    check: |\n", f'    check: |\n      if test -e {broken} && test "$PWE_ITERATION" -ge 3; '
                          "then exit 3; fi\n")
    wf, ledger = write_wf(tmp_path, check=check)
    run_dir = tmp_path / "run"
    pwe("run", wf, "--run-dir", run_dir, cwd=tmp_path, check=1)
    failed = {m["member"] for m in members_of(run_dir, tmp_path) if m["state"] == "failed"}
    assert failed
    broken.unlink()
    pwe("retry", run_dir, cwd=tmp_path, check=0)
    members = members_of(run_dir, tmp_path)
    assert grown_trees(members) == expected_trees(0.3, 10)
    assert {m["state"] for m in members} == {"done"}
    starts = {}
    for words in (line.split() for line in ledger.read_text().splitlines()):
        if words[0] == "start":
            starts.setdefault((words[1], int(words[2])), []).append(words[3])
    # the members whose check failed ran again (attempt 2), every other member once
    assert {k for k, a in starts.items() if a == ["1", "2"]} == {("bisect", i) for i in failed}
    assert all(a == ["1"] for k, a in starts.items() if k[0] != "bisect" or k[1] not in failed)
    assert set(starts) == {(m["node"], m["member"]) for m in members}


@pytest.mark.parametrize("check, why", [
    ('    check: test "$PWE_ITERATION" -lt 2 && echo next.lo=0.5 >> "$PWE_OUTPUTS" || exit 3\n',
     "the check exited 3"),
    ("    check: echo nothing to say\n", "neither converged=true nor next.NAME=VALUE"),
    ('    check: echo next.width=1 >> "$PWE_OUTPUTS"\n', "has no parameter 'width'"),
])
def test_a_failing_check_fails_its_member(tmp_path, check, why):
    wf, ledger = write_wf(tmp_path, check=check)
    run_dir = tmp_path / "run"
    proc = pwe("run", wf, "--run-dir", run_dir, cwd=tmp_path, check=1)
    members = members_of(run_dir, tmp_path)
    failed = [m for m in members if m["state"] == "failed"]
    assert failed and all(why in m["why"] for m in failed), failed
    assert {m["state"] for m in members if m["node"] == "report"} == {"skipped"}
    if "exited" in why:  # the roots grew one child each, and the children's check failed
        assert [m["iteration"] for m in failed] == [2, 2]
        assert "pwe: the check exited 3" in pwe("logs", run_dir, f"bisect:{failed[0]['member']}", "--stderr", cwd=tmp_path,
                                                check=0).stdout
    assert "failed" in proc.stdout


def test_engine_killed_mid_growth_then_resume_loses_nothing_and_runs_nothing_twice(tmp_path):
    wf, ledger = write_wf(tmp_path, eps=0.01, sleep=0.3)
    run_dir = tmp_path / "run"
    env = dict(ENV, PWE_CHECKPOINT_EVERY="0.3")  # a checkpoint with grown members in it, too
    pwe("submit", wf, "--cores", "2", "--run-dir", run_dir, cwd=tmp_path, check=0, env=env)

    def grown() -> int:
        try:
            return (run_dir / "journal.jsonl").read_text().count('"grow":')
        except FileNotFoundError:
            return 0

    def checkpointed() -> bool:  # (the trees are in the checkpoint the resumed engine starts from)
        try:
            return b'"tree":' in (run_dir / "checkpoint.bin").read_bytes()
        except FileNotFoundError:
            return False

    wait_for(lambda: grown() >= 4 and checkpointed(), what="4 members to grow children, and a checkpoint")
    os.kill(json.loads((run_dir / "engine.lock").read_text())["pid"], signal.SIGKILL)
    killed_at = grown()
    let_time_pass(0.5, "the pilot goes on without the engine meanwhile")
    proc = pwe("resume", run_dir, cwd=tmp_path, check=0, env=env)
    assert "cannot be used" not in proc.stderr  # the checkpoint with its trees was taken
    members = members_of(run_dir, tmp_path)
    trees = grown_trees(members)
    assert trees == expected_trees(0.01, 10)
    assert sum(len(v) for v in trees.values()) > 2 * killed_at  # it was killed mid-growth
    check_ledger_once(ledger, members)
    recs = read_journal(run_dir)
    assert [r["e"] for r in recs].count("resume") == 1
    # every grown member was journaled (in its parent's end) before it was assigned
    seen, grow_at = 2, {}
    for k, r in enumerate(recs):
        if r["e"] == "end" and r.get("grow"):
            for _ in r["grow"]:
                grow_at[seen] = k
                seen += 1
        if r["e"] == "assign" and r["n"] == "bisect" and r["m"] >= 2:
            assert grow_at[r["m"]] < k
    assert seen == len(trees[2]) + len(trees[3])


def test_a_python_callable_check(tmp_path):
    import pwe as api

    wf, ledger = write_wf(tmp_path, check="")
    seen = []

    def check(member):
        seen.append((member["member"], member["parent"], member["iteration"]))
        p = member["parameters"]
        return bisect_rule(p["f"], p["lo"], p["hi"], 0.3)

    result = api.run_workflow(wf, run_dir=tmp_path / "run", checks={"bisect": check})
    assert result.ok
    members = [m for n in ("bisect", "report") for m in result.members(n)]
    assert grown_trees(members) == expected_trees(0.3, 10)
    assert sorted(i for i, _, _ in seen) == [m["member"] for m in result.members("bisect")]  # each asked once
    check_ledger_once(ledger, members)
    # a run begun with a callable is not resumed without it
    proc = pwe("resume", tmp_path / "run", cwd=tmp_path)
    assert proc.returncode == 2 and "checked by a Python callable" in proc.stderr
    assert "Traceback" not in proc.stderr
    with pytest.raises(api.InputError, match="no node 'nope'"):
        api.run_workflow(wf, run_dir=tmp_path / "run2", checks={"nope": check})
    assert not (tmp_path / "run2").exists()


BAD = [
    ("a check without parameters", "nodes:\n  a:\n    run: 'true'\n    check: echo converged=true\n",
     "has no 'parameters'", 5),
    ("an undefined name in the check", "nodes:\n  a:\n    parameters: {x: [1]}\n    run: 'true'\n"
     "    check: echo {{ y }}\n", "'check' uses undefined name 'y'", 6),
    ("max_iterations 0", "nodes:\n  a:\n    parameters: {x: [1]}\n    run: 'true'\n    check: echo\n"
     "    max_iterations: 0\n", "max_iterations", 7),
    ("a blank check", "nodes:\n  a:\n    parameters: {x: [1]}\n    run: 'true'\n    check: ' '\n", "check", 6),
    ("a check under MPI", "nodes:\n  a:\n    parameters: {x: [1]}\n    run: 'true'\n    check: echo\n"
     "    scheduling: {ranksPerMember: 2}\n", "ranksPerMember 2", 6),
]


@pytest.mark.parametrize("what, body, phrase, line", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_clear_line(tmp_path, what, body, phrase, line):
    wf = tmp_path / "bad.yaml"
    wf.write_text("name: bad\n" + body)
    for cmd in ("validate", "run"):
        proc = pwe(cmd, wf, "--run-dir", tmp_path / "r", cwd=tmp_path) if cmd == "run" else pwe(cmd, wf, cwd=tmp_path)
        assert proc.returncode == 2, proc
        err = proc.stderr.strip().splitlines()
        assert len(err) == 1 and phrase in err[0] and f"bad.yaml:{line}" in err[0], err
        assert not (tmp_path / "r").exists()


def test_xml_and_yaml_checked_nodes_plan_alike(tmp_path):
    from pwe.planning.plan import plan_workflow

    (tmp_path / "c.yaml").write_text(textwrap.dedent("""\
        name: c
        nodes:
          n:
            parameters: {x: [1, 2]}
            run: echo {{ x }}
            check: echo converged=true >> "$PWE_OUTPUTS"
            max_iterations: 7
        """))
    (tmp_path / "c.xml").write_text(textwrap.dedent("""\
        <workflow name="c">
          <node id="n" max_iterations="7">
            <parameter name="x"><value>1</value><value>2</value></parameter>
            <run>echo {{ x }}</run>
            <check>echo converged=true >> "$PWE_OUTPUTS"</check>
          </node>
        </workflow>
        """))
    y, x = plan_workflow(tmp_path / "c.yaml"), plan_workflow(tmp_path / "c.xml")
    assert y.workflow == x.workflow
    assert x.nodes["n"].max_iterations == 7 and x.command("n", 1) == y.command("n", 1)
    assert "converged=true" in x.command("n", 1)


CALLABLE_RUNNER = """
import json, sys
import pwe

def check(member):
    p = member["parameters"]
    with open(sys.argv[3], "a") as fh:
        fh.write(json.dumps([member["member"], member["iteration"]]) + "\\n")
    if member["member"] == int(sys.argv[4]):
        raise RuntimeError("no answer for this one")
    if (p["lo"] * p["lo"] - p["f"]) * (p["hi"] * p["hi"] - p["f"]) > 0 or p["hi"] - p["lo"] < 0.01:
        return None
    mid = (p["lo"] + p["hi"]) / 2
    return [{"hi": mid}, {"lo": mid}]

if sys.argv[1] == "run":
    r = pwe.run_workflow(sys.argv[2], run_dir=sys.argv[5], checks={"bisect": check})
else:
    r = pwe.resume_workflow(sys.argv[5], checks={"bisect": check})
sys.exit(0 if r.ok else 1)
"""


def test_a_python_callable_check_across_a_kill_9_and_resume_workflow(tmp_path):
    """The engine of run_workflow(checks=...) killed mid-growth; resume_workflow with the
    same callable grows the same trees; a callable that raises fails its member."""
    wf, ledger = write_wf(tmp_path, check="", eps=0.01, sleep=0.2)
    runner, asked, run_dir = tmp_path / "runner.py", tmp_path / "asked", tmp_path / "run"
    runner.write_text(CALLABLE_RUNNER)
    args = [sys.executable, runner, "run", wf, asked, 1, run_dir]  # member 1 (a root): its check raises
    engine = subprocess.Popen(list(map(str, args)), cwd=tmp_path, env=ENV)
    try:
        wait_for(lambda: (run_dir / "journal.jsonl").exists()
                 and (run_dir / "journal.jsonl").read_text().count('"grow":') >= 3, what="3 members to grow")
        engine.send_signal(signal.SIGKILL)
    finally:
        engine.wait(timeout=30)
    args[2] = "resume"
    proc = subprocess.run(list(map(str, args)), cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr  # (member 1's check raised)
    from pwe.observe.results import RunResult

    members = [m for n in ("bisect", "report") for m in RunResult(run_dir).members(n)]
    bisect = [m for m in members if m["node"] == "bisect"]
    # f=2's tree (root 0) grew as the rule says; f=3's root failed with what its check raised
    assert sorted((m["parameters"]["lo"], m["parameters"]["hi"], m["iteration"]) for m in bisect
                  if m["parameters"]["f"] == 2) == expected_trees(0.01, 10)[2]
    (root1,) = [m for m in bisect if m["member"] == 1]
    assert root1["state"] == "failed" and "the check raised RuntimeError: no answer for this one" in root1["why"]
    assert [m["state"] for m in members if m["node"] == "report"] == ["done", "skipped"]
    check_ledger_once(ledger, [m for m in members if m["state"] != "skipped"])
    # every member that ended was asked; none asked twice but one whose answer the kill lost
    calls = [tuple(json.loads(line)) for line in asked.read_text().splitlines()]
    assert {c[0] for c in calls} == {m["member"] for m in bisect}
    assert len(calls) - len(set(calls)) <= 2


def test_trees_grow_inside_one_slurm_pilot(slurm_cluster, tmp_path):
    """The example on the real SLURM (run under flock /tmp/pwe-slurm.lock): every member,
    grown or not, and every check run inside one pilot job; the trees converge as here."""
    run_dir = tmp_path / "run"
    pwe("run", ROOT / "examples" / "converge.yaml", "--host", "cluster", "--hosts", ROOT / "examples" / "hosts.yaml",
        "--run-dir", run_dir, cwd=tmp_path, check=0, timeout=300)
    recs = read_journal(run_dir)
    pilots = [r for r in recs if r["e"] == "pilot"]
    assert len(pilots) == 1 and pilots[0].get("job")  # one batch job, its allocation kept while trees grew
    data = json.loads(pwe("show", run_dir, "--tree", "--json", cwd=tmp_path, check=0).stdout)["newton"]
    assert [t["outcome"] for t in data["trees"]] == ["converged"] * 3 and data["members"] > 3
    assigned = {(r["n"], r["m"]) for r in recs if r["e"] == "assign"}
    assert len(assigned) == data["members"] + 3  # every member of newton and report
