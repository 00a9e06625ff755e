"""The engine's handles on its pilots and the lanes that start them: :class:`PilotHandle`
(one pilot: its transport, how far its messages were read, what the engine knows of it),
:class:`Lane` (one host, or host/partition: how its pilots start, the members ready for it,
the pace of its status queries) and :func:`make_lanes` (the run's lanes from run.json).

What the engine does with them is :class:`pwe.engine.pilots.PilotWork` and its parts
(intake, recovery, pilotctl), which all import these from here.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from pilot.transport import EngineSpool, Transport

from ..runstate.journal import cannot_write
from ..runstate.readyqueue import ReadyQueue


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
        self.extra = 0  # members of groups beyond one per group: a group holds one slot (see one_less)
        self._groups: dict[tuple[str, int], list[int]] = {}  # a grouped member -> its group's count left
        self.alive = True
        self.down = False
        self.came_up = False
        self.down_why = ""  # what its `down` event said ("error: ..." when it broke)
        self.finished_any = False  # an end event of one of its members was taken in
        self.draining = False
        self.serves: list[str] | None = None  # (a helper added by pwe pilot add: pwe/engine/pilotctl.py) its nodes
        self.full = False  # given all it may take (maxMembers, or members too long for it)
        self.given = 0
        self.refused: set[tuple[str, int]] = set()
        self.job_state = None
        self.last_heard = time.time()
        self.given_up = ""  # (silent) why it is being given up: its job is cancelled, its end awaited
        self.given_up_at = 0.0
        self.transport = transport or EngineSpool(directory)
        self._out: list[dict[str, Any]] = []
        self.envs_sent: set[str] = set()  # the ``env`` messages it was sent (pwe/engine/feed.py _share_env)
        self.q = 0  # the highest sequence number applied (journaled with the cursor)
        self.qs: dict[str, int] = {}  # the highest each transport delivered ("spool", "redis")
        self.acked = 0  # the last ``ack`` sent (a pilot that sends through a broker)
        self.refusals: set[str] = set()  # kinds of refusal said on stderr already (once each)
        self.sealed = False  # it left and its spool files are (being) compressed: nothing more is written

    def send(self, msg: dict[str, Any]) -> None:
        self._out.append(msg)

    def sent_group(self, nid: str, members: list[int]) -> None:
        """A group of ``members`` went to this pilot: they count as one against its window
        (they hold one slot between them), each one as outstanding."""
        left = [len(members)]
        for i in members:
            self._groups[(nid, i)] = left
        self.outstanding += len(members)
        self.extra += len(members) - 1

    def one_less(self, nid: str, i: int) -> None:
        """A member of this pilot ended or came back: one fewer outstanding (and, while
        its group has more, one fewer extra)."""
        self.outstanding -= 1
        left = self._groups.pop((nid, i), None)
        if left is not None:
            left[0] -= 1
            if left[0] > 0:
                self.extra -= 1

    @property
    def units(self) -> int:
        """What it holds against its window: members, a group counting as one."""
        return self.outstanding - self.extra

    def flush(self) -> None:
        if self.sealed:
            self._out.clear()  # (it has left: a message to it is read by no one, and would make a new file)
        if not self._out:
            return
        out, self._out = self._out, []
        # never a torn task line for the pilot: on a write error the batch is cut back;
        # the journal has these assignments and a resumed engine hands them back (_reattach)
        try:
            self.transport.send(out)
        except OSError as exc:
            raise cannot_write(exc.filename, exc) from None
        trim = getattr(self.transport, "trim", None)
        if trim is not None:
            trim()  # (the journal holds what was read: the broker may forget it)

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

    def __init__(self, host: Any, cores: int, pilot_args: list[str], status_every: float, name: str = ""):
        self.host = host
        self.name = name or host.name  # host, or host/partition (make_lanes)
        self.cores = cores
        self.pilot_args = [str(a) for a in pilot_args]
        from protocols.registry import get as get_protocol
        from protocols.registry import runner_for

        # commands go to the host's head node: here, or over SSH (host keys verified)
        self.protocol = get_protocol(host.protocol, runner_for(host), host)
        self.ready = ReadyQueue()  # (runs of member indices: a million ready members cost one entry)
        self.status_every = status_every
        self.status_interval = status_every
        self.last_status = 0.0
        # while its batch system does not answer: since when, what it said, when to try a
        # submission again (back-off), and a pilot id whose submission may have taken
        self.unreachable_since: float | None = None
        self.unreachable_why = ""
        self.backoff = status_every
        self.retry_at = 0.0
        self.retry_pilot: tuple[str, bool] | None = None  # (pilot id, maybe submitted)


def make_lanes(plan: Any, recorded: dict[str, Any], status_every: float) -> tuple[dict[str, Lane], dict[str, str]]:
    """The run's lanes from its recorded hosts (run.json ``lanes``): one per host, split
    per partition where its nodes go to different ones (partitions.partition_lanes, each
    lane holding the host as its partition shows it: GPUs, cores, memory), and each
    node's lane. Pilot arguments a caller gave are kept; those pwe derived are derived
    again from the partition's view (its GPUs, its memory)."""
    from hostinfo.model import Host

    from ..planning.partitions import partition_lanes
    from ..planning.placement import pilot_args_for

    hosts = {name: Host(**lane["host_def"]) for name, lane in recorded.items()}
    lanes, lane_of = {}, {}
    for key, (view, nids) in partition_lanes(plan, hosts).items():
        rec = recorded[view.name]
        args = rec.get("pilot_args", [])
        if args == pilot_args_for(hosts[view.name]):
            args = pilot_args_for(view)
        cores = view.cores_per_node if view is not hosts[view.name] else rec.get("cores")
        lanes[key] = Lane(view, int(cores or 1), args, status_every, name=key)
        lane_of.update(dict.fromkeys(nids, key))
    return lanes, lane_of
