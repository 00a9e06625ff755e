"""``pwe.sweep(fn, params)``: a function run over a parameter sweep from Python, as function
members (``python:``, pilot/pyworkers.py) of a one-node workflow, on this machine.

The function is named, never pickled: its module and name (``fn.__module__``,
``fn.__qualname__``) become the node's ``python: package.module:function``, and the
directory its module is imported from (the one above its top package) the run's
workspace, where the workers find it. So it must be a function at the top level of a
module that can be imported (no lambda, no function inside a function). A function of the
script being run (``__main__``) is taken from the script's file: its workers import the
script as a module, so the script calls ``pwe.sweep`` under ``if __name__ == "__main__":``
(as with :mod:`multiprocessing`).

The workflow is written to a directory of its own (JSON, which is YAML) and run by
:func:`pwe.engine.api.run_workflow`: the run directory keeps its copy, as for any run.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from ..base.errors import InputError


def function_spec(fn: Callable[..., Any]) -> tuple[str, Path]:
    """``(package.module:function, the directory its module is imported from)`` of ``fn``;
    :class:`InputError` (one line) for what a worker could not import by name."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    module = getattr(fn, "__module__", None)
    if not callable(fn) or not name or not module:
        raise InputError(f"pwe.sweep: {fn!r} is not a function of a module")
    if not name.isidentifier():
        raise InputError(f"pwe.sweep: {module}.{name} is not a function at the top level of its module (a lambda "
                         "or a function inside a function cannot be imported by a worker): define it at the top level")
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if not path:
        raise InputError(f"pwe.sweep: module {module} of {name} has no file to import it from")
    path = Path(path).resolve()
    if module == "__main__":
        module = path.stem
        if not module.isidentifier():
            raise InputError(f"pwe.sweep: {path.name} cannot be imported by a worker as a module (its name is no "
                             "Python name): rename it, or put the function in a module")
        return f"{module}:{name}", path.parent
    root = path.parent if path.name != "__init__.py" else path.parent.parent
    for _ in module.split(".")[1:]:
        root = root.parent
    return f"{module}:{name}", root


def sweep(fn: Callable[..., Any], params: Mapping[str, Any], *, combine: str = "product",
          name: str | None = None, cores: int | None = None, run_dir: str | Path | None = None,
          memory: int | None = None, walltime: float | None = None, retries: int = 0,
          env: Mapping[str, Any] | None = None) -> Any:
    """Call ``fn`` once per combination of ``params`` (name -> a list of values, or
    ``{"range": [start, stop]}``: as a workflow's ``parameters:``), each call a function
    member with those values as keyword arguments, on ``cores`` slots of this machine; its
    return value, a mapping of JSON values (or None), is the member's outputs. Returns the
    run's :class:`~pwe.observe.results.RunResult` (``.ok``, ``.members(node)``: the node is
    the function's name). ``memory`` (MB) and ``walltime`` (minutes) per member,
    ``retries``, ``env`` and ``combine`` (``product`` or ``zip``) as a workflow says them.
    :class:`~pwe.base.errors.InputError` for bad input, as ``pwe validate`` says it."""
    from .api import run_workflow

    spec, root = function_spec(fn)
    node = spec.rpartition(":")[2]
    sched: dict[str, Any] = {}
    if memory is not None:
        sched["memoryPerMember"] = memory
    if walltime is not None:
        sched["maxWallTimePerMember"] = walltime
    body: dict[str, Any] = {"python": spec, "parameters": dict(params), "combine": combine}
    if sched:
        body["scheduling"] = sched
    if retries:
        body["retries"] = retries
    if env:
        body["env"] = dict(env)
    doc = {"name": name or node, "workspace": str(root), "nodes": {node: body}}
    where = Path(tempfile.mkdtemp(prefix="pwe-sweep-"))
    try:
        wf = where / f"{doc['name']}.yaml"
        try:
            wf.write_text(json.dumps(doc, indent=1))
        except (TypeError, ValueError) as exc:
            raise InputError(f"pwe.sweep: a parameter value is no YAML value: {exc}") from None
        return run_workflow(wf, cores=cores, run_dir=run_dir)
    finally:
        shutil.rmtree(where, ignore_errors=True)
