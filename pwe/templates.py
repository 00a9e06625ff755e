"""Payload templates: jinja2, with every ``{{ value }}`` shell-quoted.

This is the only renderer of payloads. Each expression's result goes through
:func:`shlex.quote` (jinja2's ``finalize`` hook), so a parameter value holding spaces,
quotes, ``;``, ``$(...)`` or backticks reaches the program as one literal argument.
Write ``--T={{ T }}`` (never ``"--T={{ T }}"``: the quotes are added for you).
``{{ x | raw }}`` opts out, for a value that is itself meant as shell text.

Templates run in jinja2's sandbox: a workflow file cannot reach Python internals.
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping

import jinja2
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment

from .source import value_text


class _Raw(str):
    """A value the ``raw`` filter marked as shell text, not to be quoted."""


def _finalize(value: Any) -> str:
    if isinstance(value, _Raw):
        return str(value)
    return shlex.quote(value_text(value))


_ENV = SandboxedEnvironment(
    undefined=jinja2.StrictUndefined,
    finalize=_finalize,
    autoescape=False,
    keep_trailing_newline=True,
)
_ENV.filters["raw"] = lambda v: _Raw(value_text(v))


class PayloadTemplate:
    """A compiled payload. ``names`` are the variables it uses."""

    def __init__(self, source: str):
        self.source = source
        ast = _ENV.parse(source)  # raises jinja2.TemplateSyntaxError
        self.names = frozenset(meta.find_undeclared_variables(ast))
        self._template = _ENV.from_string(source)
        # a payload without any {{ }} renders to itself: skip jinja for the common case
        self._constant = source if "{" not in source else None

    def render(self, context: Mapping[str, Any]) -> str:
        if self._constant is not None:
            return self._constant
        return self._template.render(context)
