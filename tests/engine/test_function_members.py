"""Function members (``python: package.module:function``): real runs on this machine, each
proved from the members' own ledger (the function appends to it; its module appends to
another at its import).

What is held: parameters reach the function as typed keyword arguments, its return value
is its outputs, what it prints and its traceback are its logs, the module is imported once
per worker, the member's environment and the workspace as its directory; a worker over
its memoryPerMember, past its walltime or dead mid-call ends its member (oom, walltime, its
exit status; retried as its policy says) and is replaced, the next members run; a pilot
killed -9 while calls run: no member completes twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from helpers import ROOT, alive, kill_pilot, on_ssh_nodes, output, read_journal, run_cli, show, wait_for

ENV_PATH = str(ROOT)

MODULE = '''
import os, sys, time

with open(os.environ["IMPORTS"], "a") as fh:   # (once per worker: at its import)
    fh.write(f"{os.getpid()}\\n")


def _note(what):
    with open(os.environ["LEDGER"], "a") as fh:
        fh.write(f"{what} {os.environ['PWE_NODE']} {os.environ['PWE_MEMBER']} {os.environ['PWE_ATTEMPT']}\\n")


def fit(x, y, name):
    _note("start")
    print(f"fitting x={x!r} y={y!r} name={name!r}")
    print("to stderr", file=sys.stderr)
    _note("end")
    return {"sum": x + y, "kinds": [type(x).__name__, type(y).__name__], "name": name,
            "member": os.environ["PWE_MEMBER"], "param": os.environ["PWE_PARAM_X"], "foo": os.environ["FOO"],
            "cwd": os.getcwd(), "pid": os.getpid()}


def boom(x):
    _note("start")
    if x == 1:
        raise ValueError(f"no fit for x={x}")
    _note("end")
    return {"x": x}


def bad(x):
    return [x] if x == 0 else {"ok": x}


def hog(x):
    _note("start")
    if x == 0 and os.environ["PWE_ATTEMPT"] == "1":
        block = bytearray(300 << 20)       # over its 100 MB, once: the call's peak is held against it
        for i in range(0, len(block), 4096):
            block[i] = 1
    _note("end")
    return {"pid": os.getpid()}


def hold(x):
    _note("start")
    if x == 0 and os.environ["PWE_ATTEMPT"] == "1":
        block = bytearray(300 << 20)   # held while the call goes on: the watch kills its worker mid-call
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(60)
    _note("end")
    return {"pid": os.getpid()}


def other(x):
    _note("start")
    _note("end")
    return {"pid": os.getpid(), "other": x}


def nap(x):
    _note("start")
    time.sleep(4)
    _note("end")


def slow(x):
    _note("start")
    with open(os.environ["LEDGER"] + ".pids", "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    if x == 0 or os.environ.get("ALL_SLOW"):
        time.sleep(600)
    _note("end")
    return {"pid": os.getpid()}


def crash(x):
    _note("start")
    if x == 1 and os.environ["PWE_ATTEMPT"] == "1":
        os._exit(3)
    _note("end")
    return {"pid": os.getpid()}


class _Unreadable(dict):
    def items(self):
        raise RuntimeError("items refused")


def odd(k):
    _note("start")
    _note("end")
    if k == "deep":   # (past the recursion limit of json's encoder)
        v = []
        for _ in range(5000):
            v = [v]
        return {"v": v}
    return {"items": lambda: _Unreadable(a=1), "mark": lambda: {"_pwe_invalid": "0"},
            "nan": lambda: {"v": float("nan")}}.get(k, lambda: {"ok": k})()


def big(x):
    return {"big": "x" * (20000 + x), "small": x, "nested": {"a": [1, 2.5, None, True]}}


def where(i):
    import socket

    _note("start")
    _note("end")
    return {"host": socket.gethostname(), "pid": os.getpid()}


def echo(v):
    print(v[:20])
    return {"v": v if len(v) < 1000 else v[:10], "n": len(v), "cwd": os.getcwd()}


def linger(i):
    import socket

    _note("start")
    time.sleep(0.5)
    _note("end")
    with open(os.environ["LEDGER"], "a") as fh:
        fh.write(f"on {socket.gethostname()} {os.environ['PWE_MEMBER']}\\n")
    time.sleep(2)


def gpu(x):
    return {"gpu": os.environ.get("CUDA_VISIBLE_DEVICES", "unset"), "pid": os.getpid()}


def made(x):
    _note("start")
    os.makedirs("out", exist_ok=True)
    with open(f"out/{x}.txt", "w") as fh:   # (x 2's first attempt: an empty result)
        fh.write("" if x == 2 and os.environ["PWE_ATTEMPT"] == "1" else f"made {x}")
    _note("end")
    return {"x": x, "many": "y" * (20000 if x == 3 else 1)}


def gated(x):
    _note("start")
    while not os.path.exists(os.environ["GATE"]):
        time.sleep(0.05)
    _note("end")
    return {"x": x}


def step(i):
    _note("start")
    time.sleep(0.01)
    _note("end")
'''


def _setup(tmp_path: Path, body: str) -> tuple[Path, Path, Path]:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "fits.py").write_text(MODULE)
    ledger, imports = tmp_path / "ledger", tmp_path / "imports"
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: fn\nnodes:\n  fit:\n    env: {{LEDGER: {ledger}, IMPORTS: {imports}, FOO: bar}}\n{body}")
    return wf, ledger, imports


def _run(tmp_path: Path, wf: Path, *args: str, timeout: int = 180):
    return run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", *args, cwd=tmp_path, timeout=timeout)


def _ledger(ledger: Path) -> tuple[Counter, Counter]:
    lines = [line.split() for line in ledger.read_text().splitlines()] if ledger.exists() else []
    return tuple(Counter(tuple(w[1:]) for w in lines if w[0] == what) for what in ("start", "end"))


def test_parameters_in_outputs_back_prints_in_logs_the_module_imported_once_per_worker(tmp_path):
    wf, ledger, imports = _setup(tmp_path, """    parameters: {x: {range: [0, 6]}, y: [0.5, 2.5], name: ["a b", "$(x)"]}
    python: mypkg.fits:fit
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 0, (out, err)
    starts, ends = _ledger(ledger)
    assert len(ends) == 24 and set(ends.values()) == {1} and set(starts.values()) == {1}
    run = tmp_path / "run"
    recs = {r["member"]: r for r in show(run)}
    pids = set()
    for i, r in recs.items():
        o = r["outputs"]
        x, y = r["parameters"]["x"], r["parameters"]["y"]
        assert json.loads(o["sum"]) == x + y
        assert json.loads(o["kinds"]) == ["int", "float"]  # (typed as the workflow says, not text)
        assert o["name"] == r["parameters"]["name"]  # (a string as it is; a shell's $(x) inert)
        assert (o["member"], o["param"], o["foo"]) == (str(i), str(x), "bar")
        assert o["cwd"] == str(tmp_path.resolve())  # (the workspace)
        pids.add(o["pid"])
    # two slots: at most two workers, each of which imported the module once
    imported = imports.read_text().split()
    assert len(imported) == len(set(imported)) and set(imported) == pids and len(pids) <= 2
    assert not [p for p in pids if alive(int(p))], "workers outlived their pilot"
    assert "fitting x=3 y=0.5 name='a b'" in output(run, "fit", 12)
    assert "to stderr" in output(run, "fit", 12, "stderr")


