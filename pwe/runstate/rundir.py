"""The run directory: everything a run keeps, and where.

    pwe-runs/<run-id>/
      run.json            what was run: workflow file copy, --set values, host, cores
      workflow.<ext>      a copy of the workflow file as submitted
      journal.jsonl       the event history; the run's state store (one writer: the engine)
      state.json          a snapshot of per-node counts, rewritten atomically (pwe status)
      engine.lock         locked (flock) by the one engine working on the run; its pid, host, since
                          (pwe/runstate/locks.py)
      engine.log          the background engine's output (pwe submit)
      control/cancel      a request to cancel, for a running engine to act on
      pilots/<id>/        tasks.jsonl (engine -> pilot), events.jsonl (pilot -> engine), pilot.log
      checkpoint.bin      the members' state as of a journal offset (pwe/runstate/checkpoint.py): readers
                          and a resumed engine replay only the journal after it
      members/<node>/     the directory the node's members run in (directory: shared, the default
                          for a node without products; node_path): made once, holds what they write
      members/<node>/<index // 1000>/<index>/   a member's own directory (directory: own): its
                          cwd; once it ended, its stdout and stderr only when not empty, and
                          what it wrote, else nothing (member_path)

Why not SQLite: HPC home and project directories are NFS, GPFS or Lustre, where SQLite's
locking is unreliable and WAL mode is unsupported. An append-only journal with exactly
one writer needs neither locks nor mmap from the filesystem, survives kill -9 (a torn
last line is ignored), and replays in well under a second for a 100,000-member run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from . import registry
from ..base.errors import InputError, PweError, RunNotFound

DEFAULT_ROOT = Path("pwe-runs")


def new_run_id(name: str) -> str:
    import secrets

    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


#: Members per shard: a member's directory is members/<node>/<index // SHARD>/<index>, so no
#: directory of a run holds more than SHARD members, and a node's own directory one entry
#: per SHARD members (1,000 for a million; parallel filesystems slow down past ~10,000).
SHARD = 1000


def node_path(members: str, node: str) -> str:
    """The directory the members of ``node`` run in when they have none of their own
    (``directory: shared``; ``members``: the run's members/ directory): made once by each
    pilot, holding only what they write there themselves."""
    return f"{members}/{node}"


def member_path(members: str, node: str, index: int) -> str:
    """Where member ``index`` of ``node`` keeps its files when it runs in a directory of its
    own (``directory: own``; ``members``: the run's members/ directory): its working
    directory while it runs, then its stdout and stderr and what it wrote, each only if not
    empty (an earlier attempt's as stdout.1 ...). A member that wrote nothing has no
    directory once it ended. Its outputs are not kept here: they go with its end into the
    journal (pilot.members.outputs_path). The one place this is said: the task (where it
    runs), ``pwe logs``, the report and the trace all find its files here."""
    return f"{node_path(members, node)}/{index // SHARD}/{index}"


def member_dir(root: Path, node: str, index: int) -> Path:
    """:func:`member_path` of run directory ``root``."""
    return Path(member_path(str(Path(root) / "members"), node, index))


def first_missing(run_dir: Path) -> Path:
    """The highest of ``run_dir`` and its parents that does not exist yet: the first one
    that making it makes (:func:`remove_made` goes back up to it)."""
    return next((q for q in (*reversed(run_dir.parents), run_dir) if not q.exists()), run_dir)


def remove_made(run_dir: Path, top: Path) -> None:
    """Remove ``run_dir`` with what is in it, then each parent made for it, up to ``top``
    (:func:`first_missing` before it was made), while it is empty: another run made there
    meanwhile stays."""
    shutil.rmtree(run_dir, ignore_errors=True)
    if top != run_dir:
        remove_empty(run_dir.parent, top)


def remove_empty(d: Path, top: Path) -> None:
    """Remove directory ``d``, then each parent of it up to ``top`` (``top`` too), while it
    is empty: the directories made for something that is gone; another's stays."""
    while d == top or top in d.parents:
        try:
            d.rmdir()
        except OSError:
            break
        d = d.parent


def create(run_dir: Path) -> Path:
    from ..base.regular import in_the_way

    blocked = in_the_way(run_dir)
    if blocked:  # (one line saying what stands there, not mkdir's "exists" for a dangling link)
        where = "move it away or give --run-dir" if Path(run_dir).parent == DEFAULT_ROOT else "choose another --run-dir"
        raise InputError(f"cannot create run directory {run_dir}: {blocked[0]} is {blocked[1]}, not a directory; "
                         f"{where}")
    top = first_missing(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
        run_dir.chmod(0o700)  # owner-only: its secret signs every message of the run
        for sub in ("pilots", "members", "control"):
            (run_dir / sub).mkdir()
    except FileExistsError:
        if _half_made(run_dir):
            raise InputError(f"run directory {run_dir} already exists, its making cut short (no run.json: the `pwe "
                             "run` that made it was killed before its run began); remove it, or choose another "
                             "--run-dir") from None
        raise InputError(f"run directory {run_dir} already exists; choose another --run-dir") from None
    except OSError as exc:
        remove_made(run_dir, top)  # (nothing left half made: what it made, the parents it made for it)
        from .journal import FULL

        if exc.errno in FULL:  # (no room, not a path to choose again: pwe.runstate.runs.not_made says so)
            raise
        raise InputError(f"cannot create run directory {run_dir}: {exc.strerror}; choose another --run-dir") from None
    return run_dir


#: Where the runs of a root come from (``pwe runs``' "from"), for runs whose run.json does
#: not say (made before it did).
COMMAND_LINE, SERVICE = "command line", "service"


def roots() -> list[tuple[Path, str]]:
    """The run roots, in the order a run is looked for, each with where its runs come from:
    ./pwe-runs (:data:`COMMAND_LINE`), then the service's run root (its directory's
    ``runs/`` or its ``--run-root``) and any other directory its submissions name
    (:data:`SERVICE`). The one list every command that takes a RUN, and ``pwe runs``, use."""
    from .service_store import Store  # (its files only: no celery)

    out = [(DEFAULT_ROOT, COMMAND_LINE)]
    store = Store()
    if store.root.is_dir():
        out.append((store.run_root(), SERVICE))
        out += [(Path(r["run_dir"]).parent, SERVICE) for r in store.submissions() if isinstance(r.get("run_dir"), str)]
    seen, unique = set(), []
    for root, origin in out:
        key = _key(root)
        if key not in seen:
            seen.add(key)
            unique.append((root, origin))
    return unique


def _key(path: Path) -> str:
    try:
        return str(path.resolve())
    except OSError:
        return str(path.absolute())


def _not_a_directory(root: Path) -> str | None:
    """What stands where run root ``root`` should be when it is there but not a directory
    (a file, a FIFO, a dangling symbolic link); None otherwise."""
    from ..base.regular import in_the_way

    blocked = in_the_way(root) if os.path.lexists(root) else None
    return blocked[1] if blocked and blocked[0] == root else None


def _shown(root: Path) -> str:
    """A run root as lines show it, with what stands there when it is not a directory."""
    what = _not_a_directory(root)
    return f"{root}/" + (f" ({what}, not a directory)" if what else "")


def check_roots(places: list[tuple[Path, str]]) -> None:
    """:class:`InputError` (one line) when one of ``places`` (:func:`roots`) is there but is not
    a directory (a file, a FIFO, a dangling symbolic link): a listing would leave its runs out."""
    for root, _ in places:
        what = _not_a_directory(root)
        if what:
            raise InputError(f"run root {root}/ is {what}, not a directory of runs; move it away")


def find(run: str | None, root: Path | None = None) -> Path:
    """A run directory from a run id or a unique prefix of one (under :func:`roots`, or ``root``
    alone, then in the registry of runs), a path, or (None) the newest run under ./pwe-runs
    (``root``). An ambiguous prefix is :class:`RunNotFound` naming the runs it could mean
    and where each is; a run found nowhere names every place looked in."""
    if run is None:
        return _newest(root or DEFAULT_ROOT)
    if not run.strip():  # (Path('') is the current directory: never taken as a run directory)
        raise RunNotFound(f"no run {run!r}: an empty RUN selects nothing; give a run id or a run directory")
    bad = "too long" if len(run) > 1024 else "a control character in it" if any(
        ord(c) < 32 or 127 <= ord(c) < 160 for c in run) else None
    try:
        if not bad and (Path(run) / "run.json").is_file():
            return Path(run)
    except OSError as exc:  # (a name too long for the file system)
        bad = exc.strerror or str(exc)
    if bad:  # (said with repr: no escape sequence of it reaches the terminal)
        raise RunNotFound(f"run {run[:60] + ('...' if len(run) > 60 else '')!r}: not a run id or run directory "
                          f"({bad}); give a run id, a prefix of one or a run directory")
    places = [(root, COMMAND_LINE)] if root is not None else roots()
    if run and "/" not in run and run not in (".", ".."):
        for base, _ in places:
            if (base / run / "run.json").is_file():
                return base / run
        there = registry.lookup(run) if root is None else None  # (a run made with --run-dir anywhere)
        if there is not None:
            return there
    known = [(p.parent.name, p.parent) for base, _ in places if base.is_dir() for p in sorted(base.glob("*/run.json"))]
    if run and "/" not in run:
        found = _by_prefix(run, known, root)
        if found is not None:
            return found
    from ..base.errors import did_you_mean

    if _half_made(Path(run)):
        raise RunNotFound(f"{run}: a run directory whose making was cut short (it has no run.json: the `pwe run` "
                          "that made it was killed before its run began, so nothing of it ran); remove it and run "
                          "again")
    looked = ", ".join(_shown(base) for base, _ in places)
    nor = f", nor in the registry of runs ({registry.where()}/)" if root is None else ""
    raise RunNotFound(f"no run '{run}' (looked in {looked}){nor}{did_you_mean(run, sorted(k for k, _ in known))}")


def _half_made(path: Path) -> bool:
    """Whether ``path`` is what :func:`create` makes before a run's files are written (its
    subdirectories, perhaps the workflow's copy and the secret, no ``run.json``)."""
    names: set[str] = set()
    try:
        if not path.is_dir() or path.is_symlink():
            return False
        with os.scandir(path) as entries:
            for entry in entries:  # (reading stops past 16 names: a directory of thousands is not one)
                names.add(entry.name)
                if len(names) > 16:
                    return False
    except OSError:
        return False
    made = {"pilots", "members", "control"}
    rest = {n for n in names - made if not (n.startswith(".run.json.") and n.endswith(".tmp"))}
    return made <= names and rest <= {"secret", "workflow.yaml", "workflow.yml", "workflow.json"}


def _newest(base: Path) -> Path:
    """The newest run directory under ``base``; RunNotFound when it has none."""
    check_roots([(base, COMMAND_LINE)])
    runs = sorted((p for p in base.glob("*/run.json")), key=lambda p: p.stat().st_mtime) if base.is_dir() else []
    if not runs:
        raise RunNotFound(f"no runs under {base}/; give a run id or a run directory")
    return runs[-1].parent


def _by_prefix(run: str, known: list[tuple[str, Path]], root: Path | None) -> Path | None:
    """The one run whose id starts with ``run``: of the runs under the roots (``known``),
    else of the registry's (the nearest first; not with ``root``); None when there is none,
    RunNotFound naming them (and where each is) when there are several."""
    hits, seen = [], set()
    for k, d in [x for x in known if x[0].startswith(run)] or (registry.starting(run) if root is None else []):
        if _key(d) not in seen:
            seen.add(_key(d))
            hits.append((k, d))
    if len(hits) == 1:
        return hits[0][1]
    if hits:
        shown = ", ".join(f"{k} ({_shown(d.parent) if d.name == k else d})" for k, d in hits[:10]) + (
            f" and {len(hits) - 10} more" if len(hits) > 10 else "")
        raise RunNotFound(f"'{run}' is the start of {len(hits)} runs: {shown}; give more of the id")
    return None


def listed(root: Path | None = None) -> list[tuple[Path, str]]:
    """The run directories under ``root`` (None: under every one of :func:`roots`), newest
    first (by when each was made), each with where its root's runs come from."""
    found = []
    places = [(root, COMMAND_LINE)] if root is not None else roots()
    check_roots(places)
    for base, where in places:
        if not base.is_dir():
            continue
        for p in base.glob("*/run.json"):
            try:
                found.append((p.stat().st_mtime, p.parent, where))
            except OSError:
                continue
    return [(d, w) for _, d, w in sorted(found, key=lambda x: x[0], reverse=True)]


def run_dirs(root: Path | None = None) -> list[Path]:
    """:func:`listed`'s run directories alone."""
    return [d for d, _ in listed(root)]


def origin(info: dict[str, Any], where: str = COMMAND_LINE) -> str:
    """Where a run came from: :data:`COMMAND_LINE`, :data:`SERVICE` or ``trigger NAME``.
    What its run.json (``info``) says (``from``); for a run made before it said: its
    ``service`` record (with a trigger's name), else ``where`` (its root's, :func:`listed`)."""
    said = info.get("from")
    if isinstance(said, str) and said:
        return said
    svc = info.get("service")
    if isinstance(svc, dict):
        return f"trigger {svc['trigger']}" if svc.get("trigger") else SERVICE
    return where


def run_ref(run_dir: Path) -> str:
    """How to name a run on the command line: its id when :func:`find` finds it by its id
    (it is under one of :func:`roots`), else its directory (a run made with --run-dir: as it
    was given; its id finds it too, through the registry of runs)."""
    run_dir = Path(run_dir)
    try:  # (under a root: not a directory of that name that happens to be here)
        if _key(run_dir.parent) in {_key(root) for root, _ in roots()} and \
                find(run_dir.name).resolve() == run_dir.resolve():
            return run_dir.name
    except (OSError, PweError):
        pass
    return str(run_dir)


#: where an engine says, for good, that it refused its run before it began (bad input: a
#: link out of the workspace, an input that is none): ``{"why", "status", "t"}``. The
#: service's supervisor never starts another engine on such a run, and no engine resumes it
REFUSED = "refused.json"


def mark_refused(run_dir: Path, exc: PweError) -> None:
    """Record, durably (written whole, by rename), that the run was refused: ``exc`` says why."""
    from ..base.regular import write_json_atomic

    try:
        write_json_atomic(Path(run_dir) / REFUSED, {"why": str(exc), "status": exc.exit_status, "t": time.time()})
    except OSError:
        pass  # (a disk that takes nothing: the next engine refuses it again, as this one did)


def refusal(run_dir: Path) -> str | None:
    """Why the run was refused for good (:func:`mark_refused`), or None. A file there that is
    not a regular one, or not such a record, still says it was refused."""
    from ..base.regular import open_regular

    path = Path(run_dir) / REFUSED
    try:
        os.lstat(path)
    except OSError:
        return None
    try:
        with open_regular(path, "rb", within=Path(run_dir)) as fh:
            rec = json.loads(fh.read(65536))
        why = rec.get("why") if isinstance(rec, dict) else None
    except (OSError, ValueError):
        why = None
    return why if isinstance(why, str) and why else f"{path} says so"
