"""The quickstart and the wide example end to end on this machine: `pwe run`, then what
`pwe status`, `show` and `logs` say of the run (and the hints `pwe run` prints), and the same
run through the Python API. Real engine, pilot and member processes; nothing is mocked; each
run lives under the test's tmp_path."""

from __future__ import annotations

import json

import yaml

from helpers import EXAMPLES, example, mdir, no_traceback, output, pwe, read_journal, status


def test_quickstart_end_to_end(tmp_path):
    wf = example(tmp_path, "quickstart.yaml")
    rc, out, err = pwe("run", wf, cwd=tmp_path)
    assert rc == 0, f"quickstart run failed:\n{out}\n{err}"
    no_traceback(err)
    runs = [p for p in (tmp_path / "pwe-runs").iterdir()]
    assert len(runs) == 1, f"expected one run under ./pwe-runs, found {runs}"
    d = runs[0]
    run_id = d.name
    assert run_id.startswith("quickstart-")
    assert run_id in out + err

    # status, by run id (found under ./pwe-runs of the cwd)
    rc, out, err = pwe("status", run_id, "--json", cwd=tmp_path)
    assert rc == 0, err
    st = json.loads(out)
    assert st["totals"]["done"] == 14
    assert sum(v for k, v in st["totals"].items() if k != "done") == 0
    assert {n: c["done"] for n, c in st["nodes"].items()} == {"prepare": 1, "simulate": 12, "analyze": 1}
    assert st["phase"] == "succeeded"

    # show: members with parameters, state, attempts, exit status and outputs
    rc, out, err = pwe("show", run_id, "--json", cwd=tmp_path)
    assert rc == 0, err
    recs = json.loads(out)
    assert len(recs) == 14
    sims = [r for r in recs if r["node"] == "simulate"]
    assert len(sims) == 12
    seen = set()
    for r in sims:
        p = r["parameters"]
        T, seed = p["temperature"], p["seed"]
        seen.add((T, seed))
        assert r["state"] == "done" and r["attempts"] == 1 and r["exit_status"] == 0, r
        assert r["outputs"] == {"energy": str(T * 3 + seed)}, r
    assert seen == {(T, s) for T in (300, 350, 400) for s in range(4)}
    assert all(r["state"] == "done" for r in recs)

    # logs: that member's stdout
    rc, out, err = pwe("logs", run_id, "simulate[2]", cwd=tmp_path)
    assert rc == 0, err
    assert "T=300 seed=2 steps=1000" in out
    assert "seed=3" not in out and "seed=1" not in out
    rc, out, err = pwe("logs", run_id, "simulat:2", cwd=tmp_path)
    assert rc == 2 and err.strip() == (f"run {run_id} has no member output for node 'simulat' (did you mean "
                                       "'simulate'?); nodes with output: analyze, prepare, simulate"), err

    # the run directory keeps everything
    assert (d / "workflow.yaml").read_bytes() == wf.read_bytes()
    info = json.loads((d / "run.json").read_text())
    assert info["run_id"] == run_id
    journal = read_journal(d)
    assert sum(1 for r in journal if r["e"] == "end") == 14
    for name in ("tasks.jsonl", "events.jsonl", "pilot.log"):
        assert (d / "pilots" / "p1" / name).is_file(), f"pilots/p1/{name} missing"
    events = [json.loads(line) for line in (d / "pilots" / "p1" / "events.jsonl").read_text().splitlines()]
    assert sum(1 for e in events if e["k"] == "end") == 14
    for i in range(12):
        T, seed = (300, 350, 400)[i // 4], i % 4
        md = mdir(d, "simulate", i)
        assert output(d, "simulate", i) == f"T={T} seed={seed} steps=1000\n"
        assert output(d, "simulate", i, "stderr") == "", "it wrote nothing on stderr"
        # its outputs go with its end into the journal; no file of them stays ($PWE_OUTPUTS is on the node)
        assert not (md / "outputs").exists()
        assert [r["out"] for r in journal if r["e"] == "end" and r["n"] == "simulate" and r["m"] == i] == \
            [{"energy": str(T * 3 + seed)}]
    assert output(d, "prepare", 0) == "preparing 1000 steps\n"
    assert output(d, "analyze", 0) == "analyzing 1000 steps of 12 simulations\n"
    assert output(d, "analyze", 0, "stderr") == ""



def test_python_api_run_workflow(tmp_path):
    import pwe as api
    from pwe.observe.results import load_state

    res = api.run_workflow(example(tmp_path, "quickstart.yaml"), {"nsteps": 5}, run_dir=tmp_path / "run")
    assert res.ok is True
    sims = res.members("simulate")
    assert len(sims) == 12
    for r in sims:
        T, seed = r["parameters"]["temperature"], r["parameters"]["seed"]
        assert r["state"] == "done" and r["attempts"] == 1 and r["exit_status"] == 0
        assert r["outputs"] == {"energy": str(T * 3 + seed)}
    assert output(res.dir, "prepare", 0) == "preparing 5 steps\n"
    assert "steps=5" in output(res.dir, "simulate", 0)
    _, state = load_state(res.dir)
    assert state.finished_ok is True
    assert state.totals()[4] == 14



LEDGER_PAYLOAD = (
    's=$EPOCHREALTIME; echo "$PWE_NODE $PWE_MEMBER ${PWE_PARAM_I:--} ${PWE_PARAM_REP:--} $s $EPOCHREALTIME"'
    " >> {{ ledger }}"
)



def test_wide_graph_order(tmp_path):
    doc = yaml.safe_load((EXAMPLES / "wide.yaml").read_text())
    for node in doc["nodes"].values():
        node["run"] = LEDGER_PAYLOAD
    wf = tmp_path / "wide.yaml"
    wf.write_text(yaml.safe_dump(doc, sort_keys=False))
    ledger = tmp_path / "ledger.txt"
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--set", f"ledger={ledger}", "--run-dir", run, cwd=tmp_path, timeout=60)
    assert rc == 0, err
    rows = [line.split() for line in ledger.read_text().splitlines()]
    assert len(rows) == 2804, f"{len(rows)} member records, expected 2804"
    recs: dict[tuple[str, int], tuple[str, str, float, float]] = {}
    for node, m, i, rep, s, e in rows:
        key = (node, int(m))
        assert key not in recs, f"{node}[{m}] ran more than once"
        recs[key] = (i, rep, float(s), float(e))
    counts: dict[str, int] = {}
    for node, _ in recs:
        counts[node] = counts.get(node, 0) + 1
    assert counts == {"start": 1, "prep": 700, "sim": 1400, "post": 700, "reduce": 2, "final": 1}

    # by parameter values, independently of how pwe numbers members
    by = {}
    for (node, _m), (i, rep, s, e) in recs.items():
        by[(node, i, rep)] = (s, e)
    assert {k for k in by if k[0] == "sim"} == {("sim", str(i), str(r)) for i in range(700) for r in (0, 1)}
    start_end = by[("start", "-", "-")][1]
    bad = []
    for i in range(700):
        si = str(i)
        prep_s, prep_e = by[("prep", si, "-")]
        if prep_s < start_end:
            bad.append(f"prep[i={i}] started before start ended")
        sims = [by[("sim", si, r)] for r in ("0", "1")]
        for r, (s, _) in enumerate(sims):
            if s < prep_e:
                bad.append(f"sim[i={i},rep={r}] started before prep[i={i}] ended")
        post_s, _ = by[("post", si, "-")]
        if post_s < max(e for _, e in sims):
            bad.append(f"post[i={i}] started before both sim[i={i}] ended")
    last_post = max(e for (n, _, _), (_, e) in by.items() if n == "post")
    reduce = [(s, e) for (n, _, _), (s, e) in by.items() if n == "reduce"]
    for s, _ in reduce:
        if s < last_post:
            bad.append("a reduce member started before every post ended")
    final_s = by[("final", "-", "-")][0]
    if final_s < max(e for _, e in reduce):
        bad.append("final started before both reduce ended")
    assert not bad, f"{len(bad)} dependency violations, first: {bad[:5]}"
    st = status(run)
    assert st["totals"]["done"] == 2804 and st["phase"] == "succeeded"



def test_hints_printed_by_run_work_with_run_dir(tmp_path, write):
    """`pwe run` ends a failed run with `see: pwe show RUN-ID --state failed`; that
    command, typed as printed from the same directory, must work."""
    wf = write("name: hint\nnodes:\n  a:\n    parameters: {i: [1, 2]}\n"
               "    run: |\n      echo warming up >&2\n      echo 'no such input: x'{{ i }} >&2\n      exit {{ i }}\n")
    rc, out, err = pwe("run", wf, "--run-dir", tmp_path / "elsewhere" / "r1", cwd=tmp_path)
    assert rc == 1, err
    # the first failed members, each with its exit status and the last line of its stderr
    assert "  a[0] failed: exit 1  | no such input: x1\n  a[1] failed: exit 2  | no such input: x2\n" in err, err
    hints = [line for line in err.splitlines() if line.startswith("see: pwe ")]
    assert [h.split()[2] for h in hints] == ["show", "logs"], f"hints on stderr:\n{err}"
    for hint in hints:
        words = hint.split()[2:]  # after "see: pwe"
        # (pwe logs into a pipe gives stdout alone, as a terminal does not: the words are on stderr)
        rc, out, err = pwe(*words, *(["--stderr"] if words[0] == "logs" else []), cwd=tmp_path)
        assert rc == 0, (
            f"BUG pwe/cli/running.py _follow prints `{hint[5:]}` but that fails (exit {rc}): {err.strip()} -- the run id is "
            "looked up only under ./pwe-runs (rundir.find); print the run directory when --run-dir put it elsewhere")
        assert ("exit=1" in out) if words[0] == "show" else ("no such input: x1" in out), out



def test_logs_names_a_member_that_does_not_exist(tmp_path, write):
    """`pwe logs RUN simulate[99]` on a node of 12 members: no such member (exit 2), not
    "has not run yet"; a member that exists but never ran still says "has not run yet"."""
    wf = write("name: lg\nnodes:\n  simulate:\n    parameters: {T: [1, 2, 3], seed: {range: [0, 4]}}\n"
               "    run: echo T={{ T }} seed={{ seed }}\n"
               "  bad:\n    run: exit 3\n  after_bad:\n    after: [bad]\n    run: echo never\n")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 1, err
    for ask in ("simulate[99]", "simulate:12"):
        rc, out, err = pwe("logs", run, ask, cwd=tmp_path)
        no_traceback(err)
        assert (rc, err.strip()) == (2, f"{ask}: no such member (simulate has 12)"), (rc, err)
    rc, out, err = pwe("logs", run, "simulate:11", cwd=tmp_path)
    assert rc == 0 and "T=3 seed=3" in out, err
    # after_bad exists (1 member) but was skipped: it has not run, and its node has no output at all
    rc, out, err = pwe("logs", run, "after_bad:0", cwd=tmp_path)
    assert rc == 1 and err.startswith("after_bad[0] has not run yet"), (rc, err)
    rc, out, err = pwe("logs", run, "after_bad:1", cwd=tmp_path)
    assert (rc, err.strip()) == (2, "after_bad:1: no such member (after_bad has 1)"), (rc, err)
    # without state.json (an engine killed before its first snapshot) the plan answers
    (run / "state.json").unlink()
    rc, out, err = pwe("logs", run, "simulate[99]", cwd=tmp_path)
    assert (rc, err.strip()) == (2, "simulate[99]: no such member (simulate has 12)"), (rc, err)
