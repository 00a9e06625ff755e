"""The engine: walks the DAG member by member, feeds pilots, takes in their events.

One engine works on a run at a time (``engine.lock``). Its loop:

1. take in the events pilots appended since last time (``start``/``end``/``down``),
   journal them and apply them to the state (which releases downstream members);
2. check pilots are alive; a pilot that is gone has its unfinished members handed back
   (queued ones without using an attempt);
3. feed ready members to a live pilot, up to a window, journaling each assignment
   *before* the pilot can see it (so a resumed engine never forgets one);
4. snapshot the counts for ``pwe status``; report progress.

Failure model: the engine may be killed at any point. The journal then holds a prefix
of what happened; the pilots' own files hold the rest. ``resume`` replays the journal,
drops assignments a pilot never received, and re-reads each pilot's events from the
last offset it journaled; applying a pilot event twice is a no-op. So no member that
finished runs again, and none is lost.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from pilot.transport import EngineSpool, Transport
from pilot.wire import BACK, CANCEL, DOWN, DRAIN, END, START, STOP, TASK, UP, VERSION

from . import rundir
from .errors import InputError, PweError, RunStopped
from .journal import Journal, JournalError, cannot_write, replay
from .placement import pilot_args_for, pilot_job, plan_for_hosts
from .plan import Plan, plan_workflow
from .state import ASSIGNED, DONE, READY, RunState

# The engine never needs to react within a millisecond: each pilot holds a window of
# queued members. Sleeping at least POLL_MIN between rounds batches the work (fewer, larger
# reads and writes) and leaves the cores to the members.
POLL_MIN, POLL_MAX = 0.01, 0.05
SNAPSHOT_EVERY = 0.5
#: Below this many free bytes the run directory's filesystem counts as full: pilots can no
#: longer record events there, so the engine stops (state intact) instead of waiting on them.
MIN_FREE_BYTES = 64 * 1024


class PilotHandle:
    """The engine's handle on one pilot: its transport, how far its messages have been
    read (the cursor, opaque), and what the engine knows of it."""

    def __init__(self, pid_: str, directory: Path, os_pid: int, host: str, slots: int,
                 popen: subprocess.Popen | None = None, cursor: Any = 0, job: str | None = None, lane: str = "",
                 transport: Transport | None = None):
        self.id = pid_
        self.lane = lane  # the registry host it serves
        self.job = job  # a batch job id: its liveness comes from the scheduler and heartbeats
        self.dir = directory  # its own directory: its log, a batch pilot's job script
        self.os_pid = os_pid
        self.host = host
        self.slots = slots
        self.popen = popen
        self.cursor = cursor  # where the next receive starts (journaled as `offset`)
        self.outstanding = 0
        self.alive = True
        self.down = False
        self.came_up = False
        self.down_why = ""  # what its `down` event said ("error: ..." when it broke)
        self.finished_any = False  # an end event of one of its members was taken in
        self.draining = False
        self.full = False  # given all it may take (maxMembers, or members too long for it)
        self.given = 0
        self.refused: set[tuple[str, int]] = set()
        self.job_state = None
        self.last_heard = time.time()
        self.transport = transport or EngineSpool(directory)
        self._out: list[dict[str, Any]] = []

    def send(self, msg: dict[str, Any]) -> None:
        self._out.append(msg)

    def flush(self) -> None:
        if not self._out:
            return
        out, self._out = self._out, []
        # never a torn task line for the pilot: on a write error the batch is cut back;
        # the journal has these assignments and a resumed engine hands them back (_reattach)
        try:
            self.transport.send(out)
        except OSError as exc:
            raise cannot_write(exc.filename, exc) from None

    def receive(self) -> list[dict[str, Any]]:
        """The pilot's new messages; the cursor moves past them."""
        msgs, self.cursor = self.transport.receive(self.cursor)
        if msgs:
            self.last_heard = time.time()
        return msgs

    def close(self) -> None:
        self.flush()
        self.transport.close()


