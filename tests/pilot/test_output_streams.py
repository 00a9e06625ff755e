"""Members' stdout and stderr go into per-pilot output streams (pilot/streams.py): a few files
per pilot, not a file per member; every member's output found by `pwe logs` (and the one
reader behind it); output interleaved by many members kept apart; binary kept as bytes; a
member printing past the cap kept bounded (head, tail, how much was left out); attempts kept
apart; members started by local spawners and by node agents on other nodes (the four-node
SLURM cluster) each in their starter's own stream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import ROOT, output, read_journal, run_cli

PY = sys.executable


def _env(**extra: str) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def logs_bytes(run: Path, member: str, *extra: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real `pwe logs` into a pipe: the bytes as the member wrote them."""
    return subprocess.run([PY, "-m", "pwe", "logs", str(run), member, *extra], cwd=cwd, env=_env(),
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


def files_under(d: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(d))


def test_thirty_thousand_members_that_print_leave_few_files_and_every_line_is_found(tmp_path):
    """A file per member would be 30,000 files; the streams are a few per pilot. (This was
    100,000 members: 134 s of the suite's 30 minutes to show what 30,000 show as well;
    bench/ten_million.py runs 10^7 to the end.)"""
    from pilot.streams import Reader
    from pwe.observe.output import member_output

    n = 30_000
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: many\nnodes:\n  talk:\n    parameters: {{i: {{range: [0, {n}]}}}}\n"
                  "    run: echo line {{ i }}\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path, timeout=1800)
    assert rc == 0, err
    assert files_under(run) < 200, files_under(run)
    streams = list((run / "pilots").glob("*/*.stream*"))
    assert streams and len(streams) < 20, streams
    # every member's line, through the reader `pwe logs` uses (one Reader: each index read once)
    with Reader(str(run / "pilots"), many=True) as reader:
        wrong = [i for i in range(n) if member_output(run, "talk", i, reader=reader).stdout != f"line {i}\n".encode()]
    assert wrong == [], wrong[:10]
    for i in (0, 12345, n - 1):  # and the real command
        proc = logs_bytes(run, f"talk:{i}", cwd=tmp_path)
        assert proc.returncode == 0 and f"line {i}\n".encode() in proc.stdout, proc


def test_output_interleaved_by_many_members_is_kept_apart(tmp_path):
    wf = tmp_path / "wf.yaml"
    # 4 slots, members that print in several bursts while others print: each keeps its own lines
    wf.write_text("name: mix\nnodes:\n  m:\n    parameters: {i: {range: [0, 60]}}\n"
                  "    run: for k in 1 2 3 4 5; do echo \"m{{ i }} out $k\"; echo \"m{{ i }} err $k\" >&2; "
                  "sleep 0.0$k; done\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "4", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    for i in range(60):
        assert output(run, "m", i) == "".join(f"m{i} out {k}\n" for k in range(1, 6)), i
        assert output(run, "m", i, "stderr") == "".join(f"m{i} err {k}\n" for k in range(1, 6)), i


def test_binary_output_is_kept_as_bytes_and_shown_inert(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: bin\nnodes:\n  b:\n    run: printf 'ok\\377\\000\\033[31mred\\n'\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    proc = logs_bytes(run, "b:0", cwd=tmp_path)
    assert proc.returncode == 0 and b"ok\xff\x00\x1b[31mred\n" in proc.stdout  # (into a pipe: as written)
    rc, out, err = run_cli("logs", run, "b:0", "--json", cwd=tmp_path)
    doc = json.loads(out)
    assert doc["stdout"]["text"] == "ok\\xff\x00\x1b[31mred\n", doc  # (not UTF-8: written visibly)


def test_a_member_printing_past_the_cap_is_kept_bounded(tmp_path):
    wf = tmp_path / "wf.yaml"
    # 3 MB of numbered lines on stdout; the cap 64 KiB: its head and its tail are kept
    wf.write_text("name: big\nnodes:\n  loud:\n    run: seq 1 400000; echo done >&2\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--run-dir", run, cwd=tmp_path, env={"PWE_OUTPUT_CAP": "65536"})
    assert rc == 0, err
    stream = sum(p.stat().st_size for p in (run / "pilots").glob("*/*.stream*"))
    assert stream < 70_000, stream
    text = output(run, "loud", 0)
    assert len(text) == 65536 and text.startswith("1\n2\n3\n") and text.endswith("399999\n400000\n")
    rc, out, err = run_cli("logs", run, "loud:0", cwd=tmp_path)
    whole = len("".join(f"{k}\n" for k in range(1, 400001)))
    assert rc == 0 and f"[pwe: {whole - 65536} bytes left out]" in out, out[-300:]
    assert output(run, "loud", 0, "stderr") == "done\n"


def test_attempts_are_kept_apart_and_logs_names_the_one_shown(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: again\nnodes:\n  f:\n    retries: 1\n"
                  "    run: echo \"try $PWE_ATTEMPT\"; test \"$PWE_ATTEMPT\" = 2\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    rc, out, err = run_cli("logs", run, "f:0", "--stdout", "--stderr", cwd=tmp_path)  # (both: under headers)
    assert rc == 0 and ") attempt 2 <==" in out and "try 2" in out and "try 1" not in out, out
    rc, out, err = run_cli("logs", run, "f:0", "--attempt", "1", cwd=tmp_path)
    assert rc == 0 and "try 1" in out and "try 2" not in out, out
    rc, out, err = run_cli("logs", run, "f:0", "--attempt", "3", cwd=tmp_path)
    assert rc == 2 and err.count("\n") == 1 and "no attempt 3" in err, err


def test_a_member_that_cannot_start_has_the_pilots_words_in_its_stderr(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: nostart\nnodes:\n  x:\n    run: /nonexistent/program --flag\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 1
    said = output(run, "x", 0, "stderr")
    assert said.startswith("pwe: cannot start") and "/nonexistent/program" in said, said


def test_members_of_local_spawners_write_streams_of_their_own(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: sp\nnodes:\n  s:\n    parameters: {i: {range: [0, 200]}}\n"
                  "    run: echo spawned {{ i }}; echo e{{ i }} >&2\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "8", "--run-dir", run, cwd=tmp_path, env={"PWE_SPAWNERS": "2"})
    assert rc == 0, err
    names = sorted(p.name for p in (run / "pilots" / "p1").glob("*.stream"))
    assert any(n.startswith("out-spawner-") for n in names), names
    for i in range(200):
        assert output(run, "s", i) == f"spawned {i}\n" and output(run, "s", i, "stderr") == f"e{i}\n", i


def test_members_run_by_node_agents_on_other_nodes(slurm4, tmp_path):
    """The four-node SLURM cluster: one pilot of four nodes; the members on the other three
    nodes run through one agent step per node, each agent with a stream of its own."""
    n = 120
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: agents\ndefaults: {host: slurm4}\nnodes:\n  a:\n"
                  f"    parameters: {{i: {{range: [0, {n}]}}}}\n"
                  "    run: echo \"on $(hostname) {{ i }}\"; echo \"e {{ i }}\" >&2\n")
    run = tmp_path / "run"
    proc = subprocess.run([PY, "-m", "pwe", "run", str(wf), "--hosts", str(slurm4.hosts), "--run-dir", str(run)],
                          cwd=tmp_path, env=_env(**slurm4.env), capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    where = {}
    for i in range(n):
        said = output(run, "a", i).split()
        assert said[0] == "on" and said[2] == str(i), (i, said)
        assert output(run, "a", i, "stderr") == f"e {i}\n"
        where[i] = said[1]
    assert len(set(where.values())) > 1, where  # (members ran on several nodes)
    streams = sorted(p.name for p in (run / "pilots" / "p1").glob("out-*.stream*"))
    assert any(s.startswith("out-node-") for s in streams), streams
    # the journal's node of each member is where its output says it ran
    starts = {r["m"]: r for r in read_journal(run) if r.get("e") == "start"}
    assert len(starts) == n


def test_a_member_outliving_its_killed_pilot_keeps_its_output(tmp_path):
    """kill -9 of the pilot while a member runs: the member ends on its own in the guardian's
    grace, and what it wrote is kept (pilot/guardian.py, its own stream: out-guardian)."""
    from helpers import kill_pilot, wait_for

    started, gate = tmp_path / "started", tmp_path / "gate"
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: orphan\nnodes:\n  o:\n    run: 'echo before; touch {started}; "
                  f"while [ ! -e {gate} ]; do sleep 0.05; done; echo after; echo bye >&2'\n")
    run = tmp_path / "run"
    proc = subprocess.Popen([PY, "-m", "pwe", "run", str(wf), "--run-dir", str(run)], cwd=tmp_path,
                            env=_env(PWE_ORPHAN_GRACE="60"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        events = run / "pilots" / "p1" / "events.jsonl"
        wait_for(lambda: started.exists(), what="the member to start")
        pilot = json.loads(events.read_text().splitlines()[0])["pid"]
        guardian = int(Path(f"/proc/{pilot}/stat").read_text().rsplit(")", 1)[1].split()[1])  # (its parent)
        kill_pilot(events)

        def holds_capture() -> bool:  # the guardian has opened the member's capture files again
            try:
                return any("(deleted)" in os.readlink(f"/proc/{guardian}/fd/{fd}")
                           for fd in os.listdir(f"/proc/{guardian}/fd"))
            except OSError:
                return False
        wait_for(holds_capture, what="the guardian to take the member's output")
        gate.touch()
        proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert (run / "pilots" / "p1" / "out-guardian.stream").is_file()
    assert output(run, "o", 0) == "before\nafter\n" and output(run, "o", 0, "stderr") == "bye\n"
