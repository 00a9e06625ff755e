"""What the two sides of the one renderer share (:mod:`pwe.workflow.templates`, which
joins plain templates, and :mod:`pwe.workflow.sandbox`, jinja2's side): the bounds on what
a template may make, the quoting of every value (:func:`finalize`, :class:`Raw`) and the
error of a template that does not compile. Standard library only, below both.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..base.errors import TemplateError
from ..base.source import value_text

#: most characters or items ``*``, padding or ``replace`` may make
MAX_ITEMS = 1_000_000
#: most bits of a number ``**`` may make (about 1,200 decimal digits)
MAX_POWER_BITS = 4096
#: largest width or precision in a ``%`` or ``format`` specification
MAX_WIDTH = 10_000
#: most bytes of a rendered command: Linux's limit on one argument (``bash -c CMD``)
MAX_COMMAND = 128 * 1024
#: most seconds one render may take when ``pwe validate`` renders a node's first and last member
CHECK_SECONDS = 5.0


class TemplateSyntax(TemplateError):
    """A template that does not compile: jinja2's message, and ``lineno``, the line of the
    template it is on. Raised without a file: the planner words it with the workflow's
    file and line (pwe.planning.plan, pwe.planning.products)."""

    def __init__(self, message: str, lineno: int = 1):
        super().__init__(message)
        self.lineno = lineno


class Raw(str):
    """A value the ``raw`` filter marked as shell text, not to be quoted."""


def finalize(value: Any) -> str:
    """Every ``{{ }}`` of a payload: its value's text, shell-quoted (a :class:`Raw` as it is)."""
    if isinstance(value, Raw):
        return str(value)
    return shlex.quote(value_text(value))
