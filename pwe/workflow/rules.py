"""The workflow model's rules and methods in the standard library alone: every validator
of :mod:`pwe.workflow.model` is a plain function here, and every method a mixin the
pydantic model and the checker's record (:mod:`pwe.base.checker`) share. So a workflow is
checked and used on the road to the first member without importing pydantic; the models
stay the one definition (the checker's table is derived from them: ``python -m
pwe.workflow.schema``)."""

from __future__ import annotations

import math
import re
from typing import Any

from hostinfo.rules import CORE_HOURS_MOST, finite, one_line
from .inputs import pattern_problem

#: Why a member's attempt ended, where it was not its own exit (pilot/wire.py's REASON_*):
#: the ones a ``retry: {on: [...]}`` may name besides exit statuses. ``exit`` is any other
#: failure (a non-zero exit status); ``invalid``: it exited 0, but its result did not pass
#: (a product missing, empty or short; its ``validate`` failed).
RETRY_REASONS = ("oom", "walltime", "straggler", "exit", "invalid")

_PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$")


# -- field validators (each a pydantic after- or before-validator: value in, value out) --
def input_pattern(v: Any) -> Any:
    # what is staged must come from the workspace: refused here, at validate, not when staging
    # (before the type's own checks, so that '' gets this message too; not text: StrictStr's)
    why = pattern_problem(v) if isinstance(v, str) else None
    if why:
        raise ValueError(f"the pattern {why}")
    return v


def valid_start(v: str | None) -> str | None:
    if v is not None:
        from . import starttime

        starttime.parse(one_line(v))  # refused here, at validate, not at the first submission
    return v


def range_step(v: list) -> list:
    if not all(finite(x) for x in v):
        raise ValueError(f"the start, stop and step of a range must be finite numbers (got {v})")
    if len(v) == 3 and v[2] == 0:
        raise ValueError("the step of a range cannot be 0")
    step = v[2] if len(v) == 3 else 1
    if (v[1] - v[0]) * step <= 0:
        raise ValueError(f"range {v} is empty (stop is excluded; a step must go from start toward stop)")
    return v


def param_kind(v: Any) -> str | None:
    """Which of a parameter's forms ``v`` is: values, range or file (a tagged union's tag)."""
    if isinstance(v, list):
        return "values"
    if isinstance(v, dict):
        if "range" in v:
            return "range"
        if "file" in v:
            return "file"
        return None
    if isinstance(v, RangeSpecMethods):
        return "range"
    if isinstance(v, FileSpecMethods):
        return "file"
    return None


def finite_over_one(v: Any) -> Any:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and not (finite(v) and 1 < v <= 100):
        raise ValueError("a growth factor multiplies the request on each retry: give a number over 1, at most 100")
    return v


#: the largest straggler factor: past it no member is ever a straggler (a typo, not a policy)
STRAGGLER_FACTOR_MOST = 1000


def straggler_factor(v: Any) -> Any:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and not (finite(v) and 1 < v <= STRAGGLER_FACTOR_MOST):
        raise ValueError("a straggler runs longer than this many times the median of the members done: give a number "
                         f"over 1, at most {STRAGGLER_FACTOR_MOST}")
    return v


def retry_on(v: list | None) -> list | None:
    for item in v or ():
        if isinstance(item, int):
            if not 0 <= item <= 255:
                raise ValueError(f"an exit status in 'on' is 0-255, not {item}")
        elif item not in RETRY_REASONS:
            raise ValueError(f"'on' takes {', '.join(RETRY_REASONS)} or exit statuses 0-255 (got {item!r})")
    return v


