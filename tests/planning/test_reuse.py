"""Content-addressed reuse of members across runs of one workflow (pwe/planning/reuse.py,
pwe/runstate/reusable.py): each member appends "node index" to a ledger in the workspace,
so what ran is what the members themselves say, not what pwe says of them."""

import json
from collections import Counter
from pathlib import Path

from helpers import read_journal, run_cli

# a -> b (matched on i): unchanged between the runs but for the range; c -> d (matched on j):
# c's command changes; total waits for b and d (a barrier)
WF = """\
name: sweep
properties: {{ledger: {ledger}}}
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: echo "a {{{{ i }}}}" >> {{{{ ledger }}}}; echo "sq=$(({{{{ i }}}} * {{{{ i }}}}))" >> "$PWE_OUTPUTS"
  b:
    after: [a]
    parameters: {{i: {{range: [0, {n}]}}}}
    run: echo "b {{{{ i }}}}" >> {{{{ ledger }}}}
  c:
    parameters: {{j: {{range: [0, {n}]}}}}
    run: echo "c {{{{ j }}}}" >> {{{{ ledger }}}}{c_extra}
  d:
    after: [c]
    parameters: {{j: {{range: [0, {n}]}}}}
    run: echo "d {{{{ j }}}}" >> {{{{ ledger }}}}
  total:
    after: [b, d]
    run: echo "total 0" >> {{{{ ledger }}}}
"""


def ledger(path: Path) -> Counter:
    out = Counter(tuple(line.split()) for line in path.read_text().splitlines()) if path.exists() else Counter()
    path.unlink(missing_ok=True)
    return out


def members(node, lo, hi):
    return Counter({(node, str(i)): 1 for i in range(lo, hi)})


def write(tmp_path, n, c_extra=""):
    wf = tmp_path / "wf.yaml"
    wf.write_text(WF.format(ledger=tmp_path / "ledger", n=n, c_extra=c_extra))
    return wf


def run(tmp_path, wf, name, *extra, ok=True):
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "runs" / name, "--json", *extra, cwd=tmp_path,
                           timeout=300)
    assert "Traceback" not in err, err
    assert (rc == 0) == ok, (rc, out, err)
    return json.loads(out.strip().splitlines()[-1]) if out.strip() else None


def test_widened_and_one_command_changed_runs_exactly_what_changed(tmp_path):
    led = tmp_path / "ledger"
    res = run(tmp_path, write(tmp_path, 100), "r1")
    assert "reused" not in res  # nothing to reuse the first time
    first = ledger(led)
    assert first == members("a", 0, 100) + members("b", 0, 100) + members("c", 0, 100) + members("d", 0, 100) + \
        Counter({("total", "0"): 1})

    # widened to 0..150, c's command changed: the plan says so before anything runs
    wf = write(tmp_path, 150, c_extra="; echo v2 > /dev/null")
    rc, out, err = run_cli("plan", wf, "--reuse-from", tmp_path / "runs", "--json", "--explain", cwd=tmp_path)
    assert rc == 0, err
    nodes = {n["id"]: n for n in json.loads(out)["nodes"]}
    assert {k: (n["reused"], n["run"]) for k, n in nodes.items()} == {
        "a": (100, 50), "b": (100, 50), "c": (0, 150), "d": (0, 150), "total": (0, 1)}
    assert nodes["a"]["why"] == {"no earlier run made a member with its key (new, or its command, parameters, "
                                 "environment or inputs changed)": [[100, 150]]}
    assert list(nodes["d"]["why"]) == ["a member it waits for runs"]

    res = run(tmp_path, wf, "r2")
    ran = ledger(led)
    # exactly: the new members of a and b, every member of c and of d (c changed), and total
    assert ran == members("a", 100, 150) + members("b", 100, 150) + members("c", 0, 150) + members("d", 0, 150) + \
        Counter({("total", "0"): 1})
    assert res["reused"] == {"a": 100, "b": 100} and res["totals"]["done"] == 601

    # the journal says it compactly: one record per node and lending run, runs of members
    recs = [r for r in read_journal(tmp_path / "runs" / "r2") if r["e"] == "reused"]
    assert [(r["n"], r["r"], r["from"]) for r in recs] == [("a", [[0, 100, 0]], res_id(tmp_path, "r1")),
                                                            ("b", [[0, 100, 0]], res_id(tmp_path, "r1"))]
    # a reused member keeps its outputs; show and trace say where it came from
    rc, out, err = run_cli("show", tmp_path / "runs" / "r2", "--node", "a", "--json", cwd=tmp_path)
    shown = {m["member"]: m for m in json.loads(out)}
    assert shown[7]["outputs"] == {"sq": "49"} and shown[7]["reason"] == "reused" and shown[7]["attempts"] == 0
    assert shown[7]["reused_from"] == {"run": res_id(tmp_path, "r1"), "member": 7}
    assert shown[120]["attempts"] == 1 and "reason" not in shown[120] and shown[120]["outputs"] == {"sq": "14400"}
    rc, out, err = run_cli("status", tmp_path / "runs" / "r2", cwd=tmp_path)
    assert "of the done, reused from earlier runs, not run: a 100, b 100" in out
    rc, out, err = run_cli("trace", tmp_path / "runs" / "r2", "--json", cwd=tmp_path)
    trace = {(t["node"], t["member"]): t for t in map(json.loads, out.splitlines())}  # (JSON lines)
    assert trace[("b", 3)]["reason"] == "reused" and trace[("b", 3)]["attempt"] == 0
    assert trace[("b", 3)]["why"] == f"reused from run {res_id(tmp_path, 'r1')} member 3"

    # a third run of the same file: everything is reused, and no pilot is started for it
    res = run(tmp_path, wf, "r3")
    assert ledger(led) == Counter()
    assert res["reused"] == {"a": 150, "b": 150, "c": 150, "d": 150, "total": 1}
    assert not any((tmp_path / "runs" / "r3" / "pilots").iterdir())
    # --fresh runs everything again
    run(tmp_path, wf, "r4", "--fresh")
    assert sum(ledger(led).values()) == 601


