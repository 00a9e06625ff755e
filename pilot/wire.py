"""The messages between the engine and a pilot, and a pilot's with its node agents: every kind, its fields.

Both ends import this module (the pilot is standard library only, so this is too). A
message is a flat JSON object; ``k`` names its kind. Batches are JSON lines, compact
(``separators=(",", ":")``), ASCII, one line per message, written with one write.

engine -> pilot

==========  ===============================================================================
kind        fields
==========  ===============================================================================
``task``    ``n`` node, ``m`` member index, ``a`` attempt, ``cmd`` the rendered command,
            ``cwd`` the member's directory, ``env`` {name: text} (its own part, over the
            ``env`` message ``eb`` names, when it names one); only when set: ``ranks``
            and ``threads`` (1 when absent), ``wall`` minutes per member, ``exclusive`` (whole
            nodes), ``cap`` (most cores of a node), ``gpus``, ``mem`` (MB), ``tmp``
            (MB of the node's tmp pool for its $TMPDIR), ``rpn`` (ranks on each of its
            nodes: ranksPerNode), ``setup`` (the id of the
            ``setup`` its nodes run first), ``prod`` [absolute paths]: its products, which
            the pilot checks once when it exits 0 (one missing: the member fails, rc 1,
            reason ``invalid``, ``why`` naming it), ``pmin`` [bytes, one per ``prod``]: the
            fewest each must hold (0: that it exists; a regular file shorter fails the
            member as a missing one does), ``own`` (1: it runs in ``cwd``, a directory of its own,
            made before it starts and tidied after; absent: ``cwd`` is its node's directory,
            which members share), ``ctr`` {``rt`` runtime, ``img`` image, ``bind``
            [directories]}: it runs inside that container (pilot/containers.py), ``py``
            ``package.module:function`` and ``kw`` {parameter: value}: a function member,
            a call with ``kw`` as keyword arguments to a warm worker (pilot/pyworkers.py;
            ``cmd`` is then ``python: ...``, shown, never run; its ``ctr``, the container
            the worker runs in), ``vd`` (a function member's ``validate``, a shell command
            its worker runs after the call returns: pilot/pyworker.py), ``sim`` (``oom`` or
            ``walltime``: pwe run --simulate's member, which fails with that reason when it
            exits non-zero: pwe/engine/simulate.py)
``group``   ``tasks`` [task, ...]: members of one group (``group:`` of a node), each a
            whole ``task`` message; the pilot runs them one after another in one slot,
            in this order, each with its own ``start``, ``end`` or ``back``
``stop``    (none): run what is queued, then leave
``cancel``  (none): kill every member, leave
``ack``     ``q``: the engine has journaled every event of this pilot up to ``q``; a pilot
            that sends through a broker forgets them (it keeps the rest, to write them
            to the spool if the broker goes away)
``leave``   (none): ``pwe pilot drain``: take no new member, hand back what is queued
            (no attempt spent), finish what runs, then leave
``setup``   ``id``, ``lines`` [shell lines]: a ``setup_per_node`` set; a task whose
            ``setup`` names it runs on a node only once these lines ran there and
            exited 0 (run once per node, before its first such member)
``env``     ``id``, ``env`` {name: text}: what the members of a node share of their
            environment, sent to a pilot before the first task whose ``eb`` names it; a
            task naming one the pilot was never sent goes ``back`` (why: ``no environment
            ID``) and the engine sends it again
``withhold`` ``n`` node, ``m`` [member indices]: those of them this pilot holds and has not
            started go ``back`` (why: ``held: ...``, a value held: ``hold:``)
``straggle`` ``n`` node, ``s`` seconds, ``why`` words: a member of node ``n`` running longer
            than ``s`` is stopped (reason ``straggler``, its ``why`` these words); sent again
            when the node's median moves (``straggler:``: pwe/engine/stragglers.py)
==========  ===============================================================================

pilot -> engine (each also has ``t``, the pilot's clock when it was written, and ``q``,
its sequence number: 1, 2, 3... per pilot, whichever transport carries it)

=============  ============================================================================
kind           fields
=============  ============================================================================
``up``         ``v`` wire version, ``pid``, ``host``, ``slots``, ``allocation`` (its kind),
               ``job``, ``end`` (epoch s or null), ``margin`` s, ``nodes`` {name: cores}
``start``      ``n``, ``m``, ``a``, ``pid`` (0: it is written before the member is
               spawned; pilots before that gave the pid), ``nodes`` [names]
``end``        ``n``, ``m``, ``a``, ``rc`` (negative: a signal), ``dt`` s, ``out`` {key:
               value} outputs; ``why`` for walltimes, memory, launch errors, signals; ``cpu``
               (user + system s of the member's process tree) and ``rss`` (peak KB),
               from the rusage of the reaped member, when it was reaped; ``reason`` why
               it ended, when not on its own (absent: ``exit``; see *Reasons* below)
``back``       ``n``, ``m``, ``a``, ``why``: handed back unstarted (or stopped by the
               allocation's end); no attempt spent. A ``why`` that begins with
               :data:`UNWRITABLE` (``cannot write DIR: reason``) is the run's cause:
               the member's directory cannot be made or written; one that begins with
               :data:`NOT_STARTED` a spawn its node refused for now (its limit of
               processes or memory)
``drain``      ``why``, ``left`` s: the allocation ends, nothing more is taken
``node_lost``  ``node``, ``n``, ``m``, ``why`` (what the pilot saw: the node's slurmd stopped
               answering, its ssh session's last words): a node of the allocation died
               under that member, which the pilot hands ``back`` (the engine runs it
               again as its next attempt, on the other nodes)
``hb``         ``running``, ``queued``: heartbeat
``down``       ``why``: ``stop``, ``idle``, ``cancel``, ``walltime``, ``terminated``,
               ``leave`` (drained), ``gone`` (its run directory was removed) or
               ``error: ...`` (a defect)
``node_setup`` ``node``, ``id``, ``rc``, ``dt`` s, ``log`` (its output's file): a
               ``setup`` set ran on a node; rc not 0: no member needing it runs there
=============  ============================================================================

pilot <-> node agent (:mod:`pilot.nodeagent`: one per other node, over ssh or srun, and the
pilot's own spawners over pipes; unsigned JSON lines on its stdin and stdout, between two
processes of one pilot, so not versioned: both ends are the same pilot's code)

===========  ==============================================================================
kind         fields
===========  ==============================================================================
``run``      (to the agent) ``id`` the pilot's key of the member, ``argv``, ``cmd`` the
             shell command, ``cwd``, ``env`` {name: text}; only when set: ``made`` (the
             pilot made ``cwd`` already), ``tmp`` (make the member's own $TMPDIR here
             first, remove it when the member ends: pilot/tmpdirs.py), ``mem`` (MB: its
             memoryPerMember, enforced by the agent: pilot/memwatch.py), ``py`` and ``kw`` (a
             function member: a call to a warm worker of the agent's, pilot/pyworkers.py)
``kill``     (to the agent) ``id``, ``sig``: signal the member's process group
``started``  (from the agent) ``id``, ``pid``
``ended``    (from the agent) ``id``, ``rc``, ``cpu`` s, ``rss`` KB (the reaped member's rusage);
             ``reason`` and ``why`` when the agent killed it (``oom``: over its ``mem``); a
             function member's ``why`` alone (its return value refused, its module not
             imported) and ``out`` {name: text} (its return value)
``failed``   (from the agent) ``id``, ``rc`` (126 or 127), ``why``: it could not be started
===========  ==============================================================================

**Reasons.** Why a member's attempt ended, as its ``end`` says it (``reason``) and the
engine journals it; the pilot says ``oom``, ``walltime``, ``straggler`` and ``invalid``, the
engine the others:

=================  ==========================================================================
reason             the member ...
=================  ==========================================================================
``exit``           ended on its own, whatever its status (the ``end`` has no ``reason``)
``oom``            was killed for using more than its ``mem`` (memoryPerMember): by the
                   kernel in its own cgroup, or by the pilot watching its processes' memory
                   (pilot/memwatch.py); ``why``: "used 812 MB of its memoryPerMember 512 MB"
``walltime``       was killed at its ``wall`` (maxWallTimePerMember); ``why`` says the limit
``straggler``      was stopped for running past its node's ``straggle`` limit (``straggler:``)
``invalid``        exited 0, but its result is not good: a product missing or shorter than its
                   ``pmin``, or its node's ``validate`` failed (the command wrote
                   ``_pwe_invalid=STATUS`` to its outputs: pwe/planning/validate.py); ``why`` says which
``lost``           was running when its pilot or node was lost (the engine's)
``halted``         was stopped by the run's failure budget (the engine's)
``quarantined``    is not reissued: present at ``maxLosses`` losses (the engine's)
``reused``         was not run: an earlier run's result was taken (the engine's)
=================  ==========================================================================

The engine refuses a pilot whose ``up`` names another :data:`VERSION`. How the bytes
travel is :mod:`pilot.transport`'s business.

**Signed lines.** Each line is signed with HMAC-SHA256 under a key of its channel
(:func:`channel_key`: the run's secret and ``<pilot id>>`` for what the pilot sends,
``<pilot id><`` for what the engine sends, so a line is good on its own channel only).
The signature is the line's last field, ``"s"``, over the exact bytes of the line
without it (``{...}`` as :func:`encode` wrote it): the reader checks the bytes it got,
without encoding anything again. A reader with a key gives a line whose signature is
missing or wrong as a ``forged`` message and a signed line that is not a message of
a kind this module lists, with its fields, as a ``malformed`` one (never applied;
the engine counts and notes them). Without a key (a pilot run alone, by hand) nothing
is signed or checked.

A line that is not a message (damaged on disk) is never sent; :func:`decode` gives it to
the reader as a ``damaged`` message (``text``: its first bytes), which the reader notes
and skips: the messages after it are read as usual.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

#: Raised whenever a kind or a field changes meaning, is added or is taken away.
#: 2: every pilot message has ``q``; lines are signed (``s``); the ``ack`` kind.
#: 3: ``leave`` (pwe pilot drain), ``setup`` and a task's ``setup`` (setup_per_node), ``node_setup``;
#: the ``group`` kind; a ``task`` may carry ``prod`` (its products, checked at its end).
#: (3 still: ``orphan_end``/``orphan_killed`` are the guardian's, in a file of their own, read
#: by an engine that knows them; an older engine never opens it.)
#: 4: the ``env`` kind and a task's ``eb``: what a node's members share of their environment
#: is sent to a pilot once, not with each task; a task's ``ranks`` and ``threads`` are there
#: only when not 1, ``wall`` only when set; signatures are 128 bits (32 hex digits).
#: (4 still: an ``end``'s optional ``reason``, absent meaning ``exit`` as before; the pilot is
#: staged from the engine's own package, so both ends know it.)
#: 5: a task's ``own``: without it, ``cwd`` is its node's directory, shared by its members
#: (an older pilot would tidy it away as the member's own).
#: (5 still: ``orphan_end``/``orphan_killed`` also in ``orphans-NAME.jsonl``, written by a
#: spawner or node agent whose pilot died; the agent's ``orphans`` kind, pilot <-> agent only.)
#: 6: the ``straggle`` and ``withhold`` kinds, and an ``end``'s reason ``straggler``.
#: 7: a task's ``pmin`` (its products' least sizes), ``ctr`` (run inside a container), ``py`` and
#: ``kw`` (a function member: a call to a warm worker), ``sim`` (a rehearsal's reason); an
#: ``end``'s reason ``invalid``; the node agent's ``run`` with ``py`` and ``kw``, its ``ended``
#: with ``out`` (an older pilot would run ``python: ...`` as a shell command, or refuse these).
#: 8: a function member's task ``vd`` (its validate, run by its worker after the call; an
#: older pilot would skip it); the node agent's ``run`` with ``vd`` and ``box`` (the container
#: its worker runs in).
VERSION = 8

# engine -> pilot
TASK, GROUP, STOP, CANCEL, ACK = "task", "group", "stop", "cancel", "ack"
LEAVE, SETUP, ENV, STRAGGLE, WITHHOLD = "leave", "setup", "env", "straggle", "withhold"
#: how a ``back`` says the task named an ``env`` the pilot was never sent (the engine sends it again)
NO_ENV = "no environment "
# pilot -> engine
UP, START, END, BACK, DRAIN, NODE_LOST, HB, DOWN = "up", "start", "end", "back", "drain", "node_lost", "hb", "down"
NODE_SETUP = "node_setup"
# the pilot's guardian -> engine, in orphans.jsonl once the pilot is gone (pilot/guardian.py);
# a spawner's or node agent's, in orphans-NAME.jsonl beside it (pilot/nodeagent.py)
ORPHAN_END, ORPHAN_KILLED = "orphan_end", "orphan_killed"
#: (never sent) what decode() makes of a line that is not a message
DAMAGED = "damaged"
#: (never sent) what a reader with a key makes of a line whose signature is missing or
#: wrong, and of a signed line that is not a message this module lists
FORGED, MALFORMED = "forged", "malformed"
#: how a ``back`` says the member's directory cannot be made or written (the run's cause)
UNWRITABLE = "cannot write "
#: how a ``back`` says the member could not be started for now: its node's limit of
#: processes or memory (EAGAIN, ENOMEM), not the member's doing; like UNWRITABLE, the
#: attempt did not happen even though its ``start`` was said
NOT_STARTED = "could not be started for now: "
#: how a ``back`` begins when no node of the pilot has scratch for a member (its $TMPDIR,
#: its output files: pilot/tmpdirs.py): handed back, no attempt spent; the engine gives
#: the pilot nothing more (pwe/engine/pilotctl.py Setups: SETUP_FAILED's way)
NO_SCRATCH = "no node of this pilot has scratch for a member"

#: Why a member's attempt ended (the module's *Reasons*): an ``end``'s ``reason``, absent for REASON_EXIT.
REASON_EXIT, REASON_OOM, REASON_WALLTIME, REASON_STRAGGLER = "exit", "oom", "walltime", "straggler"
REASON_LOST, REASON_HALTED, REASON_QUARANTINED, REASON_REUSED = "lost", "halted", "quarantined", "reused"
REASON_INVALID = "invalid"
REASONS = (REASON_EXIT, REASON_OOM, REASON_WALLTIME, REASON_STRAGGLER, REASON_LOST, REASON_HALTED,
           REASON_QUARANTINED, REASON_REUSED, REASON_INVALID)

#: Every kind and the fields it may carry (besides ``k``), as the table above says.
FIELDS: dict[str, frozenset[str]] = {
    TASK: frozenset({"n", "m", "a", "cmd", "cwd", "env", "eb", "ranks", "threads", "wall", "exclusive", "cap",
                     "gpus", "mem", "tmp", "setup", "prod", "pmin", "rpn", "own", "ctr", "py", "kw", "vd", "sim"}),
    GROUP: frozenset({"tasks"}),
    STOP: frozenset(),
    LEAVE: frozenset(),
    SETUP: frozenset({"id", "lines"}),
    ENV: frozenset({"id", "env"}),
    STRAGGLE: frozenset({"n", "s", "why"}),
    WITHHOLD: frozenset({"n", "m", "why"}),
    CANCEL: frozenset(),
    ACK: frozenset({"q"}),
    UP: frozenset({"v", "pid", "host", "slots", "allocation", "job", "end", "margin", "nodes", "t", "q"}),
    START: frozenset({"n", "m", "a", "pid", "nodes", "t", "q"}),
    END: frozenset({"n", "m", "a", "rc", "dt", "out", "why", "cpu", "rss", "reason", "t", "q"}),
    BACK: frozenset({"n", "m", "a", "why", "t", "q"}),
    DRAIN: frozenset({"why", "left", "t", "q"}),
    NODE_LOST: frozenset({"node", "n", "m", "why", "t", "q"}),
    HB: frozenset({"running", "queued", "t", "q"}),
    DOWN: frozenset({"why", "t", "q"}),
    NODE_SETUP: frozenset({"node", "id", "rc", "dt", "log", "t", "q"}),
    ORPHAN_END: frozenset({"n", "m", "a", "rc", "pid", "t"}),
    ORPHAN_KILLED: frozenset({"n", "m", "a", "rc", "pid", "t"}),
}
#: What the pilot sends (each with its sequence number ``q``).
FROM_PILOT = frozenset({UP, START, END, BACK, DRAIN, NODE_LOST, HB, DOWN, NODE_SETUP})

# pilot <-> node agent (pilot/nodeagent.py), not engine messages: never in FIELDS
AGENT_RUN, AGENT_KILL = "run", "kill"
#: the pilot -> its agent, first: where to write, signed with ``key`` (hex), the ends of its
#: members should the pilot die (pilot/nodeagent.py), and the grace they then get
AGENT_ORPHANS = "orphans"
AGENT_STARTED, AGENT_ENDED, AGENT_FAILED = "started", "ended", "failed"
#: Each node agent message kind and its fields (besides ``k``), as the table above says.
AGENT_FIELDS: dict[str, frozenset[str]] = {
    AGENT_RUN: frozenset({"id", "argv", "cmd", "cwd", "env", "made", "tmp", "mem", "n", "m", "a", "py", "kw", "vd",
                          "box"}),
    AGENT_KILL: frozenset({"id", "sig"}),
    AGENT_ORPHANS: frozenset({"path", "key", "grace"}),
    AGENT_STARTED: frozenset({"id", "pid"}),
    AGENT_ENDED: frozenset({"id", "rc", "cpu", "rss", "reason", "why", "out"}),
    AGENT_FAILED: frozenset({"id", "rc", "why", "scratch", "again"}),
}

# one encoder and decoder for every message (json.dumps with arguments builds an encoder per call)
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _not_a_number(word: str) -> Any:
    """NaN, Infinity, -Infinity (json.loads takes them; JSON has none): the line is not a
    message (``damaged``, ``malformed`` when signed), never a number for the engine. Called
    only for those words: nothing per message."""
    raise ValueError(f"{word} is not a number of the wire")


_decode = json.JSONDecoder(parse_constant=_not_a_number).decode


_hmac, _same = hmac.digest, hmac.compare_digest
_pads: dict[bytes, tuple[Any, Any]] = {}  # per key, SHA-256 already fed its inner and outer pad


def _sign(key: bytes, body: bytes) -> bytes:
    """HMAC-SHA256 of ``body``, its first 128 bits as hex (RFC 2104, its two padded-key
    blocks hashed once per key: about half the cost of :func:`hmac.digest` per line).
    A tag of half the hash's length is what RFC 2104 (section 5) and RFC 4868 allow; it
    is 32 bytes less on each of the two or three lines every member costs."""
    pads = _pads.get(key)
    if pads is None:
        k = (hashlib.sha256(key).digest() if len(key) > 64 else key).ljust(64, b"\0")
        pads = _pads[key] = (hashlib.sha256(bytes(b ^ 0x36 for b in k)), hashlib.sha256(bytes(b ^ 0x5C for b in k)))
    inner = pads[0].copy()
    inner.update(body)
    outer = pads[1].copy()
    outer.update(inner.digest())
    return outer.digest()[:16].hex().encode()


def channel_key(secret: bytes, pilot: str, from_pilot: bool) -> bytes:
    """The key that signs one direction of one pilot's channel (see the module's docstring)."""
    return _hmac(secret, f"{pilot}{'>' if from_pilot else '<'}".encode(), "sha256")


_SIG = len(b',"s":"') + 32 + len(b'"}')  # the signature's bytes at the end of a signed line


def encode(msgs: list[dict[str, Any]], key: bytes | None = None) -> bytes:
    """A batch of messages as the bytes of whole JSON lines (empty for no messages),
    each signed when there is a key."""
    if not msgs:
        return b""
    if key is None:
        return ("\n".join([_encode(m) for m in msgs]) + "\n").encode()
    out = []
    for m in msgs:
        body = _encode(m)
        out.append(b'%s,"s":"%s"}\n' % (body[:-1].encode(), _sign(key, body.encode())))
    return b"".join(out)


def decode(data: bytes, key: bytes | None = None) -> tuple[list[dict[str, Any]], bytes]:
    """The messages of the whole lines in ``data``, and the partial last line held back
    (its writer is still writing it). With a key, each line's signature is checked."""
    cut = data.rfind(b"\n") + 1
    if not cut:
        return [], data
    if key is not None:
        return _signed(data[:cut], key), data[cut:]
    try:
        msgs = [_decode(line) for line in data[:cut].decode().split("\n") if line.strip()]
        if all(type(m) is dict and "k" in m for m in msgs):
            return msgs, data[cut:]
    except ValueError:
        pass
    return [_message(line) for line in data[:cut].split(b"\n") if line.strip()], data[cut:]


