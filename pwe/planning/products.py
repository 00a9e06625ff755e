"""Completion by products (Row's idea): a member whose products all exist is complete.

A node may name ``products:``, path templates rendered per member by the one renderer
(:class:`pwe.workflow.templates.PathTemplate`: values as they are, unquoted). They are relative to
the run's **workspace** (:func:`workspace`: ``--workspace D``, else the workflow's
``workspace:`` key, else the workflow file's directory), exported to members as
``PWE_WORKSPACE``. A rendered path that is absolute or climbs out of the workspace
(``..``) is refused: "the same workspace" is what makes a second ``pwe run`` do only what
is missing, so a product must live inside it.

**What it costs.** Nothing is polled. When a run starts (its first engine, and ``pwe
plan``) :func:`scan` renders each member's products and lists each distinct directory
they name once (``os.scandir``: one ``getdents`` stream per directory, the names kept in a
set), so a million members in a thousand directories cost a thousand directory reads,
not a million ``stat`` calls. The members found complete are journaled as runs of
consecutive indices (:func:`records`: one ``complete`` record for many members) and count
as done for their dependents. A member that runs is checked once, when it ends with exit
status 0, by its pilot where it ran (``pilot.members.product_fault``: one ``lstat`` per
product): one that did not make them fails (reason ``invalid``) with a line naming the file.

**What must be there.** A product given as text must exist (as Row has it): no times, no
sizes. One given as a mapping, ``{path: TEMPLATE, nonEmpty: true, minBytes: N}``, must be a
regular file of at least that many bytes (:func:`least`; one ``stat`` per such product, in
the scan and at the member's end: ``pilot.members.product_fault``): an empty or short one
does not count, and a member that exits 0 leaving it so fails with reason ``invalid``
(as does one that made none). A member that began
in the run's lineage and did not end ok (stopped mid-write by a kill or a halt, failed) is
never complete by its products there (:func:`pwe.engine.loop._never_started`), nor in the
next runs of the workflow in the workspace (:mod:`pwe.engine.halfmade`: ``skip``).
"""

from __future__ import annotations

import os
import posixpath
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator


from pilot.members import product_fault

from ..base.confine import relative
from ..base.errors import InputError, TemplateError
from ..base.source import did_you_mean
from ..workflow.templates import PathTemplate, TemplateSyntax, error_text

#: a :class:`pwe.planning.plan.Plan` (not imported: plan.py builds on this module)
Plan = Any

#: most runs of consecutive members one ``complete`` journal record holds
RUNS_PER_RECORD = 4096
#: most directories whose listing is held at once while scanning (oldest dropped first)
LISTINGS_HELD = 4096


def paths(items: list[Any] | None) -> list[str] | None:
    """A node's ``products`` as written, their path templates alone (an item is a text or
    a ``{path, nonEmpty, minBytes}`` mapping: :class:`pwe.workflow.model.Product`)."""
    return None if items is None else [p if isinstance(p, str) else p.path for p in items]


def least(items: list[Any] | None) -> list[int]:
    """The fewest bytes each of a node's products must hold to count (0: that it exists);
    [] where none says more than its path."""
    out = [0 if isinstance(p, str) else p.least for p in items or ()]
    return out if any(out) else []


def compile_templates(nid: str, sources: list[str] | None, known: set[str], path: Path,
                      line: int | None, key: str = "products") -> list[PathTemplate]:
    """A node's ``products`` (or, ``key``, its ``inputs``: pwe.planning.reuse) compiled,
    path templates relative to the workspace; :class:`TemplateError` (one line) for a
    template that does not compile or names what is neither a property nor a parameter."""
    out = []
    for k, src in enumerate(sources or []):
        try:
            t = PathTemplate(src)
        except TemplateSyntax as exc:
            raise TemplateError(f"node '{nid}': template error in {key}[{k}] {src!r}: {exc.message}", path,
                                line) from None
        for name in sorted(t.names - known):
            raise TemplateError(f"node '{nid}': {key}[{k}] {src!r} uses undefined name '{name}'"
                                f"{did_you_mean(name, known)}; define it under 'properties' or 'parameters'",
                                path, line)
        out.append(t)
    return out


def member_products(plan: Plan, nid: str, i: int) -> list[str]:
    """The products of member ``i`` of ``nid``, relative to the workspace; raises
    :class:`TemplateError` (one line, the file and line of ``products``) for one that does
    not render or does not stay inside the workspace."""
    pn = plan.nodes[nid]
    ctx = pn.context(plan.workflow.properties, i)
    return _rendered(plan, nid, i, ctx)


def _rendered(plan: Plan, nid: str, i: int, ctx: dict[str, Any]) -> list[str]:
    pn = plan.nodes[nid]
    out = []
    for k, t in enumerate(pn.products):
        try:
            text = t.render(ctx)
        except Exception as exc:  # noqa: BLE001 - jinja2's errors, and whatever an expression raises
            what = error_text(exc)
            raise TemplateError(f"node '{nid}': member {i} cannot render products[{k}] {t.source!r}: {what}",
                                plan.file, pn.products_line) from None
        rel = relative(text)
        if rel is None:
            raise TemplateError(f"node '{nid}': member {i}'s products[{k}] {t.source!r} renders to {text!r}, "
                                "which is not a path inside the workspace (products are relative to it: no "
                                "leading '/', no '..' out of it; choose the workspace with --workspace or "
                                "'workspace:')", plan.file, pn.products_line)
        out.append(rel)
    return out


