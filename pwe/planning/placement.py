"""Where members run: does a host fit a workflow, how large a pilot to ask for, and
which scheduling fields a host acts on.

Why one module over 450 lines: the checks of a plan against its hosts and the sizing of
its pilot jobs share one arithmetic (a pilot's start and hand-back margin,
:func:`walltime_for`, the cores of a node a member may use, whether a protocol allocates
nodes), so that what :func:`check_hosts` accepts is what :func:`pilot_shape` can fit; the
choice of a partition and the limits of user resources are apart (:mod:`.partitions`,
:mod:`.limits`).

Used by the engine when it submits pilots, and by ``pwe plan --host`` to show them:
both build the pilot job with :func:`pilot_job` and warn with :func:`run_warnings`.
"""

from __future__ import annotations

import math
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from protocols.registry import PROTOCOLS
from protocols.registry import info as protocol_info

from ..base.errors import InputError
from .partitions import choose_partition, partition_view
from .plan import Plan, plan_workflow


def plan_for_hosts(workflow: str | Path, sets: dict[str, Any] | None = None, host: str | None = None,
                   hosts_file: str | Path | None = None,
                   cores: int | None = None) -> tuple[Plan, dict[str, Any], list[str]]:
    """A workflow's plan checked against its hosts, before anything is made: every node's
    host exists and fits it (:func:`check_hosts`). Returns the plan, the hosts it uses by
    name, and the warnings ``pwe run`` prints (:func:`run_warnings`). ``pwe validate``,
    ``pwe plan`` and the engine all start here."""
    import hostinfo

    src = Path(workflow)
    plan = plan_workflow(src, sets, host=host)
    registry = hostinfo.load(src, hosts_file, cores=cores)
    swap, notes = fall_back(plan, registry)
    hosts = check_hosts(plan, registry, src, swap)
    from .limits import check as check_limits

    check_limits(plan, hosts, src)  # (user-defined resources: each limited, each fits its limits)
    from .sitecheck import check as check_site

    # (what the batch system says of itself: SGE's PEs, SLURM's partitions' sizes)
    notes = notes + check_site(plan, hosts, src, registry.sources)
    return plan, hosts, notes + run_warnings(plan, hosts)


def fall_back(plan: Plan, registry: Any) -> tuple[dict[str, Any], list[str]]:
    """Hosts whose entry says ``fallback: local`` and whose scheduler's commands are not
    there (looked for where pwe reaches the host): each becomes this machine under the
    same name, its resources mapped as well as this machine allows (cores, GPUs, memory
    are this machine's; its env is kept, its setup lines, written for the cluster, are
    not run). Returns those stand-ins by name, and one warning for each."""
    swap, notes = {}, []
    for name in dict.fromkeys(pn.host for pn in plan.nodes.values()):
        try:
            host = registry.get(name)
        except InputError:
            continue  # (check_hosts says so, with the node's line)
        if host.fallback != "local" or host.protocol == "local":
            continue
        from hostinfo.check import missing_commands  # (its thread pool: ~25 ms, only for such a host)
        from hostinfo.registry import builtin_local

        missing = missing_commands(host)
        if not missing:
            continue
        here = builtin_local()
        swap[name] = here.model_copy(update={"name": name, "env": host.env, "properties": host.properties})
        dropped = f"; its {len(host.setup)} setup line(s) are not run" if host.setup else ""
        notes.append(f"host '{name}' ({host.protocol}): {', '.join(missing)} not found "
                     f"{'here' if host.contact == 'local' else 'at ' + host.contact}; fallback: local, so its members "
                     f"run on this machine ({here.cores_per_node} cores, {here.gpus_per_node} GPUs){dropped}")
    return swap, notes


