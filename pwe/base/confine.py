"""Names from elsewhere, confined to where they belong; values that reach a script, one line.

A name that another machine, a listing, an archive, a file of a run directory or a user
gave is joined onto a local directory only through :func:`inside`: it is a relative path
of plain parts (no leading ``/``, no ``..``, no NUL or line break, at most
:data:`MAX_PATH` characters), and the path it makes, resolved (every symlink already
there followed), is still under the directory resolved. Anything else is
:class:`~pwe.base.errors.Unconfined`, one line naming the name (as text: its control
characters escaped) and where it came from, raised before anything is read or written.
:func:`relative` is the same rule without a directory (a workflow's product paths).

:func:`one_line` refuses a line break or a NUL in a value that goes into a job script or a
scheduler's directive line (``#SBATCH``, ``#PBS``, ``#$``, ``# @``): there a line break
starts a new line of the script, one that a shell runs. Standard library only.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from .errors import InputError, Unconfined

#: the longest name taken from elsewhere (PATH_MAX)
MAX_PATH = 4096
_BREAKS = ("\n", "\r", "\0")


def shown(text: str) -> str:
    """``text`` quoted for a message, its control characters escaped (never raw on a terminal)."""
    return repr(text[:200] + ("..." if len(text) > 200 else ""))


def relative(text: str) -> str | None:
    """``text`` as a path relative to some directory (normalized), or None when it is not
    one: empty, absolute, climbing out (``..``), holding a NUL or a line break, too long."""
    if not isinstance(text, str) or not text or len(text) > MAX_PATH or text.startswith("/") \
            or any(c in text for c in _BREAKS):
        return None
    if "/." not in text and "//" not in text and text[0] != "." and text[-1] != "/":
        return text  # (no '.' or '..' part, nothing to fold: normpath would change nothing)
    norm = posixpath.normpath(text)
    if norm in (".", "..") or norm.startswith("../"):
        return None
    return norm


def inside(root: Path | str, name: str, what: str) -> Path:
    """``root``/``name``, checked to stay inside ``root``: ``name`` (``what`` says where it
    came from, for the message) is a plain relative path and no symlink already there
    leads out. :class:`Unconfined` otherwise; nothing is made or opened here."""
    rel = relative(name)
    if rel is None:
        raise Unconfined(f"{what}: {shown(str(name))} is not a plain relative name (a leading '/', a '..' out, "
                         f"a line break or NUL, or over {MAX_PATH} characters): refused")
    base = Path(root)
    path = base / rel
    top = base.resolve()
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:  # (a symlink loop)
        raise Unconfined(f"{what}: {shown(rel)} cannot be resolved under {top} ({exc}): refused") from None
    if not real.is_relative_to(top):
        raise Unconfined(f"{what}: {shown(rel)} leads out of {top} (to {real}, through a symlink): refused")
    return path


def one_line(value: object, what: str) -> None:
    """Refuse (:class:`~pwe.base.errors.InputError`, exit status 2) a value holding a
    line break or a NUL: it goes into a job script or a directive line."""
    if isinstance(value, str) and any(c in value for c in _BREAKS):
        raise InputError(f"{what} {shown(value)} holds a line break or a NUL: it would go into a job script, where "
                         "a line break starts a line that a shell runs; choose one without")
