"""Completion by products (issue 14, from Row), end to end with real processes.

A node names ``products:``; a member whose products all exist in the workspace is
complete and does not run again. Every test proves what ran from the members' own
ledger (a line each member appends as it runs), never from pwe's word alone.
"""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers import EXAMPLES, ROOT, read_journal, run_cli

# make[i] writes out/<i // 10>/<i>.dat (and appends to the ledger); b[i] waits for a[i] and
# writes res/<i>.txt; total (a barrier, no products) runs every time.
WF = """\
name: prod
properties: {{ledger: {ledger}}}
nodes:
  a:
    reuse: false  # (completion by products alone: reuse across runs is tests/planning/test_reuse.py's)
    parameters: {{i: {{range: [0, {n}]}}}}
    products: ["out/{{{{ i // 10 }}}}/{{{{ i }}}}.dat"]
    run: |
      echo "a $PWE_MEMBER" >> {{{{ ledger }}}}
      mkdir -p "$PWE_WORKSPACE/out/{{{{ i // 10 }}}}" && echo {{{{ i }}}} > "$PWE_WORKSPACE/out/{{{{ i // 10 }}}}/{{{{ i }}}}.dat"
  b:
    after: [a]
    reuse: false
    parameters: {{i: {{range: [0, {n}]}}}}
    products: ["res/{{{{ i }}}}.txt"]
    run: |
      echo "b $PWE_MEMBER" >> {{{{ ledger }}}}
      mkdir -p "$PWE_WORKSPACE/res" && echo done > "$PWE_WORKSPACE/res/{{{{ i }}}}.txt"
  total:
    after: [b]
    reuse: false
    run: echo "total 0" >> {{{{ ledger }}}}
"""


def ledger(path: Path) -> Counter:
    return Counter(tuple(line.split()) for line in path.read_text().splitlines()) if path.exists() else Counter()


def setup(tmp_path, n=30):
    ws, led = tmp_path / "ws", tmp_path / "ledger"
    ws.mkdir()
    wf = tmp_path / "wf.yaml"
    wf.write_text(WF.format(ledger=led, n=n))
    return wf, ws, led


def run(wf, ws, tmp_path, name, *extra):
    rc, out, err = run_cli("run", wf, "--workspace", ws, "--run-dir", tmp_path / name, "--json", *extra,
                           cwd=tmp_path, timeout=180)
    assert "Traceback" not in err, err
    return rc, json.loads(out.strip().splitlines()[-1]) if out.strip() else None, err


def test_a_second_run_does_only_what_is_missing(tmp_path):
    wf, ws, led = setup(tmp_path)
    rc, res, err = run(wf, ws, tmp_path, "r1")
    assert rc == 0, err
    first = ledger(led)
    assert first == Counter({**{("a", str(i)): 1 for i in range(30)}, **{("b", str(i)): 1 for i in range(30)},
                             ("total", "0"): 1})
    assert "complete" not in res  # nothing was there before

    # delete a's products of 3, 17, 18 and b's product of 5 (whose a is still there)
    for p in ("out/0/3.dat", "out/1/17.dat", "out/1/18.dat", "res/5.txt"):
        (ws / p).unlink()
    rc, out, err = run_cli("plan", wf, "--workspace", ws, "--json", cwd=tmp_path)
    assert rc == 0, err
    counts = {n["id"]: (n["complete"], n["eligible"], n["waiting"]) for n in json.loads(out)["nodes"]}
    # a: 27 complete, 3 to run; b: 29 complete (b[3], b[17], b[18] kept theirs), b[5] eligible
    # now (its a[5] is complete); total waits
    assert counts == {"a": (27, 3, 0), "b": (29, 1, 0), "total": (0, 0, 1)}

    led.unlink()
    rc, res, err = run(wf, ws, tmp_path, "r2")
    assert rc == 0, err
    again = ledger(led)
    # exactly the missing ones ran, once each, and what depends on nothing missing did not
    assert again == Counter({("a", "3"): 1, ("a", "17"): 1, ("a", "18"): 1, ("b", "5"): 1, ("total", "0"): 1})
    assert res["complete"] == {"a": 27, "b": 29} and res["totals"]["done"] == 61
    # b[3], b[17], b[18] still had their products: complete (Row's rule: existence only)
    recs = [r for r in read_journal(tmp_path / "r2") if r["e"] == "complete"]
    # one record per node, each holding runs of consecutive members, not one per member
    assert [(r["n"], r["r"]) for r in recs] == [("a", [[0, 3], [4, 17], [19, 30]]), ("b", [[0, 5], [6, 30]])]

    # pwe show and pwe status tell complete (products) apart from ran-and-succeeded
    rc, out, err = run_cli("show", tmp_path / "r2", "--node", "a", "--json", cwd=tmp_path)
    members = {m["member"]: m for m in json.loads(out)}
    assert members[3]["state"] == "done" and members[3]["attempts"] == 1 and not members[3].get("complete")
    assert members[4]["state"] == "done" and members[4]["attempts"] == 0 and members[4]["complete"]
    assert "complete (products)" in members[4]["why"]
    rc, out, err = run_cli("show", tmp_path / "r2", "-q", "node=b; attempts=1", "--json", cwd=tmp_path)
    assert rc == 0 and [m["member"] for m in json.loads(out)] == [5]
    rc, out, err = run_cli("status", tmp_path / "r2", cwd=tmp_path)
    assert rc == 0 and "complete (products), not run: a 27, b 29" in out
    rc, out, err = run_cli("status", tmp_path / "r2", "--json", cwd=tmp_path)
    assert json.loads(out)["complete"] == {"a": 27, "b": 29}

    # a third run with everything there runs only the node without products
    led.unlink()
    rc, res, err = run(wf, ws, tmp_path, "r3")
    assert rc == 0, err
    assert ledger(led) == Counter({("total", "0"): 1})


