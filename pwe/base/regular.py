"""Opening a file pwe reads from a run directory (run.json, state.json, the journal, the
checkpoint, the secret, edge events, control requests, a member's stdout): only a regular
file is read. A FIFO, a device or a socket put where one should be is refused with an
OSError whose ``strerror`` says what it is (one line in the callers' messages), and it is
never opened for a blocking read: ``O_NONBLOCK`` on the open (a FIFO without a writer
would wait for one), the kind checked on the open descriptor (no race with a rename).
The opener, the bounded line reader and the sealed (gzip) reader are
:mod:`pilot.bounded`'s (standard library: the pilot reads its tasks with them), re-exported
here, with the confinement of a pilot's directory to its run (:func:`run_pilots`,
:func:`pilot_dir`: a ``RUN/pilots/ID`` that is a symbolic link, or resolves out of the run,
is :class:`Outside`, never read); :func:`read_json` reads a JSON file and checks its shape.
:func:`in_the_way` says what stands where a directory should be (a run directory, a run
root), from ``stat`` alone. And the one way pwe writes a JSON file of a run directory or of the
service's: :func:`write_json_atomic` (whole, by rename)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

# the one opener and reader of run-directory files (standard library: the pilot's too)
from pilot import faults
from pilot.bounded import (MAX_LINE, SECRET_MOST, Damaged, Outside, inside, kind, lines, open_append, open_regular,
                           open_spool, pilot_dir, read_lines, run_pilots, take_line)

__all__ = ["MAX_LINE", "Damaged", "Outside", "in_the_way", "inside", "kind", "lines", "open_append", "open_regular",
           "open_spool", "pilot_dir", "read_bytes", "read_json", "read_lines", "read_secret", "read_text", "run_pilots",
           "take_line", "write_json_atomic"]


def read_bytes(path: Path | str, limit: int | None = None) -> bytes:
    """A regular file's bytes (at most ``limit`` of them when given)."""
    with open_regular(path, "rb") as fh:
        return fh.read() if limit is None else fh.read(limit)


def read_secret(path: Path | str) -> bytes:
    """A run's secret (``RUN/secret``), stripped: at most :data:`pilot.bounded.SECRET_MOST`
    bytes are read, a longer one is :class:`Damaged`."""
    data = read_bytes(path, SECRET_MOST + 1)
    if len(data) > SECRET_MOST:
        raise Damaged(path, f"a secret longer than {SECRET_MOST} bytes")
    return data.strip()


def read_json(path: Path | str, keys: dict[str, Any] | None = None, limit: int = 16 << 20) -> dict[str, Any]:
    """A JSON file of a run directory that must be an object (at most ``limit`` bytes):
    ``keys``, name -> type (or tuple of types), that it must have. :class:`Damaged` (an
    :class:`OSError`, its ``strerror`` one line) when it is not JSON, too big, or not of
    that shape: checked for its shape, not only its syntax."""
    data = read_bytes(path, limit + 1)
    if len(data) > limit:
        raise Damaged(path, f"more than {limit} bytes")
    try:
        got = json.loads(data)
    except ValueError:
        raise Damaged(path, "not JSON") from None
    if not isinstance(got, dict):
        raise Damaged(path, f"JSON {type(got).__name__}, not an object")
    for key, want in (keys or {}).items():
        value = got.get(key)
        if not isinstance(value, want) or type(value) is bool and want is not bool:
            raise Damaged(path, f"its {key!r} is missing or not what pwe writes")
    return got


def read_text(path: Path | str, errors: str = "strict", limit: int | None = None) -> str:
    """A regular file's text (UTF-8)."""
    return read_bytes(path, limit).decode("utf-8", errors)


def in_the_way(path: Path | str) -> tuple[Path, str] | None:
    """What stands where directory ``path`` is, or would be made: (that path, what it is:
    ``a regular file``, ``a FIFO``, ``a dangling symbolic link to X`` ...) for ``path`` or
    the nearest of its parents that exists; None when that is a directory. Only ``stat``:
    nothing is opened, so a FIFO there never blocks."""
    p = Path(path)
    for q in (p, *p.parents):
        try:
            st = os.stat(q)
        except FileNotFoundError:
            if os.path.islink(q):
                return q, f"a dangling symbolic link to {os.readlink(q)}"
            continue
        except NotADirectoryError:
            continue  # (a parent is not a directory: said when the walk gets there)
        except OSError as exc:
            return q, f"not usable ({exc.strerror})"
        if stat.S_ISDIR(st.st_mode):
            return None
        return q, "a regular file" if stat.S_ISREG(st.st_mode) else kind(st.st_mode)
    return None


def write_json_atomic(path: Path, data: Any) -> None:
    """Write then rename: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, separators=(",", ":"), default=str)
    faults.at("rename")
    os.replace(tmp, path)
