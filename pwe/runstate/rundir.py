"""The run directory: everything a run keeps, and where.

    pwe-runs/<run-id>/
      run.json            what was run: workflow file copy, --set values, host, cores
      workflow.<ext>      a copy of the workflow file as submitted
      journal.jsonl       the event history; the run's state store (one writer: the engine)
      state.json          a snapshot of per-node counts, rewritten atomically (pwe status)
      engine.lock         locked (flock) by the one engine working on the run; its pid, host, since
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

import errno
import fcntl
import json
import math
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from . import registry
from ..base.errors import InputError, PweError, RunNotFound, RunTaken

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
    parent = run_dir.parent
    while top != run_dir and top in (parent, *parent.parents):
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


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


class EngineLock:
    """One engine per run: an exclusive ``flock`` on ``engine.lock``, a file the run keeps,
    with the holder's record inside: its pid, host and since when (for ``pwe status`` and
    the words of :class:`RunTaken`, what a second engine, ``pwe resume`` or ``retry``
    says when it finds the run taken).

    The kernel drops the lock when its holder dies (kill -9 included), so there is no
    stale lock to take over and no check-then-take race: of two engines that try at
    once, exactly one gets it. The lock belongs to the open file, not the process, so
    asking who holds it (:meth:`holder`) never drops a lock this process holds. On NFS
    the Linux client turns ``flock`` into a lock the server keeps (NLM, NFSv4), so two
    engines on different hosts exclude each other as far as the server supports locks;
    a filesystem that refuses locks (Lustre mounted without ``flock``) is said so."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "engine.lock"
        self.held = False
        self._fd: int | None = None
        self.before: dict | None = None

    def holder(self) -> dict | None:
        """The record (pid, host, since) of the engine that holds the lock; None when none
        does. Asked the moment an engine takes the lock, it waits (at most :data:`SETTLE`)
        for that engine's record rather than name a holder that died before it."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO put there: never waited on)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                return None
        except OSError:
            return None
        try:
            deadline = time.monotonic() + self.SETTLE
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass  # held
                except OSError:
                    return None  # no locks on this filesystem: nobody can hold one
                else:
                    return None  # taken (and given back when fd closes): nobody held it
                info = _record(fd)
                if info and _live(info):
                    return info
                if time.monotonic() > deadline:
                    return info or {"pid": "?", "host": "?"}
                time.sleep(0.005)
        finally:
            os.close(fd)

    #: How long :meth:`acquire` keeps trying while the lock is busy but names no live holder:
    #: one that has just taken it and not yet written its record, or a reader asking who
    #: holds it (:meth:`holder`, a moment's shared lock) over a record a dead holder left.
    SETTLE = 1.0

    def acquire(self) -> None:
        """Take the run, atomically (``flock``), or raise :class:`RunTaken` saying who has
        it, from the holder's own record (pid, host, since when)."""
        try:
            # (no link followed, a FIFO never waited on: a lock file is a regular file of its own)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InputError(f"{self.path} is a symbolic link: remove it (a lock is a file of its own)") from None
            from .journal import cannot_write

            raise cannot_write(self.path, exc) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InputError(f"{self.path} is not a regular file: remove it (a lock is a file of its own)")
        deadline, pause = time.monotonic() + self.SETTLE, 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.before = _record(fd)  # (the last holder's record: LiveLock's previous run)
                break
            except BlockingIOError:
                info = _record(fd)
                if (info and _live(info)) or time.monotonic() > deadline:
                    os.close(fd)
                    raise RunTaken(self.taken(info or {})) from None
                time.sleep(pause)
                pause = min(2 * pause, 0.05)
            except OSError as exc:
                os.close(fd)
                raise NoLocks(f"cannot lock {self.path}: {exc.strerror}: the run directory must be on a filesystem "
                              "with file locks (Lustre: mounted with -o flock)") from None
        info = json.dumps(self.record()).encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, info, 0)
        except OSError:
            pass  # held all the same; status names no holder
        self._fd = fd
        self.held = True

    def record(self) -> dict:
        """What the holder writes into the lock: its pid, host and since when."""
        return {"pid": os.getpid(), "host": os.uname().nodename, "since": time.time()}

    def taken(self, info: dict) -> str:
        """The one line a command that found the run taken says: who holds it (its record:
        pid, host, since when) and what to do."""
        ref = run_ref(self.path.parent)
        return (f"{ref}: already taken by pid {info.get('pid', '?')} on {info.get('host', '?')} since "
                f"{_when(info.get('since'))}; `pwe status {ref}` shows it: wait for it to end, or stop it with "
                f"`pwe cancel {ref}`")

    def release(self) -> None:
        if self.held and self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)  # no holder named any more
            except OSError:
                pass  # (a read-only or full filesystem): the lock goes with the close all the same
            os.close(self._fd)
            self._fd = None
            self.held = False


class NoLocks(PweError):
    """The filesystem refuses ``flock`` (Lustre mounted without ``-o flock``)."""


