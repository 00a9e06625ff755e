"""Shared parts of the LoadLeveler emulator (llsubmit, llq, llcancel) and its starter.

LoadLeveler no longer exists anywhere to install; these scripts emulate it at the
level of its commands, on this one machine, for the tests of protocols/loadleveler.py.
Standard library only.

State: one JSON file per job step in ``$LLEMU_DIR`` (default /tmp/llemu), changed only
under an flock of ``$LLEMU_DIR/.lock``. Each step has a *starter*, a detached process
(``python3 llemu.py start STEPID``) that plays the schedd/startd: it dispatches the
step, runs the command file, enforces the wall clock limit and records the end.

Life of a step, as llq shows it::

    I (idle, LLEMU_START_DELAY s) -> R -> C                        ends on its own
    H / S / HS (# @ hold = user | system | usersys): stays held until llcancel
    R -> RP -> CA                                                  llcancel
    R -> RP -> RM                                                  hard wall_clock_limit
    I / H -> CA                                                    llcancel before dispatch

A hard wall clock limit is enforced as LoadLeveler does: the step is stopped by
LoadLeveler itself, which llq shows as Remove Pending then Removed (RM); llcancel gives
Canceled (CA). Stopping is SIGTERM, then SIGKILL after LLEMU_GRACE s (default 2), to the
job's process group and to every process whose environment carries the step's
LLEMU_TRACK variable. That is LoadLeveler's process tracking: it reaches members that
made their own session (a process that clears its environment escapes it). When the
command file's shell exits, leftovers are killed the same way. Finished steps stay
listed for LLEMU_FORGET s (default 60), then llq forgets them, as a real scheduler does.

The job: the command file runs as ``SHELL CMDFILE`` (``# @ shell``; the emulator's
default is /bin/bash where LoadLeveler takes the owner's login shell) in ``initialdir``
(default: where llsubmit ran), with stdin, stdout, stderr from ``input``, ``output``,
``error`` (default /dev/null; ``$(jobid)``, ``$(stepid)``, ``$(host)``, ``$(job_name)``,
``$(user)`` are expanded). Its environment: the submitter's with ``environment =
COPY_ALL``, else HOME, USER, LOGNAME, SHELL, a plain PATH and the ``NAME=value`` /
``$NAME`` items of the keyword; never SLURM_* or PBS_* (the emulated node belongs to no
other batch system); then LOADL_STEP_ID, LOADL_JOB_NAME, LOADL_STEP_NAME,
LOADL_STEP_CLASS, LOADL_STEP_OWNER, LOADL_STEP_ACCT, LOADL_STEP_TYPE, LOADL_STEP_INITDIR,
LOADL_TOTAL_TASKS, and for a parallel step LOADL_HOSTFILE (this host's name once per
task: node x tasks_per_node, or total_tasks) and LOADL_PROCESSOR_LIST.

Not emulated: more than one step per command file (one ``# @ queue``), several machines,
classes and their limits, job priorities and real scheduling (every step is dispatched
after the start delay), soft limits (SIGXCPU), executable/arguments other than the
command file itself, dependencies, checkpointing, preemption and vacating, llhold,
llmodify, llq -l/-s/-f, mail notification, history files (llsummary), -X clusters.
The message numbers in errors are in LoadLeveler's style; only 2512-051 is known to be
LoadLeveler's own.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time

FINAL = {"C", "CA", "RM", "TX", "NR", "SX", "V", "X"}
WAITING = {"I", "H", "S", "HS", "NQ", "D"}


def state_dir() -> str:
    d = os.environ.get("LLEMU_DIR", "/tmp/llemu")
    os.makedirs(d, exist_ok=True)
    return d


def setting(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@contextlib.contextmanager
def locked():
    """The one lock every read-modify-write of the state takes."""
    with open(os.path.join(state_dir(), ".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def path_of(step: str) -> str:
    return os.path.join(state_dir(), step + ".json")


def load(step: str) -> dict | None:
    try:
        with open(path_of(step)) as fh:
            return json.load(fh)
    except (FileNotFoundError, ValueError):
        return None


def save(job: dict) -> None:
    tmp = path_of(job["id"]) + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(job, fh)
    os.replace(tmp, path_of(job["id"]))


def update(step: str, **fields) -> dict | None:
    with locked():
        job = load(step)
        if job is not None:
            job.update(fields)
            save(job)
        return job


def all_jobs(forget: bool = True) -> list[dict]:
    """Every step known, oldest first; finished ones older than LLEMU_FORGET are dropped."""
    keep = setting("LLEMU_FORGET", 60.0)
    now = time.time()
    jobs = []
    with locked():
        for name in os.listdir(state_dir()):
            if not name.endswith(".json"):
                continue
            job = load(name[:-5])
            if job is None:
                continue
            if forget and job["state"] in FINAL and now - (job.get("ended") or now) > keep:
                for p in (path_of(job["id"]), job.get("hostfile")):
                    with contextlib.suppress(OSError, TypeError):
                        os.unlink(p)
                continue
            jobs.append(job)
    return sorted(jobs, key=lambda j: j["seq"])


def matches(job: dict, wanted: list[str]) -> bool:
    """A job list item names a job (host.N: all its steps) or a step (host.N.S)."""
    return not wanted or any(w in (job["id"], job["job"]) for w in wanted)


def owner() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def hostname() -> str:
    return socket.gethostname()


# -- stopping a step ----------------------------------------------------------------------

def tracker(step: str) -> str:
    """The variable every process of a step inherits: its id in this state directory
    (step ids repeat across emulator state directories, e.g. parallel tests)."""
    return f"{os.path.realpath(state_dir())}/{step}"


def step_pids(step: str) -> set[int]:
    """Processes whose environment carries the step's tracker (this user's only)."""
    needle = f"LLEMU_TRACK={tracker(step)}\0".encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in b"\0" + fh.read():
                    found.add(int(name))
        except OSError:
            pass
    return found


def signal_step(job: dict, sig: int) -> None:
    if job.get("pid"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job["pid"], sig)
    for pid in step_pids(job["id"]):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# -- the starter: dispatch, run, limit, end -----------------------------------------------

def job_env(job: dict) -> dict[str, str]:
    if job["copy_all"]:
        env = dict(os.environ)
    else:
        env = {k: os.environ[k] for k in ("HOME", "USER", "LOGNAME") if k in os.environ}
        env.update(SHELL=job["shell"], PATH="/usr/local/bin:/usr/bin:/bin")
    env.update(job["env"])
    for k in list(env):
        if k.startswith(("SLURM_", "PBS_", "LOADL_")) or k == "LLEMU_TRACK":
            del env[k]
    env["LLEMU_TRACK"] = tracker(job["id"])
    tasks = job["tasks"]
    env.update(LOADL_STEP_ID=job["id"], LOADL_JOB_NAME=job["name"], LOADL_STEP_NAME="0",
               LOADL_STEP_CLASS=job["class"], LOADL_STEP_OWNER=job["owner"], LOADL_STEP_ACCT=job["account"],
               LOADL_STEP_TYPE=job["type"].upper(), LOADL_STEP_INITDIR=job["initdir"],
               LOADL_TOTAL_TASKS=str(tasks))
    if job["type"] == "parallel":
        with open(job["hostfile"], "w") as fh:
            fh.write(f"{hostname()}\n" * tasks)
        env.update(LOADL_HOSTFILE=job["hostfile"], LOADL_PROCESSOR_LIST=" ".join([hostname()] * tasks))
    return env


def _open(path: str | None, mode: str, initdir: str):
    return open(os.path.join(initdir, path) if path else os.devnull, mode)


def start(step: str) -> None:
    """The starter of one step (run detached by llsubmit)."""
    job = load(step)
    # wait for dispatch: held steps wait for ever (no llhold -r here), llcancel ends the wait
    while True:
        time.sleep(0.05)
        job = load(step)
        if job is None or job["state"] in FINAL:
            return
        if job["state"] == "I" and time.time() >= job["queued"] + setting("LLEMU_START_DELAY", 0.3):
            with locked():
                job = load(step)
                if job["state"] != "I":
                    continue
                env = job_env(job)
                out = _open(job["output"], "w", job["initdir"])
                err = out if job["error"] == job["output"] else _open(job["error"], "w", job["initdir"])
                with _open(job["input"], "r", job["initdir"]) as inp:
                    proc = subprocess.Popen([job["shell"], job["cmdfile"]], cwd=job["initdir"], env=env,
                                            stdin=inp, stdout=out, stderr=err, start_new_session=True)
                job.update(state="R", started=time.time(), pid=proc.pid)
                save(job)
            break
    grace = setting("LLEMU_GRACE", 2.0)
    stop_at = job["started"] + job["wall"] if job["wall"] else None
    kill_at = None
    while True:
        try:
            rc = proc.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.time()
        if kill_at is None:
            if stop_at is not None and now >= stop_at:
                job = update(step, state="RP", why="wall")
            else:
                job = load(step)
            if job["state"] == "RP":  # llcancel, or the limit just now
                signal_step(job, signal.SIGTERM)
                kill_at = now + grace
        elif now >= kill_at:
            signal_step(job, signal.SIGKILL)
            kill_at = float("inf")
    signal_step(job, signal.SIGKILL)  # process tracking: nothing of the step outlives it
    with locked():
        job = load(step)
        final = {"cancel": "CA", "wall": "RM"}.get(job.get("why"), "C")
        job.update(state=final, ended=time.time(), rc=rc)
        save(job)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "start":
        start(sys.argv[2])
    else:
        sys.exit("usage: llemu.py start STEPID")
