"""Launchers: the command that starts one member on the nodes it was placed on.

The pilot itself runs on the allocation's first node. A member placed there with one
rank is forked (posix_spawn, no launcher at all). Otherwise a launcher wraps the
member's command:

    srun     inside SLURM: a member of one rank through its node's agent, itself one
             ``srun --overlap`` step per node (pilot/remote.py); a member of several
             ranks (MPI), or any member when the host names ``launcher: srun``, as a
             job step of its own (``--exact``), pinned to its nodes
    ssh      to the nodes of a node file (PBS, LoadLeveler, a host list)
    mpiexec  members with more than one rank, where srun is not the launcher: which
             mpiexec is installed decides how it is called (``mpi.py``)

Each is a prefix template with ``{node}``, ``{nodes}``, ``{hosts}`` (``node:ranks,...``),
``{nnodes}``, ``{ranks}``, ``{per_node}`` (the most ranks on one node), ``{threads}``,
``{cwd}`` fields, overridable per host (``--launcher-prefix``), followed by
``bash -c CMD``. The template is split into words first and each word filled in after
(:func:`command`), so a value is never more than the word it stands in; ssh gets its host
after ``--``, so no node name is read as an option. Values are shell-quoted where a
remote shell reads them (ssh).
"""

from __future__ import annotations

import shlex
from typing import Mapping

from .packing import Placement

PREFIXES = {
    "srun": "srun --exact --quiet --nodes={nnodes} --ntasks={ranks} --ntasks-per-node={per_node} "
            "--cpus-per-task={threads} --nodelist={nodes} --chdir={cwd}",
    "mpiexec": "mpiexec -n {ranks} --host {hosts}",
    # the pilot keeps one session per node open to a node agent (pilot/nodeagent.py), so
    # members cost no key exchange or login; ServerAlive notices a dead node within ~6 s
    "ssh": "ssh -o BatchMode=yes -o ServerAliveInterval=2 -o ServerAliveCountMax=3 -o ConnectTimeout=5 -- {node}",
}

#: How the pilot starts a node's agent inside SLURM (pilot/remote.py): one job step of one
#: task on that node, for the pilot's life, sharing its cores with the members it starts
AGENT_SRUN = "srun --overlap --quiet --nodes=1 --ntasks=1 --nodelist={node} --chdir=/"

#: What srun says when it could not start a job step because the allocation is going or
#: gone (scancel, preemption, walltime, a node failure): its exit status (1) is then
#: srun's, not the member's, which may never have run.
SRUN_NOT_STARTED = ("has expired", "already completing or completed", "Unable to create step",
                    "Invalid job id", "has been revoked", "Unable to confirm allocation")


def srun_refused(stderr_tail: bytes) -> str | None:
    """srun's last words in the tail of a member's captured stderr
    (:func:`pilot.streams.tail`) when it failed to start the step (one of
    :data:`SRUN_NOT_STARTED`), or None: a member that ran and failed is the member's."""
    tail = stderr_tail.decode("utf-8", "replace").strip().splitlines()
    last = tail[-1] if tail else ""
    if last.startswith("srun: error: ") and "task" not in last and any(w in last for w in SRUN_NOT_STARTED):
        return last
    return None


def command(prefix: str, **fields: object) -> list[str]:
    """A launcher prefix as argv: split into words, then each word's fields filled in."""
    return [word.format(**fields) for word in shlex.split(prefix)]


def choose(kind: str, placement: Placement, ranks: int, configured: str | None = None) -> str:
    """The launcher for one member: 'fork', 'srun', 'ssh' or 'mpiexec'."""
    on_own_node = len(placement) == 1 and placement[0][0].local and ranks == 1
    if configured and configured != "auto":
        if configured == "ssh" and on_own_node:
            return "fork"
        if ranks > 1 and configured in ("ssh", "fork"):
            return "mpiexec"  # ssh and fork start one process: ranks need an MPI launcher
        return configured
    if on_own_node:
        return "fork"  # the pilot's own node: no launcher is faster than posix_spawn
    if kind == "slurm":
        return "srun"
    if ranks > 1:
        return "mpiexec"
    return "ssh"


def wrap(launcher: str, argv: list[str], cmd: str, placement: Placement, ranks: int, threads: int, cwd: str,
         env: Mapping[str, str], prefix: str | None = None, inner: list[str] | None = None) -> list[str]:
    """The full argv for a member run through ``launcher``; ``env`` is the member's own
    variables (the launcher's process gets them too; ssh needs them spelled out);
    ``inner``: what the launcher starts instead of ``bash -c cmd`` (a container's argv)."""
    if launcher == "fork":
        return argv
    fields = {
        "node": placement[0][0].name,
        "nodes": ",".join(n.name for n, _ in placement),
        "hosts": ",".join(f"{n.name}:{k}" for n, k in placement),
        "nnodes": len(placement),
        "per_node": max(k for _, k in placement),
        "ranks": ranks,
        "threads": threads,
        "cwd": cwd,
    }
    head = command(prefix or PREFIXES[launcher], **fields)
    if launcher == "ssh":
        # ssh hands one string to the remote login shell: everything in it is quoted, and
        # the environment goes along explicitly (ssh does not forward it)
        # (a variable a module load unset, None: taken out there too)
        exports = " ".join(f"-u {shlex.quote(k)}" if v is None else shlex.quote(f"{k}={v}")
                           for k, v in sorted(env.items(), key=lambda kv: kv[1] is not None))
        run = " ".join(shlex.quote(a) for a in inner) if inner else f"bash -c {shlex.quote(cmd)}"
        remote = f"cd {shlex.quote(cwd)} && exec env {exports} {run}"
        return head + [remote]
    return head + (inner or ["bash", "-c", cmd])

