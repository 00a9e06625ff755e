"""Partition chosen by resources (issue 14, from Row): a node's pilots go to the first
partition, in the host's priority order, whose walltime and resources (GPUs, cores,
memory, tmp) hold its members; `pwe plan --host` shows the choice and why; on the real
SLURM a GPU member's pilot job lands in the GPU partition and a CPU member's elsewhere."""

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import ROOT, read_journal, run_cli

HOSTS = """
hosts:
  cluster:
    protocol: slurm
    cores_per_node: 8
    max_nodes: 1
    partitions:                 # priority order
      - {name: short, max_walltime: 10}
      - {name: gpu, gpus_per_node: 2}
      - {name: debug}
  ll:
    protocol: loadleveler
    cores_per_node: 8
    gpus_per_node: 2
"""


def workflow(tmp_path: Path, train: str = "gpusPerMember: 1, maxWallTime: 20", post: str = "maxWallTime: 20",
             run: str = "true") -> Path:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: gp\ndefaults: {host: cluster}\nnodes:\n"
                  f"  train:\n    parameters: {{i: {{range: [0, 4]}}}}\n    run: {json.dumps(run)}\n"
                  f"    scheduling: {{{train}}}\n"
                  f"  post:\n    after: [train]\n    parameters: {{i: {{range: [0, 4]}}}}\n    run: {json.dumps(run)}\n"
                  f"    scheduling: {{{post}}}\n")
    return wf


def plan_json(wf: Path) -> dict:
    status, out, err = run_cli("plan", wf, "--json", cwd=wf.parent)
    assert status == 0, err
    return json.loads(out)


def test_plan_shows_each_nodes_partition_and_why(tmp_path):
    wf = workflow(tmp_path)
    d = plan_json(wf)
    parts = {n["id"]: n["partition"] for n in d["nodes"]}
    # GPU members: short is too short, gpu is the first with GPUs
    assert parts["train"]["partition"] == "gpu" and parts["train"]["gpus_per_node"] == 2
    # CPU members: gpu fits but has GPUs, so debug (the first without) is taken, and it says so
    assert parts["post"]["partition"] == "debug" and "gpu skipped" in parts["post"]["why"]
    # one pilot job per (host, partition): each asks for its partition, the GPU one for the GPUs
    scripts = d["pilot_scripts"]
    assert set(scripts) == {"cluster/gpu", "cluster/debug"}
    assert "#SBATCH --partition=gpu\n" in scripts["cluster/gpu"] and "#SBATCH --gres=gpu:2\n" in scripts["cluster/gpu"]
    assert "--gpus-per-node 2" in scripts["cluster/gpu"]  # the pilot packs members by the partition's GPUs
    assert "#SBATCH --partition=debug\n" in scripts["cluster/debug"] and "gres" not in scripts["cluster/debug"]
    # the text form says it too
    status, out, err = run_cli("plan", wf, cwd=tmp_path)
    assert status == 0, err
    assert "partition: gpu (the first in priority order that fits walltime 20 min and 1 GPU(s) per member)" in out
    assert "first pilot job for host cluster/debug" in out


def test_a_short_walltime_keeps_cpu_members_in_the_first_partition(tmp_path):
    d = plan_json(workflow(tmp_path, post="maxWallTime: 5"))
    parts = {n["id"]: n["partition"]["partition"] for n in d["nodes"]}
    assert parts == {"train": "gpu", "post": "short"}


def test_cpu_members_go_to_a_gpu_partition_only_when_nothing_else_fits(tmp_path):
    hosts = HOSTS.replace("      - {name: debug}\n", "")
    wf = workflow(tmp_path, post="maxWallTime: 20")
    (tmp_path / "hosts.yaml").write_text(hosts)
    d = plan_json(wf)
    post = next(n for n in d["nodes"] if n["id"] == "post")["partition"]
    assert post["partition"] == "gpu" and "but none without fits" in post["why"]
    # both nodes then share one lane: one pilot script
    assert list(d["pilot_scripts"]) == ["cluster"]


