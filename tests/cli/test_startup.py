"""Start-up: the commands that must answer fast do not import what they do not need.

Every `pwe status` and every pilot pays for what it imports before it can do anything
(issue 13: pydantic's models, networkx and jinja2 cost ~0.2 s together). These tests run
each command in a fresh interpreter and read which modules it loaded: a check of what is
imported, not a timing (speed is measured by bench/startup.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import ROOT, output

HEAVY = ("networkx", "pydantic", "jinja2", "rich", "lxml", "paramiko", "celery", "yaml")

# runs the pwe CLI with ARGV in this interpreter, then prints the top-level modules loaded
_PROBE = """
import json, sys
argv = json.loads(sys.argv[1])
sys.argv = ["pwe"] + argv
from pwe.cli.main import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
sys.stdout.flush()
print("\\nMODULES " + json.dumps([code, sorted(sys.modules)]))
"""


def loaded(argv: list[str], cwd, whole: bool = False) -> tuple[int, set[str], str]:
    """The exit status of `pwe ARGV` in a fresh interpreter, the top-level modules it loaded
    (``whole``: every module, by its full name) and what it said."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES ")]
    assert line, proc.stdout + proc.stderr
    code, mods = json.loads(line[-1][len("MODULES "):])
    return code, set(mods) if whole else {m.split(".")[0] for m in mods}, proc.stdout + proc.stderr


#: what neither `pwe --help` nor `pwe status RUN` imports: the modules of the other commands
#: (pwe.cli.main lists them from its table), the rooms that plan, run and serve, and the
#: standard library's modules only those need
NOT_FOR_HELP_OR_STATUS = ("pwe.cli.running", "pwe.cli.check", "pwe.cli.service", "pwe.cli.pilot", "pwe.cli.ui",
                          "pwe.cli.events", "pwe.cli.remote", "pwe.workflow", "pwe.planning", "pwe.engine",
                          "pwe.service", "pwe.ui", "protocols", "hostinfo", "schemas", "subprocess", "asyncio",
                          "importlib.metadata", "tomllib", "csv", "sqlite3", "email", "xml")


def _not_loaded(mods: set[str], names=NOT_FOR_HELP_OR_STATUS) -> list[str]:
    """Those of ``mods`` that are one of ``names`` or in one of them."""
    return sorted(m for m in mods if any(m == n or m.startswith(n + ".") for n in names))


def _two_members(tmp_path):
    """A finished run of two members that each print a line: its directory."""
    wf = tmp_path / "two.yaml"
    wf.write_text("name: two\nnodes:\n  m:\n    parameters: {i: {range: [0, 2]}}\n    run: echo hi $PWE_MEMBER\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                          cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return run_dir


def test_help_status_and_logs_load_no_heavy_module(tmp_path):
    run_dir = _two_members(tmp_path)

    code, mods, out = loaded(["--help"], tmp_path)
    assert code == 0 and "Usage: pwe" in out
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))

    code, mods, out = loaded(["status", str(run_dir)], tmp_path)
    assert code == 0 and "succeeded" in out and "total" in out, out
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))

    code, mods, out = loaded(["logs", str(run_dir), "m:1"], tmp_path)
    assert code == 0 and "hi 1" in out, out
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))


def test_help_imports_no_command_and_status_only_its_own(tmp_path):
    """`pwe --help` lists the commands from pwe.cli.main's table without importing one;
    `pwe status RUN` imports pwe.cli.see and nothing of running, planning or serving."""
    run_dir = _two_members(tmp_path)

    code, mods, out = loaded(["--help"], tmp_path, whole=True)
    assert code == 0 and "Usage: pwe" in out and "  status " in out
    assert not _not_loaded(mods), _not_loaded(mods)
    assert not _not_loaded(mods, ("pwe.cli.see", "pwe.observe", "pwe.runstate")), sorted(mods)

    code, mods, out = loaded(["status", str(run_dir)], tmp_path, whole=True)
    assert code == 0 and "succeeded" in out, out
    assert "pwe.cli.see" in mods  # (the probe sees what the command imports)
    assert not _not_loaded(mods), _not_loaded(mods)

    code, mods, out = loaded(["stauts", str(run_dir)], tmp_path, whole=True)  # a misspelt command: said from the table
    assert code == 2 and "no such command 'stauts' (did you mean 'status'?)" in out, out
    assert not _not_loaded(mods, ("pwe.cli.see", "pwe.cli.running")), sorted(mods)


def test_run_path_does_not_load_networkx(tmp_path):
    """The planner's graph is pwe.planning.dag (standard library): `pwe validate` and `pwe run`
    no longer import networkx (117 ms of every run)."""
    wf = tmp_path / "dag.yaml"
    wf.write_text("name: d\nnodes:\n  a: {run: 'true'}\n  b: {run: 'true', after: [a]}\n")
    code, mods, out = loaded(["validate", str(wf)], tmp_path)
    assert code == 0, out
    assert "networkx" not in mods
    assert "yaml" in mods and "hostinfo" in mods  # (the probe sees real imports)
    assert "pydantic" not in mods  # (a good workflow is checked by the checker derived from the models)