def test_an_exception_fails_the_member_with_its_traceback_in_its_logs_and_the_next_run(tmp_path):
    wf, ledger, _ = _setup(tmp_path, """    parameters: {x: {range: [0, 4]}}
    python: mypkg.fits:boom
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 1, (out, err)
    starts, ends = _ledger(ledger)
    assert set(starts) == {("fit", str(i), "1") for i in range(4)}
    assert set(ends) == {("fit", str(i), "1") for i in (0, 2, 3)}
    recs = {r["member"]: r for r in show(tmp_path / "run")}
    assert recs[1]["state"] == "failed" and recs[1]["exit_status"] == 1
    assert [recs[i]["state"] for i in (0, 2, 3)] == ["done"] * 3
    rc, logs, _ = run_cli("logs", tmp_path / "run", "fit:1", "--stderr", cwd=tmp_path)
    assert "Traceback" in logs and "ValueError: no fit for x=1" in logs and "fits.py" in logs


def test_a_return_value_that_is_no_mapping_fails_the_member_in_one_line(tmp_path):
    wf, _, _ = _setup(tmp_path, """    parameters: {x: {range: [0, 2]}}
    python: mypkg.fits:bad
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 1
    recs = {r["member"]: r for r in show(tmp_path / "run")}
    assert recs[0]["state"] == "failed" and recs[1]["state"] == "done" and recs[1]["outputs"] == {"ok": "1"}
    line = "mypkg.fits:bad returned list, not a mapping of JSON values"
    assert line in output(tmp_path / "run", "fit", 0, "stderr")
    ends = [r for r in read_journal(tmp_path / "run") if r["e"] == "end" and r.get("m") == 0]
    assert line in ends[-1].get("why", ""), ends


def test_return_values_pwe_cannot_take_fail_their_member_in_one_line_and_keep_the_worker(tmp_path):
    """A value nested past json's recursion limit, a mapping whose items() raises, NaN and a
    name of pwe's own (``_pwe_invalid``, the validate's mark): each fails its member in one
    line, in its stderr and its end's why. None of them ends the worker (the deep one did:
    its member ended as if the worker had died), so the module is imported by no more
    workers than the two slots, and the members after them are done."""
    kinds = ["deep", "a", "items", "b", "mark", "c", "nan", "d"]
    wf, ledger, imports = _setup(tmp_path, f"""    parameters: {{k: {json.dumps(kinds)}}}
    python: mypkg.fits:odd
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 1, (out, err)
    lines = {
        "deep": "mypkg.fits:odd returned v=list: not a JSON value (nested too deep)",
        "items": "mypkg.fits:odd returned a _Unreadable that could not be read: RuntimeError: items refused",
        "mark": "mypkg.fits:odd returned the key '_pwe_invalid': an output's name starting _pwe_ is pwe's own",
        "nan": "mypkg.fits:odd returned v=float: not a JSON value (Out of range float values are not JSON compliant)",
    }
    recs = {r["parameters"]["k"]: r for r in show(tmp_path / "run")}
    ends = {r["m"]: r for r in read_journal(tmp_path / "run") if r["e"] == "end"}
    for k, line in lines.items():
        r = recs[k]
        assert (r["state"], r["exit_status"]) == ("failed", 1), r
        assert ends[r["member"]]["why"] == line, ends[r["member"]]
        assert f"pwe: {line}" in output(tmp_path / "run", "fit", r["member"], "stderr")
    for k in "abcd":
        assert recs[k]["state"] == "done" and recs[k]["outputs"] == {"ok": k}, recs[k]
    starts, done = _ledger(ledger)
    assert set(done.values()) == {1} and len(done) == len(kinds)    # each called once
    assert 1 <= len(imports.read_text().split()) <= 2, imports.read_text()


def test_outputs_too_many_for_a_line_go_through_the_outputs_file_and_json_values_stay_json(tmp_path):
    wf, _, _ = _setup(tmp_path, """    parameters: {x: [0, 1]}
    python: mypkg.fits:big
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 0, (out, err)
    for r in show(tmp_path / "run"):
        x = r["parameters"]["x"]
        assert r["outputs"]["big"] == "x" * (20000 + x)
        assert r["outputs"]["small"] == str(x)
        assert json.loads(r["outputs"]["nested"]) == {"a": [1, 2.5, None, True]}


def test_a_worker_over_its_memory_fails_its_member_oom_is_replaced_and_the_retry_passes(tmp_path):
    wf, ledger, imports = _setup(tmp_path, """    parameters: {x: {range: [0, 4]}}
    python: mypkg.fits:hog
    scheduling: {memoryPerMember: 100}
    retry: {attempts: 2, on: [oom]}
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 0, (out, err)
    recs = read_journal(tmp_path / "run")
    first = [r for r in recs if r["e"] == "end" and r.get("m") == 0 and r.get("a") == 1]
    assert first and first[0].get("reason") == "oom" and "memoryPerMember 100 MB" in first[0]["why"], first
    starts, ends = _ledger(ledger)
    assert ends[("fit", "0", "2")] == 1 and all(ends[("fit", str(i), "1")] == 1 for i in (1, 2, 3))
    # its worker was replaced: more imports than two slots' workers
    assert len(imports.read_text().split()) >= 2


def test_a_worker_over_its_memory_while_the_call_runs_is_killed_then_and_the_member_retried(tmp_path):
    wf, ledger, _ = _setup(tmp_path, """    parameters: {x: {range: [0, 3]}}
    python: mypkg.fits:hold
    scheduling: {memoryPerMember: 100}
    retry: {attempts: 2, on: [oom]}
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 0, (out, err)
    first = [r for r in read_journal(tmp_path / "run") if r["e"] == "end" and r.get("m") == 0 and r.get("a") == 1]
    assert first[0].get("reason") == "oom" and first[0]["rc"] < 0, first  # (killed: it never answered)
    assert first[0]["dt"] < 30
    starts, ends = _ledger(ledger)
    assert ("fit", "0", "1") in starts and ("fit", "0", "1") not in ends and ends[("fit", "0", "2")] == 1


def test_two_functions_share_the_slots_each_worker_of_one_function(tmp_path):
    """Two function nodes at once on two slots: a worker serves one function (an idle one of
    the other gives its place); every member once, each answer from a worker of its own
    function."""
    wf, ledger, imports = _setup(tmp_path, """    parameters: {x: {range: [0, 20]}}
    python: mypkg.fits:other
""")
    (tmp_path / "mypkg" / "more.py").write_text(MODULE.replace("def other(x):", "def other_(x):")
                                                .replace("def fit(", "def other(x, y=None, name=None):\n"
                                                         "    return {'pid': os.getpid(), 'more': x}\n\n\n"
                                                         "def fit_("))
    text = wf.read_text()
    wf.write_text(text + text.split("nodes:\n", 1)[1].replace("  fit:", "  fit2:").replace("fits:other", "more:other"))
    rc, out, err = _run(tmp_path, wf)
    assert rc == 0, (out, err)
    recs = show(tmp_path / "run")
    assert len(recs) == 40 and all(r["state"] == "done" for r in recs)
    by_node = {n: {r["outputs"]["pid"] for r in recs if r["node"] == n} for n in ("fit", "fit2")}
    assert not by_node["fit"] & by_node["fit2"]  # (no worker ran both functions)
    assert all(("other" in r["outputs"]) == (r["node"] == "fit") for r in recs)
    starts, ends = _ledger(ledger)
    assert len(ends) == 20 and set(ends.values()) == {1}


def test_a_pilot_killed_while_calls_run_past_the_grace_runs_them_again_as_their_next_attempt(tmp_path):
    """PWE_ORPHAN_GRACE=1, calls of 4 s: those running when the pilot is killed are killed a
    second later with their workers by its guardian, and run again as their next attempt;
    none completes twice."""
    wf, ledger, _ = _setup(tmp_path, """    parameters: {x: {range: [0, 4]}}
    python: mypkg.fits:nap
""")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": ENV_PATH,
                                               "PWE_ORPHAN_GRACE": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: ledger.exists() and ledger.read_text().count("start") >= 2, timeout=120,
                 what="two calls running")
        kill_pilot(run_dir / "pilots" / "p1" / "events.jsonl")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = _ledger(ledger)
    rerun = {m for _, m, a in starts if a == "2"}
    assert rerun, "no call was running when the pilot was killed"
    for m in rerun:
        assert ("fit", m, "1") not in ends and ends[("fit", m, "2")] == 1
    assert {m for _, m, _ in ends} == {str(i) for i in range(4)} and set(ends.values()) == {1}


def test_a_call_past_its_walltime_kills_its_worker_and_the_next_members_run(tmp_path):
    wf, ledger, _ = _setup(tmp_path, """    parameters: {x: {range: [0, 4]}}
    python: mypkg.fits:slow
    scheduling: {maxWallTimePerMember: 0.02}
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 1
    recs = {r["member"]: r for r in show(tmp_path / "run")}
    assert recs[0]["state"] == "failed" and [recs[i]["state"] for i in (1, 2, 3)] == ["done"] * 3
    ends = [r for r in read_journal(tmp_path / "run") if r["e"] == "end" and r.get("m") == 0]
    assert ends[-1].get("reason") == "walltime"
    starts, done = _ledger(ledger)
    assert ("fit", "0", "1") in starts and ("fit", "0", "1") not in done


def test_a_worker_that_dies_mid_call_fails_its_member_which_is_retried_and_the_rest_run(tmp_path):
    wf, ledger, imports = _setup(tmp_path, """    parameters: {x: {range: [0, 6]}}
    python: mypkg.fits:crash
    retries: 1
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 0, (out, err)
    starts, ends = _ledger(ledger)
    assert ("fit", "1", "1") in starts and ("fit", "1", "1") not in ends and ends[("fit", "1", "2")] == 1
    assert all(ends[("fit", str(i), "1")] == 1 for i in (0, 2, 3, 4, 5))
    first = [r for r in read_journal(tmp_path / "run") if r["e"] == "end" and r.get("m") == 1 and r.get("a") == 1]
    assert first[0]["rc"] == 3, first


def test_a_pilot_killed_while_calls_run_no_member_completes_twice(tmp_path):
    """600 calls of 10 ms on 2 slots, the pilot killed -9 three times mid-run: from the
    functions' own ledger, every member completed and none twice (a call that ended as its
    pilot died is taken from its guardian; one cut short runs again)."""
    n = 600
    wf, ledger, _ = _setup(tmp_path, f"""    parameters: {{i: {{range: [0, {n}]}}}}
    python: mypkg.fits:step
""")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": ENV_PATH},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ended() -> int:
        return ledger.read_bytes().count(b"end ") if ledger.exists() else 0

    try:
        for k, share in enumerate((0.15, 0.4, 0.65), start=1):
            events = run_dir / "pilots" / f"p{k}" / "events.jsonl"
            wait_for(lambda ev=events, want=share * n: ev.exists() and b'"k":"end"' in ev.read_bytes()
                     and ended() >= want, timeout=120, what=f"pilot p{k} and {share:.0%} of the calls")
            kill_pilot(events)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = _ledger(ledger)
    members = Counter(m for _, m, _ in ends)
    assert set(members) == {str(i) for i in range(n)}
    assert not [m for m, c in members.items() if c > 1], "members that completed twice"
    assert not [k for k, c in starts.items() if c > 1], "attempts that started twice"
    recs = read_journal(run_dir)
    assert len([r for r in recs if r["e"] == "pilot_gone"]) >= 3
    rerun = [r for r in recs if r["e"] == "start" and r["a"] > 1]
    notes = [r for r in recs if r["e"] == "note" and "guardian" in r.get("what", "")]
    assert rerun or notes, "no call was running at any of the kills"


SWEEP_SCRIPT = '''
import json, sys
import pwe
from mypkg.fits import fit


def twice(a):
    print("twice", a)
    return {"twice": 2 * a}


if __name__ == "__main__":
    r = pwe.sweep(fit, {"x": {"range": [0, 3]}, "y": [0.5], "name": ["n"]}, cores=2, run_dir=sys.argv[1] + "/a",
                  env={"LEDGER": sys.argv[1] + "/ledger", "IMPORTS": sys.argv[1] + "/imports", "FOO": "baz"})
    mine = pwe.sweep(twice, {"a": [1, 2]}, cores=2, run_dir=sys.argv[1] + "/b")
    try:
        pwe.sweep(lambda x: x, {"x": [1]})
        refused = None
    except pwe.InputError as exc:
        refused = str(exc)
    print(json.dumps({"ok": [r.ok, mine.ok], "fit": [m["outputs"] for m in r.members("fit")],
                      "twice": [m["outputs"] for m in mine.members("twice")], "refused": refused}))
'''


def test_pwe_sweep_runs_a_function_over_values_from_python(tmp_path):
    """pwe.sweep(fn, params): a module's function and the script's own (imported from its
    file by the workers, under the __main__ guard); a lambda refused in one line."""
    _setup(tmp_path, "    python: mypkg.fits:fit\n")
    (tmp_path / "script.py").write_text(SWEEP_SCRIPT)
    p = subprocess.run([sys.executable, str(tmp_path / "script.py"), str(tmp_path)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=180, env={**__import__("os").environ, "PYTHONPATH": ENV_PATH,
                                                "IMPORTS": str(tmp_path / "imports-script")})
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["ok"] == [True, True]
    assert [json.loads(o["sum"]) for o in got["fit"]] == [0.5, 1.5, 2.5]
    assert {o["foo"] for o in got["fit"]} == {"baz"}
    assert got["twice"] == [{"twice": "2"}, {"twice": "4"}]
    assert "is not a function at the top level of its module" in got["refused"]
    assert "\n" not in got["refused"]
    assert "twice 2" in output(tmp_path / "b", "twice", 1)
    starts, ends = _ledger(tmp_path / "ledger")
    assert set(ends) == {("fit", str(i), "1") for i in range(3)}


def test_a_module_that_fails_at_its_import_fails_each_member_in_one_line_and_its_worker_goes(tmp_path):
    """Found and defined in its source (validate passes), it raises at its import: each
    member fails with one line naming the module and what it raised, its traceback in its
    stderr; the worker is replaced each time (a retry imports it again)."""
    wf, ledger, imports = _setup(tmp_path, """    parameters: {x: [0, 1, 2]}
    python: mypkg.broken:fit
    retries: 1
""")
    (tmp_path / "mypkg" / "broken.py").write_text(
        "import os\nwith open(os.environ['IMPORTS'], 'a') as fh:\n    fh.write('x\\n')\n"
        "raise RuntimeError('no GPU here\\nsecond line')\n\n\ndef fit(x):\n    return {}\n")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 1
    recs = read_journal(tmp_path / "run")
    ends = [r for r in recs if r["e"] == "end"]
    assert len(ends) == 6 and all(r["rc"] == 1 for r in ends)
    assert {r["why"] for r in ends} == {"cannot import mypkg.broken: RuntimeError: no GPU here"}
    assert len(imports.read_text().split()) == 6  # (a worker for each attempt: none kept)
    stderr = output(tmp_path / "run", "fit", 2, "stderr")
    assert "Traceback" in stderr and "pwe: cannot import mypkg.broken" in stderr


def test_a_cancel_ends_the_calls_that_run_and_leaves_no_worker(tmp_path):
    """pwe cancel while two calls sleep: the run stops, no call completes, no worker lives on."""
    wf, ledger, _ = _setup(tmp_path, """    parameters: {x: {range: [0, 6]}}
    python: mypkg.fits:slow
""")
    wf.write_text(wf.read_text().replace("FOO: bar}", "FOO: bar, ALL_SLOW: 1}"))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                            cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": ENV_PATH},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = Path(str(ledger) + ".pids")
        wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, timeout=120, what="two calls running")
        rc, out, err = run_cli("cancel", run_dir, cwd=tmp_path, timeout=120)
        assert rc == 0, err
        proc.communicate(timeout=120)
    finally:
        proc.kill()
    workers = [int(p) for p in pids.read_text().split()]
    wait_for(lambda: not [p for p in workers if alive(p)], timeout=60, what="the workers gone")
    starts, ends = _ledger(ledger)
    assert not ends and len(starts) == 2


def test_function_members_on_other_nodes_are_calls_to_their_node_agents_workers(ssh_nodes, tmp_path):
    """A pilot of four nodes over ssh: the calls placed on the other nodes run in warm workers
    of those nodes' agents (each imported the module once), their outputs back as the pilot's."""
    wf, ledger, imports = _setup(tmp_path, """    parameters: {x: {range: [0, 24]}, y: [1], name: [n]}
    python: mypkg.fits:fit
    validate: echo "validated {{ x }} $(hostname)" >> validated
""")
    on_ssh_nodes(tmp_path, wf)
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 0, (out, err)
    recs = show(tmp_path / "run")
    assert len(recs) == 24 and all(r["state"] == "done" for r in recs)
    assert all(json.loads(r["outputs"]["sum"]) == r["parameters"]["x"] + 1 for r in recs)
    starts, ends = _ledger(ledger)
    assert len(ends) == 24 and set(ends.values()) == {1}
    pids = {r["outputs"]["pid"] for r in recs}
    imported = imports.read_text().split()
    assert len(imported) == len(set(imported)) and pids <= set(imported)
    events = [json.loads(line) for p in (tmp_path / "run" / "pilots").glob("*/events.jsonl")
              for line in p.read_text().splitlines()]
    nodes = {n for e in events if e.get("k") == "start" for n in e.get("nodes", [])}
    assert len(nodes) >= 2, nodes  # (placed on more than the pilot's own node)
    # each call's validate ran after it, by its worker, on the node the call ran on
    validated = [line.split() for line in (tmp_path / "validated").read_text().splitlines()]
    assert sorted(int(w[1]) for w in validated) == list(range(24))
    assert len({w[2] for w in validated}) >= 2, validated


def test_function_members_on_a_four_node_slurm_pilot(slurm4, tmp_path):
    """The four-node SLURM cluster: one pilot of four nodes, its calls on the other nodes in
    workers of their agents (one srun step per node); every member once, on several nodes."""
    n = 60
    wf, ledger, imports = _setup(tmp_path, f"""    parameters: {{i: {{range: [0, {n}]}}}}
    python: mypkg.fits:where
""")
    wf.write_text(wf.read_text().replace("nodes:\n", "defaults: {host: slurm4}\nnodes:\n", 1))
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--hosts", str(slurm4.hosts), "--run-dir",
                           str(tmp_path / "run")], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, **slurm4.env, "PYTHONPATH": ENV_PATH},
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    recs = show(tmp_path / "run")
    assert len(recs) == n and all(r["state"] == "done" for r in recs)
    assert len({r["outputs"]["host"] for r in recs}) > 1  # (calls ran on several nodes)
    starts, ends = _ledger(ledger)
    assert len(ends) == n and set(ends.values()) == {1}
    imported = imports.read_text().split()
    assert len(imported) == len(set(imported)) and {r["outputs"]["pid"] for r in recs} <= set(imported)


def test_hostile_values_and_a_workspace_with_shell_characters_reach_the_function_as_text(tmp_path):
    """A workspace named with a space, quotes and $(...), a 100 KB value, a terminal escape
    and shell text as values: each reaches the function as it is (no shell between), its
    outputs are the same text, nothing is executed."""
    ws = tmp_path / "w s'$(touch pwned)"
    ws.mkdir()
    big = "y" * 100_000
    wf, ledger, _ = _setup(ws, f"""    parameters: {{v: ["$(touch pwned)", "a;b `id`", "\\e[31mred", "{big}"]}}
    python: mypkg.fits:echo
    validate: printf '%s\\n' {{{{ v }}}} | cut -c 1-20 >> validated
""")
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=ws)
    assert rc == 0, (out, err)
    recs = {r["member"]: r for r in show(tmp_path / "run")}
    assert [recs[i]["outputs"]["v"] for i in range(3)] == ["$(touch pwned)", "a;b `id`", "\x1b[31mred"]
    assert json.loads(recs[3]["outputs"]["n"]) == 100_000 and recs[3]["outputs"]["v"] == big[:10]
    assert {r["outputs"]["cwd"] for r in recs.values()} == {str(ws.resolve())}
    # its validate, rendered as run is (each value one quoted word), ran in that workspace
    assert sorted((ws / "validated").read_text().splitlines()) == sorted(
        ["$(touch pwned)", "a;b `id`", "\x1b[31mred", "y" * 20])
    assert not list(tmp_path.rglob("pwned"))


