"""Packing members onto cores, GPUs and memory, end to end through `pwe run`: never more at once
than the host holds (from the members' own ledgers), GPUs each to one member, a host per node
with a pilot of its own, and what no node could hold refused at plan time."""

from __future__ import annotations


import pytest

from helpers import most_at_once, no_traceback, pwe, read_journal, run_cli, show


def _packing_run(tmp_path, write, threads: int, cores: int) -> list[tuple[float, float]]:
    ledger = tmp_path / f"ledger-{threads}.txt"
    wf = write(f"""\
name: packing
nodes:
  s:
    parameters: {{k: {{range: [0, 8]}}}}
    run: s=$EPOCHREALTIME; sleep 0.3; echo "$PWE_MEMBER $s $EPOCHREALTIME" >> {ledger}
    scheduling: {{ranksPerMember: 1, threadsPerRank: {threads}}}
""", name=f"pack{threads}.yaml")
    rc, out, err = pwe("run", wf, "--cores", str(cores), "--run-dir", tmp_path / f"run{threads}", cwd=tmp_path)
    assert rc == 0, err
    rows = [line.split() for line in ledger.read_text().splitlines()]
    assert sorted(int(r[0]) for r in rows) == list(range(8))
    return [(float(s), float(e)) for _, s, e in rows]



def test_no_oversubscription(tmp_path, write):
    two = most_at_once(_packing_run(tmp_path, write, threads=2, cores=4))
    assert two <= 2, f"{two} members of 2 threads ran at once on 4 cores"
    assert two == 2, "members of 2 threads on 4 cores never ran two at a time"
    one = most_at_once(_packing_run(tmp_path, write, threads=1, cores=4))
    assert one <= 4, f"{one} members of 1 thread ran at once on 4 cores"
    assert one >= 2, "members of 1 thread on 4 cores never overlapped: packing is broken"



GPU_HOST = "hosts:\n  local: {protocol: local, cores_per_node: 4, gpus_per_node: 2, memory_per_node: 1000}\n"



@pytest.mark.parametrize("visible, devices", [(None, ("0", "1")), ("5,7", ("5", "7"))])
def test_gpus_and_memory_limit_packing(tmp_path, write, visible, devices):
    """4 cores, 2 GPUs, 1000 MB (hosts.yaml beside the workflow): members of one GPU run
    two at a time, each on its own GPU; members of 400 MB run two at a time. Both nodes
    run side by side, so the cores alone would have let four of each run. When the
    allocation's GPUs are named (CUDA_VISIBLE_DEVICES=5,7), members get those names."""
    (tmp_path / "hosts.yaml").write_text(GPU_HOST)
    ledger = tmp_path / "ledger"
    wf = write(f"""\
name: gpus
nodes:
  g:
    parameters: {{k: {{range: [0, 6]}}}}
    run: s=$EPOCHREALTIME; sleep 0.4; echo "g ${{CUDA_VISIBLE_DEVICES:-none}} ${{PWE_GPUS:-none}} $s $EPOCHREALTIME" >> {ledger}
    scheduling: {{gpusPerMember: 1}}
  m:
    parameters: {{k: {{range: [0, 6]}}}}
    run: s=$EPOCHREALTIME; sleep 0.4; echo "m ${{CUDA_VISIBLE_DEVICES:-none}} - $s $EPOCHREALTIME" >> {ledger}
    scheduling: {{memoryPerMember: 400}}
""")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path,
                           env={"CUDA_VISIBLE_DEVICES": visible} if visible else None)
    assert rc == 0, err
    rows = [line.split() for line in ledger.read_text().splitlines()]
    g = [(r[1], r[2], float(r[3]), float(r[4])) for r in rows if r[0] == "g"]
    m = [(float(r[3]), float(r[4])) for r in rows if r[0] == "m"]
    assert len(g) == 6 and len(m) == 6
    assert all(dev in devices and dev == same for dev, same, _, _ in g), g
    assert most_at_once([(s, e) for _, _, s, e in g]) == 2, g
    for dev, _, s, e in g:  # two members at once never share a GPU
        assert not [d for d, _, s2, e2 in g if d == dev and (s2, e2) != (s, e) and s2 < e and s < e2], g
    assert most_at_once(m) == 2, m
    if not visible:
        assert all(r[1] == "none" for r in rows if r[0] == "m")  # no GPU asked, none given