def test_a_member_that_exits_0_without_its_product_fails_with_the_reason(tmp_path):
    led, ws = tmp_path / "ledger", tmp_path / "ws"
    ws.mkdir()
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"""\
name: lazy
nodes:
  a:
    parameters: {{i: {{range: [0, 4]}}}}
    products: ["r{{{{ i }}}}.txt", "log/{{{{ i }}}}"]
    run: |
      echo "a $PWE_MEMBER" >> {led}
      touch "$PWE_WORKSPACE/r{{{{ i }}}}.txt"
      if [ {{{{ i }}}} != 2 ]; then mkdir -p "$PWE_WORKSPACE/log" && touch "$PWE_WORKSPACE/log/{{{{ i }}}}"; fi
  after_a:
    after: [a]
    parameters: {{i: {{range: [0, 4]}}}}
    run: echo "after_a $PWE_MEMBER" >> {led}
""")
    rc, res, err = run(wf, ws, tmp_path, "r1")
    assert rc == 1
    assert ledger(led) == Counter({("a", "0"): 1, ("a", "1"): 1, ("a", "2"): 1, ("a", "3"): 1,
                                   ("after_a", "0"): 1, ("after_a", "1"): 1, ("after_a", "3"): 1})
    assert res["totals"]["failed"] == 1 and res["totals"]["skipped"] == 1
    why = f"exited 0 without making its product {ws.resolve()}/log/2"
    assert why in err  # the run's last lines name it
    rc, out, _ = run_cli("show", tmp_path / "r1", "--state", "failed", "--json", cwd=tmp_path)
    [m] = json.loads(out)
    assert (m["node"], m["member"], m["exit_status"], m["why"]) == ("a", 2, 1, why)


