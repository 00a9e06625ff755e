"""Groups (``group:``, Row's meaning): a group goes to a pilot slot as one message and its
members run there one after another, each with its own directory, events, exit status
and attempts. End to end with real pilots and processes (here, and on the real SLURM),
real kill -9 and a real walltime end; each member appends to a ledger, which proves what
ran, in which order and how often."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import ROOT, kill_pilot, read_journal, wait_for
from pilot import wire
from pwe.cli.main import cli

ENV = dict(os.environ, PYTHONPATH=str(ROOT))

#: each member: a "start" line, a short sleep, an "end" line (node, member, attempt, x, y)
RUN = ('echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT {{ x }} {{ y }}" >> {{ ledger }}; sleep {{ nap }}; '
       'echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT {{ x }} {{ y }}" >> {{ ledger }}')


def workflow(tmp_path: Path, group: str, n: int = 8, nap: float = 0.05, extra: str = "") -> Path:
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: g\nproperties: {{ledger: {tmp_path / 'ledger'}, nap: {nap}}}\nnodes:\n  w:\n"
                  f"    parameters: {{x: {{range: [0, {n}]}}, y: [a, b]}}\n    run: {json.dumps(RUN)}\n"
                  f"    group: {group}\n{extra}")
    return wf


def ledger(tmp_path: Path) -> list[list[str]]:
    return [line.split() for line in (tmp_path / "ledger").read_text().splitlines()]


def sent(run_dir: Path) -> list[tuple[str, list[int]]]:
    """What the engine sent its pilots, in order: ("group", members) or ("task", [member])."""
    out = []
    for tasks in sorted((run_dir / "pilots").glob("*/tasks.jsonl")):
        for line in tasks.read_text().splitlines():
            msg = json.loads(line)
            if msg["k"] == "group":
                out.append(("group", [t["m"] for t in msg["tasks"]]))
            elif msg["k"] == "task":
                out.append(("task", [msg["m"]]))
    return out


def one_after_another(lines: list[list[str]], members: list[int]) -> bool:
    """The ledger's lines of these members read start m1, end m1, start m2, end m2, ... in
    this order (each attempt once)."""
    mine = [(w[0], int(w[2])) for w in lines if int(w[2]) in members]
    return mine == [(k, m) for m in members for k in ("start", "end")]


def test_a_group_runs_its_members_one_after_another_in_one_slot(tmp_path):
    """include + sort_by + split_by_sort_key + maximum_size as Row forms them; the members
    include leaves out run ungrouped; every member has its own state and outputs."""
    from pwe.engine.loop import Engine
    from pwe.observe.results import load_state, member_record

    # x in 0..7, y in a,b: member index = 2x + (y == b). Grouped: x < 6 (12 members),
    # sorted by y (then index), cut where y changes, then at most 4 a group
    wf = workflow(tmp_path, "{include: ['x<6'], sort_by: [y], split_by_sort_key: true, maximum_size: 4}",
                  extra="    scheduling: {maxWallTimePerMember: 1}\n")
    eng = Engine.create(wf, cores=2, run_dir=tmp_path / "run")
    assert eng.run() is True
    a = [2 * x for x in range(6)]
    b = [2 * x + 1 for x in range(6)]
    expected = [a[:4], a[4:], b[:4], b[4:]]
    got = sent(tmp_path / "run")
    groups = [m for k, m in got if k == "group"]
    assert sorted(groups) == sorted(expected), got
    assert sorted(m[0] for k, m in got if k == "task") == list(range(12, 16))  # x 6, 7: ungrouped
    lines = ledger(tmp_path)
    for g in expected:
        assert one_after_another(lines, g), (g, lines)
    _, st = load_state(tmp_path / "run")
    for i in range(16):
        rec = member_record(st, "w", i)
        assert rec["state"] == "done" and rec["attempts"] == 1, rec
    ends = Counter(int(w[2]) for w in lines if w[0] == "end")
    assert ends == Counter(range(16))
    # each member its own start and end events, with its own pilot-side timing
    recs = read_journal(tmp_path / "run")
    assert Counter(r["m"] for r in recs if r["e"] == "start") == Counter(range(16))


def test_a_failed_member_fails_alone_the_rest_of_its_group_runs_and_retry_reruns_only_it(tmp_path):
    from helpers import run_cli

    wf = tmp_path / "wf.yaml"
    led = tmp_path / "ledger"
    wf.write_text("name: g\nnodes:\n  w:\n    parameters: {i: {range: [0, 6]}}\n"
                  f"    run: echo $PWE_MEMBER $PWE_ATTEMPT >> {led}; test $PWE_MEMBER != 2 || test -e {tmp_path}/ok\n"
                  "    group: {maximum_size: 6}\n")
    status, out, err = run_cli("run", wf, "--cores", "1", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert status == 1, (out, err)
    assert led.read_text().split("\n") == [f"{i} 1" for i in range(6)] + [""]  # 3, 4, 5 ran after 2 failed
    shown = json.loads(run_cli("show", tmp_path / "run", "--json", cwd=tmp_path)[1])
    states = {m["member"]: (m["state"], m["exit_status"]) for m in shown}
    assert states[2] == ("failed", 1) and all(states[i] == ("done", 0) for i in (0, 1, 3, 4, 5)), states
    (tmp_path / "ok").touch()
    status, out, err = run_cli("retry", tmp_path / "run", cwd=tmp_path)
    assert status == 0, (out, err)
    assert led.read_text().split("\n")[6:] == ["2 2", ""]  # only the failed member, its second attempt


def test_submit_whole_hands_a_group_out_only_when_every_member_is_ready(tmp_path):
    """b's members become ready one by one (each after its own a, of different lengths);
    with submit_whole each group of b goes out whole, in one message."""
    from pwe.engine.loop import Engine

    led = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: g\nnodes:\n  a:\n    parameters: {i: {range: [0, 8]}}\n"
                  "    run: sleep 0.0$PWE_MEMBER\n"
                  "  b:\n    after: [a]\n    parameters: {i: {range: [0, 8]}}\n"
                  f"    run: echo $PWE_MEMBER >> {led}\n"
                  "    group: {maximum_size: 4, submit_whole: true}\n")
    eng = Engine.create(wf, cores=2, run_dir=tmp_path / "run")
    assert eng.run() is True
    groups = []
    for line in (tmp_path / "run" / "pilots" / "p1" / "tasks.jsonl").read_text().splitlines():
        msg = json.loads(line)
        if msg["k"] == "group":
            groups.append([t["m"] for t in msg["tasks"]])
        else:
            assert not (msg["k"] == "task" and msg["n"] == "b"), "a member of b went alone"
    assert groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert sorted(int(x) for x in led.read_text().split()) == list(range(8))


def test_a_whole_group_whose_member_is_skipped_still_goes_out(tmp_path):
    """submit_whole: b[2] waits for a[2], which fails last, so b[2] is skipped, never ready,
    after the others were ready and held; they go out once none of them waits (the run
    does not hang)."""
    from helpers import run_cli

    led = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: g\nnodes:\n  a:\n    parameters: {i: {range: [0, 4]}}\n    run: test $PWE_MEMBER != 2 || (sleep 0.5; exit 1)\n"
                  "  b:\n    after: [a]\n    parameters: {i: {range: [0, 4]}}\n"
                  f"    run: echo $PWE_MEMBER >> {led}\n    group: {{submit_whole: true}}\n")
    status, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=60)
    assert status == 1, (out, err)
    assert sorted(led.read_text().split()) == ["0", "1", "3"]
    groups = [[t["m"] for t in json.loads(line)["tasks"]]
              for line in (tmp_path / "run" / "pilots" / "p1" / "tasks.jsonl").read_text().splitlines()
              if json.loads(line)["k"] == "group"]
    assert groups == [[0, 1, 3]]


def test_kill_9_of_the_pilot_mid_group_loses_nothing_runs_nothing_twice_spends_no_attempt_on_unstarted(tmp_path):
    """Two groups of 6 on a 2-core pilot; kill -9 of the pilot after a few members ended:
    the unstarted members of both groups go back without an attempt spent (the engine's
    dead-pilot recovery), the ones running are ended and run again, nothing ends twice."""
    wf = workflow(tmp_path, "{maximum_size: 6}", n=6, nap=0.3)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        events = run_dir / "pilots" / "p1" / "events.jsonl"
        wait_for(lambda: events.exists() and events.read_bytes().count(b'"k":"end"') >= 3, what="3 members to end")
        kill_pilot(events)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    lines = ledger(tmp_path)
    ends = Counter(int(w[2]) for w in lines if w[0] == "end")
    assert ends == Counter(range(12)), ends  # every member ended, exactly once
    starts = Counter(int(w[2]) for w in lines if w[0] == "start")
    recs = read_journal(run_dir)
    on_p1 = {r["m"] for r in recs if r["e"] == "assign" and r["p"] == "p1"}
    assert on_p1 == set(range(12))  # both groups went to p1
    started_on_p1 = {r["m"] for r in recs if r["e"] == "start" and r["p"] == "p1"}
    unstarted = on_p1 - started_on_p1
    assert unstarted, "every member had started before the kill"
    attempt_of_end = {int(w[2]): int(w[3]) for w in lines if w[0] == "end"}
    for m in range(12):  # an attempt is spent by a start, never by being handed back
        assert attempt_of_end[m] == starts[m], (m, attempt_of_end[m], starts[m])
    assert all(attempt_of_end[m] == 1 for m in unstarted)
    assert any(r["e"] == "pilot_gone" and r["p"] == "p1" for r in recs)


def test_kill_9_of_the_engine_mid_group_then_resume_runs_each_member_once(tmp_path):
    """The pilot goes on with its groups without the engine; the resumed engine takes in
    what it said and hands out the rest: every member ends once, none starts twice."""
    from helpers import count_ends

    wf = workflow(tmp_path, "{maximum_size: 5}", n=10, nap=0.1)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "submit", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    wait_for(lambda: count_ends(run_dir) >= 4, what="4 members to end")
    os.kill(json.loads((run_dir / "engine.lock").read_text())["pid"], signal.SIGKILL)
    assert count_ends(run_dir) < 20, "the run finished before the engine could be killed"
    proc = subprocess.run([sys.executable, "-m", "pwe", "resume", str(run_dir)], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = ledger(tmp_path)
    assert Counter(int(w[2]) for w in lines if w[0] == "end") == Counter(range(20))
    assert Counter(int(w[2]) for w in lines if w[0] == "start") == Counter(range(20))
    assert all(w[3] == "1" for w in lines)  # no attempt spent twice


def test_the_pilots_walltime_end_hands_the_unstarted_members_of_a_group_back(tmp_path):
    """A real pilot, an 8 s allocation stopping 4 s before its end: the group's first
    member is running, the rest have not started; all go back (no attempt spent)."""
    d = tmp_path / "pilot"
    d.mkdir()
    led = tmp_path / "ledger"

    def task(m):
        return {"k": "task", "n": "a", "m": m, "a": 1, "cmd": f"echo {m} >> {led}; sleep 1.5", "cwd": str(d / str(m)),
                "env": {}, "ranks": 1, "threads": 1, "wall": None}

    msg = {"k": "group", "tasks": [task(m) for m in range(5)]}
    assert wire.problem(msg) == ""
    (d / "tasks.jsonl").write_text(json.dumps(msg) + "\n")
    proc = subprocess.run([sys.executable, "-m", "pilot", "--dir", str(d), "--slots", "2", "--walltime",
                           str(8 / 60), "--margin", "4"], env=ENV, timeout=120)
    assert proc.returncode == 0
    ev = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines()]
    started = [e["m"] for e in ev if e["k"] == "start"]
    back = {e["m"]: e["why"] for e in ev if e["k"] == "back"}
    ended = [e["m"] for e in ev if e["k"] == "end"]
    assert started and started == sorted(started) and started == list(range(len(started)))  # in order, one slot
    assert set(back) | set(ended) == set(range(5)) and not set(back) & set(ended)
    assert all(back[m] == "the allocation is ending" for m in set(back) - set(started))
    assert set(back) - set(started), "no member of the group was left unstarted"
    assert led.read_text().split() == [str(m) for m in started]
    assert ev[-1]["k"] == "down" and ev[-1]["why"] == "walltime"


def test_a_million_members_group_in_index_runs_without_a_table(tmp_path):
    """Without include and sort_by a group is a run of indices: nothing per member is
    stored; with them, 4 bytes a member."""
    from pwe.planning.groups import Groups
    from pwe.planning.plan import plan_workflow

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: g\nnodes:\n  w:\n    parameters: {i: {range: [0, 1000000]}}\n    run: 'true'\n"
                  "    group: {maximum_size: 300}\n")
    plan = plan_workflow(wf)
    assert not plan.warnings
    groups = Groups(plan.nodes["w"])
    assert groups.group_of(999_999) == 3333 and list(groups.members(3333)) == list(range(999_900, 1_000_000))
    assert groups._order is None and groups.summary()["sizes"] == {"100": 1, "300": 3333}


@pytest.mark.parametrize("combine", ["product", "zip"])
@pytest.mark.parametrize("reverse", [False, True])
def test_groups_are_formed_as_row_forms_them(tmp_path, combine, reverse):
    """Against a plain reading of Row's rules: include (any entry; within one, all
    parts), a stable sort by the sort_by values, a cut where the key changes, then
    pieces of maximum_size."""
    from pwe.planning.groups import Groups
    from pwe.planning.plan import plan_workflow

    a = [3, 1, 2, 1, 3, 2] * (2 if combine == "zip" else 1)
    b = ["x", "y", "x", "z", "y", "x"] * (2 if combine == "zip" else 1)
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: g\nnodes:\n  w:\n    parameters: {{a: {a}, b: {b}}}\n    combine: {combine}\n"
                  "    run: 'true'\n    group: {include: ['a>1; b!=z', 'member<3'], sort_by: [a, b], "
                  f"reverse_sort: {str(reverse).lower()}, split_by_sort_key: true, maximum_size: 2}}\n")
    pn = plan_workflow(wf).nodes["w"]
    groups = Groups(pn)
    vals = [pn.space.values_of(i) for i in range(pn.size)]
    chosen = [i for i in range(pn.size) if (vals[i]["a"] > 1 and vals[i]["b"] != "z") or i < 3]
    chosen.sort(key=lambda i: (vals[i]["a"], vals[i]["b"]), reverse=reverse)
    expected, run = [], []
    for i in chosen:
        if run and ((vals[i]["a"], vals[i]["b"]) != (vals[run[0]]["a"], vals[run[0]]["b"]) or len(run) == 2):
            expected.append(run)
            run = []
        run.append(i)
    expected.append(run)
    got = [list(groups.members(g)) for g in range(groups.summary()["groups"])]
    assert got == expected
    for g, members in enumerate(expected):
        assert all(groups.group_of(i) == g for i in members)
    assert all(groups.group_of(i) is None for i in range(pn.size) if i not in chosen)


def test_a_group_too_big_for_one_message_is_warned_about(tmp_path):
    from helpers import run_cli

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: g\nnodes:\n  w:\n    parameters: {i: {range: [0, 20000]}}\n    run: 'true'\n"
                  "    group: {include: ['i<15000']}\n")
    status, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert status == 0 and f"warning: {wf}:6: node 'w' may form a group of 20,000 members" in err, err
    assert "set group.maximum_size to 10000 or fewer" in err


@pytest.mark.parametrize("group,line,phrase", [
    ("{sort_by: [z]}", 6, "group.sort_by names 'z', which is not one of its parameters"),
    ("{include: ['state=done']}", 6, "only the member's parameters and its index ('member') are known"),
    ("{include: ['x>>3']}", 6, "group.include: query condition"),
    ("{maximum_size: 0}", 6, "'nodes.w.group.maximum_size'"),
    ("{maximum_sise: 3}", 6, "maximum_sise"),
    ("{submit_whole: maybe}", 6, "'nodes.w.group.submit_whole'"),
    ("[3]", 6, "'nodes.w.group'"),
])
def test_bad_group_input_is_one_clear_line(tmp_path, group, line, phrase):
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: g\nnodes:\n  w:\n    parameters: {{x: [1, 2]}}\n    run: 'true'\n    group: {group}\n")
    for cmd in ("validate", "plan"):
        result = CliRunner().invoke(cli, [cmd, str(wf)])
        assert result.exit_code == 2, (result.output, result.exception)
        err = result.stderr
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"{wf}:{line}: ") and phrase in err, err


def test_plan_shows_the_groups(tmp_path):
    wf = workflow(tmp_path, "{include: ['x<6'], sort_by: [y], split_by_sort_key: true, maximum_size: 4}")
    result = CliRunner().invoke(cli, ["plan", str(wf), "--json"])
    assert result.exit_code == 0, result.output
    node = json.loads(result.stdout)["nodes"][0]
    assert node["groups"] == {"groups": 4, "sizes": {"2": 2, "4": 2}, "ungrouped": 4, "submit_whole": False}
    text = CliRunner().invoke(cli, ["plan", str(wf)]).stdout
    assert "groups: 4 group(s) (2 of 2 member(s), 2 of 4 member(s)), 4 member(s) ungrouped" in text


def test_the_xml_form_says_the_same_groups(tmp_path):
    from pwe.planning.plan import plan_workflow

    y = tmp_path / "g.yaml"
    y.write_text("name: g\nnodes:\n  w:\n    parameters: {x: {range: [0, 8]}, y: [a, b]}\n    run: 'true'\n"
                 "    group: {include: ['x<6', 'y=b'], sort_by: [y, x], reverse_sort: true, split_by_sort_key: true,"
                 " maximum_size: 4, submit_whole: true}\n")
    x = tmp_path / "g.xml"
    x.write_text("""<workflow name="g"><node id="w"><parameter name="x"><range start="0" stop="8"/></parameter>
