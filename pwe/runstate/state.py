"""The state of a run's members, rebuilt from the journal by one ``apply`` function.

The engine decides, appends a record to the journal, then applies it; a resumed engine,
``pwe show`` and ``pwe status --full`` apply the same records in the same order and so
arrive at the same state. Derived changes (a dependency satisfied, a retry scheduled,
downstream members skipped after a final failure) are not journaled: ``apply`` derives
them the same way every time.

Memory is per member a state byte, an attempt counter and a dependency counter (arrays,
not objects: 13 bytes); exit statuses, outputs and failure counts are kept only where they
exist, and the members ready to run are kept as runs of indices (:class:`ReadyQueue`), so a
node of a million members that are all ready costs one entry, not a million.

The state can also be loaded from a checkpoint (:mod:`pwe.runstate.checkpoint`) and then the
journal's tail applied: the same state, without replaying the whole journal.

Why one module of ~700 lines: every record kind is applied here, by one ``apply`` (a
handler per kind of :data:`pwe.runstate.journal.FIELDS`, the table :data:`_ON`), and
the derived changes (dependencies released, retries, skips, a tree's growth, members
complete by products) all read and change the same arrays; split, the one rule that
engine, resume and ``pwe show`` must share would be spread over several files. The ready
queue, the trees and the checkpoint, which have state of their own, are apart.
"""

from __future__ import annotations

import re
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from pilot.wire import NOT_STARTED, UNWRITABLE  # (a back whose why begins so: the member never started)

from ..base.states import (AGAIN, ASSIGNED, CANCELLED, DONE, FAILED, FINAL, HELD, NAMES, QUARANTINED, READY,
                           RUNNING, SKIPPED, WAITING)
from .journal import (ASSIGN, CANCEL, COMPLETE, EDGE, END, ENDS, FINISH, HALT, HEADER, HOLD, NODE_LOST, NOTE, OFFSET,
                      SET, PILOT, PILOT_DRAIN, PILOT_GONE, REJECT, RESUME, RETRY, REUSED, RUN, START, STOPPED, UNASSIGN,
                      check, packed, unpack)
from .readyqueue import ReadyQueue
from ..planning.trees import CONVERGED, GREW, LIMIT, Tree

if TYPE_CHECKING:  # (pwe status reads the state's names without planning anything)
    from ..planning.plan import Plan


@dataclass
class NodeState:
    size: int
    state: bytearray
    attempt: array
    deps: array
    counts: list[int]
    rc: dict[int, int] = field(default_factory=dict)
    why: dict[int, str] = field(default_factory=dict)
    outputs: dict[int, dict] = field(default_factory=dict)
    failures: dict[int, int] = field(default_factory=dict)
    #: why a member's last attempt ended, where not its own exit: oom, walltime (the pilot's
    #: words), halted, quarantined (pilot/wire.py's REASON_*)
    reason: dict[int, str] = field(default_factory=dict)
    losses: dict[int, int] = field(default_factory=dict)  # pilots or nodes lost while it ran (maxLosses)
    pilot: dict[int, str] = field(default_factory=dict)  # members queued or running: which pilot
    pid: dict[int, int] = field(default_factory=dict)
    spent: float = 0.0  # seconds run by every attempt that ended (pwe status's core-hours)
    done_spent: float = 0.0  # of those, the attempts that succeeded
    #: members found complete by their products when the run began (pwe.planning.products): done
    #: without running, as runs [lo, hi) of indices in order
    complete: list[list[int]] = field(default_factory=list)
    #: members reused from earlier runs when the run began (pwe.runstate.reusable): done without
    #: running, as runs [lo, hi, from_lo, from_run] in order (member i is from_lo + i - lo of from_run)
    reused: list[list[Any]] = field(default_factory=list)

    def reused_from(self, i: int) -> tuple[str, int] | None:
        """(the run, its member) that member i was reused from, or None."""
        from bisect import bisect_right

        k = bisect_right(self.reused, i, key=lambda r: r[0]) - 1
        if k >= 0 and self.reused[k][0] <= i < self.reused[k][1]:
            lo, _, src, run = self.reused[k]
            return run, src + i - lo
        return None

    def reused_count(self) -> int:
        return sum(r[1] - r[0] for r in self.reused)

    def is_complete(self, i: int) -> bool:
        """Whether member i was found complete by its products (not run)."""
        from bisect import bisect_right

        k = bisect_right(self.complete, [i, float("inf")]) - 1
        return k >= 0 and self.complete[k][0] <= i < self.complete[k][1]

    def complete_count(self) -> int:
        return sum(hi - lo for lo, hi in self.complete)


