"""After a crash: what the engine does to pick a run up again, as functions over the
run's state and journal and the pilots' own files, each given what it reads and the
callable that journals and applies a record (``record``: :meth:`pwe.engine.ledger.Ledger.take`):
:func:`recover` (what a damaged or torn journal lost,
read back from the pilots' spools; it returns what the pilots said of themselves, for
their reattachment: :meth:`pwe.engine.pilots.PilotWork.reattach`), :func:`orphan_ends` (the
ends a dead pilot's guardian saw) and :func:`end_orphans` (the members a dead pilot of this
machine left running, ended before they run again)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pilot.wire import BACK, DOWN, DRAIN, END, START, UP, channel_key

from ..base.states import ASSIGNED, READY, RUNNING
from ..runstate import records

if TYPE_CHECKING:
    from pilot.transport import Transport

    from ..runstate.state import RunState
    from .handles import PilotHandle
    from .ledger import Ledger

#: a callable that journals a record and applies it (:meth:`pwe.engine.ledger.Ledger.take`)
Record = Callable[[dict[str, Any]], Any]


def _kill_group(pgid: int, started: int | None, alone: bool = False) -> None:
    """SIGKILL to a process group (``alone``: the process) while its leader is the
    process found (its start time ``started``, pilot/identity.py)."""
    from pilot.identity import signal_same

    signal_same(pgid, started, signal.SIGKILL, group=not alone)


def _task_key(msg: dict[str, Any]) -> tuple[str, int, int] | None:
    """(node, member, attempt) of a task or of a pilot's message about one; None when it
    has not those fields (damaged)."""
    n, m, a = msg.get("n"), msg.get("m"), msg.get("a")
    return (n, m, a) if isinstance(n, str) and isinstance(m, int) and isinstance(a, int) else None


#: each pilot's spool as read whole: (its events, the cursor after them, the tasks it holds)
Files = dict[str, tuple[list[dict[str, Any]], Any, Counter]]


def recover(ledger: Ledger, transport: Callable[[str, str], Transport], first_lane: str,
            event_record: Callable[[str, dict[str, Any]], dict[str, Any] | None]) -> dict[str, list[dict[str, Any]]]:
    """The journal was damaged (records skipped) or cut short: what it lost, the pilots'
    own files still say, and they are read whole again. ``transport(lane, pilot)``: the
    transport to a pilot (``first_lane`` for one whose lane the journal lost);
    ``event_record(pilot, message)``: the journal record of a pilot's start or end
    (:meth:`pwe.engine.intake.Intake.event_record`, judged). Returns what each live pilot
    said of itself (up, drain, down), for its reattachment.

    Each pilot's tasks file says what it was sent, its events what it handed back,
    started and ended. So: the starts and ends of the members the journal has on each
    pilot are applied again first (a member whose end the journal lost ended, even on
    a pilot that is gone: it is not run again); then a member the journal has on a
    pilot that is gone, or on one that does not hold it (never sent, or handed back),
    is handed back; a task a pilot holds that the journal forgot is that pilot's again
    (never sent twice: the pilot would run it twice); then every start and end is applied
    again (one already applied changes nothing). Only what changes the state is
    journaled, and each pilot's cursor moves to the end of what was read."""
    st = ledger.state
    files = _read_spools(st, transport, first_lane)
    # first what the pilots' files say of the members the journal has on them: one whose
    # end it lost on a pilot that is gone ended there, and is no stray to run again
    _apply_again(ledger, files, event_record)
    _hand_back_strays(ledger, files)
    started = {_task_key(ev): pid_ for pid_, (events, _, _) in files.items() for ev in events
               if ev.get("k") == START}
    live = [q for q in reversed(list(files)) if st.pilots[q].get("alive")]
    # an end applied again may release members whose assignment the journal skipped
    # (they were not ready then): until nothing changes
    while _adopt(ledger, files, started, live) + _apply_again(ledger, files, event_record):
        pass
    recovered: dict[str, list[dict[str, Any]]] = {}
    for pid_, (events, cursor, _) in files.items():
        if st.pilots[pid_].get("alive") and cursor is not None:
            ledger.take(records.offset(pid_, cursor))
            recovered[pid_] = [ev for ev in events if ev.get("k") in (UP, DRAIN, DOWN)]
    _hand_back_strays(ledger, files)  # (a pilot that is gone and had started one the journal forgot)
    return recovered


