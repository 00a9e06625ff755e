"""The batch systems' own syntax: values they parse as more than text, passed literally or refused.

Each batch system reads some of what pwe gives it as more than text. Measured on the real
ones (Debian's slurm-wlm 22.05 and slurm-wlm-torque, gridengine 8.1.9; LoadLeveler by its
manual and tests/llemu):

- **Output paths.** SLURM replaces ``%j``, ``%x``... in ``--output``/``--error`` (``%%`` is
  a ``%``) and, when the path holds a backslash, removes every backslash (and replaces no
  ``%``): a path with a backslash has no literal form. A relative path is joined to the
  job's working directory first, ``%`` and backslashes of the directory included (so the
  PBS front end's relative ``-o job.out`` goes elsewhere when the pilot's directory holds
  either). Grid Engine reads ``-o``/``-e`` as ``[host:]path[,...]`` and expands
  ``$HOME``, ``$USER``, ``$JOB_ID``, ``$JOB_NAME``, ``$HOSTNAME``, ``$TASK_ID`` in them, and
  in the working directory of ``-cwd`` too: no literal form. LoadLeveler substitutes
  ``$(...)`` in every keyword's value; a relative ``output`` is read in ``initialdir``,
  which defaults to where ``llsubmit`` ran (the pilot's directory) and is never written.
  Where no literal form exists the batch system is given ``/dev/null`` and the job script
  sends its own output to the pilot's ``job.out``/``job.err`` (``exec``, its paths
  shell-quoted): :meth:`protocols.base.Protocol.streams` says which, per pilot directory.
- **Directive lines.** ``sbatch`` reads ``#SBATCH`` lines (and, for the PBS front end,
  ``#PBS`` lines) as shell-like words: quotes are removed, a backslash escapes the next
  character, an unescaped ``#`` ends the line. A value is written with a backslash before
  each of those characters (:data:`ESCAPED`), and bare when it holds none. Grid Engine's
  ``#$`` lines drop quotes, end at ``#``, and qsub refuses a backslash in a name: such a
  value is refused (:data:`REFUSED`), as is a ``$`` in a LoadLeveler keyword's value.

Refusals are :class:`~pwe.base.errors.InputError` (one line, exit status 2): ``pwe
validate``, ``pwe plan`` and ``pwe run`` check every value a host's directive lines would
carry before anything is made (:mod:`pwe.planning.sitecheck`); rendering checks again.
"""

from __future__ import annotations

from pwe.base.errors import InputError

#: the batch system's name in messages, by protocol
TITLES = {"slurm": "SLURM", "pbs": "PBS (sbatch reads #PBS lines)", "sge": "Grid Engine",
          "loadleveler": "LoadLeveler", "ssh": "ssh", "local": "local"}

_SBATCH = "sbatch reads #SBATCH and #PBS lines as shell-like words"
#: per protocol, the characters written with a backslash before them in a directive line
ESCAPED = {"slurm": "\\'\"#", "pbs": "\\'\"#"}

_SGE_QUOTE = "Grid Engine drops quotes from a #$ line"
#: per protocol, the characters a directive value cannot carry literally, each with why
REFUSED: dict[str, dict[str, str]] = {
    "sge": {"#": "Grid Engine reads the rest of a #$ line as a comment", "'": _SGE_QUOTE, '"': _SGE_QUOTE,
            "\\": "Grid Engine refuses a backslash in a #$ option's value"},
    "loadleveler": {"$": "LoadLeveler substitutes $(...) in a '# @' keyword's value"},
}


def refused(protocol: str, value: str) -> tuple[str, str] | None:
    """The first character of ``value`` that ``protocol``'s directive lines cannot carry
    literally, and why; None when it has none."""
    rules = REFUSED.get(protocol, {})
    for ch in value:
        if ch in rules:
            return ch, rules[ch]
    return None


def why_refused(protocol: str, value: str, what: str) -> str | None:
    """The one-line reason ``value`` (named ``what``: "account", "partition"...) cannot go
    into ``protocol``'s directive lines; None when it can."""
    found = refused(protocol, value)
    if found is None:
        return None
    ch, why = found
    return f"{what} {value!r} holds {ch!r}: {why}, and {TITLES.get(protocol, protocol)} reads no form of it literally"


def directive_word(protocol: str, value: object, what: str = "value") -> str:
    """``value`` as ``protocol``'s directive lines read it back literally (escaped where the
    batch system reads escapes); InputError when they cannot carry it."""
    text = str(value)
    reason = why_refused(protocol, text, what)
    if reason:
        raise InputError(reason)
    escaped = ESCAPED.get(protocol, "")
    if not any(c in escaped for c in text):
        return text
    return "".join("\\" + c if c in escaped else c for c in text)