def res_id(tmp_path, name):
    return json.loads((tmp_path / "runs" / name / "run.json").read_text())["run_id"]


PROD = """\
name: made
properties: {{ledger: {ledger}}}
nodes:
  make:
    parameters: {{i: {{range: [0, 10]}}}}
    products: ["out/{{{{ i }}}}.dat"]
    run: echo "make {{{{ i }}}}" >> {{{{ ledger }}}}; echo {{{{ i }}}} > "$PWE_WORKSPACE/out/{{{{ i }}}}.dat"
  use:
    after: [make]
    parameters: {{i: {{range: [0, 10]}}}}
    run: echo "use {{{{ i }}}}" >> {{{{ ledger }}}}
"""


def test_a_product_deleted_or_changed_reruns_that_member_and_its_dependants(tmp_path):
    led, ws = tmp_path / "ledger", tmp_path / "ws"
    (ws / "out").mkdir(parents=True)
    wf = tmp_path / "wf.yaml"
    wf.write_text(PROD.format(ledger=led))
    run(tmp_path, wf, "r1", "--workspace", ws)
    assert sum(ledger(led).values()) == 20
    (ws / "out" / "3.dat").unlink()
    (ws / "out" / "6.dat").write_text("changed by hand\n")  # (exists: products alone would take it as made)
    rc, out, err = run_cli("plan", wf, "--workspace", ws, "--reuse-from", tmp_path / "runs", "--explain",
                           cwd=tmp_path)
    assert rc == 0, err
    assert "2 run: a product it made" not in out  # (two reasons, one member each)
    assert "1 run: a product it made is gone: members 3" in out
    assert "1 run: a product it made was changed since: members 6" in out
    res = run(tmp_path, wf, "r2", "--workspace", ws)
    assert ledger(led) == Counter({("make", "3"): 1, ("make", "6"): 1, ("use", "3"): 1, ("use", "6"): 1})
    assert res["reused"] == {"make": 8, "use": 8} and "complete" not in res
    assert (ws / "out" / "6.dat").read_text() == "6\n"


def test_a_tampered_record_is_not_reused_and_the_plan_says_why(tmp_path):
    led = tmp_path / "ledger"
    wf = write(tmp_path, 5)
    run(tmp_path, wf, "r1")
    assert sum(ledger(led).values()) == 21
    record = tmp_path / "runs" / "r1" / "reusable.json"
    body = json.loads(record.read_text())
    body["nodes"]["a"]["out"]["2"] = {"sq": "5"}  # a forged output
    record.write_text(json.dumps(body))
    rc, out, err = run_cli("plan", wf, "--reuse-from", tmp_path / "runs", "--explain", cwd=tmp_path)
    assert rc == 0, err
    assert "does not match its signature" in out
    res = run(tmp_path, wf, "r2")
    assert sum(ledger(led).values()) == 21 and "reused" not in res  # everything ran again
    rc, out, err = run_cli("show", tmp_path / "runs" / "r2", "--node", "a", "--json", cwd=tmp_path)
    assert {m["member"]: m["outputs"] for m in json.loads(out)}[2] == {"sq": "4"}
    # keys swapped in from elsewhere do not verify either (r2's record is good: r2 lends)
    keys = tmp_path / "runs" / "r2" / "reusable.keys"
    blob = bytearray(keys.read_bytes())
    blob[0] ^= 1
    keys.write_bytes(bytes(blob))
    res = run(tmp_path, wf, "r3")
    assert sum(ledger(led).values()) == 21 and "reused" not in res


