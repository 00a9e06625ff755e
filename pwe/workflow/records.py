"""The workflow checked without pydantic: the checker (:mod:`pwe.base.checker`) over the
table derived from :mod:`pwe.workflow.model` (pwe/workflow/check_table.py).

``check(name, data)`` gives model ``name``'s record or raises
:class:`~pwe.base.checker.Refused`; ``validate(name, data)`` asks pydantic where the checker
cannot vouch (its ValidationError where the data is wrong)."""

from __future__ import annotations

from typing import Any

from ..base.checker import Checker, Refused  # noqa: F401
from .check_table import TABLE

CHECKER = Checker(TABLE, "pwe.workflow.check_table")


def check(name: str, data: Any) -> Any:
    return CHECKER.check(name, data)


def validate(name: str, data: Any) -> Any:
    return CHECKER.validate(name, data)
