"""Making a run and opening one again: what a run directory holds about what was run.

:func:`create` checks a workflow against its hosts and makes its run directory (the
workflow's copy, ``run.json``, the secret); :func:`read` gives back ``run.json`` and the
plan, re-planned the same way for the engine that resumes a run and for whoever only
reads it (``pwe show``, ``pwe status``, the Python API). Nothing here starts a pilot or
talks to a host.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from . import locks, rundir
from .journal import past_header
from ..base.confine import inside
from ..base.errors import InputError, PweError, RunDamaged
from ..planning.plan import Plan, plan_workflow
from ..base.regular import kind, open_regular, read_bytes, read_json
from ..base.yaml_reader import MAX_FILE_BYTES
from ..base.regular import write_json_atomic


def create(workflow: str | Path, sets: dict[str, Any] | None = None, host: str | None = None,
           cores: int | None = None, run_dir: str | Path | None = None, hosts_file: str | Path | None = None,
           planned: tuple[Plan, dict[str, Any], list[str]] | None = None,
           **options: Any) -> tuple[Path, Plan, dict[str, Any], list[str]]:
    """Check the workflow, make its run directory; (its path, the plan, run.json's
    content, the warnings ``pwe run`` prints). ``planned``: what
    :func:`~pwe.planning.placement.plan_for_hosts` gave for the same arguments, not done twice."""
    from ..planning.placement import pilot_args_for, plan_for_hosts

    src = Path(workflow)
    cores_option = cores
    plan, hosts, warnings = planned or plan_for_hosts(src, sets, host=host, hosts_file=hosts_file, cores=cores)
    for the_host in hosts.values():
        if the_host.contact != "local" and not the_host.shared_fs:  # (pwe.engine.remote: its engine runs there)
            raise InputError(f"host '{the_host.name}' does not share this machine's file systems (shared_fs: "
                             "false): its runs are staged to its login node and run there by `pwe run` or `pwe "
                             "submit` from the command line, not by an engine on this machine", src)
        if the_host.transport == "redis" and the_host.broker_password_file:
            from pilot.broker import read_password

            try:  # (read again by the engine and each pilot: never copied into the run)
                read_password(the_host.broker_password_file)
            except OSError as exc:
                raise InputError(f"host '{the_host.name}': broker_password_file {the_host.broker_password_file}: "
                                 f"{exc.strerror or exc}; give an owner-only file holding the broker's password",
                                 src) from None
    from ..planning.products import workspace

    # where products are (and PWE_WORKSPACE): recorded absolute, for every engine of the run
    options["workspace"] = str(workspace(plan, options.pop("workspace", None)))
    if not options.get("concurrent"):  # (one live run per workflow per workspace: refused before anything is made)
        locks.LiveLock(options["workspace"], plan.workflow.name).refuse_if_held()
    if options.get("reuse_from"):  # (checked before anything is made: one line, exit 2)
        from .reusable import lenders

        where = Path(options["reuse_from"]).expanduser().resolve()
        lenders(where, plan.workflow.name, named=True)
        options["reuse_from"] = str(where)
    extra_args = options.pop("pilot_args", None)  # (tests and the API: for every host)
    options["lanes"] = {
        name: {"host_def": h.model_dump(), "cores": h.cores_per_node,
               "pilot_args": extra_args if extra_args is not None else pilot_args_for(h)}
        for name, h in hosts.items()
    }
    cores = next(iter(hosts.values())).cores_per_node
    # (the service gives the id its client chose, so that a submission delivered twice finds its run)
    run_id = options.pop("run_id", None) or rundir.new_run_id(plan.workflow.name)
    path = Path(run_dir) if run_dir else rundir.DEFAULT_ROOT / run_id
    try:
        path = make_dir(path)
        info = _fill(path, src, run_id, sets, host, cores, cores_option, hosts_file, options)
    except BaseException as exc:  # (a disk that fills, a file that cannot be copied: nothing left half made)
        unmake(path)
        not_made(path, exc)
        raise
    from .registry import register

    register(run_id, path)  # (found by its id wherever it is: pwe/runstate/registry.py)
    return path, plan, info, warnings


def _fill(path: Path, src: Path, run_id: str, sets: dict[str, Any] | None, host: str | None, cores: int,
          cores_option: int | None, hosts_file: str | Path | None, options: dict[str, Any]) -> dict[str, Any]:
    """A new run directory's workflow copy, run.json and secret; run.json's content."""
    copy = path / f"workflow{src.suffix or '.yaml'}"
    shutil.copyfile(src, copy)
    info = {
        "run_id": run_id, "workflow": str(src.resolve()), "copy": copy.name, "sets": sets or {},
        "host": host, "cores": cores, "created": time.time(),
        "from": rundir.origin(options),  # (command line; the service's runs pass service=...)
        # where its hosts came from, read again by resume and retry (a host fixed meanwhile)
        "hosts_file": str(Path(hosts_file).resolve()) if hosts_file else None, "cores_option": cores_option,
        **options,
    }
    write_json_atomic(path / "run.json", info)
    from .notify import make_secret

    make_secret(path)
    return info


#: For each run directory :func:`make_dir` made in this process, the first of it and its
#: parents that it made (./pwe-runs itself, the first time): what :func:`unmake` may remove.
_MADE: dict[str, Path] = {}


def make_dir(run_dir: Path) -> Path:
    """:func:`rundir.create`, remembering what it made, for :func:`unmake`."""
    run_dir = Path(run_dir)
    top = rundir.first_missing(run_dir)
    rundir.create(run_dir)
    _MADE[str(run_dir.resolve())] = top.resolve()
    return run_dir


def not_made(run_dir: Path, exc: BaseException) -> None:
    """A new run directory its filesystem refused (full, a quota of bytes or inodes,
    read-only; :data:`pwe.runstate.journal.REFUSALS`), said in one line: raised as a
    PweError (exit status 1; nothing was left behind, there is nothing to resume). Any
    other error is left to its caller to raise as it is."""
    from .journal import FULL, REFUSALS, refused_within, remedy

    if not isinstance(exc, OSError) or not exc.filename:
        return
    mine = Path(os.path.abspath(run_dir))
    # inside it, or one of the parents it was making (refused for a file elsewhere: not this)
    where = refused_within(exc, mine)
    if where is None and exc.errno in REFUSALS and Path(os.path.abspath(exc.filename)) in mine.parents:
        where = exc.filename
    if where is not None:
        shown = os.path.relpath(where) if not os.path.isabs(str(run_dir)) else where
        raise PweError(f"cannot make the run directory {run_dir}: {shown}: {exc.strerror}: "
                       f"{remedy(exc.errno in FULL)} (nothing was left behind)") from None


def unmake(run_dir: Path) -> None:
    """Remove a run directory this process made (:func:`make_dir`) for a run refused before
    it began, its registry entry, and the parents made for it when nothing else is in them
    now: a refusal leaves nothing behind. A directory this process did not make stays."""
    from .registry import forget, run_id_of

    run_dir = Path(run_dir).resolve()
    top = _MADE.pop(str(run_dir), None)
    if top is None:
        return
    rid = run_id_of(run_dir)
    rundir.remove_made(run_dir, top)
    if rid:
        forget(rid, run_dir)


def read_info(run_dir: Path) -> dict[str, Any]:
    """run.json's content; :class:`RunDamaged` (one line) when it cannot be read."""
    path = run_dir / "run.json"
    try:
        info = read_json(path, {"run_id": str, "workflow": str, "copy": str, "lanes": dict})
        if not info["lanes"] or not all(isinstance(lane, dict) for lane in info["lanes"].values()) \
                or not isinstance(info.get("sets") or {}, dict):
            raise ValueError("not what pwe writes there")
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not the JSON pwe wrote"
        copies = sorted(run_dir.glob("workflow.*"))
        anew = f"; to run its workflow anew: pwe run {copies[0]}" if copies else ""
        raise RunDamaged(f"{path} is damaged ({why}) and cannot be repaired: the run cannot be resumed or read member "
                         f"by member; {_still(run_dir)}{anew}") from None
    return info


