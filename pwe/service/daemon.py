"""``pwe service start | stop | status``, and the service process itself.

The service is one process (``pwe service _main``, detached, holding ``service.lock``)
that keeps two Celery processes alive: a **worker** (solo pool: tasks take milliseconds,
so one process runs them in turn; a run is never a task) and **beat** (in-memory
scheduler: its one entry, the tick, keeps no state). It restarts either when it dies, and
both when ticks stop reaching the worker for ``PWE_SERVICE_STALE`` seconds (30 by default,
:mod:`pwe.base.settings`): the liveness check against workers that stop consuming after a
broker reconnect (celery #8030).

Killing the service (``kill -9`` of all three, the machine going down) loses nothing: the
runs' engines are detached processes with their own journals; one that dies with the
machine is started again by the next tick after ``pwe service start`` (see
:mod:`.supervisor`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..base.errors import InputError, PweError
from ..base.settings import HOME, SERVICE_DIR, SERVICE_STALE, SERVICE_WORKER
from ..runstate.service_store import QUEUE, Store, check_queue, write_private

#: How long `pwe service start` waits for the first tick.
START_WAIT = 60.0


def redact(url: str) -> str:
    """A broker URL with its password replaced by ``***`` (:func:`pilot.broker.redact`)."""
    from pilot.broker import redact as hide

    return hide(url)


def redact_in(text: str, url: str) -> str:
    """``text`` (a broker's own error) with the password of ``url`` replaced by ``***``."""
    from urllib.parse import unquote, urlsplit

    try:
        secret = urlsplit(url).password or ""
    except ValueError:
        secret = ""
    for word in {secret, unquote(secret)} - {""}:
        text = text.replace(word, "***")
    return text


def check_broker(url: str, where: str = "--broker") -> str:
    """A broker URL the service can use (``redis://``, ``rediss://`` with a host, a port
    from 1 to 65535, a database number; ``filesystem://``, the embedded one);
    :class:`InputError` (one line, ``where`` first, the password never in it) otherwise."""
    from pilot.broker import parse_url

    if url != "filesystem://":
        try:
            parse_url(url, ("redis", "rediss"))
        except ValueError as exc:
            raise InputError(f"{where} {exc} (or rediss://; 'embedded': this machine's own broker)") from None
    return url


def check_run_root(path: str) -> Path:
    """``--run-root`` as an absolute path where a directory is, or can be made;
    :class:`InputError` (one line) for one with a control character in it, or where a file,
    a FIFO or a dangling symbolic link stands in its way."""
    from ..base.regular import in_the_way

    if not path or any(ord(c) < 32 or ord(c) == 127 for c in path) or len(path) > 4096:
        raise InputError(f"--run-root {path[:100]!r}: give a directory's path (no control characters)")
    blocked = in_the_way(Path(path))
    if blocked:
        raise InputError(f"--run-root {path}: {blocked[0]} is {blocked[1]}, not a directory; give a directory "
                         "(one that does not exist yet is made)")
    return Path(path).resolve()


def check_ui(text: str) -> str:
    """``--ui HOST:PORT`` (or ``PORT``, on 127.0.0.1) as ``HOST:PORT``; :class:`InputError` else."""
    host, _, port = text.rpartition(":")
    host = host or "127.0.0.1"
    if not port.isdigit() or not 1 <= int(port) <= 65535 or any(ord(c) < 33 for c in host) or len(host) > 255:
        raise InputError(f"--ui {text[:80]!r}: give PORT or HOST:PORT (port 1 to 65535), e.g. 127.0.0.1:8765")
    return f"{host}:{int(port)}"


def _holder(store: Store) -> dict[str, Any] | None:
    """service.json when the service holds its lock (it runs), else None."""
    import fcntl

    try:
        fd = os.open(store.root / "service.lock", os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            info = json.loads((store.root / "service.json").read_text())
        except (OSError, ValueError):
            info = {}
        return info if isinstance(info, dict) else {}
    finally:
        os.close(fd)
    return None


def start(store: Store, broker: str | None, queue: str | None, run_root: str | None,
          ui: str | None = None) -> dict[str, Any]:
    """Start the service in the background; what it runs with once its first tick came.
    Bad input (``broker``, ``queue``, ``run_root``, or what config.json holds) is
    :class:`InputError` before anything is written. ``ui``: ``HOST:PORT`` where the service
    serves the dashboard too (``pwe ui``, a process it keeps alive; "off": no more)."""
    if broker is not None and broker != "embedded":
        check_broker(broker)
    if queue is not None:
        check_queue(queue)
    root = check_run_root(run_root) if run_root is not None else None
    cfg = store.config()
    if broker is None and cfg.get("broker"):
        check_broker(cfg["broker"], f"{store.root / 'config.json'}: broker")
    store.queue()  # (config.json's, checked)
    store.make()
    held = _holder(store)
    if held is not None:
        raise PweError(f"the service of {store.root} is already running (pid {held.get('pid')}); "
                       "pwe service status, or pwe service stop")
    if broker is not None:
        cfg["broker"] = broker if broker != "embedded" else None
    if queue is not None:
        cfg["queue"] = queue
    if root is not None:
        cfg["run_root"] = str(root)
    if ui is not None:
        cfg["ui"] = None if ui == "off" else check_ui(ui)
    from .app import queue_depth

    url = cfg.get("broker") or "filesystem://"
    if queue_depth(url, cfg.get("queue") or QUEUE, store) is None:
        raise PweError(f"the broker {redact(url)} does not answer; check the URL, its password and that it runs")
    store.write_config(cfg)
    since = time.time()
    env = {**os.environ, SERVICE_DIR.name: str(store.root)}
    log = _log(store.root / "service.log")
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "service", "_main"], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log, start_new_session=True, cwd=store.root, env=env)
    log.close()
    deadline = time.time() + START_WAIT
    while time.time() < deadline:
        if proc.poll() is not None:
            raise PweError(f"the service did not start (exit status {proc.returncode}); "
                           f"see {store.root / 'service.log'}")
        tick = store.last_tick()
        if tick is not None and tick >= since and _holder(store):
            return status(store)
        time.sleep(0.2)
    raise PweError(f"the service started (pid {proc.pid}) but no tick reached its worker within {START_WAIT:g} s; "
                   f"see {store.root / 'worker.log'}")


