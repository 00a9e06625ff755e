"""Per-node setup (``setup_per_node``): lines a pilot runs once on each of its nodes
before the first member there that needs them (staging a container image, warming a
cache). Standard library only.

The engine sends each set once (a ``setup`` message: ``id``, ``lines``) and names it in
every task that needs it (the task's ``setup``). Before such a member is placed, the pilot
starts the set on every live node where it has not run yet, each in the background (on
its own node with bash, elsewhere through the launcher its members use there: ssh or
srun), and places the member only on nodes where it exited 0. Its output is kept in the
pilot's directory (``setup-<node>-<id>.log``). A node whose setup failed takes no member
that needs it; when it failed on every node, such members are handed back (no attempt
spent) with a why that begins with :data:`SETUP_FAILED`, and the engine gives them to
another pilot. Each outcome is a ``node_setup`` message (node, id, rc, dt, log).

A node's ``modules:`` and ``container:`` come as lines of its set (pwe/engine/environs.py),
run with two variables set here: ``PWE_SETUP_ENV``, where the lines write the environment
before and after ``module load`` (``.0``, ``.1``: what changed is given to every member of
the set on that node, :meth:`NodeSetup.prepare`; a variable a load unsets is not unset for
them), and ``PWE_SETUP_BINDS``, the directories a container mounts (a charliecloud image
gets their mount points). A member whose task names a container runs inside it
(pilot/containers.py).
"""

from __future__ import annotations

import os
import pwd
import signal
import time
from collections.abc import Callable
from typing import Any

from . import containers
from .allocation import Allocation
from .launchers import choose, wrap
from .members import say
from .packing import Packer, Placement
from .wire import NODE_SETUP

#: How a ``back`` says that no node of the pilot could run the member's setup_per_node.
SETUP_FAILED = "setup_per_node failed on every node of this pilot"


