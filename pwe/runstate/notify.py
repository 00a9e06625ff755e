"""User-exit callbacks: a batch system's job edge events, authenticated, into the run.

A pilot's job script calls ``pwe notify --run DIR --pilot ID EVENT JOBID [STATUS]`` when
the job starts and ends (SLURM: a trap in the script; LoadLeveler: its user exit). The
event is written as one small file under ``DIR/edges/`` (created whole by a rename, so
concurrent jobs on NFS never interleave), signed with HMAC-SHA256 under the run's
secret (``DIR/secret``, owner-only). The engine takes in only events whose signature
verifies, journals them, and lets them cover what a dead pilot never said: a job that
ended before its pilot reported gets its members reissued at once, without waiting for
the next status poll. Pilot events win over edge events.

Each event carries an ``id`` (random, under the signature): the engine journals an event
once, and a replay of it (the same signed file again, under any name, or delivered twice)
is known by its id and ignored, with a note in the journal that counts it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from ..base.errors import InputError, PweError
from ..base.ids import MAX_JOB_ID, MAX_PILOT_ID, is_job_id, is_pilot_id
from ..base.regular import read_bytes, read_text

EVENTS = ("queued", "started", "ended")
#: an edge event file is a few hundred bytes; one larger is not pwe's and is not parsed
EDGE_LIMIT = 64 * 1024


def make_secret(run_dir: Path) -> None:
    path = run_dir / "secret"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32))


def _key(run_dir: Path) -> bytes:
    return read_text(run_dir / "secret", limit=4096).strip().encode()


def _mac(key: bytes, body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, canonical, hashlib.sha256).hexdigest()


def send(run_dir: Path, pilot: str, event: str, job: str, status: int | None = None) -> Path:
    """Record one edge event (what `pwe notify` does); :class:`~pwe.base.errors.PweError` (one
    line in the job's stderr) when the run directory cannot be read or written."""
    if event not in EVENTS:
        raise ValueError(f"event must be one of {', '.join(EVENTS)}")
    check_ids(pilot, job)
    body = {"pilot": pilot, "event": event, "job": job, "status": status, "t": round(time.time(), 3),
            "id": secrets.token_hex(8)}
    d = run_dir / "edges"
    name = f"{pilot}-{event}-{time.time_ns()}-{os.getpid()}.json"
    tmp = d / f".{name}.tmp"
    try:
        msg = {**body, "mac": _mac(_key(run_dir), body)}
        d.mkdir(exist_ok=True)
        tmp.write_text(json.dumps(msg))
        os.replace(tmp, d / name)
    except OSError as exc:
        raise PweError(f"pwe notify: cannot record the {event} event of pilot {pilot} in {d}: "
                       f"{exc.strerror or exc}") from None
    return d / name


def receive(run_dir: Path, seen: set[str]) -> list[tuple[dict[str, Any], bool]]:
    """New edge events as (event, verified), oldest first; files whose names are in ``seen``
    are skipped (and the names read are added). Each event carries ``file`` (its name) and
    ``id`` (an event written before events had ids: its signature)."""
    d = run_dir / "edges"
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".json") and not n.startswith(".") and n not in seen)
    except FileNotFoundError:
        return []
    try:
        key = _key(run_dir)
    except OSError:
        key = None  # (the secret is gone: no event can be trusted; each is noted as such)
    out = []
    for name in names:
        seen.add(name)
        try:
            data = read_bytes(d / name, EDGE_LIMIT + 1)
            if len(data) > EDGE_LIMIT:
                raise ValueError("larger than any edge event")
            msg = json.loads(data)
            mac = msg.pop("mac")
            ok = key is not None and isinstance(mac, str) and hmac.compare_digest(mac, _mac(key, msg))
            msg.setdefault("id", mac)
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            msg, ok = {}, False
        msg["file"] = name
        out.append((msg, ok))
    return out


def check_ids(pilot: str, job: str) -> None:
    """:class:`InputError` (one line) for a pilot or job id that is not one: either would
    reach a file name and the journal."""
    for what, value, valid, example in (("pilot id", pilot, is_pilot_id, "p1"), ("job id", job, is_job_id, "12345")):
        if not valid(value):
            shown = repr(value if len(value) <= 80 else value[:80] + "...")
            raise InputError(f"pwe notify: {shown} is not a {what}: letters, digits, '_' and '-'"
                             f"{', and .+[]' if what == 'job id' else ''}, starting with a letter or digit, at most "
                             f"{MAX_PILOT_ID if what == 'pilot id' else MAX_JOB_ID} characters (e.g. {example})")


def sign(run_dir: Path, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its ``mac`` under the run's secret: the form of every signed file a
    running engine takes in (edge events here, ``pwe pilot`` requests: pwe/engine/pilotctl.py)."""
    return {**body, "mac": _mac(_key(run_dir), body)}


def authentic(run_dir: Path, msg: dict[str, Any]) -> bool:
    """Whether a signed file's content (``mac`` included, taken out here) is the run's."""
    mac = msg.pop("mac", None)
    try:
        key = _key(run_dir)
    except OSError:
        return False
    return isinstance(mac, str) and hmac.compare_digest(mac, _mac(key, msg))
