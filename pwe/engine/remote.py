"""Runs on a cluster whose file systems this machine does not share (a host with
``shared_fs: false`` and an ``ssh://`` contact): the engine runs on the login node,
beside its batch system; this machine stages, submits, follows and fetches, all over one
SSH connection (:class:`protocols.ssh.SshRunner`), and needs no scheduler commands.

The steps, each recorded in the local run directory's ``remote.json`` before the next
begins, so that ``pwe resume`` takes up whichever was interrupted:

1. **stage**: the workflow file and the files its ``inputs:`` name (relative to the
   workspace, :mod:`pwe.workflow.inputs`) go to ``BASE/workflow.EXT`` and ``BASE/workspace/...``
   on the login node (``BASE`` = the host's ``remote_dir``/RUN-ID), and the host's own
   entry, as the login node sees it (contact local, shared file systems), to
   ``BASE/hosts.yaml``. :class:`protocols.staging.Stager`: never a half file under its
   real name, an interrupted file resumed, a file already there not sent again.
2. **submit**: ``pwe submit`` there (the host's ``remote_pwe`` command) with
   ``--run-dir BASE/run --workspace BASE/workspace``. Submitted at most once: a
   ``BASE/run/run.json`` found there says it already was.
3. **follow**: one ``pwe status BASE/run --json`` there per interval, over the same
   connection, until the run is no longer running.
4. **fetch**: the remote run directory (each member's output, logs, journal, state)
   into the local one, and the members' declared ``products`` into the local workspace;
   checked and resumed as staging is. The local ``run.json`` becomes the remote one's,
   with the local workspace and a ``remote`` key: ``pwe status``, ``show``, ``logs``,
   ``report`` then read the run here as any other.

A run on such a host runs all its nodes there: one engine, one place.
"""

from __future__ import annotations

import json
import posixpath
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from ..runstate import rundir, runs
from ..base.confine import inside
from ..base.errors import InputError, PweError, RunStopped
from ..base.regular import write_json_atomic

REMOTE_FILE = "remote.json"
POLL = 2.0          # seconds between two status queries of a remote run
_TIMEOUT = 120.0    # seconds for one command there (pwe submit checks the workflow first)


def staged(host: Any) -> bool:
    """Whether runs on ``host`` are staged to its login node (the engine runs there)."""
    return host.contact != "local" and not host.shared_fs


def is_remote(run_dir: Path) -> bool:
    return (run_dir / REMOTE_FILE).is_file()