def _read_spools(st: RunState, transport: Callable[[str, str], Transport], first_lane: str) -> Files:
    files: Files = {}
    for pid_ in st.pilots:
        files[pid_] = ([], None, Counter())  # (unread: its cursor stays where it was)
        try:
            spool = transport(st.pilots[pid_].get("lane") or first_lane, pid_)
        except OSError:
            continue  # (its directory is gone, and cannot be made: nothing to read)
        try:
            events, cursor = spool.receive(0)
            backs = Counter(_task_key(ev) for ev in events if ev.get("k") == BACK)
            files[pid_] = (events, cursor, spool.sent() - backs)
        except OSError:
            pass
        finally:
            spool.close()
    return files


def _hand_back_strays(ledger: Ledger, files: Files) -> None:
    """A member the journal has on a pilot that is gone, or on one that does not hold it."""
    st = ledger.state
    for nid, ns in st.nodes.items():
        for i, pid_ in list(ns.pilot.items()):
            if not (st.pilots.get(pid_, {}).get("alive") and (nid, i, ns.attempt[i]) in files[pid_][2]):
                ledger.take(records.unassign(nid, i, pid_))


def _adopt(ledger: Ledger, files: Files, started: dict[Any, str], live: list[str]) -> int:
    """A task the journal forgot: the pilot that started it has it, else the newest live
    pilot that holds it; one nobody started on a pilot that is gone runs again."""
    st = ledger.state
    n = 0
    for key, pid_ in list(started.items()) + [(key, q) for q in live for key in files[q][2]]:
        nid, i, a = key or ("", -1, 0)
        ns = st.nodes.get(nid)
        if ns is not None and 0 <= i < ns.size and ns.state[i] == READY and ns.attempt[i] == a - 1 \
                and key in files[pid_][2]:
            ledger.take(records.assign(nid, i, a, pid_))
            n += 1
    return n


def _apply_again(ledger: Ledger, files: Files,
                 event_record: Callable[[str, dict[str, Any]], dict[str, Any] | None]) -> int:
    """Every start and end the pilots' files hold, taken again where it changes the state
    (its member assigned, or running, as that attempt on that pilot: a start of one running
    already, an end of one ended, change nothing and are not written again)."""
    st = ledger.state
    n = 0
    for pid_, (events, _, _) in files.items():
        for ev in events:
            key = _task_key(ev) if ev.get("k") in (START, END) else None
            ns = st.nodes.get(key[0]) if key else None
            if ns is None or not 0 <= key[1] < ns.size or (ev["k"] == START and ns.state[key[1]] != ASSIGNED):
                continue
            i = key[1]
            rec = event_record(pid_, ev)
            if rec is not None and ns.state[i] in (ASSIGNED, RUNNING) and ns.attempt[i] == rec["a"] \
                    and ns.pilot.get(i) == pid_ and ledger.take(rec) is not None:
                n += 1
    return n


def orphan_ends(pilot: PilotHandle, st: RunState, run_dir: Path, secret: bytes | None,
                take: Callable[[PilotHandle, dict[str, Any]], None], record: Record,
                fault: Callable[[str, int], str | None] | None = None) -> None:
    """What the pilot's guardian saw when the pilot died (pilot/guardian.py): a member
    that ended on its own but whose end the pilot never reported ends with that status
    now, as its pilot would have said it (outputs read from its directory; its products
    judged by ``fault``, as the pilot judges them: an exit 0 whose products do not count
    ends ``invalid``; a validate that failed is in its outputs), instead of running
    again. Members the guardian killed (still running: no result came back), and ends by
    a kill signal, are not ends: they run again, as their next attempt. Read once the
    guardian is gone; its lines are signed with the pilot's key; only from the pilot's
    own directory of this run (none read from one that is not)."""
    from pilot.guardian import ORPHANS, read_orphans
    from pilot.members import KILLED
    from pilot.wire import ORPHAN_END

    from ..base.regular import Outside, pilot_dir

    key = channel_key(secret, pilot.id, True) if secret is not None else None
    try:  # (its own directory of this run: one that is a link, to another run or anywhere, is unreadable)
        own = Path(pilot_dir(run_dir, pilot.id))
    except Outside:
        return  # (no end read: its members run again)
    for msg in read_orphans(str(own), key):
        nid, i, a, rc = msg.get("n"), msg.get("m"), msg.get("a"), msg.get("rc")
        if msg["k"] != ORPHAN_END or type(rc) is not int or rc in KILLED or nid not in st.nodes:
            continue
        ns = st.nodes[nid]
        if type(i) is not int or not 0 <= i < ns.size or ns.attempt[i] != a or ns.pilot.get(i) != pilot.id \
                or ns.state[i] not in (ASSIGNED, RUNNING):
            continue  # (reported after all, or not this pilot's: its own end stands)
        if ns.state[i] == ASSIGNED:  # (it ran: its start was written before it was spawned)
            record(records.start(nid, i, a, pilot.id, None, msg.get("pid", 0)))
        out = _orphan_outputs(own, run_dir, nid, i, a)  # (also of a failure, as its pilot would: a validate's mark)
        end = {"k": END, "n": nid, "m": i, "a": a, "rc": rc, "t": msg.get("t"), "out": out}
        said = judged(rc, out, fault(nid, i) if rc == 0 and fault is not None else None)
        if said:
            end.update(said)
        take(pilot, end)
        by = "the pilot's guardian" if msg.get("_by") == ORPHANS else "the spawner that started it"
        record(records.note(f"pilot {pilot.id}: {nid}:{i} attempt {a} ended (exit {rc}) as its pilot died; its end "
                            f"came from {by}", msg.get("t")))


