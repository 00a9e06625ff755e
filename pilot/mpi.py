"""Which MPI launcher a node has, and how to call it. Standard library only.

A member with more than one rank needs a launcher that starts its ranks. Outside SLURM
(where srun is the launcher) that is ``mpiexec``, but ``mpiexec`` is not one program:

    Open MPI    ``mpiexec --version`` says "Open MPI" / "OpenRTE"; hosts ``--host h:n,...``;
                refuses root without ``--allow-run-as-root``; binds ranks to cores unless
                told ``--bind-to none`` (two members would then share cores 0..n-1);
                forwards to remote ranks only the variables named by ``-x``.
    Hydra       MPICH, Intel MPI, MVAPICH2: "HYDRA" in ``--version``; hosts ``-hosts h:n,...``;
                forwards the whole environment.
    SLURM's     ``mpiexec.slurm`` (Debian's slurm-wlm makes it /usr/bin/mpiexec): a perl
    wrapper     script that starts an srun *job* and re-joins its arguments into one string,
                so ``bash -c CMD`` runs ``bash -c`` with CMD's first word only: the payload
                never runs and the member "succeeds". Never used.

:func:`find` looks at ``mpiexec``, then ``mpirun`` and the implementation-named
commands Debian installs (``mpiexec.openmpi``, ``mpiexec.hydra``, ``mpiexec.mpich``),
and takes the first it knows how to call. When there is none, the reason is one line and
no member is launched: a member that did not run must never be recorded as a success.
A host's ``launcher_prefix`` overrides all of this (the user knows their MPI).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

CANDIDATES = ("mpiexec", "mpirun", "mpiexec.openmpi", "mpiexec.hydra", "mpiexec.mpich")


@dataclass(frozen=True)
class Mpi:
    """An MPI launcher pwe knows how to call."""

    path: str
    kind: str  # "openmpi" | "hydra"
    version: str  # its --version line, for logs and `pwe hosts check`

    def prefix(self, env_names: list[str] | tuple[str, ...] = ()) -> str:
        """The launcher prefix template (fields as in launchers.PREFIXES) for one member;
        ``env_names``: the member's own variables, which remote ranks must get too."""
        path = self.path.replace("{", "{{").replace("}", "}}")
        if self.kind == "openmpi":
            root = " --allow-run-as-root" if os.geteuid() == 0 else ""
            exports = "".join(f" -x {name}" for name in env_names)
            return f"{path} -n {{ranks}} --host {{hosts}} --bind-to none --wdir {{cwd}}{root}{exports}"
        return f"{path} -n {{ranks}} -hosts {{hosts}} -wdir {{cwd}}"


def classify(path: str) -> tuple[str, str]:
    """(kind, detail) of one launcher: openmpi, hydra, slurm-wrapper or unknown."""
    real = os.path.realpath(path)
    if os.path.basename(real).startswith("mpiexec.slurm"):
        return "slurm-wrapper", real
    try:
        with open(real, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        head = b""
    if head.startswith(b"#!") and b"srun" in head:
        return "slurm-wrapper", real  # a script around srun, whatever its name
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20,
                              stdin=subprocess.DEVNULL, cwd="/")
        said = (proc.stdout + proc.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "unknown", f"{path} --version failed: {exc}"
    first = said.splitlines()[0] if said else ""
    if "Open MPI" in said or "OpenRTE" in said:
        return "openmpi", first
    if "HYDRA" in said or "Intel(R) MPI" in said:
        return "hydra", first
    return "unknown", first or f"{path} --version said nothing"


_FOUND: dict[str, "Mpi | str"] = {}


def find(path_env: str | None = None) -> "Mpi | str":
    """The MPI launcher to use on this node, or one line saying why there is none.
    Looked up once per PATH (a pilot calls it for every multi-rank member)."""
    search = os.environ.get("PATH", os.defpath) if path_env is None else path_env
    if search in _FOUND:
        return _FOUND[search]
    seen: dict[str, str] = {}
    result: Mpi | str | None = None
    for name in CANDIDATES:
        path = shutil.which(name, path=search)
        if path is None or os.path.realpath(path) in seen:
            continue
        kind, detail = classify(path)
        seen[os.path.realpath(path)] = f"{path} is {_WHAT.get(kind, kind)} ({detail})"
        if kind in ("openmpi", "hydra"):
            result = Mpi(path, kind, detail)
            break
    if result is None:
        found = "; ".join(seen.values()) if seen else "no mpiexec or mpirun on PATH"
        result = (f"no MPI launcher pwe can call here: {found}. Install Open MPI or MPICH (Debian: openmpi-bin "
                  "or mpich), or give the host a launcher_prefix")
    _FOUND[search] = result
    return result


_SRUN_MPI: list[str | None] = []


def srun_mpi() -> str | None:
    """The ``--mpi`` plugin for a member of several ranks started by srun: None where the
    cluster's MpiDefault already is one; ``pmix`` where MpiDefault is ``none`` (ranks of
    an MPI program would then each start alone, as rank 0 of 1) and srun has PMIx (Open MPI
    4 and 5, MPICH and Intel MPI all speak it). Asked once per pilot."""
    if not _SRUN_MPI:
        from .allocation import slurm_config

        plugin = None
        if slurm_config().get("MpiDefault", "none") == "none":
            try:
                said = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, timeout=20,
                                      stdin=subprocess.DEVNULL, cwd="/")
                plugin = "pmix" if "pmix" in said.stdout + said.stderr else None
            except (OSError, subprocess.TimeoutExpired):
                plugin = None
        _SRUN_MPI.append(plugin)
    return _SRUN_MPI[0]


_WHAT = {"slurm-wrapper": "SLURM's mpiexec wrapper, which would start an srun job and never run the payload",
         "unknown": "an MPI launcher pwe does not know how to call"}