def test_reuse_false_and_inputs(tmp_path):
    """A node that says reuse: false always runs, and so do its dependants; a member whose
    input file changed runs, the others are reused."""
    led, ws = tmp_path / "ledger", tmp_path / "ws"
    ws.mkdir()
    for k in range(3):
        (ws / f"in{k}.txt").write_text(f"input {k}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"""\
name: inputs
nodes:
  read:
    parameters: {{k: [0, 1, 2]}}
    inputs: ["in{{{{ k }}}}.txt"]
    run: echo "read {{{{ k }}}}" >> {led}
  dice:
    reuse: false
    run: echo "dice 0" >> {led}
  after_dice:
    after: [dice]
    run: echo "after_dice 0" >> {led}
""")
    run(tmp_path, wf, "r1", "--workspace", ws)
    assert sum(ledger(led).values()) == 5
    (ws / "in1.txt").write_text("input 1, edited\n")
    res = run(tmp_path, wf, "r2", "--workspace", ws)
    assert ledger(led) == Counter({("read", "1"): 1, ("dice", "0"): 1, ("after_dice", "0"): 1})
    assert res["reused"] == {"read": 2}
    rc, out, err = run_cli("plan", wf, "--workspace", ws, "--reuse-from", tmp_path / "runs" / "r2", "--explain",
                           cwd=tmp_path)
    assert "1 run: its node says reuse: false: members 0" in out and "reuse: 3 would be reused, 0 would run" in out


def test_reuse_from_another_runs_root(tmp_path):
    led = tmp_path / "ledger"
    wf = write(tmp_path, 4)
    run(tmp_path, wf, "r1")
    ledger(led)
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "elsewhere" / "r2", "--reuse-from",
                           tmp_path / "runs", "--json", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    assert ledger(led) == Counter() and json.loads(out.strip().splitlines()[-1])["totals"]["done"] == 17
    # without it, a run in another runs root finds nothing to reuse
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "third" / "r3", "--json", cwd=tmp_path, timeout=300)
    assert rc == 0 and sum(ledger(led).values()) == 17


def test_a_reused_members_logs_are_the_lending_members(tmp_path):
    """`pwe logs` of a reused member reads the output of the member it was reused from, in
    the run that lent it (and through a run that reused it in turn)."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: talk\nnodes:\n  a:\n    parameters: {i: {range: [0, 3]}}\n"
                  "    run: echo \"said {{ i }}\"; echo \"warned {{ i }}\" >&2\n")
    for name in ("first", "second", "third"):
        rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "runs" / name, cwd=tmp_path, timeout=300)
        assert rc == 0, err
    assert "3 reused" in out, out
    rc, out, err = run_cli("logs", tmp_path / "runs" / "third", "a:2", "--stdout", "--stderr", cwd=tmp_path)
    assert rc == 0, err
    assert "said 2\n" in out and "warned 2\n" in out, out
    assert str(Path("runs") / "first" / "pilots") in out, out  # (where it was written: the first run's stream)


def test_a_members_key_is_the_same_whether_its_parameters_texts_are_tabled_or_made_as_they_come(tmp_path,
                                                                                              monkeypatch):
    """pwe/planning/reuse.py makes each parameter's texts once (a table) only where each
    is used twice or more (a product's shorter parameters), else as each member comes (a
    zip, the one parameter of a sweep): the same keys either way, so that what earlier
    runs recorded is still lent."""
    from pwe.planning import reuse
    from pwe.planning.plan import plan_workflow

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: keys\nnodes:\n"
                  "  prod: {parameters: {a: [x, 'y z', 1.5], b: {range: [0, 40]}, c: [true, false]}, run: echo}\n"
                  "  zipped: {parameters: {p: [1, 2, 3], q: [u, v, w]}, combine: zip, run: echo}\n"
                  "  sweep: {parameters: {i: {range: [0, 500]}}, run: echo}\n"
                  "  after: {after: [prod], parameters: {b: {range: [0, 40]}}, run: echo}\n")
    plan = plan_workflow(str(wf))
    tabled, _ = reuse.keys(plan, tmp_path)
    made, _ = reuse.keys(plan, tmp_path, frozen=False)
    monkeypatch.setattr(reuse, "_TABLE_MOST", 0)  # (no table at all: every text as it comes)
    untabled, _ = reuse.keys(plan, tmp_path)
    assert set(tabled) == {"prod", "zipped", "sweep", "after"}
    for nid, blob in tabled.items():
        assert len(blob) == plan.nodes[nid].size * reuse.KEY_BYTES
        assert blob == untabled[nid] == bytes(made[nid]), nid
        assert len({reuse.key_of(blob, i) for i in range(plan.nodes[nid].size)}) == plan.nodes[nid].size, nid
