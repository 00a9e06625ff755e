"""The live streams (server-sent events): what the page is told as it happens, pushed,
never a reload.

- ``/api/live/runs``: a ``runs`` event (``pwe runs --json``'s document) whenever a run's
  snapshot (``state.json``, which its engine rewrites every 0.5 s) or its engine changes.
- ``/api/live/run/ID``: a ``journal`` event with the run's new journal records as they
  are appended (its event bus, as the engine journals every pilot message it takes in:
  each ``{"e", "n", "m", "a", "rc", "t", "p"}``, one per member event as
  :func:`pwe.runstate.journal.unpack` gives them, at most :data:`BATCH` an event, with ``n`` how
  many there were), and a ``status`` event (``pwe status --json``) whenever the
  snapshot changes.

Each stream reads files only (the journal's new bytes, a stat of the snapshot) every
:data:`TICK` seconds; a stream ends when the client goes.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, AsyncIterator

#: Seconds between two looks at the files.
TICK = 0.25
#: Most records one ``journal`` event carries (the count says how many there were).
BATCH = 2000
#: Most bytes of journal read in one look.
READ = 4 * 1024 * 1024
#: A comment sent when nothing happened for this long (keeps proxies from closing the stream).
KEEPALIVE = 15.0
FIELDS = ("e", "n", "m", "a", "rc", "t", "p", "why", "by")


def event(kind: str, data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n".encode()


def _stamp(path: Path) -> tuple[float, int] | None:
    try:
        st = path.stat()
        return st.st_mtime, st.st_size
    except OSError:
        return None


async def runs_stream(src: Any, gone: Any) -> AsyncIterator[bytes]:
    from . import api

    last = None
    quiet = 0.0
    while not await gone():
        listed = await asyncio.to_thread(src.listed)
        stamp = [(str(d), _stamp(d / "state.json"), _stamp(d / "engine.lock")) for d, _ in listed]
        if stamp != last:
            last = stamp
            quiet = 0.0
            yield event("runs", await asyncio.to_thread(api.runs, src))
        elif quiet >= KEEPALIVE:
            quiet = 0.0
            yield b": keepalive\n\n"
        await asyncio.sleep(1.0 if len(listed) > 50 else TICK * 2)
        quiet += TICK * 2


def tail(path: Path, offset: int, size: Any = None) -> tuple[list[dict[str, Any]], int]:
    """The whole records appended to the journal at ``path`` after byte ``offset``, and the
    offset after them (a line still being written waits for the next look; one longer
    than :data:`READ` is skipped). ``size(node)``: the members each node has, that every
    record's numbers are checked against (:func:`pwe.runstate.journal.check`)."""
    from ..base.regular import open_regular
    from ..runstate.journal import decode, unpack

    try:
        with open_regular(path, "rb", within=path.parent) as fh:
            fh.seek(offset)
            data = fh.read(READ)
    except OSError:
        return [], offset
    cut = data.rfind(b"\n") + 1
    if not cut and len(data) == READ:  # (no record is that long: damaged, skipped)
        return [], offset + READ
    out = []
    for line in data[:cut].splitlines(keepends=True):
        rec = decode(line)
        if rec is None:
            continue
        try:
            ones = unpack(rec, size)  # (an assign of consecutive members, an end carrying its start: each its own)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # (a damaged record: the state's replay warns of it)
        out.extend({k: one[k] for k in FIELDS if k in one} for one in ones)
    return out, offset + cut


async def run_stream(src: Any, run_dir: Path, gone: Any) -> AsyncIterator[bytes]:
    from ..observe.runview import status

    journal = run_dir / "journal.jsonl"
    offset = os.path.getsize(journal) if journal.exists() else 0
    snap = run_dir / "state.json"
    last = None
    quiet = 0.0
    yield event("hello", {"run_id": run_dir.name, "offset": offset})
    while not await gone():
        try:  # (the members each node has now: what the records' numbers are checked against)
            nodes = (await asyncio.to_thread(src.cache.get, run_dir)).state.nodes
        except Exception as exc:  # (a run damaged meanwhile: said, the stream goes on)
            yield event("problem", {"error": str(exc)})
            await asyncio.sleep(TICK * 4)
            continue
        recs, offset = await asyncio.to_thread(tail, journal, offset, lambda n, nodes=nodes: nodes[n].size)
        if recs:
            quiet = 0.0
            for i in range(0, len(recs), BATCH):
                part = recs[i:i + BATCH]
                yield event("journal", {"n": len(part), "records": part, "offset": offset})
        stamp = (_stamp(snap), _stamp(run_dir / "engine.lock"))
        if stamp != last:
            last = stamp
            quiet = 0.0
            try:
                yield event("status", await asyncio.to_thread(status, run_dir))
            except Exception as exc:  # (a run damaged meanwhile: said, the stream goes on)
                yield event("problem", {"error": str(exc)})
        if quiet >= KEEPALIVE:
            quiet = 0.0
            yield b": keepalive\n\n"
        await asyncio.sleep(TICK)
        quiet += TICK