class LiveLock(EngineLock):
    """One live run per workflow per workspace (issue 45): an exclusive ``flock`` on
    ``WORKSPACE/.pwe/live/NAME.lock``, held by the run's engine for its life (with
    :class:`EngineLock`'s guarantees: the kernel drops it with its holder, one of two
    takers wins), its record naming the run (id and directory). Two runs of one workflow
    writing one workspace would run every member twice and overwrite each other's
    products; as Snakemake and Nextflow do, the second is refused, in one line naming the
    live run (``--concurrent`` where a user means it). The lock lives in the workspace, the
    thing shared, so runs with other run roots or on other hosts of a shared filesystem
    see it. A workspace that takes no file (read-only) holds no lock: nothing to protect."""

    def __init__(self, workspace: str | Path, workflow: str, run_id: str = "", run_dir: Path | None = None):
        self.workspace = Path(workspace)
        self.path = self.workspace / ".pwe" / "live" / f"{workflow}.lock"
        self.workflow, self.run_id, self.run_dir = workflow, run_id, run_dir
        self.held = False
        self._fd = None
        self._top: Path | None = None  # (the first of the lock's directories it made: undo)
        self._made_file = False  # (the lock's file made by this taker: undo)
        self.before = None

    def record(self) -> dict:
        return {**super().record(), "run": self.run_id, "dir": str(self.run_dir or ""), "previous": self.previous}

    @property
    def previous(self) -> str | None:
        """The run that held the lock before this one and recorded what it inherited
        (pwe.engine.halfmade: a run killed before it wrote that is passed over, to its own
        previous); None for the first run of the workflow in the workspace."""
        before = self.before or {}
        last = before.get("dir")
        if isinstance(last, str) and last and (Path(last) / "inherited.json").is_file():
            return last
        prev = before.get("previous")
        return prev if isinstance(prev, str) and prev else None

    def taken(self, info: dict) -> str:
        run = str(info.get("run") or "?")
        where = str(info.get("dir") or "")
        ref = run_ref(Path(where)) if where else run
        return (f"workflow '{self.workflow}' has a live run in workspace {self.workspace}: {ref} (pid "
                f"{info.get('pid', '?')} on {info.get('host', '?')} since {_when(info.get('since'))}); two runs would "
                f"run every member twice and overwrite each other's products: wait for it, stop it with `pwe cancel "
                f"{ref}`, resume it with `pwe resume {ref}`, or give --concurrent (then give each its own --workspace)")

    def refuse_if_held(self) -> None:
        """Before a run is made: :class:`RunTaken` (one line, exit 2) when a live run holds
        it; :class:`InputError` when its place is not pwe's own (:meth:`check_place`)."""
        self.check_place()
        info = self.holder()
        if info is not None:
            raise RunTaken(self.taken(info))

    def check_place(self) -> None:
        """Where the lock goes is inside the workspace (no link out) and, if there, a regular
        file: else one line (nothing is opened, followed or written)."""
        inside = os.path.join(os.path.realpath(self.workspace), ".pwe", "live")
        if os.path.lexists(self.path.parent) and os.path.realpath(self.path.parent) != inside:
            raise InputError(f"{self.path.parent} leads out of the workspace (a link): remove it; pwe keeps its "
                             "live-run locks there")
        try:
            st = os.lstat(self.path)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{self.path} is not a regular file: remove it (a lock is a file of its own)")

    def acquire(self) -> None:
        """Take it, or raise :class:`RunTaken` naming the live run; nothing where the
        workspace takes no file."""
        self.check_place()
        self._made_file = not os.path.lexists(self.path)
        self._top = first_missing(self.path.parent) if not self.path.parent.exists() else None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # (a read-only workspace: no products written there, no lock)
        try:
            super().acquire()
        except NoLocks:
            return  # (a filesystem without locks: as EngineLock says, nobody can hold one)

    def release(self) -> None:
        """Given back with its record kept: it names the last run of the workflow in the
        workspace for the next (pwe.engine.halfmade); whether anyone holds the lock is the
        ``flock``'s to say, not the record's."""
        if self.held and self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self.held = False

    def undo(self) -> None:
        """A run refused before it began (it made nothing else either): the lock given back
        and, where this run made it, its file and directories removed (one made meanwhile by
        another run, or that another run holds now, stays)."""
        mine = self.held
        self.release()
        if not mine or not self._made_file:
            return
        try:
            self.path.unlink()
        except OSError:
            return
        d = self.path.parent  # (each directory made for it, while empty: never another's lock)
        while self._top is not None and (d == self._top or self._top in d.parents):
            try:
                d.rmdir()
            except OSError:
                break
            d = d.parent


def _when(since: Any) -> str:
    """A holder's ``since`` as a time of day (today) or a date and time; ``?`` for none."""
    if not isinstance(since, (int, float)) or not math.isfinite(since):
        return "?"
    try:
        today = time.strftime("%Y-%m-%d") == time.strftime("%Y-%m-%d", time.localtime(since))
        return time.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M:%S", time.localtime(since))
    except (OverflowError, OSError, ValueError):
        return "?"


def _record(fd: int) -> dict | None:
    """The holder's record in an open ``engine.lock`` (pid, host, since); None when it is
    empty or not whole yet."""
    try:
        info = json.loads(os.pread(fd, 4096, 0))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and "pid" in info else None


def _live(info: dict) -> bool:
    """Whether a holder's record names a live process (one of another host: trusted)."""
    if info.get("host") != os.uname().nodename:
        return True
    try:
        from pilot.spawn import pid_alive  # (the one way, the pilot's)

        return pid_alive(int(info["pid"]))
    except (TypeError, ValueError):
        return True


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