#: A run of READY members in a node's state bytes (its codes: pwe/base/states.py).
READY_RUN = re.compile(b"[%c]+" % READY)
#: A run of members not begun (WAITING or READY) in a node's state bytes.
NOT_BEGUN_RUN = re.compile(b"[%c%c]+" % (WAITING, READY))


def ready_runs(state: bytearray) -> Iterable[tuple[int, int]]:
    """(lo, hi) of each run of READY members in a node's state bytes (found in C)."""
    return (m.span() for m in READY_RUN.finditer(state))


def not_begun_runs(state: bytearray) -> Iterable[tuple[int, int]]:
    """(lo, hi) of each run of members not begun (WAITING or READY) in a node's state bytes."""
    return (m.span() for m in NOT_BEGUN_RUN.finditer(state))


class RunState:
    def __init__(self, plan: Plan, init: bool = True):
        """The state before any journal record: members with nothing upstream ready. With
        ``init=False`` the arrays are left for a checkpoint to fill (:mod:`pwe.runstate.checkpoint`)."""
        self.plan = plan
        self.nodes: dict[str, NodeState] = {}
        self.ready = ReadyQueue()
        self.again: list[tuple[str, int]] = []  # ready again (unassign): fed first (pwe.engine.feed), not last
        self.barrier_left: dict[tuple[str, str], int] = {}
        self.pilots: dict[str, dict[str, Any]] = {}
        self.cancelled = False
        self.finished_ok: bool | None = None
        self.stopped: str | None = None  # why the last engine stopped before the end
        #: the halt record in force (the failure or core-hour budget: no new member starts), or
        #: None; a resume or a retry lifts it (the engine then weighs the budget again)
        self.halted: dict[str, Any] | None = None
        #: the holds in force (``hold`` records: node, param, value, failed, t), and the values
        #: let go since (``(node, param, value)``: never held again in this run)
        self.holds: list[dict[str, Any]] = []
        self.released: set[tuple[str, str, str]] = set()
        #: pwe set's records in force, in order: {only, values, id} (:meth:`settings_for`)
        self.sets: list[dict[str, Any]] = []
        self.edges: dict[str, int] = {}  # edge events applied, by id: how many replays of each were ignored
        self.edge_files: set[str] = set()  # files of edges/ taken in (applied, replayed or refused)
        #: pilot messages refused (never applied), by why: forged, replayed, malformed, resent
        self.rejected: dict[str, int] = {}
        self.api_checks: set[str] = set()  # nodes a Python callable checks (the run record's ``checks``)
        for nid, pn in plan.nodes.items():
            n = pn.size
            # the members a check grows (pwe/planning/trees.py): the state's, shown to the plan's
            # readers (renderer, tasks, results) through the node's space
            pn.tree = Tree(n)
            pn.space.grown = pn.tree.values
            self.nodes[nid] = NodeState(
                size=n,
                state=bytearray(n),
                attempt=array("I", bytes(4 * n)),
                deps=array("q", bytes(8 * n)),
                counts=[n] + [0] * (len(NAMES) - 1),
            )
        if init:
            self._init_deps()

    # -- dependencies ----------------------------------------------------------------------
    def _init_deps(self) -> None:
        for nid, ns in self.nodes.items():
            edges = self.plan.edges_into(nid)
            barriers = sum(1 for e in edges if e.barrier)
            matched = [e for e in edges if not e.barrier]
            if not matched:
                if barriers:
                    ns.deps = array("q", [barriers]) * ns.size
            else:
                deps = ns.deps
                for i in range(ns.size):
                    deps[i] = barriers + sum(self.plan.count_upstream(e, i) for e in matched)
            for e in edges:
                if e.barrier:
                    self.barrier_left[(e.src, e.dst)] = self.plan.nodes[e.src].size
        for nid, ns in self.nodes.items():
            if not self.plan.edges_into(nid):  # (a million members with nothing upstream: at C speed)
                ns.state[:] = bytes([READY]) * ns.size
                ns.counts[WAITING], ns.counts[READY] = 0, ns.size
                self.ready.append_run(nid, 0, ns.size)
                continue
            for i in range(ns.size):
                if ns.deps[i] == 0:
                    self._set(nid, ns, i, READY)
                    self.ready.append((nid, i))

    def _set(self, nid: str, ns: NodeState, i: int, new: int) -> None:
        ns.counts[ns.state[i]] -= 1
        ns.counts[new] += 1
        ns.state[i] = new

    def _satisfied(self, nid: str, i: int) -> None:
        """Member i of nid succeeded: release what waits for it."""
        for e in self.plan.edges_out_of(nid):
            dst = self.nodes[e.dst]
            if e.barrier:
                key = (e.src, e.dst)
                self.barrier_left[key] -= 1
                if self.barrier_left[key] == 0:
                    for j in range(dst.size):
                        self._release(e.dst, dst, j)
            else:
                for j in self.plan.downstream(e, i):
                    self._release(e.dst, dst, j)

    def _release(self, nid: str, ns: NodeState, j: int) -> None:
        ns.deps[j] -= 1
        if ns.deps[j] == 0 and ns.state[j] == WAITING:
            self._set(nid, ns, j, READY)
            self.ready.append((nid, j))

    def _skip_downstream(self, nid: str, i: int, whole_node: bool = False) -> None:
        """Member i of nid failed for good: what depends on it can never run."""
        todo: deque[tuple[str, int | None]] = deque([(nid, None if whole_node else i)])
        while todo:
            src, idx = todo.popleft()
            for e in self.plan.edges_out_of(src):
                dst = self.nodes[e.dst]
                targets: Iterable[int]
                if e.barrier or idx is None:
                    targets = range(dst.size)
                else:
                    targets = self.plan.downstream(e, idx)
                whole = e.barrier or idx is None
                any_new = False
                for j in targets:
                    if dst.state[j] in (WAITING, READY, HELD):
                        self._set(e.dst, dst, j, SKIPPED)
                        any_new = True
                        if not whole:
                            todo.append((e.dst, j))
                if whole and any_new:
                    todo.append((e.dst, None))

    # -- records ---------------------------------------------------------------------------
    def size_of(self, nid: str) -> int:
        """Members node ``nid`` has now (grown ones too); KeyError for one the run has not."""
        return self.nodes[nid].size

    def apply(self, r: dict[str, Any]) -> Any:
        """Apply one journal record: its kind's handler (:data:`_ON`). Idempotent for pilot
        events: an event for an attempt or a pilot that is no longer current is ignored
        (returns None). A record of a kind not declared is refused (ValueError: damaged)."""
        if packed(r):  # (compacted: journal.py)
            return self._packed(r)
        check(r, self.size_of)  # (its numbers against the plan: ValueError, a damaged record)
        on = _ON.get(r["e"])
        if on is None:
            raise ValueError(f"unknown journal record {r['e']!r}")
        return on(self, r)

    def handler(self, r: dict[str, Any]) -> Callable[[RunState, dict[str, Any]], Any]:
        """What applies ``r`` (``handler(r)(state, r)`` is ``apply(r)``), once ``r`` is
        checked: a damaged record raises here (ValueError, KeyError: :func:`check`), before
        anything is journaled or applied (:meth:`pwe.engine.ledger.Ledger.take`)."""
        if packed(r):
            return RunState._packed
        check(r, self.size_of)
        on = _ON.get(r["e"])
        if on is None:
            raise ValueError(f"unknown journal record {r['e']!r}")
        return on

    def _packed(self, r: dict[str, Any]) -> Any:
        """A compacted record: each record it stands for, applied; what the last that did
        anything gave."""
        out = None
        for one in unpack(r, self.size_of):
            got = self.apply(one)
            out = got if got is not None else out
        return out

    def _assign(self, r: dict[str, Any]) -> Any:
        ns = self.nodes[r["n"]]
        i = r["m"]
        if ns.state[i] != READY:
            return None
        self._set(r["n"], ns, i, ASSIGNED)
        ns.attempt[i] = r["a"]
        ns.pilot[i] = r["p"]
        return True

    def _start(self, r: dict[str, Any]) -> Any:
        ns = self.nodes[r["n"]]
        i = r["m"]
        if ns.attempt[i] != r["a"] or ns.pilot.get(i) != r["p"] or ns.state[i] not in (ASSIGNED, RUNNING):
            return None
        if ns.state[i] == ASSIGNED:
            self._set(r["n"], ns, i, RUNNING)
        ns.pid[i] = r.get("pid", 0)  # a pilot that lost a node restarts the member elsewhere
        return True

    def _complete_record(self, r: dict[str, Any]) -> bool:
        self._complete(r["n"], r["r"])
        ns = self.nodes[r["n"]]
        ns.complete += r["r"]
        ns.complete.sort()
        return True

    def _reused(self, r: dict[str, Any]) -> bool:
        """Members reused from an earlier run (pwe.runstate.reusable): done as complete ones
        are, with the outputs they had there."""
        nid = r["n"]
        self._complete(nid, [[lo, hi] for lo, hi, _ in r["r"]])
        ns = self.nodes[nid]
        ns.reused += [[lo, hi, src, r["from"]] for lo, hi, src in r["r"]]
        ns.reused.sort(key=lambda x: x[0])
        for i, out in r.get("out", {}).items():
            ns.outputs[int(i)] = out
        return True

    def _unassign(self, r: dict[str, Any]) -> Any:
        """A lost pilot's member, or one it handed back: ready again."""
        ns = self.nodes[r["n"]]
        i = r["m"]
        if ns.state[i] not in (ASSIGNED, RUNNING) or ns.pilot.get(i) != r["p"] or r.get("a", ns.attempt[i]) != \
                ns.attempt[i]:
            return None  # (``a``, when there: only that attempt; records before it had none)
        was = ns.state[i]
        if was == ASSIGNED or str(r.get("why") or "").startswith((UNWRITABLE, NOT_STARTED)):
            # never started (a pilot says so of a member whose directory refused its
            # files, or whose spawn its node refused for now, even after writing its
            # start): this attempt did not happen
            ns.attempt[i] -= 1
        ns.pilot.pop(i, None)
        ns.pid.pop(i, None)
        if r.get("halted"):
            ns.reason[i] = "halted"
        elif r.get("lost") and was == RUNNING:
            # it ran when its pilot or node was lost: maxLosses of those, and it is the
            # likely cause; it is not run again (the rest of the sweep goes on without it)
            lost = ns.losses[i] = ns.losses.get(i, 0) + 1
            if lost >= self.plan.nodes[r["n"]].max_losses:
                self._set(r["n"], ns, i, QUARANTINED)
                ns.reason[i] = "quarantined"
                last = str(r.get("why") or "").removesuffix("; it runs again")
                ns.why[i] = f"quarantined: running when its pilot or node was lost {lost} times (maxLosses): {last}"
                self._skip_downstream(r["n"], self.plan.nodes[r["n"]].tree.root_of(i))
                return QUARANTINED
        if self.holds and self._is_held(r["n"], i):  # (handed back unstarted: its value is held)
            self._set(r["n"], ns, i, HELD)
            return HELD
        self._set(r["n"], ns, i, READY)
        self.ready.append((r["n"], i))
        self.again.append((r["n"], i))
        return True

    def _pilot(self, r: dict[str, Any]) -> bool:
        self.pilots[r["p"]] = {k: v for k, v in r.items() if k != "e"}
        self.pilots[r["p"]].setdefault("alive", True)
        return True

    def _pilot_drain(self, r: dict[str, Any]) -> bool:
        """pwe pilot drain: it takes no new member, then leaves."""
        if r["p"] in self.pilots:
            self.pilots[r["p"]].update(draining=True, drain_req=r.get("req"))
        return True

    def _node_lost(self, r: dict[str, Any]) -> bool:
        """A node of its allocation died: pwe status names it."""
        if r["p"] in self.pilots:
            self.pilots[r["p"]].setdefault("lost", {})[r["node"]] = r.get("t")
        return True

    def _pilot_gone(self, r: dict[str, Any]) -> bool:
        if r["p"] in self.pilots:
            self.pilots[r["p"]]["alive"] = False
            self.pilots[r["p"]]["why"] = r.get("why")
            self.pilots[r["p"]]["gone"] = r.get("t")  # (its held time ends: pwe/engine/budget.py)
        return True

    def _offset(self, r: dict[str, Any]) -> bool:
        if r["p"] in self.pilots:
            p = self.pilots[r["p"]]
            p["offset"] = r["off"]
            if "q" in r:  # the last sequence number applied, and the last seen by each transport
                p["q"], p["qs"] = r["q"], r["qs"] if "qs" in r else {"spool": r["q"]}
        return True

    def _reject(self, r: dict[str, Any]) -> bool:
        """A pilot message refused, never applied (pwe.engine.intake)."""
        self.rejected[r["why"]] = self.rejected.get(r["why"], 0) + 1
        return True

    def _cancel(self, r: dict[str, Any]) -> bool:
        self.cancelled = True
        for nid, ns in self.nodes.items():
            for i in range(ns.size):
                if ns.state[i] not in FINAL:
                    self._set(nid, ns, i, CANCELLED)
            ns.pilot.clear()
        self.ready.clear()
        return True

    def _retry_record(self, r: dict[str, Any]) -> bool:
        self._retry(r.get("only"))
        return True

    def _edge_or_note(self, r: dict[str, Any]) -> bool:
        """An edge event taken in, or a note of one refused: its file of edges/ is done
        with; an edge's id applied, or a replay of one counted."""
        if r.get("file") or r.get("id"):
            if r.get("file"):
                self.edge_files.add(r["file"])
            if r["e"] == EDGE and r.get("id"):
                self.edges[r["id"]] = 0
            elif r.get("replay_of") in self.edges:
                self.edges[r["replay_of"]] += 1
        return True

    def _began(self, r: dict[str, Any]) -> bool:
        """A run or a resume: an engine works on it again."""
        self.stopped = None
        self.halted = None
        if r.get("checks"):
            self.api_checks = set(r["checks"])
        return True

    def _finish(self, r: dict[str, Any]) -> bool:
        self.finished_ok = r.get("ok")
        return True

    def _hold(self, r: dict[str, Any]) -> int:
        """A parameter value's members not yet started are held (waiting or ready: what is
        queued on a pilot or running goes on); how many."""
        nid, param, value = r["n"], r["param"], r["value"]
        ns, space = self.nodes[nid], self.plan.nodes[nid].space
        if param not in space.names:
            raise ValueError(f"hold: node {nid} has no parameter {param!r}")
        held = 0
        for i in space.matching({param: value}):
            if ns.state[i] in (WAITING, READY):
                self._set(nid, ns, i, HELD)
                held += 1
        self.holds.append({k: r[k] for k in ("n", "param", "value", "failed", "t")})
        return held

    def _set_record(self, r: dict[str, Any]) -> bool:
        """pwe set: the attempts built from now on ask for its values (a request applied
        once: its ``id``)."""
        if any(s.get("id") == r.get("id") for s in self.sets):
            return False
        self.sets.append({k: r.get(k) for k in ("only", "values", "id", "by", "t")})
        return True

    def settings_for(self, nid: str, i: int) -> dict[str, Any]:
        """What pwe set's records in force say of member ``i`` of ``nid`` (the later over
        the earlier; ``env`` merged): {} where none names it."""
        out: dict[str, Any] = {}
        for s in self.sets:
            only = s["only"]
            if only is not None and not any(lo <= i < hi for lo, hi in only.get(nid, ())):
                continue
            for k, v in s["values"].items():
                if k == "env":
                    out["env"] = {**out.get("env", {}), **v}
                else:
                    out[k] = v
        return out

    def env_set_runs(self, nid: str) -> list[list[int]]:
        """The members of ``nid`` a ``pwe set`` gave environment values (``env.NAME``), as
        sorted runs ``[lo, hi)`` (they may overlap): what they ran with is not in their keys,
        so they lend to no later run (memory, walltime, threads, GPUs and retries change no
        result). The one rule: the lending as members end and the record at the run's end."""
        out: list[list[int]] = []
        for s in self.sets:
            if not (s.get("values") or {}).get("env"):
                continue
            if s.get("only") is None:
                return [[0, self.nodes[nid].size]]
            out += [[lo, hi] for lo, hi in s["only"].get(nid, ())]
        return sorted(out)

    def _is_held(self, nid: str, i: int) -> bool:
        """Whether member ``i`` of ``nid`` has a value a hold in force names."""
        space = self.plan.nodes[nid].space
        if i >= space.size:
            return False
        mine = [h for h in self.holds if h["n"] == nid]
        if not mine:
            return False
        texts = space.texts_of(i, [h["param"] for h in mine])
        return any(texts[h["param"]] == h["value"] for h in mine)

    def _halt(self, r: dict[str, Any]) -> bool:
        """The failure budget (or the core-hour budget) is spent: no new member starts."""
        self.halted = {k: v for k, v in r.items() if k not in ("e", "c")}
        return True

    def _header(self, r: dict[str, Any]) -> None:
        """The journal's header (its version: :func:`pwe.runstate.journal.replay` reads it
        and applies nothing): no fact of the run."""
        return None

    def _stopped(self, r: dict[str, Any]) -> bool:
        self.stopped = r.get("why")
        return True

    def _end(self, r: dict[str, Any]) -> Any:
        nid, i = r["n"], r["m"]
        ns = self.nodes[nid]
        if ns.state[i] not in (ASSIGNED, RUNNING) or ns.attempt[i] != r["a"] or ns.pilot.get(i) != r["p"]:
            return None
        rc = r["rc"]
        dt = r.get("dt") or 0.0
        ns.spent += dt
        if rc == 0:
            ns.done_spent += dt
        ns.pilot.pop(i, None)
        ns.pid.pop(i, None)
        if r.get("out"):
            ns.outputs[i] = r["out"]
        if rc:
            ns.rc[i] = rc
        else:
            ns.rc.pop(i, None)
        if r.get("why"):
            ns.why[i] = r["why"]
        else:
            ns.why.pop(i, None)
        if r.get("reason"):
            ns.reason[i] = r["reason"]
        else:
            ns.reason.pop(i, None)
        # (killed for memory or at its walltime: failed, even where a shell around the
        # program killed went on to exit 0)
        if rc == 0 and not r.get("bad") and not r.get("reason"):
            self._set(nid, ns, i, DONE)
            pilot = self.pilots.get(r["p"])
            if pilot is not None:  # (pwe pilot list: members each pilot finished; checkpointed with it)
                pilot["done"] = pilot.get("done", 0) + 1
            self._tree_end(nid, ns, i, r)
            return DONE
        fails = ns.failures.get(i, 0) + 1
        ns.failures[i] = fails
        pn = self.plan.nodes[nid]
        retries = self.settings_for(nid, i).get("retries", pn.retries) if self.sets else pn.retries
        if fails <= retries or (pn.retry is not None and fails < pn.retry.attempts
                                   and pn.retry.retries(r.get("reason") or "exit", rc)):
            self._set(nid, ns, i, READY)
            self.ready.append((nid, i))
            return READY
        self._set(nid, ns, i, FAILED)
        self._skip_downstream(nid, self.plan.nodes[nid].tree.root_of(i))  # (its whole tree's dependents)
        return FAILED

    def _tree_end(self, nid: str, ns: NodeState, i: int, r: dict[str, Any]) -> None:
        """Member i of nid ended done: its check's verdict (pwe/planning/trees.py), its children
        grown (ready at once: their parent is done), and, when this ends the growth of its
        tree, what waits for the tree released (or skipped: a tree that did not converge)."""
        tree: Tree = self.plan.nodes[nid].tree
        kids = r.get("grow") or []
        if not (kids or tree.open or "conv" in r or "limit" in r):  # (no check, no tree growing: the usual)
            self._satisfied(nid, i)
            return
        if kids or r.get("conv") or r.get("limit"):
            tree.judge(i, GREW if kids else CONVERGED if r.get("conv") else LIMIT)
        if kids:
            new = tree.grow(i, kids)
            ns.state.extend(bytes([READY]) * len(new))
            ns.attempt.extend([0] * len(new))
            ns.deps.extend([0] * len(new))
            ns.counts[READY] += len(new)
            ns.size += len(new)
            self.ready.append_run(nid, new.start, new.stop)
        root = tree.root_of(i)
        left = tree.open.get(root, 1) - 1 + len(kids)
        if left:
            tree.open[root] = left
            return
        tree.open.pop(root, None)
        if root in tree.unconverged():
            self._skip_downstream(nid, root)
        else:
            self._satisfied(nid, root)

    def _complete(self, nid: str, runs: list[list[int]]) -> bool:
        """Members found complete by their products (``pwe.planning.products``) or reused: done without an
        attempt, releasing what waits for them as an end would. Only members not begun
        (the engine scans those alone, when the run begins and when it is resumed or
        retried); any other member named is left as it is."""
        ns = self.nodes[nid]
        state = ns.state
        out = self.plan.edges_out_of(nid)
        quiet = not out
        for lo, hi in runs:
            seg = state[lo:hi]
            ready, waiting = seg.count(READY), seg.count(WAITING)
            if ready + waiting == hi - lo and all(e.barrier for e in out):
                # a whole run of members not begun, and only barriers after them: at C speed
                state[lo:hi] = bytes([DONE]) * (hi - lo)
                ns.counts[READY] -= ready
                ns.counts[WAITING] -= waiting
                ns.counts[DONE] += hi - lo
                for e in out:
                    key = (e.src, e.dst)
                    self.barrier_left[key] -= hi - lo
                    if self.barrier_left[key] == 0:
                        dst = self.nodes[e.dst]
                        for j in range(dst.size):
                            self._release(e.dst, dst, j)
            else:
                for i in range(lo, hi):
                    if state[i] in (WAITING, READY):
                        self._set(nid, ns, i, DONE)
                        if not quiet:
                            self._satisfied(nid, i)
        # what was queued ready and is done now leaves the queue (no pilot is started for it)
        for qid, lo, hi in self.ready.take_runs():
            for a, b in ready_runs(self.nodes[qid].state[lo:hi]):
                self.ready.append_run(qid, lo + a, lo + b)
        return True

    def _retry(self, only: dict[str, list[list[int]]] | None = None) -> None:
        """Failed and skipped members go back to waiting; their retry budgets start anew.
        ``only`` (``{node: [[first, end], ...]}``, pwe retry -q): those of them alone, and
        the skipped members that wait on nothing else; what still waits on a member that
        stays failed is skipped again."""
        self.cancelled = False
        self.finished_ok = None
        self.halted = None
        if not self._wait_again(only):
            return
        # (a value none of whose members is held now is let go: it is never held again here)
        for h in list(self.holds):
            ns, space = self.nodes[h["n"]], self.plan.nodes[h["n"]].space
            if not any(ns.state[i] == HELD for i in space.matching({h["param"]: h["value"]})):
                self.holds.remove(h)
                self.released.add((h["n"], h["param"], h["value"]))
        self.ready.clear()
        self._recount_deps()
        self._queue_ready()
        for nid in self.nodes:  # a tree that did not converge: its dependents cannot run, again
            for root in sorted(self.plan.nodes[nid].tree.unconverged()):
                self._skip_downstream(nid, root)
        if only is not None:  # members left failed (not selected): what waits on them cannot run, again
            for nid, ns in self.nodes.items():
                i = ns.state.find(FAILED)
                while i >= 0:
                    self._skip_downstream(nid, i)
                    i = ns.state.find(FAILED, i + 1)

    def _wait_again(self, only: dict[str, list[list[int]]] | None) -> bool:
        """The failed, skipped and cancelled members a retry picks (all, or ``only``'s and
        every skipped one) wait again, their failures forgotten: whether there were any."""
        again = False
        for nid, ns in self.nodes.items():
            picked = None if only is None else {i for a, b in only.get(nid, []) for i in range(a, min(b, ns.size))}
            for i in range(ns.size):
                if ns.state[i] in AGAIN and (picked is None or i in picked or ns.state[i] == SKIPPED):
                    self._set(nid, ns, i, WAITING)
                    ns.failures.pop(i, None)
                    ns.losses.pop(i, None)
                    ns.reason.pop(i, None)
                    again = True
        return again

    def _recount_deps(self) -> None:
        """What each waiting member still waits for, counted again from the members that are done."""
        for key in self.barrier_left:
            self.barrier_left[key] = self.plan.nodes[key[0]].size
        for nid, ns in self.nodes.items():
            edges = self.plan.edges_into(nid)
            base = self.plan.nodes[nid].size  # (members a check grew wait for nothing: their parent is done)
            for i in range(ns.size):
                if ns.state[i] == WAITING:
                    ns.deps[i] = 0 if i >= base else \
                        sum(1 if e.barrier else self.plan.count_upstream(e, i) for e in edges)
        for nid, ns in self.nodes.items():
            tree = self.plan.nodes[nid].tree
            unconverged = tree.unconverged()
            for i in range(tree.base):  # a root whose whole tree ended done (and converged)
                if ns.state[i] == DONE and i not in tree.open and i not in unconverged:
                    self._satisfied_counts_only(nid, i)

    def _queue_ready(self) -> None:
        """Waiting members that wait on nothing now are ready; every ready member queued."""
        for nid, ns in self.nodes.items():
            for i in range(ns.size):
                if ns.state[i] == WAITING and ns.deps[i] <= 0:
                    self._set(nid, ns, i, READY)
                    self.ready.append((nid, i))
                elif ns.state[i] == READY:
                    self.ready.append((nid, i))

    def _satisfied_counts_only(self, nid: str, i: int) -> None:
        for e in self.plan.edges_out_of(nid):
            dst = self.nodes[e.dst]
            if e.barrier:
                self.barrier_left[(e.src, e.dst)] -= 1
                if self.barrier_left[(e.src, e.dst)] == 0:
                    for j in range(dst.size):
                        if dst.state[j] == WAITING:
                            dst.deps[j] -= 1
            else:
                for j in self.plan.downstream(e, i):
                    if dst.state[j] == WAITING:
                        dst.deps[j] -= 1

    # -- views -----------------------------------------------------------------------------
    def unfinished(self) -> int:
        return sum(ns.size - sum(ns.counts[s] for s in FINAL) for ns in self.nodes.values())

    def unconverged(self) -> dict[str, list[int]]:
        """Per checked node, the roots whose tree reached max_iterations unconverged."""
        out = {}
        for nid in self.nodes:
            roots = self.plan.nodes[nid].tree.unconverged()
            if roots:
                out[nid] = sorted(roots)
        return out

    def all_done(self) -> bool:
        """Every member done (grown ones too) and every tree converged: a successful run."""
        return all(ns.counts[DONE] == ns.size for ns in self.nodes.values()) and not self.unconverged()

    def totals(self) -> list[int]:
        out = [0] * len(NAMES)
        for ns in self.nodes.values():
            for k, c in enumerate(ns.counts):
                out[k] += c
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "nodes": {nid: dict(zip(NAMES, ns.counts)) for nid, ns in self.nodes.items()},
            # of the done, how many were found complete by their products (never ran)
            "complete": {nid: c for nid, ns in self.nodes.items() if (c := ns.complete_count())},
            # of the done, how many were reused from earlier runs (never ran here)
            "reused": {nid: c for nid, ns in self.nodes.items() if (c := ns.reused_count())},
            "totals": dict(zip(NAMES, self.totals())),
            "cancelled": self.cancelled,
            "finished_ok": self.finished_ok,
            "stopped": self.stopped,
            "halted": self.halted,
            "holds": self.holds,
            "sets": len(self.sets),
            "rejected": dict(self.rejected),
            "pilots": {pid: {k: p.get(k) for k in ("alive", "job", "batch", "host", "pid", "started", "slots", "why",
                                                       "lost")}
                       for pid, p in self.pilots.items()},
            "work": self.work(),
        }

    def work(self) -> dict[str, dict[str, Any]]:
        """Per node what ``pwe status`` works core-hours out from: ``cores`` per member,
        ``wall`` (maxWallTimePerMember, minutes, or None), ``spent`` (seconds run by every
        attempt that ended) and ``done_spent`` (by the attempts that succeeded)."""
        out = {}
        for nid, ns in self.nodes.items():
            sch = self.plan.nodes[nid].scheduling
            out[nid] = {"cores": sch.cores_per_member(), "wall": sch.maxWallTimePerMember,
                        "spent": round(ns.spent, 3), "done_spent": round(ns.done_spent, 3)}
        return out

    def inflight(self, pilot: str) -> list[tuple[str, int]]:
        return [(nid, i) for nid, ns in self.nodes.items() for i, p in ns.pilot.items() if p == pilot]


#: Each journal record kind's handler in :meth:`RunState.apply` (every kind of
#: :data:`pwe.runstate.journal.FIELDS`; tests/runstate/test_journal_records.py holds them equal).
_ON: dict[str, Callable[[RunState, dict[str, Any]], Any]] = {
    HEADER: RunState._header,
    RUN: RunState._began,
    RESUME: RunState._began,
    FINISH: RunState._finish,
    HALT: RunState._halt,
    HOLD: RunState._hold,
    SET: RunState._set_record,
    STOPPED: RunState._stopped,
    CANCEL: RunState._cancel,
    RETRY: RunState._retry_record,
    NOTE: RunState._edge_or_note,
    EDGE: RunState._edge_or_note,
    ASSIGN: RunState._assign,
    START: RunState._start,
    END: RunState._end,
    ENDS: RunState._packed,
    UNASSIGN: RunState._unassign,
    COMPLETE: RunState._complete_record,
    REUSED: RunState._reused,
    PILOT: RunState._pilot,
    PILOT_DRAIN: RunState._pilot_drain,
    NODE_LOST: RunState._node_lost,
    PILOT_GONE: RunState._pilot_gone,
    OFFSET: RunState._offset,
    REJECT: RunState._reject,
}
