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
"""

from __future__ import annotations

import re
import shlex
import signal
import threading
from typing import Any, Mapping

import jinja2
from jinja2 import meta
from jinja2.exceptions import SecurityError
from jinja2.filters import do_center, do_format
from jinja2.runtime import new_context
from jinja2.sandbox import SandboxedEnvironment

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

_PERCENT_SPEC = re.compile(r"%[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")
_BRACE_SPEC = re.compile(r"\{[^{}]*?:([^{}]*)\}")


def _too_large(what: str) -> SecurityError:
    return SecurityError(f"{what} is too large for a payload template")


def _check_spec(fmt: Any) -> None:
    """A ``%`` or ``str.format`` format string's widths and precisions, against MAX_WIDTH."""
    if not isinstance(fmt, str):
        return
    specs = [(m.group(0), [n for n in m.groups() if n]) for m in _PERCENT_SPEC.finditer(fmt)]
    specs += [(m.group(0), re.findall(r"\d+", m.group(1))) for m in _BRACE_SPEC.finditer(fmt)]
    for spec, numbers in specs:
        for n in numbers:
            if n == "*" or int(n) > MAX_WIDTH:
                raise _too_large(f"a width or precision of {n} in {spec!r} (at most {MAX_WIDTH:,})")


def _check_count(n: Any, what: str) -> None:
    if isinstance(n, int) and n > MAX_ITEMS:
        raise _too_large(f"{what} of {n:,} (at most {MAX_ITEMS:,})")


class _BoundedSandbox(SandboxedEnvironment):
    """jinja2's sandbox with bounds on what ``*``, ``**``, ``%`` and a few string methods make."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                    _check_count(len(seq) * times, "a repetition")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1 and \
                    abs(left).bit_length() * right > MAX_POWER_BITS + right:
                raise _too_large(f"{left} ** {right} (at most {MAX_POWER_BITS}-bit numbers)")
        elif operator == "%":
            _check_spec(left)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: B902 - jinja2's names
        method = getattr(__obj, "__wrapped__", __obj)  # (the sandbox wraps str.format)
        owner = getattr(method, "__self__", None)
        if isinstance(owner, str):
            name = getattr(method, "__name__", "")
            if name in ("format", "format_map"):
                _check_spec(owner)
            elif name in ("center", "ljust", "rjust", "zfill", "expandtabs") and args:
                _check_count(args[0], f"a width of {name}()")
            elif name == "replace" and len(args) >= 2 and isinstance(args[1], str) and isinstance(args[0], str):
                _check_count(len(owner) + owner.count(args[0] or " ") * len(args[1]), "the result of replace()")
        return super().call(__context, __obj, *args, **kwargs)


def _format(value: Any, *args: Any, **kwargs: Any) -> str:
    _check_spec(value)
    return do_format(value, *args, **kwargs)


def _center(value: str, width: int = 80) -> str:
    _check_count(width, "a width of center")
    return do_center(value, width)


class _Raw(str):
    """A value the ``raw`` filter marked as shell text, not to be quoted."""


def _finalize(value: Any) -> str:
    if isinstance(value, _Raw):
        return str(value)
    return shlex.quote(value_text(value))


_ENV = _BoundedSandbox(
    undefined=jinja2.StrictUndefined,
    finalize=_finalize,
    autoescape=False,
    keep_trailing_newline=True,
)
_ENV.filters["raw"] = lambda v: _Raw(value_text(v))
_ENV.filters["format"] = _format
_ENV.filters["center"] = _center

# the same sandbox and bounds for paths (products): values rendered as they are, not
# shell-quoted (a path is never a shell word; pwe.planning.products checks where it points)
_PATH_ENV = _BoundedSandbox(undefined=jinja2.StrictUndefined, finalize=value_text, autoescape=False)
_PATH_ENV.filters.update(_ENV.filters)
_PATH_ENV.filters["raw"] = value_text
_SIMPLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


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

    def check(self, context: Mapping[str, Any]) -> str:
        """Render as :meth:`render` does, within :data:`CHECK_SECONDS` (on the main thread,
        where a timer can interrupt it) and to at most :data:`MAX_COMMAND` bytes; raises
        :class:`jinja2.exceptions.SecurityError` saying which bound it crossed."""
        timed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
        if timed:
            def stop(*_: Any) -> None:
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
            raise SecurityError(f"it renders to {size:,} bytes; a command holds at most {MAX_COMMAND:,} bytes "
                                "(put long data in a file the command reads)")
        return out


class PathTemplate:
    """A compiled path template (a node's ``products``): rendered by the same sandbox with
    the same bounds, each value as its text, unquoted. ``names`` are the variables it uses.

    Paths are rendered once per member when a run starts (a million members: a million
    renders), so a template made only of text and ``{{ name }}`` is rendered by joining
    strings (about 1 us), not by jinja2 (about 10 us); both give the same text."""

    def __init__(self, source: str):
        self.source = source
        ast = _PATH_ENV.parse(source)  # raises jinja2.TemplateSyntaxError
        self.names = frozenset(meta.find_undeclared_variables(ast))
        self._template = _PATH_ENV.from_string(source)
        parts = _SIMPLE.split(source)  # [text, name, text, name, ..., text]
        plain = all("{" not in t and "}" not in t for t in parts[0::2])
        self._parts: list[str] | None = parts if plain else None

    def render(self, context: Mapping[str, Any]) -> str:
        parts = self._parts
        if parts is None:
            # jinja2's Template.render less its per-call wrapping (a third of the time);
            # errors propagate as raised (pwe.planning.products words them)
            t = self._template
            return "".join(t.root_render_func(new_context(_PATH_ENV, t.name, t.blocks, context)))
        out = [parts[0]]
        for k in range(1, len(parts), 2):
            out.append(value_text(context[parts[k]]))
            out.append(parts[k + 1])
        return "".join(out)


def render_page(name: str, context: Mapping[str, Any]) -> str:
    """An HTML page from a template of ``pwe/pages/`` (``pwe report``), with every value
    HTML-escaped (autoescape): the other use of the one renderer, jinja2."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("pwe", "pages"), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.get_template(name).render(**context)