def test_a_slurm_pilot_killed_while_calls_linger_on_other_nodes_runs_none_of_them_again(slurm4, tmp_path):
    """One pilot job over the four-node SLURM cluster, killed -9 while calls on its agents'
    nodes have done their work and linger: each agent gives its calls the grace and writes
    their ends (orphans-node-*); none runs again, every member ends once."""
    n = 16
    wf, ledger, _ = _setup(tmp_path, f"""    parameters: {{i: {{range: [0, {n}]}}}}
    python: mypkg.fits:linger
""")
    wf.write_text(wf.read_text().replace("nodes:\n", "defaults: {host: slurm4}\nnodes:\n", 1))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--hosts", str(slurm4.hosts), "--run-dir",
                             str(run_dir)], cwd=tmp_path, env={**__import__("os").environ, **slurm4.env,
                                                               "PYTHONPATH": ENV_PATH},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)

    def lingering() -> set[str]:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        return {w.split()[1] for w in lines if w.startswith("on ")}

    try:
        wait_for(lambda: len(lingering()) >= 2 or proc.poll() is not None, timeout=180,
                 what="calls lingering on two nodes")
        assert proc.poll() is None, proc.communicate()
        kill_pilot(run_dir / "pilots" / "p1" / "events.jsonl")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    starts, ends = _ledger(ledger)
    members = Counter(m for _, m, _ in ends)
    assert set(members) == {str(i) for i in range(n)} and set(members.values()) == {1}, members
    assert list((run_dir / "pilots" / "p1").glob("orphans-node-*.jsonl")), "no node agent wrote its calls' ends"


