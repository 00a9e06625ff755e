"""The keys a run's members were given when they were handed to a pilot: what the run lends.

A member's key (:mod:`pwe.planning.reuse`: its command, values, inputs' content, the keys
of the members it waits for) is fixed when the member is **assigned**, not when the run
ends: an input file edited while the run goes on gives the members assigned after the
edit keys of the new content, and leaves those assigned before with the old. The run lends
each member under the key it got (:mod:`pwe.runstate.lending`, :func:`pwe.runstate.reusable.write`),
so the next run reuses only a member whose recorded key is its own.

:class:`KeyRing` holds, per node that may have keys (every node but one with a ``check``,
whose members grow), one ``bytearray`` of ``size * 16`` bytes (member ``i``'s at
``i * 16``; zeros: none recorded yet), made when the node is first needed. The same
bytes are kept in the run's ``assigned.keys`` (a header, then each node's region in the
plan's order; a sparse file), written by :meth:`flush` before the journal that holds the
assignments is (the engine's loop calls it first): a resumed engine reads them back and
ends the members still in flight under the keys they were handed with. A key is one
digest over a few dozen bytes (about a microsecond) made as its member goes; an input is
looked at (``stat``) at most once per feed (:class:`pwe.planning.reuse.LiveInputs`), and
read again only when it changed.

A member done without an assignment (reused: its key is the one it was found by; found
complete by its products; never run) gets a key when something needs it (a member that
waits for it, or the record of what the run lends), made then, and recorded.

Beside each key, its **parts** (:data:`pwe.planning.reuse.PART_BYTES` a member: its
identity and its inputs' digest, made with the key, the inputs as they were then), in
memory only: a member whose key was read back from ``assigned.keys`` by a resumed engine,
or was reused, has its parts made when the run lends it (:meth:`parts`), the inputs as they
are then. Per node once, :meth:`node_parts` (what :func:`pwe.planning.reuse.node_parts` says,
the inputs as they are when it is asked).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ..planning.reuse import (KEY_BYTES, PART_BYTES, RECIPE, LiveInputs, fixed_files, identity_base, inputs_part,
                              member_parts, node_digest, node_parts, reusable, same_space, texts)

FILE = "assigned.keys"
MAGIC = b"pwe-keys-1\0\0\0\0\0\0"
HEADER = 32
_ZERO = bytes(KEY_BYTES)
_NO_PARTS = bytes(PART_BYTES)


class _Recipe:
    """What every key of one node is made with (made once per node)."""

    __slots__ = ("base", "fixed", "tick", "text_of", "per_member", "has_fixed", "matched", "barriers", "ident",
                 "barrier_digests", "fixed_part")

    def __init__(self) -> None:
        self.base: Any = None
        self.fixed = b""
        self.tick = -1


class KeyRing:
    """The recorded keys of one run's members (see the module's docstring)."""

    def __init__(self, plan: Any, run_dir: Path, workspace: str | None):
        self.plan = plan
        self.path = Path(run_dir) / FILE
        self.on = any(reusable(plan, n) for n in plan.nodes)
        self.inputs = LiveInputs(plan, Path(workspace or plan.file.parent))
        self.region: dict[str, int] = {}  # node -> where its keys begin in the file (bytes)
        at = HEADER
        for nid, pn in plan.nodes.items():
            if pn.check is None:
                self.region[nid] = at
                at += pn.size * KEY_BYTES
        self.size = at
        layout = hashlib.blake2b(repr([(n, plan.nodes[n].size) for n in self.region]).encode(), digest_size=16)
        self.header = MAGIC + layout.digest()
        self.blobs: dict[str, bytearray] = {}
        self.pblobs: dict[str, bytearray] = {}  # node -> its members' parts (zeros: none made yet)
        self.dirty: dict[str, list[int]] = {}
        self._recipes: dict[str, _Recipe] = {}
        self._fd: int | None = None
        self._had = False  # the file held keys of this run's plan when it was opened (a resumed run)

    # -- the file ---------------------------------------------------------------------------
    def open(self) -> None:
        """Open (or make) ``assigned.keys``; keys an earlier engine of the run recorded are
        read back per node when first needed. A file of another layout is started afresh."""
        if not self.on:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            head = os.pread(fd, HEADER, 0)
            self._had = head == self.header
            if not self._had:
                os.ftruncate(fd, 0)
                os.pwrite(fd, self.header, 0)
            os.ftruncate(fd, self.size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def flush(self) -> None:
        """Write the keys recorded since the last flush (before the journal's flush: an
        assignment journaled has its key on disk); the inputs are looked at again from now."""
        self.inputs.tick()
        if not self.dirty or self._fd is None:
            self.dirty.clear()
            return
        for nid, marks in self.dirty.items():
            blob, base = self.blobs[nid], self.region[nid]
            lo = hi = None
            for i in sorted(set(marks)):
                if hi == i:
                    hi += 1
                    continue
                if lo is not None:
                    os.pwrite(self._fd, blob[lo * KEY_BYTES:hi * KEY_BYTES], base + lo * KEY_BYTES)
                lo, hi = i, i + 1
            if lo is not None:
                os.pwrite(self._fd, blob[lo * KEY_BYTES:hi * KEY_BYTES], base + lo * KEY_BYTES)
        self.dirty.clear()

    def close(self) -> None:
        if self._fd is not None:
            try:
                self.flush()
            finally:
                os.close(self._fd)
                self._fd = None

    # -- keys ---------------------------------------------------------------------------------
    def _blob(self, nid: str) -> bytearray:
        blob = self.blobs.get(nid)
        if blob is None:
            blob = self.blobs[nid] = bytearray(self.plan.nodes[nid].size * KEY_BYTES)
            if self._had and self._fd is not None and blob:
                got = os.preadv(self._fd, [blob], self.region[nid])
                if got != len(blob):  # (a file cut short: what it lacks is recorded again when needed)
                    blob[got:] = bytes(len(blob) - got)
        return blob

    def fix(self, nid: str, i: int) -> None:
        """Member ``i`` of ``nid`` is handed to a pilot now: its key, as things are now."""
        if nid in self.region and self.on:
            blob = self.blobs.get(nid) or self._blob(nid)
            blob[i * KEY_BYTES:(i + 1) * KEY_BYTES] = self._make(nid, i)
            self.dirty.setdefault(nid, []).append(i)

    def _pblob(self, nid: str) -> bytearray:
        pb = self.pblobs.get(nid)
        if pb is None:
            pb = self.pblobs[nid] = bytearray(self.plan.nodes[nid].size * PART_BYTES)
        return pb

    def parts(self, nid: str, runs: Any = None) -> bytearray:
        """Node ``nid``'s members' parts, every member in ``runs`` (``(lo, hi)`` pairs; None:
        all) made: those without (reused, read back by a resumed engine) get theirs now."""
        pb = self._pblob(nid)
        for lo, hi in runs if runs is not None else [(0, self.plan.nodes[nid].size)]:
            at = lo * PART_BYTES
            while (at := pb.find(_NO_PARTS, at, hi * PART_BYTES)) >= 0:
                if at % PART_BYTES:
                    at += 1
                    continue
                self._make(nid, at // PART_BYTES, key=False)
                at += PART_BYTES
        return pb

    def part(self, nid: str, i: int) -> bytes:
        """Member ``i``'s parts (made now where it has none)."""
        return bytes(self.parts(nid, [(i, i + 1)])[i * PART_BYTES:(i + 1) * PART_BYTES])

    def node_parts(self, nid: str) -> dict[str, str]:
        """Node ``nid``'s parts (:func:`pwe.planning.reuse.node_parts`), the inputs as they are now."""
        r = self._recipes.get(nid) or self._recipe(nid)
        self._base(nid, r)
        return node_parts(self.plan, nid, r.barrier_digests, fixed_files(self.plan, nid, self.inputs))

    def take(self, nid: str, runs: list[list[int]], keys: bytes) -> None:
        """Members reused (``runs`` ``[lo, hi, ...]``): their keys, those they were found by
        (``keys``: the node's, as :func:`pwe.planning.reuse.keys` made them)."""
        if nid not in self.region or not self.on:
            return
        blob = self._blob(nid)
        marks = self.dirty.setdefault(nid, [])
        for lo, hi, *_ in runs:
            blob[lo * KEY_BYTES:hi * KEY_BYTES] = keys[lo * KEY_BYTES:hi * KEY_BYTES]
            marks.extend(range(lo, hi))

    def key(self, nid: str, i: int) -> bytes:
        """Member ``i``'s recorded key; one made now (and recorded) where it has none."""
        if nid not in self.region:
            return _ZERO  # (a node with a check: never reused, nor is what waits for it)
        blob = self.blobs.get(nid) or self._blob(nid)
        k = bytes(blob[i * KEY_BYTES:(i + 1) * KEY_BYTES])
        if k == _ZERO:
            k = self._make(nid, i)
            blob[i * KEY_BYTES:(i + 1) * KEY_BYTES] = k
            self.dirty.setdefault(nid, []).append(i)
        return k

    def filled(self, nid: str, runs: Any = None) -> bytearray:
        """Node ``nid``'s keys, every member in ``runs`` (``(lo, hi)`` pairs; None: all of
        them) recorded: those without one get one made now."""
        blob = self._blob(nid)
        for lo, hi in runs if runs is not None else [(0, self.plan.nodes[nid].size)]:
            at = lo * KEY_BYTES
            while (at := blob.find(_ZERO, at, hi * KEY_BYTES)) >= 0:
                if at % KEY_BYTES:
                    at += 1  # (zeros across two keys)
                    continue
                self.key(nid, at // KEY_BYTES)
                at += KEY_BYTES
        return blob

    def _recipe(self, nid: str) -> _Recipe:
        r = self._recipes.get(nid)
        if r is None:
            plan, pn = self.plan, self.plan.nodes[nid]
            r = self._recipes[nid] = _Recipe()
            r.text_of = texts(pn.space)
            r.ident = identity_base(plan, nid)
            r.barrier_digests = {}
            r.per_member = any(t.names & set(pn.space.names) for t in pn.inputs)
            r.has_fixed = bool(pn.inputs) and not r.per_member
            r.matched, r.barriers = [], []
            for e in plan.edges_into(nid):
                if e.barrier:
                    r.barriers.append(e.src)
                else:
                    r.matched.append((e.src, e.src in self.region and
                                      same_space(plan.nodes[e.src].space, pn.space, e.shared), e))
        return r

    def _base(self, nid: str, r: _Recipe) -> Any:
        """The node's part of every key: its digest, the digests of the nodes it waits for
        as a whole (barriers: all their members recorded first), its inputs that name no
        parameter, as they are now (looked at once per feed)."""
        if r.base is not None and (not r.has_fixed or r.tick == self.inputs.now):
            return r.base
        fixed = self.inputs.digest(nid, dict(self.plan.workflow.properties)) if r.has_fixed else b""
        r.tick = self.inputs.now
        if r.base is None or fixed != r.fixed:
            base = hashlib.blake2b(node_digest(self.plan, nid), digest_size=KEY_BYTES, person=RECIPE)
            for src in r.barriers:
                whole = self.filled(src) if src in self.region else bytes(self.plan.nodes[src].size * KEY_BYTES)
                r.barrier_digests[src] = hashlib.blake2b(whole, digest_size=KEY_BYTES).digest()
                base.update(r.barrier_digests[src])
            if fixed:
                base.update(fixed)
            r.base, r.fixed, r.fixed_part = base, fixed, inputs_part(fixed)
        return r.base

    def _make(self, nid: str, i: int, key: bool = True) -> bytes:
        """Member ``i``'s key as :func:`pwe.planning.reuse.keys` makes it, with the inputs'
        content as it is now and the recorded keys of the members it waits for; its parts
        recorded beside it. ``key=False``: its parts only (b"")."""
        r = self._recipes.get(nid) or self._recipe(nid)
        base = self._base(nid, r)
        text = r.text_of(i).encode()
        mine = b""
        if r.per_member:
            ctx = dict(self.plan.workflow.properties)
            ctx.update(self.plan.nodes[nid].space.values_of(i))
            mine = self.inputs.digest(nid, ctx)
        pb = self.pblobs.get(nid) or self._pblob(nid)
        pb[i * PART_BYTES:(i + 1) * PART_BYTES] = member_parts(r.ident, text, inputs_part(r.fixed + mine)
                                                               if r.per_member else r.fixed_part)
        if not key:
            return b""
        h = base.copy()
        h.update(text)
        h.update(mine)
        for src, one, e in r.matched:
            h.update(b"|")
            for j in ((i,) if one else self.plan.upstream(e, i)):
                h.update(self.key(src, j))
        return h.digest()
