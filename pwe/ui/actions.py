"""What the dashboard's buttons do, each through the function its command calls, with
who asked (``ui:<user>@<address>``) carried into the run's journal (the ``cancel``,
``retry`` and ``resume`` records' ``by``) or the trigger history:

======================  ======================================================
action                  the command (the function)
======================  ======================================================
cancel                  ``pwe cancel`` (:func:`pwe.engine.control.cancel`)
retry [query]           ``pwe retry --detach [-q QUERY]`` (:func:`pwe.engine.control.detach`,
                        the selection by :func:`pwe.engine.control.retry_selection`)
resume                  ``pwe resume --detach`` (:func:`pwe.engine.control.detach`)
set [query] pairs       ``pwe set [-q QUERY] KEY=VALUE...`` (:func:`pwe.engine.control.set_values`)
trigger fire            ``pwe trigger fire`` (:func:`pwe.service.supervisor.fire_now`)
trigger enable/disable  ``pwe trigger enable|disable`` (:func:`...supervisor.set_enabled`)
======================  ======================================================

Each answers what the command's ``--json`` prints. They block (a cancel waits for the
engine to leave): the app runs them in a thread.
"""

from __future__ import annotations

from typing import Any

from .api import Sources


def who(address: str) -> str:
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        import os

        user = f"uid {os.getuid()}"
    return f"ui:{user}@{address}"


def cancel(src: Sources, run_id: str, by: str) -> dict[str, Any]:
    from ..engine.control import cancel as cancel_run
    from ..engine.remote import RemoteRun, is_remote

    d = src.find(run_id)
    done = RemoteRun.open(d).cancel() if is_remote(d) else cancel_run(d, by=by)
    return {"run_id": d.name, "cancelled": done}


def again(src: Sources, run_id: str, by: str, retry: bool, query: str | None = None,
          budget: Any = None) -> dict[str, Any]:
    """``pwe retry --detach [-q QUERY]`` (``retry``) or ``pwe resume --detach``. A query that
    is empty or blank is refused (it selects nothing); ``budget``: the query's
    (:class:`pwe.planning.conditions.Budget`)."""
    from ..engine.control import retry_selection
    from ..engine.control import detach
    from ..base.errors import InputError
    from ..engine.remote import is_remote

    d = src.find(run_id)
    if is_remote(d):
        raise InputError(f"{run_id} runs on a login node: pwe {'retry' if retry else 'resume'} {run_id} drives it")
    only = retry_selection(d, query, budget) if (retry and query is not None) else None
    done = detach(d, retry, by=by, only=only)
    src.cache.get(d)  # (read again from here on: its journal moves)
    return {"run_id": done, "run_dir": str(d), **({"selected": sum(b - a for runs in only.values()
                                                                      for a, b in runs)} if only else {})}


def set_values(src: Sources, run_id: str, by: str, pairs: list[str], query: str | None = None,
               budget: Any = None) -> dict[str, Any]:
    """``pwe set [-q QUERY] KEY=VALUE...``: the engine's answer (``taken``: whether an engine
    took it now; else it waits in the run's control/ for the next one)."""
    from ..base.errors import InputError
    from ..engine.control import set_values as set_them
    from ..engine.remote import is_remote

    d = src.find(run_id)
    if is_remote(d):
        raise InputError(f"{run_id} runs on a login node: pwe set is for a run whose engine runs here")
    said = set_them(d, pairs, query, by, budget)
    if said is not None and not said.get("ok"):
        raise InputError(f"pwe set: {said.get('why')}")
    return {"run_id": d.name, "taken": said is not None, **(said or {})}


def trigger_fire(tid: str, by: str) -> dict[str, Any]:
    from ..runstate.service_store import Store
    from ..service.supervisor import fire_now

    return {"trigger": tid, "run_id": fire_now(Store().make(), tid, by)}


def trigger_enable(tid: str, on: bool, by: str) -> dict[str, Any]:
    from ..runstate.service_store import Store
    from ..service.supervisor import set_enabled

    return {"trigger": tid, "enabled": on, "changed": set_enabled(Store().make(), tid, on, by)}