def test_queue_overrides_the_choice(tmp_path):
    d = plan_json(workflow(tmp_path, post="maxWallTime: 20"))
    assert next(n for n in d["nodes"] if n["id"] == "post")["partition"]["partition"] == "debug"  # (chosen)
    d = plan_json(workflow(tmp_path, post="maxWallTime: 20, queue: gpu"))
    post = next(n for n in d["nodes"] if n["id"] == "post")["partition"]
    assert post["partition"] == "gpu" and post["why"] == "queue in the scheduling profile"
    # a queue named that cannot hold the walltime is refused, not left pending (issue 22)
    status, _, err = run_cli("plan", workflow(tmp_path, post="maxWallTime: 20, queue: short"), cwd=tmp_path)
    assert status == 2 and "max_walltime of queue 'short'" in err and len(err.strip().splitlines()) == 1, err


def test_no_partition_fits_is_one_line_naming_node_and_host(tmp_path):
    wf = workflow(tmp_path, train="gpusPerMember: 3, maxWallTime: 20")
    for cmd in ("validate", "plan"):
        status, out, err = run_cli(cmd, wf, cwd=tmp_path)
        assert status == 2, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"{wf}:4: node 'train': host 'cluster' has no partition for its pilots"), err
        assert "gpu (2 GPUs per node < gpusPerMember 3)" in lines[0]
        assert "short (max_walltime 10 < maxWallTime 20 min)" in lines[0]


def test_loadleveler_gpus_are_refused_in_one_line(tmp_path):
    wf = workflow(tmp_path)
    status, out, err = run_cli("plan", wf, "--host", "ll", cwd=tmp_path)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "cannot ask loadleveler (host 'll') for GPUs" in err


def test_partition_resources_are_checked_in_the_hosts_file(tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts:\n  c:\n    protocol: slurm\n    partitions:\n"
                                         "      - {name: g, gpus_per_node: -1}\n")
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a:\n    host: c\n    run: 'true'\n")
    status, out, err = run_cli("validate", tmp_path / "wf.yaml", cwd=tmp_path)
    assert status == 2 and "hosts.yaml" in err and "gpus_per_node" in err and "Traceback" not in err, err


# -- the real SLURM (2 count-only GPUs on its node, partition gpu: tests/services/setup.sh) -----