<parameter name="y"><value>a</value><value>b</value></parameter><run>true</run>
<group sort_by="y x" reverse_sort="true" split_by_sort_key="true" maximum_size="4" submit_whole="true">
<include>x&lt;6</include><include>y=b</include></group></node></workflow>""")
    py, px = plan_workflow(y), plan_workflow(x)
    assert py.nodes["w"].spec.group == px.nodes["w"].spec.group
    assert py.nodes["w"].spec.group.sort_by == ["y", "x"]


def test_a_group_keeps_its_node_across_ssh_nodes(ssh_nodes, tmp_path):
    """Four real SSH nodes of 2 cores (network namespaces), 8 groups of 4: each group's
    members run one after another, all on the node where its first one ran."""
    from helpers import SSH

    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  four:\n    protocol: local\n    cores_per_node: 2\n"
                                         f"    nodes: [pwe-n1, pwe-n2, pwe-n3, pwe-n4]\n"
                                         f"    ssh_config: {SSH / 'ssh_config'}\n")
    led = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    run = (f"where=$(ip -4 -o addr show | grep -o '10\\.233\\.[0-9]*\\.2'); echo start $PWE_MEMBER $where >> {led}; "
           f"sleep 0.1; echo end $PWE_MEMBER $where >> {led}")
    wf.write_text(f"name: g\nnodes:\n  m:\n    parameters: {{i: {{range: [0, 32]}}}}\n    run: {json.dumps(run)}\n"
                  "    group: {maximum_size: 4}\n")
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "four", "--run-dir",
                           str(tmp_path / "run")], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [w.split() for w in led.read_text().splitlines()]
    assert Counter(int(w[1]) for w in lines if w[0] == "end") == Counter(range(32))
    for g in range(8):
        members = list(range(4 * g, 4 * g + 4))
        mine = [w for w in lines if int(w[1]) in members]
        assert [(w[0], int(w[1])) for w in mine] == [(k, m) for m in members for k in ("start", "end")], mine
        assert len({w[2] for w in mine}) == 1, mine  # one node
    assert len({w[2] for w in lines}) == 4  # the groups spread over the four nodes


def test_a_batch_pilot_holds_whole_groups_counted_as_one_each(tmp_path):
    """A batch pilot (LoadLeveler, through the command-level emulator in tests/llemu) is
    kept about two members per core ahead; a group counts as one there, so its 4 slots get
    their 4 groups of 10 at once, every member assigned before the first ends."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  ll:\n    protocol: loadleveler\n    cores_per_node: 4\n"
                                         "    max_nodes: 1\n")
    wf = workflow(tmp_path, "{maximum_size: 10}", n=20, nap=0.05, extra="    scheduling: {maxWallTime: 5}\n")
    env = dict(ENV, PATH=f"{ROOT / 'tests' / 'llemu'}:{os.environ['PATH']}", LLEMU_DIR=str(tmp_path / "llemu"))
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "ll", "--run-dir",
                           str(tmp_path / "run")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    recs = read_journal(tmp_path / "run")
    assert [r["batch"] for r in recs if r["e"] == "pilot"] == ["loadleveler"]
    kinds = [r["e"] for r in recs if r["e"] in ("assign", "end")]
    assert kinds[:40] == ["assign"] * 40, kinds[:45]
    lines = ledger(tmp_path)
    for g in range(0, 40, 10):
        assert one_after_another(lines, list(range(g, g + 10)))
    assert Counter(int(w[2]) for w in lines if w[0] == "end") == Counter(range(40))


# -- the real SLURM -----------------------------------------------------------------------------

def test_groups_run_in_one_slurm_pilot_slot_after_slot(slurm_cluster, tmp_path):
    """On the real SLURM (run under flock /tmp/pwe-slurm.lock): 40 members in groups of 10
    in one pilot job; each group one message, its members one after another."""
    from helpers import SLURM_HOSTS

    (tmp_path / "hosts.yaml").write_text(SLURM_HOSTS)
    wf = workflow(tmp_path, "{maximum_size: 10}", n=20, nap=0.01, extra="    scheduling: {maxWallTime: 5}\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "cluster", "--run-dir",
                           str(run_dir)], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    recs = read_journal(run_dir)
    assert [r["job"] is not None for r in recs if r["e"] == "pilot"] == [True]  # one pilot, a SLURM job
    got = sent(run_dir)
    assert sorted(m for _, m in got) == [list(range(g, g + 10)) for g in range(0, 40, 10)], got
    lines = ledger(tmp_path)
    for g in range(0, 40, 10):
        assert one_after_another(lines, list(range(g, g + 10)))
    assert Counter(int(w[2]) for w in lines if w[0] == "end") == Counter(range(40))
