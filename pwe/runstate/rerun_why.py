"""Why a member of a new run is not reused: the change that makes it run again, named.

A member's key is one hash (:mod:`pwe.planning.reuse`), so a key that no earlier run
made says only "something changed". Its **parts**, recorded beside the keys that runs
lend (:mod:`pwe.runstate.reusable`, :mod:`pwe.runstate.lending`), say what: this module
finds, in the lending runs (newest first), the member with the same **identity** (node,
parameter names and values: however its range moved) and compares, part by part:

- the node's parts: ``command (run:) changed``, ``command (check:) changed``, ``validate changed``,
  ``environment changed (env: FOO)``, ``environment changed (setup_per_node)``, ``container
  changed`` (its runtime, image or the image's content), ``modules changed``,
  ``property P changed``, ``host changed``, ``ranks changed``, ``threads changed``,
  ``products (products:) changed``, ``inputs (inputs:) changed``, ``upstream NODE changed``
  (a node it waits for as a whole), ``input data/mesh.h5 changed`` (an input that names no
  parameter, by its content hash);
- the member's inputs' digest: ``input data/3.h5 changed`` (those of its inputs that name
  a parameter);
- the keys of the members it waits for, looked up by their identities in the same run:
  ``upstream prep[3] changed``;

and, where there is no such member, ``new: no earlier run had a member with these values
(mesh=fine)`` (the values no earlier member of the node had; all of them for a new
combination; "finished" for "had" where a lending run did not reach its end: only what
finished is in its record), ``earlier run's member did not finish (failed)`` (the run recorded it
failed), or ``unknown: recorded by an older pwe`` (a record without parts). A member that
runs because a member it waits for runs names that member (``upstream prep[3] changed``);
one whose node says ``reuse: false`` says so (``its node says reuse: false``); one whose products are gone or
changed says so (the words of :mod:`pwe.runstate.reusable`).

:func:`explain_member` gives one member's document (a stable shape, below);
:func:`why_run` its reasons' texts; :class:`Why` holds what both need for one plan (its
keys and parts, the decision, the lenders' identities) so that ``pwe plan --explain``
asks it about every member that would run (:meth:`Why.node`).

The document of a member::

    {"node": "sim", "member": 3, "parameters": {"i": 3},
     "reused": false,              # true: "from": {"run": RUN, "member": M}, no reasons
     "reasons": [{"kind": "input", "text": "input data/mesh.h5 changed",
                  "group": "input data/mesh.h5 changed", "name": "data/mesh.h5"}, ...],
     "compared_with": {"run": RUN, "member": M}}   # (where a member of the same identity was found)

``kind`` is one of :data:`KINDS`; ``text`` says it for this member; ``group`` says it
for many members alike (``upstream prep changed`` for ``upstream prep[3] changed``); ``name``,
where there is one, is the thing named (a path, a variable, a property, a node). Texts hold
paths and values as they are: a terminal shows them through :func:`pwe.base.text.shown`.

Everything is weighed as a run of the plan beginning now would weigh it: its inputs as they
are now, against the lenders given (:func:`lenders_of`: for a past run, those recorded
before it began). One module over 400 lines: the lookups by identity, the comparison part
by part and the counting over a node read one another's caches (:class:`Why`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from pathlib import Path
from typing import Any

from ..base.source import value_text
from ..planning.reuse import ID_BYTES, KEY_BYTES, PART_BYTES, Inputs, Parts, keys as member_keys, reusable, texts
from . import reusable as lend

#: the kinds of reason (a document's ``kind``)
KINDS = ("off", "checked", "products", "upstream", "new", "failed", "command", "environment", "property", "host",
         "resources", "inputs", "input", "unknown")
#: most members a reason names (upstream members), then "(+N more)"
MOST_NAMED = 3
#: longest text of one value in a reason (the rest: "...")
MOST_VALUE = 60
OLDER = "unknown: recorded by an older pwe"

#: a node part's name (before a colon) -> (kind, text)
_NODE_PART = {
    "run": ("command", "command (run:) changed"),
    "check": ("command", "command (check:) changed"),
    "validate": ("command", "validate changed"),
    "setup": ("environment", "environment changed (setup_per_node)"),
    "container": ("environment", "container changed"),
    "modules": ("environment", "modules changed"),
    "function": ("command", "function's module changed (python:)"),
    "ranks": ("resources", "ranks changed"),
    "threads": ("resources", "threads changed"),
    "host": ("host", "host changed"),
    "params": ("new", "parameters changed (their names)"),
    "products": ("command", "products (products:) changed"),
    "inputs": ("inputs", "inputs (inputs:) changed"),
}


def _reason(kind: str, text: str, group: str | None = None, name: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, "text": text, "group": group or text}
    if name is not None:
        out["name"] = name
    return out


def _value(v: Any) -> str:
    t = value_text(v)
    return t if len(t) <= MOST_VALUE else t[:MOST_VALUE] + "..."


def _names(items: list[str], most: int = MOST_NAMED) -> str:
    return ", ".join(items[:most]) + (f" (+{len(items) - most} more)" if len(items) > most else "")


class Why:
    """What naming the changes of one plan's members needs, made once: the plan's keys and
    parts, which members a run beginning now would reuse (:func:`pwe.runstate.reusable.decide`),
    and the lenders' members by identity (per lender and node, made when first asked)."""

    def __init__(self, plan: Any, workspace: str | None, found: list[Any], notes: list[str] | None = None):
        self.plan = plan
        self.ws = workspace or str(plan.file.parent)
        self.found = found
        self.parts = Parts()
        self.keys, _ = member_keys(plan, Path(self.ws), parts=self.parts)
        self.decision = lend.decide(plan, workspace, found, notes, keys=self.keys)
        self._taken: dict[str, bytearray] = {}
        self._lent: dict[tuple[int, str], dict[bytes, int] | None] = {}
        self._failed: dict[tuple[int, str], set[bytes]] = {}
        self._seen: dict[str, list[set[str]]] = {}
        self._memo: dict[tuple[Any, ...], Any] = {}

    # -- what the lenders hold, by identity ---------------------------------------------------
    def lent(self, li: int, nid: str) -> dict[bytes, int] | None:
        """Identity -> position (in the keys and parts of lender ``li``) of node ``nid``'s
        members it lends; None where its record has no parts (an older pwe's)."""
        got = self._lent.get((li, nid), False)
        if got is not False:
            return got  # type: ignore[return-value]
        lender, node = self.found[li], self.found[li].nodes.get(nid)
        index: dict[bytes, int] | None = {}
        if node:
            pos, blob = node["at"], lender.parts
            count = sum(hi - lo for lo, hi in node["runs"])
            known = 0
            for k in range(pos, pos + count):
                ident = blob[k * PART_BYTES:k * PART_BYTES + ID_BYTES]
                if any(ident):
                    index[ident] = k  # type: ignore[index]
                    known += 1
            if count and not known:
                index = None
        self._lent[(li, nid)] = index
        return index

    def failed(self, li: int, nid: str) -> set[bytes]:
        got = self._failed.get((li, nid))
        if got is None:
            f = self.found[li].failed.get(nid) or {}
            blob = f.get("parts", b"")
            got = self._failed[(li, nid)] = {blob[k:k + ID_BYTES] for k in range(0, len(blob), PART_BYTES)}
        return got

    def taken(self, nid: str) -> bytearray:
        """1 for each member of ``nid`` a run beginning now would reuse."""
        got = self._taken.get(nid)
        if got is None:
            got = self._taken[nid] = bytearray(self.plan.nodes[nid].size)
            for lo, hi, *_ in self.decision.reused.get(nid, ()):
                got[lo:hi] = b"\1" * (hi - lo)
        return got

    # -- one member -----------------------------------------------------------------------
    def member(self, nid: str, i: int) -> dict[str, Any]:
        """Member ``i`` of ``nid``'s document (the module's docstring)."""
        pn = self.plan.nodes[nid]
        doc: dict[str, Any] = {"node": nid, "member": i, "parameters": pn.space.values_of(i), "reused": False}
        if self.taken(nid)[i]:
            runs = self.decision.reused[nid]
            lo, hi, m, li = runs[bisect_right(runs, i, key=lambda r: r[0]) - 1]
            doc["reused"] = True
            doc["from"] = {"run": self.found[li].run, "member": m + i - lo}
            doc["reasons"] = []
            return doc
        doc["reasons"] = self.reasons(nid, i, doc)
        return doc

    def reasons(self, nid: str, i: int, doc: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Why member ``i`` of ``nid``, which a run beginning now would not reuse, runs: its
        reasons (the module's docstring); ``doc`` gets ``compared_with``."""
        pn = self.plan.nodes[nid]
        said = self._decided(nid, i)
        if not reusable(self.plan, nid):
            return [_reason("off", lend.OFF) if pn.check is None else _reason("checked", lend.CHECKED)]
        if said == lend.UPSTREAM:  # (and what changed in it, where its own parts say)
            own = [r for r in self._compared(nid, i, doc, upstream=False) if r["kind"] not in ("unknown", "new")]
            return self._upstream_runs(nid, i) + own
        if said in (lend.GONE, lend.CHANGED, lend.ELSEWHERE):
            return [_reason("products", said)]
        return self._compared(nid, i, doc)

    def _decided(self, nid: str, i: int) -> str | None:
        for reason, runs in self.decision.why.get(nid, {}).items():
            k = bisect_right(runs, [i, float("inf")]) - 1
            if k >= 0 and runs[k][0] <= i < runs[k][1]:
                return reason
        return None

    def _upstream_runs(self, nid: str, i: int) -> list[dict[str, Any]]:
        """The members it waits for that run (not reused), named."""
        out = []
        for e in self.plan.edges_into(nid):
            if e.barrier:
                if (got := self._memo.get(("barrier", e.src))) is None:
                    up = self.taken(e.src)
                    got = self._memo[("barrier", e.src)] = self._running(e.src, (j for j in range(len(up))
                                                                                 if not up[j]))
            else:
                up = self.taken(e.src)
                got = self._running(e.src, (j for j in self._upstream_of(e, nid, i) if not up[j]))
            if got:
                out.append(got)
        return out or [_reason("upstream", lend.UPSTREAM)]

    @staticmethod
    def _running(src: str, js: Any) -> dict[str, Any] | None:
        named = [f"{src}[{j}]" for _, j in zip(range(MOST_NAMED + 1), js)]
        more = sum(1 for _ in js)  # (the rest of them, counted: js is an iterator)
        if not named:
            return None
        if more or len(named) > MOST_NAMED:
            text = f"upstream {', '.join(named[:MOST_NAMED])} (+{len(named) - MOST_NAMED + more} more) changed"
        else:
            text = f"upstream {', '.join(named)} changed"
        return _reason("upstream", text, f"upstream {src} changed", src)

    def _upstream_of(self, e: Any, nid: str, i: int) -> Any:
        from ..planning.reuse import same_space

        one = self._memo.get(("same", e.src, nid))
        if one is None:
            one = self._memo[("same", e.src, nid)] = same_space(self.plan.nodes[e.src].space,
                                                                 self.plan.nodes[nid].space, e.shared)
        return (i,) if one else self.plan.upstream(e, i)

    def _compared(self, nid: str, i: int, doc: dict[str, Any] | None, upstream: bool = True) -> list[dict[str, Any]]:
        """Its key is no earlier run's: the member of the same identity, newest first, and
        what differs from it (``upstream=False``: but the keys of the members it waits for)."""
        mine = self.parts.of(nid, i)
        ident = mine[:ID_BYTES]
        out: list[dict[str, Any]] = []
        older = False
        for li in range(len(self.found)):
            index = self.lent(li, nid)
            if index is None:
                older = True
                continue
            pos = index.get(ident)
            if pos is None:
                if ident in self.failed(li, nid) and not any(r["kind"] == "failed" for r in out):
                    out.append(_reason("failed", "earlier run's member did not finish (failed)"))
                continue
            if doc is not None:
                doc["compared_with"] = {"run": self.found[li].run, "member": self._member_at(self.found[li], nid, pos)}
            return out + self._differs(nid, i, li, pos, mine, upstream)
        if out:
            return out
        if older:
            return [_reason("unknown", OLDER)]
        return [self._new(nid, i)]

    @staticmethod
    def _member_at(lender: Any, nid: str, pos: int) -> int:
        k = pos - lender.nodes[nid]["at"]
        for lo, hi in lender.nodes[nid]["runs"]:
            if k < hi - lo:
                return lo + k
            k -= hi - lo
        return -1

    def _differs(self, nid: str, i: int, li: int, pos: int, mine: bytes, upstream: bool) -> list[dict[str, Any]]:
        lender = self.found[li]
        theirs = lender.parts[pos * PART_BYTES:(pos + 1) * PART_BYTES]
        node = self._node_differs(li, nid)
        if node is None:
            return [_reason("unknown", OLDER)]
        out = [r for r in node if upstream or not r["group"].startswith("upstream ")]
        if theirs[ID_BYTES:] != mine[ID_BYTES:] and not any(r["kind"] == "input" for r in node):
            out += self._inputs_named(nid, i)
        if upstream:
            out += self._upstream_changed(nid, i, li)
        if not out and upstream:
            out.append(_reason("unknown", f"unknown: its key differs from that of run {lender.run}'s member "
                                          f"{self._member_at(lender, nid, pos)}, and no recorded part says how"))
        return out

    def _node_differs(self, li: int, nid: str) -> list[dict[str, Any]] | None:
        """How node ``nid``'s parts differ from those lender ``li`` recorded (made once);
        None where it recorded none."""
        key = ("node", li, nid)
        if key not in self._memo:
            old_np, new_np = self.found[li].nodes[nid].get("np"), self.parts.node[nid]
            self._memo[key] = None if not isinstance(old_np, dict) else [
                _node_reason(name) for name in sorted(set(old_np) | set(new_np), key=_part_order)
                if old_np.get(name) != new_np.get(name)]
        return self._memo[key]

    def _inputs_named(self, nid: str, i: int) -> list[dict[str, Any]]:
        """Its inputs' digest differs, its node's inputs that name no parameter do not: those
        that name one (or, for a node with none such, the file changed while that run went on)."""
        pn = self.plan.nodes[nid]
        names = set(pn.space.names)
        ctx = dict(self.plan.workflow.properties)
        ctx.update(pn.space.values_of(i))
        paths = Inputs.paths(self.plan, nid, ctx)
        mine = [(p, t) for p, t in zip(paths, pn.inputs) if t.names & names] or list(zip(paths, pn.inputs))
        return [_reason("input", f"input {p} changed", f"input {t.source} changed", p) for p, t in mine]

    def _upstream_changed(self, nid: str, i: int, li: int) -> list[dict[str, Any]]:
        """The members it waits for over a matched edge whose keys differ from those of the
        members of the same identity in lender ``li`` (or that it does not lend)."""
        out = []
        for e in self.plan.edges_into(nid):
            if e.barrier:
                continue  # (the node's part after:NODE says it)
            index = self.lent(li, e.src) or {}
            blob, keys = self.found[li].keys, self.keys[e.src]
            changed = []
            for j in self._upstream_of(e, nid, i):
                pos = index.get(self.parts.of(e.src, j)[:ID_BYTES])
                now = keys[j * KEY_BYTES:(j + 1) * KEY_BYTES]
                if pos is None or blob[pos * KEY_BYTES:(pos + 1) * KEY_BYTES] != now:
                    changed.append(f"{e.src}[{j}]")
            if changed:
                out.append(_reason("upstream", f"upstream {_names(changed)} changed", f"upstream {e.src} changed",
                                   e.src))
        return out

    def _new(self, nid: str, i: int) -> dict[str, Any]:
        """No lender has a member of its identity: the values no earlier member of the node
        had (every value, for a new combination of known ones)."""
        space = self.plan.nodes[nid].space
        seen = self._seen_values(nid)
        vals = space.values_of(i)
        fresh = [n for n, s in zip(space.names, seen) if value_text(vals[n]) not in s] or list(space.names)
        # (a run that did not reach its end lent only what finished: its others may have run)
        had = "had" if all(lender.ended for lender in self.found) else "finished"
        if not fresh:
            return _reason("new", f"new: no earlier run {had} this member")
        said = ", ".join(f"{n}={_value(vals[n])}" for n in fresh)
        return _reason("new", f"new: no earlier run {had} a member with these values ({said})",
                       f"new: no earlier run {had} these values of {', '.join(fresh)}")

    def _seen_values(self, nid: str) -> list[set[str]]:
        """Per parameter of ``nid``, the texts of its values that some earlier run's member
        had (a member reused, or found by its identity among those lent or failed)."""
        got = self._seen.get(nid)
        if got is not None:
            return got
        space = self.plan.nodes[nid].space
        got = self._seen[nid] = [set() for _ in space.names]
        if not space.names:
            return got
        text_of = texts(space)
        taken = self.taken(nid)
        indexes: list[Any] = [x for li in range(len(self.found)) if (x := self.lent(li, nid))]
        indexes += [x for li in range(len(self.found)) if (x := self.failed(li, nid))]
        members = self.parts.members[nid]
        for i in range(space.size):
            if not taken[i]:
                ident = bytes(members[i * PART_BYTES:i * PART_BYTES + ID_BYTES])
                if not any(ident in x for x in indexes):
                    continue
            for s, t in zip(got, text_of(i).split("\0")):
                s.add(t)
        return got

    # -- a node -------------------------------------------------------------------------------
    def node(self, nid: str, most_members: int = 3) -> dict[str, Any]:
        """Node ``nid``'s members that would run, by reason: ``changes``, a list of
        ``{"reason", "count", "members"}`` (runs of member indices; the most members first),
        each reason counted once per member that has it (:func:`_counted`); and ``members``,
        each member's document where at most ``most_members`` run."""
        taken = self.taken(nid)
        running = [i for i, t in enumerate(taken) if not t]
        out: dict[str, Any] = {"changes": _counted((i, self.reasons(nid, i)) for i in running)}
        if len(running) <= most_members:
            out["members"] = [self.member(nid, i) for i in running]
        return out


def _counted(reasons: Any) -> list[dict[str, Any]]:
    """Reasons counted over members: by ``group``, said by the group's one ``text`` where all
    its members' agree (``input data/mesh.h5 changed``), else by the group's words
    (``upstream prep changed`` for ``upstream prep[3] changed``, ``prep[4]``...)."""
    members: dict[str, list[int]] = {}
    said: dict[str, set[str]] = {}
    for i, rs in reasons:
        for r in rs:
            g = r["group"]
            texts_of = said.setdefault(g, set())
            if len(texts_of) < 2:  # (one text or more than one is all it needs: bounded)
                texts_of.add(r["text"])
            ms = members.setdefault(g, [])
            if not ms or ms[-1] != i:
                ms.append(i)
    counts = Counter({g: len(ms) for g, ms in members.items()})
    return [{"reason": next(iter(said[g])) if len(said[g]) == 1 else g, "count": n,
             "members": lend._runs_of(members[g])} for g, n in counts.most_common()]


def _part_order(name: str) -> tuple[int, str]:
    head = name.split(":", 1)[0]
    order = ("run", "check", "validate", "env", "setup", "container", "modules", "prop", "file", "inputs", "products",
             "host", "ranks", "threads", "after", "params")
    return (order.index(head) if head in order else len(order), name)


def _node_reason(name: str) -> dict[str, Any]:
    head, _, rest = name.partition(":")
    if head == "env":
        return _reason("environment", f"environment changed (env: {rest})", name=rest)
    if head == "prop":
        return _reason("property", f"property {rest} changed", name=rest)
    if head == "file":
        return _reason("input", f"input {rest} changed", name=rest)
    if head == "after":
        return _reason("upstream", f"upstream {rest} changed", name=rest)
    kind, text = _NODE_PART.get(head, ("unknown", f"unknown: its part {name!r} changed"))
    return _reason(kind, text)


def lenders_of(plan: Any, root: Path | str | None = None, exclude: Path | None = None,
               started: float | None = None) -> tuple[list[Any], list[str]]:
    """The lenders a run of ``plan`` would look at: those of the runs root ``root`` (default
    ./pwe-runs), newest first, less the run directory ``exclude`` and, with ``started`` (a
    run's start, epoch seconds), those recorded after it (what that run could not have
    reused); and a line for each run that lends nothing."""
    from .rundir import DEFAULT_ROOT

    found, notes = lend.lenders(Path(root) if root is not None else DEFAULT_ROOT, plan.workflow.name,
                                exclude=Path(exclude).resolve() if exclude is not None else None)
    if started is not None:
        found = [lender for lender in found if lender.t <= started]
    return found, notes


def explain_member(plan: Any, workspace: str | None, nid: str, i: int, lenders: list[Any] | None = None,
                   root: Path | str | None = None) -> dict[str, Any]:
    """Member ``i`` of node ``nid`` of ``plan``: reused (and from where), or why it runs,
    as a run of ``plan`` beginning now into ``workspace`` would decide with ``lenders``
    (newest first; None: those of the runs root ``root``, :func:`lenders_of`). The
    document of the module's docstring. For many members of one plan, make one
    :class:`Why` and ask it each (this makes the plan's keys each time)."""
    found = lenders if lenders is not None else lenders_of(plan, root)[0]
    return Why(plan, workspace, found).member(nid, i)


def why_run(plan: Any, workspace: str | None, nid: str, i: int, lenders: list[Any] | None = None,
            root: Path | str | None = None) -> list[str]:
    """The texts of :func:`explain_member`'s reasons (``[]``: it would be reused)."""
    return [r["text"] for r in explain_member(plan, workspace, nid, i, lenders, root)["reasons"]]
