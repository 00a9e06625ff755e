"""What the pilot was given: the nodes of its allocation, their cores, and when it ends.

Read from the batch system's environment (SLURM, PBS, SGE, LoadLeveler), from an explicit
host list, or this machine alone. Standard library only.
"""

from __future__ import annotations

import os
import re
import time


def hostname() -> str:
    """This host's name: what ``socket.gethostname`` says (both are uname's nodename), without
    importing socket (~2 ms of the engine's start; the engine imports this module)."""
    return os.uname().nodename


#: A node's name as ssh, srun and mpiexec take it (the DNS and ssh host name grammar):
#: letters, digits, '.', '-' and '_', never starting with '-' (an option) or '.'.
NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")


def check_node_name(name: str) -> str:
    """``name`` if it is a host name; else ValueError saying what a host name is. Every
    node name that reaches a launcher's command line passes here first."""
    if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a host name (letters, digits, '.', '-' and '_', not starting "
                         "with '-' or '.')")
    return name


class Node:
    """One node of the allocation. (A plain class, not a dataclass: the pilot's start-up
    would pay ~13 ms for dataclasses and the inspect module it imports.)"""

    __slots__ = ("name", "cores", "gpus", "local", "memory_mb")
    __hash__ = None  # (compared by value, as a dataclass is: not hashable)

    def __init__(self, name: str, cores: int, gpus: int = 0, local: bool = False, memory_mb: int | None = None):
        self.name = name
        self.cores = cores
        self.gpus = gpus
        self.local = local  # the pilot's own node: members are forked, not launched remotely
        self.memory_mb = memory_mb  # None: not known, so members are not packed by memory

    def _fields(self) -> tuple:
        return (self.name, self.cores, self.gpus, self.local, self.memory_mb)

    def __eq__(self, other: object) -> bool:
        return self._fields() == other._fields() if type(other) is Node else NotImplemented

    def __repr__(self) -> str:
        return (f"Node(name={self.name!r}, cores={self.cores!r}, gpus={self.gpus!r}, local={self.local!r}, "
                f"memory_mb={self.memory_mb!r})")


class Allocation:
    """What the batch system (or the command line) gave the pilot: its kind (slurm | pbs |
    sge | loadleveler | hosts | local), its nodes, the job's id, and when it ends (epoch
    seconds; None: no end known)."""

    __slots__ = ("kind", "nodes", "job_id", "end", "notes")
    __hash__ = None

    def __init__(self, kind: str, nodes: list[Node], job_id: str | None = None, end: float | None = None,
                 notes: list[str] | None = None):
        self.kind = kind
        self.nodes = nodes
        self.job_id = job_id
        self.end = end
        self.notes = [] if notes is None else notes

    def __eq__(self, other: object) -> bool:
        if type(other) is not Allocation:
            return NotImplemented
        return (self.kind, self.nodes, self.job_id, self.end, self.notes) == \
            (other.kind, other.nodes, other.job_id, other.end, other.notes)

    def __repr__(self) -> str:
        return (f"Allocation(kind={self.kind!r}, nodes={self.nodes!r}, job_id={self.job_id!r}, end={self.end!r}, "
                f"notes={self.notes!r})")

    @property
    def cores(self) -> int:
        return sum(n.cores for n in self.nodes)


def expand_hostlist(spec: str) -> list[str]:
    """SLURM's compact host lists: ``node[01-03,07],gpu1`` -> node01 node02 node03 node07
    gpu1; ``a[1-2]b[3-4]`` -> a1b3 a1b4 a2b3 a2b4. Inside SLURM the pilot asks SLURM's own
    parser (:func:`slurm_hostnames`); this one serves where scontrol is absent. A list it
    cannot read all of is a ValueError saying where, never a guess."""
    hosts: list[str] = []
    pos = 0
    while pos < len(spec):
        m = _ITEM.match(spec, pos)
        if not m or not m.group(0):
            raise ValueError(f"cannot read the node list {spec!r} at character {pos + 1}")
        hosts.extend(_expand_one(m.group(0), spec))
        pos = m.end()
        if pos < len(spec):
            if spec[pos] != "," or pos == len(spec) - 1:
                raise ValueError(f"cannot read the node list {spec!r} at character {pos + 1}")
            pos += 1
    return hosts


