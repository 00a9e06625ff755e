"""A member as the pilot sees it: how its command is run, what it asked for, what it
returned, and the few words the pilot adds to its stderr. Standard library only."""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from typing import Any

from .packing import Placement
from .spawn import tidy_member_dir

#: A payload made only of these characters, whose first word is no shell builtin, is
#: exec'd directly: the shell would do nothing but split on spaces. Saves a bash start
#: (about half the cost of a tiny member).
#: A member's exit status when a signal ended it: as its parent collects it (negative), or
#: as its shell reports a child killed (128 + the signal). The pilot waits a moment for its
#: own SIGTERM before calling one the member's failure; the engine never takes one from a
#: dead pilot's guardian as an end of the member's own (pwe.engine.recovery).
KILLED = frozenset({-signal.SIGTERM, -signal.SIGKILL, 128 + signal.SIGTERM, 128 + signal.SIGKILL})

_PLAIN = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:,+@ ")
_BUILTINS = {
    "cd", "exit", "export", "source", ".", "set", "unset", "ulimit", "umask", "alias", "eval", "exec",
    "read", "shift", "trap", "wait", "return", "break", "continue", "builtin", "command", "declare",
    "local", "readonly", "type", "hash", "times", "let", "shopt", "pushd", "popd", "dirs", "history",
    "if", "then", "else", "fi", "for", "while", "until", "do", "done", "case", "esac", "function", "select",
    "time", "coproc", "!", "{", "}", "[[", "]]", ":", "getopts", "jobs", "fg", "bg", "disown", "enable",
    "help", "mapfile", "readarray", "caller", "compgen", "complete", "compopt", "fc", "suspend", "logout",
}
_OUTPUTS_LIMIT = 64 * 1024
#: The output a member's ``validate`` that failed leaves (its exit status): the pilot ends
#: the member with reason ``invalid`` (pwe/planning/validate.py writes the command)
INVALID_OUTPUT = "_pwe_invalid"


def product_fault(paths: list[str], least: list[int] | None = None) -> str | None:
    """Why a member's products (absolute paths) do not count, for the first that does not,
    or None: checked once, when the member exits 0 (pwe.planning.products). A product must
    exist (one ``lstat``); one with a ``least`` (bytes: its ``nonEmpty``, ``minBytes``) must
    be a regular file of at least that many bytes (one ``stat``; never opened)."""
    for k, p in enumerate(paths):
        need = least[k] if least and k < len(least) else 0
        if not need:
            if not os.path.lexists(p):
                return f"exited 0 without making its product {p}"
            continue
        try:
            st = os.stat(p)
        except OSError:
            return f"exited 0 without making its product {p}"
        if not stat.S_ISREG(st.st_mode):
            return f"exited 0, but its product {p} is not a regular file (it must have at least {need} bytes)"
        if st.st_size < need:
            if need == 1:
                return f"exited 0, but its product {p} is empty (0 bytes; nonEmpty)"
            return f"exited 0, but its product {p} has {st.st_size} bytes, fewer than the {need} it must have"
    return None


def argv_for(cmd: str, shell: str = "bash") -> list[str]:
    """The argv a member's command runs as: direct exec when that is exactly what the
    shell would do, else ``bash -c CMD``."""
    words = cmd.split()
    if words and set(cmd) <= _PLAIN and words[0] not in _BUILTINS:
        return words
    return [shell, "-c", cmd]


def read_outputs(path: str) -> dict[str, str]:
    """``key=value`` lines a member appended to ``$PWE_OUTPUTS`` (later lines win)."""
    return _read_outputs(path) or {}


