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
link is down within about 5-7 s. A probe that timed out while the pilot itself was not
running (a loaded node: the loop came round late) does not count: it is asked again.

The probe sockets are registered in the pilot's selector (data: this watch), so the loop
wakes when one completes; :meth:`NodeWatch.tick` starts and times them out.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import time

from .allocation import slurm_config

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
        self.flight: dict[str, tuple[socket.socket, float]] = {}  # node -> (probe, started)
        self.next = 0.0
        self.last_tick: float | None = None

    def tick(self, now: float | None = None) -> None:
        """Time out probes that took too long; start the round's probes when it is time."""
        now = time.monotonic() if now is None else now
        for node, (_sock, started) in list(self.flight.items()):
            if now - started > self.timeout:
                self._done(node, f"no answer from port {self.port} in {self.timeout:g} s")
        if now < self.next:
            return
        self.next = now + self.every
        for node in self.missed:
            if node in self.gone or node in self.flight:
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
            self.flight[node] = (sock, now)
            self.sel.register(sock, selectors.EVENT_WRITE, self)

    def ready(self, sock: socket.socket) -> None:
        """A probe completed (the selector said it is writable): answered or refused."""
        node = next((n for n, (s, _) in self.flight.items() if s is sock), None)
        if node is None:
            return
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        self._done(node, None if err == 0 else f"port {self.port}: {os.strerror(err)}")

    def _done(self, node: str, miss: str | None) -> None:
        sock, _ = self.flight.pop(node)
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
        for node in list(self.flight):
            self._done(node, None)
