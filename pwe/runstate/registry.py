"""The registry of runs: each run's id and where its directory is, so that a run is found by
its id (or a unique prefix of it) wherever it lives, ``--run-dir`` anywhere included.

    $PWE_HOME/state/runs/   (else $XDG_STATE_HOME/pwe/runs/, ~/.local/state/pwe/runs/)   0700
        <run-id>            0600: the run directory's absolute path, one line

One small file per run id, not one append-only file of lines: each run writes only its
own entry, whole, by rename (a reader sees no entry or all of it, never half; two runs made
at once never touch the same file, and no lock is needed on NFS), a lookup by id is one
open of one file (no file that grows with every run ever made to be read to its end), and
a prefix is a scan of names, capped at :data:`MAX_ENTRIES`.

An entry is only a hint: the file could have been edited, or its run moved or removed.
So an entry is used only when its name is a run id (:data:`pwe.base.ids.RUN_ID`), it is a regular file
of at most :data:`MAX_ENTRY` bytes holding an absolute path, and that directory's own
``run.json`` names the same id; any other entry is ignored. Writing the registry never
stops a run (a read-only or full home: the run is found by its directory, as before).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from ..base.ids import is_run_id
from ..base.places import state_dir

#: The most entries a prefix scan reads, and the most bytes of an entry or a run.json read.
MAX_ENTRIES, MAX_ENTRY, MAX_RUN_JSON = 100_000, 4096, 1024 * 1024
#: The most entries of one prefix whose run directories are read to be verified.
MAX_HITS = 1000


def where() -> Path:
    """The registry's directory (see the module)."""
    return state_dir() / "runs"


def _own_dir(path: Path) -> bool:
    """Whether ``path`` is a real directory (not a link) of this user, no one else may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def register(run_id: str, run_dir: Path) -> bool:
    """Record that run ``run_id`` lives in ``run_dir`` (whole, by rename, owner-only);
    whether it was recorded."""
    if not is_run_id(run_id):
        return False
    base = where()
    tmp = base / f".{run_id}.{os.getpid()}.{os.urandom(4).hex()}"  # (not secrets: its imports are 8 ms of pwe status)
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _own_dir(base):
            return False  # (another's, a link, or writable by others: not trusted, not written)
        if os.lstat(base).st_mode & 0o077:
            os.chmod(base, 0o700)  # (ours, made before with a looser umask: owner-only)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, (str(Path(run_dir).absolute()) + "\n").encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
        os.replace(tmp, base / run_id)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def forget(run_id: str, run_dir: Path) -> None:
    """Remove the entry of run ``run_id`` when it names ``run_dir`` (a run refused and
    removed as it was made: nothing of it is left behind)."""
    base = where()
    if not is_run_id(run_id) or not _own_dir(base):
        return
    try:
        with open(base / run_id, "rb") as fh:
            named = fh.read(MAX_ENTRY).decode("utf-8", "surrogateescape").rstrip("\n")
        if named == str(Path(run_dir).absolute()):
            os.unlink(base / run_id)
    except OSError:
        pass


def run_id_of(run_dir: Path) -> str | None:
    """The run id ``run_dir``'s own run.json names (a regular file, bounded); None when it
    names none, or not one of :data:`pwe.base.ids.RUN_ID`'s form."""
    from ..base.regular import read_bytes

    try:
        info = json.loads(read_bytes(Path(run_dir) / "run.json", MAX_RUN_JSON + 1))
    except (OSError, ValueError):
        return None
    rid = info.get("run_id") if isinstance(info, dict) else None
    return rid if is_run_id(rid) else None


def _entry(base: Path, run_id: str) -> Path | None:
    """The directory entry ``run_id`` names, when it is the directory of that run."""
    try:
        fd = os.open(base / run_id, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > MAX_ENTRY:
            return None
        text = os.read(fd, MAX_ENTRY).decode("utf-8", "surrogateescape").rstrip("\n")
    except OSError:
        return None
    finally:
        os.close(fd)
    if not text or "\n" in text or "\0" in text or not os.path.isabs(text):
        return None
    path = Path(text)
    return path if run_id_of(path) == run_id else None


def lookup(run_id: str) -> Path | None:
    """The directory of run ``run_id`` (exactly that id), verified; None when the registry
    has no good entry for it."""
    base = where()
    if not is_run_id(run_id) or not _own_dir(base):
        return None
    return _entry(base, run_id)


def starting(prefix: str) -> list[tuple[str, Path]]:
    """The registered runs whose id starts with ``prefix`` (id, directory), verified, in
    the order of their ids; at most :data:`MAX_ENTRIES` entries are read, and the runs of
    :data:`MAX_HITS` of them."""
    base = where()
    if not prefix or "/" in prefix or "\0" in prefix or not _own_dir(base):
        return []
    names = []
    try:
        with os.scandir(base) as it:
            for n, entry in enumerate(it):
                if n >= MAX_ENTRIES:
                    break
                if entry.name.startswith(prefix) and is_run_id(entry.name):
                    names.append(entry.name)
    except OSError:
        return []
    out = []
    for name in sorted(names)[:MAX_HITS]:
        path = _entry(base, name)
        if path is not None:
            out.append((name, path))
    return out