def _signed(chunk: bytes, key: bytes) -> list[dict[str, Any]]:
    """The messages of whole signed lines. The usual case (every signature good, every
    message well formed) checks each signature and parses the lines as one JSON array;
    anything else is sorted out line by line (:func:`_verified`)."""
    bodies = []
    for line in chunk.split(b"\n"):
        if not line:
            continue
        body = line[:-_SIG] + b"}"
        if line[-_SIG:-_SIG + 6] != b',"s":"' or line[-2:] != b'"}' or \
                not _same(line[-_SIG + 6:-2], _sign(key, body)):
            break
        bodies.append(body)
    else:
        try:
            msgs = _decode("[" + b",".join(bodies).decode() + "]")
            if all(type(m) is dict and not problem(m) for m in msgs):
                return msgs
        except (ValueError, AttributeError):
            pass
    return [_verified(line, key) for line in chunk.split(b"\n") if line.strip()]


def _verified(line: bytes, key: bytes) -> dict[str, Any]:
    """One signed line as its message; ``forged`` when its signature is missing or
    wrong, ``malformed`` when it is signed but not a message this module lists."""
    body = line[:-_SIG] + b"}"
    mac = line[-_SIG + 6:-2]
    if len(line) <= _SIG or line[-_SIG:-_SIG + 6] != b',"s":"' or not line.endswith(b'"}') or \
            not _same(mac, _sign(key, body)):
        return {"k": FORGED, "text": line[:80].decode("utf-8", "replace")}
    msg = _message(body)
    why = problem(msg)
    if why:
        return {"k": MALFORMED, "text": line[:80].decode("utf-8", "replace"), "why": why}
    return msg


