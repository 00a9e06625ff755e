"""Watching the allocation's other nodes: is each still there? Standard library only.

A member started with ``srun`` on another node is, to the pilot, a local ``srun`` process.
When that node dies, nothing tells the pilot soon: SLURM marks the node DOWN after
``SlurmdTimeout`` (30-300 s), and the ``srun`` of a member there may then even exit 0
(seen with Slurm 22.05: the member was recorded as succeeded, having never finished).
So the pilot watches the nodes itself, beside its loop, without threads: every
``every`` seconds a non-blocking TCP connect to each live node's slurmd port. A node
whose slurmd answers is there (the kernel completes the handshake; slurmd need not be
idle). A connect refused (slurmd is dead), unreachable (the link is down) or unanswered
within ``timeout`` is a miss; ``misses`` misses in a row and the node is lost. With the
defaults (1 s, 2.5 s, 2) a node whose slurmd is dead is known within 1-2 s, one whose
link is down within about 4-5 s: a probe starts every second whether the last answered or
not (at most 3 in flight), so two misses in a row take 3.5 s, not 5. Time the pilot itself
was not running (a loaded node: its loop came round late) is not counted against a probe.

The probe sockets are registered in the pilot's selector (data: this watch), so the loop
wakes when one completes; :meth:`NodeWatch.tick` starts and times them out. What the pilot
does with a lost node and the members that ran there is :class:`NodeLosses`, a part of
:class:`pilot.agent.PilotAgent`.
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from .allocation import slurm_config
from .members import Member, killpg, note_stderr, say, task_shape
from .packing import Packer
from .wire import NODE_LOST

if TYPE_CHECKING:
    from .streams import StreamWriter

#: slurmd's port when ``scontrol show config`` does not say (SLURM's default)
SLURMD_PORT = 6818


def slurmd_port() -> int:
    """The SlurmdPort of this cluster (its configuration, read once by the pilot)."""
    value = slurm_config().get("SlurmdPort", "")
    return int(value) if value.isdigit() else SLURMD_PORT


class NodeWatch:
    """Liveness of a set of nodes by TCP connects to ``port``; see the module's docstring."""

    def __init__(self, nodes: list[str], port: int, sel: selectors.BaseSelector, every: float = 1.0,
                 timeout: float = 2.5, misses: int = 2):
        self.port = port
        self.sel = sel
        self.every = every
        self.timeout = timeout
        self.misses = misses
        self.missed = {n: 0 for n in nodes}
        self.why: dict[str, str] = {}  # the last miss of each node, in words
        self.lost: list[str] = []  # lost and not yet taken by the pilot
        self.gone: set[str] = set()  # every node lost so far
        # node -> its probes in flight, oldest first: [socket, started]. A probe starts every
        # ``every`` s whether or not the last one answered, so that two misses in a row
        # take timeout + every, not twice the timeout
        self.flight: dict[str, list[list]] = {n: [] for n in nodes}
        self.next = 0.0
        self.last_tick: float | None = None

    def tick(self, now: float | None = None) -> None:
        """Time out probes that took too long; start the round's probes when it is time."""
        now = time.monotonic() if now is None else now
        if self.last_tick is not None and now - self.last_tick > self.timeout / 2:
            # the pilot did not run for a while (a starved node): that time does not count
            for probes in self.flight.values():
                for probe in probes:
                    probe[1] += now - self.last_tick
        self.last_tick = now
        for node, probes in self.flight.items():
            while probes and now - probes[0][1] > self.timeout:
                self._done(node, probes[0][0], f"no answer from port {self.port} in {self.timeout:g} s")
        if now < self.next:
            return
        self.next = now + self.every
        for node, probes in self.flight.items():
            if node in self.gone or len(probes) >= 3:
                continue
            try:
                addr = socket.getaddrinfo(node, self.port, type=socket.SOCK_STREAM)[0]
                sock = socket.socket(addr[0], socket.SOCK_STREAM)
            except OSError as exc:
                self._miss(node, f"cannot resolve or probe it: {exc}")
                continue
            sock.setblocking(False)
            err = sock.connect_ex(addr[4])
            if err not in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EALREADY):
                sock.close()
                self._miss(node, f"port {self.port}: {os.strerror(err)}")
                continue
            probes.append([sock, now])
            self.sel.register(sock, selectors.EVENT_WRITE, self)

    def ready(self, sock: socket.socket) -> None:
        """A probe completed (the selector said it is writable): answered or refused."""
        node = next((n for n, probes in self.flight.items() if any(p[0] is sock for p in probes)), None)
        if node is None:
            return
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        self._done(node, sock, None if err == 0 else f"port {self.port}: {os.strerror(err)}")

    def _done(self, node: str, sock: socket.socket, miss: str | None) -> None:
        probes = self.flight[node]
        probes[:] = [p for p in probes if p[0] is not sock]  # (in place: tick walks this list)
        try:
            self.sel.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()
        if miss is None:
            self.missed[node] = 0
        else:
            self._miss(node, miss)

    def _miss(self, node: str, why: str) -> None:
        self.missed[node] += 1
        self.why[node] = why
        if self.missed[node] >= self.misses and node not in self.gone:
            self.gone.add(node)
            self.lost.append(node)

    def answers(self, node: str) -> bool:
        """One probe of the node now, waited for (at most ``timeout``): does it answer?"""
        if node in self.gone:
            return False
        try:
            with socket.create_connection((node, self.port), timeout=self.timeout):
                return True
        except OSError:
            return False

    def take_lost(self) -> list[str]:
        """The nodes found lost since the last call."""
        out, self.lost = self.lost, []
        return out

    def close(self) -> None:
        for node, probes in self.flight.items():
            for sock, _ in list(probes):
                self._done(node, sock, None)