def test_retry_and_resume_look_again_for_products_made_meanwhile(tmp_path):
    """Products made by hand (or by another run into the workspace) after a run began count
    when it is resumed: the members not begun whose products are there now are complete and
    do not run (from the ledger). A member that began and failed is not complete by a
    product made meanwhile: retried, it runs again (issue 45: it may have left that file
    half made)."""
    import signal

    from helpers import alive, engine_pid, wait_for

    led, ws = tmp_path / "ledger", tmp_path / "ws"
    ws.mkdir()
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"""\
name: again
nodes:
  a:
    parameters: {{i: {{range: [0, 4]}}}}
    products: ["a{{{{ i }}}}.txt"]
    run: |
      echo "a $PWE_MEMBER" >> {led}
      sleep 0.4
      if [ {{{{ i }}}} != 2 ] || [ "$PWE_ATTEMPT" -gt 1 ]; then touch "$PWE_WORKSPACE/a{{{{ i }}}}.txt"; else exit 3; fi
  b:
    after: [a]
    parameters: {{i: {{range: [0, 4]}}}}
    products: ["b{{{{ i }}}}.txt"]
    run: echo "b $PWE_MEMBER" >> {led}; touch "$PWE_WORKSPACE/b{{{{ i }}}}.txt"
""")
    # retry: a[2] failed; a product is made by hand; retried, it runs again all the same
    rc, res, err = run(wf, ws, tmp_path, "r1")
    assert rc == 1 and res["totals"]["failed"] == 1
    (ws / "a2.txt").touch()
    rc, out, err = run_cli("retry", tmp_path / "r1", cwd=tmp_path, timeout=120)
    assert rc == 0, err
    assert ledger(led) == Counter({("a", str(i)): 1 for i in range(4)} | {("b", str(i)): 1 for i in range(4)}
                                  | {("a", "2"): 2})
    rc, out, _ = run_cli("show", tmp_path / "r1", "--json", cwd=tmp_path)
    shown = {(m["node"], m["member"]): m for m in json.loads(out)}
    assert not shown[("a", 2)].get("complete") and shown[("a", 2)]["state"] == "done"
    # resume: the engine killed while b waits for a; b[3]'s product made meanwhile
    for p in ws.iterdir():
        if p.name != ".pwe":  # (pwe's own: the workflow's live-run lock)
            p.unlink()
    led.unlink()
    run_dir = tmp_path / "r2"
    rc, out, err = run_cli("submit", wf, "--workspace", ws, "--cores", "1", "--run-dir", run_dir, cwd=tmp_path)
    assert rc == 0, err
    wait_for(lambda: led.exists() and "a 0" in led.read_text(), what="a[0] to start")
    engine = engine_pid(run_dir)
    os.kill(engine, signal.SIGKILL)
    (ws / "b3.txt").touch()
    wait_for(lambda: not alive(engine), what="the killed engine to be gone")
    rc, out, err = run_cli("resume", run_dir, cwd=tmp_path, timeout=120)
    assert rc == 1, err  # (a[2] fails: its first attempt)
    ran = ledger(led)
    assert ("b", "3") not in ran and ran[("b", "0")] == 1 and ran[("a", "3")] == 1, ran


def test_pwe_workspace_is_in_every_members_environment(tmp_path, write):
    ws = tmp_path / "ws"
    ws.mkdir()
    wf = write("name: env\nworkspace: ws\nnodes:\n  a:\n    run: echo \"$PWE_WORKSPACE\" > out.txt\n")
    rc, _, err = run_cli("run", wf, "--run-dir", tmp_path / "r", cwd=tmp_path)
    assert rc == 0, err
    # the workflow's 'workspace:' is relative to the workflow file's directory
    assert (tmp_path / "r" / "members" / "a" / "out.txt").read_text() == f"{ws.resolve()}\n"  # (its node's directory)
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["workspace"] == str(ws.resolve())


def test_the_xml_form_plans_the_same_products(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "out").mkdir()
    (tmp_path / "ws" / "out" / "1.dat").write_text("x")
    yaml = tmp_path / "p.yaml"
    yaml.write_text('name: p\nworkspace: ws\nnodes:\n  a:\n    parameters: {i: {range: [0, 3]}}\n'
                    '    products: ["out/{{ i }}.dat"]\n    run: echo {{ i }}\n')
    xml = tmp_path / "p.xml"
    xml.write_text('<workflow name="p" workspace="ws">\n  <node id="a">\n'
                   '    <parameter name="i"><range start="0" stop="3"/></parameter>\n'
                   '    <product>out/{{ i }}.dat</product>\n    <run>echo {{ i }}</run>\n  </node>\n</workflow>\n')
    plans = []
    for f in (yaml, xml):
        rc, out, err = run_cli("plan", f, "--json", cwd=tmp_path)
        assert rc == 0, err
        node = json.loads(out)["nodes"][0]
        plans.append((node["products"], node["complete"], node["eligible"], node["waiting"]))
    assert plans[0] == plans[1] == (["out/{{ i }}.dat"], 1, 2, 0)


BAD = [
    ("not a list", 'products: "out.dat"', 6, "products"),
    ("empty list", "products: []", 6, "products"),
    ("template error", 'products: ["out/{{ i }.dat"]', 6, "template error in products[0]"),
    ("undefined name", 'products: ["out/{{ j }}.dat"]', 6, "undefined name 'j'"),
    ("absolute", 'products: ["/etc/{{ i }}"]', 6, "not a path inside the workspace"),
    ("climbs out", 'products: ["../{{ i }}.dat"]', 6, "not a path inside the workspace"),
    ("climbs out later", 'products: ["a/../../{{ i }}.dat"]', 6, "not a path inside the workspace"),
    ("only the last member", 'products: ["{{ \'..\' if i == 2 else i }}"]', 6, "member 2's products[0]"),
    ("renders empty", "products: [\"{{ '' }}\"]", 6, "not a path inside the workspace"),
]


