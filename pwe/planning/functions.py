"""A function member's function as the plan sees it (``python: package.module:function``):
where its module is, what it is (its source's digest, part of the members' keys:
pwe.planning.reuse) and, at ``pwe validate``, that the module can be found and defines the
function.

Nothing of the user's is imported here (an import runs its code, in the engine): the
module is found as Python would find it (the run's workspace first, then this
interpreter's path), package by package through ``importlib.machinery.PathFinder``,
which runs no package's ``__init__``; the function is looked for in the module's source
(``ast``): a top-level ``def``, ``class``, assignment or import of that name. A module
that binds names another way (``from x import *``, a module ``__getattr__``) or has no
Python source (an extension) is taken on trust: its worker says it at the first call
(pilot/pyworker.py). A node whose environment names another interpreter (``PWE_PYTHON``)
is not checked (that interpreter's path is not this one's). A node in a container is looked
for in the workspace alone (bound at its own path inside; this interpreter's path is not
the image's): a module found there is checked and keyed as here, one not found is the
image's own (its worker says it at the first call, when the image lacks it). Where the image
is a directory on this machine, its Python (``python3``, or ``PWE_PYTHON``) must be in it.

The key holds the module's name (in the node's payload, ``python: ...``) and the SHA-256 of
its source file: what that file imports is not read (name those files in ``inputs:``, or
say ``reuse: false``).
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

from ..base.errors import InputError

#: the most bytes of a module's source read to look for its function
MOST_SOURCE = 16 << 20


def search_path(plan: Any) -> list[str]:
    """Where a function's module is looked for: the workspace, then this interpreter's path."""
    from .products import workspace

    try:
        root = str(workspace(plan))
    except InputError:
        root = str(plan.file.parent.resolve())
    return [root] + [p for p in sys.path if p]


def find(module: str, path: list[str]) -> str | None:
    """The file of ``module`` (its source, or whatever Python would load), found without
    importing it or its packages; None when it is not found."""
    where: list[str] | None = path
    spec = None
    parts = module.split(".")
    for k in range(len(parts)):
        try:
            spec = PathFinder.find_spec(".".join(parts[:k + 1]), where)
        except (ImportError, ValueError, OSError):
            return None
        if spec is None:
            return None
        where = list(spec.submodule_search_locations or []) or None
        if where is None and k < len(parts) - 1:
            return None  # (a module, not a package, where a package is needed)
    return spec.origin if spec is not None and spec.has_location else None


def digest(path: str | None) -> str:
    """SHA-256 of the module's file; ``-`` when it is not here."""
    if not path:
        return "-"
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return "-"
    return h.hexdigest()


def _foreign(plan: Any, nid: str) -> bool:
    """Whether the node's members run another interpreter than this one (``PWE_PYTHON``)."""
    return "PWE_PYTHON" in plan.nodes[nid].spec.env


def _where(plan: Any, nid: str) -> tuple[list[str], bool]:
    """(where node ``nid``'s module is looked for, whether its workers run in a container:
    the workspace alone, then)."""
    from .images import container_of

    path = search_path(plan)
    inside = container_of(plan, nid) is not None
    return (path[:1] if inside else path), inside


#: where a container's Python is looked for in its image (a PATH most images keep)
IMAGE_PATH = ("/usr/local/bin", "/usr/bin", "/bin", "/opt/conda/bin")


def _image_python(plan: Any, nid: str) -> str | None:
    """Why node ``nid``'s container image cannot start its workers (no Python in it), where
    that can be known here (a directory image on this machine); else None."""
    from .images import container_of, image_path

    spec = container_of(plan, nid)
    if spec is None or spec.runtime == "podman":
        return None
    if plan.nodes[nid].host != "local" and os.path.isabs(os.path.expanduser(spec.image)):
        return None  # (a path on that host's nodes: pwe.planning.images)
    image = image_path(plan, spec)
    if not Path(image).is_dir():
        return None  # (an image file: SquashFS, SIF; or missing: pwe.planning.images says that)
    python = str(plan.nodes[nid].spec.env.get("PWE_PYTHON") or "python3")
    places = [python] if python.startswith("/") else [f"{d}/{python}" for d in IMAGE_PATH]
    if any(os.path.lexists(os.path.join(image, p.lstrip("/"))) for p in places):
        return None
    return (f"its container image {image} has no {python} (looked in {', '.join(places)}); install Python in the "
            "image, or set env: PWE_PYTHON to its interpreter's path inside")


