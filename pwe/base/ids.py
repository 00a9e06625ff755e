"""The ids and names pwe takes from users, schedulers and files, each defined once: its
pattern and its most characters. The command line, the service, the dashboard, the
workflow's schema and the protocols use these; none spells its own (standard library
only: every layer may import it, none pays for it).

    what          pattern (whole string)                  most   where it goes
    run id        [A-Za-z0-9][A-Za-z0-9._-]*              200    a directory's name, the registry's file names
    job id        [A-Za-z0-9][A-Za-z0-9_.+[]-]*           200    squeue, scancel, qdel, llcancel, kill: never an option
    pilot id      [A-Za-z0-9][A-Za-z0-9_-]*                64    file names under edges/ (pwe notify)
    trigger id    [A-Za-z0-9][A-Za-z0-9_-]*                64    the service's triggers (pwe trigger add --id)
    queue name    [A-Za-z0-9][A-Za-z0-9._-]*              100    the service's queue (--queue, PWE_QUEUE)
    node id       [A-Za-z0-9_][A-Za-z0-9_.-]*             100    members/<node>/, $TMPDIR names; the workflow's name too
    name          [A-Za-z_][A-Za-z0-9_]*                  100    parameters, properties, env, resources: {{ name }}

A run id is what pwe makes (the workflow's name, at most 100, then ``-YYYYmmdd-HHMMSS-xxxx``)
or what a service's client or a staging machine chose; 200 leaves room under NAME_MAX (255
bytes) for what is appended to it in file names. (pwe/service/submit.py once allowed 201
characters by a pattern of its own; 200 is the rule the CLI and the dashboard kept.)
"""

from __future__ import annotations

import re

#: the most characters of a run id, a job id
MAX_RUN_ID = MAX_JOB_ID = 200
#: the most characters of a pilot id, a trigger id
MAX_PILOT_ID = MAX_TRIGGER_ID = 64
#: The longest node id, workflow name and name (parameter, property, env, resource, limit),
#: in characters (ASCII: bytes). A node id is a directory's name (members/<node>/...) and
#: begins each member's $TMPDIR name (<node>.<index>.<attempt>); the workflow's name begins
#: the run id (<name>-YYYYmmdd-HHMMSS-xxxx), the run directory's name and every pilot's job
#: name; a parameter's name is in PWE_PARAM_<NAME>. A file name holds at most 255 bytes
#: (NAME_MAX) and a path 4,096 (PATH_MAX): 100 leaves room for what follows in the name and
#: for a deep runs root (and ids are written in every journal record). A longer id once
#: validated, and its run then waited for ever: no member's directory could be made.
MAX_NAME = 100
#: the most characters of a queue's name
MAX_QUEUE_NAME = 100

RUN_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_RUN_ID - 1}}}")
#: What a job id looks like, for every scheduler here: SLURM's ``123`` or ``123_4``, PBS's
#: ``123.server`` or ``123[].server``, LoadLeveler's ``login1.example.org.42.0``, a pid.
#: Only such a word is ever passed to squeue, scancel, qdel, llcancel or kill: an id read
#: back from the journal or a scheduler's answer can never become an option.
JOB_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.+\[\]-]{{0,{MAX_JOB_ID - 1}}}")
#: a pilot id as the engine makes them (p1, p2, ...; h1 for helpers): it becomes part of a
#: file name under edges/, so never a path, an option or a control character
PILOT_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_PILOT_ID - 1}}}")
TRIGGER_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_TRIGGER_ID - 1}}}")
#: a queue's name (the service's; --queue, PWE_QUEUE): a word Celery's ``-Q`` takes as one
#: queue (no comma, no space) and the embedded broker puts in file names (no '/')
QUEUE_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_QUEUE_NAME - 1}}}")
#: a node id's characters (no length: the member spec NODE:INDEX is parsed with it)
NODE_ID_CHARS = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
#: a node id and the workflow's name, as JSON Schema (the model's ``pattern``, with
#: ``max_length`` :data:`MAX_NAME`) writes it
NODE_ID_PATTERN = rf"^{NODE_ID_CHARS}$"
#: a node id (at most :data:`MAX_NAME` characters: :func:`is_node_id` counts them)
NODE_ID = re.compile(NODE_ID_CHARS)
#: names usable in ``{{ name }}`` templates and as ``PWE_PARAM_<NAME>``, as JSON Schema writes it
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


# (*?: the index is not the id's)
_MEMBER_SPEC = re.compile(rf"({NODE_ID_CHARS}?)(?:[\[:/]([0-9]{{1,18}})\]?)?", re.ASCII)


def member_spec(text: str) -> tuple[str, int] | None:
    """``NODE:INDEX`` (or ``NODE[INDEX]``, ``NODE/INDEX``; ``NODE`` alone: index 0) as (node,
    index), or None: the index in ASCII digits, at most 18 of them (``\\d`` took '٣', and
    int() of 5,000 digits was a traceback)."""
    m = _MEMBER_SPEC.fullmatch(text)
    if not m:
        return None
    return m.group(1), int(m.group(2) or 0)


def is_run_id(value: object) -> bool:
    """Whether ``value`` is a run id (:data:`RUN_ID`)."""
    return isinstance(value, str) and RUN_ID.fullmatch(value) is not None


def is_job_id(value: object) -> bool:
    """Whether ``value`` is a job id (:data:`JOB_ID`)."""
    return isinstance(value, str) and JOB_ID.fullmatch(value) is not None


def is_pilot_id(value: object) -> bool:
    return isinstance(value, str) and PILOT_ID.fullmatch(value) is not None


def is_trigger_id(value: object) -> bool:
    return isinstance(value, str) and TRIGGER_ID.fullmatch(value) is not None


def is_queue_name(value: object) -> bool:
    return isinstance(value, str) and QUEUE_NAME.fullmatch(value) is not None


def is_node_id(value: object) -> bool:
    """Whether ``value`` is a node id (:data:`NODE_ID`: the workflow schema's rule)."""
    return isinstance(value, str) and len(value) <= MAX_NAME and NODE_ID.fullmatch(value) is not None
