"""The pilot across several real nodes: network namespaces, each with its own sshd.

The namespaces share this machine's filesystem, as a cluster's nodes share theirs.
"""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from helpers import ROOT, SSH, TESTS, output, ssh_hosts_yaml, wait_for
from pilot.spawn import pid_alive

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
NODE_SH = TESTS / "services" / "node.sh"




WHERE = ("where=$(ip -4 -o addr show | grep -o '10\\.233\\.[0-9]*\\.2'); "
         "echo \"$(date +%s%N) $where start\" >> {ledger}; sleep {sleep}; "
         "echo \"$(date +%s%N) $where end $PWE_MEMBER\" >> {ledger}")


def workflow(tmp_path: Path, n: int, sleep: float) -> Path:
    wf = tmp_path / "wf.yaml"
    ledger = tmp_path / "ledger"
    wf.write_text(f"name: spread\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {n}]}}}}\n"
                  f"    run: {json.dumps(WHERE.format(ledger=ledger, sleep=sleep))}\n")
    return wf


def test_members_fan_out_over_ssh_nodes_without_oversubscribing(ssh_nodes, tmp_path):
    ssh_hosts_yaml(tmp_path)
    wf = workflow(tmp_path, 32, 0.3)
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "four", "--run-dir",
                           str(tmp_path / "run")], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [l.split() for l in (tmp_path / "ledger").read_text().splitlines()]
    ends = [l for l in lines if l[2] == "end"]
    assert sorted(int(l[3]) for l in ends) == list(range(32))
    per_node = Counter(l[1] for l in ends)
    assert set(per_node) == {f"10.233.{k}.2" for k in range(1, 5)}, per_node
    # at most 2 members (the node's cores) at once on any node
    for node in per_node:
        depth = peak = 0
        for _t, _where, what, *_ in sorted((l for l in lines if l[1] == node), key=lambda l: int(l[0])):
            depth += 1 if what == "start" else -1
            peak = max(peak, depth)
        assert peak <= 2, (node, peak)


def test_a_node_that_dies_mid_run_has_its_members_finish_elsewhere(ssh_nodes, tmp_path):
    ssh_hosts_yaml(tmp_path)
    wf = workflow(tmp_path, 24, 2)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--host", "four", "--run-dir",
                             str(run_dir)], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    ledger = tmp_path / "ledger"
    try:
        wait_for(lambda: ledger.exists() and "10.233.3.2" in ledger.read_text(), 30, "a member on node 3", step=0.1)
        assert "10.233.3.2" in ledger.read_text(), "nothing started on node 3"
        subprocess.run(["bash", str(NODE_SH), "kill", "3"], check=True, timeout=30)
        out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
        subprocess.run(["bash", str(NODE_SH), "revive", "3"], timeout=60)
    assert proc.returncode == 0, err
    lines = [l.split() for l in ledger.read_text().splitlines()]
    ends = Counter(int(l[3]) for l in lines if l[2] == "end")
    assert sorted(ends) == list(range(24))
    events = [json.loads(l) for l in (run_dir / "pilots" / "p1" / "events.jsonl").read_text().splitlines()]
    lost = [e for e in events if e["k"] == "node_lost"]
    assert lost and lost[0]["node"] == "pwe-n3"
    rerun = {e["m"] for e in lost}
    # what was running on node 3 when it died finished on another node
    for m in rerun:
        assert any(l[2] == "end" and int(l[3]) == m and l[1] != "10.233.3.2" for l in lines)
    from pwe.observe.results import load_state

    _, st = load_state(run_dir)
    assert st.nodes["m"].counts[4] == 24 and not st.nodes["m"].failures


def test_unknown_host_key_is_refused(ssh_nodes, tmp_path):
    cfg = tmp_path / "ssh_config"
    bad_known = tmp_path / "known_hosts"
    bad_known.write_text("")  # knows no host
    cfg.write_text((SSH / "ssh_config").read_text().replace(str(SSH / "known_hosts"), str(bad_known)))
    (tmp_path / "hosts.yaml").write_text(
        f"hosts:\n  strangers:\n    cores_per_node: 2\n    nodes: [pwe-n1]\n    ssh_config: {cfg}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: k\nnodes:\n  m:\n    run: echo hi\n")
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--host", "strangers", "--run-dir",
                           str(tmp_path / "run")], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    err = output(tmp_path / "run", "m", 0, "stderr")
    assert "Host key verification failed" in err


def test_members_on_other_nodes_die_with_their_pilot(ssh_nodes, tmp_path):
    """kill -9 of the pilot: its ssh session to a node ends, and the node agent there kills
    its members' process groups (no member outlives its pilot unnoticed)."""
    import signal

    d = tmp_path / "pilot"
    d.mkdir()
    tasks = [{"k": "task", "n": "a", "m": m, "a": 1, "cmd": f"echo $$ > {tmp_path}/pid{m}; sleep 60; echo late",
              "cwd": str(d / "m" / str(m)), "env": {}, "ranks": 1, "threads": 1, "wall": None} for m in range(2)]
    (d / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    prefix = f"ssh -F {SSH / 'ssh_config'} -o BatchMode=yes {{node}}"
    pilot = subprocess.Popen([sys.executable, "-m", "pilot", "--dir", str(d), "--hosts", "pwe-n1:2", "--launcher",
                              "ssh", "--launcher-prefix", prefix], env=ENV, start_new_session=True)
    pids = []
    try:
        # the shell makes the file before echo writes to it: wait for the whole line, not the file
        def written(m):
            f = tmp_path / f"pid{m}"
            return f.exists() and f.read_text().endswith("\n")

        wait_for(lambda: all(written(m) for m in range(2)), 30, "both members to start")
        pids = [int((tmp_path / f"pid{m}").read_text()) for m in range(2)]
        assert all(pid_alive(p) for p in pids)  # (the nodes share this machine's processes)
        pilot.kill()
        pilot.wait()
        wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "the members on pwe-n1 to end with their pilot")
        assert not any(pid_alive(p) for p in pids), "a member on pwe-n1 outlived its pilot"
    finally:
        pilot.kill()
        for p in pids:
            try:
                os.killpg(p, signal.SIGKILL)
            except OSError:
                pass
