"""A member run inside a container image (``container:``): its command line, one function
per runtime, always an argv (never a shell string), so that no path or name of it reaches
a shell. Standard library only.

The engine names the container in each task of its node (``ctr``: ``rt`` runtime, ``img``
the image, ``bind`` the directories its members need: the workspace and the run
directory); the pilot adds its members' $TMPDIRs' directory (pilot/tmpdirs.py: their
outputs files are beside them). Each is mounted at its own path, so the member's
directory, ``$TMPDIR``, ``$PWE_OUTPUTS`` and ``$PWE_WORKSPACE`` mean inside what they mean
outside. Its environment is passed (ch-run and apptainer pass the environment they are
started with; podman is given each of the member's variables by name, ``--env NAME``, its
value never on the command line). GPUs: the member's ``CUDA_VISIBLE_DEVICES`` goes in with
its environment; ch-run binds the host's /dev itself (the image brings the driver's
libraries: ``ch-fromhost --nvidia``), apptainer gets ``--nv``, podman the CDI devices
(``--device nvidia.com/gpu=all``).

The command runs under the image's ``/bin/sh`` (``sh -c CMD``; a command of plain words is
exec'd directly, as outside): many images have no bash.

A function member's worker (pilot/pyworkers.py) runs inside its node's container the same
way (:func:`worker`): the image's Python (``python3``, or ``PWE_PYTHON``) reads the worker's
program on its stdin (``python3 - ...``: no path of the pilot need be inside the image), its
socket to the pilot is fd 3 (podman: ``--preserve-fds=1``, and ``-i`` for its stdin).

The image is checked once per pilot node before its first member there (the engine's
setup lines: pwe/engine/environs.py): a node where the runtime or the image is missing
takes none of the members. For charliecloud, whose ch-run (0.31) mounts a directory image
read-only and so cannot make a bind's mount point in it, that check makes the missing
mount points in the image (empty directories: the image's content id counts none,
pwe/planning/images.py), but for those under /tmp: ch-run runs with a private /tmp (``-t``),
where it makes them itself.
"""

from __future__ import annotations

import os
from typing import Mapping

from .members import argv_for

RUNTIMES = ("charliecloud", "apptainer", "podman")
#: characters a bind's path cannot hold: each runtime reads ``SRC:DST`` (apptainer a list split at ',')
NOT_IN_BIND = (":", ",", "\n")


def binds(wanted: list[str], tmp_base: str | None) -> list[str]:
    """The directories mounted at their own paths: ``wanted`` and ``tmp_base``, less those
    inside another (mounted with it), in order."""
    out: list[str] = []
    for p in sorted({os.path.normpath(p) for p in [*wanted, *([tmp_base] if tmp_base else [])] if p}):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def bad_bind(paths: list[str]) -> str | None:
    """Why one of ``paths`` cannot be a bind (a character a runtime reads as more), or None."""
    for p in paths:
        for c in NOT_IN_BIND:
            if c in p:
                return f"the directory {p!r} holds {c!r}, which a container runtime reads as a separator"
    return None


def charliecloud(image: str, inner: list[str], cwd: str, mounts: list[str], env: Mapping[str, str],
                 gpus: bool, keep_fd: bool = False) -> list[str]:
    # a private /tmp (-t): else ch-run mounts the host's $TMPDIR, the member's own, on /tmp,
    # and binds under /tmp find no mount point; its $TMPDIR is then said again (ch-run -t unsets it)
    argv = ["ch-run", "-t"]
    if env.get("TMPDIR"):
        argv.append(f"--set-env=TMPDIR={env['TMPDIR']}")
    for p in mounts:
        argv += ["-b", f"{p}:{p}"]
    return argv + ["-c", cwd, image, "--", *inner]  # (its GPUs: /dev is bound, CUDA_VISIBLE_DEVICES passed)


def apptainer(image: str, inner: list[str], cwd: str, mounts: list[str], env: Mapping[str, str],
              gpus: bool, keep_fd: bool = False) -> list[str]:
    argv = ["apptainer", "exec"]
    if mounts:
        argv += ["--bind", ",".join(f"{p}:{p}" for p in mounts)]
    if gpus:
        argv.append("--nv")
    return argv + ["--pwd", cwd, image, *inner]


def podman(image: str, inner: list[str], cwd: str, mounts: list[str], env: Mapping[str, str],
           gpus: bool, keep_fd: bool = False) -> list[str]:
    argv = ["podman", "run", "--rm", "--pull=never", "--network=host"]
    if os.geteuid() != 0:  # (rootless: the member keeps its uid inside; root's podman refuses keep-id)
        argv.append("--userns=keep-id")
    if keep_fd:  # (a worker: its program on stdin, its socket fd 3; ch-run and apptainer pass both as they are)
        argv += ["-i", "--preserve-fds=1"]
    for p in mounts:
        argv += ["-v", f"{p}:{p}"]
    for name in sorted(env):
        if env[name] is not None:  # (None: unset by a module load, not in podman's environment either)
            argv += ["--env", name]  # (by name: podman takes the value from its own environment)
    if gpus:
        argv += ["--device", "nvidia.com/gpu=all"]
    return argv + ["-w", cwd, image, *inner]


RENDER = {"charliecloud": charliecloud, "apptainer": apptainer, "podman": podman}


def command(ctr: Mapping, cmd: str, cwd: str, env: Mapping[str, str], tmp_base: str | None,
            gpus: bool = False) -> list[str]:
    """The argv that runs a member's command ``cmd`` inside the container ``ctr`` (a task's
    ``ctr``), in ``cwd``, with ``env`` its own variables (podman is given their names)."""
    mounts = binds(list(ctr.get("bind") or ()), tmp_base)
    return RENDER[ctr["rt"]](ctr["img"], argv_for(cmd, shell="sh"), cwd, mounts, env, gpus)


#: the socket to the pilot, in a worker started inside a container
WORKER_FD = 3


def box(ctr: Mapping, tmp_base: str | None, gpus: bool) -> dict:
    """What a function member's worker is started inside (a task's ``_box``; the node agent's
    ``run`` says it as ``box``): ``ctr`` with every directory its members need mounted (its
    ``bind``, and ``tmp_base``: where their $TMPDIRs and outputs files are) and whether it
    passes GPUs through. Workers are kept apart by it (pilot/pyworkers.py)."""
    return {"rt": ctr["rt"], "img": ctr["img"], "bind": binds(list(ctr.get("bind") or ()), tmp_base),
            "gpus": bool(gpus)}


def worker(bx: Mapping, python: str, args: list[str], cwd: str, env: Mapping[str, str]) -> list[str]:
    """The argv that starts a worker inside ``bx`` (:func:`box`): ``python - ARGS`` (its
    program on its stdin), in ``cwd``; ``env`` its environment (podman is given the names)."""
    return RENDER[bx["rt"]](bx["img"], [python, "-", *args], cwd, list(bx.get("bind") or ()), env,
                            bool(bx.get("gpus")), keep_fd=True)
