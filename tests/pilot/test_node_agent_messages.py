"""The node agent (pilot/nodeagent.py) speaks the messages pilot/wire.py lists for it: a
real agent process told to run members, one that cannot start, and to kill one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import ROOT, WAIT, agent_replies, wait_for
from pilot import wire


def _run(ident: int, cmd: str, cwd) -> dict:
    return {"k": wire.AGENT_RUN, "id": ident, "argv": ["/bin/sh", "-c", cmd], "cmd": cmd, "cwd": str(cwd), "env": {}}


def test_the_node_agent_says_only_the_kinds_and_fields_the_wire_lists(tmp_path):
    (tmp_path / "a-file").write_text("")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "pilot.nodeagent"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, cwd=tmp_path, bufsize=0)
    try:
        asked = [_run(1, "exit 3", tmp_path / "m1"), _run(2, "true", tmp_path / "a-file" / "m2"),
                 _run(3, "touch ../m3-runs; exec sleep 60", tmp_path / "m3")]
        for msg in asked:
            assert set(msg) - {"k"} <= wire.AGENT_FIELDS[msg["k"]]
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in asked))
        proc.stdin.flush()
        held = bytearray()
        said = agent_replies(proc, 4, held)  # (1 started and ended, 2 failed, 3 started)
        started = {m["id"]: m for m in said if m["k"] == wire.AGENT_STARTED}
        assert set(started) == {1, 3}, said
        wait_for((tmp_path / "m3-runs").exists, what="member 3 to run")  # (its own session made: killpg reaches it)
        kill = {"k": wire.AGENT_KILL, "id": 3, "sig": 15}
        assert set(kill) - {"k"} <= wire.AGENT_FIELDS[wire.AGENT_KILL]
        proc.stdin.write(json.dumps(kill).encode() + b"\n")
        proc.stdin.flush()
        said += agent_replies(proc, 1, held)
        proc.stdin.close()
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for m in said:
        assert m["k"] in wire.AGENT_FIELDS, m
        assert set(m) - {"k"} <= wire.AGENT_FIELDS[m["k"]], m
    by = {(m["k"], m["id"]): m for m in said}
    assert by[(wire.AGENT_ENDED, 1)]["rc"] == 3
    assert by[(wire.AGENT_FAILED, 2)]["rc"] == 126 and "Not a directory" in by[(wire.AGENT_FAILED, 2)]["why"]
    assert by[(wire.AGENT_ENDED, 3)]["rc"] == -15
    assert not set(wire.AGENT_FIELDS) & set(wire.FIELDS), "a node agent's kind is not an engine message"
