"""Payload templates: jinja2, with every ``{{ value }}`` shell-quoted.

This is the only renderer of payloads. Each expression's result goes through
:func:`shlex.quote` (jinja2's ``finalize`` hook), so a parameter value holding spaces,
quotes, ``;``, ``$(...)`` or backticks reaches the program as one literal argument.
Write ``--T={{ T }}`` (never ``"--T={{ T }}"``: the quotes are added for you).
``{{ x | raw }}`` opts out, for a value that is itself meant as shell text.

Templates run in jinja2's sandbox: a workflow file cannot reach Python internals. And
what a template may compute is bounded, so that one line of a workflow cannot take the
engine's memory or time: ``range()`` makes at most 100,000 numbers (jinja2's own bound),
``*`` makes at most :data:`MAX_ITEMS` characters or items, ``**`` at most
:data:`MAX_POWER_BITS`-bit numbers, a ``%`` / ``format`` / ``str.format`` width or
precision is at most :data:`MAX_WIDTH`, padding and ``replace`` make at most
:data:`MAX_ITEMS` characters. ``pwe validate`` renders the first and last member of each
node with these bounds and a time limit (:meth:`PayloadTemplate.check`).

A template made only of text and ``{{ name }}`` (most of them: ``run: simulate --T={{ T }}``)
is rendered here by joining strings, to the very text jinja2 gives it, and jinja2 is not
imported for it; any other template is compiled by jinja2's sandbox
(:mod:`pwe.workflow.sandbox`), imported the first time one is met. A plain template whose
name is missing from a member's values is rendered by jinja2 too, so that the error is
jinja2's own. Why: jinja2's import is ~20-60 ms of every ``pwe run`` before its first member
(bench/BENCHMARKS.md, issue 35), and a plain render is ~1 us against ~10 us.
"""

from __future__ import annotations

import keyword
import re
import signal
import sys
import threading
from typing import Any, Mapping

from ..base.source import value_text
from .template_rules import CHECK_SECONDS, MAX_COMMAND, finalize
from .template_rules import TemplateSyntax as TemplateSyntax  # (the planner's: re-exported)

_NAME = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def error_text(exc: BaseException) -> str:
    """What a render's error says: jinja2's message where it is one of jinja2's errors
    (only a template jinja2 rendered can raise those), else the exception's type and text."""
    jinja2 = sys.modules.get("jinja2")
    if jinja2 is not None and isinstance(exc, jinja2.TemplateError) and exc.message:
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def plain_parts(source: str, path: bool = False) -> list[str] | None:
    """``[text, name, text, name, ..., text]`` when ``source`` is only text and ``{{ name }}``
    (what jinja2 would render by the same joining), else None. Not plain: any other ``{{``,
    ``{%`` or ``{#`` (an expression, a filter, whitespace control ``{{-``, a block, a
    comment), a ``{`` just before a ``{{ name }}`` (jinja2 reads ``{{{``), a carriage return
    (jinja2 turns line ends into ``\\n``) and, for a path (whose environment drops one
    trailing newline), a trailing newline."""
    if "\r" in source or (path and source.endswith("\n")):
        return None
    parts = _NAME.split(source)
    if any(_reserved(name) for name in parts[1::2]):
        return None
    texts = parts[0::2]
    for k, text in enumerate(texts):
        if "{{" in text or "{%" in text or "{#" in text or (k < len(texts) - 1 and text.endswith("{")):
            return None
    return parts


#: what jinja2 does not read as a member's value inside ``{{ }}``: its constants, its
#: globals (jinja2.defaults.DEFAULT_NAMESPACE: tests/workflow/test_templates_plain.py holds the two
#: alike) and ``self``; with Python's keywords (its operators, ``if``/``else``)
JINJA_WORDS = frozenset({"true", "false", "none", "range", "dict", "lipsum", "cycler", "joiner", "namespace",
                         "self"})


def _reserved(name: str) -> bool:
    return keyword.iskeyword(name) or name in JINJA_WORDS


class _Template:
    """What payload and path templates share: plain ones joined here, the others jinja2's."""

    _path = False

    def __init__(self, source: str):
        self.source = source
        self._parts = plain_parts(source, self._path)
        self._template: Any = None
        if self._parts is None:
            from .sandbox import compiled  # (raises TemplateSyntax)

            self.names, self._template = compiled(source, self._path)
        else:
            self.names = frozenset(self._parts[1::2])

    def _jinja(self) -> Any:
        if self._template is None:
            from .sandbox import compiled

            self._template = compiled(self.source, self._path)[1]
        return self._template

    def _joined(self, context: Mapping[str, Any], text: Any) -> str | None:
        """The plain template rendered, each value through ``text``; None when a name is not
        in ``context`` (then jinja2 renders it, and words the error)."""
        parts = self._parts
        out = [parts[0]]
        for k in range(1, len(parts), 2):
            try:
                value = context[parts[k]]
            except KeyError:
                return None
            out.append(text(value))
            out.append(parts[k + 1])
        return "".join(out)


class PayloadTemplate(_Template):
    """A compiled payload. ``names`` are the variables it uses."""

    def render(self, context: Mapping[str, Any]) -> str:
        if self._parts is not None:
            if len(self._parts) == 1:  # no {{ }} at all: the payload itself
                return self.source
            out = self._joined(context, finalize)
            if out is not None:
                return out
        return self._jinja().render(context)

    def check(self, context: Mapping[str, Any]) -> str:
        """Render as :meth:`render` does, within :data:`CHECK_SECONDS` (on the main thread,
        where a timer can interrupt it) and to at most :data:`MAX_COMMAND` bytes; raises
        :class:`jinja2.exceptions.SecurityError` saying which bound it crossed."""
        timed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
        if timed:
            def stop(*_: Any) -> None:
                from jinja2.exceptions import SecurityError

                raise SecurityError(f"rendering took longer than {CHECK_SECONDS:g} seconds; a payload template "
                                    "must render at once")

            previous = signal.signal(signal.SIGALRM, stop)
            signal.setitimer(signal.ITIMER_REAL, CHECK_SECONDS)
        try:
            out = self.render(context)
        finally:
            if timed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
        size = len(out.encode("utf-8", "replace"))
        if size > MAX_COMMAND:
            from jinja2.exceptions import SecurityError

            raise SecurityError(f"it renders to {size:,} bytes; a command holds at most {MAX_COMMAND:,} bytes "
                                "(put long data in a file the command reads)")
        return out


class PathTemplate(_Template):
    """A compiled path template (a node's ``products``): rendered by the same sandbox with
    the same bounds, each value as its text, unquoted. ``names`` are the variables it uses.

    Paths are rendered once per member when a run starts (a million members: a million
    renders), which is why the plain ones are joined (about 1 us, not jinja2's 10)."""

    _path = True

    def render(self, context: Mapping[str, Any]) -> str:
        if self._parts is not None:
            out = self._joined(context, value_text)
            if out is not None:
                return out
        from .sandbox import render_path

        return render_path(self._jinja(), context)


def render_page(name: str, context: Mapping[str, Any]) -> str:
    """An HTML page from a template of ``pwe/pages/`` (``pwe report``), with every value
    HTML-escaped (autoescape): the other use of the one renderer, jinja2."""
    from .sandbox import render_page as page

    return page(name, context)