_ITEM = re.compile(r"(?:[^,\[\]]+|\[[0-9,\-]+\])+")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def _expand_one(part: str, spec: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", part)
    if not m:
        return [part]
    head, tail = part[: m.start()], part[m.end():]
    rests = _expand_one(tail, spec) if tail else [""]
    out = []
    for rng in m.group(1).split(","):
        r = _RANGE.fullmatch(rng)
        if not r or (r.group(2) and int(r.group(2)) < int(r.group(1))):
            raise ValueError(f"cannot read the node list {spec!r}: range {rng!r}")
        lo, hi = r.group(1), r.group(2) or r.group(1)
        for k in range(int(lo), int(hi) + 1):
            out.extend(head + str(k).zfill(len(lo)) + rest for rest in rests)
    return out


def slurm_hostnames(spec: str) -> list[str]:
    """A SLURM node list expanded by SLURM itself (``scontrol show hostnames``), checked by
    :func:`expand_hostlist`'s grammar first (scontrol prints garbage for a broken list
    rather than refusing it); the pilot's own expansion where scontrol is absent."""
    import subprocess  # (only inside SLURM: not on every pilot's start-up)

    names = expand_hostlist(spec)
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", spec], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL, cwd="/")
    except (OSError, subprocess.TimeoutExpired):
        return names
    said = out.stdout.split()
    return said if out.returncode == 0 and said else names


def expand_counts(spec: str) -> list[int]:
    """SLURM's per-node counts: ``4(x2),2`` -> [4, 4, 2]."""
    out: list[int] = []
    for item in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not m:
            raise ValueError(f"cannot read CPU counts {spec!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def _count_file(path: str) -> list[tuple[str, int]]:
    """A PBS / LoadLeveler node file: one line per core (or task), hosts repeated."""
    counts: dict[str, int] = {}
    with open(path) as fh:
        for line in fh:
            host = line.split()[0] if line.strip() else ""
            if host:
                counts[host] = counts.get(host, 0) + 1
    return list(counts.items())


def pe_hostfile(path: str) -> list[tuple[str, int]]:
    """Grid Engine's ``$PE_HOSTFILE``: a line per host, "host slots queue processors"
    (``node1.example.org 4 all.q@node1 UNDEFINED``); a host on two lines (two queues)
    has the sum of their slots."""
    counts: dict[str, int] = {}
    with open(path) as fh:
        for line in fh:
            words = line.split()
            if len(words) >= 2 and words[1].isdigit():
                counts[words[0]] = counts.get(words[0], 0) + int(words[1])
    return list(counts.items())


def _mark_local(nodes: list[Node]) -> list[Node]:
    name = hostname()
    me = {name, name.split(".")[0], "localhost"}
    for n in nodes:
        n.local = n.name in me or n.name.split(".")[0] in me
    return nodes


_SLURM_CONFIG: dict[str, str] = {}


def slurm_config() -> dict[str, str]:
    """The cluster's configuration as ``scontrol show config`` prints it (key: value, both
    text), read once per pilot: {} when scontrol cannot say."""
    if not _SLURM_CONFIG:
        import subprocess

        try:
            out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=20,
                                 stdin=subprocess.DEVNULL, cwd="/").stdout
        except (OSError, subprocess.TimeoutExpired):
            return {}
        for line in out.splitlines():
            key, eq, value = line.partition("=")
            if eq:
                _SLURM_CONFIG[key.strip()] = value.strip()
    return _SLURM_CONFIG


def visible_gpus(env: dict[str, str] | os._Environ) -> list[str] | None:
    """The GPU ids ``CUDA_VISIBLE_DEVICES`` names (None when it is not set; ``-1`` is none)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    ids = [d.strip() for d in value.split(",") if d.strip()]
    return [] if ids[:1] == ["-1"] else ids


def local_gpu_ids(env: dict[str, str] | os._Environ, dev: str = "/dev") -> list[str]:
    """This machine's GPUs that members may use, by the ids CUDA takes.

    ``CUDA_VISIBLE_DEVICES`` when it is set (a batch system or the user chose them),
    else one id per NVIDIA device node (``/dev/nvidia0`` ... : CUDA numbers them 0..N-1).
    The one way pwe counts a machine's GPUs: the built-in ``local`` host (hostinfo) and a
    pilot on this machine both call it, so they never disagree.
    """
    visible = visible_gpus(env)
    if visible is not None:
        return visible
    try:
        count = sum(1 for d in os.listdir(dev) if re.fullmatch(r"nvidia\d+", d))
    except OSError:
        count = 0
    return [str(j) for j in range(count)]


def discover(env: dict[str, str] | None = None, hosts: str | None = None, hostfile: str | None = None,
             cores: int | None = None, walltime_minutes: float | None = None,
             started: float | None = None, gpus_per_node: int | None = None,
             memory_per_node: int | None = None) -> Allocation:
    """The allocation this pilot runs in.

    Precedence: an explicit ``hosts`` ("h1:4,h2:4") or ``hostfile`` (lines "host [cores]"),
    then SLURM, PBS, SGE (``$PE_HOSTFILE``, else ``$NSLOTS`` here), LoadLeveler from ``env``,
    then this machine (``cores`` or its own).
    ``walltime_minutes`` (from the job script) sets the end, counted from ``started``.
    GPUs and memory (MB) per node come from the host's definition when given, else from
    SLURM (``SLURM_GPUS_ON_NODE``, ``SLURM_MEM_PER_NODE``) or, on this machine alone, as
    :func:`local_gpu_ids` counts them; memory left unknown is not packed by.
    """
    env = dict(os.environ if env is None else env)
    alloc = _nodes(env, hosts, hostfile, cores, walltime_minutes, started)
    for n in alloc.nodes:  # (ValueError: a name that would reach ssh or srun as an option)
        check_node_name(n.name)
    gpus = gpus_per_node
    if gpus is None:
        if alloc.kind == "slurm" and env.get("SLURM_GPUS_ON_NODE", "").isdigit():
            gpus = int(env["SLURM_GPUS_ON_NODE"])
        elif alloc.kind == "local":
            gpus = len(local_gpu_ids(env))
    memory = memory_per_node
    if memory is None and alloc.kind == "slurm" and env.get("SLURM_MEM_PER_NODE", "").isdigit():
        memory = int(env["SLURM_MEM_PER_NODE"])
    for n in alloc.nodes:
        n.gpus = gpus or 0
        n.memory_mb = memory
    return alloc


def _nodes(env: dict[str, str], hosts: str | None, hostfile: str | None, cores: int | None,
           walltime_minutes: float | None, started: float | None) -> Allocation:
    started = started or time.time()
    end = started + walltime_minutes * 60 if walltime_minutes else None
    if hosts or hostfile:
        pairs: list[tuple[str, int]] = []
        if hosts:
            for item in hosts.split(","):
                name, _, n = item.strip().partition(":")
                pairs.append((check_node_name(name), int(n) if n else (cores or 1)))
        else:
            with open(hostfile) as fh:  # type: ignore[arg-type]
                for line in fh:
                    words = line.split()
                    if words and not words[0].startswith("#"):
                        pairs.append((check_node_name(words[0]), int(words[1]) if len(words) > 1 else (cores or 1)))
        return Allocation("hosts", _mark_local([Node(h, c) for h, c in pairs]), end=end)
    if env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"):
        names = slurm_hostnames(env.get("SLURM_JOB_NODELIST") or env["SLURM_NODELIST"])
        counts = expand_counts(env.get("SLURM_JOB_CPUS_PER_NODE") or ",".join(["1"] * len(names)))
        if len(counts) != len(names):
            counts = (counts + [counts[-1]] * len(names))[: len(names)]
        return Allocation("slurm", _mark_local([Node(h, c) for h, c in zip(names, counts)]),
                          job_id=env.get("SLURM_JOB_ID"), end=end)
    if env.get("PBS_NODEFILE"):
        return Allocation("pbs", _mark_local([Node(h, c) for h, c in _count_file(env["PBS_NODEFILE"])]),
                          job_id=env.get("PBS_JOBID"), end=end)
    if env.get("PE_HOSTFILE") and env.get("JOB_ID"):
        return Allocation("sge", _mark_local([Node(h, c) for h, c in pe_hostfile(env["PE_HOSTFILE"])]),
                          job_id=env.get("JOB_ID"), end=end)
    if env.get("JOB_ID") and env.get("SGE_ROOT") and env.get("NSLOTS", "").isdigit():
        # an SGE job without a parallel environment: the slots it has (one), on this host
        return Allocation("sge", [Node(hostname(), int(env["NSLOTS"]), local=True)],
                          job_id=env["JOB_ID"], end=end)
    if env.get("LOADL_HOSTFILE"):
        return Allocation("loadleveler", _mark_local([Node(h, c) for h, c in _count_file(env["LOADL_HOSTFILE"])]),
                          job_id=env.get("LOADL_STEP_ID"), end=end)
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:
            cores = os.cpu_count() or 1
    return Allocation("local", [Node(hostname(), cores, local=True)], end=end)