def _read_outputs(path: str) -> dict[str, str] | None:
    """:func:`read_outputs`, None when there is no file. Most members write none: one open
    that fails, no other call. A link, a FIFO or anything but a regular file is not read
    (opened without following a link, without blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None  # (none: most members; or a link, not the member's file)
    out: dict[str, str] = {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with open(os.dup(fd), "rb") as fh:
            data = fh.read(_OUTPUTS_LIMIT + 1)
    except OSError:
        return out
    finally:
        os.close(fd)
    if len(data) > _OUTPUTS_LIMIT:
        out["_pwe_error"] = f"outputs larger than {_OUTPUTS_LIMIT} bytes; truncated"
        data = data[:_OUTPUTS_LIMIT]
    for line in data.decode("utf-8", "replace").splitlines():
        key, eq, value = line.partition("=")
        if eq and key.strip():
            out[key.strip()] = value
    return out


def outputs_path(task: dict, tmp_base: str | None) -> str:
    """Where a member attempt's ``$PWE_OUTPUTS`` is: beside its $TMPDIR when the pilot
    made one on its own node (``tmp_base``: node-local, so a member that writes no outputs
    costs the run's file system nothing), named by node, member and attempt (attempts kept
    apart; the pilot's guardian finds them by name after a crash: pilot/tmpdirs.py);
    else (a member on another node) in the run directory: ``outputs`` in a directory of its
    own, ``outputs.<member>.<attempt>`` in its node's."""
    if tmp_base is not None:
        return f"{tmp_base}/{task['n']}.{task['m']}.{task['a']}.outputs"
    if task.get("own"):
        return os.path.join(task["cwd"], "outputs")
    return f"{task['cwd']}/outputs.{task['m']}.{task['a']}"


def collect(task: dict) -> dict[str, str]:
    """A member that ended: its outputs (:func:`read_outputs`, from where
    :func:`outputs_path` put them), then what it leaves on the run's file system tidied:
    its outputs file removed once read (its values go with its ``end`` into the journal: no
    file of a member stays behind for them), a directory of its own tidied
    (:func:`pilot.spawn.tidy_member_dir`: removed when it is empty)."""
    path = task.get("_out") or outputs_path(task, None)
    out = _read_outputs(path)
    if out is not None:
        try:
            os.unlink(path)
        except OSError:
            pass
    if task.get("own"):
        tidy_member_dir(task["cwd"])
    if "_ret" in task:  # a function member's return value, over what it wrote to the file (pilot/pyworkers.py)
        out = {**(out or {}), **task.pop("_ret")}
    return out or {}


class Member:
    __slots__ = ("task", "pid", "placement", "threads", "exclusive", "launcher", "started", "deadline", "killed",
                 "term_at", "agent", "key", "cpu", "rss", "reason")

    def __init__(self, task: dict, pid: int, placement: Placement, threads: int, exclusive: bool, launcher: str):
        self.task = task
        self.pid = pid
        self.placement = placement
        self.threads = threads
        self.exclusive = exclusive
        self.launcher = launcher
        self.started = time.time()
        wall = task.get("wall")
        self.deadline = self.started + wall * 60 if wall else None
        self.killed: str | None = None  # why the pilot (or its agent) ended it: the end's ``why``
        self.reason: str | None = None  # and its ``reason`` (pilot/wire.py REASONS; None: exit)
        self.term_at = 0.0
        # set when a node agent runs it on another node: a pilot.remote.NodeAgent (not imported:
        # remote.py builds on this module)
        self.agent: Any = None
        self.key = pid
        self.cpu: float | None = None  # from the rusage of the reaped member (the end message's)
        self.rss: int | None = None

    def usage(self) -> dict:
        """``cpu`` and ``rss`` for its ``end`` message, where its reaper measured them."""
        return {} if self.cpu is None else {"cpu": self.cpu, "rss": self.rss}


def task_shape(task: dict) -> tuple[int, int, bool, int | None, int, int, int, int | None]:
    """(ranks, threads, exclusive, per-node core cap, GPUs, memory MB, tmp MB, ranks per
    node) a task asks for: the packer's arguments, in its order."""
    ranks = max(1, int(task.get("ranks") or 1))
    threads = max(1, int(task.get("threads") or task.get("cores") or 1))
    if "ranks" not in task and "threads" not in task:
        ranks, threads = 1, max(1, int(task.get("cores") or 1))
    cap = task.get("cap")
    rpn = task.get("rpn")
    rpn = int(rpn) if rpn and ranks > 1 and ranks % int(rpn) == 0 else None
    return (ranks, threads, bool(task.get("exclusive")), int(cap) if cap else None,
            int(task.get("gpus") or 0), int(task.get("mem") or 0), int(task.get("tmp") or 0), rpn)


def note_stderr(stream: Any, task: dict, text: str) -> None:
    """A `pwe: ...` line added to a member attempt's stderr in the pilot's output stream
    (``stream``: its :class:`pilot.streams.StreamWriter`): after what the member wrote,
    when its capture is still to be kept (:meth:`pilot.agent.PilotAgent.member_over`)."""
    if "_io" in task:
        task["_note"] = f"{task['_note']}\npwe: {text}" if "_note" in task else text
    else:
        stream.note(task["n"], task["m"], task["a"], text)


def say(msg: str) -> None:
    """A line in pilot.log, if the disk takes it (a full disk must not kill the pilot)."""
    try:
        print(f"pilot: {msg}", file=sys.stderr, flush=True)
    except OSError:
        pass


def killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
