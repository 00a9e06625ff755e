"""The one list of protocols: every name a host may give, and what pwe knows of each.

The hosts model accepts exactly these names, ``pwe hosts check`` looks for each one's
commands, placement reports the scheduling fields each does not act on, and the engine
gets its protocol class here. Nothing is imported until it is used (hostinfo reads this
list without jinja2 or paramiko).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pwe.base.errors import UnknownProtocol


@dataclass(frozen=True)
class ProtocolInfo:
    name: str
    #: "module:Class" of the protocol (what it can do: its class attributes)
    cls: str
    #: the commands it runs on the host (what ``pwe hosts check`` looks for)
    commands: tuple[str, ...]
    #: scheduling fields its job script states (through placement.pilot_shape), besides
    #: those every pilot acts on
    script_fields: frozenset[str] = frozenset()
    #: the pilot runs on nodes the batch system allocates (else on the head node itself)
    allocates: bool = False
    #: its pilots may start on another machine, the host's contact (not ``local``: a process here)
    remote: bool = True
    #: submissionType values it does: glidein everywhere; interactive where the pilot
    #: runs on this machine or the head node. batch (a job per member) nowhere yet.
    submission_types: frozenset[str] = frozenset({"glidein"})
    #: its job script can ask for GPUs (SLURM --gres, PBS gpus=); LoadLeveler's cannot here
    asks_gpus: bool = True
    #: a job of more than one slot names a parallel environment (SGE's ``-pe PE SLOTS``):
    #: the host's ``parallel_environment``, checked against the cell before a run
    parallel_environment: bool = False
    #: it can say its partitions' sizes (SLURM's sinfo), checked against the host before a run
    lists_partitions: bool = False


_SIZE = {"maxWallTime", "queue", "account", "maxTotalMemory", "maxCpus", "minCpus", "maxNodes", "requestedStart"}

PROTOCOLS: dict[str, ProtocolInfo] = {p.name: p for p in (
    ProtocolInfo("local", "protocols.local:Local", ("python3",), remote=False,
                 submission_types=frozenset({"glidein", "interactive"})),
    ProtocolInfo("ssh", "protocols.interactive:Interactive", ("python3",), frozenset({"maxWallTime"}),
                 submission_types=frozenset({"glidein", "interactive"})),
    ProtocolInfo("slurm", "protocols.slurm:Slurm", ("sbatch", "squeue", "scancel"),
                 frozenset(_SIZE | {"qos", "reservation", "nodeAttributes"}), allocates=True,
                 lists_partitions=True),
    ProtocolInfo("pbs", "protocols.pbs:Pbs", ("qsub", "qstat", "qdel"), frozenset(_SIZE), allocates=True),
    # SGE's memory requests are per slot and site-defined (h_vmem, mem_free): maxTotalMemory is not
    # stated; nor are GPUs (no standard complex). A multi-slot pilot needs a parallel environment.
    ProtocolInfo("sge", "protocols.sge:Sge", ("qsub", "qstat", "qdel"), frozenset(_SIZE - {"maxTotalMemory"}),
                 allocates=True, asks_gpus=False, parallel_environment=True),
    ProtocolInfo("loadleveler", "protocols.loadleveler:LoadLeveler", ("llsubmit", "llq", "llcancel"),
                 frozenset(_SIZE | {"reservation"}), allocates=True, asks_gpus=False),
)}
NAMES = tuple(PROTOCOLS)


def info(name: str) -> ProtocolInfo:
    """What pwe knows of protocol ``name``; :class:`~pwe.base.errors.UnknownProtocol` (one line,
    bad input) if nothing."""
    if name not in PROTOCOLS:
        from pwe.base.errors import did_you_mean

        raise UnknownProtocol(f"unknown protocol {name!r}{did_you_mean(name, NAMES)}; known: {', '.join(NAMES)}")
    return PROTOCOLS[name]


def get(name: str, runner: Any, host: Any = None) -> Any:
    """The protocol ``name``, talking through ``runner``, imported on first use; ``host``,
    the registry entry it submits to (where its commands are: ``commands_dir``)."""
    import importlib

    module, _, cls = info(name).cls.partition(":")
    return getattr(importlib.import_module(module), cls)(runner, host)


def runner_for(host: Any) -> Any:
    """The runner for a registry host's contact: this machine, or SSH to ``ssh://...``
    (protocols/ssh.py, imported only then)."""
    if host.contact == "local":
        from .runner import LocalRunner

        return LocalRunner()
    from .ssh import SshRunner

    return SshRunner.from_host(host)
