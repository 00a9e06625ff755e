"""Members on the allocation's other nodes: one session per node to a node agent
(``pilot.nodeagent``) that forks the members there, so a member costs no key exchange or
login (over ssh), and no job step (inside SLURM: the agent is one ``srun --overlap`` step
on its node for the pilot's life, instead of a step per member through the controller).
A broken session is a node to probe: gone, its members run elsewhere; still there, they
run again (no result came back). Standard library only."""

from __future__ import annotations

import itertools
import json
import os
import selectors
import shlex
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .launchers import AGENT_SRUN, PREFIXES, command
from .members import Member, say, argv_for
from .packing import Packer, Placement
from .guardian import HELPER_MARGIN, MemberTable, read_orphans_file
from .settings import ORPHAN_GRACE
from .wire import AGENT_ORPHANS, AGENT_RUN, ORPHAN_END, START

if TYPE_CHECKING:
    from .nodewatch import NodeLosses
    from .streams import StreamWriter
    from .tmpdirs import TmpDirs


_encode = json.JSONEncoder(separators=(",", ":")).encode
#: seconds a pilot waits for a lost agent's word past its grace and the guardian's margin:
#: room for the agent to notice its lost stdin and write its last ends
AWAIT_SLACK = 5.0


class NodeAgent:
    """The pilot's end of one ssh session to a node running ``pilot.nodeagent``."""

    def __init__(self, node: str, proc, sel):
        self.node = node
        self.proc = proc
        self.partial = b""
        self.members: dict[int, Member] = {}
        self.sel = sel
        self.local = False  # a spawner on the pilot's own node (pilot.spawners), not ssh
        self.orphans: str | None = None  # where it writes its members' ends should it lose us
        os.set_blocking(proc.stdout.fileno(), False)
        sel.register(proc.stdout.fileno(), selectors.EVENT_READ, self)

    def send(self, **msg: Any) -> bool:
        return self.send_all([msg])

    def send_all(self, msgs: list[dict]) -> bool:
        """Messages in one write; False when the session or pipe is broken."""
        try:
            self.proc.stdin.write(b"".join(_encode(m).encode() + b"\n" for m in msgs))
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def read(self) -> list[dict] | None:
        """New messages, or None when the session ended."""
        try:
            data = os.read(self.proc.stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return []
        if not data:
            return None
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        return [json.loads(line) for line in lines if line.strip()]

    def close(self) -> None:
        try:
            self.sel.unregister(self.proc.stdout.fileno())
        except (KeyError, ValueError):
            pass
        for fh in (self.proc.stdin, self.proc.stdout):
            try:
                fh.close()
            except OSError:
                pass



class Helpers:
    """What the pilot's node agents and local spawners share (pilot/spawners.py): the names
    of their output streams (each one's own), the guardian's hold on them (its member table
    and the key their orphans' ends are signed with: None without a guardian), the keys of
    the members they run (negative, never a pid) and the loop's selector (from its start)."""

    def __init__(self, directory: str, streams: StreamWriter, table: MemberTable | None = None,
                 orphan_key: bytes | None = None):
        self.dir = directory
        self.streams = streams
        self.table = table  # shared with the guardian (pilot/guardian.py), if any
        self.orphan_key = orphan_key  # what the guardian signs orphans.jsonl with (spawners too)
        self.n_writers = 0  # node agents and local spawners started: each one's stream is named apart
        self.keys = itertools.count(-1, -1)  # (next(): a member of an agent's own key)
        self.sel: selectors.BaseSelector | None = None

    def arrange_orphans(self, agent: NodeAgent, name: str) -> None:
        """Tell a new agent (or local spawner) where its members' ends go, signed, should
        this pilot die or its session break, and the grace they get then
        (:mod:`pilot.nodeagent`); its process is one the guardian waits for."""
        if self.table is None:  # (no guardian: no one waits for its word)
            return
        self.table.helper(agent.proc.pid)
        agent.orphans = os.path.join(self.dir, f"orphans-{name}-{self.n_writers}.jsonl")
        agent.send(k=AGENT_ORPHANS, path=agent.orphans, key=self.orphan_key.hex() if self.orphan_key else "",
                   grace=ORPHAN_GRACE.get())

    def stream_for(self, name: str, here: bool = False) -> list[str]:
        """The arguments that give a new node agent or spawner its own output stream in this
        pilot's directory (a name never used before by this pilot: one that took the place
        of a lost one writes a file of its own) and the output cap; ``here``: on this node,
        capturing in the pilot's own scratch (another node's is its $TMPDIR, else /tmp)."""
        self.n_writers += 1
        return ["--stream", os.path.join(os.path.abspath(self.dir), f"out-{name}-{self.n_writers}"),
                "--cap", str(self.streams.cap)] + (["--scratch", self.streams.scratch] if here else [])

    def gone(self, agent: NodeAgent) -> None:
        """An agent or spawner that is no more: the guardian waits for it no longer."""
        if agent.orphans is not None:  # (arranged: the guardian counts it as a helper)
            self.table.helper_gone(agent.proc.pid)


class RemoteNodes:
    """The part of :class:`pilot.agent.PilotAgent` that runs members on other nodes through
    their agents: it holds those agents by node and the members of lost sessions whose
    ends are awaited; it is given the helpers' shared ground, the pilot's tmpdirs, packer,
    running members, launcher prefix, its node losses (pilot/nodewatch.py) and the
    callables it calls. What an agent says of its members is read by the agent's loop
    (pilot.agent.PilotAgent.read_agent: the per-member path)."""

    def __init__(self, helpers: Helpers, tmpdirs: TmpDirs, packer: Packer, running: dict[int, Member],
                 launcher_prefix: str | None, losses: NodeLosses, emit: Callable[..., None],
                 hand_back: Callable[..., None], finish: Callable[..., None],
                 scratch_refused: Callable[[str, str, dict], None]):
        self.helpers = helpers
        self.dir = helpers.dir
        self.tmpdirs = tmpdirs
        self.packer = packer
        self.running = running
        self.launcher_prefix = launcher_prefix
        self.losses = losses
        self.emit = emit
        self.hand_back = hand_back
        self.finish = finish
        self.scratch_refused = scratch_refused
        self.agents: dict[str, NodeAgent] = {}
        self.awaited: list[tuple] = []  # members of lost sessions whose ends their agents write

    def launch_on_agent(self, task: dict, placement: Placement, threads: int, exclusive: bool,
                        member_env: dict, launcher: str = "ssh") -> None:
        """Run a member on another node through that node's agent (one ssh session per
        node instead of one per member: no key exchange or login per member)."""
        node = placement[0][0].name
        if self.tmpdirs.error is not None:  # (the host's scratch names a variable not set: said, never guessed)
            self.packer.release(placement, threads, exclusive)
            self.scratch_refused(node, f"cannot make a member's $TMPDIR: {self.tmpdirs.error}", task)
            return
        agent = self.agents.get(node) or self.start_agent(node, launcher)
        key = next(self.helpers.keys)
        member = Member(task, 0, placement, threads, exclusive, launcher)
        member.agent, member.key = agent, key
        # its own fresh $TMPDIR, made and removed by the agent on that node (pilot/tmpdirs.py)
        tmp = member_env["TMPDIR"] = member_env["PWE_TMPDIR"] = self.tmpdirs.path(task["n"], task["m"], task["a"])
        run = {"k": AGENT_RUN, "id": key, "argv": task.get("_argv") or argv_for(task["cmd"]),
               "cmd": task["cmd"], "cwd": task["cwd"],
               "env": member_env, "tmp": tmp, "n": task["n"], "m": task["m"], "a": task["a"]}
        if task.get("mem"):
            run["mem"] = task["mem"]  # (enforced by the agent there: pilot/memwatch.py)
        if "py" in task:  # a function member: a call to a warm worker there (pilot/nodeagent.py)
            run["py"], run["kw"] = task["py"], task.get("kw") or {}
            if task.get("vd"):
                run["vd"] = task["vd"]
            if task.get("_box"):  # (the container its worker runs in there: pilot/containers.py)
                run["box"] = task["_box"]
        if agent is None or not agent.send_all([run]):
            self.packer.release(placement, threads, exclusive)
            if agent is not None:  # its session is broken: its members and this one go back
                self.agent_lost(agent, extra=[task])
            else:
                self.node_failed(node, [task])
            return
        agent.members[key] = member
        self.running[key] = member
        self.emit(START, n=task["n"], m=task["m"], a=task["a"], nodes=[node])

    def start_agent(self, node: str, launcher: str = "ssh") -> NodeAgent | None:
        import subprocess

        import pilot as pkg

        root = os.path.dirname(os.path.dirname(os.path.abspath(pkg.__file__)))
        # its members' output into a stream of its own (no two processes append to one file)
        stream = self.helpers.stream_for(f"node-{node}")
        if launcher == "srun":
            # a step of one task on that node, sharing its cores with the members (--overlap)
            argv = command(AGENT_SRUN, node=node) + ["env", f"PYTHONPATH={root}", sys.executable, "-m",
                                                     "pilot.nodeagent"] + stream
        else:
            remote = (f"exec env PYTHONPATH={shlex.quote(root)} {shlex.quote(sys.executable)} -m pilot.nodeagent "
                      + " ".join(shlex.quote(w) for w in stream))
            argv = self._ssh_head(node) + [remote]
        try:
            # (from the pilot's directory: its cwd may be a member's, tidied away since, and
            # srun will not start from a directory that is gone)
            proc = subprocess.Popen(argv, cwd=self.dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=open(os.path.join(self.dir, f"agent-{node}.log"), "ab"),
                                    start_new_session=True)
        except OSError as exc:
            say(f"cannot start {launcher} to {node}: {exc}")
            return None
        agent = NodeAgent(node, proc, self.helpers.sel)
        self.agents[node] = agent
        self.helpers.arrange_orphans(agent, f"node-{node}")
        return agent

    def agent_lost(self, agent: NodeAgent, extra: list[dict] = (), dead: bool = False) -> None:
        """A node's session is gone: what ran there (and ``extra``) goes back to the engine.
        ``dead``: the node is known lost (pilot/nodewatch.py), no need to ask it. Else its
        agent, which lost us, gives its members the grace and writes their ends
        (pilot/nodeagent.py): they are waited for (:meth:`settle_awaited`), so that a
        member is run again only once it is known to have ended without a result."""
        agent.close()
        if dead:
            try:  # (its ssh or srun would wait on a node that will not answer)
                agent.proc.kill()
            except OSError:
                pass
        self.helpers.gone(agent)
        self.agents.pop(agent.node, None)
        lost = list(agent.members.values())
        agent.members.clear()
        for m in lost:
            self.running.pop(m.key, None)
            self.packer.release(m.placement, m.threads, m.exclusive)
        try:
            with open(os.path.join(self.dir, f"agent-{agent.node}.log"), "rb") as fh:
                said = fh.read()[-2000:].decode("utf-8", "replace").strip()
        except OSError:
            said = ""
        waiting = [m for m in lost if not m.killed]
        if agent.orphans is not None and not dead and waiting and not self.node_alive(agent.node):
            dead = True  # (a node that does not answer writes no word: its members go elsewhere now)
        if agent.orphans is not None and not dead and waiting:
            self.awaited.append((time.time() + ORPHAN_GRACE.get() + HELPER_MARGIN + AWAIT_SLACK, agent, waiting,
                                 list(extra), said))
            for m in lost:
                if m.killed:
                    self.finish(m, -signal.SIGKILL)
            return
        self.node_failed(agent.node, [m.task for m in waiting] + list(extra),
                         killed=[m for m in lost if m.killed], said=said, dead=dead)

    def settle_awaited(self, now: float) -> None:
        """The members of lost sessions whose ends their agents are to write: each one
        ended on its own is finished with its exit status; the rest (killed there, or no
        word by the deadline: the node or its agent died) go back as a broken session's."""
        for entry in list(self.awaited):
            deadline, agent, waiting, extra, said = entry
            ends = {(o["n"], o["m"], o["a"]): o for o in read_orphans_file(agent.orphans, self.helpers.orphan_key)}
            left = []
            for m in waiting:
                o = ends.get((m.task["n"], m.task["m"], m.task["a"]))
                if o is None:
                    left.append(m)
                elif o["k"] == ORPHAN_END and type(o.get("rc")) is int:
                    self.finish(m, o["rc"], at=o.get("t"))
                else:
                    extra.append(m.task)
            entry[2][:] = left
            if left and now < deadline:
                continue
            self.awaited.remove(entry)
            self.node_failed(agent.node, [m.task for m in left] + extra, said=said)

    def node_failed(self, node: str, tasks: list[dict], killed: list[Member] = (), said: str = "",
                    dead: bool = False) -> None:
        """A node's session broke. Its members go back to the engine, which runs them again
        as their next attempt: if the node is gone, on the other nodes (not their fault:
        ``node_lost``); if it still answers, anywhere (no result came back)."""
        if dead or not self.node_alive(node):
            self.packer.kill_node(node)
            # (the node watch's words when it found the node lost, else the session's last)
            losses = self.losses.losses
            why = losses.get(node) or f"node {node} became unreachable" + (f": {said[-300:]}" if said else "")
            losses[node] = why
            say(f"{why}; its members go to the other nodes")
            for t in tasks:
                self.losses.member_lost(t, node, why)
        else:
            for t in tasks:
                self.hand_back(t, f"its session to node {node} ended: {said[-200:]}")
        for m in killed:  # members we were stopping anyway: report as if reaped
            self.finish(m, -signal.SIGKILL)
        self.losses.fail_unplaceable()

    def _ssh_head(self, node: str) -> list[str]:
        """The ssh command (host's prefix or the default) that reaches one node."""
        return command(self.launcher_prefix or PREFIXES["ssh"], node=node, nodes=node, hosts=node, nnodes=1, ranks=1,
                       per_node=1, threads=1, cwd="/")

    def node_alive(self, name: str) -> bool:
        """Can the node still run a command? Inside SLURM, does its slurmd answer (the
        node watch's probe); else one short ssh round trip."""
        import subprocess

        if self.losses.watch is not None:
            return self.losses.watch.answers(name)
        head = self._ssh_head(name)
        if head and head[0].endswith("ssh"):
            head[1:1] = ["-S", "none"]  # a fresh connection, even if the prefix multiplexes
        try:
            return subprocess.run(head + ["true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=8, cwd="/").returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
