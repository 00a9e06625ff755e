"""What ``pwe lint`` says of a workflow that validates, from its plan and its hosts alone:
warnings, never refusals (what cannot run is :mod:`pwe.planning.plan`'s and
:mod:`pwe.planning.placement`'s to refuse). Each warning names the file and line to change
and what to do (:class:`Lint`); docs/how-to/lint.md says what each one means.

- ``script-not-an-input``: a node whose members are reused (``reuse``, default true)
  calls a file of the workspace (a word of its ``run`` or ``check``, such as ``./sim.sh``,
  ``python fit.py``, ``bash scripts/prep.sh``) that its ``inputs:`` do not name: a member's
  key holds its inputs' content, not the programs it calls (:mod:`pwe.planning.reuse`), so
  an edit to that file would not make its members run again;
- ``memory-unset``: no ``memoryPerMember`` on a host whose nodes' memory a hosts file
  states (``memory_per_node``, the host's or a partition's): the pilot packs members by
  memoryPerMember against it and holds each member to its own (pilot/packing.py,
  pilot/memwatch.py); a member that gives none is packed as if it used no memory and is
  held to nothing, so the batch system's own limit kills the whole pilot job instead;
- ``many-products``: a node of :data:`MANY_MEMBERS` members or more, each with
  ``products:``, on a shared file system: a million files in one directory tree is a
  million entries for the metadata servers (NFS, Lustre, GPFS) to create, look up and list;
- ``hosts-contradict``: keys of a host used by the workflow that say opposite things
  (:func:`host_contradictions`);
- ``parameter-unused``: a parameter of several values that nothing of its node reads: it
  multiplies the members, each running the same command.

Nothing here expands members one by one: counts come from each node's parameter space
(:class:`pwe.planning.params.ParameterSpace`), and only the first member's inputs are
rendered. A file is looked at with ``stat`` alone, and only a regular file is ever read
(a script searched for ``$PWE_PARAM_NAME``, at most :data:`SCRIPT_READ_MOST` bytes of it).
The check that reads earlier runs (a member walltime against what they measured) sits a
room up, in :mod:`pwe.observe.lint`, which runs these with it.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from pathlib import Path
from typing import Any, NamedTuple

from protocols.registry import info as protocol_info

from ..base.confine import relative
from ..base.errors import PweError
from ..base.regular import inside, open_regular
from ..base.source import locate, value_text
from ..base.text import shown
from .plan import Plan
from .reuse import reusable

#: the members of one node, each with products, from which their files are too many for a
#: shared file system's metadata servers (a million files in one tree: issue 47)
MANY_MEMBERS = 10**6
#: bytes of a script the workflow calls that are searched for ``PWE_PARAM_NAME``
SCRIPT_READ_MOST = 1 << 20
#: the file systems whose metadata lives on servers shared by every client (from
#: /proc/self/mounts), where a workspace on this machine is shared too
NETWORK_FS = frozenset({"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cephfs", "ceph", "glusterfs", "fuse.glusterfs",
                        "panfs", "wekafs", "smb3", "cifs", "fuse.sshfs"})

# a template's expressions and statements, replaced by a character no path holds before
# a command is cut into words ({{ seed }} is no file named seed)
_TEMPLATE_PART = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)
_HOLE = "\x00"
_WORKSPACE_PREFIXES = ("$PWE_WORKSPACE/", "${PWE_WORKSPACE}/")
_REDIRECTS = frozenset({">", ">>", "&>", ">&", ">|", "&>>"})  # (2> is "2" then ">": a digit is no file)


class Lint(NamedTuple):
    """One warning: where (``file``, ``line``: None where no line says it), which check,
    what is wrong and what to do."""

    file: str
    line: int | None
    check: str
    what: str
    fix: str

    def text(self) -> str:
        """``FILE:LINE: warning: WHAT (FIX)``, every value in it shown as text."""
        where = f"{self.file}:{self.line}" if self.line else self.file
        return shown(f"{where}: warning: {self.what} ({self.fix})")

    def document(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "check": self.check, "what": self.what, "fix": self.fix}


def lint_plan(plan: Plan, hosts: dict[str, Any], registry: Any, raw: Any, workspace: Path) -> list[Lint]:
    """The warnings of a plan checked against its hosts (``hosts``: those it uses, by name;
    ``registry``: where each came from; ``raw``: the workflow's line-numbered tree)."""
    out: list[Lint] = []
    for nid in plan.nodes:
        out += scripts_not_inputs(plan, nid, workspace)
        out += memory_unset(plan, nid, hosts, registry)
        out += many_products(plan, nid, hosts, workspace)
        out += parameters_unused(plan, nid, raw, workspace)
    for name in sorted(hosts):  # (as its hosts file writes it, not a stand-in: fallback: local)
        out += host_contradictions(registry.hosts.get(name, hosts[name]), registry)
    return out


# ------------------------------------------------------------------ the files a command calls
def command_words(source: str) -> list[str]:
    """The words of a command template that may name a file, its template parts taken out
    (a word holding one names no file alone): shell operators apart, the target of an
    output redirection left out (written, not called), ``NAME=VALUE`` and ``--opt=VALUE``
    as their VALUE, and ``$PWE_WORKSPACE/`` taken off the front."""
    text = _TEMPLATE_PART.sub(_HOLE, source)
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        words = list(lex)
    except ValueError:  # (an unclosed quote: the template's own business; its words as written)
        words = text.split()
    out, after_redirect = [], False
    for word in words:
        if after_redirect or word in _REDIRECTS:
            after_redirect = word in _REDIRECTS
            continue
        if "=" in word:
            word = word.split("=", 1)[1]
        for prefix in _WORKSPACE_PREFIXES:
            if word.startswith(prefix):
                word = word[len(prefix):]
        if word and not word.isdigit() and not any(c in word for c in _HOLE + "$*?[~`"):  # (2>: no file 2)
            out.append(word)
    return out


class PathShapes:
    """The paths some path templates render to, as shapes: each template's literal text with
    a hole (any text, at least a character) for each template part. Matched left to right,
    each literal at its first place (enough when holes take any text): linear in the path,
    never a regular expression's backtracking over holes side by side."""

    def __init__(self, sources: list[str]):
        self.shapes = []
        for src in sources:
            parts = _TEMPLATE_PART.split(src)
            if parts[0].startswith("./"):
                parts[0] = parts[0][2:]
            self.shapes.append(parts)

    def match(self, path: str) -> bool:
        return any(self._fits(parts, path) for parts in self.shapes)

    @staticmethod
    def _fits(parts: list[str], path: str) -> bool:
        head, tail = parts[0], parts[-1]
        if len(parts) == 1:
            return path == head
        if not (path.startswith(head) and path.endswith(tail)):
            return False
        pos, end = len(head), len(path) - len(tail)
        for literal in parts[1:-1]:
            at = path.find(literal, pos + 1, end)  # (the hole before it takes a character at least)
            if at < 0:
                return False
            pos = at + len(literal)
        return end - pos >= 1


def called_files(plan: Plan, nid: str, workspace: Path) -> list[tuple[str, str, int | None]]:
    """The files of the workspace that node ``nid``'s ``run`` (and ``check``, ``validate``) name: (the
    word as written, the path relative to the workspace, the line), each once; a file that
    some node's ``products:`` make is left out (a result, not a program), and so is anything
    but a regular file, or a link out of the workspace. ``stat`` only."""
    pn = plan.nodes[nid]
    made = PathShapes([t.source for n in plan.nodes.values() for t in n.products])
    out, seen = [], set()
    templates = [(pn.template.source, pn.run_line)] + ([(pn.check.source, pn.check_line)] if pn.check else []) \
        + ([(pn.validate.source, pn.validate_line)] if pn.validate else [])
    for source, line in templates:
        for word in command_words(source):
            rel = relative(word)
            if rel is None or rel in seen or made.match(rel):
                continue
            path = workspace / rel
            try:  # (a regular file that resolves inside the workspace: what inputs: may name)
                if not stat.S_ISREG(os.stat(path).st_mode) or not inside(path, workspace):
                    continue
            except (OSError, ValueError):
                continue
            seen.add(rel)
            out.append((word, rel, line))
    return out


def scripts_not_inputs(plan: Plan, nid: str, workspace: Path) -> list[Lint]:
    pn = plan.nodes[nid]
    if not reusable(plan, nid):
        return []
    named = PathShapes([t.source for t in pn.inputs])
    out = []
    for word, rel, line in called_files(plan, nid, workspace):
        if named.match(rel):
            continue
        out.append(Lint(
            str(plan.file), line or pn.line, "script-not-an-input",
            f"node '{nid}' is reused (reuse: true, the default) and its command calls {word}, a file of the workspace "
            f"that its inputs: do not name: an edit to {rel} would not make its members run again",
            f"add {rel!r} to its inputs:, or say reuse: false"))
    return out


# ------------------------------------------------------------------ memory
def _memory_stated(host: Any) -> int | None:
    """The memory per node a host's nodes state (the host's, else its partitions' most)."""
    return host.memory_per_node or max((p.memory_per_node or 0 for p in host.partitions), default=0) or None


def memory_unset(plan: Plan, nid: str, hosts: dict[str, Any], registry: Any) -> list[Lint]:
    pn = plan.nodes[nid]
    # (the host its hosts file states, not the stand-in that fallback: local runs it on, measured here)
    host = registry.hosts.get(pn.host) or hosts[pn.host]
    source = registry.sources.get(host.name, "built in")
    mem = _memory_stated(host)
    # (the built-in local host measures this machine: a user who stated nothing is told nothing)
    if pn.scheduling.memoryPerMember or not mem or source == "built in":
        return []
    return [Lint(str(plan.file), pn.scheduling_lines.get("memoryPerMember") or pn.line, "memory-unset",
                 f"node '{nid}' gives no memoryPerMember and runs on host '{host.name}', whose nodes' memory "
                 f"{source} states ({mem:,} MB per node): its members are packed as if they used no memory and "
                 "none is held to a limit, so one that grows takes the node's memory from the others and the batch "
                 "system's limit ends the whole pilot job",
                 "give scheduling: memoryPerMember: MB, e.g. what `pwe status RUN --usage` suggests")]


# ------------------------------------------------------------------ a million products
def _network_fs(path: Path, mounts: str | None = None) -> str | None:
    """The type of the network file system ``path`` is on (its longest mount point in
    ``mounts``, /proc/self/mounts' text), or None: a local one, or none known."""
    if mounts is None:
        try:
            with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
                mounts = fh.read(1 << 20)
        except OSError:
            return None
    best, kind = "", None
    where = str(path)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (where == point or where.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind if kind in NETWORK_FS else None


def _shared(host: Any, workspace: Path) -> str | None:
    """Why the products of a node on ``host`` land on a shared file system, or None."""
    if host.shared_fs and host.protocol != "local":
        return f"host '{host.name}' shares this machine's file system (shared_fs: true)"
    fs = _network_fs(workspace)
    return f"the workspace {workspace} is on {fs}" if fs else None


def many_products(plan: Plan, nid: str, hosts: dict[str, Any], workspace: Path) -> list[Lint]:
    pn = plan.nodes[nid]
    if pn.size < MANY_MEMBERS or not pn.products:
        return []
    why = _shared(hosts[pn.host], workspace)
    if why is None:
        return []
    files = pn.size * len(pn.products)
    return [Lint(str(plan.file), pn.products_line or pn.line, "many-products",
                 f"node '{nid}' has {pn.size:,} members, each with products: ({files:,} files), and {why}: that "
                 "many files in one directory tree load the file system's metadata servers for every user of it",
                 "make one product per group of members (an archive, or an HDF5 file per range of a parameter), "
                 "or write them to node-local scratch and keep only a summary")]


# ------------------------------------------------------------------ parameters
def _scripts_text(plan: Plan, nid: str, workspace: Path) -> str:
    """What the files node ``nid``'s command calls hold (each regular file only, at most
    :data:`SCRIPT_READ_MOST` bytes): where a program reads ``$PWE_PARAM_NAME`` itself."""
    out = []
    for _, rel, _ in called_files(plan, nid, workspace):
        try:
            with open_regular(workspace / rel, "rb", within=workspace) as fh:
                out.append(fh.read(SCRIPT_READ_MOST).decode("utf-8", "replace"))
        except OSError:
            continue
    return "\n".join(out)


def _names_used(plan: Plan, nid: str) -> set[str]:
    """The names node ``nid``'s templates read, those its edges match on, its group's."""
    pn = plan.nodes[nid]
    used = set(pn.template.names) | (set(pn.check.names) if pn.check else set())
    if pn.validate is not None:
        used |= pn.validate.names
    for t in (*pn.products, *pn.inputs):
        used |= t.names
    for e in plan.edges:
        if nid in (e.src, e.dst):
            used |= set(e.shared)  # (its members wait for, or are waited on by, members of the same value)
    group = pn.spec.group
    if group is not None:
        used |= set(group.sort_by)
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", " ".join(group.include or [])))
        used |= words
    return used


def parameters_unused(plan: Plan, nid: str, raw: Any, workspace: Path) -> list[Lint]:
    pn = plan.nodes[nid]
    if pn.spec.python is not None:
        return []  # (a function member's parameters are its function's arguments: each one used)
    space = pn.space
    unused = [n for n in space.names if len(space.values[n]) > 1 and n not in _names_used(plan, nid)]
    if not unused:
        return []
    texts = " ".join([pn.template.source, pn.check.source if pn.check else "",
                      pn.validate.source if pn.validate else "",
                      *(value_text(v) for v in pn.spec.env.values())])
    if any(f"PWE_PARAM_{n.upper()}" not in texts for n in unused):
        texts += _scripts_text(plan, nid, workspace)
    out = []
    for name in unused:
        if f"PWE_PARAM_{name.upper()}" in texts:
            continue
        values = space.values[name]
        first = ", ".join(_short(value_text(values[i])) for i in range(min(3, len(values))))
        more = ", ..." if len(values) > 3 else ""
        out.append(Lint(
            str(plan.file), locate(raw, ("nodes", nid, "parameters", name)) or pn.line, "parameter-unused",
            f"node '{nid}': parameter '{name}' ({len(values):,} values: {first}{more}) is used by no template of "
            f"the node (run, check, products, inputs), no edge and no group, and its command does not read "
            f"$PWE_PARAM_{name.upper()}: it multiplies the members by {len(values):,}, each running the same command",
            f"use {{{{ {name} }}}} or $PWE_PARAM_{name.upper()} in its run (replicas meant as such too), or remove "
            "the parameter"))
    return out


def _short(text: str, most: int = 40) -> str:
    """A value as a warning shows it: at most ``most`` characters (a value of a megabyte
    is one line of the file, not of the warning)."""
    return text if len(text) <= most else text[:most] + "..."


# ------------------------------------------------------------------ hosts
def host_contradictions(host: Any, registry: Any) -> list[Lint]:
    """Keys of one host that say opposite things, each with its line in the hosts file it
    came from (nothing for the built-in ``local``). What a hosts file cannot say at all
    (max_queued_pilots above max_pilots, transport redis without a broker, shared_fs:
    false on this machine) and what a workflow asks beyond a host (more GPUs, memory or
    cores per member than a node has) are refused before this (exit 2)."""
    source = registry.sources.get(host.name, "built in")
    if source == "built in":
        return []
    from ..base.yaml_reader import read_yaml

    try:
        raw = read_yaml(Path(source), what="a hosts file", needs="'hosts'")
    except PweError:  # (it was read a moment ago; changed since: the same words, no lines)
        raw = None

    def said(*loc: Any) -> tuple[str, int | None]:
        return source, locate(raw, ("hosts", host.name, *loc)) if raw is not None else None

    given = set(raw["hosts"][host.name]) if raw is not None else set()
    out = []
    for text, fix, where in _contradictions(host, given):
        out.append(Lint(*said(*where), "hosts-contradict", f"host '{host.name}': {text}", fix))
    return out


def _contradictions(host: Any, given: set[str]) -> list[tuple[str, str, tuple]]:
    """(what, what to do, where in the host's entry) for each contradiction of ``host``;
    ``given``: the keys its entry writes (a default is never a contradiction)."""
    proto = protocol_info(host.protocol)
    out = []
    seen: dict[str, int] = {}
    for k, part in enumerate(host.partitions):
        if part.name in seen:
            out.append((f"partition '{part.name}' is listed twice (entries {seen[part.name] + 1} and {k + 1}) with "
                        "its own limits each; a node's queue: finds the first",
                        "keep one entry per partition", ("partitions", k)))
        seen.setdefault(part.name, k)
    gpus = [("gpus_per_node", host.gpus_per_node, ("gpus_per_node",))] + [
        (f"partition '{p.name}' gpus_per_node", p.gpus_per_node, ("partitions", k, "gpus_per_node"))
        for k, p in enumerate(host.partitions) if p.gpus_per_node]
    for what, n, where in gpus:
        if n and not proto.asks_gpus:
            out.append((f"{what} {n} but protocol {host.protocol} cannot ask for GPUs: a member that asks for "
                        "them is refused here", "run GPU members on a SLURM or PBS host, or drop gpus_per_node",
                        where))
    if host.transport == "spool" and {"broker", "broker_password_file"} & given:
        key = "broker" if "broker" in given else "broker_password_file"
        out.append((f"{key} is given but transport is spool (the default): the broker is never used",
                    "say transport: redis to use it, or remove the broker keys", (key,)))
    if "parallel_environment" in given and not proto.parallel_environment:
        out.append((f"parallel_environment is given but protocol {host.protocol} has none (Grid Engine's -pe): "
                    "it is never used", "remove it, or use protocol: sge", ("parallel_environment",)))
    staged = sorted({"remote_dir", "remote_pwe"} & given)
    if staged and host.shared_fs:
        they = "they are" if len(staged) > 1 else "it is"
        out.append((f"{' and '.join(staged)} given but shared_fs is true: nothing is staged, so {they} never used",
                    "say shared_fs: false to stage runs to the login node, or remove "
                    + ("them" if len(staged) > 1 else "it"), (staged[0],)))
    return out
