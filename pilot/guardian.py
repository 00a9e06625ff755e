"""The pilot's guardian: how each member on the pilot's node ended, even when the pilot
itself is killed (kill -9, an OOM kill). Standard library only; Linux (elsewhere, or
where the kernel refuses, the pilot runs without one, as before).

Why. A member's exit status reaches its parent only. When the pilot is killed, the
members it started live on as orphans: one that was already over (a zombie the pilot
had not collected yet), one it had collected but not yet reported, and one that ends a
moment after the pilot died would each have its end lost, and run again: a member
completed twice. So the pilot process forks at its start (:func:`guard`): the parent
becomes the **guardian**, a child subreaper (``PR_SET_CHILD_SUBREAPER``) that does
nothing but wait; the child is the pilot. Orphans of the pilot are reparented to the
guardian, which collects them with their real exit statuses.

What the pilot shares with it, without a system call per member: a table in shared
memory (:class:`MemberTable`, an anonymous shared mapping made before the fork), one
entry per member it spawned here: its pid, node, index, attempt and state: running,
over (its exit status, seen with ``waitid(WNOWAIT)`` *before* the pilot collects it),
reported (its ``end`` is in the pilot's events). So at no moment is an end known only
to a process that can die with it.

When the pilot ends, however it ends, the guardian first lets the members still
running end on their own, for a grace of ``PWE_ORPHAN_GRACE`` seconds (default
5, :mod:`pilot.settings`; read before the fork: a bad one stops the pilot as it starts),
collecting each with its real exit status; then it kills every child
left (members still running: they ran with a pilot that can no longer report them, so
they run again, as their next attempt) and collects them all. It writes to
``orphans.jsonl`` in the pilot's directory, signed as the pilot's events are: an
``orphan_end`` (with the exit status) for each member that ended on its own but was never
reported (a zombie, one over but unreported in the table, or one that ended in the grace),
an ``orphan_killed`` for each it killed. What the members it collects wrote on stdout and
stderr (the pilot's capture files, opened again through ``/proc/PID/fd``) goes into a
stream of its own, ``out-guardian`` (:mod:`pilot.streams`). Then it exits with the pilot's status. The
engine reads the file once the guardian is gone (:mod:`pwe.engine.pilots`): an
``orphan_end`` is that attempt's end; the rest run again.

Why the grace. A member killed at once could be killed in the instant between its last
effect (its result written) and its exit: its work done, its end a kill, and it would run
again: completed twice (seen: 1 run in 2 of the twenty-kill test with both cores busy).
No one outside the member can tell that instant from the rest of its life; letting it
end on its own can. A member still running at the end of the grace is killed mid-work,
where such an instant is as unlikely as the grace is long against its exit. The grace
ends at once when the guardian is told to stop (the engine's cancel: a signal), and the
guardian leaves as soon as its last child has ended, so a pilot whose members are short
costs no wait. ``PWE_ORPHAN_GRACE=0`` kills at once, as before.

Signals sent to the guardian (the engine's SIGTERM to cancel a local pilot) are passed
on to the pilot; the pilot dies with the guardian (``PR_SET_PDEATHSIG``), so a pilot is
never left without one.

Members of local spawners (a node of many slots: the spawner is their parent, not the
pilot) and of node agents on the allocation's other nodes are covered by the spawner or
agent itself, which does the same (:mod:`pilot.nodeagent`: the grace, the kill, their ends
signed into ``orphans-spawner-*.jsonl`` / ``orphans-node-*.jsonl``); the guardian waits for
those helpers (the spawner, the agent's ssh or srun client), :data:`HELPER_MARGIN` s past
the grace, before it kills what is left. Not covered: an agent whose srun step SLURM kills
at once (its members run again, as after a node's death).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import struct
import sys
import time
from typing import Any, Callable, Iterator

from .bounded import read_lines
from .settings import NO_GUARDIAN, ORPHAN_GRACE
from .wire import BACK, DAMAGED, END, FORGED, MALFORMED, ORPHAN_END, ORPHAN_KILLED, START, decode, encode

ORPHANS = "orphans.jsonl"
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
FREE, RUNNING, OVER, REPORTED, HELPER = 0, 1, 2, 3, 4
#: how much longer than the members a helper (a spawner, a node agent's ssh or srun) is let
#: be once the pilot died: it gives its own members the grace, writes their ends, and leaves
HELPER_MARGIN = 5.0
# pid, state, exit status, attempt, member index, node id (NUL-padded: ids are at most 100 bytes)
_ENTRY = struct.Struct("<iiiiq104s")
_PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_hurry: list[int] = []  # a signal came during the grace: kill now


class MemberTable:
    """The members spawned on the pilot's node, in memory the guardian shares. The pilot
    writes (:meth:`spawned`, :meth:`over`, :meth:`reported`); the guardian reads."""

    def __init__(self, size: int):
        self.size = size
        self.mem = mmap.mmap(-1, size * _ENTRY.size)  # (anonymous, MAP_SHARED: seen across the fork)
        self.free = list(range(size - 1, -1, -1))
        self.at: dict[int, int] = {}  # pid -> entry (the pilot's own index)

    def spawned(self, pid: int, node: str, member: int, attempt: int) -> None:
        if not self.free:
            return  # (more running than entries: the guardian finds such a one by its environment)
        k = self.free.pop()
        self.at[pid] = k
        _ENTRY.pack_into(self.mem, k * _ENTRY.size, pid, RUNNING, 0, attempt, member, node.encode()[:104])

    def over(self, pid: int, rc: int) -> int | None:
        """The member with this pid has ended with ``rc`` (not yet collected); its entry,
        to give to :meth:`reported` once its end is written (None: not a member here)."""
        k = self.at.pop(pid, None)  # (its pid may be another member's as soon as it is collected)
        if k is not None:
            struct.pack_into("<ii", self.mem, k * _ENTRY.size + 4, OVER, rc)
        return k

    def reported(self, k: int) -> None:
        """The end of the member in entry ``k`` is in the pilot's events: the entry is free."""
        struct.pack_into("<i", self.mem, k * _ENTRY.size + 4, REPORTED)
        self.free.append(k)

    def helper(self, pid: int) -> None:
        """A process of the pilot's that starts members (a local spawner, a node agent's ssh
        or srun client): should the pilot die, the guardian lets it end its members itself
        (:data:`HELPER_MARGIN`)."""
        if self.free:
            k = self.free.pop()
            self.at[pid] = k
            _ENTRY.pack_into(self.mem, k * _ENTRY.size, pid, HELPER, 0, 0, -1, b"")

    def helper_gone(self, pid: int) -> None:
        """That helper has ended (or was closed on purpose): its entry is free."""
        k = self.at.pop(pid, None)
        if k is not None:
            struct.pack_into("<i", self.mem, k * _ENTRY.size + 4, FREE)
            self.free.append(k)

    def helpers(self) -> set[int]:
        """The pids of the helpers in the table."""
        out = set()
        for k in range(self.size):
            pid, state = struct.unpack_from("<ii", self.mem, k * _ENTRY.size)
            if state == HELPER:
                out.add(pid)
        return out

    def entries(self) -> Iterator[tuple[int, int, int, str, int, int]]:
        """(pid, state, rc, node, member, attempt) of each entry in use."""
        for k in range(self.size):
            pid, state, rc, attempt, member, node = _ENTRY.unpack_from(self.mem, k * _ENTRY.size)
            if state in (RUNNING, OVER):
                yield pid, state, rc, node.rstrip(b"\0").decode(errors="replace"), member, attempt