def read(run_dir: Path) -> tuple[dict[str, Any], Plan]:
    """An existing run: run.json's content and its plan. Re-planned from the workflow's
    original location when that still holds the same text (parameter files live beside
    it), else from the run's own copy."""
    info = read_info(run_dir)
    original = Path(info["workflow"])
    copy = inside(run_dir, info["copy"], f"{run_dir / 'run.json'}: its copy of the workflow")
    try:
        text = read_bytes(copy, MAX_FILE_BYTES + 1)  # (a FIFO put there: refused, never waited on)
    except OSError as exc:
        raise RunDamaged(f"the run's copy of its workflow, {copy}, cannot be read ({exc.strerror}): put the workflow "
                         f"it ran back there (the original, {original}, if it has not changed since), then give this "
                         f"command again; {_still(run_dir)}") from None
    try:
        same = original.is_file() and read_bytes(original, MAX_FILE_BYTES + 1) == text
    except OSError:
        same = False
    return info, plan_workflow(original if same else copy, info.get("sets") or {}, host=info.get("host"))


def check_journal(run_dir: Path) -> bool:
    """False for a run no engine has worked on yet (no journal); :class:`RunDamaged` when
    the journal is missing, empty or holds no whole record but the run has begun (it has
    pilots or a snapshot): replaying nothing would run every member again."""
    path = run_dir / "journal.jsonl"
    try:
        st = path.stat()
        size = st.st_size
        if not stat.S_ISREG(st.st_mode):
            raise RunDamaged(f"{path} is not a regular file ({kind(st.st_mode)}): put the journal back, then give this "
                             f"command again; {_still(run_dir)}")
    except FileNotFoundError:
        size, what = 0, "missing"
    except OSError as exc:
        raise RunDamaged(f"{path} cannot be read ({exc.strerror}): make it readable, then give this command again; "
                         f"{_still(run_dir)}") from None
    else:
        what = "empty"
        if size > 0:
            if _whole_record(path):
                return True
            what = "cut off inside its first record"
    try:
        begun = (run_dir / "state.json").exists() or any((run_dir / "pilots").iterdir())
    except OSError:
        begun = False
    if begun:
        copies = sorted(run_dir.glob("workflow.*"))
        anew = f" (pwe run {copies[0]})" if copies else ""
        raise RunDamaged(f"{path} is {what}, but the run has begun: its record of its members is lost and cannot be "
                         f"rebuilt (resuming would run every member again); put the journal back, or start the run "
                         f"anew{anew}; {_still(run_dir)}")
    return size > 0


