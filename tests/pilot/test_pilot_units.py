"""Pure tier for the pilot: allocation discovery, packing, launcher command lines."""

import os
import re
import socket

import pytest

from pilot.allocation import Node, discover, expand_counts, expand_hostlist, slurm_hostnames
from pilot.launchers import choose, wrap
from pilot.packing import Packer


def test_slurm_hostlists_and_counts():
    assert expand_hostlist("node[01-03,07],gpu1") == ["node01", "node02", "node03", "node07", "gpu1"]
    assert expand_hostlist("a[1-2]b[3-4]") == ["a1b3", "a1b4", "a2b3", "a2b4"]
    assert expand_hostlist("single") == ["single"]
    assert expand_hostlist("n[1-3,7]") == ["n1", "n2", "n3", "n7"]
    assert expand_hostlist("a1,b[01-02]") == ["a1", "b01", "b02"]
    assert expand_hostlist("pwe-n[1-4]") == ["pwe-n1", "pwe-n2", "pwe-n3", "pwe-n4"]
    assert expand_counts("4(x2),2") == [4, 4, 2]
    with pytest.raises(ValueError):
        expand_counts("four")


@pytest.mark.parametrize("bad", ["n[1-", "n[3-1]", "a,,b", "a,", "n[x]", "[", "]", "n]"])
def test_a_node_list_that_cannot_be_read_is_refused_not_guessed(bad):
    with pytest.raises(ValueError, match="cannot read the node list"):
        expand_hostlist(bad)
    with pytest.raises(ValueError):  # (scontrol prints "n]" for "n[1-": its answer is checked first)
        slurm_hostnames(bad)


def test_inside_slurm_the_node_list_is_slurms_own_expansion():
    """SLURM_JOB_NODELIST read by scontrol where it exists, by the pilot's expander where
    not: the same nodes either way, for every form the issue names."""
    for spec in ("n[1-3,7]", "a1,b[01-02]", "node[01-03,07],gpu1", "pwe-n[1-4]"):
        assert slurm_hostnames(spec) == expand_hostlist(spec)
    alloc = discover(env={"SLURM_JOB_NODELIST": "a1,b[01-02]", "SLURM_JOB_CPUS_PER_NODE": "2(x3)",
                          "SLURM_JOB_ID": "9"})
    assert [(n.name, n.cores) for n in alloc.nodes] == [("a1", 2), ("b01", 2), ("b02", 2)]


def test_ranks_per_node_places_exactly_that_many_on_each_node():
    p = Packer(nodes(2, 2, 2, 2))
    pl = p.place(4, 1, per_node=2)
    assert sorted(k for _, k in pl) == [2, 2] and len({n.name for n, _ in pl}) == 2
    # without ranksPerNode the same member would take the free cores wherever they are
    p.free["n2"] = 1
    assert p.place(4, 1, per_node=2) is None  # n2 and n3: only one node with 2 free cores
    assert p.place(2, 1) is not None
    p.release(pl, 1)
    assert p.why_never(4, 1, per_node=4) and "ranksPerNode" in p.why_never(4, 1, per_node=4)
    assert p.why_never(8, 1, per_node=2) is None  # four nodes of two
    p.kill_node("n0")
    assert "3 such nodes" in p.why_never(8, 1, per_node=2)


def test_a_task_carries_ranks_per_node_only_when_it_divides():
    from pilot.members import task_shape

    assert task_shape({"ranks": 4, "threads": 1, "rpn": 2})[7] == 2
    assert task_shape({"ranks": 4, "threads": 1, "rpn": 3})[7] is None  # (the engine refuses it at validate)
    assert task_shape({"ranks": 1, "threads": 1, "rpn": 1})[7] is None