def peek_exit() -> tuple[int, int] | None:
    """(pid, exit status) of a child that has ended, without collecting it (so that its
    end can be put where the guardian sees it first); a signal is its negative number."""
    try:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None or not info.si_pid:
        return None
    rc = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
    return info.si_pid, rc


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def guard(directory: str, key: bytes | None, entries: int,
          tidy: Callable[[int], None] | None = None) -> MemberTable | None:
    """Fork the guardian. Returns in the pilot (the child) with the shared table; the
    guardian never returns from here (it exits with the pilot's status). None, without a
    fork, where a subreaper cannot be had (not Linux, refused) or ``PWE_NO_GUARDIAN`` is set.
    ``tidy(pid)``: called with the pilot's pid once it is gone and its members have ended
    (what the pilot could not tidy itself: the $TMPDIRs of its members)."""
    if NO_GUARDIAN.get() or not sys.platform.startswith("linux"):
        return None
    grace = ORPHAN_GRACE.get()  # (now: a bad value stops the pilot here, not its guardian later)
    if not _prctl(PR_SET_CHILD_SUBREAPER, 1):
        return None
    table = MemberTable(entries)
    guardian = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _prctl(PR_SET_CHILD_SUBREAPER, 0)
        if os.getppid() != guardian:  # it died before the line above: so do we
            os._exit(1)
        return table
    _watch(child, table, directory, key, tidy, grace)
    raise AssertionError("unreachable")


