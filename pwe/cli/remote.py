"""``pwe run``/``submit``/``resume``/``retry``/``cancel``/``status`` of a run staged to a
login node (:mod:`pwe.engine.remote`): the steps in order from wherever the run stands, what
each did in one line on stderr, and the usual ending (exit 0 all succeeded, 1 some
failed, 3 stopped there; lost contact: say how to take it up again)."""

from __future__ import annotations

import json
import sys
import time

import click

from ..base.errors import ContactError, HostError, InputError, RunStopped, Unconfined
from ..engine.remote import RemoteRun
from .base import ctrl_c_bounded, echo


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n:,} B"


def _say_moved(what: str, rr: RemoteRun, moved: list) -> None:
    sent = sum(m.sent for m in moved)
    how = "sent" if what == "staged" else "received"
    kept = sum(1 for m in moved if m.skipped)
    resumed = [m for m in moved if m.resumed_at]
    line = f"{rr.run_id}: {what} {len(moved)} files ({_size(sum(m.size for m in moved))}), {_size(sent)} {how}"
    if kept:
        line += f", {kept} already there"
    if resumed:
        line += f", {len(resumed)} resumed from where they stopped"
    echo(line, err=True)


def drive(rr: RemoteRun, as_json: bool = False, follow: bool = True, again: str | None = None,
          fresh: bool = False) -> None:
    """Take the run through its steps from where it stands. ``follow`` False (pwe
    submit): stop once it runs there. ``again`` (resume/retry of a run that stopped or
    ended there): start its engine there again first. ``fresh`` (the command that made
    the run): a run refused before anything ran there is undone, not left to resume."""
    ref = rr.run_id
    word = "running"
    try:
        if rr.info["step"] == "stage":
            _say_moved("staged", rr, rr.stage())
        if rr.info["step"] == "submit":
            rr.submit()
            echo(f"{rr.run_id}: running on {rr.runner.display} in {rr.base}/run", err=True)
        elif again:
            word = _word(rr.status())
            if word != "running" and (again == "retry" or word == "stopped"):
                rr.go_on(retry=again == "retry")
                echo(f"{rr.run_id}: {again} on {rr.runner.display}", err=True)
        if not follow:
            click.echo(json.dumps({"run_id": rr.run_id, "run_dir": str(rr.dir)}) if as_json else rr.run_id)
            return
        with ctrl_c_bounded(f"`pwe resume {ref}` takes it up again"):
            word = rr.follow(_progress(rr))
        if word == "stopped":
            raise RunStopped(f"{rr.run_id}: stopped on {rr.runner.display} before its end (`pwe status {ref}` "
                             f"says why); then: pwe resume {ref}")
        _say_moved("fetched", rr, rr.fetch())
    except (HostError, InputError) as exc:
        if fresh and rr.info["step"] in ("stage", "submit") and _nothing_there(rr, exc):
            echo(str(exc), err=True)
            sys.exit(2)
        echo(f"{exc}; what arrived before it is kept" if isinstance(exc, Unconfined) else
             f"{exc}; the run goes on there: `pwe resume {ref}` takes it up again"
             if rr.info["step"] not in ("stage", "submit") else
             f"{exc}; then: pwe resume {ref} (what arrived is kept)", err=True)
        sys.exit(exc.exit_status)
    except KeyboardInterrupt:
        echo(f"interrupted; `pwe resume {ref}` takes it up again", err=True)
        sys.exit(130)
    finally:
        rr.close()
    _ending(rr, as_json, ok=word == "succeeded")


def _nothing_there(rr: RemoteRun, exc: Exception) -> bool:
    """A run refused before it ever ran there (the login node never answered, or its pwe
    refused the workflow): undone on both sides, so nothing is left half-made."""
    never_reached = isinstance(exc, ContactError) and not rr.runner.connects
    if not never_reached and not isinstance(exc, InputError):
        return False
    rr.discard()
    return True


def _word(snap: dict) -> str:
    from ..engine.remote import phase_word

    return phase_word(snap.get("phase", ""))


def _progress(rr: RemoteRun):
    from ..observe.runview import progress
    from ..base.states import NAMES

    last = [0.0, None]

    def report(snap: dict) -> None:
        totals = [int((snap.get("totals") or {}).get(name, 0)) for name in NAMES]
        finished, extra = progress(totals)
        line = f"{rr.run_id}: {finished}/{sum(totals)} finished, {extra}  (on {rr.host.name})"
        now = time.time()
        if line != last[1] and now - last[0] >= 5 or _word(snap) != "running":
            last[0], last[1] = now, line
            echo(line, err=True)

    return report


def _ending(rr: RemoteRun, as_json: bool, ok: bool) -> None:
    """The run, now fetched, said as ``pwe run`` says any run."""
    from .base import leave
    from ..observe.results import load_state
    from ..observe.runview import complete_counts, outcome
    from ..base.states import FAILED, NAMES

    _, st = load_state(rr.dir)
    t = st.totals()
    if as_json:
        click.echo(json.dumps({"run_id": rr.run_id, "run_dir": str(rr.dir), "ok": ok,
                               "totals": dict(zip(NAMES, t)), "remote": f"{rr.runner.display}:{rr.base}/run",
                               "ssh": {"connections": rr.runner.connects, "status_queries": rr.polls},
                               **complete_counts(st)}))
    else:
        echo(f"{rr.run_id}: {outcome(t, st)} of {sum(t)}  ({rr.dir})", err=False)
    if t[FAILED]:
        echo(f"see: pwe show {rr.run_id} --state failed", err=True)
    leave(0 if ok else 1)
