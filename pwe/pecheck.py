"""Grid Engine's parallel environments, checked before a run makes anything.

A pilot of more than one slot on an SGE host names the host's ``parallel_environment``
(``#$ -pe PE SLOTS``). A PE the cell does not have would be refused by qsub only when the
first pilot is submitted, after the run directory is made; so ``pwe validate``, ``pwe
plan`` and ``pwe run`` ask the cell once (``qconf -spl``, kept per host for the process)
and refuse such a name in one line naming the host and the PEs the cell has. A host with
no PE whose pilots may span nodes is refused too (without a PE a job has one slot, on one
host); one whose pilots stay on one node gets a warning: its pilots run one member at a
time. A cell that cannot be asked is a warning, not a refusal: qsub will say.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocols.registry import info as protocol_info

from .errors import ContactError, InputError, SchedulerUnreachable

#: (host, contact, commands_dir) -> the PEs its cell lists, or why it could not be asked
_LISTED: dict[tuple[str, str, str | None], list[str] | str] = {}


def check(plan: Any, hosts: dict[str, Any], src: Path, sources: dict[str, str] | None = None) -> list[str]:
    """Refuse (InputError) what cannot run; the warnings ``pwe run`` prints."""
    warnings: list[str] = []
    for nid, pn in plan.nodes.items():
        host = hosts[pn.host]
        if not protocol_info(host.protocol).parallel_environment or host.parallel_environment:
            continue
        caps = [n for n in (host.max_nodes, pn.scheduling.maxNodes) if n]
        if not caps or min(caps) > 1:
            raise InputError(f"node '{nid}': host '{host.name}' ({host.protocol}) names no parallel_environment, "
                             "so its pilot jobs get one slot and cannot span nodes; set parallel_environment "
                             "(qconf -spl lists the cell's) or max_nodes: 1", src, pn.line)
        note = (f"host '{host.name}' ({host.protocol}) names no parallel_environment: each pilot job gets one "
                f"slot and runs one member at a time (of {host.cores_per_node} cores per node)")
        if (host.cores_per_node or 1) > 1 and note not in warnings:
            warnings.append(note)
    for host in hosts.values():
        if not protocol_info(host.protocol).parallel_environment or not host.parallel_environment:
            continue
        listed = _listed(host)
        if isinstance(listed, str):
            warnings.append(f"host '{host.name}': its parallel environments could not be listed ({listed}); "
                            f"parallel_environment '{host.parallel_environment}' is not checked")
        elif host.parallel_environment not in listed:
            file = (sources or {}).get(host.name)
            raise InputError(f"host '{host.name}': parallel environment '{host.parallel_environment}' does not "
                             f"exist in its Grid Engine cell; qconf -spl lists: {', '.join(listed) or 'none'}",
                             file or src, _line(file, host.name) if file else None)
    return warnings


def _listed(host: Any) -> list[str] | str:
    key = (host.name, host.contact, host.commands_dir)
    if key not in _LISTED:
        from protocols.registry import get as get_protocol
        from protocols.ssh import runner_for

        try:
            protocol = get_protocol(host.protocol, runner_for(host), host)
        except ContactError as exc:
            _LISTED[key] = str(exc)
        else:
            try:
                _LISTED[key] = protocol.parallel_environments()
            except SchedulerUnreachable as exc:
                _LISTED[key] = str(exc)
            finally:
                protocol.close()
    return _LISTED[key]


def _line(file: str, name: str) -> int | None:
    """The line of the host's parallel_environment in its hosts file (None if unreadable)."""
    from pwe.source import locate
    from pwe.yaml_reader import read_yaml

    try:
        return locate(read_yaml(Path(file), what="a hosts file", needs="'hosts'"),
                      ("hosts", name, "parallel_environment"))
    except (InputError, OSError):
        return None