def check(plan: Plan) -> None:
    """What ``pwe validate`` checks: each node's products render for its first and last
    member to paths inside the workspace (:func:`member_products` raises)."""
    for nid, pn in plan.nodes.items():
        if pn.products:
            for i in sorted({0, pn.size - 1}):
                member_products(plan, nid, i)


def workspace(plan: Plan, option: str | Path | None = None) -> Path:
    """The directory products are relative to: ``option`` (``--workspace``), else the
    workflow's ``workspace:`` (relative to the workflow file's directory), else that
    directory; absolute. :class:`InputError` when it is not a directory."""
    if option is not None:
        where = Path(option).expanduser().resolve()
        said = f"--workspace {option}"
    elif plan.workflow.workspace is not None:
        where = (plan.file.parent / Path(plan.workflow.workspace).expanduser()).resolve()
        said = f"workspace: {plan.workflow.workspace}"
    else:
        return plan.file.parent.resolve()
    if not where.is_dir():
        from ..base.regular import in_the_way

        blocked = in_the_way(where)
        what = f" ({blocked[1]})" if blocked and blocked[0] == where else ""
        raise InputError(f"{said}: {where} is not a directory{what}; make it first (products are relative to it)",
                         plan.file, None if option is not None else getattr(plan, "workspace_line", None))
    return where


@dataclass
class Scan:
    """What :func:`scan` found: complete members per node as runs ``[lo, hi)``, and what
    it cost (directories listed, names read, members looked at)."""

    complete: dict[str, list[list[int]]]
    dirs_listed: int = 0
    names_read: int = 0
    members: int = 0

    def count(self, nid: str) -> int:
        return sum(hi - lo for lo, hi in self.complete.get(nid, ()))


def scan(plan: Plan, root: Path, only: Callable[[str], Iterable[tuple[int, int]]] | None = None,
         skip: set[str] | frozenset[str] = frozenset()) -> Scan:
    """The members of ``plan`` whose products all exist under ``root``: each product's
    directory is listed once (held in a set of names while it is used), never one
    ``stat`` per member. A directory that does not exist (or is no directory) holds
    nothing. ``only``: per node, the runs ``(lo, hi)`` of members to look at (a resumed
    run: those not begun); all of them when not given. ``skip``: products (relative
    paths) that an earlier attempt may have left half made (pwe.engine.halfmade): a
    member with one of them is not complete. A product with a least size (:func:`least`)
    is looked at once more where it is listed: one ``stat`` (never opened)."""
    listings: OrderedDict[str, frozenset[str]] = OrderedDict()
    out = Scan({})
    base = str(root)

    def names_in(d: str) -> frozenset[str]:
        names = listings.get(d)
        if names is None:
            try:
                with os.scandir(posixpath.join(base, d) if d else base) as it:
                    names = frozenset(e.name for e in it)
            except (FileNotFoundError, NotADirectoryError):
                names = frozenset()
            except OSError as exc:  # (permissions): the run cannot know what is done
                raise InputError(f"cannot list {posixpath.join(base, d)} to find the products already made: "
                                 f"{exc.strerror}", plan.file) from None
            out.dirs_listed += 1
            out.names_read += len(names)
            listings[d] = names
            if len(listings) > LISTINGS_HELD:
                listings.popitem(last=False)
        else:
            listings.move_to_end(d)
        return names

    for nid, pn in plan.nodes.items():
        if not pn.products:
            continue
        runs: list[list[int]] = []
        ctx = dict(plan.workflow.properties)  # (one dict, its parameters' values replaced per member)
        values_of = pn.space.values_of
        sizes = pn.products_least
        for i in (range(pn.size) if only is None else (i for lo, hi in only(nid) for i in range(lo, hi))):
            out.members += 1
            ctx.update(values_of(i))
            for k, rel in enumerate(_rendered(plan, nid, i, ctx)):
                d, _, name = rel.rpartition("/")
                if name not in names_in(d) or rel in skip:
                    break
                if sizes and sizes[k] and product_fault([posixpath.join(base, rel)], [sizes[k]]) is not None:
                    break  # (there, but empty or short: not made)
            else:
                if runs and runs[-1][1] == i:
                    runs[-1][1] = i + 1
                else:
                    runs.append([i, i + 1])
        if runs:
            out.complete[nid] = runs
    return out


def complete_runs(found: Scan) -> Iterator[tuple[str, list[list[int]]]]:
    """What :func:`scan` found, as the journal's ``complete`` records take it: a node and
    its runs ``[[lo, hi], ...]``, at most :data:`RUNS_PER_RECORD` runs at a time (the record
    itself: :func:`pwe.runstate.records.complete`)."""
    for nid, runs in found.complete.items():
        for k in range(0, len(runs), RUNS_PER_RECORD):
            yield nid, runs[k:k + RUNS_PER_RECORD]


def absolute(plan: Plan, root: str, nid: str, i: int) -> list[str]:
    """Member ``i``'s products as absolute paths (what its task carries to the pilot)."""
    return [posixpath.join(root, rel) for rel in member_products(plan, nid, i)]
