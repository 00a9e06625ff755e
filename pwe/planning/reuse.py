"""Members' keys: what makes a member the same as one an earlier run made (content-addressed reuse).

A member's **key** is a 128-bit BLAKE2b digest (Nextflow's task hash is 128 bits too) of:

- its node's digest, made once per node (:func:`node_digest`): the node's name, its
  ``run`` (and ``check``, ``validate``) template as written, the properties the templates read, its own
  ``env``, its ``setup_per_node`` lines, its ``container`` (runtime, image, the image's content
  id: pwe.planning.images) and ``modules`` where it has them, its ranks and threads, its host, its ``products``
  and ``inputs`` templates (a product's ``nonEmpty``/``minBytes`` with it);
- its parameters' values, as the text they have in its command and ``PWE_PARAM_*``;
  together with the templates, that is its rendered command and its environment, without
  rendering it: the same template given the same values renders the same command;
- the content hash (SHA-256) of each file its ``inputs:`` name, each distinct file read
  once per plan however many members name it;
- the keys of the members it waits for: over a matched edge, theirs; over a barrier, one
  digest of all the upstream node's keys, made once (not N x M).

Left out, since they change every run or say where rather than what: ``PWE_RUN_ID``,
``PWE_ATTEMPT``, ``PWE_WORKSPACE``'s value, ``PWE_OUTPUTS``, ``PWE_WALLTIME_MINUTES`` (a
retry grows it), and ``PWE_MEMBER`` (the member's position: widening a range moves members
of a product of parameters; its values say what it is). The host's own environment and
the programs a command runs are not read (as with Parsl's app cache, "what the command
calls" is the user's to say: name the files in ``inputs:``, or say ``reuse: false``).

The cost per member is one digest over a few dozen bytes and, over matched edges, its
upstream members' keys: no template is rendered for it (an ``inputs:`` template that
names a parameter is).

**Parts** (what a later run needs to name the change that makes a member run again,
:mod:`pwe.runstate.rerun_why`): a key is one hash, so beside it pwe keeps

- per member, :data:`PART_BYTES` (8): its **identity** (:data:`ID_BYTES`: node name,
  parameter names and values; what finds "the same member" in an earlier run however
  its range moved) and a 2-byte digest of its **inputs'** content hashes;
- per node, once (:func:`node_parts`): each part of the node's digest as its own short
  digest (``run``, ``check``, ``validate``, each ``env`` variable, each property the templates read,
  ``setup``, ``container``, ``modules``, ``ranks``, ``threads``, ``host``, ``params``, ``products``,
  ``inputs``), the
  digest of each node it waits for as a whole (``after:NODE``), and each input that names
  no parameter, path -> its content hash (``file:PATH``).

Upstream members are named by looking their identities up in the earlier run (their keys
are there): no upstream part per member. The parts change nothing in the key.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any


from . import functions, images
from ..base.confine import relative
from ..base.errors import InputError, TemplateError
from ..base.regular import open_regular
from ..base.source import value_text

#: a :class:`pwe.planning.plan.Plan` (not imported: plan.py builds on this module)
Plan = Any

KEY_BYTES = 16
#: a member's parts: its identity (:data:`ID_BYTES`), then its inputs' digest (2 bytes)
PART_BYTES = 8
ID_BYTES = 6
#: the parts' recipe (not the key's: a change here leaves every key as it was)
PARTS_RECIPE = b"pwe-parts-1"
#: how many hex digits of a node part's digest are kept (48 bits: a few per node)
_PART_HEX = 12
#: the version of the key's recipe: a change in what a key holds makes every earlier key differ
RECIPE = b"pwe-reuse-1"
#: read at a time when an input is hashed
_CHUNK = 1 << 20


def reusable(plan: Plan, nid: str) -> bool:
    """Whether members of ``nid`` may be reused: its ``reuse`` is not false and it has no
    ``check`` (a checked node's members grow while it runs: pwe/planning/trees.py)."""
    pn = plan.nodes[nid]
    return pn.spec.reuse is not False and pn.check is None


def _node_what(plan: Plan, nid: str) -> dict[str, Any]:
    """What a node's digest is made of, field by field."""
    pn = plan.nodes[nid]
    props = plan.workflow.properties
    names = set(pn.template.names) | (set(pn.check.names) if pn.check else set())
    if pn.validate is not None:
        names |= pn.validate.names
    for t in (*pn.products, *pn.inputs):
        names |= t.names
    setup = pn.spec.setup_per_node if pn.spec.setup_per_node is not None else plan.workflow.defaults.setup_per_node
    sched = pn.scheduling
    what = {
        "node": nid, "run": pn.template.source, "check": pn.check.source if pn.check else None,
        "props": {k: value_text(props[k]) for k in sorted(names) if k in props and k not in pn.space.names},
        "env": {k: value_text(v) for k, v in sorted(pn.spec.env.items())},
        "setup": list(setup or []), "ranks": sched.ranksPerMember or 1, "threads": sched.threadsPerRank or 1,
        "host": pn.host, "params": list(pn.space.names),
        "products": [t.source for t in pn.products], "inputs": [t.source for t in pn.inputs],
    }
    # (each only where the node has it: the keys of nodes without stay what they were)
    if pn.products_least:  # a product must hold this many bytes (nonEmpty, minBytes)
        what["products"] = [[t.source, n] if n else t.source for t, n in zip(pn.products, pn.products_least)]
    if pn.validate is not None:
        what["validate"] = pn.validate.source
    container = images.identity(plan, nid)  # (runtime, image, the image's content id)
    if container is not None:
        what["container"] = container
    if pn.spec.modules:
        what["modules"] = list(pn.spec.modules)
    function = functions.identity(plan, nid)  # (a function member's: its module's source digest)
    if function is not None:  # (only where the node has one: the keys of nodes without stay what they were)
        what["function"] = function
    return what


def node_digest(plan: Plan, nid: str) -> bytes:
    """What every member of ``nid`` has alike in its key, made once."""
    return hashlib.blake2b(json.dumps(_node_what(plan, nid), sort_keys=True).encode(), digest_size=KEY_BYTES,
                           person=RECIPE).digest()


def _short(value: Any) -> str:
    return hashlib.blake2b(json.dumps(value, sort_keys=True).encode(), digest_size=_PART_HEX // 2,
                           person=PARTS_RECIPE).hexdigest()


def node_parts(plan: Plan, nid: str, barriers: dict[str, bytes], files: dict[str, bytes]) -> dict[str, str]:
    """Each part of node ``nid``'s digest as its own short digest (hex), named: ``run``,
    ``check``, ``setup``, ``ranks``, ``threads``, ``host``, ``params``, ``products``,
    ``inputs``, ``env:NAME`` and ``prop:NAME`` each; ``after:NODE`` for each node it waits
    for as a whole (``barriers``: node -> the digest of its keys); ``file:PATH`` for each
    input that names no parameter (``files``: path -> its content hash)."""
    what = _node_what(plan, nid)
    out = {k: _short(what[k]) for k in ("run", "check", "setup", "ranks", "threads", "host", "params", "products",
                                       "inputs")}
    if "validate" in what:  # (a part only where the node has one: "validate changed" either way)
        out["validate"] = _short(what["validate"])
    out.update({k: _short(what[k]) for k in ("container", "modules") if k in what})  # (as validate)
    if "function" in what:
        out["function"] = _short(what["function"])
    out.update({f"env:{k}": _short(v) for k, v in what["env"].items()})
    out.update({f"prop:{k}": _short(v) for k, v in what["props"].items()})
    out.update({f"after:{k}": d.hex()[:_PART_HEX] for k, d in barriers.items()})
    out.update({f"file:{k}": h.hex()[:2 * _PART_HEX] for k, h in files.items()})
    return out


def identity_base(plan: Plan, nid: str) -> Any:
    """What a member's identity is made from before its values: its node's name and its
    parameters' names (:func:`member_parts`)."""
    names = "\0".join(plan.nodes[nid].space.names)
    return hashlib.blake2b(f"{nid}\1{names}\1".encode(), digest_size=ID_BYTES, person=PARTS_RECIPE)


def inputs_part(inputs: bytes) -> bytes:
    """The last bytes of a member's parts: a digest of its inputs' content hashes
    (``inputs``: those that name no parameter, then its own)."""
    return hashlib.blake2b(inputs, digest_size=PART_BYTES - ID_BYTES).digest()


def member_parts(ident: Any, text: bytes, inputs: bytes) -> bytes:
    """A member's :data:`PART_BYTES`: the digest of its identity (``ident``, from
    :func:`identity_base`, and ``text``: its values' texts, :func:`texts`, encoded), then
    ``inputs`` (:func:`inputs_part`)."""
    h = ident.copy()
    h.update(text)
    return h.digest() + inputs


def fixed_files(plan: Plan, nid: str, inputs: "Inputs") -> dict[str, bytes]:
    """Node ``nid``'s inputs that name no parameter: path -> content hash (as ``inputs``
    has read them); {} for a node whose inputs name a parameter, or that has none."""
    pn = plan.nodes[nid]
    if not pn.inputs or any(t.names & set(pn.space.names) for t in pn.inputs):
        return {}
    props = dict(plan.workflow.properties)
    return {rel: inputs.current(nid, rel) for rel in inputs.paths(plan, nid, props)}


def check(plan: Plan) -> None:
    """What ``pwe validate`` checks: each node's inputs render for its first and last member
    to paths inside the workspace (:class:`TemplateError`, one line, else)."""
    for nid, pn in plan.nodes.items():
        if pn.inputs:
            for i in sorted({0, pn.size - 1}):
                Inputs.paths(plan, nid, pn.context(plan.workflow.properties, i))


class Inputs:
    """The content hashes of inputs, each distinct file read once (per plan)."""

    def __init__(self, plan: Plan, workspace: Path):
        self.plan = plan
        self.root = str(workspace)
        self.seen: dict[str, bytes] = {}
        self.files_read = 0

    @staticmethod
    def paths(plan: Plan, nid: str, ctx: dict[str, Any]) -> list[str]:
        """A member's inputs, relative to the workspace; :class:`TemplateError` for one that
        does not render or leads out of the workspace."""
        pn = plan.nodes[nid]
        out = []
        for k, t in enumerate(pn.inputs):
            try:
                text = t.render(ctx)
            except Exception as exc:  # noqa: BLE001 - jinja2's errors, and whatever an expression raises
                raise TemplateError(f"node '{nid}': cannot render inputs[{k}] {t.source!r}: {exc}", plan.file,
                                    pn.inputs_line) from None
            rel = relative(text)
            if rel is None:
                raise TemplateError(f"node '{nid}': inputs[{k}] {t.source!r} renders to {text!r}, which is not a "
                                    "path inside the workspace (inputs are relative to it: no leading '/', no '..' "
                                    "out of it)", plan.file, pn.inputs_line)
            out.append(rel)
        return out

    def digest(self, nid: str, ctx: dict[str, Any]) -> bytes:
        out = b""
        for rel in self.paths(self.plan, nid, ctx):
            out += self.current(nid, rel)
        return out

    def current(self, nid: str, rel: str) -> bytes:
        """One input's content hash (read once per plan)."""
        h = self.seen.get(rel)
        if h is None:
            h = self.seen[rel] = self._hash(nid, rel)
        return h

    def _hash(self, nid: str, rel: str) -> bytes:
        """A file's SHA-256; b"-" for one that is not there (the member that needs it runs,
        and says so). Anything but a regular file of the workspace (a FIFO, a device, a
        directory, a dangling link, a link out of the workspace) is refused, never opened
        for reading or waited on (:func:`pwe.base.regular.open_regular`)."""
        path = os.path.join(self.root, rel)
        if not os.path.lexists(path):
            return b"-"
        h = hashlib.sha256()
        try:
            with open_regular(path, "rb", within=self.root) as fh:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
        except OSError as exc:
            raise InputError(f"node '{nid}': inputs: {path}: {exc.strerror or exc}; inputs are regular files of the "
                             "workspace (their content is hashed)", self.plan.file,
                             self.plan.nodes[nid].inputs_line) from None
        self.files_read += 1
        return h.digest()


class LiveInputs(Inputs):
    """The content hashes of inputs as they are now, for keys fixed while a run goes on
    (:mod:`pwe.runstate.keyring`): each file's hash is kept with its ``stat`` (device,
    inode, size, ``mtime_ns``, ``ctime_ns``) and looked at again at most once per
    :meth:`tick` (one feed of the engine): a file whose ``stat`` changed is hashed again.
    A file changed within :data:`RACY_NS` of its hashing (a filesystem's coarse clock can
    give two writes one ``mtime``) is hashed again at each tick until it is older, as
    git does for a "racily clean" file. A file that cannot be read (it became a FIFO, a
    directory) hashes to ``b"!"``: the member runs, and its key matches no later run's."""

    #: how close to its hashing a file's change makes its stat untrusted (coarse clocks, NFS)
    RACY_NS = 2_000_000_000

    def __init__(self, plan: Plan, workspace: Path):
        super().__init__(plan, workspace)
        self.known: dict[str, tuple[Any, bytes, int]] = {}  # rel -> (its stat, its hash, when hashed)
        self.checked: dict[str, int] = {}  # rel -> the tick it was looked at
        self.now = 0

    def tick(self) -> None:
        self.now += 1

    def current(self, nid: str, rel: str) -> bytes:
        known = self.known.get(rel)
        if known is not None and self.checked.get(rel) == self.now:
            return known[1]
        self.checked[rel] = self.now
        fp = _stat(os.path.join(self.root, rel))
        if known is not None and fp is not None and known[0] == fp and fp[3] < known[2] - self.RACY_NS:
            return known[1]
        when = time.time_ns()
        try:
            h = self._hash(nid, rel)
        except InputError:
            h = b"!"
        self.known[rel] = (fp, h, when)  # (changed while it was read: its stat differs at the next look)
        return h


def _stat(path: str) -> tuple[int, int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class Parts:
    """The parts of a plan's keys (:func:`keys` fills it): per node its :func:`node_parts`
    and its members' :data:`PART_BYTES` each (member ``i``'s at ``i * PART_BYTES``)."""

    def __init__(self) -> None:
        self.node: dict[str, dict[str, str]] = {}
        self.members: dict[str, bytearray] = {}

    def of(self, nid: str, i: int) -> bytes:
        return bytes(self.members[nid][i * PART_BYTES:(i + 1) * PART_BYTES])


def keys(plan: Plan, workspace: Path, frozen: bool = True, parts: Parts | None = None) -> tuple[dict[str, bytes], int]:
    """Every member's key, per node one bytes of ``size * KEY_BYTES`` (member ``i``'s at
    ``i * KEY_BYTES``), nodes in the plan's (topological) order; and how many input files
    were read. ``frozen=False``: each node's as the bytearray it was made in, for a caller
    that only reads them (not a copy of 16 bytes a member: 160 MB at 10^7 members).
    ``parts``: filled with the keys' parts too (:class:`Parts`; about a microsecond more a member)."""
    out: dict[str, bytes] = {}
    inputs = Inputs(plan, workspace)
    props = plan.workflow.properties
    for nid, pn in plan.nodes.items():
        base = hashlib.blake2b(node_digest(plan, nid), digest_size=KEY_BYTES, person=RECIPE)
        matched, barriers = [], {}
        for e in plan.edges_into(nid):
            if e.barrier:  # one digest of the whole upstream node, made once
                barriers[e.src] = hashlib.blake2b(out[e.src], digest_size=KEY_BYTES).digest()
            else:
                matched.append((e, out[e.src]))
        base.update(b"".join(barriers.values()))
        space = pn.space
        per_member_inputs = any(t.names & set(space.names) for t in pn.inputs)
        fixed_inputs = inputs.digest(nid, dict(props)) if pn.inputs and not per_member_inputs else b""
        if fixed_inputs:
            base.update(fixed_inputs)
        ctx = dict(props)
        blob = bytearray()
        text_of = _texts(space)
        same = [same_space(plan.nodes[e.src].space, space, e.shared) for e, _ in matched]
        if parts is not None:
            parts.node[nid] = node_parts(plan, nid, barriers, fixed_files(plan, nid, inputs))
            pblob = parts.members[nid] = bytearray()
            ident = identity_base(plan, nid)
            fixed_part = inputs_part(fixed_inputs)
        for i in range(pn.size):
            h = base.copy()
            text = text_of(i).encode()
            h.update(text)
            if per_member_inputs:
                ctx.update(space.values_of(i))
                mine = inputs.digest(nid, ctx)
                h.update(mine)
            for (e, up), one in zip(matched, same):
                h.update(b"|")
                for j in ((i,) if one else plan.upstream(e, i)):
                    h.update(up[j * KEY_BYTES:(j + 1) * KEY_BYTES])
            blob += h.digest()
            if parts is not None:
                pblob += member_parts(ident, text, inputs_part(fixed_inputs + mine) if per_member_inputs
                                      else fixed_part)
        out[nid] = bytes(blob) if frozen else blob
    return out, inputs.files_read


#: values of a parameter whose texts are made once per plan (a longer range: each member's, as it comes)
_TABLE_MOST = 1 << 20


def _texts(space: Any) -> Any:
    """member index -> its parameters' texts joined by NULs (what its command and
    ``PWE_PARAM_*`` are made of), without a dict per member: each parameter's texts made
    once where it has at most :data:`_TABLE_MOST` values and each is used at least twice
    (a product's shorter parameters); a text used once (zip's, or the one parameter of a
    sweep over a range) is made as it comes: a table of a million texts was ~60 MB of the
    engine's at the start and at the end of a run of a million members."""
    cols = [space.values[n] for n in space.names]
    tables = [[value_text(v) for v in c] if len(c) <= _TABLE_MOST and space.combine != "zip" and
              space.size >= 2 * len(c) else None for c in cols]
    if space.combine == "zip":
        spec = [(t, c, None, None) for t, c in zip(tables, cols)]
    else:
        spec = [(t, c, s, len(c)) for t, c, s in zip(tables, cols, space.strides)]

    def text_of(i: int) -> str:
        if i >= space.size:  # (a grown member: its own values)
            vals = space.values_of(i)
            return "\0".join(value_text(vals[n]) for n in space.names)
        parts = []
        for t, c, stride, n in spec:
            k = i if stride is None else (i // stride) % n
            parts.append(t[k] if t is not None else value_text(c[k]))
        return "\0".join(parts)

    return text_of


texts = _texts


def same_space(up: Any, down: Any, shared: tuple[str, ...]) -> bool:
    """Whether member i of ``down`` waits for exactly member i of ``up`` over an edge
    matched on ``shared``: both have the same parameters (all shared), combined alike,
    with the same values (a pipeline): no lookup per member."""
    if list(up.names) != list(down.names) or set(shared) != set(up.names) or up.combine != down.combine:
        return False
    for n in up.names:
        a, b = up.values[n], down.values[n]
        if a is b:
            continue
        if type(a) is not type(b) or len(a) != len(b):
            return False
        if hasattr(a, "step"):
            if (a.start, a.stop, a.step) != (b.start, b.stop, b.step):
                return False
        elif len(a) > _TABLE_MOST or [value_text(v) for v in a] != [value_text(v) for v in b]:
            return False
    return True


def key_of(blob: bytes, i: int) -> bytes:
    return blob[i * KEY_BYTES:(i + 1) * KEY_BYTES]