class Lane:
    """One host of the run: how its pilots start (a process here, or a batch job through
    its protocol), the members ready for it, and the pace of its status queries."""

    def __init__(self, host: Any, cores: int, pilot_args: list[str], status_every: float):
        self.host = host
        self.name = host.name
        self.cores = cores
        self.pilot_args = [str(a) for a in pilot_args]
        from protocols.registry import get as get_protocol
        from protocols.ssh import runner_for

        # commands go to the host's head node: here, or over SSH (host keys verified)
        self.protocol = get_protocol(host.protocol, runner_for(host))
        self.ready: deque[tuple[str, int]] = deque()
        self.status_every = status_every
        self.status_interval = status_every
        self.last_status = 0.0


class Engine:
    """Runs one run directory to its end. Use :meth:`create` or :meth:`open`.

    Each node runs on its own host (its ``host``, or ``--host`` for all); the engine keeps
    one :class:`Lane` per host used, each with its own pilots.
    """

    def __init__(self, run_dir: Path, plan: Plan, info: dict[str, Any]):
        self.dir = Path(run_dir).resolve()  # pilots and members run elsewhere: absolute paths only
        self.plan = plan
        self.info = info
        self.run_id = info["run_id"]
        self.heartbeat = float(info.get("heartbeat", 5.0))
        self.lost_after = float(info.get("lost_after", 60.0))
        self.state: RunState | None = None
        self.journal: Journal | None = None
        self.pilots: dict[str, PilotHandle] = {}
        self.lock = rundir.EngineLock(run_dir)
        self._next_pilot = 1
        self._failed_pilots = 0  # pilots in a row that broke before finishing any member
        self._edges_seen: set[str] = set()
        self.warnings: list[str] = []
        self._hosts_changed: list[str] = []  # hosts whose definition changed since the run was made
        self._member_env_base = {"PWE_RUN_ID": self.run_id}
        self._members = str(self.dir / "members")
        from hostinfo.model import Host

        status_every = float(info.get("status_every", 5.0))
        self.lanes: dict[str, Lane] = {
            name: Lane(Host(**lane["host_def"]), int(lane.get("cores") or 1), lane.get("pilot_args", []), status_every)
            for name, lane in info["lanes"].items()
        }
        # each node's lane; a node whose host the run did not record runs on the first
        first = next(iter(self.lanes))
        self._lane_of = {nid: pn.host if pn.host in self.lanes else first for nid, pn in plan.nodes.items()}

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def create(cls, workflow: str | Path, sets: dict[str, Any] | None = None, host: str | None = None,
               cores: int | None = None, run_dir: str | Path | None = None, hosts_file: str | Path | None = None,
               **options: Any) -> "Engine":
        """Check the workflow, make its run directory, and return an engine for it."""
        src = Path(workflow)
        cores_option = cores
        plan, hosts, warnings = plan_for_hosts(src, sets, host=host, hosts_file=hosts_file, cores=cores)
        for the_host in hosts.values():
            if the_host.contact != "local" and not the_host.shared_fs:
                raise InputError(f"host '{the_host.name}' does not share this machine's filesystem (shared_fs: "
                                 "false); this version needs the run directory visible on the host at the same "
                                 "path", src)
        extra_args = options.pop("pilot_args", None)  # (tests and the API: for every host)
        options["lanes"] = {
            name: {"host_def": h.model_dump(), "cores": h.cores_per_node,
                   "pilot_args": extra_args if extra_args is not None else pilot_args_for(h)}
            for name, h in hosts.items()
        }
        cores = next(iter(hosts.values())).cores_per_node
        run_id = rundir.new_run_id(plan.workflow.name)
        path = Path(run_dir) if run_dir else rundir.DEFAULT_ROOT / run_id
        rundir.create(path)
        copy = path / f"workflow{src.suffix or '.yaml'}"
        shutil.copyfile(src, copy)
        info = {
            "run_id": run_id, "workflow": str(src.resolve()), "copy": copy.name, "sets": sets or {},
            "host": host, "cores": cores, "created": time.time(),
            # where its hosts came from, read again by resume and retry (a host fixed meanwhile)
            "hosts_file": str(Path(hosts_file).resolve()) if hosts_file else None, "cores_option": cores_option,
            **options,
        }
        rundir.write_json_atomic(path / "run.json", info)
        from .notify import make_secret

        make_secret(path)
        engine = cls(path, plan, info)
        engine.warnings = warnings
        return engine

    @classmethod
    def open(cls, run_dir: Path, reload_hosts: bool = False) -> "Engine":
        """The engine of an existing run. ``reload_hosts`` (resume, retry): take the hosts'
        current definitions from the registry, so that a host fixed after its batch system
        refused a pilot (a partition, an account) is used as fixed; the change is journaled."""
        info = json.loads((run_dir / "run.json").read_text())
        original = Path(info["workflow"])
        # re-plan from the original location when it still holds the same text (parameter
        # files live beside it), else from the run's own copy
        copy = run_dir / info["copy"]
        src = original if original.is_file() and original.read_bytes() == copy.read_bytes() else copy
        plan = plan_workflow(src, info.get("sets") or {}, host=info.get("host"))
        changed = _current_hosts(run_dir, info) if reload_hosts else []
        engine = cls(run_dir, plan, info)
        engine._hosts_changed = changed
        return engine

    # -- the loop -------------------------------------------------------------------------------
    def run(self, progress: Callable[[RunState], None] | None = None, retry: bool = False,
            cancel: bool = False) -> bool:
        """Run (or resume) to the end. True when every member succeeded.

        ``retry``: first give failed, skipped and cancelled members another go.
        ``cancel``: stop the run (its pilots and their members) and return.
        Ctrl-C cancels the run; ``pwe retry`` picks it up again.
        """
        self.lock.acquire()
        try:
            self._load()
            for name in self._hosts_changed:
                self._record({"e": "note", "what": f"host '{name}' is defined differently than when the run began; "
                              "new pilots use its current definition", "t": time.time()})
            if retry:
                # a cancel request the last engine never took in (it ended first) is stale:
                # retrying is the user asking for the run again
                (self.dir / "control" / "cancel").unlink(missing_ok=True)
                self._record({"e": "retry", "t": time.time()})
            if cancel:
                self.cancel()
            return self._loop(progress)
        except RunStopped as exc:
            # said in the journal (when the disk still takes it), so `pwe status` shows why
            try:
                self._record({"e": "stopped", "why": str(exc), "t": time.time()})
                self.journal.flush()
            except (PweError, OSError):
                pass
            raise
        except KeyboardInterrupt:
            if self.journal is not None and self.state is not None and not self.state.cancelled:
                self.cancel()
            raise
        finally:
            self._shutdown()

    def _load(self) -> None:
        self.state = RunState(self.plan)
        fresh = True
        for rec in replay(self.dir / "journal.jsonl"):
            self.state.apply(rec)
            fresh = False
        self.journal = Journal(self.dir / "journal.jsonl", fsync=bool(self.info.get("fsync")))
        self._record({"e": "run" if fresh else "resume", "t": time.time(), "pid": os.getpid()})
        for pid_, p in self.state.pilots.items():
            n = int(pid_.lstrip("p") or 0)
            self._next_pilot = max(self._next_pilot, n + 1)
            if p.get("alive"):
                self._reattach(pid_, p)
        self.journal.flush()

    def _reattach(self, pid_: str, p: dict[str, Any]) -> None:
        pilot = PilotHandle(pid_, self.dir / "pilots" / pid_, p.get("pid", 0), p["host"], p["slots"],
                            cursor=p.get("offset", 0), job=p.get("job"), lane=p.get("lane") or next(iter(self.lanes)))
        self.pilots[pid_] = pilot
        # assignments journaled but never sent to the pilot (killed in between): hand back
        sent = pilot.transport.sent()
        st = self.state
        for nid, i in st.inflight(pid_):
            ns = st.nodes[nid]
            if ns.state[i] == ASSIGNED and (nid, i, ns.attempt[i]) not in sent:
                self._record({"e": "unassign", "n": nid, "m": i, "p": pid_})
        pilot.outstanding = len(st.inflight(pid_))
        self._ingest(pilot)
        if self._process_gone(pilot) and not pilot.down:
            self._ingest(pilot)
            self._pilot_gone(pilot, "lost while the engine was down")

    def _loop(self, progress: Callable[[RunState], None] | None) -> bool:
        st = self.state
        assert st is not None
        sleep = POLL_MIN
        last_snap = 0.0
        cancel_file = self.dir / "control" / "cancel"
        while True:
            if cancel_file.exists():
                if not st.cancelled:
                    self.cancel()  # journaled (and flushed) before the request is taken away
                # consumed: a later `pwe retry` or `pwe resume` must not cancel again
                cancel_file.unlink(missing_ok=True)
            busy = 0
            for pilot in list(self.pilots.values()):
                if pilot.alive:
                    busy += self._ingest(pilot)
            self._check_pilots()
            if st.unfinished() == 0:
                break
            busy += self._feed()
            self.journal.flush()  # assignments are durable before any pilot can see them
            for pilot in self.pilots.values():
                pilot.flush()
            now = time.time()
            if now - last_snap >= SNAPSHOT_EVERY:
                self._take_edges()
                self._check_space()
                self._snapshot()
                last_snap = now
                if progress:
                    progress(st)
            sleep = POLL_MIN if busy else min(POLL_MAX, sleep * 1.5)
            time.sleep(sleep)
        ok = not st.cancelled and st.totals()[DONE] == self.plan.total_members
        self._record({"e": "finish", "ok": ok, "t": time.time()})
        self.journal.flush()
        if progress:
            progress(st)
        return ok

    def _check_space(self) -> None:
        try:
            fs = os.statvfs(self.dir)
        except OSError:
            return
        free = fs.f_bavail * fs.f_frsize
        if free < MIN_FREE_BYTES:
            raise JournalError(f"the filesystem of {self.dir} is full ({free // 1024} KiB free; pilots hold their events "
                               "meanwhile): free space")

    def _record(self, rec: dict[str, Any]) -> Any:
        self.journal.append(rec)
        return self.state.apply(rec)

    # -- pilots ---------------------------------------------------------------------------------
    def _start_pilot(self, lane: Lane) -> PilotHandle:
        if lane.protocol.batch:
            return self._submit_pilot(lane)
        pid_ = f"p{self._next_pilot}"
        self._next_pilot += 1
        d = self.dir / "pilots" / pid_
        transport = EngineSpool(d)  # before the pilot looks for its tasks
        popen = lane.protocol.start(d, lane.cores, self.heartbeat, idle_timeout=float(self.info.get("idle_timeout", 300)),
                                    extra_args=lane.pilot_args)
        host = socket.gethostname()
        self._record({"e": "pilot", "p": pid_, "pid": popen.pid, "host": host, "lane": lane.name,
                      "slots": lane.cores, "t": time.time()})
        pilot = PilotHandle(pid_, d, popen.pid, host, lane.cores, popen=popen, lane=lane.name, transport=transport)
        self.pilots[pid_] = pilot
        return pilot

    def _submit_pilot(self, lane: Lane) -> PilotHandle:
        """Glide in: one batch job that becomes a pilot, sized for the members ready now."""
        host = lane.host
        pid_ = f"p{self._next_pilot}"
        self._next_pilot += 1
        d = self.dir / "pilots" / pid_
        transport = EngineSpool(d)  # its tasks are there before the job starts
        st = self.state
        ready = [(n, i) for n, i in lane.ready if st.nodes[n].state[i] == READY]
        job = pilot_job(self.plan, host, ready, str(self.dir), self.run_id, pid_, lane.pilot_args,
                        heartbeat=self.heartbeat, idle_timeout=self.info.get("idle_timeout", 60))
        script = d / "job.sh"
        script.write_text(lane.protocol.render(job))
        from protocols.base import SubmitError
        from protocols.runner import ContactError

        try:
            job_id = lane.protocol.submit(job, str(script))
        except (SubmitError, ContactError) as exc:
            # the run keeps its state: fix the host (hosts.yaml, the account, the cluster) and resume
            said = " / ".join(line.strip() for line in str(exc).splitlines() if line.strip())  # one line
            if isinstance(exc, ContactError):
                raise RunStopped(f"cannot submit a pilot to host '{host.name}': {said}: fix its contact (hosts.yaml, "
                                 "known_hosts, keys)") from None
            raise RunStopped(f"the batch system refused a pilot job for host '{host.name}': {said}: fix the host "
                             "(its hosts.yaml entry, the account or partition it names)") from None
        self._record({"e": "pilot", "p": pid_, "job": job_id, "host": host.name, "lane": lane.name,
                      "slots": job.nodes * job.cores_per_node, "batch": lane.protocol.name, "t": time.time()})
        pilot = PilotHandle(pid_, d, 0, host.name, job.nodes * job.cores_per_node, job=job_id, lane=lane.name,
                            transport=transport)
        self.pilots[pid_] = pilot
        return pilot

    def _poll_jobs(self, lane: Lane) -> None:
        """One batched status query for every live batch pilot of a host, at most every
        status_every s."""
        from protocols.base import JobState

        live = [p for p in self.pilots.values() if p.alive and p.job and p.lane == lane.name]
        now = time.time()
        if not live or now - lane.last_status < lane.status_interval:
            return
        lane.last_status = now
        from protocols.runner import ContactError

        try:
            states = lane.protocol.status([p.job for p in live])
        except ContactError:
            return  # unknown, not failed: ask again next time
        # back off while nothing changes (kind to the scheduler); look again soon after a change
        changed = any(states.get(p.job) != p.job_state for p in live)
        lane.status_interval = lane.status_every if changed else min(60.0, lane.status_interval * 1.5)
        for pilot in live:
            state = states.get(pilot.job, JobState.UNKNOWN)
            pilot.job_state = state
            if state.finished:
                self._ingest(pilot)  # whatever it said before its job ended
                why = f"batch job {pilot.job} {state.value}"
                if state is JobState.TIMEOUT:
                    why += " (walltime: expected for a pilot)"
                self._pilot_gone(pilot, why)
            elif state is JobState.RUNNING and pilot.came_up and now - pilot.last_heard > self.lost_after:
                self._pilot_gone(pilot, f"silent for {now - pilot.last_heard:.0f} s")
                lane.protocol.cancel([pilot.job])

    def _take_edges(self) -> None:
        """Batch systems' edge events (pwe notify): journal the authentic ones; a job that
        ended while its pilot still looks alive is gone now, not at the next status poll."""
        from .notify import receive

        for msg, ok in receive(self.dir, self._edges_seen):
            if not ok:
                self._record({"e": "note", "what": "edge event with a bad signature ignored",
                              "file": msg.get("file"), "pilot": msg.get("pilot"), "t": time.time()})
                continue
            self._record({"e": "edge", **{k: msg.get(k) for k in ("pilot", "event", "job", "status", "t")}})
            pilot = self.pilots.get(msg.get("pilot"))
            if msg.get("event") == "ended" and pilot is not None and pilot.alive:
                self._ingest(pilot)  # pilot events win: take in all it said first
                self._pilot_gone(pilot, f"batch job {msg.get('job')} ended (status {msg.get('status')})")

    def _ingest(self, pilot: PilotHandle) -> int:
        events = pilot.receive()
        if not events:
            return 0
        for ev in events:
            k = ev["k"]
            if k == START or k == END:
                rec = {"e": k, "n": ev["n"], "m": ev["m"], "a": ev["a"], "p": pilot.id}
                if k == START:
                    rec["pid"] = ev.get("pid", 0)
                else:
                    rec["rc"] = ev["rc"]
                    if ev.get("out"):
                        rec["out"] = ev["out"]
                    if ev.get("why"):
                        rec["why"] = ev["why"]
                    rec["dt"] = ev.get("dt")
                if self._record(rec) is not None and k == END:
                    pilot.outstanding -= 1
                    pilot.finished_any = True
                    self._failed_pilots = 0
            elif k == BACK:  # handed back unstarted (or stopped by the allocation's end)
                if self._record({"e": "unassign", "n": ev["n"], "m": ev["m"], "p": pilot.id,
                                 "why": ev.get("why")}) is not None:
                    pilot.outstanding -= 1
                    if (ev.get("why") or "").startswith("needs "):
                        pilot.refused.add((ev["n"], ev["m"]))
            elif k == DRAIN:
                pilot.draining = True
            elif k == DOWN:
                pilot.down = True
                pilot.down_why = ev.get("why") or ""
            elif k == UP:
                if ev.get("v") != VERSION:
                    self._refuse(pilot, ev.get("v"))
                pilot.came_up = True
        self._record({"e": "offset", "p": pilot.id, "off": pilot.cursor})
        return len(events)

    def _refuse(self, pilot: PilotHandle, version: Any) -> None:
        """A pilot that speaks another version of the messages: tell it to leave, hand its
        members back, and stop the run with one line."""
        pilot.send({"k": CANCEL})
        pilot.flush()
        self._pilot_gone(pilot, f"speaks wire version {version}", broke=False)
        raise RunStopped(f"pilot {pilot.id} on {pilot.host} speaks version {version} of the engine-pilot messages, "
                         f"this engine version {VERSION}: run the same pwe on both sides (its pilot package)")

    def _check_pilots(self) -> None:
        for lane in self.lanes.values():
            if lane.protocol.polls_status:
                self._poll_jobs(lane)
        now = time.time()
        for pilot in self.pilots.values():
            if not pilot.alive:
                continue
            if pilot.down or self._process_gone(pilot):
                self._ingest(pilot)  # whatever it said before it went
                self._pilot_gone(pilot, "exited" if pilot.down else "died")
            elif pilot.job is None and now - pilot.last_heard > self.lost_after and pilot.host != socket.gethostname():
                self._pilot_gone(pilot, f"silent for {now - pilot.last_heard:.0f} s")

    def _process_gone(self, pilot: PilotHandle) -> bool:
        """A pilot whose process is gone; never one whose liveness the batch system tells
        (asked for all pilots at once: _poll_jobs)."""
        protocol = self.lanes[pilot.lane].protocol
        return not protocol.polls_status and not protocol.alive(pilot.os_pid, pilot.host, pilot.popen)

    def _pilot_gone(self, pilot: PilotHandle, why: str, broke: bool = True) -> None:
        st = self.state
        for nid, i in st.inflight(pilot.id):
            pid = st.nodes[nid].pid.get(i)
            if pid and pilot.host == socket.gethostname():
                # a member orphaned by a killed pilot would run on beside its re-issue
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self._record({"e": "unassign", "n": nid, "m": i, "p": pilot.id})
        self._record({"e": "pilot_gone", "p": pilot.id, "why": why, "t": time.time()})
        pilot.alive = False
        pilot.outstanding = 0
        if pilot.popen is not None:
            pilot.popen.poll()
        # A pilot that never came up, died without saying goodbye, or left on an error, and
        # finished nothing: three in a row is a pilot that cannot work here (a defect, a
        # broken environment). Stop with its words instead of starting pilots forever.
        broken = not pilot.came_up or not pilot.down or pilot.down_why.startswith("error")
        if not broke or not broken or pilot.finished_any:
            return
        self._failed_pilots += 1
        if self._failed_pilots >= 3:
            log = pilot.dir / "pilot.log"
            try:
                last = log.read_text(errors="replace").strip().splitlines()[-1]
            except (OSError, IndexError):
                last = "(no output)"
            what = "died before starting" if not pilot.came_up else "failed before finishing any member"
            raise RunStopped(f"3 pilots in a row {what}; the last said: {last}  (see {log}): fix what it says")

    # -- feeding ------------------------------------------------------------------------------
    def _feed(self) -> int:
        """Hand ready members to the live pilots of their host; start pilots when a host
        has none (or, on a batch host, when every live pilot is busy and the host allows
        more at once)."""
        st = self.state
        if st.cancelled:
            return 0
        if st.ready:  # to the lane of each member's node
            lane_of, nodes = self._lane_of, st.nodes
            while st.ready:
                nid, i = st.ready.popleft()
                if nodes[nid].state[i] == READY:
                    self.lanes[lane_of[nid]].ready.append((nid, i))
        fed = 0
        for lane in self.lanes.values():
            if not lane.ready:
                continue
            live = self._live_pilots(lane)
            if not live:
                live = [self._start_pilot(lane)]
            fed += sum(self._feed_pilot(p, lane) for p in live)
            most = lane.host.max_pilots if lane.protocol.batch else 1
            while (len(self._live_pilots(lane)) < most and any(st.nodes[n].state[i] == READY for n, i in lane.ready)
                   and all(p.outstanding >= self._window(p) for p in self._live_pilots(lane))):
                fed += self._feed_pilot(self._start_pilot(lane), lane)
        return fed

    def _live_pilots(self, lane: Lane) -> list[PilotHandle]:
        return [p for p in self.pilots.values()
                if p.lane == lane.name and p.alive and not p.down and not p.draining and not p.full]

    def _window(self, pilot: PilotHandle) -> int:
        # a local pilot gets a deep queue (dispatch rate); a batch pilot about two members
        # per core, so that the rest can go to other pilots when the host allows several
        return max(8 * pilot.slots, 256) if pilot.job is None else max(2 * pilot.slots, 2)

    def _feed_pilot(self, pilot: PilotHandle, lane: Lane) -> int:
        st = self.state
        window = self._window(pilot)
        fed = 0
        refused: list[tuple[str, int]] = []
        ready = lane.ready
        while ready and pilot.outstanding < window and not pilot.full:
            nid, i = ready.popleft()
            ns = st.nodes[nid]
            if ns.state[i] != READY:
                continue  # a stale entry: assigned or finished since it was queued
            if (nid, i) in pilot.refused:
                refused.append((nid, i))  # too long for what is left of this allocation
                continue
            most = self.plan.nodes[nid].scheduling.maxMembers
            if most and pilot.given >= most:
                # this pilot has had its share (maxMembers): it finishes them and leaves;
                # the next ready member goes to a new pilot
                pilot.full = True
                pilot.send({"k": STOP})
                ready.appendleft((nid, i))
                break
            attempt = ns.attempt[i] + 1
            task = self._task(nid, i, attempt)
            self._record({"e": "assign", "n": nid, "m": i, "a": attempt, "p": pilot.id})
            pilot.send(task)
            pilot.outstanding += 1
            pilot.given += 1
            fed += 1
        if refused:
            ready.extend(refused)
            if lane.protocol.batch and all(not p.alive or p.full or p.draining or p is pilot
                                                 for p in self.pilots.values() if p.lane == lane.name):
                pilot.full = True  # a fresh allocation has its whole walltime ahead of it
                pilot.send({"k": STOP})
        return fed

    def _task(self, nid: str, i: int, attempt: int) -> dict[str, Any]:
        pn = self.plan.nodes[nid]
        sched = pn.scheduling
        cwd = f"{self._members}/{nid}/{i // 1000}/{i}"  # rundir.member_dir, without pathlib's cost
        if attempt > 1:
            _keep_previous_attempt(Path(cwd), attempt - 1)
        env = dict(self._member_env_base)
        ranks, threads = sched.ranksPerMember or 1, sched.threadsPerRank or 1
        env.update({
            "PWE_NODE": nid, "PWE_MEMBER": str(i), "PWE_ATTEMPT": str(attempt), "PWE_HOST": pn.host,
            "PWE_RANKS": str(ranks), "PWE_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
            "PWE_WALLTIME_MINUTES": _minutes(sched.maxWallTimePerMember or sched.maxWallTime),
        })
        from .source import value_text

        for name, value in pn.space.values_of(i).items():
            env["PWE_PARAM_" + name.upper()] = value_text(value)
        for name, value in pn.spec.env.items():
            env[name] = value_text(value)
        task = {"k": TASK, "n": nid, "m": i, "a": attempt, "cmd": self.plan.render(nid, i), "cwd": cwd,
                "env": env, "ranks": ranks, "threads": threads, "wall": sched.maxWallTimePerMember}
        if sched.shareNodes is False:
            task["exclusive"] = True  # whole nodes, shared with no other member
        if sched.coreUsageRule:
            task["cap"] = sched.coreUsageRule  # most cores of a node this kind of member may use
        if sched.gpusPerMember:
            task["gpus"] = sched.gpusPerMember
        if sched.memoryPerMember:
            task["mem"] = sched.memoryPerMember
        return task

    # -- cancel and shutdown -----------------------------------------------------------------
    def cancel(self) -> bool:
        """Stop the run's pilots and mark what is unfinished cancelled; False if nothing was."""
        if self.state.unfinished() == 0:
            return False
        for pilot in self.pilots.values():
            if pilot.alive:
                pilot.send({"k": CANCEL})
                pilot.flush()
        self._record({"e": "cancel", "t": time.time()})
        self.journal.flush()
        return True

    def _shutdown(self) -> None:
        """Tell pilots there is nothing more, close files, release the run. Never raises
        over an error already on its way out (a full disk fails these writes too)."""
        try:
            pending: dict[str, list[str]] = {}
            for pilot in self.pilots.values():
                try:
                    if pilot.alive and not pilot.down:
                        pilot.send({"k": STOP})
                        if pilot.job and not pilot.came_up and self.state is not None and \
                                self.state.unfinished() == 0:
                            pending.setdefault(pilot.lane, []).append(pilot.job)  # queued still, nothing to do
                    pilot.close()
                except OSError:
                    pass  # the pilot keeps running what it has; resume takes its events in
            for lane in self.lanes.values():
                if pending.get(lane.name):
                    try:
                        lane.protocol.cancel(pending[lane.name])
                    except Exception:  # a scheduler that does not answer must not hide the run's outcome
                        pass
                lane.protocol.close()
            if self.journal is not None:
                try:
                    self.journal.close()
                except PweError:
                    pass
                self._snapshot()
        finally:
            self.lock.release()

    def _snapshot(self) -> None:
        snap = self.state.snapshot()
        snap.update({"run_id": self.run_id, "workflow": self.plan.workflow.name, "updated": time.time(),
                     "engine": {"pid": os.getpid(), "host": socket.gethostname()},
                     "total_members": self.plan.total_members})
        try:
            rundir.write_json_atomic(self.dir / "state.json", snap)
        except OSError:
            pass  # a snapshot is a convenience; the journal is the record