def _whole_record(path: Path) -> bool:
    """Whether the journal holds at least one whole record (its first 64 KiB end a line
    after its header, if it has one: a header alone, of an engine killed in its first write,
    is a journal begun by none; a first line longer than any record is left to the replay,
    which says it is damaged)."""
    try:
        with open_regular(path, "rb") as fh:
            head = fh.read(65536)
    except OSError:
        return True  # (said by the replay that reads it)
    rest = past_header(head)
    return b"\n" in rest or len(head) == 65536


def _still(run_dir: Path) -> str:
    """What can still be seen of a damaged run, in the words of the commands that show it."""
    ref = rundir.run_ref(run_dir)
    try:
        counts = isinstance(read_json(run_dir / "state.json").get("nodes"), dict)
    except OSError:
        counts = False
    logs = f"`pwe logs {ref} NODE:INDEX` what a member wrote"
    return f"`pwe status {ref}` still shows the counts it last saved and {logs}" if counts else \
        f"{logs.replace(' what', ' still shows what')}"


def current_hosts(run_dir: Path, info: dict[str, Any]) -> list[str]:
    """Update ``info``'s lanes to the hosts' current definitions, read from the same places
    as when the run was made; the names of the hosts that changed. A host no longer
    defined keeps its recorded definition. run.json is written by the engine once it holds
    the run (``Engine.run``), never by a command that may find it taken."""
    import hostinfo
    from hostinfo.records import host as host_of

    from ..planning.placement import pilot_args_for

    registry = hostinfo.load(Path(info["workflow"]), info.get("hosts_file"), cores=info.get("cores_option"))
    changed = []
    for name, lane in info["lanes"].items():
        host = registry.hosts.get(name)
        if host is None or host.model_dump() == lane["host_def"]:
            continue
        if lane.get("pilot_args") == pilot_args_for(host_of(lane["host_def"])):
            lane["pilot_args"] = pilot_args_for(host)  # (not when a caller gave its own)
        lane["host_def"] = host.model_dump()
        lane["cores"] = host.cores_per_node
        changed.append(name)
    return changed
