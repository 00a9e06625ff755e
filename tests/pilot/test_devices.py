"""Members that need devices on this machine: GPUs (found as a GPU node finds them) and MPI
ranks (through the MPI launcher that is really installed).

GPU: this machine has none, so the GPU test gives one process tree a machine that has
one, as a GPU node shows it: ``/dev/nvidia0`` and no ``CUDA_VISIBLE_DEVICES``. It runs
pwe in a private mount namespace whose ``/dev`` is an overlay with that device node
added (the real ``/dev`` is untouched; needs root, as CI is). What is tested is pwe's own
discovery and hand-out of GPU ids, end to end; that a CUDA program then sees exactly that
GPU is CUDA's part (checked on a real GPU machine when one is at hand, see the note of
issue 8).

MPI: Debian's Open MPI (``openmpi-bin``, installed by tests/services/setup.sh) and
SLURM's ``mpiexec`` wrapper (``mpiexec.slurm``, from slurm-wlm), both real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys


from helpers import ROOT, need, output, read_journal, run_cli


def _pwe_with_a_gpu(tmp_path, *args, timeout=90) -> subprocess.CompletedProcess:
    """Run `pwe ARGS` in a mount namespace where /dev/nvidia0 exists (an overlay over the
    real /dev) and CUDA_VISIBLE_DEVICES is not set: a one-GPU node, as its users see it."""
    need(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare (util-linux)")
    upper, work = tmp_path / "dev-upper", tmp_path / "dev-work"
    upper.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    script = ('mount -t overlay overlay -o "lowerdir=/dev,upperdir=$1,workdir=$2" /dev && touch /dev/nvidia0 && '
              'shift 2 && exec "$@"')
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(upper),
                           str(work), sys.executable, "-m", "pwe", *map(str, args)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def test_gpu_members_run_on_a_machine_whose_gpu_is_a_device_node(tmp_path):
    """The local host counted /dev/nvidia0 but the pilot did not (it read only
    CUDA_VISIBLE_DEVICES), and the pilot crashed on its look-ahead when GPUs, not cores,
    ran out; three one-GPU members then waited forever while pilots were started and died
    by the hundred. Now: one GPU, so the members run one at a time, each seeing GPU 0."""
    shown = _pwe_with_a_gpu(tmp_path, "hosts", "show", "local", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["gpus_per_node"] == 1
    ledger = tmp_path / "ledger"
    (tmp_path / "wf.yaml").write_text(f"""\
name: onegpu
nodes:
  train:
    parameters: {{k: [1, 2, 3]}}
    run: s=$EPOCHREALTIME; sleep 0.3; echo "$PWE_MEMBER ${{CUDA_VISIBLE_DEVICES:-unset}} $s $EPOCHREALTIME" >> {ledger}
    scheduling: {{gpusPerMember: 1}}
