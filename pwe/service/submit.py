"""Making a run for the service, idempotently, and starting its engine.

A submission names its run id itself (the client chooses it: ``pwe submit --service``; a
trigger derives it from what fired it). So a submission delivered twice (Celery's
redelivery after a lost acknowledgement, a tick repeated after a crash) finds its run and
does nothing: :func:`submit_run` is safe to call any number of times with one request.

A run is never executed inside a Celery task: its engine is a detached process of its own
(:func:`pwe.engine.control.spawn_engine`), and the run's journal is its state.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from ..base.errors import InputError, PweError
from ..base.ids import is_run_id
from ..runstate.service_store import Store

#: Value names a triggered run is given, as properties, when its payloads use them.
VALUE_NAMES = ("scheduled_time", "trigger_run", "trigger_file")
MAX_TEXT = 4 * 1024 * 1024


def prepare(file: str, sets: dict[str, Any], host: str | None, cores: int | None,
            workspace: str | None = None) -> dict[str, Any]:
    """The request ``pwe submit --service`` sends: the workflow checked here first (bad
    input is said here, exit 2), its text (the service may not see this file), the run
    id chosen here, and the workspace its products are relative to, resolved here
    (``--workspace``, else the workflow's, else the file's directory: where the service
    runs a copy of the text, the copy's directory would be the wrong one)."""
    from ..planning.plan import plan_workflow
    from ..planning.products import workspace as resolve_workspace
    from ..runstate.rundir import new_run_id

    path = Path(file)
    plan = plan_workflow(path, sets, host=host)
    where = resolve_workspace(plan, workspace)
    _check_inputs(plan, where)
    text = path.read_bytes()
    if len(text) > MAX_TEXT:
        raise InputError(f"larger than {MAX_TEXT // 1024 // 1024} MiB", path)
    return {"run_id": new_run_id(plan.workflow.name), "name": plan.workflow.name, "path": str(path.resolve()),
            "suffix": path.suffix or ".yaml",
            "text": text.decode("utf-8", "surrogateescape"), "sets": sets, "host": host, "cores": cores,
            "workspace": str(where), "origin": os.uname().nodename, "submitted": time.time()}


def _check_inputs(plan: Any, where: Path) -> None:
    """What the run's engine would refuse as it begins (an input that is a link out of the
    workspace, not a regular file), said here in one line: the engine's refusal would be
    final (rundir.REFUSED), and the client would not hear of it."""
    from ..planning.reuse import keys, reusable

    if any(reusable(plan, n) for n in plan.nodes):
        keys(plan, where, frozen=False)


def _workflow_file(store: Store, req: dict[str, Any]) -> Path:
    """The file to run: the original when this machine sees it with the same text (the
    parameter files and hosts.yaml beside it then work), else the text sent, kept here."""
    path = Path(req["path"])
    text = req.get("text")
    if text is None:
        return path  # (a trigger: the workflow's file on this machine, as it is now)
    data = text.encode("utf-8", "surrogateescape")
    try:
        if path.is_file() and path.read_bytes() == data:
            return path
    except OSError:
        pass
    suffix = req.get("suffix") if req.get("suffix") in (".yaml", ".yml", ".xml") else ".yaml"
    copy = store.subs / f"{req['run_id']}{suffix}"
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return copy


def _with_values(file: Path, sets: dict[str, Any], host: str | None, values: dict[str, Any]) -> dict[str, Any]:
    """The sets plus those trigger values the workflow's payloads use (a value no payload
    reads would be refused as a --set that changes nothing)."""
    if not values:
        return sets
    from ..planning.plan import plan_workflow

    plan = plan_workflow(file, sets, host=host)
    used = set().union(*(n.template.names - set(n.space.names) for n in plan.nodes.values()))
    return {**sets, **{k: v for k, v in values.items() if k in used}}


def submit_run(store: Store, req: dict[str, Any]) -> dict[str, Any]:
    """Make the run ``req`` asks for (once) and start its engine; its submission record.
    Bad input is kept in the record (``error``), not raised: a task has no one to tell."""
    from ..engine.loop import Engine

    run_id = str(req.get("run_id", ""))
    if not is_run_id(run_id):
        raise InputError(f"run id {run_id!r}: letters, digits, '.', '_' and '-' only")
    rec = store.submission(run_id)
    if rec is not None:
        return rec  # delivered before: its run exists (the supervisor keeps its engine going)
    run_dir = store.run_root() / run_id
    rec = {"run_id": run_id, "run_dir": str(run_dir), "submitted": req.get("submitted") or time.time(),
           "workflow": req.get("name") or Path(str(req.get("path"))).stem, "trigger": req.get("trigger"),
           "values": req.get("values") or {}, "origin": req.get("origin"), "spawns": 0}
    if not ((run_dir / "run.json").is_file() and (run_dir / "secret").is_file()):
        if run_dir.exists():
            shutil.rmtree(run_dir)  # half made by a submission that died: made again, whole
        try:
            store.run_root().mkdir(parents=True, exist_ok=True, mode=0o700)
            file = _workflow_file(store, req)
            sets = _with_values(file, dict(req.get("sets") or {}), req.get("host"), rec["values"])
            engine = Engine.create(file, sets, host=req.get("host"), cores=req.get("cores"), run_dir=run_dir,
                                   run_id=run_id, workspace=req.get("workspace"),  # (a trigger's: its file's)
                                   service={"trigger": rec["trigger"], "values": rec["values"]})
            rec["workflow"] = engine.plan.workflow.name
        except (PweError, OSError) as exc:
            rec.update(final=True, phase="refused", error=str(exc), ended=time.time())
            store.save_submission(rec)
            return rec
    store.save_submission(rec)
    start_engine(store, rec)
    return rec


def journal_size(run_dir: Path) -> int:
    """The journal's size: an engine that made no progress since it started left it as it was."""
    try:
        return (run_dir / "journal.jsonl").stat().st_size
    except OSError:
        return 0


def start_engine(store: Store, rec: dict[str, Any]) -> None:
    """Start an engine for the run (it resumes from the journal when there is one)."""
    from ..engine.control import spawn_engine

    run_dir = Path(rec["run_dir"])
    from pilot.identity import start_time

    rec["pid"] = spawn_engine(run_dir, wait=0)
    rec["pid_started"] = start_time(rec["pid"])  # (a pid alone is recycled: pilot/identity.py)
    rec["started"] = time.time()
    rec["spawns"] = int(rec.get("spawns") or 0) + 1
    rec["journal_at_start"] = journal_size(run_dir)
    rec["phase"] = "starting"
    store.save_submission(rec)
