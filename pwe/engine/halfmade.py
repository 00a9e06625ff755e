"""Products a stopped attempt may have left half made, carried from run to run of a
workflow in one workspace (issue 45): never taken as complete by their products.

Completion by products takes a product that exists as made (Row's rule). A member stopped
while it wrote one (kill -9, ``halt ... now``, ``pwe cancel``, a failure) leaves a file that
exists and is not whole. Within a run's lineage the engine knows it (the member has an
attempt: :func:`pwe.engine.loop._never_started`); this module carries it to the next run
of the workflow in the same workspace, which knows nothing of the run before it.

**The chain.** One run of a workflow is live in a workspace at a time
(:class:`pwe.runstate.locks.LiveLock`); the lock's record names the run that held it
before. Each run, when its engine takes the lock, writes ``inherited.json`` into its run
directory: the run before it (``previous``) and the **suspects** it inherited, the product
paths (relative to the workspace) that some attempt may have left half made. The next
run folds the previous run into them: less the products of its members that ended ok
(their attempts made them whole), plus those of its members that began and did not end
ok. A run that ends writes its own fold (``final``), so the next run need not replay it;
a run killed -9 is replayed (its state, read-only) by the next.

A suspect stays one until an attempt that ends ok makes it: a product made by hand over
a half one is run again once (said in the docs). Runs with ``--concurrent`` take no lock
and so neither carry nor inherit suspects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.errors import PweError
from ..base.regular import read_json, write_json_atomic
from ..base.states import DONE

INHERITED = "inherited.json"
#: most product paths carried (a sweep whose every member failed at once carries them all;
#: past this the oldest are dropped: their members run again all the same if they failed)
MOST = 200_000


def _read(run_dir: Path) -> dict[str, Any] | None:
    """A run's ``inherited.json`` (None: none, or not one pwe wrote)."""
    try:
        doc = read_json(run_dir / INHERITED, {"suspects": list}, limit=64 << 20)
    except (OSError, PweError, ValueError):
        return None
    if not isinstance(doc.get("suspects"), list):
        return None
    return doc


def has_record(run_dir: str | Path | None) -> bool:
    return bool(run_dir) and (Path(run_dir) / INHERITED).is_file()


def fold(state: Any, suspects: set[str]) -> set[str]:
    """``suspects`` after the run whose state this is: less the products of its members
    that ended ok, plus those of its members that began and did not end ok. Only members
    with an attempt are looked at (reused and complete ones made nothing)."""
    from ..planning.products import member_products

    plan = state.plan
    out = set(suspects)
    for nid, ns in state.nodes.items():
        if not getattr(plan.nodes[nid], "products", None):
            continue
        attempt, st = ns.attempt, ns.state
        if attempt.count(0) == len(attempt):
            continue
        for i, a in enumerate(attempt):
            if not a:
                continue
            if st[i] == DONE:
                if out:
                    out.difference_update(member_products(plan, nid, i))
            else:
                out.update(member_products(plan, nid, i))
    return out


def of_previous(previous: str | None) -> set[str]:
    """The suspects a run inherits from the run before it in the workspace (its
    ``inherited.json``, folded with its state: its own ``final`` where it ended)."""
    if not previous:
        return set()
    run_dir = Path(previous)
    doc = _read(run_dir)
    if doc is None:
        return set()
    if isinstance(doc.get("final"), list):
        return set(doc["final"])
    from ..observe.results import load_state

    try:
        _, state = load_state(run_dir)
    except (OSError, PweError, ValueError):
        return set(doc["suspects"])  # (a run that cannot be read: what it inherited stands)
    return fold(state, set(doc["suspects"]))


def start(run_dir: Path, previous: str | None, own_state: Any | None = None) -> set[str]:
    """When a run's engine takes the workspace: its suspects, written (with ``previous``)
    into its ``inherited.json``. ``previous`` is the run itself when nobody ran between
    its last engine and this one: then what it inherited stands."""
    if previous and Path(previous).resolve() == Path(run_dir).resolve():
        doc = _read(run_dir)
        suspects = set(doc["suspects"]) if doc else set()
        previous = doc.get("previous") if doc else None
    else:
        suspects = of_previous(previous)
    _write(run_dir, {"previous": previous, "suspects": sorted(suspects)[:MOST]})
    return suspects


def finish(run_dir: Path, state: Any, suspects: set[str]) -> None:
    """A run whose engine ends: its own fold, so that the next run need not replay it."""
    doc = _read(run_dir)
    if doc is None:
        return
    doc["final"] = sorted(fold(state, suspects))[:MOST]
    _write(run_dir, doc)


def _write(run_dir: Path, doc: dict[str, Any]) -> None:
    try:
        write_json_atomic(run_dir / INHERITED, doc)
    except OSError:
        pass  # (the run's directory refuses: the next run inherits nothing from this one)