def _minutes(v: float | None) -> str:
    return "" if v is None else f"{v:g}"


def _keep_previous_attempt(cwd: Path, attempt: int) -> None:
    """Rename the previous attempt's files so that the next one starts clean."""
    for name in ("stdout", "stderr", "outputs"):
        try:
            os.replace(cwd / name, cwd / f"{name}.{attempt}")
        except FileNotFoundError:
            pass


def _current_hosts(run_dir: Path, info: dict[str, Any]) -> list[str]:
    """Update ``info``'s lanes (and run.json) to the hosts' current definitions, read from
    the same places as when the run was made; the names of the hosts that changed. A
    host no longer defined keeps its recorded definition."""
    import hostinfo

    registry = hostinfo.load(Path(info["workflow"]), info.get("hosts_file"), cores=info.get("cores_option"))
    changed = []
    for name, lane in info["lanes"].items():
        host = registry.hosts.get(name)
        if host is None or host.model_dump() == lane["host_def"]:
            continue
        from hostinfo.model import Host

        if lane.get("pilot_args") == pilot_args_for(Host(**lane["host_def"])):
            lane["pilot_args"] = pilot_args_for(host)  # (not when a caller gave its own)
        lane["host_def"] = host.model_dump()
        lane["cores"] = host.cores_per_node
        changed.append(name)
    if changed:
        rundir.write_json_atomic(run_dir / "run.json", info)
    return changed