def judged(rc: int, out: dict[str, str], fault: str | None) -> dict[str, Any] | None:
    """An orphan's end as its pilot would have judged it (pilot/agent.py ``finish``): an
    exit 0 whose products do not count (``fault``) is rc 1 ``invalid``; a validate's mark
    in its outputs (pilot.members.INVALID_OUTPUT; read from a function member's outputs
    file, where its worker wrote it: pilot/pyworker.py) is ``invalid``, the mark taken out.
    None: as it is."""
    from pilot.members import INVALID_OUTPUT
    from pilot.wire import REASON_INVALID

    if rc == 0 and fault:
        return {"rc": 1, "why": fault, "reason": REASON_INVALID}
    if INVALID_OUTPUT in out:
        out.pop(INVALID_OUTPUT)
        if rc:
            return {"why": f"its validate exited {rc}: the result is not good", "reason": REASON_INVALID}
    return None


def _orphan_outputs(pilot_dir: Path, run_dir: Path, nid: str, i: int, a: int) -> dict[str, str]:
    """The outputs of a member that ended after its pilot died: where its guardian kept them
    (pilot.tmpdirs.keep_outputs), else where a member on another node wrote them, in its own
    directory or its node's (pilot.members.outputs_path); each file removed once read."""
    from pilot.members import collect
    from pilot.tmpdirs import LEFT_OUTPUTS

    from ..runstate.rundir import member_path

    members = str(run_dir / "members")
    own = member_path(members, nid, i)
    for task in ({"_out": f"{pilot_dir}/{LEFT_OUTPUTS}/{nid}.{i}.{a}.outputs"},
                 {"_out": f"{own}/outputs", "own": 1, "cwd": own},
                 {"n": nid, "m": i, "a": a, "cwd": f"{members}/{nid}"}):
        out = collect(task)
        if out:
            return out
    return {}


def end_orphans(pilot: PilotHandle, inflight: list[tuple[str, int]], st: RunState, run_id: str,
                record: Record) -> None:
    """End what a pilot of this machine that is gone left running: a member orphaned by
    a killed pilot would run on beside its re-issue. The pilot writes a member's
    start before it spawns it, and its messages were read to the end first, so each
    member it may have started is known; they are found by the environment they
    started with (exactly: this run's id, the member's node, index and attempt; a pid
    a pilot said is never signalled alone, it may be another process's by now) and their
    process groups killed, each while its leader is that process (pilot/identity.py:
    pid and start time). One found that the journal has not seen start has its start
    journaled (the attempt happened). Members on the pilot's other nodes end with
    their node agents, whose ssh sessions end with the pilot."""
    from pilot.identity import start_time
    from pilot.spawn import members_of

    mine = {(nid, str(i), str(st.nodes[nid].attempt[i])): (nid, i) for nid, i in inflight}
    found = members_of(run_id) if mine else {}
    starts = {pid: start_time(pid) for pid in found}  # (as found: one recycled since is not signalled)
    for pid, key in found.items():
        if key not in mine:
            continue
        nid, i = mine[key]
        if st.nodes[nid].state[i] == ASSIGNED:
            record(records.start(nid, i, int(key[2]), pilot.id, None, pid))
        try:
            group = os.getpgid(pid)
        except ProcessLookupError:
            continue
        # its group (a member leads its own) when the leader is a member found here too
        if found.get(group) == key:
            _kill_group(group, starts.get(group))
        else:
            _kill_group(pid, starts.get(pid), alone=True)