#: each kind's fields with ``k``
_ALLOWED = {kind: fields | {"k"} for kind, fields in FIELDS.items()}


def problem(msg: dict[str, Any]) -> str:
    """What is wrong with a message (an unknown kind or field, a pilot's message without
    its sequence number, an ``end`` whose ``reason`` is none of :data:`REASONS`), or ""
    when nothing is."""
    kind = msg.get("k")
    allowed = _ALLOWED.get(kind) if isinstance(kind, str) else None
    if allowed is None:
        return f"unknown kind {str(kind)[:20]!r}"
    if not msg.keys() <= allowed:
        return f"{kind}: unknown fields {sorted(set(msg) - allowed)}"[:120]
    if kind in FROM_PILOT and (type(msg.get("q")) is not int or msg["q"] < 1):
        return f"{kind}: no sequence number q"
    if kind == END and "reason" in msg and msg["reason"] not in REASONS:
        return f"end: unknown reason {str(msg['reason'])[:20]!r}"
    if kind == GROUP:
        tasks = msg.get("tasks")
        if type(tasks) is not list or not tasks:
            return "group: no tasks"
        for t in tasks:
            if type(t) is not dict or t.get("k") != TASK or problem(t):
                return f"group: not a task: {str(t)[:60]}"
    return ""


def _message(line: bytes) -> dict[str, Any]:
    """One line as a message, or as a ``damaged`` one."""
    try:
        msg = _decode(line.decode())
        if type(msg) is dict and isinstance(msg.get("k"), str):
            return msg
    except ValueError:
        pass
    return {"k": DAMAGED, "text": line[:80].decode("utf-8", "replace")}