class NodeLosses:
    """The pilot's side of a node lost: it holds how each node was lost, in words
    (``losses``); it is given the pilot's packer, running members, queue, output streams
    and the callables it calls, and its node watch once the pilot's loop has one
    (``watch``: SLURM only). The node agent of a lost node is the pilot's to close
    (pilot.agent.PilotAgent._watch_nodes: remote.py)."""

    def __init__(self, packer: Packer, running: dict[int, Member], queue: deque[dict], streams: StreamWriter,
                 emit: Callable[..., None], hand_back: Callable[..., None],
                 fail_now: Callable[[dict, int, str], None]):
        self.packer = packer
        self.running = running
        self.queue = queue
        self.streams = streams
        self.emit = emit
        self.hand_back = hand_back
        self.fail_now = fail_now
        self.watch: NodeWatch | None = None  # the other nodes' liveness (SLURM: their slurmd), from the loop's start
        self.losses: dict[str, str] = {}  # node -> how it was lost, in words

    def why_never(self, shape: tuple) -> str | None:
        """Why a member of this shape can never run in this allocation (the packer's word,
        with what became of the nodes it lost), or None."""
        never = self.packer.why_never(*shape)
        if never and self.losses:
            never += " (" + "; ".join(self.losses.values()) + ")"
        return never

    def lost_node_of(self, member: Member) -> str | None:
        """The first of the member's nodes the watch gave up, or None."""
        if self.watch is None or not self.watch.gone:
            return None
        return next((n.name for n, _ in member.placement if n.name in self.watch.gone), None)

    def lost_why(self, node: str) -> str:
        return f"node {node} lost ({self.watch.why.get(node, 'no answer') if self.watch else 'no answer'})"

    def member_lost(self, task: dict, node: str, why: str) -> None:
        """A member whose node died under it: reported (``node_lost``), a line in its stderr,
        and handed back to the engine, which runs it again as its next attempt (on this
        pilot's other nodes while they have room). Never an ``end``: what it did there is
        not known, so it is recorded neither as succeeded nor as failed."""
        self.losses.setdefault(node, why[-300:])
        self.emit(NODE_LOST, node=node, n=task["n"], m=task["m"], why=why[-300:])
        note_stderr(self.streams, task, f"{why}: run again elsewhere")
        self.hand_back(task, why)

    def lose_node(self, name: str) -> None:
        """Act on a node the watch found lost: nothing more goes there, and what runs there
        is stopped (its launcher, here) and handed back as it is reaped."""
        why = self.losses[name] = self.lost_why(name)
        say(f"{why}; its members go to the other nodes of the allocation")
        self.packer.kill_node(name)
        for m in list(self.running.values()):
            if m.agent is None and any(n.name == name for n, _ in m.placement):
                # (srun or mpiexec here: the member there is gone; reaped, it is handed
                # back, its node being among the watch's gone: lost_node_of)
                killpg(m.pid, signal.SIGKILL)

    def fail_unplaceable(self) -> None:
        """After a node died: members that no longer fit anywhere fail now, with the reason,
        instead of waiting for cores that will never come back."""
        keep: deque[dict] = deque()
        for task in self.queue:
            never = self.why_never(task_shape(task))
            if never:
                self.fail_now(task, 1, f"cannot be placed: {never}")
            else:
                keep.append(task)
        self.queue.clear()  # (in place: the queue is the pilot's, shared)
        self.queue.extend(keep)
