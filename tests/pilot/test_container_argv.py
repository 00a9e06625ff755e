"""A member's command line inside a container (pilot/containers.py), one per runtime, and
through a launcher (pilot/launchers.py wrap's ``inner``): always an argv, so that an image
path or a directory with shell characters is one argument, never read by a shell.
Charliecloud's and podman's are run for real in tests/engine/test_containers.py and
test_podman.py; apptainer (not in Debian) is rendered and checked here only."""

from __future__ import annotations

import os
import shlex

from pilot import containers
from pilot.allocation import Node
from pilot.launchers import wrap
from pilot.packing import Placement

HOSTILE = "/imgs/sim;touch PWNED $(touch X) `id` 'q\"\n#"
CTR = {"rt": "charliecloud", "img": "/imgs/sim", "bind": ["/ws", "/ws/runs/r1", "/runs/r1"]}
ENV = {"TMPDIR": "/scratch/pwe-p1/3", "PWE_OUTPUTS": "/scratch/pwe-p1/a.0.1.outputs", "SECRET": "s3cr3t v@lue"}


def test_charliecloud_binds_each_directory_at_its_own_path_with_a_private_tmp():
    argv = containers.command(CTR, "echo hi > out", "/runs/r1/members/a", ENV, "/scratch/pwe-p1")
    assert argv == ["ch-run", "-t", "--set-env=TMPDIR=/scratch/pwe-p1/3",
                    "-b", "/runs/r1:/runs/r1", "-b", "/scratch/pwe-p1:/scratch/pwe-p1", "-b", "/ws:/ws",
                    "-c", "/runs/r1/members/a", "/imgs/sim", "--", "sh", "-c", "echo hi > out"]


def test_a_plain_command_is_execd_inside_without_a_shell():
    argv = containers.command(CTR, "sim --steps 10", "/w", {}, None)
    assert argv[-4:] == ["--", "sim", "--steps", "10"] and "--set-env" not in " ".join(argv)


def test_apptainer_takes_its_binds_as_one_list_and_gpus_as_nv():
    ctr = {**CTR, "rt": "apptainer", "img": "/imgs/sim.sif"}
    argv = containers.command(ctr, "nvidia-smi -L", "/w", ENV, "/scratch/pwe-p1", gpus=True)
    assert argv == ["apptainer", "exec", "--bind", "/runs/r1:/runs/r1,/scratch/pwe-p1:/scratch/pwe-p1,/ws:/ws",
                    "--nv", "--pwd", "/w", "/imgs/sim.sif", "nvidia-smi", "-L"]
    assert "--nv" not in containers.command(ctr, "true", "/w", ENV, None)


def test_podman_is_given_each_variable_by_name_never_its_value():
    ctr = {**CTR, "rt": "podman", "img": "localhost/sim:1"}
    argv = containers.command(ctr, "true", "/w", ENV, None, gpus=True)
    assert argv[:5] == ["podman", "run", "--rm", "--pull=never", "--network=host"]
    # (rootless, the member keeps its uid inside; root's podman refuses keep-id)
    assert ("--userns=keep-id" in argv) == (os.geteuid() != 0)
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--env"] == sorted(ENV)
    assert not any("s3cr3t" in a for a in argv)  # (a value never on a command line: ps shows those)
    assert argv[argv.index("--device") + 1] == "nvidia.com/gpu=all"
    assert argv[-4:] == ["-w", "/w", "localhost/sim:1", "true"]
    unset = containers.command(ctr, "true", "/w", {"A": "1", "GONE": None}, None)  # (a module load unset GONE)
    assert [unset[i + 1] for i, a in enumerate(unset) if a == "--env"] == ["A"]


def test_a_hostile_image_path_is_one_argument_for_every_runtime():
    for rt in containers.RUNTIMES:
        argv = containers.command({**CTR, "rt": rt, "img": HOSTILE}, "true", "/w", {}, None)
        assert argv.count(HOSTILE) == 1 and "sh" not in argv[:argv.index(HOSTILE)]


def test_binds_inside_another_go_with_it_and_a_separator_in_one_is_refused():
    assert containers.binds(["/a/b", "/a", "/ab", ""], "/a/c/tmp") == ["/a", "/ab"]
    assert containers.bad_bind(["/ok", "/x:y"]) and containers.bad_bind(["/x,y"]) and containers.bad_bind(["/x\ny"])
    assert containers.bad_bind(["/ok", "/sp ace/$(x)"]) is None  # (an argv: nothing there is read by a shell)


def test_a_launcher_starts_the_containers_argv_instead_of_bash():
    here, there = Node("n1", 4, local=True), Node("n2", 4)
    inner = containers.command({**CTR, "img": HOSTILE}, "echo $PWE_MEMBER", "/w d", {}, None)
    srun = wrap("srun", inner, "echo $PWE_MEMBER", Placement([(here, 2), (there, 2)]), 4, 1, "/w d", {}, None, inner)
    assert srun[-len(inner):] == inner and "bash" not in srun
    ssh = wrap("ssh", inner, "echo $PWE_MEMBER", Placement([(there, 1)]), 1, 1, "/w d", {"A": "x y"}, None, inner)
    # the remote shell reads one string: split as it would, the container's argv comes back whole
    assert shlex.split(ssh[-1])[-len(inner):] == inner
    assert wrap("srun", ["x"], "x", Placement([(there, 1)]), 1, 1, "/w", {})[-3:] == ["bash", "-c", "x"]


def test_a_function_members_worker_starts_inside_with_its_program_on_stdin_for_every_runtime():
    """pilot/pyworkers.py starts a worker inside its node's container as ``python3 - SPEC
    WORKSPACE 3`` (its program on stdin, its socket fd 3): its $TMPDIRs' directory mounted,
    the spec and workspace one argument each; podman keeps fd 3 and stdin (``-i``)."""
    box = containers.box(CTR, "/scratch/pwe-p1", gpus=False)
    assert box["bind"] == ["/runs/r1", "/scratch/pwe-p1", "/ws"]
    args = ["pkg.mod:fn", "/ws dir;$(id)", "3"]
    argv = containers.worker(box, "python3", args, "/ws dir;$(id)", {"USER": "u"})
    assert argv == ["ch-run", "-t", "-b", "/runs/r1:/runs/r1", "-b", "/scratch/pwe-p1:/scratch/pwe-p1",
                    "-b", "/ws:/ws", "-c", "/ws dir;$(id)", "/imgs/sim", "--", "python3", "-", *args]
    app = containers.worker({**box, "rt": "apptainer", "gpus": True}, "/opt/py/bin/python", args, "/w", {})
    assert app[-5:] == ["/opt/py/bin/python", "-", *args] and "--nv" in app
    pod = containers.worker({**box, "rt": "podman", "img": HOSTILE}, "python3", args, "/w", {"SECRET": "s3cr3t"})
    assert "-i" in pod and "--preserve-fds=1" in pod and pod.count(HOSTILE) == 1
    assert not any("s3cr3t" in a for a in pod) and pod[-5:] == ["python3", "-", *args]
    for rt in containers.RUNTIMES:  # (a hostile image path: one argument before the interpreter, for every runtime)
        hostile = containers.worker({**box, "rt": rt, "img": HOSTILE}, "python3", args, "/w", {})
        assert hostile.count(HOSTILE) == 1 and hostile.index(HOSTILE) < hostile.index("python3")
    # a command member's podman line keeps neither (its stdin is /dev/null, it has no socket)
    assert "--preserve-fds=1" not in containers.command({**CTR, "rt": "podman"}, "true", "/w", {}, None)