@pytest.mark.parametrize("case,line,lineno,phrase", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("command", ["validate", "plan", "run"])
def test_bad_products_are_one_line_exit_2_and_nothing_made(tmp_path, write, case, line, lineno, phrase, command):
    wf = write(f"name: bad\nnodes:\n  a:\n    parameters: {{i: {{range: [0, 3]}}}}\n    run: echo {{{{ i }}}}\n"
               f"    {line}\n")
    rc, out, err = run_cli(command, wf, cwd=tmp_path)
    assert rc == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"{wf}:{lineno}:") and phrase in err, err
    assert not (tmp_path / "pwe-runs").exists()  # nothing half-made


def test_a_workspace_that_is_not_a_directory_is_one_line(tmp_path, write):
    wf = write("name: w\nnodes:\n  a:\n    products: [x]\n    run: touch x\n")
    rc, out, err = run_cli("run", wf, "--workspace", tmp_path / "nope", cwd=tmp_path)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "is not a directory; make it first" in err, err
    assert not (tmp_path / "pwe-runs").exists()


def test_the_example_runs_twice_into_one_workspace(tmp_path):
    """examples/products.yaml as its comment says: the second run after one product is
    deleted runs that member (and the summary), no other."""
    ws = tmp_path / "ws"
    ws.mkdir()
    rc, out, err = run_cli("run", EXAMPLES / "products.yaml", "--workspace", ws, "--run-dir", tmp_path / "r1",
                           cwd=tmp_path)
    assert rc == 0, err
    made = sorted(str(p.relative_to(ws)) for p in ws.rglob("*.txt"))
    assert len(made) == 13 and "summary.txt" in made
    (ws / "spectra" / "T350" / "seed2.txt").unlink()
    rc, out, err = run_cli("plan", EXAMPLES / "products.yaml", "--workspace", ws, cwd=tmp_path)
    assert rc == 0 and "members: 11 complete (products), 1 eligible, 0 waiting" in out, (out, err)
    mtimes = {p: p.stat().st_mtime_ns for p in ws.rglob("seed*.txt")}
    rc, out, err = run_cli("run", EXAMPLES / "products.yaml", "--workspace", ws, "--run-dir", tmp_path / "r2",
                           cwd=tmp_path)
    assert rc == 0, err
    # (the simulate members whose products are unchanged are reused from r1: pwe.runstate.reusable)
    assert "13 done (11 reused from earlier runs, not run) of 13" in out
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())  # none of the others rewritten
    assert (ws / "spectra" / "T350" / "seed2.txt").read_text() == "T=350 seed=2 steps=100\n"
    ran = [r for r in read_journal(tmp_path / "r2") if r["e"] == "end"]
    assert sorted((r["n"], r["m"]) for r in ran) == [("simulate", 6), ("summarize", 0)]


# -- on the real SLURM: the pilot in the batch job checks the products --------------------------

def test_products_on_slurm_pilot(slurm_cluster, tmp_path):
    """Members on the `cluster` host of examples/hosts.yaml (one SLURM pilot job): the
    check at a member's end is made by the pilot inside the allocation; a second run into
    the same workspace runs only the member whose product was deleted."""
    wf, ws, led = setup(tmp_path, n=12)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def go(name):
        return subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "cluster", "--hosts",
                               str(EXAMPLES / "hosts.yaml"), "--workspace", str(ws), "--run-dir",
                               str(tmp_path / name), "--json"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)

    proc = go("r1")
    assert proc.returncode == 0, proc.stderr
    assert sum(ledger(led).values()) == 25
    assert (tmp_path / "r1" / "pilots" / "p1" / "job.sh").exists()  # a batch pilot ran them
    (ws / "out" / "0" / "7.dat").unlink()
    (ws / "res" / "9.txt").unlink()
    led.unlink()
    proc = go("r2")
    assert proc.returncode == 0, proc.stderr
    assert ledger(led) == Counter({("a", "7"): 1, ("b", "9"): 1, ("total", "0"): 1})
    assert json.loads(proc.stdout.strip().splitlines()[-1])["complete"] == {"a": 11, "b": 11}
