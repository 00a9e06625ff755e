"""A run's event history, read back: the journal and the messages it was built from.

Every message each pilot sent is kept in its directory (``events.jsonl``, the spool; and
``events.redis.jsonl``, what the engine read from a broker), signed (:mod:`pilot.wire`).
:func:`events` reads them all back, checks each signature with the run's secret, and
says what the engine's rules make of each (``verdict``: ``applied``, or why not:
``forged``, ``malformed``, ``duplicate``: a ``q`` already taken, whichever way it came);
then the journal's records (``record``: their kind), in order, each compacted one as the
records it stands for (:func:`pwe.runstate.journal.unpack`). Each pilot message carries
``v``, the version of the wire (:data:`pilot.wire.VERSION`) that defines its kind and
fields: the one definition of the events, in ``pilot/wire.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from pilot.broker import ARCHIVE
from pilot.transport import EVENTS
from pilot.wire import DAMAGED, FORGED, MALFORMED, VERSION, channel_key, decode

from ..base.errors import InputError
from ..runstate.journal import replay, unpack
from ..base.regular import read_lines, read_secret, run_pilots


def _unpacked(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """A journal record as the records it stands for (an ``ends`` of whole-number columns as
    each end, with its values): what a reader of the history wants; a damaged one as it is."""
    try:
        return unpack(rec)
    except (ValueError, KeyError, TypeError, AttributeError):
        return [rec]


def _messages(pid_: str, d: Path, key: bytes | None) -> list[dict[str, Any]]:
    """Every message in one pilot's files (``d``: its own directory of the run, resolved)."""
    got: list[dict[str, Any]] = []
    for name, via in ((EVENTS, "spool"), (ARCHIVE, "redis")):
        try:
            for line in read_lines(d / name, within=d):  # (a line cut short at the end: never sent whole)
                for m in decode(line, key)[0]:
                    got.append({"pilot": pid_, "via": via, "v": VERSION, **m})
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise InputError(f"{exc.filename or d / name} cannot be read ({exc.strerror or exc}); it must be the "
                             "pilot's own regular file") from None
    return got


def events(run_dir: Path, warnings: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every pilot message of the run (per pilot, by ``q``), then every journal record;
    ``warnings``, when given, gets a line for each journal record skipped as damaged (one
    longer than :data:`pilot.bounded.MAX_LINE` too: read in steps, never held whole), and
    one for each pilot's directory that is not the run's own (a symbolic link, to another
    run or anywhere: :func:`pilot.bounded.run_pilots`), whose messages are not read."""
    try:
        secret: bytes | None = read_secret(run_dir / "secret")
    except FileNotFoundError:
        secret = None
    except OSError as exc:
        raise InputError(f"{run_dir / 'secret'} cannot be read ({exc.strerror or exc}): the pilots' messages cannot "
                         "be checked; it must be the run's own regular file") from None
    found, refused = run_pilots(run_dir)  # (each pilot's directory confined to the run: a link is not read)
    if warnings is not None:
        warnings.extend(f"{exc.filename}: {exc.strerror}" for exc in refused)
    for pid_, real in found:
        if not pid_.startswith("p"):
            continue
        got = _messages(pid_, Path(real), channel_key(secret, pid_, True) if secret is not None else None)
        got.sort(key=lambda m: m.get("q") if type(m.get("q")) is int else 0)
        seen: set[int] = set()
        for m in got:
            k = m.get("k")
            if k in (FORGED, MALFORMED, DAMAGED):
                m["verdict"] = "forged" if k == FORGED else "malformed"
            elif m.get("q") in seen:
                m["verdict"] = "duplicate"
            else:
                seen.add(m.get("q"))
                m["verdict"] = "applied"
            yield m
    records: list[dict[str, Any]] = []
    done = replay(run_dir / "journal.jsonl", records.append)
    if warnings is not None:
        warnings.extend(done.warnings())
    for r in (one for rec in records for one in _unpacked(rec)):
        out = {"record": r.get("e")}
        out.update((k, v) for k, v in r.items() if k not in ("e", "c"))
        yield out