def pilot_shape(plan: Plan, host: Any, ready: list[tuple[str, int]], created: float | None = None,
                measured: dict[str, float] | None = None) -> dict[str, Any]:
    """How large a pilot job to ask for: enough nodes for the ready members (capped by
    maxCpus, maxNodes, the host and the partition), their walltime, the first partition
    in the host's priority order whose limit fits (``queue`` in the profile overrides),
    and the earliest start (``requestedStart``; a ``now+`` delay counts from ``created``,
    the run's creation, epoch seconds). ``measured``: per node the mean duration (s) of
    its members so far; when every ready member's node has one, the walltime (unless
    maxWallTime gives it) and the nodes come from the work the ready members make
    (:func:`fit_to_work`)."""
    nid = ready[0][0] if ready else next(iter(plan.nodes))
    sched = plan.nodes[nid].scheduling
    cpn = host.cores_per_node or 1
    if sched.maxMembers:
        ready = ready[: sched.maxMembers]
    # what the ready members ask for, counted per node (one pass over them, however many)
    counts = Counter(n for n, _ in ready)
    per_node = [(plan.nodes[n].scheduling, k) for n, k in counts.items()]
    want = sum(s.cores_per_member() * k for s, k in per_node) or sched.cores_per_member()
    usable = min(cpn, sched.coreUsageRule) if sched.coreUsageRule else cpn
    if sched.maxCpus:
        want = min(want, sched.maxCpus)
    if sched.minCpus:
        want = max(want, sched.minCpus)
    nodes = max(1, -(-want // usable))
    # members that need GPUs or memory may need more nodes than their cores say
    gpus = sum((s.gpusPerMember or 0) * k for s, k in per_node)
    if gpus and host.gpus_per_node:
        nodes = max(nodes, -(-gpus // host.gpus_per_node))
    mem = sum((s.memoryPerMember or 0) * k for s, k in per_node)
    if mem and host.memory_per_node:
        nodes = max(nodes, -(-mem // host.memory_per_node))
    tmp = sum((getattr(s, "tmpPerMember", None) or 0) * k for s, k in per_node)
    if tmp and host.tmp_per_node:  # (a pool the host states; a measured one is unknown here)
        nodes = max(nodes, -(-tmp // host.tmp_per_node))
    if sched.maxNodes:
        nodes = min(nodes, sched.maxNodes)
    if host.max_nodes:
        nodes = min(nodes, host.max_nodes)
    walltime = float(sched.maxWallTime or DEFAULT_WALLTIME)
    partition = sched.queue
    part = next((p for p in getattr(host, "partitions", ()) if p.name == partition), None)
    if partition is None:
        part, _ = choose_partition(sched, host)
        if part is not None:
            partition = part.name
            if part.max_nodes:
                nodes = min(nodes, part.max_nodes)
    if measured and counts and all(n in measured for n in counts):
        work = [(plan.nodes[n].scheduling.cores_per_member(), k, measured[n]) for n, k in counts.items()]
        cap = part.max_walltime if part is not None and part.max_walltime else None
        fitted, walltime = fit_to_work(work, nodes, usable, None if sched.maxWallTime is None else walltime,
                                       cap, sched.maxWallTimePerMember)
        if not (gpus or mem or tmp or sched.minCpus):  # (those size by what the members hold, not by time)
            nodes = fitted
    if not protocol_info(host.protocol).allocates:
        nodes = len(host.nodes) or 1  # the pilot runs on the head node (and the host's own nodes), not on an allocation
    return {"nodes": nodes, "cores_per_node": cpn, "walltime": walltime, "partition": partition,
            "account": sched.account or host.account,  # the profile's account wins over the host's
            "qos": sched.qos, "reservation": sched.reservation, "constraint": sched.nodeAttributes,
            # members that need GPUs get them only if the job asks for the nodes' GPUs
            "memory_mb": sched.maxTotalMemory, "gpus_per_node": host.gpus_per_node if gpus else 0,
            "begin": sched.requested_start(_when(created)),
            "parallel_environment": getattr(host, "parallel_environment", None)}


#: The shortest walltime (minutes) a pilot sized from measured durations asks for.
MIN_WALLTIME = 5.0


def fit_to_work(work: list[tuple[int, int, float]], nodes: int, usable: int, walltime: float | None,
                cap: float | None, per_member: float | None) -> tuple[int, float]:
    """A pilot's nodes and walltime (minutes) from the work of the ready members: ``work``
    is (cores a member, members, measured seconds a member) per node; ``nodes`` what their
    cores ask for (already within the host's and partition's limits), ``usable`` cores a
    node, ``walltime`` the user's (maxWallTime; None: worked out here), ``cap`` the
    partition's max_walltime, ``per_member`` maxWallTimePerMember.

    The walltime (when not given): the work spread over those nodes plus the longest
    member, the pilot's start and its hand-back margin, in whole minutes, at least
    :data:`MIN_WALLTIME` and a member's maxWallTimePerMember's room, at most the
    partition's limit (else :data:`DEFAULT_WALLTIME`). The nodes: no more than finish the
    work within that walltime (a pilot wider than its work idles the rest; more pilots
    follow when more members become ready)."""
    core_s = sum(c * k * d for c, k, d in work)
    longest = max((d for _, _, d in work), default=0.0)
    if walltime is None:
        most = float(cap) if cap else DEFAULT_WALLTIME
        span = core_s / (nodes * usable) + longest
        walltime = float(math.ceil(walltime_for(span / 60)))
        walltime = float(max(walltime, MIN_WALLTIME, math.ceil(walltime_for(per_member)) if per_member else 0.0))
        walltime = min(walltime, max(most, walltime_for(per_member) if per_member else 0.0))
    room = walltime * 60 - PILOT_START_S - hand_back_margin(walltime) - longest
    need = math.ceil(core_s / (usable * max(room, 1.0)))
    return max(1, min(nodes, need)), walltime


def _when(epoch: float | None) -> Any:
    from datetime import datetime

    return None if epoch is None else datetime.fromtimestamp(epoch).astimezone()


def pilot_job(plan: Plan, host: Any, ready: list[tuple[str, int]], run_dir: str, run_id: str, pilot_id: str,
              pilot_args: list[str], heartbeat: float, idle_timeout: float, created: float | None = None,
              measured: dict[str, float] | None = None) -> Any:
    """The pilot job to submit to ``host`` for the ``ready`` members: what the engine
    submits, and what ``pwe plan --host`` shows (with RUN_DIR and RUN for the run's own)."""
    import pilot as pilot_pkg
    from protocols.base import PilotJob

    return PilotJob(pilot_id=pilot_id, pilot_dir=f"{run_dir}/pilots/{pilot_id}", job_name=f"pwe-{run_id}-{pilot_id}",
                    **pilot_shape(plan, host, ready, created, measured), python=sys.executable,
                    pythonpath=str(Path(pilot_pkg.__file__).resolve().parent.parent),
                    setup=list(host.setup), env={k: str(v) for k, v in host.env.items()},
                    notify=[sys.executable, "-m", "pwe", "notify", "--run", run_dir, "--pilot", pilot_id],
                    pilot_args=[*pilot_args, "--heartbeat", str(heartbeat), "--idle-timeout", str(idle_timeout)])


def preview_pilot_script(plan: Plan, host: Any, first: str | None = None) -> str | None:
    """The job script the first pilot for this plan would be submitted with (pwe plan
    --host), for node ``first`` (default: the first node on the host); None for a host
    whose pilots are no jobs (``local``)."""
    from protocols.registry import get as get_protocol
    from protocols.runner import LocalRunner

    protocol = get_protocol(host.protocol, LocalRunner(), host)
    if not protocol.batch:
        return None
    # the first node (in graph order) that runs on this host: its members ask for the first pilot
    if first is None:
        first = next((nid for nid, pn in plan.nodes.items() if pn.host == host.name), next(iter(plan.nodes)))
    roots = [(first, i) for i in range(min(plan.nodes[first].size, 100000))]
    job = pilot_job(plan, host, roots, "RUN_DIR", f"{plan.workflow.name}-RUN", "p1", pilot_args_for(host),
                    heartbeat=5.0, idle_timeout=host.idle_after(batch=True))
    return protocol.render(job)


def check_hosts(plan: Plan, registry: Any, src: Path, swap: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every node's host exists and can hold one of its members; the hosts used, by name
    (``swap``: stand-ins by name, from :func:`fall_back`).

    A rank's threads never straddle nodes, so threadsPerRank must fit one node (capped by
    coreUsageRule); all ranks must fit the host's nodes together.
    """
    used = {}
    for nid, pn in plan.nodes.items():
        host = _host_of(plan, registry, swap, nid, pn, src)
        used[host.name] = host
        host = partition_view(nid, pn, host, src)
        _check_walltime_of(nid, pn, host, src)
        _check_cores(nid, pn, host, src)
        _check_devices(nid, pn, host, src)
    check_mpi(plan, used, src)
    return used


def _host_of(plan: Plan, registry: Any, swap: dict[str, Any] | None, nid: str, pn: Any, src: Path) -> Any:
    """The host node ``nid`` runs on (its stand-in in ``swap``); InputError naming --host or
    the node's ``host:`` line for one that does not exist."""
    try:
        return (swap or {}).get(pn.host) or registry.get(pn.host)
    except InputError as exc:
        if plan.host:
            raise InputError(f"--host {plan.host}: {exc.message}") from None
        raise InputError(f"node '{nid}': {exc.message}", src, pn.host_line or pn.line) from None


def _check_walltime_of(nid: str, pn: Any, host: Any, src: Path) -> None:
    """A member's walltime fits its pilot's (a local pilot has none: then the profile must
    not contradict itself)."""
    sched = pn.scheduling
    if host.protocol != "local":  # (a local pilot has no walltime)
        check_walltimes(nid, pn, host, src)
    elif sched.maxWallTime is not None and (sched.maxWallTimePerMember or 0) > sched.maxWallTime:
        raise InputError(  # (the profile contradicts itself, whichever host runs it)
            f"node '{nid}': maxWallTimePerMember ({sched.maxWallTimePerMember:g} min) is longer than maxWallTime "
            f"({sched.maxWallTime:g} min), the walltime of the pilot a member runs in; lower maxWallTimePerMember "
            f"to at most {sched.maxWallTime:g} or raise maxWallTime", src,
            (pn.scheduling_lines or {}).get("maxWallTimePerMember") or pn.line)


def _usable_cores_per_node(host: Any, sched: Any) -> int:
    """Cores of one of the host's nodes a member may use (capped by coreUsageRule)."""
    per_node = host.cores_per_node or 1
    if sched.coreUsageRule:
        per_node = min(per_node, sched.coreUsageRule)
    return per_node


def _pilot_nodes(host: Any, sched: Any) -> tuple[int | None, str]:
    """The most nodes one pilot has, and what limits it ("" for the host itself): the head
    node (or the host's own nodes) where the protocol allocates none, else what max_nodes
    and maxNodes allow (None: no limit)."""
    if not protocol_info(host.protocol).allocates:
        return len(host.nodes) or 1, ""
    caps = [(n, w) for n, w in ((host.max_nodes, "its max_nodes"), (sched.maxNodes, "maxNodes")) if n]
    return min(caps) if caps else (None, "")


def _check_cores(nid: str, pn: Any, host: Any, src: Path) -> None:
    """A member's ranks and threads fit the host's nodes: a rank's threads never straddle
    nodes, ranksPerNode fits a node, all ranks fit the nodes a pilot can have, and maxCpus."""
    sched = pn.scheduling
    ranks, threads = sched.ranksPerMember or 1, sched.threadsPerRank or 1
    per_node = _usable_cores_per_node(host, sched)
    n_nodes, which = _pilot_nodes(host, sched)
    single = n_nodes == 1 and not host.nodes and not which
    if single and ranks * threads > per_node:
        raise InputError(
            f"node '{nid}': a member needs {ranks * threads} cores (ranksPerMember {ranks} x threadsPerRank "
            f"{threads}) but host '{host.name}' has {per_node}; lower them or use a larger host",
            src, pn.line)
    if threads > per_node:
        raise InputError(
            f"node '{nid}': a member needs {threads} cores for one rank (threadsPerRank) but host "
            f"'{host.name}' has nodes of {per_node} cores, and a rank cannot straddle nodes",
            src, pn.line)
    rpn = sched.ranksPerNode if ranks > 1 else None
    if rpn and rpn * threads > per_node:
        raise InputError(
            f"node '{nid}': ranksPerNode {rpn} of {threads} threads needs {rpn * threads} cores on a node but host "
            f"'{host.name}' has nodes of {per_node}; lower ranksPerNode or threadsPerRank", src, pn.line)
    if rpn and n_nodes is not None and ranks // rpn > n_nodes:
        has = f"has {n_nodes} node{'s' if n_nodes > 1 else ''}" if not which else \
            f"gives a pilot at most {n_nodes} node{'s' if n_nodes > 1 else ''} ({which})"
        raise InputError(
            f"node '{nid}': a member spans {ranks // rpn} nodes (ranksPerMember {ranks} / ranksPerNode {rpn}) but "
            f"host '{host.name}' {has}; raise ranksPerNode or the host's nodes", src, pn.line)
    if n_nodes is not None and ranks > (per_node // threads) * n_nodes:  # (a rank never straddles nodes)
        has = f"has {n_nodes} nodes of {per_node}" if not which else \
            f"gives a pilot at most {n_nodes} node{'s' if n_nodes > 1 else ''} of {per_node} cores ({which})"
        raise InputError(
            f"node '{nid}': a member needs {ranks * threads} cores ({ranks} ranks of {threads} threads) but host "
            f"'{host.name}' {has}", src, pn.line)
    if sched.maxCpus and ranks * threads > sched.maxCpus:
        raise InputError(
            f"node '{nid}': a member needs {ranks * threads} cores but maxCpus ({sched.maxCpus}) makes every "
            "pilot smaller than that; raise maxCpus or lower ranksPerMember x threadsPerRank", src, pn.line)


def _check_devices(nid: str, pn: Any, host: Any, src: Path) -> None:
    """A member's GPUs, memory and $TMPDIR fit one of the host's nodes (such a member runs
    on one node), and the host's protocol can ask for GPUs."""
    sched = pn.scheduling
    ranks, threads = sched.ranksPerMember or 1, sched.threadsPerRank or 1
    per_node = _usable_cores_per_node(host, sched)
    gpus, mem = sched.gpusPerMember or 0, sched.memoryPerMember or 0
    if (gpus or mem) and ranks * threads > per_node:
        raise InputError(
            f"node '{nid}': a member that asks for GPUs or memory runs on one node, but it needs "
            f"{ranks * threads} cores and host '{host.name}' has nodes of {per_node}", src, pn.line)
    if gpus and not protocol_info(host.protocol).asks_gpus:
        raise InputError(
            f"node '{nid}': a member needs {gpus} GPUs (gpusPerMember) but pwe cannot ask {host.protocol} "
            f"(host '{host.name}') for GPUs; run the node on a SLURM or PBS host", src, pn.line)
    if gpus > host.gpus_per_node:
        raise InputError(
            f"node '{nid}': a member needs {gpus} GPUs (gpusPerMember) but host '{host.name}' has "
            f"{host.gpus_per_node} per node; set gpus_per_node in its hosts.yaml entry or use a GPU host",
            src, pn.line)
    if sched.tmpPerMember and host.tmp_per_node and sched.tmpPerMember > host.tmp_per_node:
        raise InputError(
            f"node '{nid}': a member needs {sched.tmpPerMember} MB of $TMPDIR (tmpPerMember) but host "
            f"'{host.name}' has {host.tmp_per_node} MB per node (tmp_per_node)", src, pn.line)
    if mem and host.memory_per_node and mem > host.memory_per_node:
        raise InputError(
            f"node '{nid}': a member needs {mem} MB (memoryPerMember) but host '{host.name}' has "
            f"{host.memory_per_node} MB per node", src, pn.line)


#: Minutes a pilot job asks for when the profile names no maxWallTime.
DEFAULT_WALLTIME = 60.0
#: Seconds a pilot may take from its start to its first member (Python, its transport, the
#: engine's first feed): a member's walltime must fit in what is left of the job after them.
PILOT_START_S = 30.0


def hand_back_margin(walltime: float) -> float:
    """Seconds before its job's end that a pilot of ``walltime`` minutes stops taking
    members and hands them back (pilot/__main__.py: --margin's default)."""
    return min(60.0, walltime * 6)


def check_walltimes(nid: str, pn: Any, host: Any, src: Path) -> None:
    """A node's walltimes against its pilot jobs' (a host with a batch system, ``host`` as
    its partition shows it), in one line at the scheduling key to change:

    - a ``queue`` the host lists with a ``max_walltime`` shorter than the pilot's walltime
      (the job would wait in the queue for ever, or be refused at each submission);
    - a ``maxWallTimePerMember`` longer than what a pilot job has for a member: its
      walltime less the hand-back margin and its start. No pilot would ever start such a
      member: each would hand it back, and the engine start another for it."""
    sched = pn.scheduling
    lines = getattr(pn, "scheduling_lines", {}) or {}
    walltime = float(sched.maxWallTime or DEFAULT_WALLTIME)
    given = "" if sched.maxWallTime else ", the default"
    wall_line = lines.get("maxWallTime") or lines.get("queue") or pn.line
    if sched.queue:
        part = next((p for p in host.partitions if p.name == sched.queue), None)
        if part is not None and part.max_walltime is not None and part.max_walltime < walltime:
            raise InputError(
                f"node '{nid}': maxWallTime ({walltime:g} min{given}) is longer than the max_walltime of queue "
                f"'{part.name}' on host '{host.name}' ({part.max_walltime:g} min): its pilot jobs would never start; "
                f"set maxWallTime to at most {part.max_walltime:g} or choose another queue", src, wall_line)
    per_member = sched.maxWallTimePerMember
    if per_member is None:
        return
    margin = hand_back_margin(walltime)
    room = walltime - (margin + PILOT_START_S) / 60
    if per_member > room:
        raise InputError(
            f"node '{nid}': maxWallTimePerMember ({per_member:g} min) does not fit in a pilot's maxWallTime "
            f"({walltime:g} min{given}) less the pilot's start and hand-back margin ({margin + PILOT_START_S:g} s): "
            f"no pilot could start a member; raise maxWallTime to at least "
            f"{math.ceil(walltime_for(per_member) * 10) / 10:g} or lower maxWallTimePerMember to at most "
            f"{max(math.floor(room * 10) / 10, 0):g}", src, lines.get("maxWallTimePerMember") or pn.line)


def walltime_for(per_member: float) -> float:
    """The shortest pilot walltime (minutes) that can start a member of ``per_member``
    minutes: W - (hand_back_margin(W) + PILOT_START_S) / 60 >= per_member."""
    if per_member + (60.0 + PILOT_START_S) / 60 >= 10:  # (a margin of a full minute from 10 min on)
        return per_member + (60.0 + PILOT_START_S) / 60
    return (per_member + PILOT_START_S / 60) / 0.9


def check_mpi(plan: Plan, hosts: dict[str, Any], src: Path) -> None:
    """Members of more than one rank on a host whose pilot runs on this machine (protocol
    local) need an MPI launcher here that pwe can call: refused now, in one line, rather
    than member by member (or, before pilot/mpi.py, run through SLURM's mpiexec wrapper,
    which never ran them and reported success). A host's launcher_prefix is the user's
    own launcher and is taken as it is; batch hosts are checked by the pilot on its node."""
    for nid, pn in plan.nodes.items():
        host = hosts[pn.host]
        ranks = pn.scheduling.ranksPerMember or 1
        if ranks < 2 or host.protocol != "local" or host.launcher_prefix or host.launcher == "srun":
            continue
        from pilot.mpi import find

        found = find()
        if isinstance(found, str):
            raise InputError(f"node '{nid}': ranksPerMember {ranks} needs an MPI launcher on host '{host.name}': "
                             f"{found}", src, pn.line)


def pilot_args_for(host: Any) -> list[str]:
    """How the local protocol starts a pilot for this host: its nodes and launcher."""
    args: list[str] = []
    launcher = host.launcher
    if host.nodes:
        args += ["--hosts", ",".join(f"{n}:{host.cores_per_node or 1}" for n in host.nodes)]
        launcher = launcher if launcher != "auto" else "ssh"
    if launcher not in ("auto", "fork") or host.nodes:
        args += ["--launcher", launcher]
    prefix = host.launcher_prefix  # (a host's setting is never ignored)
    if prefix is None and launcher == "ssh" and host.ssh_config:
        # the host's ssh_config reaches its nodes too: the explicit nodes, or an allocation's
        from pilot.launchers import PREFIXES

        config = shlex.quote(host.ssh_config).replace("{", "{{").replace("}", "}}")  # a word, not a field
        prefix = PREFIXES["ssh"].replace("ssh ", f"ssh -F {config} ", 1)
    if prefix:
        args += ["--launcher-prefix", prefix]
    if host.scratch:
        args += ["--scratch", host.scratch]  # (members' own $TMPDIRs: pilot/tmpdirs.py)
    if host.gpus_per_node:
        args += ["--gpus-per-node", str(host.gpus_per_node)]
    if host.memory_per_node:
        args += ["--memory-per-node", str(host.memory_per_node)]
    if host.tmp_per_node:
        args += ["--tmp-per-node", str(host.tmp_per_node)]
    if host.transport == "redis":
        args += ["--transport", "redis", "--broker", host.broker]
        if host.broker_password_file:
            args += ["--broker-password-file", host.broker_password_file]
    return args


#: Scheduling fields every pilot acts on, whatever submits it: the engine's task for each
#: member (ranks, threads, walltime per member, shareNodes -> exclusive, coreUsageRule ->
#: cap, GPUs, memory) and its feeding (maxMembers: most members one pilot is given).
MEMBER_FIELDS = frozenset({"ranksPerMember", "ranksPerNode", "threadsPerRank", "maxWallTimePerMember", "shareNodes",
                           "coreUsageRule", "gpusPerMember", "memoryPerMember", "tmpPerMember", "maxMembers"})
#: The fields each protocol acts on: those and what its job script states. The rest are
#: reported, never dropped; submissionType is checked by value (registry: submission_types).
USED_SCHEDULING = {name: MEMBER_FIELDS | p.script_fields for name, p in PROTOCOLS.items()}


def run_warnings(plan: Plan, hosts: dict[str, Any]) -> list[str]:
    """Everything ``pwe run`` warns about before it makes anything, and ``pwe plan`` and
    ``pwe validate`` show as well: members that match nothing upstream, and what the
    hosts will not do of each node's scheduling profile."""
    return list(plan.warnings) + unsupported_scheduling(plan, hosts)


def unsupported_scheduling(plan: Plan, hosts: dict[str, Any]) -> list[str]:
    """The profile fields each node's host does not act on (one warning a node), and a
    submissionType it does not do: never dropped silently (DESIGN.md). ``hosts``: the
    hosts the run uses, by name."""
    out = []
    for nid, pn in plan.nodes.items():
        host = hosts[pn.host]
        protocol = host.protocol
        used = set(USED_SCHEDULING[protocol])
        if not host.memory_per_node:
            used.discard("memoryPerMember")  # nothing to count it against
        given = pn.scheduling.model_dump(exclude_none=True)
        kind = given.pop("submissionType", "glidein")
        ignored = sorted(k for k in given if k not in used)
        parts = []
        others = [k for k in ignored if k != "memoryPerMember"]
        if others:
            what = "has no batch system" if protocol == "local" else f"({protocol}) does not use them"
            parts.append(f"{what}; scheduling {', '.join(others)} not used")
        if "memoryPerMember" in ignored:
            # (each member's limit still: pilot/memwatch.py)
            parts.append("states no memory_per_node; memoryPerMember is each member's limit, not packed by")
        if parts:
            out.append(f"node '{nid}': host '{pn.host}' " + "; it ".join(parts))
        if kind not in protocol_info(protocol).submission_types:
            if kind == "batch":
                out.append(f"node '{nid}': submissionType batch (one batch job per member) is not built; its "
                           f"members run in pilot jobs on host '{pn.host}' ({protocol})")
            else:
                head = "protocol local" if host.contact == "local" else f"protocol ssh and contact {host.contact}"
                out.append(f"node '{nid}': submissionType {kind} is not built for host '{pn.host}' ({protocol}); "
                           f"its members run in pilot jobs (to run them on the head node: a host with {head})")
    return out