def stop(store: Store, wait: float = 30.0) -> dict[str, Any] | None:
    """Stop the service (worker and beat with it); the runs' engines go on. None when it
    was not running."""
    held = _holder(store)
    if held is None:
        return None
    pid = int(held.get("pid") or 0)
    starts = held.get("starts") if isinstance(held.get("starts"), dict) else {}
    if pid:
        _kill(pid, signal.SIGTERM, starts.get("pid"))
    deadline = time.time() + wait
    while time.time() < deadline and _holder(store) is not None:
        time.sleep(0.1)
    if _holder(store) is not None:
        for key, p in (("worker", held.get("worker")), ("beat", held.get("beat")), ("pid", pid)):
            _kill(p, signal.SIGKILL, starts.get(key))
    return held


def _kill(pid: Any, sig: int, started: Any = None) -> None:
    """Signal a process of the service's, only while it is the one service.json records:
    its start time (``started``; None, a service.json of an older pwe: the pid alone)."""
    from pilot.identity import signal_same

    if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
        signal_same(pid, started if isinstance(started, int) else None, sig)


def status(store: Store) -> dict[str, Any]:
    """What ``pwe service status`` shows (also as JSON)."""
    from .app import queue_depth
    from .supervisor import run_phase

    held = _holder(store)
    cfg = store.config()
    url = cfg.get("broker") or "filesystem://"
    tick = store.last_tick()
    now = time.time()
    runs = []
    for rec in store.submissions():
        phase = rec.get("phase") or "submitted"
        if phase not in ("refused", "given up"):  # (a run that ended may be retried or resumed since)
            phase = run_phase(Path(rec["run_dir"]))[0]
        runs.append({"run_id": rec["run_id"], "phase": phase, "run_dir": rec["run_dir"],
                     "workflow": rec.get("workflow"), "trigger": rec.get("trigger"), "values": rec.get("values") or {},
                     "submitted": rec.get("submitted"), "error": rec.get("error")})
    triggers = trigger_rows(store, now)
    out = {
        "service_dir": str(store.root),
        "running": held is not None,
        "pid": held.get("pid") if held else None,
        "worker": held.get("worker") if held else None,
        "beat": held.get("beat") if held else None,
        "started": held.get("started") if held else None,
        "broker": redact(url) + ("" if cfg.get("broker") else f" (embedded: {store.broker_dir})"),
        "queue": store.queue(),
        "queue_depth": queue_depth(url, store.queue(), store),
        "last_tick_age": round(now - tick, 1) if tick is not None else None,
        "consuming": held is not None and tick is not None and now - tick < SERVICE_STALE.get(),
        "run_root": str(store.run_root()),
        "ui": cfg.get("ui"),
        "runs": runs,
        "triggers": triggers,
    }
    return out


