"""The tick: what the service does every second (a Celery beat entry runs it in the worker).

1. **Adopt runs.** Every run the service drives whose engine is not running (the engine
   was killed, the machine or the service restarted) and that has not ended gets a new
   engine, which resumes it from its journal: nothing finished runs again, nothing is
   lost. ``engine.lock`` (flock) keeps it to one engine per run, so two ticks, or two
   workers, that both start one cannot run it twice: the second engine finds the lock
   taken and leaves.
2. **Fire triggers**: cron slots (:mod:`.cron`), the end of another run, files that
   appeared and settled; each with its overlap rule (allow, skip, queue).

Every step is idempotent: a run a trigger starts has an id derived from what fired it (the
slot, the run that ended, the file and its mtime), and :func:`~.submit.submit_run` finds a
run that exists. So a tick repeated (a redelivered task, a crash between two writes) starts
nothing twice. One tick runs at a time (``tick.lock``, not waited for).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from ..runstate.locks import EngineLock
from ..runstate.rundir import refusal
from . import cron
from .submit import journal_size, start_engine
from ..runstate.service_store import Store

#: A started engine that has not taken its run's lock yet is given this long (imports, replay).
START_GRACE = 30.0
#: Engines started for one run without its journal moving before the service gives it up.
MAX_FRUITLESS_STARTS = 3
OVERLAPS = ("allow", "skip", "queue")
ENDS = ("success", "failure", "any")
#: Most fires a queue trigger keeps waiting; older ones beyond are dropped, with a history line.
MAX_QUEUED = 100


def tick(store: Store, now: float | None = None) -> bool:
    """One round (see the module); False when another tick holds the lock."""
    with store.locked("tick.lock", wait=False) as mine:
        if not mine:
            return False
        store.mark_tick()
        now = time.time() if now is None else now
        ended = supervise(store, now)
        with store.locked():
            triggers = store.triggers()
            before = json.dumps(triggers, sort_keys=True)
            for trig in triggers.values():
                try:
                    evaluate(store, trig, now, ended)
                except Exception as exc:  # one broken trigger must not stop the others
                    store.log(trig["id"], "error", f"{trig['id']}-error-{now}", why=str(exc))
            if json.dumps(triggers, sort_keys=True) != before:
                store.save_triggers(triggers)
        for rec in ended:  # after the run-end triggers fired (a crash before: fired again, same ids)
            store.save_submission(rec)
    return True


# -- runs -------------------------------------------------------------------------------------
def _alive(pid: Any, started: Any = None) -> bool:
    """The process lives, is not a zombie (an engine this worker started and that ended) and
    is the one started: its start time is ``started`` (None, an older record: the pid alone)."""
    from pilot.identity import is_same

    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    return is_same(pid, started if isinstance(started, int) and not isinstance(started, bool) else None)


def run_phase(run_dir: Path) -> tuple[str, bool]:
    """(phase, engine running) of a run, from its lock and its snapshot (runview.phase;
    a stopped run's phase says why)."""
    from ..observe.runview import phase, snapshot

    running = bool(EngineLock(run_dir).holder())
    snap = snapshot(run_dir / "state.json") or {}
    word = phase(snap, running)
    return (f"stopped: {snap['stopped']}" if word == "stopped" else word), running


def supervise(store: Store, now: float) -> list[dict[str, Any]]:
    """Keep an engine on every unfinished run; the records of runs that ended just now
    (marked final, saved by the caller once the run-end triggers have seen them)."""
    ended = []
    for rec in store.submissions():
        if rec.get("final"):
            continue
        run_dir = Path(rec["run_dir"])
        why = refusal(run_dir)
        if why is not None:  # its engine refused it for good: never started again (a resume would run it)
            rec.update(final=True, phase="refused", error=why, ended=now)
            store.save_submission(rec)
            continue
        phase, running = run_phase(run_dir)
        if phase in ("succeeded", "failed", "cancelled"):
            rec.update(final=True, phase=phase, ended=now)
            ended.append(rec)
            continue
        if running or phase.startswith("stopped") or rec.get("phase") == "given up":
            if rec.get("phase") != phase and rec.get("phase") != "given up":
                rec["phase"] = phase
                store.save_submission(rec)
            continue
        # no engine: one starting (not holding the lock yet) is waited for, else one is started
        if _alive(rec.get("pid"), rec.get("pid_started")) and now - float(rec.get("started") or 0) < START_GRACE:
            continue
        if int(rec.get("spawns") or 0) >= MAX_FRUITLESS_STARTS and \
                journal_size(run_dir) == rec.get("journal_at_start"):
            rec["phase"] = "given up"
            rec["error"] = f"{rec['spawns']} engines in a row did nothing; see {run_dir / 'engine.log'}, " \
                           f"then pwe resume {run_dir}"
            store.save_submission(rec)
            continue
        if journal_size(run_dir) != rec.get("journal_at_start"):
            rec["spawns"] = 0  # the last engine got somewhere: this is not a loop
        start_engine(store, rec)
    return ended


# -- triggers ---------------------------------------------------------------------------------
def _run_id(trig: dict[str, Any], stamp: float, key: str) -> str:
    """The run id of what a trigger starts, derived from what fired it (idempotence)."""
    digest = hashlib.sha256(f"{trig['id']}\0{key}".encode()).hexdigest()[:6]
    return f"{trig['name']}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(stamp))}-{digest}"


def _active(store: Store, trig: dict[str, Any]) -> str | None:
    """The trigger's last run while it has not ended."""
    last = trig.get("last_run")
    rec = store.submission(last) if last else None
    return last if rec is not None and not rec.get("final") else None


def _launch(store: Store, trig: dict[str, Any], fire: dict[str, Any]) -> None:
    from .submit import submit_run

    req = {"run_id": fire["run_id"], "path": trig["workflow"], "text": None, "name": trig["name"],
           "sets": trig.get("sets") or {}, "host": trig.get("host"), "cores": trig.get("cores"),
           "values": fire["values"], "trigger": trig["id"], "submitted": time.time(), "origin": "trigger"}
    rec = submit_run(store, req)
    trig["last_run"] = fire["run_id"]
    fields = {"run": fire["run_id"], "values": fire["values"]}
    if rec.get("error"):
        store.log(trig["id"], "refused", fire["run_id"], why=rec["error"], **fields)
    else:
        store.log(trig["id"], "fired", fire["run_id"], **fields)


def _fire(store: Store, trig: dict[str, Any], values: dict[str, Any], stamp: float, key: str) -> None:
    """Start a run, or skip or queue it while the trigger's last run runs (its overlap)."""
    fire = {"run_id": _run_id(trig, stamp, key), "values": values}
    if store.submission(fire["run_id"]) is not None:
        trig["last_run"] = fire["run_id"]
        return  # fired already (a tick repeated)
    busy = _active(store, trig)
    overlap = trig.get("overlap", "skip")
    if busy and overlap == "skip":
        store.log(trig["id"], "skipped", f"skip-{fire['run_id']}", why=f"run {busy} still running", values=values)
    elif busy and overlap == "queue" or (overlap == "queue" and trig.get("pending")):
        pending = trig.setdefault("pending", [])
        if all(p["run_id"] != fire["run_id"] for p in pending):
            pending.append(fire)
            store.log(trig["id"], "queued", f"queue-{fire['run_id']}", run=fire["run_id"], values=values,
                      after=busy)
        while len(pending) > MAX_QUEUED:
            dropped = pending.pop(0)
            store.log(trig["id"], "dropped", f"drop-{dropped['run_id']}", run=dropped["run_id"],
                      why=f"more than {MAX_QUEUED} queued")
    else:
        _launch(store, trig, fire)


def evaluate(store: Store, trig: dict[str, Any], now: float, ended: list[dict[str, Any]]) -> None:
    """Evaluate one trigger (changes its record in place; the caller saves). A disabled
    trigger fires nothing; its cron slots passed meanwhile are not caught up when it is
    enabled again (:func:`set_enabled` moves its ``last`` on)."""
    if not trig.get("enabled", True):
        return
    if trig.get("pending") and not _active(store, trig):
        _launch(store, trig, trig["pending"].pop(0))  # a queued fire: its turn
    kind = trig["kind"]
    if kind == "cron":
        zone = cron.check_zone(trig["tz"])
        last = float(trig.get("last") or trig["created"])
        if now <= last:
            return
        d = cron.decide(trig["cron"], zone, last, now, bool(trig.get("catchup")))
        if d.missed:
            store.log(trig["id"], "missed", f"{trig['id']}-missed-{d.missed[-1]}", slots=len(d.missed),
                      first=cron.iso(d.missed[0]), last=cron.iso(d.missed[-1]),
                      why="the service was not running; " + (
                          "caught up: one run for the latest" if d.catchup else
                          "a later slot ran" if d.fire is not None else "catch-up is off"))
        if d.coalesced:
            store.log(trig["id"], "coalesced", f"{trig['id']}-coalesced-{d.coalesced[-1]}", slots=len(d.coalesced))
        trig["last"] = now
        if d.fire is not None:
            _fire(store, trig, {"scheduled_time": cron.iso(d.fire)}, d.fire, repr(d.fire))
    elif kind == "run-end":
        for rec in ended:
            if rec.get("trigger") == trig["id"] or float(rec.get("ended") or 0) < trig["created"]:
                continue  # never on its own runs (no loop); never on runs that ended before it was made
            if trig.get("of") and rec.get("workflow") != trig["of"]:
                continue
            ok = rec.get("phase") == "succeeded"
            if trig["on"] == "any" or (trig["on"] == "success") == ok:
                _fire(store, trig, {"trigger_run": rec["run_id"]}, float(rec["ended"]), rec["run_id"])
    elif kind == "file":
        _files(store, trig, now)


def _files(store: Store, trig: dict[str, Any], now: float) -> None:
    """A file matching the glob fires once its size and mtime have not changed for
    ``settle`` seconds (a file still being written is not taken half-done). A file taken
    fires again only when it changes (another size or mtime)."""
    taken = trig.setdefault("taken", {})
    seen = trig.setdefault("seen", {})
    settle = float(trig.get("settle", 5.0))
    present = set()
    for path in sorted(glob.glob(trig["glob"])):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not os.path.isfile(path):
            continue
        present.add(path)
        sig = [st.st_size, st.st_mtime]
        if taken.get(path) == sig:
            continue
        if seen.get(path, [None, None, None])[:2] != sig:
            seen[path] = [*sig, now]  # new, or changed since the last look: the settle time starts again
            continue
        if now - seen[path][2] >= settle and now - st.st_mtime >= settle:
            del seen[path]
            taken[path] = sig
            _fire(store, trig, {"trigger_file": os.path.abspath(path)}, st.st_mtime, f"{path}\0{sig}")
    for path in list(seen):
        if path not in present:
            del seen[path]


# -- asked for by a user (pwe trigger enable / disable / fire, the dashboard) ---------------------
def _named(triggers: dict[str, Any], tid: str) -> dict[str, Any]:
    from ..base.errors import InputError
    from ..base.source import did_you_mean

    if tid not in triggers:
        raise InputError(f"no trigger '{tid}'{did_you_mean(tid, triggers)}; pwe trigger list")
    return triggers[tid]


def set_enabled(store: Store, tid: str, enabled: bool, by: str | None = None) -> bool:
    """Enable or disable trigger ``tid`` (its history says so, and who asked); whether it
    changed. A cron trigger enabled again starts from now: no catch-up of the slots it was
    disabled through."""
    with store.locked():
        triggers = store.triggers()
        trig = _named(triggers, tid)
        if bool(trig.get("enabled", True)) == enabled:
            return False
        trig["enabled"] = enabled
        now = time.time()
        if enabled and trig["kind"] == "cron":
            trig["last"] = now
        store.save_triggers(triggers)
    what = "enabled" if enabled else "disabled"
    store.log(tid, what, f"{tid}-{what}-{now}", **({"by": by} if by else {}))
    return True


def fire_now(store: Store, tid: str, by: str | None = None) -> str:
    """Fire trigger ``tid`` now, as its schedule would (its overlap rule holds; a cron
    trigger's run gets ``scheduled_time`` now); the run id it starts (or queues)."""
    now = time.time()
    with store.locked():
        triggers = store.triggers()
        trig = _named(triggers, tid)
        values = {"scheduled_time": cron.iso(now)} if trig["kind"] == "cron" else {}
        key = f"now\0{now!r}\0{by or ''}"
        _fire(store, trig, values, now, key)
        store.save_triggers(triggers)
    run_id = _run_id(trig, now, key)
    store.log(tid, "asked", f"{tid}-asked-{now}", run=run_id, **({"by": by} if by else {}))
    return run_id
