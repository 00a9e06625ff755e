"""A constructor per journal record kind: every writer of the journal makes its records
here, so that a kind's fields are said once (their meaning: the table in
:mod:`pwe.runstate.journal`, :data:`pwe.runstate.journal.FIELDS`).

Each is a plain function returning the record's dict, nothing more: the engine makes
three of them a member (an assign, a start, an end) for millions of members, so there is
no class, no validation and no copy here; what is read back is checked by
:func:`pwe.runstate.journal.check`. A field given as None (or 0 where the table says
"1" or a count) is left out, as the writers left it out before: absent reads as none
to every reader. ``t`` is the time the record was written (epoch seconds) unless said.

The compacted forms (an assign's ``len``, an end's ``ran``, the ``ends`` record) are the
journal's own (:meth:`pwe.runstate.journal.Journal.append`); a writer makes the plain ones.
"""

from __future__ import annotations

from typing import Any

from .journal import (ASSIGN, CANCEL, COMPLETE, EDGE, END, FINISH, HALT, HOLD, NODE_LOST, NOTE, OFFSET, PILOT,
                      PILOT_DRAIN, PILOT_GONE, SET, REJECT, RESUME, RETRY, REUSED, RUN, START, STOPPED, UNASSIGN)

# -- the run ---------------------------------------------------------------------------------


def run(t: float, pid: int, checks: list[str] | None = None, by: str | None = None) -> dict[str, Any]:
    """An engine began the run (``pid``: its own; ``checks``: nodes checked by a Python
    callable; ``by``: who asked)."""
    r: dict[str, Any] = {"e": RUN, "t": t, "pid": pid}
    if checks is not None:
        r["checks"] = checks
    if by:
        r["by"] = by
    return r


def resume(t: float, pid: int, checks: list[str] | None = None, by: str | None = None) -> dict[str, Any]:
    """An engine took the run up again (pwe resume, pwe retry): as :func:`run`."""
    r = run(t, pid, checks, by)
    r["e"] = RESUME
    return r


def finish(ok: bool, t: float) -> dict[str, Any]:
    """The run ended (``ok``: every member done)."""
    return {"e": FINISH, "ok": ok, "t": t}


def halt(why: str, when: str, t: float, **budget: Any) -> dict[str, Any]:
    """No new member starts: ``when`` soon or now; ``budget``: ``node``, ``failed``, ``of``,
    ``budget`` (the failure budget's) or ``coreHours`` (the core-hour budget's)."""
    return {"e": HALT, "why": why, "when": when, **budget, "t": t}


def hold(n: str, param: str, value: str, failed: int, t: float) -> dict[str, Any]:
    """Node ``n``'s members whose ``param`` is ``value`` (its text) and not yet started are
    held: ``failed`` of them failed, none done (``hold:``)."""
    return {"e": HOLD, "n": n, "param": param, "value": value, "failed": failed, "t": t}


def set_values(only: dict[str, list[list[int]]] | None, values: dict[str, Any], rid: str, by: str | None,
               t: float) -> dict[str, Any]:
    """pwe set: the attempts of the members ``only`` names (None: every member) built from
    now on ask for ``values``; ``rid``: the request's id (applied once)."""
    return {"e": SET, "only": only, "values": values, "id": rid, "by": by, "t": t}


def stopped(why: str, t: float) -> dict[str, Any]:
    """The engine stopped before the end (pwe resume goes on)."""
    return {"e": STOPPED, "why": why, "t": t}


def cancel(t: float, by: str | None = None) -> dict[str, Any]:
    """Every member not ended is cancelled."""
    r: dict[str, Any] = {"e": CANCEL, "t": t}
    if by:
        r["by"] = by
    return r


def retry(t: float, by: str | None = None, only: dict[str, list[list[int]]] | None = None) -> dict[str, Any]:
    """Failed and skipped members wait again (``only``: pwe retry -q's, per node)."""
    r: dict[str, Any] = {"e": RETRY, "t": t}
    if by:
        r["by"] = by
    if only is not None:
        r["only"] = only
    return r


def note(what: str, t: float, **about: Any) -> dict[str, Any]:
    """One line for pwe events; ``about``: ``p``, ``node``, ``text``, ``lane``, ``refused``,
    ``retry_at``; of an edge event refused: ``file``, ``pilot``, ``replay_of``, ``replays``."""
    return {"e": NOTE, "what": what, **about, "t": t}


def edge(id: Any, file: Any, pilot: Any, event: Any, job: Any, status: Any, t: Any) -> dict[str, Any]:
    """A signed edge event of a batch job (:mod:`pwe.runstate.notify`), its fields as it came."""
    return {"e": EDGE, "id": id, "file": file, "pilot": pilot, "event": event, "job": job, "status": status, "t": t}


# -- members ---------------------------------------------------------------------------------


def assign(n: str, m: int, a: int, p: str, t: float | None = None, asks: dict[str, Any] | None = None
           ) -> dict[str, Any]:
    """Member ``m`` of node ``n``, attempt ``a``, handed to pilot ``p``; ``asks``: ``mem``,
    ``wall``, what a retry asks for more of."""
    if asks:
        return {"e": ASSIGN, "n": n, "m": m, "a": a, "p": p, "t": t, **asks}
    if t is None:  # (recovery's: the pilot's own files said it, no time of ours)
        return {"e": ASSIGN, "n": n, "m": m, "a": a, "p": p}
    return {"e": ASSIGN, "n": n, "m": m, "a": a, "p": p, "t": t}