def test_gpu_members_pilot_lands_in_the_gpu_partition_cpu_members_elsewhere(slurm_cluster, tmp_path):
    ledger = tmp_path / "ledger"
    # each member: a line when it starts and ends, with its GPUs and job (its own record)
    run = (f"echo start {{{{ i }}}} $PWE_NODE $SLURM_JOB_ID gpus=${{CUDA_VISIBLE_DEVICES:-none}} "
           f"$(date +%s.%N) >> {ledger}; sleep 2; "
           f"echo end {{{{ i }}}} $PWE_NODE $SLURM_JOB_ID gpus=${{CUDA_VISIBLE_DEVICES:-none}} "
           f"$(date +%s.%N) >> {ledger}")
    wf = workflow(tmp_path, run=run)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(run_dir)], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in ledger.read_text().splitlines()]
    starts = [w for w in lines if w[0] == "start"]
    ends = [w for w in lines if w[0] == "end"]
    # every member ran once, and only once
    assert sorted((w[2], w[1]) for w in starts) == sorted((n, str(i)) for n in ("train", "post") for i in range(4))
    assert sorted((w[2], w[1]) for w in ends) == sorted((w[2], w[1]) for w in starts)
    jobs = {node: {w[3] for w in starts if w[2] == node} for node in ("train", "post")}
    assert len(jobs["train"]) == 1 and len(jobs["post"]) == 1 and jobs["train"] != jobs["post"], jobs
    # SLURM's own word on where each job ran and what it was given
    gpu_job, cpu_job = slurm_cluster.job(next(iter(jobs["train"]))), slurm_cluster.job(next(iter(jobs["post"])))
    assert gpu_job["Partition"] == "gpu", gpu_job
    assert "gpu:2" in gpu_job.get("TresPerNode", ""), gpu_job
    assert cpu_job["Partition"] == "debug", cpu_job
    assert "gpu" not in cpu_job.get("TresPerNode", ""), cpu_job
    # the engine kept one lane per partition
    pilots = {r["lane"]: r["job"] for r in read_journal(run_dir) if r["e"] == "pilot"}
    assert pilots == {"cluster/gpu": next(iter(jobs["train"])), "cluster/debug": next(iter(jobs["post"]))}
    # the gpu pilot was let go once train was over (pwe/engine/feed.py, let_go), not after its
    # idle_timeout: on this one-node cluster the debug job could only start once it had left
    from pwe.engine.pilotask import listing

    gone = {p["host"]: p["why"] for p in listing(run_dir)}
    assert gone["cluster/gpu"] == "exited", gone
    # count-only GRES: SLURM names no devices, so the pilot numbered the 2 GPUs itself: each
    # GPU member had one of its own, never one another member held at the same time
    spans = {}
    for w in starts:
        if w[2] == "train":
            spans[w[1]] = [float(w[5]), None, w[4]]
    for w in ends:
        if w[2] == "train":
            spans[w[1]][1] = float(w[5])
    assert {s[2] for s in spans.values()} <= {"gpus=0", "gpus=1"}, spans
    for a, (s1, e1, g1) in spans.items():
        for b, (s2, e2, g2) in spans.items():
            if a < b and s1 < e2 and s2 < e1:
                assert g1 != g2, (a, b, spans)
    assert all(w[4] == "gpus=none" for w in starts if w[2] == "post")


def test_gpu_partition_example_runs_on_slurm(slurm_cluster, tmp_path):
    """examples/gpu_partition.yaml with examples/hosts.yaml, as the README runs it."""
    from pwe.observe.results import load_state, member_record

    example = ROOT / "examples" / "gpu_partition.yaml"
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", str(example), "--run-dir", str(run_dir)],
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    _, st = load_state(run_dir)
    recs = {nid: [member_record(st, nid, i) for i in range(4)] for nid in ("train", "score")}
    assert all(r["state"] == "done" for rs in recs.values() for r in rs)
    train_jobs = {r["outputs"]["job"] for r in recs["train"]}
    score_jobs = {r["outputs"]["job"] for r in recs["score"]}
    assert len(train_jobs) == len(score_jobs) == 1 and train_jobs != score_jobs
    assert slurm_cluster.job(train_jobs.pop())["Partition"] == "gpu"
    assert slurm_cluster.job(score_jobs.pop())["Partition"] == "debug"
    # each GPU member was given one of the job's GPUs (SLURM's ids, as the pilot maps them)
    assert {r["outputs"]["gpus"] for r in recs["train"]} <= {"0", "1"}


def test_a_queue_the_host_does_not_list_gets_a_lane_of_its_own(tmp_path):
    d = plan_json(workflow(tmp_path, post="maxWallTime: 20, queue: special"))
    assert set(d["pilot_scripts"]) == {"cluster/gpu", "cluster/special"}
    assert "#SBATCH --partition=special\n" in d["pilot_scripts"]["cluster/special"]


def test_a_pilot_asks_for_enough_nodes_for_its_members_tmp(tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts:\n  c: {protocol: slurm, cores_per_node: 8, tmp_per_node: 500}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    host: c\n    parameters: {i: {range: [0, 20]}}\n    run: x\n"
                  "    scheduling: {tmpPerMember: 100, maxWallTime: 30}\n")
    status, out, err = run_cli("plan", wf, cwd=tmp_path)
    assert status == 0, err
    # 20 members fit 3 nodes of 8 cores, but 2000 MB of $TMPDIR need 4 nodes of 500
    assert "#SBATCH --nodes=4\n" in out and "--tmp-per-node 500" in out, out
