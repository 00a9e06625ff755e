"""A workflow's ``inputs:``: the files a run needs, staged to a host whose file systems
are not shared with this machine (``shared_fs: false``).

Each input is a path pattern relative to the run's **workspace** (:func:`pwe.planning.products.workspace`):
``--workspace D``, else the workflow's ``workspace:``, else the workflow file's directory.
Glob syntax as in :mod:`glob` with ``recursive=True``: ``*``, ``?``, ``[...]`` within one
name (not matching a leading ``.``), ``**`` as a whole part for any depth of directories
(hidden ones not entered). A directory, named or matched, means every regular file under it.

**Bounds.** A pattern has at most :data:`MAX_RECURSIVE` ``**`` parts (refused at ``pwe
validate``, one line naming the file and line), and each directory is walked once per
part of a pattern however many ways the parts before it reach it, so a walk costs at most
the parts times the workspace's directories, never their combinations. One expansion
lists at most :data:`MAX_ENTRIES` directory entries of the workspace: past that, one line
(a narrower pattern, or a smaller workspace), before the run directory is made.

    pattern_problem(text) -> str | None      the rule the model applies at validate, in words
    checked_pattern(text) -> str | None       the pattern normalized, or None when it has a problem
    expand(patterns, workspace, source=None)  -> sorted POSIX paths, relative to the workspace

What is staged is what the workspace holds, so nothing may lead out of it: a pattern that
is absolute or has a ``..`` part is refused (by the model, at ``pwe validate``: one line,
exit 2), and so is a file that resolves outside the workspace through a symlink (here:
:class:`~pwe.base.errors.InputError`). A symlink inside it is followed: to a file, the file is
staged under the link's name; to a directory, its files under the link's path. ``**``
does not enter a link that leads out of the workspace (it could be a link to a whole
scratch file system); a pattern that names one or a file in one is refused.

Standard library only (and :mod:`pwe.base.errors`): whoever stages may import it alone.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import stat
from pathlib import Path
from typing import Iterator

from ..base.errors import InputError

_MAGIC = frozenset("*?[")
#: most ``**`` parts in one pattern
MAX_RECURSIVE = 4
#: most directory entries one expansion lists (every pattern of a workflow together)
MAX_ENTRIES = 1_000_000


def pattern_problem(text: str) -> str | None:
    """What makes ``text`` no pattern of ``inputs:``, in words that follow the pattern (the
    model's message at validate), or None: blank, absolute, with a ``..`` part, holding a NUL or a line
    break, or more than :data:`MAX_RECURSIVE` ``**`` parts.

    pwe.planning.products.checked_path's rule, but any ``..`` is refused, not folded: in a pattern
    ``*/..`` means what ``*`` matches, and past a symlink ``a/..`` is not ``.``."""
    if not text.strip() or "\0" in text or "\n" in text or "\r" in text or text.startswith("/") \
            or ".." in text.split("/"):
        return ("is not a path inside the workspace (inputs are relative to it: not blank, no leading '/', no '..' "
                "part, no line break or NUL)")
    if text.split("/").count("**") > MAX_RECURSIVE:
        return (f"has {text.split('/').count('**')} '**' parts, at most {MAX_RECURSIVE} (each is any depth of "
                "directories); write fewer, or name the directories")
    return None


def checked_pattern(text: str) -> str | None:
    """``text`` as a pattern relative to the workspace (normalized: no ``.`` parts, no
    ``//``, no trailing ``/``), or None when it is not one (:func:`pattern_problem`)."""
    if pattern_problem(text) is not None:
        return None
    return posixpath.normpath(text)  # (with no '..' part left, it only folds '.', '//' and a final '/')


def expand(patterns: list[str], workspace: Path, source: Path | None = None) -> list[str]:
    """The regular files ``patterns`` name under ``workspace``: sorted, each once, as POSIX
    paths relative to it. :class:`InputError` (one line, naming ``source``, the workflow
    file, when given) for a pattern that is not one (:func:`checked_pattern`), one that
    matches no regular file, and a file or directory that resolves outside the workspace."""
    root = Path(workspace)
    if not root.is_dir():
        raise InputError(f"inputs: the workspace {root} is not a directory; make it first (inputs are relative "
                         "to it)", source)
    walk = _Walk(root, source)
    found: set[str] = set()
    for pattern in patterns:
        norm = checked_pattern(pattern)
        if norm is None:
            raise InputError(f"inputs: {pattern!r} {pattern_problem(pattern)}", source)
        files: set[str] = set()
        for rel in walk.matches("" if norm == "." else norm, pattern):
            files.update(walk.files(rel, pattern))
        if not files:
            raise InputError(f"inputs: {pattern!r} matches no file in the workspace {root}; put the files there, "
                             "correct the pattern, or choose the workspace with --workspace or 'workspace:'", source)
        found |= files
    return sorted(found)


class _Walk:
    """The workspace's tree as the patterns see it (``rel``: a path relative to it)."""

    def __init__(self, root: Path, source: Path | None):
        self.shown = root  # (as the user gave it, for messages)
        self.root = os.path.realpath(root)
        self.source = source
        self.listed = 0  # directory entries listed so far (at most MAX_ENTRIES)

    def inside(self, real: str) -> bool:
        return real == self.root or real.startswith(self.root.rstrip(os.sep) + os.sep)

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel) if rel else self.root

    def refuse(self, rel: str, pattern: str) -> InputError:
        return InputError(f"inputs: {pattern!r} names {rel!r}, which resolves to {os.path.realpath(self.path(rel))}, "
                          f"outside the workspace {self.shown}; only files inside it are staged: copy it in, or "
                          "leave it out of inputs", self.source)

    def entries(self, rel: str, pattern: str) -> list[os.DirEntry]:
        out = []
        try:
            with os.scandir(self.path(rel)) as it:
                for e in it:
                    self.listed += 1
                    if self.listed > MAX_ENTRIES:
                        raise InputError(f"inputs: {pattern!r} lists more than {MAX_ENTRIES:,} entries of the "
                                         f"workspace {self.shown} (at {rel or '.'}); name narrower directories (fewer "
                                         "'**'), or choose a smaller workspace with --workspace or 'workspace:'",
                                         self.source)
                    out.append(e)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:  # (permissions): what a run needs cannot be known
            raise InputError(f"inputs: cannot list {self.path(rel)}: {exc.strerror}", self.source) from None
        return sorted(out, key=lambda e: e.name)

    def matches(self, norm: str, pattern: str) -> list[str]:
        """The paths (files or directories) ``norm`` (``pattern`` normalized) matches, as
        glob's recursive matching finds them: part by part, the set of paths the parts so
        far match, so each directory is walked once per part however many ways it is
        reached (``**/a/**/a`` in a deep tree: not its combinations)."""
        parts = norm.split("/") if norm else []
        current = [""]
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            found: set[str] = set()
            if part == "**":
                if last:  # (each path itself is matched, and it means every file under it)
                    return current
                seen: set[str] = set()
                for rel in sorted(current):  # (a directory before those under it: they are reached once)
                    found.update(self.dirs_below(rel, pattern, seen))
            elif _MAGIC.intersection(part):
                hidden_too = part.startswith(".")
                for rel in current:
                    for e in self.entries(rel, pattern):
                        if (hidden_too or not e.name.startswith(".")) and fnmatch.fnmatchcase(e.name, part) \
                                and (last or e.is_dir()):
                            found.add(posixpath.join(rel, e.name) if rel else e.name)
            else:
                for rel in current:
                    sub = posixpath.join(rel, part) if rel else part
                    if os.path.lexists(self.path(sub)) and (last or os.path.isdir(self.path(sub))):
                        found.add(sub)
            current = sorted(found)
        return current

    def dirs_below(self, top: str, pattern: str, seen: set[str]) -> Iterator[str]:
        """``top`` and the directories under it as ``**`` matches them: not hidden ones, not
        through a link out of the workspace, not round a link's loop (the real paths above
        each), none in ``seen`` (already walked by this part: neither it nor what is under
        it again)."""
        stack = [(top, os.path.realpath(self.path(top)), frozenset())]
        while stack:
            rel, real, chain = stack.pop()
            if rel in seen:
                continue
            seen.add(rel)
            yield rel
            chain = chain | {real}
            for e in reversed(self.entries(rel, pattern)):
                if e.name.startswith(".") or not e.is_dir():  # (is_dir follows a link)
                    continue
                sub = posixpath.join(rel, e.name) if rel else e.name
                sub_real = os.path.realpath(self.path(sub)) if e.is_symlink() else os.path.join(real, e.name)
                if self.inside(sub_real) and sub_real not in chain:
                    stack.append((sub, sub_real, chain))

    def files(self, rel: str, pattern: str) -> Iterator[str]:
        """The regular files ``rel`` means: itself, or every one under it. What resolves
        outside the workspace is refused; anything else (a FIFO, a dangling link) is none."""
        real = os.path.realpath(self.path(rel))
        if not self.inside(real):
            raise self.refuse(rel, pattern)
        try:
            mode = os.stat(real).st_mode
        except OSError:  # a dangling link
            return
        if stat.S_ISREG(mode):
            yield rel
        elif stat.S_ISDIR(mode):
            yield from self.files_under(rel, real, pattern, frozenset({real}))

    def files_under(self, top: str, top_real: str, pattern: str, chain: frozenset[str]) -> Iterator[str]:
        stack = [(top, top_real, chain)]
        while stack:
            rel, real, chain = stack.pop()
            for e in self.entries(rel, pattern):
                sub = posixpath.join(rel, e.name) if rel else e.name
                if e.is_symlink():
                    target = os.path.realpath(self.path(sub))
                    if not self.inside(target):
                        raise self.refuse(sub, pattern)
                    if os.path.isdir(target):
                        if target not in chain:  # (a link back up the tree: those files are reached by their own path)
                            stack.append((sub, target, chain | {target}))
                    elif os.path.isfile(target):
                        yield sub
                elif e.is_dir(follow_symlinks=False):
                    sub_real = os.path.join(real, e.name)
                    if sub_real not in chain:  # (reached through a link: the walk began below it)
                        stack.append((sub, sub_real, chain | {sub_real}))
                elif e.is_file(follow_symlinks=False):
                    yield sub