def start(n: str, m: int, a: int, p: str, t: float | None, pid: int = 0, nodes: list[str] | None = None
          ) -> dict[str, Any]:
    """A member started (``t``: the pilot's clock); ``pid`` when known, ``nodes`` when not
    only its pilot's host."""
    r: dict[str, Any] = {"e": START, "n": n, "m": m, "a": a, "p": p, "t": t}
    if pid:
        r["pid"] = pid
    if nodes:
        r["nodes"] = nodes
    return r


def end(n: str, m: int, a: int, p: str, t: float | None, rc: int, dt: float | None, out: dict[str, Any] | None = None,
        why: str | None = None, reason: str | None = None, cpu: float | None = None, rss: int | None = None
        ) -> dict[str, Any]:
    """A member ended with exit status ``rc`` after ``dt`` s (``t``: the pilot's clock);
    ``out`` its outputs, ``why``, ``reason`` (oom, walltime, straggler, invalid:
    pilot/wire.py REASONS), ``cpu`` s and ``rss`` KB as the pilot measured them. (A check's
    verdict is added by pwe/planning/trees.py.)"""
    r: dict[str, Any] = {"e": END, "n": n, "m": m, "a": a, "p": p, "t": t, "rc": rc}
    if out:
        r["out"] = out
    if why:
        r["why"] = why
    if reason:
        r["reason"] = reason
    r["dt"] = dt
    if cpu is not None:
        r["cpu"] = cpu
    if rss is not None:
        r["rss"] = rss
    return r


def unassign(n: str, m: int, p: str, a: int | None = None, why: str | None = None, t: float | None = None,
             lost: bool = False, halted: bool = False) -> dict[str, Any]:
    """A member queued or running on pilot ``p`` is ready again (or quarantined): ``lost``
    (it was running when its pilot or node was lost: counted against maxLosses),
    ``halted`` (stopped by a halt)."""
    r: dict[str, Any] = {"e": UNASSIGN, "n": n, "m": m}
    if a is not None:
        r["a"] = a
    r["p"] = p
    if why is not None:
        r["why"] = why
    if lost:
        r["lost"] = 1
    if halted:
        r["halted"] = 1
    if t is not None:
        r["t"] = t
    return r


def complete(n: str, r: list[list[int]]) -> dict[str, Any]:
    """Members of node ``n`` found complete by their products: runs [[lo, hi], ...]."""
    return {"e": COMPLETE, "n": n, "r": r}


def reused(n: str, source: str, r: list[list[int]], out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Members of node ``n`` done without running, from run ``source`` (its ``from``): runs
    [[lo, hi, from_lo], ...]; ``out``: their outputs by member."""
    rec: dict[str, Any] = {"e": REUSED, "n": n, "from": source, "r": r}
    if out:
        rec["out"] = out
    return rec


# -- pilots ----------------------------------------------------------------------------------


def pilot(p: str, host: str, lane: str, slots: int, t: float, **how: Any) -> dict[str, Any]:
    """A pilot started or submitted; ``how``: ``pid`` and ``started`` (a process), or ``job``,
    ``batch`` and ``wall`` (a batch job); pwe pilot add's ``added``, ``serves``, ``lane_def``."""
    return {"e": PILOT, "p": p, "host": host, "lane": lane, "slots": slots, "t": t, **how}


def pilot_drain(p: str, req: str, t: float) -> dict[str, Any]:
    """pwe pilot drain asked pilot ``p`` to leave (``req``: the request's id)."""
    return {"e": PILOT_DRAIN, "p": p, "req": req, "t": t}


def node_lost(p: str, node: str, why: str, t: float) -> dict[str, Any]:
    """A node of pilot ``p``'s allocation died."""
    return {"e": NODE_LOST, "p": p, "node": node, "why": why, "t": t}


def pilot_gone(p: str, why: str, t: float) -> dict[str, Any]:
    """The pilot is gone."""
    return {"e": PILOT_GONE, "p": p, "why": why, "t": t}


def offset(p: str, off: Any, q: int | None = None, qs: dict[str, int] | None = None) -> dict[str, Any]:
    """Pilot ``p``'s transport cursor after what is journaled; ``q`` the last sequence number
    applied, ``qs`` the last seen per transport (None: all through the spool)."""
    if q is None:
        return {"e": OFFSET, "p": p, "off": off}
    if qs is None:
        return {"e": OFFSET, "p": p, "off": off, "q": q}
    return {"e": OFFSET, "p": p, "off": off, "q": q, "qs": qs}


def reject(p: str, why: str, k: Any, q: Any, detail: Any, text: str, t: float) -> dict[str, Any]:
    """A pilot message refused (forged, replayed, malformed, resent), never applied."""
    return {"e": REJECT, "p": p, "why": why, "k": k, "q": q, "detail": detail, "text": text, "t": t}
