"""The pilot's helper that starts members: one per other node (over ssh), and on the
pilot's own node the local spawners (over pipes) that share its slots when it has many.

Started by the pilot as ``ssh NODE python3 -m pilot.nodeagent``, or as a child of the
pilot on its own node; reads JSON lines on stdin and answers on stdout (standard
library only; never pickle): ``run`` and ``kill`` in, ``started``, ``ended`` and ``failed``
out, as :mod:`pilot.wire` lists them (pilot <-> node agent).

What it says in one pass of its loop goes out in one write. It ends, killing its
members, when stdin closes: the pilot is gone, or the connection is. SIGTERM, SIGHUP or
SIGINT (the batch system ending its step) kills its members too, at once. Members get the
same treatment as on the pilot's own node: own directory, own session, stdout and stderr
captured in this node's scratch and kept, as each member is reaped, in this agent's own
output stream (``--stream PATH``: :mod:`pilot.streams`; ``--cap`` bytes of each at most;
``--scratch DIR``, else $TMPDIR or /tmp).

An agent whose pilot died (stdin closed) does what the pilot's guardian does for the
pilot's own children (:mod:`pilot.guardian`), since its members are its children, not the
pilot's: it gives them the grace the pilot told it (``orphans``, the pilot's first message)
to end on their own, then kills the rest, and appends each end, signed with the key the
pilot gave it, to ``orphans-NAME.jsonl`` in the pilot's directory as it happens: an
``orphan_end`` for one that ended on its own (its output kept), an ``orphan_killed`` for
one it killed. The ends it had said to the pilot last (``RECENT``; the pilot may have died
before it wrote them into its events) are written there first, as ``orphan_end``: the
engine takes an end from there only for an attempt whose end it has not had. Without that
message (an older pilot) the members are killed at once, as before.

Inside SLURM this agent is one ``srun`` step: should that ``srun`` client be killed, SLURM
ends the step at once with SIGKILL to every process of it here, this agent and its members
(slurmstepd; seen with Slurm 22.05 under proctrack/linuxproc, and a cgroup holds them as
well): no SIGTERM, no KillWait, no end of stdin comes first, so there is no grace to give
and no end to write; its members run again, as after a node's death.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import time
from collections import deque

from .bounded import open_append
from .memwatch import MemoryWatch
from .pyworkers import PyWorker, WorkerPool, call_of, judged, outputs, split_env, usage
from .spawn import REFUSED_FOR_NOW, Spawner, environ, member_base_env, reaped, start_failure
from .streams import StreamWriter
from .tmpdirs import make_fresh, remove_tree, tmp_root
from .wire import (AGENT_ENDED, AGENT_FAILED, AGENT_KILL, AGENT_ORPHANS, AGENT_RUN, AGENT_STARTED, ORPHAN_END,
                   ORPHAN_KILLED, REASON_OOM, encode)

#: the most warm workers of function members a node agent keeps (its pilot places no more
#: calls at once than the node's slots; this bounds idle ones of many functions)
POOL_MOST = 64
#: how many of the ends said last are kept, to be written as orphans should the pilot die
#: before it took them in (a pipe of 64 KiB holds about a thousand)
RECENT = 4096


class Agent:
    """The members this agent started and what it has to say of them (one write a pass)."""

    def __init__(self, out, stream: StreamWriter) -> None:
        self.out = out
        self.stream = stream
        self.io: dict[int, tuple] = {}  # pid -> (capture fds, node, member, attempt)
        self.base_env = member_base_env()
        self.running: dict[int, int] = {}  # pid -> id
        self.tmps: dict[int, str] = {}     # pid -> the member's own $TMPDIR, made on this node
        self.made: set[str] = set()
        self.by_id: dict[int, int] = {}    # id -> pid
        self.spawner = Spawner()
        self.memory = MemoryWatch()  # members' memoryPerMember (a run's ``mem``), as the pilot does
        self.said: list[bytes] = []
        self.partial = b""  # a line of stdin not yet whole
        self.open_in = True  # stdin not closed yet
        # should the pilot die (see the module): where its members' ends go, signed, and
        # the grace they get; the ends said last; when the grace ends; those killed then
        self.orphans: str | None = None
        self.key: bytes | None = None
        self.grace = 0.0
        self.recent: deque = deque(maxlen=RECENT)
        self.kill_at: float | None = None
        self.killed: set[int] = set()
        # function members (a run's ``py``): calls to warm workers of this node (pilot/pyworkers.py)
        self.pool: WorkerPool | None = None
        self.sel = None  # (the loop's selector: the workers' sockets join it)
        self.calls: dict[int, tuple] = {}  # a worker's pid -> (its call's mem, its outputs' file)
        self.gone: dict[int, str] = {}  # a worker's pid -> why its call ended with it (pyworkers.WorkerPool.ended_why)
        self.stopped: set[int] = set()  # workers signalled while a call ran: replaced, whatever they answer

    def say(self, **msg) -> None:
        self.said.append(_encode(msg).encode() + b"\n")

    def send(self) -> None:
        if self.said:
            data = b"".join(self.said)
            self.said.clear()
            try:
                self.out.write(data)
                self.out.flush()
            except BrokenPipeError:
                pass

    def fresh_tmp(self, msg: dict) -> bool:
        """The member's own $TMPDIR made on this node, where the pilot asks (``tmp``); False
        (said: ``failed``, ``scratch``) when this node's scratch takes none."""
        tmp = msg.get("tmp")
        if tmp:  # this node's own fresh $TMPDIR for the member (the pilot's is elsewhere)
            try:
                make_fresh(tmp)
            except OSError as exc:  # (this node's scratch, not the member: the pilot queues it elsewhere)
                self.say(k=AGENT_FAILED, id=msg["id"], rc=1, why=f"cannot make a member's $TMPDIR under "
                         f"{os.path.dirname(os.path.dirname(tmp))}: {exc.strerror or exc}", scratch=1)
                return False
        return True

    def run(self, msg: dict) -> None:
        if msg.get("py"):
            self.call(msg)
            return
        env = environ(self.base_env, msg.get("env") or {})
        argv = msg["argv"]
        tmp = msg.get("tmp")
        if not self.fresh_tmp(msg):
            return
        try:
            fds = self.stream.capture()
            try:
                pid = self.spawner.spawn(argv, env, msg["cwd"], msg.get("cmd") or " ".join(argv), fds,
                                         made=bool(msg.get("made")))
            except OSError:
                self.stream.drop(fds)
                raise
        except OSError as exc:
            rc, why = start_failure(exc)
            if exc.errno in REFUSED_FOR_NOW:  # (this node's limit for now: the pilot hands it back)
                self.say(k=AGENT_FAILED, id=msg["id"], rc=rc, why=exc.strerror or why, again=1)
            else:
                self.say(k=AGENT_FAILED, id=msg["id"], rc=rc, why=why)
            if tmp:
                remove_tree(tmp)
            return
        self.started(msg, pid, fds, tmp, watch=False)

    def started(self, msg: dict, pid: int, fds: tuple, tmp: str | None, watch: bool) -> None:
        """A member of ``msg`` (a command's process, or a function member's worker) now
        runs as ``pid``: known by its id and pid, its $TMPDIR ``tmp`` removed as it ends,
        its output ``fds`` kept into the stream, its memory limited (``watch``: looked at
        while it runs, as a worker's call is), and said ``started``."""
        if tmp:
            self.tmps[pid] = tmp
            self.made.add(tmp)
        self.running[pid] = msg["id"]
        self.io[pid] = ((*fds, pid), msg.get("n", "?"), msg.get("m", 0), msg.get("a", 0))
        self.by_id[msg["id"]] = pid
        if msg.get("mem"):
            self.memory.attach(pid, pid, int(msg["mem"]), watch=watch)
        self.say(k=AGENT_STARTED, id=msg["id"], pid=pid)

    def call(self, msg: dict) -> None:
        """A function member: a call to a warm worker of its function here (pilot/pyworkers.py),
        said ``started`` as a command is, ``ended`` with its outputs (``out``) as it answers."""
        if not self.fresh_tmp(msg):
            return
        env = msg.get("env") or {}
        shared, own = split_env(env)
        if self.pool is None:
            self.pool = WorkerPool(os.path.dirname(self.stream.path), self.base_env, POOL_MOST)
            self.pool.sel = self.sel
        self.pool.collect(self.running)
        tmp = msg.get("tmp")
        try:
            box = msg.get("box")
            worker = self.pool.get(str(msg["py"]), shared, box if isinstance(box, dict) else None)
            fds = self.stream.capture()
        except OSError as exc:
            self.say(k=AGENT_FAILED, id=msg["id"], rc=127 if exc.errno == 2 else 126,
                     why=f"cannot start a Python worker for {msg['py']}: {exc.strerror or exc}")
            if tmp:
                remove_tree(tmp)
            return
        try:
            self.pool.send(worker, call_of(msg, own), fds)
        except OSError as exc:  # (gone before it had the call: not the member's doing, it goes back)
            self.stream.drop(fds)
            self.pool.lost(worker)
            self.say(k=AGENT_FAILED, id=msg["id"], rc=1, why=f"its Python worker ended: {exc.strerror or exc}",
                     again=1)
            if tmp:
                remove_tree(tmp)
            return
        worker.member = msg["id"]
        self.calls[worker.pid] = (msg.get("mem"), env.get("PWE_OUTPUTS"))
        self.started(msg, worker.pid, fds, tmp, watch=True)

    def answered(self, worker: PyWorker) -> None:
        """What a worker said: its call's answer (its end, said as a command's is, with its
        outputs); its socket closed: it goes (its call ends as the reaper collects it)."""
        got = self.pool.answers(worker) if self.pool is not None else None
        if got is None:
            if self.pool is not None:
                if worker.member is not None and self.running.get(worker.pid) == worker.member:
                    self.gone[worker.pid] = self.pool.ended_why(worker)  # (said with its end: reap)
                self.pool.lost(worker)
            return
        for msg in got:
            self._answer(worker, msg)

    def _answer(self, worker: PyWorker, msg: dict) -> None:
        pid = worker.pid
        ident = self.running.get(pid)
        if ident is None or ident != worker.member:
            return  # (ended already: its worker was reaped first)
        del self.running[pid]
        self.by_id.pop(ident, None)
        fds, n, m, a = self.io.pop(pid)
        mem, out_file = self.calls.pop(pid, (None, None))
        rc = msg.get("rc") if type(msg.get("rc")) is int else 1
        self.stream.keep(n, m, a, (fds[0], fds[1], None))  # (given back before it answered: used again)
        if pid in self.tmps:
            remove_tree(self.tmps.pop(pid))
        over = self.memory.ended(pid, None, rc) if self.memory.limits else None
        why, reason = judged(msg, mem, over)
        cpu, rss = usage(msg)
        out = outputs(msg)
        if pid in self.stopped or reason or msg.get("broken") or pid in self.killed:
            self.stopped.discard(pid)
            self.pool.lost(worker)
        else:
            self.pool.back(worker)
        if out and (not self.open_in or self.orphans is not None):
            # (where its end may be an orphan's, read from the file by the engine: written there too)
            from .pyworker import write_outputs

            write_outputs(out_file, out)
        t = round(time.time(), 3)
        if not self.open_in:
            self.write_orphans([{"k": ORPHAN_END, "n": n, "m": m, "a": a, "rc": rc, "pid": pid, "t": t}])
            return
        fields = {"why": why, "reason": reason}
        self.say(k=AGENT_ENDED, id=ident, rc=rc, cpu=cpu, rss=rss, **{k: v for k, v in fields.items() if v},
                 **({"out": out} if out else {}))
        if self.orphans is not None:
            self.recent.append((n, m, a, rc, pid, t))

    def kill(self, msg: dict) -> None:
        if msg["id"] in self.by_id and self.by_id[msg["id"]] in self.calls:
            self.stopped.add(self.by_id[msg["id"]])  # (a worker told to stop is replaced)
        if msg["id"] in self.by_id:
            try:
                os.killpg(self.by_id[msg["id"]], int(msg.get("sig", 15)))
            except OSError:
                pass

    def kill_all(self) -> None:
        """Every member's process group, SIGKILL."""
        for pid in self.running:
            self.killed.add(pid)
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

    def take_orphans(self, msg: dict) -> None:
        """Where the ends go should the pilot die, and the grace (the pilot's first message);
        none (``path`` absent): the pilot closes on purpose, what runs is killed at once."""
        self.orphans = str(msg["path"]) if msg.get("path") else None
        self.key = bytes.fromhex(msg["key"]) if msg.get("key") else None
        self.grace = max(0.0, float(msg.get("grace") or 0))

    def pilot_lost(self, now: float) -> None:
        """Stdin closed: the pilot is gone. The ends said last, which it may not have taken
        in, written as orphans; the members running get the grace, or are killed at once
        (no grace, or nowhere to say their ends)."""
        self.open_in = False
        if self.orphans is None:
            self.kill_all()
            return
        self.write_orphans([{"k": ORPHAN_END, "n": n, "m": m, "a": a, "rc": rc, "pid": pid, "t": t}
                            for n, m, a, rc, pid, t in self.recent])
        self.recent.clear()
        if self.grace <= 0:
            self.kill_all()
        else:
            self.kill_at = now + self.grace

    def write_orphans(self, msgs: list[dict]) -> None:
        """Ends appended, signed, to this agent's orphans file (owner-only); one write."""
        if not msgs or self.orphans is None:
            return
        try:  # (a regular file of the pilot's directory only, never a FIFO waited on: bounded.open_append)
            with open_append(self.orphans, within=os.path.dirname(self.orphans), mode=0o600) as fh:
                fh.write(encode(msgs, self.key))
        except OSError as exc:
            print(f"node agent: cannot write {self.orphans}: {exc}", file=sys.stderr, flush=True)

    def take(self, data: bytes) -> None:
        """What the pilot wrote on stdin: each whole line's message done."""
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            if line.strip():
                msg = json.loads(line)
                on = _ON.get(msg["k"])
                if on is not None:
                    on(self, msg)

    def reap(self) -> None:
        """The members that ended: said (to the pilot, or once it is gone into the orphans
        file), their $TMPDIRs removed."""
        orphans = []
        for pid, rc, cpu, rss in reaped(lambda: self.running):
            ident = self.running.pop(pid, None)
            if self.pool is not None and self.pool.retired:  # (collected here: never waited for again)
                self.pool.reaped(pid)
            if ident is not None:
                self.by_id.pop(ident, None)
                fds, n, m, a = self.io.pop(pid)
                self.calls.pop(pid, None)  # (a worker that died mid-call: its call ends here, as a command)
                gone = self.gone.pop(pid, None)  # (and why, where its log says)
                worker = self.pool.workers.get(pid) if self.pool is not None and rc else None
                if gone is None and worker is not None and worker.member == ident:  # (reaped before its socket read)
                    gone = self.pool.ended_why(worker)
                self.stopped.discard(pid)
                # ended on its own (not killed here: a kill of ours ends it by SIGKILL)
                natural = pid not in self.killed or rc != -signal.SIGKILL
                self.killed.discard(pid)  # (its pid may be another member's next)
                if self.open_in or natural:  # (its output into the stream before its end is said)
                    self.stream.keep(n, m, a, fds)
                else:
                    self.stream.drop(fds)
                if pid in self.tmps:
                    remove_tree(self.tmps.pop(pid))
                over = self.memory.ended(pid, rss, rc) if self.memory.limits else None
                if not self.open_in:
                    orphans.append({"k": ORPHAN_END if natural and not over else ORPHAN_KILLED, "n": n, "m": m,
                                    "a": a, "rc": rc, "pid": pid, "t": round(time.time(), 3)})
                elif over:
                    self.say(k=AGENT_ENDED, id=ident, rc=rc, cpu=cpu, rss=rss, reason=REASON_OOM, why=over)
                else:
                    self.say(k=AGENT_ENDED, id=ident, rc=rc, cpu=cpu, rss=rss, **({"why": gone} if gone else {}))
                    if self.orphans is not None:
                        self.recent.append((n, m, a, rc, pid, round(time.time(), 3)))
        self.write_orphans(orphans)

    def tidy(self) -> None:
        """The pilot's directories here, once empty."""
        for parent in {os.path.dirname(t) for t in self.made}:
            try:
                os.rmdir(parent)
            except OSError:
                pass


