"""A node agent (pilot/nodeagent.py) runs function members as its pilot does: calls to warm
workers of its own node (pilot/pyworkers.py). A real agent process over pipes: calls answered
with their outputs, a failure, a worker reused, a kill that ends its worker, a new worker
after it, the members' output in the agent's stream; only the fields the wire lists."""

from __future__ import annotations

import json
import os
import subprocess
import sys


from helpers import ROOT, WAIT, agent_replies
from pilot import wire
from pilot.streams import Reader

MODULE = """import os, time
with open(os.path.join(os.path.dirname(__file__), "imports"), "a") as fh:
    fh.write(f"{os.getpid()}\\n")


def fn(x):
    print("called", x, os.environ["PWE_MEMBER"])
    if x == "boom":
        raise ValueError("boom")
    if x == "sleep":
        time.sleep(600)
    return {"x": x, "pid": os.getpid(), "cwd": os.getcwd()}
"""


def _call(ident: int, x: str, tmp_path) -> dict:
    env = {"PWE_MEMBER": str(ident), "PWE_WORKSPACE": str(tmp_path), "PWE_NODE": "n",
           "PWE_OUTPUTS": str(tmp_path / f"outputs.{ident}")}
    return {"k": wire.AGENT_RUN, "id": ident, "argv": ["python:"], "cmd": "python: wmod:fn", "cwd": str(tmp_path),
            "env": env, "n": "n", "m": ident, "a": 1, "py": "wmod:fn", "kw": {"x": x}}


def test_a_node_agent_answers_function_members_from_warm_workers(tmp_path):
    (tmp_path / "wmod.py").write_text(MODULE)
    (tmp_path / "pilots" / "p1").mkdir(parents=True)
    stream = tmp_path / "pilots" / "p1" / "out-agent-1"
    proc = subprocess.Popen([sys.executable, "-m", "pilot.nodeagent", "--stream", str(stream)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=tmp_path, bufsize=0)
    held = bytearray()
    said: list[dict] = []
    try:
        def ask(*msgs: dict, want: int) -> list[dict]:
            for msg in msgs:
                assert set(msg) - {"k"} <= wire.AGENT_FIELDS[msg["k"]]
            proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in msgs))
            got = agent_replies(proc, want, held)
            said.extend(got)
            return got

        ask(_call(1, "a", tmp_path), want=2)
        ask(_call(2, "boom", tmp_path), want=2)
        ask(_call(3, "sleep", tmp_path), want=1)
        ask({"k": wire.AGENT_KILL, "id": 3, "sig": 15}, want=1)
        ask(_call(4, "b", tmp_path), want=2)
        proc.stdin.close()
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for m in said:
        assert set(m) - {"k"} <= wire.AGENT_FIELDS[m["k"]], m
    ended = {m["id"]: m for m in said if m["k"] == wire.AGENT_ENDED}
    started = {m["id"]: m["pid"] for m in said if m["k"] == wire.AGENT_STARTED}
    assert ended[1]["rc"] == 0 and ended[1]["out"]["x"] == "a" and ended[1]["out"]["cwd"] == str(tmp_path)
    assert ended[2]["rc"] == 1 and "out" not in ended[2]
    assert ended[3]["rc"] in (-15, -9)  # (its worker killed with the call)
    assert ended[4]["rc"] == 0
    # 1 and 2 by one worker (imported once); 3 by it too, killed; 4 by a new one
    assert started[1] == started[2] == started[3] != started[4]
    assert (tmp_path / "imports").read_text().split() == [str(started[1]), str(started[4])]
    frames, _, _ = Reader(str(tmp_path / "pilots")).member("n", 2)
    assert [f.stdout for f in frames[1]] == [b"called boom 2\n"]
    assert b"ValueError: boom" in frames[1][0].stderr


def test_why_a_worker_ended_on_its_first_call_is_its_logs_last_line_shown_inert(tmp_path):
    """A worker that ended before it answered its first call (no Python in its image, an
    interpreter that cannot run): the member's why is its log's last line, bounded, a
    terminal escape in it shown as '?'; after a first call, only that the worker ended."""
    from pilot.pyworkers import PyWorker, WorkerPool

    pool = WorkerPool(str(tmp_path), {}, 1)
    worker = PyWorker(1, None, ("f",), "pyworker-1-1")
    worker.calls = 1
    assert pool.ended_why(worker) == "its Python worker ended while the function ran"  # (no log)
    (tmp_path / "pyworker-1-1.log").write_text("x" * 5000 + "\n\nch-run[9]: error: \x1b[31mno python3" + "z" * 400 + "\n\n")
    why = pool.ended_why(worker)
    assert why.startswith("its Python worker ended while the function ran, before it answered its first call: "
                          "ch-run[9]: error: ?[31mno python3zz"), why
    assert "\x1b" not in why and len(why) < 420
    worker.calls = 2
    assert pool.ended_why(worker) == "its Python worker ended while the function ran"