def test_the_node_watch_finds_a_node_whose_daemon_stops_answering():
    """Real sockets: a node is there while its port accepts connections; refused twice in
    a row and it is lost (an unanswered connect counts as a miss after the timeout)."""
    import selectors
    import time

    from pilot.nodewatch import NodeWatch

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    sel = selectors.DefaultSelector()
    watch = NodeWatch(["127.0.0.1"], port, sel, every=0.05, timeout=1.0, misses=2)

    def run(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            watch.tick()
            for key, _ in sel.select(timeout=0.02):
                key.data.ready(key.fileobj)

    run(0.5)
    assert watch.gone == set() and watch.missed["127.0.0.1"] == 0
    server.close()  # the daemon dies: connects are refused
    run(0.5)
    assert watch.take_lost() == ["127.0.0.1"] and "127.0.0.1" in watch.gone
    assert "refused" in watch.why["127.0.0.1"].lower()
    assert watch.take_lost() == []  # said once
    watch.close()


def test_discover_from_each_batch_system(tmp_path):
    a = discover({"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_CPUS_PER_NODE": "4(x2),2", "SLURM_JOB_ID": "7"})
    assert (a.kind, a.job_id, [(n.name, n.cores) for n in a.nodes]) == ("slurm", "7", [("n1", 4), ("n2", 4), ("n3", 2)])
    nodefile = tmp_path / "nodes"
    nodefile.write_text("h1\nh1\nh2\nh1\nh2\n")
    a = discover({"PBS_NODEFILE": str(nodefile), "PBS_JOBID": "12.server"})
    assert (a.kind, [(n.name, n.cores) for n in a.nodes]) == ("pbs", [("h1", 3), ("h2", 2)])
    a = discover({"LOADL_HOSTFILE": str(nodefile)})
    assert a.kind == "loadleveler" and a.cores == 5
    a = discover({}, hosts="x:2,y:3")
    assert a.kind == "hosts" and [(n.name, n.cores) for n in a.nodes] == [("x", 2), ("y", 3)]
    a = discover({}, cores=6, walltime_minutes=10, started=1000.0)
    assert a.kind == "local" and a.cores == 6 and a.nodes[0].local and a.end == 1600.0


def test_own_node_is_local():
    a = discover({}, hosts=f"{socket.gethostname()}:2,other:2")
    assert [n.local for n in a.nodes] == [True, False]


def nodes(*cores):
    return [Node(f"n{i}", c) for i, c in enumerate(cores)]


def test_packing_fills_cores_without_oversubscribing():
    p = Packer(nodes(4, 4))
    got = [p.place(1, 2) for _ in range(4)]
    assert all(got) and p.place(1, 1) is None
    used = {}
    for pl in got:
        for n, k in pl:
            used[n.name] = used.get(n.name, 0) + 2 * k
    assert used == {"n0": 4, "n1": 4}
    p.release(got[0], 2)
    assert p.place(1, 2) is not None


def test_best_fit_keeps_whole_nodes_for_wide_members():
    p = Packer(nodes(4, 4))
    p.place(1, 1)
    p.place(1, 1)  # both narrow members share one node
    assert p.place(1, 4) is not None


def test_a_rank_never_straddles_nodes_and_ranks_spread():
    p = Packer(nodes(2, 2, 2))
    assert p.why_never(1, 4) and "at most 2" in p.why_never(1, 4)
    pl = p.place(3, 2)  # three ranks of two threads: one per node
    assert sorted((n.name, k) for n, k in pl) == [("n0", 1), ("n1", 1), ("n2", 1)]
    assert p.place(1, 1) is None


def test_core_usage_rule_caps_each_node():
    p = Packer(nodes(8), core_cap=3)
    assert p.place(1, 3) and p.place(1, 1) is None
    assert p.why_never(1, 4)


def test_share_nodes_false_gives_whole_nodes():
    p = Packer(nodes(4, 4))
    a = p.place(1, 1, exclusive=True)
    b = p.place(1, 1, exclusive=True)
    assert a and b and a[0][0].name != b[0][0].name
    assert p.place(1, 1) is None  # nothing shares an exclusive member's node
    p.release(a, 1, exclusive=True)
    assert p.place(1, 4) is not None


def test_dead_node_takes_no_members():
    p = Packer(nodes(2, 2))
    p.kill_node("n0")
    assert p.place(1, 2)[0][0].name == "n1"
    assert p.place(1, 1) is None


def test_launcher_choice_and_command_lines():
    local, remote = Node("me", 4, local=True), Node("far", 4)
    assert choose("local", [(local, 1)], 1) == "fork"
    assert choose("hosts", [(remote, 1)], 1) == "ssh"
    assert choose("slurm", [(remote, 1)], 1) == "srun"
    assert choose("slurm", [(local, 1)], 1) == "fork"
    assert choose("slurm", [(local, 1)], 1, configured="srun") == "srun"
    assert choose("pbs", [(remote, 2)], 2) == "mpiexec"
    # ssh and fork start one process: a member of 2 ranks goes through MPI, never as one process
    assert choose("hosts", [(remote, 2)], 2, configured="ssh") == "mpiexec"
    assert choose("local", [(local, 2)], 2, configured="fork") == "mpiexec"
    env = {"PWE_MEMBER": "3", "X": "a b; $(rm -rf /)"}
    argv = wrap("srun", ["true"], "echo hi", [(remote, 2)], 2, 3, "/runs/m/3", env)
    assert argv == ["srun", "--exact", "--quiet", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2",
                    "--cpus-per-task=3", "--nodelist=far", "--chdir=/runs/m/3", "bash", "-c", "echo hi"]
    argv = wrap("ssh", ["true"], "echo 'hi there'", [(remote, 1)], 1, 1, "/runs/a b", env)
    assert argv[:-1] == ["ssh", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3",
                         "-o", "ConnectTimeout=5", "--", "far"]
    import shlex

    remote_words = shlex.split(argv[-1])  # what the remote shell will see
    assert remote_words[:2] == ["cd", "/runs/a b"]
    assert "X=a b; $(rm -rf /)" in remote_words and remote_words[-3:] == ["bash", "-c", "echo 'hi there'"]
    # a variable a module load unset (None: pilot/nodesetup.py) is taken out there (env -u), before the rest
    # (names quoted as values are: a module's own variable may be named anything)
    gone = shlex.split(wrap("ssh", ["true"], "x", [(remote, 1)], 1, 1, "/d", {"A": "1", "OLD;x": None, "B;$(id)": "2"})[-1])
    assert gone[gone.index("env"):gone.index("env") + 5] == ["env", "-u", "OLD;x", "A=1", "B;$(id)=2"], gone
    from pilot.spawn import environ

    assert environ({"OLD": "s", "KEEP": "k"}, {"OLD": None, "NEW": "n", "NONE": None}) == {"KEEP": "k", "NEW": "n"}
    argv = wrap("mpiexec", ["true"], "./mpi_app", [(remote, 2), (Node("b", 4), 2)], 4, 1, "/d", env)
    assert argv == ["mpiexec", "-n", "4", "--host", "far:2,b:2", "bash", "-c", "./mpi_app"]
    argv = wrap("srun", ["true"], "x", [(remote, 1)], 1, 1, "/d", env, prefix="srun -w {node} -c {threads}")
    assert argv == ["srun", "-w", "far", "-c", "1", "bash", "-c", "x"]


def test_plan_refuses_a_member_wider_than_the_hosts_nodes(tmp_path):
    from helpers import run_cli

    (tmp_path / "hosts.yaml").write_text("hosts:\n  twos:\n    cores_per_node: 2\n    nodes: [n1, n2]\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    run: x\n    scheduling: {threadsPerRank: 4}\n")
    status, out, err = run_cli("plan", wf, "--host", "twos")
    assert status == 2 and out == ""
    assert err == (f"{wf}:3: node 'a': a member needs 4 cores for one rank (threadsPerRank) but host 'twos' has "
                   "nodes of 2 cores, and a rank cannot straddle nodes\n")
    # two ranks of two threads fit: one rank per node
    wf.write_text("name: w\nnodes:\n  a:\n    run: x\n    scheduling: {ranksPerMember: 2, threadsPerRank: 2}\n")
    assert run_cli("plan", wf, "--host", "twos")[0] == 0
    wf.write_text("name: w\nnodes:\n  a:\n    run: x\n    scheduling: {ranksPerMember: 3, threadsPerRank: 2}\n")
    status, _, err = run_cli("plan", wf, "--host", "twos")
    assert status == 2 and "has 2 nodes of 2" in err


def test_hosts_file_errors_and_unknown_hosts(tmp_path):
    from helpers import run_cli

    hf = tmp_path / "h.yaml"
    hf.write_text("hosts:\n  c:\n    protocol: slurm\n    cores_per_nod: 4\n")
    status, _, err = run_cli("hosts", "list", "--hosts", hf)
    assert status == 2 and err.startswith(f"{hf}:4: ") and "did you mean 'cores_per_node'" in err
    hf.write_text("hosts:\n  cluster:\n    protocol: slurm\n    contact: ssh://me@login\n    cores_per_node: 4\n")
    status, out, _ = run_cli("hosts", "show", "cluster", "--hosts", hf, "--json")
    assert status == 0 and '"protocol": "slurm"' in out
    status, _, err = run_cli("hosts", "show", "clustr", "--hosts", hf)
    assert status == 2 and "did you mean 'cluster'" in err


def test_core_usage_rule_per_member_kind():
    p = Packer(nodes(8))
    assert p.place(1, 2, cap=4) and p.place(1, 2, cap=4)
    assert p.place(1, 2, cap=4) is None  # 4 of the node's 8 cores used: the cap is reached
    assert p.place(1, 2) is not None  # members without the rule still fill the node
    assert "at most 4" in p.why_never(1, 6, cap=4)


def test_gpus_and_memory_pack_on_one_node():
    p = Packer([Node("a", 4, gpus=2, memory_mb=1000), Node("b", 4)])
    one, two = p.place(1, 1, gpus=1), p.place(1, 1, gpus=1)
    assert one[0][0].name == two[0][0].name == "a" and {one.gpu_ids, two.gpu_ids} == {(0,), (1,)}
    assert p.place(1, 1, gpus=1) is None  # cores are left, GPUs are not
    assert p.place(1, 1) is not None  # a member without GPUs still finds cores
    p.release(one, 1)
    assert p.place(1, 1, gpus=1).gpu_ids == one.gpu_ids  # the released GPU is handed out again
    assert "at most 2" in p.why_never(1, 1, gpus=3)
    assert "one node" in Packer([Node("d", 2, gpus=1), Node("e", 2, gpus=1)]).why_never(2, 2, gpus=1)

    m = Packer([Node("c", 8, memory_mb=1000)])
    a, b = m.place(1, 1, mem=400), m.place(1, 1, mem=400)
    assert a and b and m.place(1, 1, mem=400) is None and m.place(1, 1) is not None
    m.release(a, 1)
    assert m.place(1, 1, mem=400) is not None
    assert "at most 1000 MB" in m.why_never(1, 1, mem=2000)
    # memory the allocation does not state is not counted
    u = Packer([Node("u", 2)])
    assert u.place(1, 1, mem=10**6) is not None and u.why_never(1, 1, mem=10**6) is None


def test_gpus_and_memory_discovered():
    env = {"SLURM_JOB_NODELIST": "g[1-2]", "SLURM_JOB_CPUS_PER_NODE": "8(x2)", "SLURM_GPUS_ON_NODE": "4",
           "SLURM_MEM_PER_NODE": "64000"}
    a = discover(env=env)
    assert [(n.gpus, n.memory_mb) for n in a.nodes] == [(4, 64000), (4, 64000)]
    a = discover(env=env, gpus_per_node=2, memory_per_node=1000)  # the host's definition wins
    assert [(n.gpus, n.memory_mb) for n in a.nodes] == [(2, 1000), (2, 1000)]
    assert discover(env={"CUDA_VISIBLE_DEVICES": "0,3"}, cores=2).nodes[0].gpus == 2
    assert discover(env={"CUDA_VISIBLE_DEVICES": "-1"}, cores=2).nodes[0].gpus == 0  # CUDA's "none"
    here = len([d for d in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", d)])
    assert discover(env={}, cores=2).nodes[0].gpus == here  # this machine's NVIDIA devices


def test_local_gpus_counted_one_way(tmp_path):
    """CUDA_VISIBLE_DEVICES when set, else one id per /dev/nvidiaN (not nvidiactl, nvidia-uvm);
    the local host and the pilot count with the same function."""
    from pilot.allocation import local_gpu_ids

    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (tmp_path / name).touch()
    assert local_gpu_ids({}, dev=str(tmp_path)) == ["0", "1"]
    assert local_gpu_ids({"CUDA_VISIBLE_DEVICES": "3"}, dev=str(tmp_path)) == ["3"]
    assert local_gpu_ids({"CUDA_VISIBLE_DEVICES": "-1"}, dev=str(tmp_path)) == []
    assert local_gpu_ids({}, dev=str(tmp_path / "absent")) == []


def test_plan_shows_gpu_pilots_asking_for_the_nodes_gpus(tmp_path):
    from helpers import NO_SLURM, run_cli

    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  gpu:\n    protocol: slurm\n    cores_per_node: 8\n    gpus_per_node: 4\n    memory_per_node: 64000\n"
        "  torque:\n    protocol: pbs\n    cores_per_node: 8\n    gpus_per_node: 4\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    parameters: {i: {range: [0, 8]}}\n    run: x\n"
                  "    scheduling: {gpusPerMember: 1, memoryPerMember: 8000, maxWallTime: 30}\n")
    status, out, err = run_cli("plan", wf, "--host", "gpu", env=NO_SLURM)
    assert status == 0, err
    assert "#SBATCH --gres=gpu:4\n" in out
    assert "#SBATCH --nodes=2\n" in out  # 8 members of one GPU: two nodes of 4 GPUs (their 8 cores fit one)
    assert "--gpus-per-node 4 --memory-per-node 64000" in out  # the pilot packs by both
    status, out, err = run_cli("plan", wf, "--host", "torque", env=NO_SLURM)
    assert status == 0, err
    assert "#PBS -l nodes=2:ppn=8:gpus=4\n" in out
    # memory can call for more nodes too: 8 x 16000 MB on nodes of 64000 MB
    wf.write_text("name: w\nnodes:\n  a:\n    parameters: {i: {range: [0, 8]}}\n    run: x\n"
                  "    scheduling: {memoryPerMember: 16000, maxWallTime: 30}\n")
    status, out, err = run_cli("plan", wf, "--host", "gpu", env=NO_SLURM)
    assert status == 0 and "#SBATCH --nodes=2\n" in out, out
    # a node without GPU members asks for none
    assert "--gres=gpu" not in out, out


def test_plan_sizes_each_hosts_pilot_by_that_hosts_nodes(tmp_path):
    from helpers import NO_SLURM, run_cli

    (tmp_path / "hosts.yaml").write_text("hosts:\n  cluster:\n    protocol: slurm\n    cores_per_node: 8\n"
                                         "    partitions: [{name: short, max_walltime: 10}, {name: long}]\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  prep:\n    run: x\n  sim:\n    host: cluster\n    after: [prep]\n"
                  "    parameters: {k: {range: [0, 20]}}\n    run: y\n    scheduling: {maxWallTime: 5}\n")
    status, out, err = run_cli("plan", wf, env=NO_SLURM)
    assert status == 0, err
    # sized by 'sim' (20 members, 5 min), not by 'prep', the first node of the graph
    assert "first pilot job for host cluster" in out
    assert "#SBATCH --time=0:05:00\n" in out and "#SBATCH --partition=short\n" in out
    assert "#SBATCH --nodes=3\n" in out


def test_each_mpi_is_called_its_own_way():
    from pilot.mpi import Mpi

    ompi = Mpi("/usr/bin/mpiexec.openmpi", "openmpi", "mpiexec (OpenRTE) 4.1.4")
    argv = wrap("mpiexec", ["true"], "./app", [(Node("a", 4), 2), (Node("b", 4), 2)], 4, 1, "/d", {"PWE_MEMBER": "1"},
                prefix=ompi.prefix(["PWE_MEMBER"]))
    assert argv[:9] == ["/usr/bin/mpiexec.openmpi", "-n", "4", "--host", "a:2,b:2", "--bind-to", "none", "--wdir",
                        "/d"]
    assert argv[-5:] == ["-x", "PWE_MEMBER", "bash", "-c", "./app"]  # remote ranks get the member's variables
    hydra = Mpi("/usr/bin/mpiexec.hydra", "hydra", "HYDRA build details:")
    argv = wrap("mpiexec", ["true"], "./app", [(Node("a", 4), 2)], 2, 1, "/d", {}, prefix=hydra.prefix())
    assert argv == ["/usr/bin/mpiexec.hydra", "-n", "2", "-hosts", "a:2", "-wdir", "/d", "bash", "-c", "./app"]


def test_tmp_is_packed_with_the_cores_on_every_node_a_member_takes():
    # the tmp pool is the packer's own: a node whose pool is full is passed over for the
    # next one with both cores and tmp free (it used to be counted after placement, on the
    # first node only, and the member waited though another node had both)
    p = Packer(nodes(4, 4), tmp={"n0": 300, "n1": 300})
    first = p.place(1, 1, tmp=200)
    assert first and first.tmp == 200
    second = p.place(1, 1, tmp=200)
    assert second and second[0][0].name != first[0][0].name  # best fit would have chosen n0's cores
    assert p.place(1, 1, tmp=200) is None and p.place(1, 1) is not None  # cores left; tmp is not
    p.release(first, 1)
    assert p.place(1, 1, tmp=200)[0][0].name == first[0][0].name  # given back with the cores
    # a member whose ranks span nodes counts its tmp on each of them
    q = Packer(nodes(2, 2), tmp={"n0": 100, "n1": 100})
    wide = q.place(4, 1, tmp=60)
    assert wide and {n.name for n, _ in wide} == {"n0", "n1"}
    assert q.tmp_free == {"n0": 40, "n1": 40}
    q.release(wide, 1)
    assert q.tmp_free == {"n0": 100, "n1": 100}
    assert "at most 100 MB" in q.why_never(1, 1, tmp=150)
    # a node whose pool is not known is not counted
    u = Packer(nodes(2), tmp={"n0": None})
    assert u.place(1, 1, tmp=10**6) is not None and u.why_never(1, 1, tmp=10**6) is None


def test_the_node_watch_gives_up_a_node_that_answers_nothing():
    """A port whose connects hang (its listen queue full: as a node whose link went down,
    nothing comes back) is missed at each probe's timeout; a probe starts every `every`
    seconds whether the last one answered or not, so two misses come `every` apart."""
    import selectors

    from helpers import wait_for
    from pilot.nodewatch import NodeWatch

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    held = [socket.create_connection(("127.0.0.1", port))]  # (fills the queue)
    for _ in range(3):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        held.append(s)
    sel = selectors.DefaultSelector()
    watch = NodeWatch(["127.0.0.1"], port, sel, every=0.05, timeout=0.3, misses=2)

    def turn():
        watch.tick()
        for key, _ in sel.select(timeout=0.02):
            key.data.ready(key.fileobj)
        return watch.gone
    wait_for(turn, 5, "the watch to give the node up", step=0)
    assert watch.take_lost() == ["127.0.0.1"]
    assert watch.why["127.0.0.1"] == f"no answer from port {port} in 0.3 s"
    watch.close()
    assert all(not probes for probes in watch.flight.values())
    for s in held + [server]:
        s.close()


def test_a_task_that_ran_before_goes_ahead_of_what_the_pilot_holds(tmp_path):
    """A member of a second or later attempt (its node or pilot was lost, or it failed)
    had its turn: the pilot puts it at the front of its queue, not behind the sweep it
    already holds (a lost node's members started again 18-21 s after the kill, now ~6 s)."""
    from pilot.agent import PilotAgent
    from pilot.transport import EngineSpool, PilotSpool

    engine = EngineSpool(tmp_path)
    agent = PilotAgent(str(tmp_path), 2, transport=PilotSpool(str(tmp_path)))
    task = {"k": "task", "n": "a", "cmd": "true", "cwd": str(tmp_path / "m"), "env": {}}
    engine.send([{**task, "m": i, "a": 1} for i in range(5)])
    engine.send([{**task, "m": 9, "a": 2}, {**task, "m": 5, "a": 1}])
    assert agent.read_tasks()
    assert [(t["m"], t["a"]) for t in agent.queue] == [(9, 2), (0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]


def test_a_nodes_shared_environment_is_sent_once_and_a_task_naming_an_unknown_one_goes_back(tmp_path):
    """Wire 4: a task carries its member's own environment over the ``env`` message its
    ``eb`` names (sent to a pilot once); a task naming one the pilot never got is handed
    back (no attempt spent), and the engine forgets it sent that one, so it goes again."""
    import json

    from pilot.agent import PilotAgent
    from pilot.transport import EngineSpool, PilotSpool

    engine = EngineSpool(tmp_path)
    agent = PilotAgent(str(tmp_path), 2, transport=PilotSpool(str(tmp_path)))
    task = {"k": "task", "n": "a", "a": 1, "cmd": "true", "cwd": str(tmp_path / "m")}
    engine.send([{"k": "env", "id": "e1", "env": {"PWE_NODE": "a", "X": "shared"}},
                 {**task, "m": 0, "env": {"PWE_MEMBER": "0", "X": "own"}, "eb": "e1"},
                 {**task, "m": 1, "env": {"PWE_MEMBER": "1"}, "eb": "e1"},
                 {**task, "m": 2, "env": {"PWE_MEMBER": "2"}, "eb": "nope"}])
    assert agent.read_tasks()
    assert [t["env"] for t in agent.queue] == [{"PWE_NODE": "a", "X": "own", "PWE_MEMBER": "0"},
                                               {"PWE_NODE": "a", "X": "shared", "PWE_MEMBER": "1"}]
    assert all("eb" not in t for t in agent.queue)
    agent.flush()
    backs = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["k"], e["m"], e["why"]) for e in backs] == [("back", 2, "no environment nope")]
    taken = agent.taken["a"]
    assert len(taken) <= 2 or taken[2] == 0  # not taken: the same attempt may come again

    # the engine's side: the builder's shared environment goes once per pilot, before the
    # first task naming it; a `back` saying the pilot lacks it makes the next task send it again
    from pwe.engine.loop import Engine
    from pwe.engine.handles import PilotHandle

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    parameters: {i: {range: [0, 4]}}\n    env: {PWE_MEMBER: mine}\n"
                  "    run: 'true'\n")
    eng = Engine.create(wf, run_dir=tmp_path / "run", cores=1)
    eng._load()
    t0 = eng.feeder.task("a", 0, 1)
    assert t0["env"] == {"PWE_ATTEMPT": "1", "PWE_PARAM_I": "0"}  # (the node's own env has the last word)
    assert eng.feeder.task_envs[t0["eb"]]["PWE_MEMBER"] == "mine" and "ranks" not in t0 and "wall" not in t0
    (eng.dir / "pilots" / "p1").mkdir(parents=True)
    pilot = PilotHandle("p1", eng.dir / "pilots" / "p1", 0, "here", 1)
    for i in range(2):
        eng.feeder.share_env(pilot, eng.feeder.task("a", i, 1))
    assert [m["k"] for m in pilot._out] == ["env"] and pilot.envs_sent == {t0["eb"]}
    eng.pilots["p1"] = pilot
    eng.ledger.take({"e": "assign", "n": "a", "m": 3, "a": 1, "p": "p1"})
    pilot.outstanding = 1
    eng.intake.take(pilot, {"k": "back", "n": "a", "m": 3, "a": 1, "why": "no environment " + t0["eb"], "t": 1.0, "q": 1})
    assert pilot.envs_sent == set()  # so the next task naming it sends it again
    eng.feeder.share_env(pilot, eng.feeder.task("a", 3, 1))
    assert [m["k"] for m in pilot._out] == ["env", "env"]
    eng.journal.close()