def identity(plan: Any, nid: str) -> dict[str, str] | None:
    """What node ``nid``'s function adds to its members' keys (its module's source digest),
    made once per plan; None for a node that runs a command."""
    pn = plan.nodes[nid]
    spec = pn.spec.python
    if spec is None:
        return None
    cache = plan.__dict__.setdefault("_function_ids", {})
    if nid not in cache:
        path = None if _foreign(plan, nid) else find(spec.partition(":")[0], _where(plan, nid)[0])
        cache[nid] = {"source": digest(path)}
    return cache[nid]


def defines(source: str, name: str) -> bool | None:
    """Whether the module's source binds ``name`` at its top level; None when it cannot be
    told from the source (a ``*`` import, a module ``__getattr__``, not Python we can parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    unsure = False
    for node in tree.body:
        for n in _bound(node):
            if n == name:
                return True
            if n in ("*", "__getattr__"):
                unsure = True
    return None if unsure else False


def _bound(node: ast.AST) -> list[str]:
    """The names one top-level statement binds (those of its branches too: ``if``/``try``)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    out: list[str] = []
    for field in ("body", "orelse", "finalbody", "handlers"):
        for child in getattr(node, field, None) or []:
            out += _bound(child)
    return out


def check(plan: Any) -> None:
    """What ``pwe validate`` checks of each function node: what a function member cannot
    have (a ``check``, a shell command's that may grow its tree; several ranks), its module
    found, its function defined there. One line naming file and line (:class:`InputError`)
    else. (Its ``validate`` runs after the call, in its worker; its ``container`` holds the
    worker: pilot/pyworker.py.)"""
    for nid, pn in plan.nodes.items():
        spec = pn.spec.python
        if spec is None:
            continue
        line = pn.run_line
        if pn.spec.check is not None:
            raise InputError(f"node '{nid}': a function member (python:) takes no 'check' (a shell command's); "
                             "give the node a run: command for it", plan.file, line)
        if (pn.scheduling.ranksPerMember or 1) > 1:
            raise InputError(f"node '{nid}': a function member (python:) is one process: ranksPerMember must be 1",
                             plan.file, line)
        why = _image_python(plan, nid)
        if why is not None:
            raise InputError(f"node '{nid}': python: {spec}: {why}", plan.file, line)
        if _foreign(plan, nid):
            continue
        module, _, name = spec.partition(":")
        if module.split(".")[0] in sys.builtin_module_names:
            continue  # (built into the interpreter: found, with nothing to read)
        path, inside = _where(plan, nid)
        found = find(module, path)
        if found is None and inside:
            continue  # (the image's own, or none: its worker says which at the first call)
        if found is None:
            raise InputError(f"node '{nid}': python: {spec}: module {module} is not found in the workspace "
                             f"{path[0]} nor on this Python's path; put it there (or set env: PWE_PYTHON to the "
                             "interpreter that has it)", plan.file, line)
        if not found.endswith(".py"):
            continue  # (an extension or bytecode: its worker says it, at the first call)
        try:
            with open(found, "rb") as fh:
                source = fh.read(MOST_SOURCE).decode("utf-8", "replace")
        except OSError as exc:
            raise InputError(f"node '{nid}': python: {spec}: cannot read {found}: {exc.strerror or exc}",
                             plan.file, line) from None
        try:
            compile(source, found, "exec", flags=ast.PyCF_ONLY_AST)
        except SyntaxError as exc:  # (its workers would fail every call with it)
            raise InputError(f"node '{nid}': python: {spec}: {found}:{exc.lineno}: {exc.msg}; mend the module",
                             plan.file, line) from None
        except ValueError:
            pass
        if defines(source, name) is False:
            raise InputError(f"node '{nid}': python: {spec}: {Path(found)} defines no '{name}' at its top level; "
                             "name a function of that module", plan.file, line)