def test_memory_per_member_on_a_host_that_states_no_memory_is_reported(tmp_path, write):
    (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {protocol: local, cores_per_node: 2}\n")
    wf = write("name: m\nnodes:\n  a:\n    host: box\n    run: 'true'\n"
               "    scheduling: {memoryPerMember: 100, account: abc}\n")
    rc, out, err = pwe("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    assert ("warning: node 'a': host 'box' has no batch system; scheduling account not used; it states no "
            "memory_per_node; memoryPerMember is each member's limit, not packed by\n") in err, err



@pytest.mark.parametrize("sched, phrase", [
    ("gpusPerMember: 3", "a member needs 3 GPUs (gpusPerMember) but host 'local' has 2 per node"),
    ("memoryPerMember: 2000", "a member needs 2000 MB (memoryPerMember) but host 'local' has 1000 MB per node"),
    ("gpusPerMember: 1, ranksPerMember: 2, threadsPerRank: 4",
     "a member that asks for GPUs or memory runs on one node, but it needs 8 cores and host 'pair' has nodes of 4"),
])
def test_gpus_or_memory_no_node_has_are_refused_at_plan_time(tmp_path, write, sched, phrase):
    # 'pair': two nodes of 4 cores and 1 GPU (never contacted: this is refused at plan time)
    (tmp_path / "hosts.yaml").write_text(GPU_HOST + "  pair: {protocol: local, nodes: [n1, n2], cores_per_node: 4, "
                                         "gpus_per_node: 1}\n")
    host = "pair" if "ranksPerMember" in sched else "local"
    wf = write(f"name: big\nnodes:\n  a:\n    run: 'true'\n    host: {host}\n    scheduling: {{{sched}}}\n")
    rc, out, err = pwe("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 2 and phrase in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()



def test_nodes_on_two_hosts_each_get_their_own_pilot(tmp_path, write):
    """Node 'a' names a one-core host, node 'b' this machine: both run at once, each in a
    pilot of its own host, and 'a' never runs two members at a time."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  small: {protocol: local, cores_per_node: 1}\n"
                                         "  twin: {protocol: local, cores_per_node: 2}\n")
    ledger = tmp_path / "ledger"
    wf = write(f"""\
name: lanes
nodes:
  a:
    host: small
    parameters: {{k: {{range: [0, 4]}}}}
    run: s=$EPOCHREALTIME; sleep 0.3; echo "a $s $EPOCHREALTIME" >> {ledger}
  b:
    host: twin
    parameters: {{j: {{range: [0, 4]}}}}
    run: s=$EPOCHREALTIME; sleep 0.3; echo "b $s $EPOCHREALTIME" >> {ledger}
  c:
    after: [a, b]
    host: small
    run: echo done
""")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    rows = [line.split() for line in ledger.read_text().splitlines()]
    spans = {n: [(float(s), float(e)) for m, s, e in rows if m == n] for n in "ab"}
    assert most_at_once(spans["a"]) == 1 and most_at_once(spans["b"]) == 2, spans
    assert most_at_once(spans["a"] + spans["b"]) == 3, "the two hosts' pilots did not run side by side"
    journal = read_journal(run)
    lanes = {r["p"]: (r["lane"], r["slots"]) for r in journal if r["e"] == "pilot"}
    assert sorted(lanes.values()) == [("small", 1), ("twin", 2)], lanes
    assert {(r["n"], lanes[r["p"]][0]) for r in journal if r["e"] == "assign"} == \
        {("a", "small"), ("b", "twin"), ("c", "small")}
    assert all(r["state"] == "done" for r in show(run))



def test_member_needs_more_cores_than_host(tmp_path, write):
    wf = write("""\
name: toobig
nodes:
  small:
    run: echo small
  big:
    parameters: {k: [1, 2]}
    run: echo big
    scheduling: {ranksPerMember: 2, threadsPerRank: 2}
""")
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 2, f"exit {rc}\n{err}"
    no_traceback(err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "big" in lines[0] and "needs 4 cores" in lines[0], lines[0]
    assert not (tmp_path / "run").exists(), "nothing may be run (or left behind) for an impossible workflow"
