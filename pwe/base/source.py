"""The raw document tree both readers produce, with line numbers kept for errors.

The YAML and the XML reader each turn their file into plain Python data (dicts, lists,
scalars) built from :class:`LineDict` and :class:`LineList`, which remember the line
each key or item came from. One model builder (``pwe.workflow.load``) then validates that tree,
so YAML and XML share every rule and every error message.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from .numbers import NumberError, digits_problem
from .errors import did_you_mean  # noqa: F401  (its home is the error tree; readers import it from here)


class LineDict(dict):
    """A mapping that remembers its own line and the line of each key."""

    __slots__ = ("line", "key_lines")

    def __init__(self, *args: Any, line: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.line = line
        self.key_lines: dict[Any, int] = {}


class LineList(list):
    """A sequence that remembers its own line and the line of each item."""

    __slots__ = ("line", "item_lines")

    def __init__(self, *args: Any, line: int | None = None):
        super().__init__(*args)
        self.line = line
        self.item_lines: list[int | None] = []


# YAML 1.2 core schema, as regular expressions shared by the YAML resolver and the XML
# reader. Leading zeros stay strings ("007" is an identifier, not seven).
BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
INT_RE = re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$")
FLOAT_RE = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*\.[0-9_]*)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


_NUMBER_FIRST = frozenset("-+.0123456789")


def typed_scalar(text: str) -> Any:
    """Type an unquoted scalar the way YAML 1.2's core schema does.

    Used for plain YAML scalars (through the resolver in ``pwe.base.yaml_reader``) and for XML
    text alike, so that ``300`` is the integer 300 in both forms. Unlike PyYAML's YAML
    1.1 default, ``yes``/``no``/``on``/``off`` stay strings: a parameter
    ``mode: [on, off]`` means two words, not two booleans.
    """
    t = text.strip()
    if t[:1] in _NUMBER_FIRST and (INT_RE.match(t) or FLOAT_RE.match(t)):
        problem = digits_problem(t)
        if problem:
            raise NumberError(problem)
    if BOOL_RE.match(t):
        return t.lower() == "true"
    if NULL_RE.match(t):
        return None
    if INT_RE.match(t):
        return int(t.replace("_", ""))
    if FLOAT_RE.match(t):
        low = t.lower()
        if low.endswith("inf"):
            return float("-inf") if low.startswith("-") else float("inf")
        if low.endswith("nan"):
            return float("nan")
        return float(t.replace("_", ""))
    return text


def value_text(value: Any) -> str:
    """The text a value has in a shell command and in ``PWE_PARAM_*``.

    Two members' values *agree* (the member-matching rule) when their texts agree, so a
    300 read from YAML matches a "300" read from a CSV file.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def text_problem(text: str) -> str | None:
    """What makes ``text`` unfit to reach a program (its arguments, its environment), or
    None: a NUL byte (which ends a C string: posix_spawn refuses it) or a lone surrogate
    (not text at all: it cannot be encoded). YAML's ``"\\0"`` and ``"\\ud800"`` escapes, a JSON
    line's ``"\\u0000"`` and a command line's undecodable bytes all make them."""
    if "\x00" in text:
        return "holds a NUL byte (\\0), which no program's argument or environment can carry; remove it"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (f"holds a lone surrogate (U+{ord(text[exc.start]):04X}), which is not text; write the "
                    "character itself")
    return None


def find_bad_text(tree: Any) -> tuple[tuple, str] | None:
    """The first key or string value in a raw tree that :func:`text_problem` refuses: its
    path in the tree and the problem; None when every one is fine."""
    stack: list[tuple[tuple, Any]] = [((), tree)]
    while stack:
        loc, node = stack.pop()
        if isinstance(node, str):
            problem = text_problem(node)
            if problem:
                return loc, problem
        elif isinstance(node, dict):
            for key, value in reversed(list(node.items())):
                if isinstance(key, str) and text_problem(key):
                    return loc + (key,), text_problem(key)  # type: ignore[return-value]
                stack.append((loc + (key,), value))
        elif isinstance(node, list):
            stack.extend((loc + (i,), v) for i, v in reversed(list(enumerate(node))))
    return None


def locate(tree: Any, path: Iterable[Any]) -> int | None:
    """The line of the deepest element of ``path`` that the tree knows a line for."""
    line = getattr(tree, "line", None)
    node = tree
    for key in path:
        if isinstance(node, LineDict) and key in node:
            line = node.key_lines.get(key) or getattr(node[key], "line", None) or line
            node = node[key]
        elif isinstance(node, LineList) and isinstance(key, int) and 0 <= key < len(node):
            known = node.item_lines[key] if key < len(node.item_lines) else None
            line = known or getattr(node[key], "line", None) or line
            node = node[key]
        else:
            break
    return line