def failed_budget(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("give a number of failed members (e.g. 10) or a percentage of them (e.g. '10%')")
    if isinstance(v, int):
        if v < 1:
            raise ValueError("'failed' is how many failed members halt the run: give 1 or more")
        return v
    if isinstance(v, str):
        m = _PERCENT.match(v)
        if m is None:
            raise ValueError(f"'failed' takes a number of members (e.g. 10) or a percentage (e.g. '10%'), not {v!r}")
        pct = float(m.group(1))
        if not 0 < pct <= 100:
            raise ValueError("a percentage of failed members is over 0% and at most 100%")
        return v
    raise ValueError("give a number of failed members (e.g. 10) or a percentage of them (e.g. '10%')")


def positive_core_hours(v: Any) -> Any:
    if not (finite(v) and 0 < v <= CORE_HOURS_MOST):
        raise ValueError(f"give a number of core-hours over 0, at most {CORE_HOURS_MOST:g}")
    return v


def check_not_blank(v: str | None) -> str | None:
    if v is not None and not v.strip():
        raise ValueError("the check is blank; 'check' needs a command")
    return v


def validate_not_blank(v: str | None) -> str | None:
    if v is not None and not v.strip():
        raise ValueError("the validate is blank; 'validate' needs a command (exit 0: the result is good), or leave "
                         "it out")
    return v


def product_kind(v: Any) -> str | None:
    """Which of an item of ``products``' forms ``v`` is: a path template (text) or a
    mapping with what the file must hold (a tagged union's tag)."""
    if isinstance(v, str):
        return "text"
    if isinstance(v, (dict, ProductMethods)):
        return "mapping"
    return None


def one_or_many(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


def run_not_blank(v: str | None) -> str | None:
    if v is not None and not v.strip():
        raise ValueError("the payload is blank; 'run' needs a command")
    return v


# -- model validators (after: the whole model in, itself out) -----------------------------
#: ``python:`` of a node: ``package.module:function`` (pwe/planning/functions.py finds it)
FUNCTION_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


def function_spec(v: str | None) -> str | None:
    if v is not None and not FUNCTION_PATTERN.fullmatch(v):
        raise ValueError("a function member's python: is package.module:function (Python names: letters, digits "
                         "and '_', dotted, then ':' and the function's name)")
    return v


def run_or_python(self: Any) -> Any:
    """A node's payload: a shell command (``run``) or a function (``python``), one of them."""
    if self.run is None and self.python is None:
        raise ValueError("the node has no payload: give 'run' (a shell command) or 'python' "
                         "(package.module:function)")
    if self.run is not None and self.python is not None:
        raise ValueError("the node gives both 'run' and 'python': give one (a shell command, or a function)")
    return self


def scheduling_ranges(self: Any) -> Any:
    for lo, hi in (
        ("minWallTime", "maxWallTime"),
        ("minWallTimePerMember", "maxWallTimePerMember"),
        ("minCpus", "maxCpus"),
        ("minTotalMemory", "maxTotalMemory"),
        ("minNodes", "maxNodes"),
    ):
        a, b = getattr(self, lo), getattr(self, hi)
        if a is not None and b is not None and a > b:
            raise ValueError(f"{lo} ({a}) is larger than {hi} ({b})")
    if self.ranksPerNode is not None and (self.ranksPerMember or 1) % self.ranksPerNode:
        raise ValueError(f"ranksPerMember ({self.ranksPerMember or 1}) is not a multiple of ranksPerNode "
                         f"({self.ranksPerNode}): a member's ranks must divide evenly over its nodes")
    return self


# -- the models' methods, shared by the pydantic model and the checker's record ------------
class SchedulingMethods:
    __slots__ = ()

    def requested_start(self, now: Any = None) -> Any:
        """The earliest start of this node's pilot jobs (an aware datetime), or None;
        ``now``: when a ``now+`` delay counts from (the run's creation)."""
        if self.requestedStart is None:
            return None
        from . import starttime

        return starttime.parse(self.requestedStart, now)

    def cores_per_member(self) -> int:
        return (self.ranksPerMember or 1) * (self.threadsPerRank or 1)

    def merged(self, override: Any) -> Any:
        """This profile with every field that ``override`` sets replaced (checked again:
        each fine alone, the two may contradict each other merged: a pydantic
        ValidationError then)."""
        if override is None:
            return self
        values = self.model_dump(exclude_none=True)
        values.update(override.model_dump(exclude_none=True))
        return type(self).model_validate(values)


class RangeSpecMethods:
    __slots__ = ()


class ProductMethods:
    __slots__ = ()

    @property
    def least(self) -> int:
        """The fewest bytes the product's file must have to count (0: that it exists)."""
        return max(self.minBytes, 1 if self.nonEmpty else 0)


class FileSpecMethods:
    __slots__ = ()


class RetryMethods:
    __slots__ = ()

    def retries(self, reason: str, rc: int) -> bool:
        """Whether an attempt that ended so (``reason``: oom, walltime or exit; ``rc``) is retried."""
        return self.on is None or reason in self.on or (reason == "exit" and rc in self.on)


class HaltMethods:
    __slots__ = ()

    def limit(self, members: int) -> int:
        """The failures that halt a run (or node) of ``members`` members: the number, or the
        percentage of them rounded up (at least 1)."""
        if isinstance(self.failed, int):
            return self.failed
        pct = float(self.failed.strip().rstrip("%"))
        return max(1, math.ceil(pct * members / 100 - 1e-9))

    def shown(self) -> str:
        return self.failed.strip() if isinstance(self.failed, str) else str(self.failed)


# -- environments: container: and modules: (pwe/planning/images.py, pwe/engine/environs.py) --------
#: A module's name as the site's ``module load`` takes it: one word of these characters only
#: (``gcc/12``, ``py-numpy/1.26.4+mkl``), so that it is never more than one argument.
_MODULE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+/-]*")
#: An image reference for podman (``localhost/sim:1``, ``sim@sha256:...``): a name, not a path.
_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@-]*")
#: The longest image path or module name taken (a path past PATH_MAX is no path).
IMAGE_MOST, MODULE_MOST = 4096, 200


def module_name(v: Any) -> Any:
    if isinstance(v, str) and not (len(v) <= MODULE_MOST and _MODULE.fullmatch(v)):
        raise ValueError(f"{v[:80]!r} is not a module name: letters, digits and . _ + - / only, not starting with "
                         "'-' or '.' (no spaces or shell characters: it is one argument of the site's 'module load')")
    return v


def image_text(v: Any) -> Any:
    if isinstance(v, str) and (not v.strip() or len(v) > IMAGE_MOST or v.startswith("-")
                               or any(ord(c) < 32 or ord(c) == 127 for c in v)):
        raise ValueError(f"the image {v[:80]!r} is not a path or name: one line of at most {IMAGE_MOST} characters, "
                         "not starting with '-'")
    return v


def container_image(self: Any) -> Any:
    """podman's image is a name in its store (``localhost/sim``), charliecloud's and
    apptainer's a path (a directory or an image file)."""
    if self.runtime == "podman" and not _REFERENCE.fullmatch(self.image):
        raise ValueError(f"podman's image is a name of its store (localhost/sim:1, sim@sha256:...), not "
                         f"{self.image[:80]!r}")
    return self