def trigger_rows(store: Store, now: float | None = None) -> list[dict[str, Any]]:
    """The triggers as ``pwe trigger list --json`` (and the dashboard) show them: each as
    :func:`describe` says it, with its ``next`` slot (cron, while enabled)."""
    from . import cron

    now = time.time() if now is None else now
    out = []
    for trig in store.triggers().values():
        nxt = None
        if trig["kind"] == "cron" and trig.get("enabled", True):
            try:
                nxt = cron.iso(cron.next_slot(trig["cron"], cron.check_zone(trig["tz"]), now))
            except InputError:
                pass
        out.append({**describe(trig), "next": nxt})
    return out


def describe(trig: dict[str, Any]) -> dict[str, Any]:
    """A trigger as listings show it: id, kind, what fires it in words, overlap, workflow."""
    if trig["kind"] == "cron":
        when = f"cron '{trig['cron']}' {trig['tz']}" + (", catch-up once" if trig.get("catchup") else ", no catch-up")
    elif trig["kind"] == "run-end":
        when = f"end ({trig['on']}) of " + (f"a run of {trig['of']}" if trig.get("of") else "any run")
    else:
        when = f"file {trig['glob']} (settled {trig.get('settle', 5):g} s)"
    keep = ("id", "kind", "workflow", "name", "overlap", "cron", "tz", "catchup", "on", "of", "glob", "settle", "sets",
            "host", "cores", "created", "last_run")
    return {**{k: trig[k] for k in keep if k in trig}, "when": when, "pending": len(trig.get("pending") or []),
            "enabled": bool(trig.get("enabled", True))}


