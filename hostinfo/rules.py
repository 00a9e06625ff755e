"""The host model's rules and methods in the standard library alone: every validator of
:mod:`hostinfo.model` is a plain function here and every method a mixin, shared by the
pydantic model and the checker's record (:mod:`pwe.base.checker`), so that a host is
checked and used on the road to the first member without importing pydantic."""

from __future__ import annotations

import math
import re
from typing import Any

#: An environment variable's name (what ``export NAME=...`` in a job script takes).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Pilot jobs per minute a host's lane submits by default (submit_rate): one every 3 s at most.
SUBMIT_RATE = 20.0
#: Refused submissions in a row (a bad account, a full queue) that stop a run (submit_failures).
SUBMIT_FAILURES = 3
#: Seconds an idle pilot keeps its nodes by default (idle_timeout): a batch job, one on this machine.
IDLE_TIMEOUT_BATCH = 60.0
IDLE_TIMEOUT_LOCAL = 300.0
#: The most pilots (max_pilots, max_queued_pilots) a host may allow; the largest rate or time.
MAX_PILOTS = 10000
MOST = 1e6
#: The least rate or time: a submit_rate of 1e-300 would space submissions 6e301 s apart.
LEAST = 1e-6


# The rules for values that reach a job script or a command line, shared with the
# workflow's scheduling profile (pwe.workflow.model): each is a pydantic after-validator.

def finite(v: Any) -> bool:
    """Whether a number is finite: not NaN, not infinite, and an int small enough to be a
    float (math.isfinite raises OverflowError for a 400-digit one: a traceback, not a line)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def one_line(v):
    """A value that ends up in a job script line: a line break would add a script line."""
    if isinstance(v, str) and any(c in v for c in "\n\r\x00"):
        raise ValueError("must be one line (no line breaks)")
    return v


def one_word(v):
    """A value passed to a batch system as an option's value (``#SBATCH --account=V``, a
    queue, a job name): directives are split into words, and a word starting with '-' is
    read as another option."""
    one_line(v)
    if isinstance(v, str) and (not v or v.startswith("-") or any(c.isspace() for c in v)):
        raise ValueError(f"must be one word, not starting with '-' (it becomes a batch system option's value; "
                         f"got {v!r})")
    return v


def not_an_option(v):
    """A path given to ssh after an option (``-F PATH``)."""
    one_line(v)
    if isinstance(v, str) and v.startswith("-"):
        raise ValueError(f"must not start with '-' (got {v!r}; write ./{v} for a file so named)")
    return v


def variable_name(v):
    if not IDENTIFIER.fullmatch(v):
        raise ValueError(f"{v!r} is not a valid variable name (letters, digits and '_', not starting with a digit)")
    return v


def positive_finite(v):
    """A rate or a time: a number of at least :data:`LEAST`, not NaN or infinite, at most :data:`MOST` (a
    mistake, not a setting: it would size a loop or a sleep)."""
    if not (v >= LEAST and v <= MOST):  # (NaN compares false both ways)
        raise ValueError(f"give a number above 0 (at least {LEAST:g}) and at most {MOST:g} (got {v!r})")
    return v


#: The most core-hours a budget may give (far above any allocation; below where a figure
#: derived from it, in core-seconds, loses its units' digits).
CORE_HOURS_MOST = 1e12


def core_hours(v: Any) -> Any:
    if not (finite(v) and 0 < v <= CORE_HOURS_MOST):
        raise ValueError(f"give a number of core-hours over 0, at most {CORE_HOURS_MOST:g}")
    return v


def queued_within(v: int | None, info: Any) -> int | None:
    """max_queued_pilots: at most max_pilots (``info.data``: the fields checked before it)."""
    most = info.data.get("max_pilots")
    if v is not None and most is not None and v > most:
        raise ValueError(f"max_queued_pilots ({v}) is more than max_pilots ({most}), which counts queued and "
                         f"running pilots together: give at most {most}, or raise max_pilots")
    return v


def absolute_path(v: str | None) -> str | None:
    one_line(v)
    if v is not None and not v.startswith("/"):
        raise ValueError(f"commands_dir must be an absolute path (got {v!r})")
    return v


def distinct(v: list[str]) -> list[str]:
    seen = set()
    for name in v:
        if name in seen:
            raise ValueError(f"node {name!r} is listed twice")
        seen.add(name)
    return v


def contact_syntax(v: str) -> str:
    one_line(v)
    if v == "local":
        return v
    if not v.startswith("ssh://"):
        raise ValueError(f"contact {v!r}: write 'local' or ssh://user@host")
    from protocols.ssh import split_contact

    try:
        split_contact(v)  # as the SSH runner reads it, so a run never meets a bad one
    except ValueError as exc:
        raise ValueError(f"contact {v!r}: {exc}") from None
    return v


def known_protocol(v: str) -> str:
    from protocols.registry import UnknownProtocol, info

    try:
        info(v)  # the one list of protocols; an unknown name is one line with the known ones
    except UnknownProtocol as exc:  # pydantic takes a ValueError; hostinfo.registry adds file and line
        raise ValueError(exc.message) from None
    return v


def broker_url(v: str | None) -> str | None:
    if v is None:
        return v
    from pilot.broker import parse_url

    one_line(v)
    if parse_url(v)[4]:  # (parse_url: a ValueError saying how to write one) hosts files are shown and copied
        raise ValueError("broker: give the password in broker_password_file (an owner-only file), not in the URL")
    return v


def host_contact(self: Any) -> Any:
    """A host's fields that must agree with each other (a model after-validator)."""
    if not self.shared_fs and self.contact == "local":
        raise ValueError("shared_fs: false needs a login node to stage to: give contact: ssh://user@login-node")
    if self.transport == "redis" and not self.broker:
        raise ValueError("transport redis needs broker: redis://host:port/db")
    from protocols.registry import PROTOCOLS

    if self.contact != "local" and not PROTOCOLS[self.protocol].remote:
        remote = ", ".join(n for n, p in PROTOCOLS.items() if p.remote)
        raise ValueError(f"protocol {self.protocol} runs on this machine (contact local); for a remote head node "
                         f"use a protocol that submits there: {remote}")
    return self


class HostMethods:
    __slots__ = ()

    @property
    def queued_most(self) -> int:
        """Most pilot jobs waiting in the batch queue at once (max_queued_pilots, else max_pilots)."""
        return self.max_queued_pilots or self.max_pilots

    def idle_after(self, batch: bool) -> float:
        """Seconds an idle pilot keeps its nodes (idle_timeout, else the default for its kind)."""
        if self.idle_timeout is not None:
            return float(self.idle_timeout)
        return IDLE_TIMEOUT_BATCH if batch else IDLE_TIMEOUT_LOCAL
