"""Hosts checked without pydantic: the checker (:mod:`pwe.base.checker`) over the table
derived from :mod:`hostinfo.model` (hostinfo/check_table.py).

``check(name, data)`` gives model ``name``'s record or raises
:class:`~pwe.base.checker.Refused`; ``host(data)`` is a host's definition (a lane's
``host_def``) as a Host, pydantic asked where the checker cannot vouch."""

from __future__ import annotations

from typing import Any

from pwe.base.checker import Checker, Refused  # noqa: F401

from .check_table import TABLE

CHECKER = Checker(TABLE, "hostinfo.check_table")


def check(name: str, data: Any) -> Any:
    return CHECKER.check(name, data)


def host(data: Any) -> Any:
    """A Host from its fields (pydantic's ValidationError where they are wrong)."""
    return CHECKER.validate("Host", data)