# -- the service process ------------------------------------------------------------------------
def main(store: Store) -> int:
    """The service process: hold the lock, keep worker and beat alive, stop on SIGTERM."""
    import fcntl

    store.make()
    lock = os.open(store.root / "service.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("another service holds this directory", file=sys.stderr)
        return 1
    _end_leftovers(store)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    queue = store.queue()
    stale = SERVICE_STALE.get()
    env = {**os.environ, SERVICE_DIR.name: str(store.root), SERVICE_WORKER.name: "1"}
    celery = [sys.executable, "-m", "celery", "-A", "pwe.service.app"]
    commands = {
        "worker": celery + ["worker", "--pool=solo", "-Q", queue, "--without-gossip", "--without-mingle",
                            "--without-heartbeat", "-l", "WARNING", "-n", f"pwe-{os.getpid()}@%h"],
        "beat": celery + ["beat", "-S", "celery.beat:Scheduler", "-l", "WARNING"],
    }
    ui = store.config().get("ui")
    if ui:  # the dashboard (pwe ui: its address and login word go to ui.log, owner-only)
        host, _, port = ui.rpartition(":")
        commands["ui"] = [sys.executable, "-m", "pwe", "ui", "--host", host, "--port", port]  # (the service's runs)
    procs: dict[str, subprocess.Popen] = {}
    born: dict[str, float] = {}

    def launch(name: str) -> None:
        with _log(store.root / f"{name}.log") as log:
            procs[name] = subprocess.Popen(commands[name], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                           cwd=store.root, env=env)
        born[name] = time.time()
        _say(f"{name} started (pid {procs[name].pid})")

    def record() -> None:
        from pilot.identity import start_time

        starts = {"pid": start_time(os.getpid()), **{name: start_time(proc.pid) for name, proc in procs.items()}}
        write_private(store.root / "service.json", {
            "pid": os.getpid(), "worker": procs["worker"].pid, "beat": procs["beat"].pid, "started": started,
            "starts": starts,  # each process's start time: a pid alone is recycled (pilot/identity.py)
            **({"ui": procs["ui"].pid} if "ui" in procs else {}),
            "broker": redact(store.config().get("broker") or "filesystem://"), "queue": queue})

    started = time.time()
    for name in commands:
        launch(name)
    record()
    try:
        while not stopping:
            changed = False
            for name, proc in procs.items():
                if proc.poll() is not None:
                    _say(f"{name} exited (status {proc.returncode}); starting it again")
                    launch(name)
                    changed = True
            tick = store.last_tick() or started
            if time.time() - max(tick, min(born.values())) > stale:
                _say(f"no tick has reached the worker for {time.time() - tick:.0f} s: restarting worker and beat "
                     "(a worker that stopped consuming, celery #8030)")
                for name, proc in procs.items():
                    if name == "ui":
                        continue  # (the dashboard has no tick to miss)
                    _end(proc)
                    launch(name)
                changed = True
            if changed:
                record()
            time.sleep(1.0)
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            _end(proc, 15.0)
        (store.root / "service.json").unlink(missing_ok=True)
        _say("stopped")
    return 0


def _end(proc: subprocess.Popen, wait: float = 5.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _end_leftovers(store: Store) -> None:
    """A worker or beat of a service that was killed (kill -9 of its process alone) may
    still run: ended here, so that one service never has two workers on its directory.
    Each is known by the pid and start time service.json recorded (pilot/identity.py);
    a service.json of an older pwe has no start times: then by the pid and the service's
    directory in that process's environment, never by its command line."""
    from pilot.identity import is_same

    try:
        old = json.loads((store.root / "service.json").read_text())
    except (OSError, ValueError):
        return
    if not isinstance(old, dict):
        return
    starts = old.get("starts") if isinstance(old.get("starts"), dict) else None
    for key in ("worker", "beat", "ui"):
        pid = old.get(key)
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            continue
        started = starts.get(key) if starts is not None else None
        mine = is_same(pid, started) if isinstance(started, int) else starts is None and _ours(store, pid)
        if mine:
            _say(f"ending the {key} (pid {pid}) a killed service left behind")
            _kill(pid, signal.SIGKILL, started)


def _ours(store: Store, pid: int) -> bool:
    """A process whose environment names this service's directory (an older service.json)."""
    markers = {f"{SERVICE_DIR.name}={store.root}".encode(),
               f"{HOME.name}={store.root.parent}".encode()}  # (an older pwe's)
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return bool(markers & set(fh.read().split(b"\0")))
    except OSError:
        return False


def _log(path: Path):
    """A log of the service's, for appending, owner-only (what a broker says may name it)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # (one an earlier pwe made with the umask's mode)
    return os.fdopen(fd, "ab")


def _say(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", flush=True)
