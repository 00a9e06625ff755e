"""The messages between the engine and a pilot: every kind, its fields, one version.

Both ends import this module (the pilot is standard library only, so this is too). A
message is a flat JSON object; ``k`` names its kind. Batches are JSON lines, compact
(``separators=(",", ":")``), ASCII, one line per message, written with one write.

engine -> pilot

==========  ===============================================================================
kind        fields
==========  ===============================================================================
``task``    ``n`` node, ``m`` member index, ``a`` attempt, ``cmd`` the rendered command,
            ``cwd`` the member's directory, ``env`` {name: text}, ``ranks``, ``threads``,
            ``wall`` minutes per member or null; only when set: ``exclusive`` (whole
            nodes), ``cap`` (most cores of a node), ``gpus``, ``mem`` (MB)
``stop``    (none): run what is queued, then leave
``cancel``  (none): kill every member, leave
==========  ===============================================================================

pilot -> engine (each also has ``t``, the pilot's clock when it was written)

=============  ============================================================================
kind           fields
=============  ============================================================================
``up``         ``v`` wire version, ``pid``, ``host``, ``slots``, ``allocation`` (its kind),
               ``job``, ``end`` (epoch s or null), ``margin`` s, ``nodes`` {name: cores}
``start``      ``n``, ``m``, ``a``, ``pid`` (0: it is written before the member is
               spawned; pilots before that gave the pid), ``nodes`` [names]
``end``        ``n``, ``m``, ``a``, ``rc`` (negative: a signal), ``dt`` s, ``out`` {key:
               value} outputs; ``why`` for timeouts, launch errors, signals; for a
               member that ran (not one that failed to start): ``cpu``, user+sys CPU
               seconds of its process tree (float), ``rss``, its peak resident KB
               (int, ``ru_maxrss``), both from the rusage of the reaped child
``back``       ``n``, ``m``, ``a``, ``why``: handed back unstarted (or stopped by the
               allocation's end); no attempt spent. A ``why`` that begins with
               :data:`UNWRITABLE` (``cannot write DIR: reason``) is the run's cause:
               the member's directory cannot be made or written
``drain``      ``why``, ``left`` s: the allocation ends, nothing more is taken
``node_lost``  ``node``, ``n``, ``m``, ``why`` (its ssh session's last words; not always):
               that member runs again on another node
``hb``         ``running``, ``queued``: heartbeat
``down``       ``why``: ``stop``, ``idle``, ``cancel``, ``walltime``, ``terminated`` or
               ``error: ...`` (a defect)
=============  ============================================================================

The engine refuses a pilot whose ``up`` names another :data:`VERSION`. How the bytes
travel is :mod:`pilot.transport`'s business.

A line that is not a message (damaged on disk) is never sent; :func:`decode` gives it to
the reader as a ``damaged`` message (``text``: its first bytes), which the reader notes
and skips: the messages after it are read as usual.
"""

from __future__ import annotations

import json
from typing import Any

#: Raised whenever a kind or a field changes meaning, is added or is taken away.
VERSION = 1

# engine -> pilot
TASK, STOP, CANCEL = "task", "stop", "cancel"
# pilot -> engine
UP, START, END, BACK, DRAIN, NODE_LOST, HB, DOWN = "up", "start", "end", "back", "drain", "node_lost", "hb", "down"
#: (never sent) what decode() makes of a line that is not a message
DAMAGED = "damaged"
#: how a ``back`` says the member's directory cannot be made or written (the run's cause)
UNWRITABLE = "cannot write "

#: Every kind and the fields it may carry (besides ``k``), as the table above says.
FIELDS: dict[str, frozenset[str]] = {
    TASK: frozenset({"n", "m", "a", "cmd", "cwd", "env", "ranks", "threads", "wall", "exclusive", "cap", "gpus",
                     "mem"}),
    STOP: frozenset(),
    CANCEL: frozenset(),
    UP: frozenset({"v", "pid", "host", "slots", "allocation", "job", "end", "margin", "nodes", "t"}),
    START: frozenset({"n", "m", "a", "pid", "nodes", "t"}),
    END: frozenset({"n", "m", "a", "rc", "dt", "out", "why", "cpu", "rss", "t"}),
    BACK: frozenset({"n", "m", "a", "why", "t"}),
    DRAIN: frozenset({"why", "left", "t"}),
    NODE_LOST: frozenset({"node", "n", "m", "why", "t"}),
    HB: frozenset({"running", "queued", "t"}),
    DOWN: frozenset({"why", "t"}),
}

# one encoder and decoder for every message (json.dumps with arguments builds an encoder per call)
_encode = json.JSONEncoder(separators=(",", ":")).encode
_decode = json.JSONDecoder().decode


def encode(msgs: list[dict[str, Any]]) -> bytes:
    """A batch of messages as the bytes of whole JSON lines (empty for no messages)."""
    if not msgs:
        return b""
    return ("\n".join([_encode(m) for m in msgs]) + "\n").encode()


def decode(data: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The messages of the whole lines in ``data``, and the partial last line held back
    (its writer is still writing it)."""
    cut = data.rfind(b"\n") + 1
    if not cut:
        return [], data
    try:
        msgs = [_decode(line) for line in data[:cut].decode().split("\n") if line.strip()]
        if all(type(m) is dict and "k" in m for m in msgs):
            return msgs, data[cut:]
    except ValueError:
        pass
    return [_message(line) for line in data[:cut].split(b"\n") if line.strip()], data[cut:]


def _message(line: bytes) -> dict[str, Any]:
    """One line as a message, or as a ``damaged`` one."""
    try:
        msg = _decode(line.decode())
        if type(msg) is dict and isinstance(msg.get("k"), str):
            return msg
    except ValueError:
        pass
    return {"k": DAMAGED, "text": line[:80].decode("utf-8", "replace")}