def test_a_worker_keeps_the_gpu_it_started_with(tmp_path):
    """A host of two GPUs, a member of one each: every call a worker ran saw the same
    CUDA_VISIBLE_DEVICES (a library reads it once), the two GPUs each in a worker of its own."""
    wf, _, _ = _setup(tmp_path, """    parameters: {x: {range: [0, 12]}}
    python: mypkg.fits:gpu
    scheduling: {gpusPerMember: 1}
""")
    (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {protocol: local, cores_per_node: 2, gpus_per_node: 2}\n")
    wf.write_text(wf.read_text().replace("nodes:\n", "defaults: {host: box}\nnodes:\n", 1))
    env = {k: v for k, v in __import__("os").environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    p = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(tmp_path / "run")], cwd=tmp_path,
                       env={**env, "PYTHONPATH": ENV_PATH}, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    seen: dict[str, set[str]] = {}
    for r in show(tmp_path / "run"):
        seen.setdefault(r["outputs"]["pid"], set()).add(r["outputs"]["gpu"])
    assert all(len(g) == 1 for g in seen.values()), seen
    assert set().union(*seen.values()) == {"0", "1"}, seen


def test_an_interpreter_that_is_not_there_fails_each_member_in_one_line_naming_it(tmp_path):
    wf, _, _ = _setup(tmp_path, """    parameters: {x: [1, 2]}
    python: mypkg.fits:fit
""")
    wf.write_text(wf.read_text().replace("FOO: bar}", "FOO: bar, PWE_PYTHON: /nonexistent/python3}"))
    rc, out, err = _run(tmp_path, wf)
    assert rc == 1
    ends = [r for r in read_journal(tmp_path / "run") if r["e"] == "end"]
    assert len(ends) == 2 and {r["rc"] for r in ends} == {127}
    assert {r["why"] for r in ends} == {"cannot start a Python worker for mypkg.fits:fit: No such file or directory "
                                        "(/nonexistent/python3)"}


def test_a_function_nodes_validate_runs_after_each_call_and_a_failure_is_invalid_and_retried(tmp_path):
    """``validate:`` on a function node: its worker runs it after the call returns, in the
    workspace with the member's environment; exit 1 fails the member ``invalid`` (retried on
    invalid, as a command member's would be), its words in the member's stderr; a member
    whose outputs go through the file (too many for a line) is judged the same."""
    wf, ledger, imports = _setup(tmp_path, """    parameters: {x: {range: [0, 4]}}
    python: mypkg.fits:made
    retry: {attempts: 2, on: [invalid]}
    validate: 'test -s out/{{ x }}.txt && echo "validated {{ x }} $PWE_MEMBER $PWE_ATTEMPT $FOO" >> ledger.v'
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 0, (out, err)
    starts, ends = _ledger(ledger)
    # from the members' ledger: x 2 ran twice (its first result empty), the rest once
    assert starts == Counter({("fit", "0", "1"): 1, ("fit", "1", "1"): 1, ("fit", "2", "1"): 1,
                              ("fit", "2", "2"): 1, ("fit", "3", "1"): 1}), starts
    # the validate ran after each call, in the workspace, with the member's environment
    assert sorted((tmp_path / "ledger.v").read_text().splitlines()) == [
        "validated 0 0 1 bar", "validated 1 1 1 bar", "validated 2 2 2 bar", "validated 3 3 1 bar"]
    trace = [r for r in read_journal(tmp_path / "run") if r["e"] == "end" and r.get("n") == "fit"]
    first = next(r for r in trace if r["m"] == 2 and r["a"] == 1)
    assert (first["rc"], first.get("reason")) == (1, "invalid"), first
    assert "its validate exited 1" in first["why"]
    assert "_pwe_invalid" not in (first.get("out") or {})
    assert "pwe: the validate exited 1: the result is not good" in output(tmp_path / "run", "fit", 2, "stderr", 1)
    recs = {r["member"]: r for r in show(tmp_path / "run")}
    assert all(r["state"] == "done" for r in recs.values())
    assert recs[3]["outputs"]["many"] == "y" * 20000 and recs[0]["outputs"]["x"] == "0"
    assert len(set(imports.read_text().split())) <= 2  # (warm workers: the validate is a child, not a worker)


def test_a_function_nodes_validate_failing_after_outputs_in_the_file_is_invalid(tmp_path):
    """Outputs too many for the answer's line go through ``$PWE_OUTPUTS``: the validate's
    mark goes there too, and the member is still ``invalid``, not done."""
    wf, ledger, _ = _setup(tmp_path, """    parameters: {x: [3]}
    python: mypkg.fits:made
    validate: exit 7
""")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 1, (out, err)
    (rec,) = show(tmp_path / "run")
    assert (rec["state"], rec["reason"], rec["exit_status"]) == ("failed", "invalid", 7), rec


def test_a_validate_that_failed_as_its_pilot_died_is_invalid_from_the_guardians_end(tmp_path):
    """kill -9 of the pilot while two calls run; they return in the grace its guardian gives
    them and each worker runs its validate, which fails for member 0's first attempt: its
    worker, unable to answer, leaves the mark in its outputs file and exits with the
    validate's status. The engine reads it from the guardian's end as the pilot would have:
    ``invalid``, retried; from the ledger, member 0 twice, member 1 once."""
    from helpers import run_killing_its_pilot

    gate = tmp_path / "gate"
    wf, ledger, _ = _setup(tmp_path, """    parameters: {x: [0, 1]}
    python: mypkg.fits:gated
    retry: {attempts: 2, on: [invalid]}
    validate: test {{ x }} -ne 0 || test "$PWE_ATTEMPT" -ne 1
""")
    wf.write_text(wf.read_text().replace("FOO: bar}", f"FOO: bar, GATE: {gate}}}"))
    rc, err = run_killing_its_pilot(wf, tmp_path / "run", tmp_path, ledger, 2, gate)
    assert rc == 0, err
    starts, ends = _ledger(ledger)
    assert starts == Counter({("fit", "0", "1"): 1, ("fit", "0", "2"): 1, ("fit", "1", "1"): 1}), starts
    recs = read_journal(tmp_path / "run")
    assert len([r for r in recs if r["e"] == "note" and "from the pilot's guardian" in r.get("what", "")]) == 2
    first = next(r for r in recs if r["e"] == "end" and r["m"] == 0 and r["a"] == 1)
    assert (first["rc"], first.get("reason")) == (1, "invalid"), first
    assert "_pwe_invalid" not in (first.get("out") or {}), first
    assert {r["member"]: r["state"] for r in show(tmp_path / "run")} == {0: "done", 1: "done"}
