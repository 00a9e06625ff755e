"""What a batch system says of itself, checked against its host before a run makes anything:
Grid Engine's parallel environments, SLURM's partitions' sizes; and what it would read as
more than text in a directive line (:func:`check_words`, protocols/syntax.py).

A pilot of more than one slot on an SGE host names the host's ``parallel_environment``
(``#$ -pe PE SLOTS``). A PE the cell does not have would be refused by qsub only when the
first pilot is submitted, after the run directory is made; so ``pwe validate``, ``pwe
plan`` and ``pwe run`` ask the cell once (``qconf -spl``, kept per host for the process)
and refuse such a name in one line naming the host and the PEs the cell has. A host with
no PE whose pilots may span nodes is refused too (without a PE a job has one slot, on one
host); one whose pilots stay on one node gets a warning: its pilots run one member at a
time. A cell that cannot be asked is a warning, not a refusal: qsub will say.

A SLURM host whose pilot jobs would ask for more than its partition has (more nodes than
it holds, more cores or memory per node than its largest node) would wait in the queue
for ever, or be refused by sbatch after the run directory is made. ``sinfo`` is asked once
per host for the process (one call for all partitions), and such a host is refused in one
line with the host, the partition and both numbers. A partition sinfo does not list is
refused the same way. Where sinfo is not there or does not answer, nothing is checked
(``pwe plan`` on a laptop): sbatch will say.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocols.registry import info as protocol_info

from ..base.errors import ContactError, InputError, SchedulerUnreachable

#: (host, contact, commands_dir, question) -> its batch system's answer, or why it could not be asked
_LISTED: dict[tuple[str, str, str | None, str], Any] = {}


def check(plan: Any, hosts: dict[str, Any], src: Path, sources: dict[str, str] | None = None) -> list[str]:
    """Refuse (InputError) what cannot run; the warnings ``pwe run`` prints."""
    check_words(plan, hosts, src, sources)
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
        if host.contact != "local" and not host.shared_fs:
            continue  # (pwe.engine.remote: the run is checked again on its login node, where the batch system is)
        if protocol_info(host.protocol).lists_partitions:
            _check_partitions(host, src, (sources or {}).get(host.name))
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


#: the scheduling fields and host fields whose values a job script's directive lines carry
_SCHED_WORDS = (("queue", "partition"), ("account", "account"), ("qos", "qos"), ("reservation", "reservation"),
                ("nodeAttributes", "constraint"))
_HOST_WORDS = (("account", "account"), ("parallel_environment", "parallel environment"))


def check_words(plan: Any, hosts: dict[str, Any], src: Path, sources: dict[str, str] | None = None) -> None:
    """Refuse, in one line naming the character and the batch system, a value that a host's
    directive lines would carry and its batch system cannot read literally (Grid Engine's
    '#' and quotes, LoadLeveler's '$': protocols/syntax.py), before anything is made."""
    from protocols.syntax import why_refused

    for nid, pn in plan.nodes.items():
        host = hosts[pn.host]
        lines = pn.scheduling_lines or {}
        for key, what in _SCHED_WORDS:
            value = getattr(pn.scheduling, key, None)
            reason = isinstance(value, str) and why_refused(host.protocol, value, what)
            if reason:
                raise InputError(f"node '{nid}': {key}: {reason}", src, lines.get(key) or pn.line)
    for host in hosts.values():
        file = (sources or {}).get(host.name)
        named = [(field, what, getattr(host, field, None)) for field, what in _HOST_WORDS]
        named += [("partitions", "partition", p.name) for p in getattr(host, "partitions", ())]
        for field, what, value in named:
            reason = isinstance(value, str) and why_refused(host.protocol, value, what)
            if reason:
                raise InputError(f"host '{host.name}': {reason}", file or src,
                                 _line(file, host.name, field) if file and file != "built in" else None)


def _check_partitions(host: Any, src: Path, file: str | None) -> None:
    """Refuse a SLURM host asking for more than its partitions have (see the docstring)."""
    listed = _asked(host, "partitions")
    if not isinstance(listed, dict) or not listed:
        return  # (sinfo absent or silent: sbatch will say)
    wanted = [(p.name, p) for p in host.partitions] or \
        [(next((n for n, v in listed.items() if v["default"]), next(iter(listed))), None)]
    where = file or src
    for name, part in wanted:
        have = listed.get(name)
        if have is None:
            raise InputError(f"host '{host.name}': partition '{name}' does not exist; sinfo lists: "
                             f"{', '.join(listed)}", where, _line(file, host.name, "partitions") if file else None)
        caps = [n for n in (host.max_nodes, part.max_nodes if part else None) if n]
        for what, asked, has, field in (
                ("nodes", min(caps) if caps else None, have["nodes"], "max_nodes"),
                ("cores per node", (part and part.cores_per_node) or host.cores_per_node, have["cpus"],
                 "cores_per_node"),
                ("MB of memory per node", (part and part.memory_per_node) or host.memory_per_node, have["memory"],
                 "memory_per_node")):
            if asked and has and asked > has:
                raise InputError(f"host '{host.name}': its pilot jobs may ask for {asked} {what} but partition "
                                 f"'{name}' has {has} (sinfo); lower {field} to {has} or less",
                                 where, _line(file, host.name, field) if file else None)


def _listed(host: Any) -> list[str] | str:
    listed = _asked(host, "parallel_environments")
    return listed if isinstance(listed, (list, str)) else str(listed)


def _asked(host: Any, question: str) -> Any:
    """What the host's batch system answers to ``question`` (a method of its protocol),
    asked once per host for the process; the reason in words when it could not be asked."""
    key = (host.name, host.contact, host.commands_dir, question)
    if key not in _LISTED:
        from protocols.registry import get as get_protocol
        from protocols.registry import runner_for

        try:
            protocol = get_protocol(host.protocol, runner_for(host), host)
        except ContactError as exc:
            _LISTED[key] = str(exc)
        else:
            try:
                _LISTED[key] = getattr(protocol, question)()
            except SchedulerUnreachable as exc:
                _LISTED[key] = str(exc)
            finally:
                protocol.close()
    return _LISTED[key]


def _line(file: str, name: str, field: str = "parallel_environment") -> int | None:
    """The line of one of the host's fields in its hosts file (None if unreadable)."""
    from ..base.source import locate
    from ..base.yaml_reader import read_yaml

    try:
        return locate(read_yaml(Path(file), what="a hosts file", needs="'hosts'"),
                      ("hosts", name, field))
    except (InputError, OSError):
        return None