class RemoteRun:
    """One staged run, seen from this machine: its local directory and ``remote.json``."""

    def __init__(self, run_dir: Path, info: dict[str, Any], on_file: Callable[[Any], None] | None = None):
        from hostinfo.records import host
        from protocols.ssh import SshRunner

        self.dir = run_dir
        self.info = info
        self.host = host(info["host_def"])
        self.runner = SshRunner.from_host(self.host)
        self.on_file = on_file
        self.warnings: list[str] = []
        self.polls = 0  # status queries by this process (one per interval)

    @property
    def run_id(self) -> str:
        return self.info["run_id"]

    @property
    def base(self) -> str:
        return self.info["base"]

    # -- making one ---------------------------------------------------------------------------
    @classmethod
    def create(cls, workflow: str | Path, planned: tuple[Any, dict[str, Any], list[str]],
               sets: dict[str, Any] | None = None, run_dir: str | Path | None = None, cores: int | None = None,
               workspace: str | Path | None = None) -> "RemoteRun":
        """Check what can be checked here (the workflow, its hosts, its inputs exist) and
        make the local run directory; nothing is sent yet."""
        from ..workflow.inputs import expand
        from ..planning.products import workspace as workspace_of

        plan, hosts, warnings = planned
        src = Path(workflow)
        (name, host), *others = hosts.items()
        if others:
            shown = ", ".join(sorted(hosts))
            raise InputError(f"this run uses hosts {shown}; host '{name if staged(host) else others[0][0]}' does not "
                             "share this machine's file systems (shared_fs: false), so its runs are staged to its "
                             "login node and run there whole: give --host for all nodes, or run the others apart",
                             src)
        ws = workspace_of(plan, workspace)
        inputs = expand(list(plan.workflow.inputs), ws, src)
        runs_root = rundir.DEFAULT_ROOT.resolve()
        # (the run root is often inside the workspace: its runs are not this run's inputs)
        inputs = [rel for rel in inputs if not (ws / rel).resolve().is_relative_to(runs_root)]
        run_id = rundir.new_run_id(plan.workflow.name)
        path = Path(run_dir) if run_dir else rundir.DEFAULT_ROOT / run_id
        try:
            path = runs.make_dir(path)
            copy = path / f"workflow{src.suffix or '.yaml'}"
            shutil.copyfile(src, copy)
            info = {"run_id": run_id, "workflow": str(src.resolve()), "copy": copy.name, "sets": sets or {},
                    "host": name, "host_def": host.model_dump(), "cores_option": cores, "created": time.time(),
                    "workspace": str(ws), "inputs": inputs, "step": "stage", "base": None, "remote_run_id": None}
            write_json_atomic(path / "run.json", {k: info[k] for k in ("run_id", "workflow", "copy", "sets",
                                                                              "host", "created", "workspace")}
                                     | {"remote": True})
            write_json_atomic(path / REMOTE_FILE, info)
        except BaseException as exc:  # (nothing left half made)
            runs.unmake(path)
            runs.not_made(path, exc)  # (its filesystem full: one line)
            raise
        from ..runstate.registry import register

        register(run_id, path)
        rr = cls(path, info)
        rr.warnings = warnings
        return rr

    @classmethod
    def open(cls, run_dir: Path) -> "RemoteRun":
        from ..base.errors import RunDamaged
        from ..base.regular import read_json

        try:
            return cls(run_dir, read_json(run_dir / REMOTE_FILE, {"run_id": str, "base": str, "host": str,
                                                                  "host_def": dict}))
        except (OSError, ValueError) as exc:  # (ValueError: a host_def that is not a host's)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
            raise RunDamaged(f"{run_dir / REMOTE_FILE}: cannot be read ({why}); it says where the run was "
                             "staged") from None

    def _record(self, step: str, moved: list[Any]) -> None:
        """What a staging or a fetch cost, kept in remote.json (``transfers``): files,
        bytes, bytes sent, and each file resumed (from where, how much more)."""
        self.info.setdefault("transfers", []).append({
            "step": step, "at": time.time(), "files": len(moved), "bytes": sum(m.size for m in moved),
            "sent": sum(m.sent for m in moved), "already_there": sum(1 for m in moved if m.skipped),
            "resumed": [{"path": m.path, "from": m.resumed_at, "sent": m.sent} for m in moved if m.resumed_at]})

    def _step(self, step: str, **more: Any) -> None:
        self.info.update(step=step, **more)
        write_json_atomic(self.dir / REMOTE_FILE, self.info)

    def close(self) -> None:
        self.runner.close()

    def discard(self) -> None:
        """Undo a run that never ran: its staged files there (when any were sent) and its
        directory here."""
        if self.base and self.runner.connects:
            try:
                self.runner.run(["rm", "-rf", "--", self.base], timeout=_TIMEOUT)
            except PweError:
                pass  # (what cannot be reached now keeps a directory no run uses)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- 1. stage -------------------------------------------------------------------------------
    def stage(self) -> list[Any]:
        """Send the workflow, its inputs and the host's entry; what each file cost."""
        from protocols.staging import Stager

        if self.base is None:  # (absolute, so the engine and pilots there never depend on a cwd)
            self._step("stage", base=posixpath.join(self.runner.sftp().normalize("."), self.host.remote_dir,
                                                    self.run_id) if not self.host.remote_dir.startswith("/")
                       else posixpath.join(self.host.remote_dir, self.run_id))
        ws = Path(self.info["workspace"])
        pairs = [(self._copy(), f"{self.base}/{self.info['copy']}")]
        # (names read back from remote.json: each stays inside the workspace, here and there)
        pairs += [(inside(ws, rel, f"{self.dir / REMOTE_FILE}: input"), f"{self.base}/workspace/{rel}")
                  for rel in self.info["inputs"]]
        moved = Stager(self.runner, self.on_file).put(pairs)
        from protocols.ssh import sftp_makedirs

        sftp_makedirs(self.runner.sftp(), f"{self.base}/workspace")  # (there even when no input is staged)
        self._record("stage", moved)
        entry = self.host.model_dump(exclude_defaults=True, exclude={"name", "contact", "shared_fs", "remote_dir",
                                                                     "remote_pwe"})
        # (JSON is YAML: the login node's pwe reads it as a hosts file)
        self.runner.write_file(f"{self.base}/hosts.yaml", json.dumps({"hosts": {self.info["host"]: entry}}), 0o600)
        self._step("submit")
        return moved

    # -- 2. submit ------------------------------------------------------------------------------
    def submit(self) -> str:
        """Start the run's engine on the login node (once); the run id it has there."""
        if self.info.get("remote_run_id"):
            return self.info["remote_run_id"]
        from protocols.staging import Stager

        if f"{self.base}/run/run.json" in Stager(self.runner).remote_sums([f"{self.base}/run/run.json"]):
            # (submitted before this machine heard the answer: the run is there, not to be made twice)
            remote_id = self._pwe_json(["status", f"{self.base}/run", "--json"]).get("run_id")
        else:
            argv = ["submit", f"{self.base}/{self.info['copy']}", "--hosts", f"{self.base}/hosts.yaml",
                    "--host", self.info["host"], "--run-dir", f"{self.base}/run",
                    "--workspace", f"{self.base}/workspace", "--run-id", self.run_id, "--json"]
            for key, value in self.info["sets"].items():
                argv += ["--set", f"{key}={value}"]
            if self.info.get("cores_option"):
                argv += ["--cores", str(self.info["cores_option"])]
            remote_id = self._pwe_json(argv)["run_id"]
        self._step("follow", remote_run_id=remote_id)
        return remote_id

    # -- 3. follow ------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """``pwe status --json`` of the run there (one command)."""
        return self._pwe_json(["status", f"{self.base}/run", "--json"])

    def follow(self, progress: Callable[[dict[str, Any]], None], interval: float = POLL) -> str:
        """Ask once per ``interval`` until the run there is no longer running; its
        phase in one word (succeeded, failed, cancelled, stopped)."""
        while True:
            snap = self.status()
            self.polls += 1
            progress(snap)
            word = phase_word(snap.get("phase", ""))
            if word != "running":
                return word
            time.sleep(interval)

    def go_on(self, retry: bool) -> None:
        """Start the engine there again (``pwe resume``/``retry --detach``)."""
        self._pwe_json(["retry" if retry else "resume", f"{self.base}/run", "--detach", "--json"])
        self._step("follow")

    def cancel(self) -> bool:
        return bool(self._pwe_json(["cancel", f"{self.base}/run", "--json"]).get("cancelled"))

    # -- 4. fetch -------------------------------------------------------------------------------
    def fetch(self) -> list[Any]:
        """Bring the run directory and the members' products back; what each file cost."""
        from protocols.staging import PART, Stager

        stager = Stager(self.runner, self.on_file)
        there = stager.listing(f"{self.base}/run")
        if "run.json" not in there:
            raise PweError(f"{self.runner.display}: {self.base}/run has no run.json; the run was never made "
                           "there (pwe resume stages and submits it again)")
        # (this machine's own record of the run is never taken from there)
        wanted = [rel for rel in there if rel not in ("run.json", REMOTE_FILE) and not rel.endswith(PART)
                  and rel.rsplit("/", 1)[-1] not in ("engine.lock",)]
        modes = {f"{self.base}/run/{rel}": there[rel][1] for rel in wanted}
        # every name the login node listed is confined to the run directory before any is fetched
        moved = stager.get(self.dir, [(f"{self.base}/run/{rel}", rel) for rel in wanted], modes)
        moved += self._fetch_products(stager)
        self._record("fetch", moved)
        said = self.runner.run(["cat", f"{self.base}/run/run.json"], timeout=_TIMEOUT).stdout
        try:
            remote_info = json.loads(said)
        except ValueError:
            remote_info = None
        if not isinstance(remote_info, dict):
            raise PweError(f"{self.runner.display}: {self.base}/run/run.json is not a JSON object "
                           f"({said[:80]!r}); the run there is damaged")
        # the run as the login node made it, read here: this machine's workspace and workflow
        write_json_atomic(self.dir / "run.json", {
            **remote_info, "workflow": self.info["workflow"], "workspace": self.info["workspace"],
            "hosts_file": None, "remote": {"host": self.info["host"], "login": self.runner.display,
                                           "run_dir": f"{self.base}/run"}})
        self._step("fetched", fetched=time.time())
        return moved

    def _fetch_products(self, stager: Any) -> list[Any]:
        from ..planning.plan import plan_workflow
        from ..planning.products import member_products

        plan = plan_workflow(self._copy(), self.info["sets"], host=self.info["host"])
        nodes = [nid for nid, pn in plan.nodes.items() if pn.products]
        if not nodes:
            return []
        there = stager.listing(f"{self.base}/workspace")
        ws = Path(self.info["workspace"])
        wanted = [rel for nid in nodes for i in range(plan.nodes[nid].size) for rel in member_products(plan, nid, i)
                  if rel in there]
        return stager.get(ws, [(f"{self.base}/workspace/{rel}", rel) for rel in wanted],
                          {f"{self.base}/workspace/{rel}": there[rel][1] for rel in wanted})

    def _copy(self) -> Path:
        """The run's copy of its workflow (its name read back from remote.json: inside the run directory)."""
        return inside(self.dir, self.info["copy"], f"{self.dir / REMOTE_FILE}: copy")

    # -- the one way to ask pwe there -----------------------------------------------------------
    def _pwe_json(self, args: list[str]) -> dict[str, Any]:
        argv = [*self.host.remote_pwe, *args]
        res = self.runner.run(argv, timeout=_TIMEOUT, cwd=self.base)
        if res.status != 0:
            said = (res.stderr.strip().splitlines() or [f"exit status {res.status}"])[-1]
            where = f"on {self.runner.display}: {' '.join(argv[:len(self.host.remote_pwe) + 1])}"
            if res.status == 127 or (res.status == 126 and "not found" in said):  # (no such command there)
                raise InputError(f"host '{self.info['host']}': {where}: {said}; set remote_pwe to the command that "
                                 "runs pwe on the login node")
            if res.status == 2:
                raise InputError(f"{where}: {said}")
            raise (RunStopped if res.status == 3 else PweError)(f"{where}: {said}")
        text = res.stdout.strip()
        try:  # (one object: pretty-printed, or the last line after what a command said first)
            return json.loads(text if text.startswith("{") else text.splitlines()[-1])
        except (ValueError, IndexError):
            raise PweError(f"on {self.runner.display}: {' '.join(argv)} answered {res.stdout[:200]!r}, not JSON; "
                           "is remote_pwe a pwe of this version?") from None


def phase_word(phase: str) -> str:
    """The word of a ``pwe status`` phase: running, succeeded, failed, cancelled, stopped."""
    first = phase.split(":")[0].split(" ")[0]
    return {"finished": "failed", "interrupted": "stopped"}.get(first, first)