""")
    proc = _pwe_with_a_gpu(tmp_path, "run", "wf.yaml", "--run-dir", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in ledger.read_text().splitlines()]
    assert sorted(r[0] for r in rows) == ["0", "1", "2"], rows  # each ran, once
    assert {r[1] for r in rows} == {"0"}, rows  # exactly one GPU each: the machine's only one
    spans = sorted((float(r[2]), float(r[3])) for r in rows)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"two members shared the GPU: {spans}"
    pilots = [r for r in read_journal(tmp_path / "run") if r["e"] == "pilot"]
    assert len(pilots) == 1, f"{len(pilots)} pilots for one run of three members"


def test_a_member_no_node_can_hold_fails_with_the_reason(tmp_path):
    """The wider rule of issue 8.1: a member that no node of a live pilot can ever hold does
    not wait silently. Here the pilot's node has no GPU at all (the engine's host said one,
    the allocation has none): the member fails at once, saying why, and the others run."""
    from pwe.engine.loop import Engine

    (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {protocol: local, cores_per_node: 2, gpus_per_node: 1}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: nogpu\ndefaults: {host: box}\nnodes:\n"
                  "  g:\n    run: 'true'\n    scheduling: {gpusPerMember: 1}\n"
                  "  c:\n    parameters: {k: [1, 2]}\n    run: 'true'\n")
    # the pilot is told its node has no GPU, as a batch allocation without GPUs would say
    eng = Engine.create(wf, run_dir=tmp_path / "run", pilot_args=["--gpus-per-node", "0"])
    assert eng.run() is False
    st = eng.state
    assert st.nodes["c"].counts[4] == 2
    assert st.nodes["g"].counts[5] == 1
    assert "needs 1 GPUs on one node; nodes here have at most 0" in st.nodes["g"].why[0]


def test_a_pilot_that_keeps_breaking_stops_the_run_with_its_words(tmp_path):
    """A pilot that comes up and then breaks (here: a launcher prefix naming a field that
    does not exist) used to be replaced forever, one pilot after another, while the run
    showed nothing moving. Three in a row that finished nothing stop the run: one line with
    the pilot's own last words, exit status 3 (stopped, resumable), state intact."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: broken\nnodes:\n  a:\n    parameters: {k: [1, 2, 3]}\n    run: 'true'\n")
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  box: {protocol: local, cores_per_node: 2, launcher: mpiexec, launcher_prefix: 'mpiexec {nope}'}\n")
    rc, out, err = run_cli("run", wf, "--host", "box", "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=60)
    assert rc == 3, (rc, err)  # stopped, resumable
    assert "Traceback" not in err
    assert "3 pilots in a row failed before finishing any member" in err and "KeyError" in err, err
    journal = read_journal(tmp_path / "run")
    assert sum(r["e"] == "pilot" for r in journal) == 3
    assert not any(r["e"] == "end" for r in journal)  # nothing ran, nothing was reported as run


# -- MPI ------------------------------------------------------------------------------------

MPI_WF = """\
name: mpi
nodes:
  hello:
    parameters: {k: [1, 2]}
    run: echo "rank ${OMPI_COMM_WORLD_RANK:-$PMI_RANK} of ${OMPI_COMM_WORLD_SIZE:-$PMI_SIZE} k={{ k }}"
    scheduling: {ranksPerMember: 2}
  bad:
    run: exit 7
    scheduling: {ranksPerMember: 2}
"""


def test_mpi_members_run_every_rank_through_open_mpi(tmp_path, open_mpi):
    """A 2-rank member prints both ranks; `exit 7` is a failure with status 7."""
    from pilot.mpi import classify, find

    found = find()
    assert not isinstance(found, str) and found.kind in ("openmpi", "hydra"), found
    assert classify(shutil.which("mpiexec.openmpi"))[0] == "openmpi"
    wf = tmp_path / "wf.yaml"
    wf.write_text(MPI_WF)
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=120)
    assert rc == 1, err  # `bad` failed
    for m, k in ((0, 1), (1, 2)):
        lines = sorted(output(tmp_path / "run", "hello", m).splitlines())
        assert lines == [f"rank 0 of 2 k={k}", f"rank 1 of 2 k={k}"], lines
    ends = {(r["n"], r["m"]): r for r in read_journal(tmp_path / "run") if r["e"] == "end"}
    assert ends[("hello", 0)]["rc"] == 0 and ends[("hello", 1)]["rc"] == 0
    assert ends[("bad", 0)]["rc"] == 7, ends[("bad", 0)]


def _path_with_only_slurms_mpiexec(tmp_path):
    """A PATH on which `mpiexec` is SLURM's wrapper and there is no other MPI (as on this
    machine before openmpi-bin, and on many clusters' login nodes)."""
    wrapper = shutil.which("mpiexec.slurm") or "/usr/bin/mpiexec.slurm"
    need(os.path.exists(wrapper), "SLURM's mpiexec wrapper is not installed (Debian slurm-wlm)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpiexec").symlink_to(wrapper)
    for tool in ("bash", "sh", "true", "echo", "env", "sleep", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return str(bin_dir)


def test_slurms_mpiexec_wrapper_is_refused_not_recorded_as_success(tmp_path):
    """/usr/bin/mpiexec was SLURM's wrapper, which starts an srun job and
    re-splits `bash -c CMD`: the payload never ran, and `exit 7` was recorded as done with
    status 0. Now `pwe run` refuses before anything runs, in one line, exit 2; and a pilot
    asked to launch ranks there fails the member with the reason, never a success."""
    from pilot.mpi import classify, find

    path = _path_with_only_slurms_mpiexec(tmp_path)
    assert classify(os.path.join(path, "mpiexec"))[0] == "slurm-wrapper"
    reason = find(path)
    assert isinstance(reason, str) and "SLURM's mpiexec wrapper" in reason, reason
    wf = tmp_path / "wf.yaml"
    wf.write_text(MPI_WF)
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, env={"PATH": path})
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "wf.yaml:3: node 'hello': ranksPerMember 2 needs an MPI launcher" in err and "openmpi-bin" in err, err
    assert not (tmp_path / "run").exists()  # nothing made
    # the pilot on its own (as inside a PBS allocation with that PATH): the member fails, with the reason
    d = tmp_path / "pilot"
    d.mkdir()
    task = {"k": "task", "n": "bad", "m": 0, "a": 1, "cmd": "exit 7", "cwd": str(d / "m"), "env": {}, "ranks": 2,
            "threads": 1, "wall": None}
    (d / "tasks.jsonl").write_text(json.dumps(task) + "\n" + json.dumps({"k": "stop"}) + "\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=path)
    subprocess.run([sys.executable, "-m", "pilot", "--dir", str(d), "--slots", "2"], env=env, timeout=60, check=True)
    ends = [json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()
            if json.loads(line)["k"] == "end"]
    assert len(ends) == 1 and ends[0]["rc"] == 127 and "SLURM's mpiexec wrapper" in ends[0]["why"], ends
    assert not any(json.loads(line)["k"] == "start" for line in (d / "events.jsonl").read_text().splitlines())