def test_pilot_imports_only_the_standard_library():
    code = ("import sys, json; before = set(sys.modules); import pilot.agent, pilot.nodeagent; "
            "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    new = set(json.loads(proc.stdout))
    assert "pilot" in new
    assert not new & set(HEAVY + ("pwe", "hostinfo", "protocols")), sorted(new)
    stdlib = set(sys.stdlib_module_names)
    assert new - stdlib == {"pilot"}, sorted(new - stdlib)


# -- a local pilot started ahead of its order (protocols/warmpilot.py) ------------------------

def test_the_prestarted_pilot_is_the_one_started(tmp_path):
    """Local.start hands its order to the pilot prestart() made, not to a second one."""
    from protocols import warmpilot
    from protocols.local import Local
    from protocols.runner import LocalRunner

    warmpilot.dismiss()  # (one an earlier in-process `pwe run` left: it may have left, its minute over)
    warmpilot.prestart()
    warm = warmpilot._warm
    assert warm is not None
    started = Local(LocalRunner()).start(tmp_path / "p1", 1, idle_timeout=1.0)
    try:
        assert started is warm and warmpilot._warm is None
        assert started.wait(timeout=60) == 0  # came up, found nothing to do, left
        ev = [json.loads(ln) for ln in (tmp_path / "p1" / "events.jsonl").read_text().splitlines()]
        assert [e["k"] for e in ev][0] == "up" and ev[-1]["k"] == "down"
        again = Local(LocalRunner()).start(tmp_path / "p2", 1, idle_timeout=1.0)  # none waiting: a new one, the same way
        assert again is not warm and again.wait(timeout=60) == 0
        assert (tmp_path / "p2" / "events.jsonl").read_text()
    finally:
        for proc in (warm, started):
            if proc.poll() is None:
                proc.kill()


def test_run_hands_its_order_to_the_pilot_it_started_before_planning(tmp_path):
    """`pwe run` starts the pilot's interpreter before its own imports; the run's order
    gives it its environment (as the engine sees it), the members' directories and its log."""
    wf = tmp_path / "w.yaml"
    wf.write_text("name: w\nnodes:\n  m:\n    parameters: {i: {range: [0, 3]}}\n"
                  "    run: echo $PWE_MEMBER $WARM_MARK; pwd\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), WARM_MARK="set-after-nothing"))
    assert proc.returncode == 0, proc.stderr
    pilots = [json.loads(ln) for ln in (run_dir / "journal.jsonl").read_text().splitlines()
              if json.loads(ln).get("e") == "pilot"]
    assert len(pilots) == 1, pilots
    outs = [output(run_dir, "m", i) for i in range(3)]
    for i, out in enumerate(outs):
        member, mark, cwd = out.split()
        assert member == str(i) and mark == "set-after-nothing" and cwd == str(run_dir / "members" / "m"), out  # (its node's directory)
    assert (run_dir / "pilots" / "p1" / "pilot.log").exists()
    # nothing is left waiting for an order
    mine = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                waiting = fh.read().endswith(b"\0--await-start\0")
            if waiting and os.readlink(f"/proc/{p}/cwd") == str(tmp_path):
                mine.append(p)
        except OSError:
            pass  # (gone meanwhile)
    assert not mine, f"a prestarted pilot was left behind: {mine}"


_FRONT = """
import json, sys
import protocols.warmpilot as w
calls = []
w.prestart = lambda: calls.append(sorted(m for m in ("click", "yaml", "pwe.engine.loop") if m in sys.modules))
sys.argv = ["pwe"] + json.loads(sys.argv[1])
import atexit
atexit.register(lambda: print("PRESTARTS " + json.dumps(calls)))
from pwe.cli.front import console
console()
"""


def test_the_front_door_starts_a_local_runs_pilot_before_click_is_imported(tmp_path):
    """`pwe run FILE` (no --host, or --host local) starts its pilot's interpreter before
    the command line is parsed (pwe/cli/front.py), so that its start-up overlaps all of the
    engine's; any other command, or `run` for another host, does not. The run itself is
    still parsed and checked by click: a file that is not there is its one line, exit 2."""
    def prestarts(*argv: str) -> tuple[int, list, str]:
        proc = subprocess.run([sys.executable, "-c", _FRONT, json.dumps(argv)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        tail = proc.stdout.rsplit("PRESTARTS ", 1)
        assert len(tail) == 2, proc.stdout + proc.stderr
        return proc.returncode, json.loads(tail[1]), proc.stderr

    rc, calls, err = prestarts("run", "no-such.yaml")
    assert rc == 2 and "no-such.yaml" in err, err
    assert calls[0] == [], calls  # (the first, from the front door: nothing heavy imported yet)
    for argv in (["run", "no-such.yaml", "--host", "local"], ["run", "--host=local", "no-such.yaml"]):
        rc, calls, err = prestarts(*argv)
        assert rc == 2 and calls and calls[0] == [], (argv, calls, err)
    for argv in (["run", "no-such.yaml", "--host", "slurm"], ["run", "--host=hpc", "no-such.yaml"],
                 ["run", "--help"], ["status", "nothing-here"], ["validate", "no-such.yaml"]):
        rc, calls, err = prestarts(*argv)
        assert calls == [], (argv, calls)  # (a run for another host starts its pilot there)


def test_a_waiting_pilot_leaves_at_end_of_file_and_takes_environment_and_log_from_its_order(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    unused = subprocess.Popen([sys.executable, "-S", "-m", "pilot", "--await-start"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    out, _ = unused.communicate(b"", timeout=30)
    assert unused.returncode == 0 and out == b""
    # an order it cannot carry out is said in the log it names, in the directory it names
    d = tmp_path / "p"
    d.mkdir()
    order = {"argv": ["--dir", str(d), "--slots", "0", "--hosts", "not a host!"], "cwd": str(d),
             "env": dict(env, ORDERED="1"), "log": str(d / "pilot.log")}
    given = subprocess.Popen([sys.executable, "-S", "-m", "pilot", "--await-start"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    out, _ = given.communicate(json.dumps(order).encode() + b"\n", timeout=30)
    assert given.returncode == 2, out
    assert out == b"", "after its order the pilot writes to its log only"
    assert "the allocation's nodes" in (d / "pilot.log").read_text()