class NodeSetup:
    """The part of :class:`pilot.agent.PilotAgent` that runs setup_per_node sets: it holds
    the sets, each node's outcome and the setups running; it is given the pilot's
    directory, allocation, packer, launcher settings and its events' emit."""

    def __init__(self, directory: str, alloc: Allocation, packer: Packer, launcher: str | None,
                 launcher_prefix: str | None, emit: Callable[..., None], tmp_base: str | None = None):
        self.dir = directory
        self.alloc = alloc
        self.packer = packer
        self.launcher = launcher
        self.launcher_prefix = launcher_prefix
        self.emit = emit
        self.setup_sets: dict[str, list[str]] = {}  # setup_per_node sets by id
        self.node_setups: dict[tuple[str, str], str] = {}  # (node, id) -> running | ok | failed
        self.setup_procs: dict[int, tuple] = {}  # pid -> (process, node, id, started, log)
        self.tmp_base = tmp_base  # the members' $TMPDIRs' directory (pilot/tmpdirs.py): a container mounts it
        self.node_env: dict[tuple[str, str], dict[str, str]] = {}  # (node, id) -> what its module load set

    def take_setup(self, msg: dict[str, Any]) -> None:
        """A ``setup`` message: the set's lines, by id (a second copy changes nothing)."""
        sid, lines = msg.get("id"), msg.get("lines")
        if isinstance(sid, str) and isinstance(lines, list) and sid not in self.setup_sets:
            self.setup_sets[sid] = [str(x) for x in lines]

    def _setup_nodes(self) -> list[Any]:
        return [n for n in self.alloc.nodes if n.name not in self.packer.dead]

    def setup_failed_everywhere(self, task: dict) -> bool:
        """Whether the task's setup failed on every live node of this pilot."""
        sid = task.get("setup")
        if not sid:
            return False
        done = self.node_setups
        return all(done.get((n.name, sid)) == "failed" for n in self._setup_nodes())

    def place_for(self, task: dict, shape: tuple, near: str | None = None) -> Placement | None:
        """Where the member goes: as the packer places it, but only on nodes where its setup
        ran and exited 0; the set is started on the nodes where it has not run yet.
        ``near``: the node a group's previous member ran on, tried first (the group keeps
        its slot there: packing.place_on)."""
        sid = task.get("setup")
        if near and (not sid or self.node_setups.get((near, sid)) == "ok"):
            placement = self.packer.place_on(near, *shape)
            if placement is not None:
                return placement
        if not sid:
            return self.packer.place(*shape)
        avoid = set()
        for node in self._setup_nodes():
            st = self.node_setups.get((node.name, sid))
            if st is None:
                self.start_setup(node, sid, task.get("ctr"))
                st = self.node_setups.get((node.name, sid))
            if st != "ok":
                avoid.add(node.name)
        if not avoid:
            return self.packer.place(*shape)
        return self.packer.place_avoiding(avoid, *shape)

    def start_setup(self, node: Any, sid: str, ctr: dict | None = None) -> None:
        lines = self.setup_sets.get(sid)
        if lines is None:  # (the engine sends a set before any task naming it)
            say(f"a task names setup {sid!r}, which was never sent; its nodes count it as failed")
            self.node_setups[(node.name, sid)] = "failed"
            return
        script = "set -e\n" + "\n".join(lines) + "\n"
        placement = Placement([(node, 1)])
        launcher = choose(self.alloc.kind, placement, 1, self.launcher)
        prefix = self.launcher_prefix if self.launcher in (None, "auto", launcher) else None
        env = {"PWE_SETUP_NODE": node.name, "PWE_SETUP_ENV": os.path.join(self.dir, f"setup-{node.name}-{sid}.env")}
        if ctr:
            mounts = containers.binds(list(ctr.get("bind") or ()), self.tmp_base)
            bad = containers.bad_bind(mounts)
            if bad:
                say(f"container on node {node.name}: {bad}: no member that needs it runs there")
                self.node_setups[(node.name, sid)] = "failed"
                self.emit(NODE_SETUP, node=node.name, id=sid, rc=1, dt=0.0, log="")
                return
            env["PWE_SETUP_BINDS"] = "\n".join(mounts)
        argv = ["bash", "-c", script] if launcher == "fork" else \
            wrap(launcher, ["bash", "-c", script], script, placement, 1, 1, self.dir, env, prefix)
        log = os.path.join(self.dir, f"setup-{node.name}-{sid}.log")
        import subprocess  # (only a pilot with setup_per_node pays for it at its start)

        try:
            with open(log, "ab") as out:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        cwd=self.dir, env={**os.environ, **env}, start_new_session=True)
        except OSError as exc:
            say(f"cannot start setup_per_node on {node.name}: {exc}")
            self.node_setups[(node.name, sid)] = "failed"
            self.emit(NODE_SETUP, node=node.name, id=sid, rc=127, dt=0.0, log=log)
            return
        self.node_setups[(node.name, sid)] = "running"
        self.setup_procs[proc.pid] = (proc, node.name, sid, time.time(), log)

    def setup_reaped(self, pid: int, rc: int) -> bool:
        """A child the member reaper collected: True when it was a setup (now recorded)."""
        entry = self.setup_procs.pop(pid, None)
        if entry is None:
            return False
        proc, node, sid, t0, log = entry
        proc.returncode = rc  # (reaped here: Popen must not wait for it again)
        ok = rc == 0
        made = self._module_env(log[:-len(".log")] + ".env") if ok else None
        if made is None:  # (its environment files unreadable: the node cannot give members what it loaded)
            ok, rc = False, rc or 1
        elif made:
            self.node_env[(node, sid)] = made
        self.node_setups[(node, sid)] = "ok" if ok else "failed"
        if not ok:
            say(f"setup_per_node failed on node {node} (exit {rc}): no member that needs it runs there; "
                f"its output: {log}")
        self.emit(NODE_SETUP, node=node, id=sid, rc=rc, dt=round(time.time() - t0, 3), log=log)
        return True

    @staticmethod
    def _module_env(prefix: str) -> dict[str, str | None] | None:
        """What a set's ``module load`` changed (``PREFIX.0`` before, ``PREFIX.1`` after;
        the files are removed): {} for a set that loads none; None when they cannot be read."""
        try:
            with open(prefix + ".0", "rb") as fh:
                before = fh.read()
        except FileNotFoundError:
            return {}
        except OSError:
            return None
        try:
            with open(prefix + ".1", "rb") as fh:
                after = fh.read()
        except OSError:
            return None
        finally:
            for suffix in (".0", ".1"):
                try:
                    os.unlink(prefix + suffix)
                except OSError:
                    pass
        was = dict(v.split(b"=", 1) for v in before.split(b"\0") if b"=" in v)
        out: dict[str, str | None] = {}
        for item in after.split(b"\0"):
            name, eq, value = item.partition(b"=")
            if eq and name not in _SHELL_OWN and was.pop(name, None) != value:
                out[name.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
            elif eq:
                was.pop(name, None)
        for name in was:  # (what the load unset: None, taken out of its members' environment: spawn.environ)
            if name not in _SHELL_OWN:
                out[name.decode("utf-8", "surrogateescape")] = None
        return out

    def prepare(self, task: dict, placement: Placement, member_env: dict) -> None:
        """A member placed at ``placement``: where its task names a set, the environment the
        set's modules made on its (first) node into ``member_env``; where it names a
        container, its argv to run inside it (``task["_argv"]``: pilot/containers.py; its
        $TMPDIR, this pilot's where it runs on one node, is mounted too), or for a function
        member the container its worker runs in (``task["_box"]``)."""
        if "setup" not in task:
            return
        made = self.node_env.get((placement[0][0].name, task["setup"]))
        if made:
            member_env.update(made)
        ctr = task.get("ctr")
        if ctr:
            if ctr.get("rt") == "charliecloud" and "USER" not in member_env and "USER" not in os.environ:
                member_env["USER"] = _user()  # (ch-run refuses to start without it)
            if "py" in task:  # (a function member: the container its worker is started in, pilot/pyworkers.py)
                task["_box"] = containers.box(ctr, self.tmp_base, bool(task.get("gpus")))
                return
            task["_argv"] = containers.command(ctr, task["cmd"], task["cwd"], member_env,
                                               self.tmp_base if len(placement) == 1 else None,
                                               bool(task.get("gpus")))

    def poll_setups(self) -> None:
        """Collect the setups that ended (those the member reaper did not collect first)."""
        for pid in list(self.setup_procs):
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue  # (collected by the member reaper, which called setup_reaped)
            if got:
                self.setup_reaped(pid, os.waitstatus_to_exitcode(status))

    def stop_setups(self) -> None:
        """The pilot leaves: setups still running are ended."""
        for proc, *_ in self.setup_procs.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass


#: what a set's shell changes of its own environment, never a module's doing
_SHELL_OWN = frozenset({b"_", b"SHLVL", b"PWD", b"OLDPWD", b"PWE_SETUP_NODE", b"PWE_SETUP_ENV", b"PWE_SETUP_BINDS"})


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