#: What the agent does with each message the pilot sends it (pilot/wire.py); others are ignored.
_ON = {AGENT_RUN: Agent.run, AGENT_KILL: Agent.kill, AGENT_ORPHANS: Agent.take_orphans}
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _stream(argv: list[str]) -> StreamWriter:
    """The output stream the pilot named on our command line (see the module); none named
    (a test, by hand): ``out-agent-PID`` here."""
    opts = dict(zip(argv[::2], argv[1::2]))
    path = opts.get("--stream") or os.path.abspath(f"out-agent-{os.getpid()}")
    try:
        scratch = opts.get("--scratch") or tmp_root(None)
    except ValueError:
        scratch = None
    cap = int(opts["--cap"]) if opts.get("--cap", "").isdigit() else None
    return StreamWriter(os.path.dirname(path), os.path.basename(path), cap=cap, scratch=scratch)


def main() -> None:
    agent = Agent(sys.stdout.buffer, _stream(sys.argv[1:]))
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)

    def stopped(signum: int, _frame) -> None:
        # the batch system ends our step (scancel, the allocation's end), or our session
        # hangs up: members run in sessions of their own, which it may not reach (SLURM's
        # proctrack/linuxproc follows parents, and they outlive us as init's). None may
        # outlive us: one left running would finish its work after the pilot handed it
        # back, and run a second time elsewhere. They end now; we leave once all are reaped
        agent.kill_all()

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, stopped)
    signal.set_wakeup_fd(wfd)
    sel = selectors.DefaultSelector()
    sel.register(rfd, selectors.EVENT_READ, "child")
    stdin = sys.stdin.buffer.raw.fileno()
    os.set_blocking(stdin, False)
    sel.register(stdin, selectors.EVENT_READ, "in")
    agent.sel = sel
    while agent.open_in or agent.running:
        now = time.time()
        due = agent.memory.next_in(now)
        if agent.kill_at is not None:
            due = max(0.0, agent.kill_at - now) if due is None else min(due, max(0.0, agent.kill_at - now))
        for key, _ in sel.select(timeout=1.0 if due is None else min(1.0, due + 0.001)):
            if key.data == "child":
                _drain(rfd)
                continue
            if isinstance(key.data, PyWorker):
                agent.answered(key.data)
                continue
            try:
                data = os.read(stdin, 1 << 16)
            except BlockingIOError:
                continue
            if data:
                agent.take(data)
            else:  # the pilot or the connection is gone: our members get their grace, or end now
                sel.unregister(stdin)
                agent.pilot_lost(time.time())
        if agent.kill_at is not None and time.time() >= agent.kill_at:
            agent.kill_at = None
            agent.kill_all()
        if agent.memory.limits:
            agent.memory.sweep(time.time())  # (over its mem: killed now, said as it is reaped)
        agent.reap()
        agent.send()
    if agent.pool is not None:
        agent.pool.close()
    agent.memory.close()
    agent.stream.close()
    agent.tidy()


def _drain(fd: int) -> None:
    """Read a non-blocking pipe empty (the wakeup bytes of signals)."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


if __name__ == "__main__":
    main()