def _watch(child: int, table: MemberTable, directory: str, key: bytes | None,
           tidy: Callable[[int], None] | None, grace: float) -> None:
    for sig in _PASSED_ON:
        signal.signal(sig, lambda signum, _frame: _pass_on(child, signum))
    while True:
        try:
            pid, status = os.waitpid(child, 0)
        except ChildProcessError:
            status = 0
            break
        if pid == child:
            break
    for sig in _PASSED_ON:  # (the clean-up below is not to be cut short: a signal ends the grace)
        signal.signal(sig, lambda signum, _frame: _hurry.append(signum))
    try:
        _clean_up(table, directory, key, grace)
        if tidy is not None:
            tidy(child)  # (what the pilot could not tidy: its members' $TMPDIRs; pilot/tmpdirs.py)
    except Exception as exc:  # noqa: BLE001 - whatever happens, the pilot's status is passed on
        print(f"pilot guardian: {exc!r}", file=sys.stderr, flush=True)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _pass_on(child: int, signum: int) -> None:
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass


def _children() -> dict[int, bool]:
    """This process's children: pid -> whether it has ended (a zombie)."""
    me, out = os.getpid(), {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            out[int(name)] = fields[0] == b"Z"
    return out


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # (a member is its own session's leader)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _identity(pid: int) -> tuple[str, int, int] | None:
    """(node, member, attempt) of a live member, from the environment it started with."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = dict(v.split(b"=", 1) for v in fh.read().split(b"\0") if b"=" in v)
        return env[b"PWE_NODE"].decode(), int(env[b"PWE_MEMBER"]), int(env[b"PWE_ATTEMPT"])
    except (OSError, KeyError, ValueError):
        return None


def _clean_up(table: MemberTable, directory: str, key: bytes | None, wait: float = 0.0) -> None:
    entries = list(table.entries())
    known = {pid: (node, m, a) for pid, state, _, node, m, a in entries if state == RUNNING}
    over = {pid: (node, m, a) for pid, state, _, node, m, a in entries if state == OVER}
    # over and collected by the pilot, not yet reported: their ends are here alone
    msgs: list[dict[str, Any]] = [{"k": ORPHAN_END, "n": node, "m": m, "a": a, "rc": rc, "pid": pid}
                                  for pid, state, rc, node, m, a in entries if state == OVER]
    held: dict[int, tuple[int, int]] = {}  # pid -> its stdout and stderr, opened again here
    helpers = table.helpers()
    who, ended, killed = _end_children(known, over, wait, held, helpers)
    # one the table did not have yet (spawned in the instant before the pilot died: its
    # environment not yet its own, or gone with it): the one member the pilot started and
    # had not entered, when exactly one is missing (it spawns one member at a time)
    unknown = [pid for pid in ended if who.get(pid) is None and pid not in over and pid not in helpers]
    if len(unknown) == 1:
        who[unknown[0]] = _the_missing_one(directory, key, set(known.values()) | set(over.values()), who)
    msgs += _ends_of_children(ended, who, killed)
    _keep_output(directory, held, who)
    if msgs:
        for msg in msgs:
            msg["t"] = round(time.time(), 3)
        with open(os.path.join(directory, ORPHANS), "ab") as fh:
            fh.write(encode(msgs, key))


def _keep_output(directory: str, held: dict[int, tuple[int, int]], who: dict) -> None:
    """The stdout and stderr of the members collected here, into the guardian's own stream."""
    if not held:
        return
    from .streams import StreamWriter

    writer = StreamWriter(directory, "out-guardian")
    for pid, fds in held.items():
        if who.get(pid) is not None:
            writer.keep(*who[pid], fds)
        else:
            writer.drop(fds)
    writer.close()


def _hold_output(pid: int) -> tuple[int, int] | None:
    """A member's stdout and stderr opened again (the pilot's capture files), or None."""
    try:
        out = os.open(f"/proc/{pid}/fd/1", os.O_RDONLY)
    except OSError:
        return None
    try:
        return out, os.open(f"/proc/{pid}/fd/2", os.O_RDONLY)
    except OSError:
        os.close(out)
        return None


def _end_children(known: dict[int, tuple[str, int, int]], over: dict[int, tuple[str, int, int]],
                  wait: float, held: dict[int, tuple[int, int]] | None = None, helpers: frozenset | set = frozenset(),
                  ) -> tuple[dict[int, tuple[str, int, int] | None], dict[int, int], set[int]]:
    """End every child: those the pilot left, and those reparented here meanwhile (a killed
    spawner's or agent's members): each given the grace (``wait``) to end on its own, then
    killed if still alive; all collected. ``helpers`` (spawners, agents' clients: they give
    their own members the grace and write their ends) are killed :data:`HELPER_MARGIN` s
    later, if still there.
    Who each one was (None: a stranger), the exit status of each one collected, and those
    killed here."""
    children: dict[int, bool] = {}  # pid -> it had ended (a zombie) when first seen
    who: dict[int, tuple[str, int, int] | None] = {}
    ended: dict[int, int] = {}
    killed: set[int] = set()
    kill_at = time.monotonic() + wait
    helpers_at = kill_at + HELPER_MARGIN
    deadline = helpers_at + 10
    while time.monotonic() < deadline:
        now = time.monotonic()
        for pid, zombie in _children().items():
            if pid not in children:
                children[pid] = zombie
                # (a zombie the table has as over was reported above: it is no stranger)
                who[pid] = None if pid in over else known.get(pid) or (None if zombie else _identity(pid))
                if held is not None and who[pid] is not None and not zombie:
                    fds = _hold_output(pid)
                    if fds is not None:
                        held[pid] = fds
            if not zombie and pid not in killed and (now >= (helpers_at if pid in helpers else kill_at) or _hurry):
                killed.add(pid)
                _kill(pid)
        try:
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                ended[pid] = os.waitstatus_to_exitcode(status)
                if pid not in children:  # (ended before any scan saw it: on its own)
                    children[pid], who[pid] = True, known.get(pid)
        except ChildProcessError:
            break
        time.sleep(0.01)
    return who, ended, killed


def _ends_of_children(ended: dict[int, int], who: dict[int, tuple[str, int, int] | None],
                      killed: set[int]) -> list[dict[str, Any]]:
    """The orphan messages of the members among the children collected (strangers left out)."""
    msgs = []
    for pid, rc in ended.items():
        ident = who.get(pid)
        if ident is None:
            continue
        node, m, a = ident
        # ended before it was killed (in the grace, or before the kill landed): on its own,
        # with that status; else killed here
        natural = pid not in killed or rc != -signal.SIGKILL
        msgs.append({"k": ORPHAN_END if natural else ORPHAN_KILLED, "n": node, "m": m, "a": a, "rc": rc,
                     "pid": pid})
    return msgs


def _the_missing_one(directory: str, key: bytes | None, known: set, who: dict) -> tuple[str, int, int] | None:
    """The member the pilot's events say it started and that neither the table (``known``:
    its members running or over) nor a live process accounts for, when there is exactly
    one such."""
    started: dict[tuple[str, int, int], int] = {}
    try:
        for line in read_lines(os.path.join(directory, "events.jsonl"), within=directory):
            for msg in _decoded(line, key):
                k = (msg.get("n"), msg.get("m"), msg.get("a"))
                if msg.get("k") == START:
                    started[k] = 1
                elif msg.get("k") in (END, BACK):
                    started.pop(k, None)
    except OSError:
        return None
    accounted = known | {v for v in who.values() if v}
    left = [k for k in started if k not in accounted]
    return left[0] if len(left) == 1 else None


def _decoded(line: bytes, key: bytes | None) -> list[dict[str, Any]]:
    """The message of one whole line; none for one forged, damaged or cut short."""
    msgs, _ = decode(line if line.endswith(b"\n") else line + b"\n", key)
    return [m for m in msgs if m.get("k") not in (FORGED, MALFORMED, DAMAGED)]


def read_orphans(directory: str, key: bytes | None) -> list[dict[str, Any]]:
    """(The engine's side.) What a pilot's guardian wrote, and its spawners
    (``orphans-*.jsonl``): the messages whose signature holds (others are dropped: a member
    must not be able to forge its own end), each with ``_by``, the file's name."""
    out = []
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("orphans") and n.endswith(".jsonl"))
    except OSError:
        return out
    for name in names:
        out += [dict(m, _by=name) for m in read_orphans_file(os.path.join(directory, name), key)]
    return out


def read_orphans_file(path: str, key: bytes | None) -> list[dict[str, Any]]:
    """The orphan messages of one such file whose signature holds (none where there is no
    file yet, or it is not a regular file of its directory; a damaged one: what was read)."""
    out: list[dict[str, Any]] = []
    try:
        for line in read_lines(path, within=os.path.dirname(path)):
            out += [m for m in _decoded(line, key) if m.get("k") in (ORPHAN_END, ORPHAN_KILLED)]
    except OSError:
        pass
    return out

