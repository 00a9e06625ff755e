"""jinja2's side of the one renderer (:mod:`pwe.workflow.templates`): the bounded sandbox
every payload and path template that is more than text and ``{{ name }}`` is compiled and
rendered in, and the pages of ``pwe report``. Imported only when such a template is met,
so that a run of plain templates does not import jinja2 (issue 35: nothing but the
standard library on the road to the first member). The bounds are described in
:mod:`pwe.workflow.templates` and kept in :mod:`pwe.workflow.template_rules`, with the
quoting both sides share.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import jinja2
from jinja2 import meta
from jinja2.exceptions import SecurityError
from jinja2.filters import do_center, do_format
from jinja2.runtime import new_context
from jinja2.sandbox import SandboxedEnvironment

from ..base.source import value_text
from .template_rules import MAX_ITEMS, MAX_POWER_BITS, MAX_WIDTH, Raw, TemplateSyntax, finalize

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


_ENV = _BoundedSandbox(
    undefined=jinja2.StrictUndefined,
    finalize=finalize,
    autoescape=False,
    keep_trailing_newline=True,
)
_ENV.filters["raw"] = lambda v: Raw(value_text(v))
_ENV.filters["format"] = _format
_ENV.filters["center"] = _center

# the same sandbox and bounds for paths (products): values rendered as they are, not
# shell-quoted (a path is never a shell word; pwe.planning.products checks where it points)
_PATH_ENV = _BoundedSandbox(undefined=jinja2.StrictUndefined, finalize=value_text, autoescape=False)
_PATH_ENV.filters.update(_ENV.filters)
_PATH_ENV.filters["raw"] = value_text




def compiled(source: str, path: bool = False) -> tuple[frozenset[str], Any]:
    """(the names a template uses, the template), compiled in the payload sandbox (``path``:
    the paths' one); a syntax error is :class:`TemplateSyntax`."""
    env = _PATH_ENV if path else _ENV
    try:
        ast = env.parse(source)
        return frozenset(meta.find_undeclared_variables(ast)), env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateSyntax(exc.message or str(exc), exc.lineno) from None


def render_path(template: Any, context: Mapping[str, Any]) -> str:
    """A path template rendered: jinja2's Template.render less its per-call wrapping (a
    third of the time); errors propagate as raised (pwe.planning.products words them)."""
    return "".join(template.root_render_func(new_context(_PATH_ENV, template.name, template.blocks, context)))


def render_page(name: str, context: Mapping[str, Any]) -> str:
    env = jinja2.Environment(loader=jinja2.PackageLoader("pwe", "pages"), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.get_template(name).render(**context)
