"""What pwe prints of values that members, users, other machines or run files made: shown as
text, never acted on by the terminal. Every control character (C0 but, in a body of lines,
newline and tab; DEL; C1, where a terminal also reads ESC sequences; and the bidirectional
overrides, which reorder what is shown) is written visibly as ``\\xNN`` or ``\\uNNNN``, so a
member's output can neither set the terminal's title, move its cursor, hide a line, nor
show one thing while being another. :func:`shown` is a value on a line of its own words,
:func:`inert` a body of lines (a member's log). The command line prints through them
(``pwe.cli.base.echo``; rich's markup: ``pwe.cli.base.markup``); the dashboard escapes for
HTML instead."""

from __future__ import annotations

import re

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_ANY = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")


def _visible(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def shown(value: object) -> str:
    """``value`` as text on one line: every control character written visibly."""
    return _ANY.sub(_visible, str(value))


def inert(text: str) -> str:
    """``text`` (lines) with every control character but newline and tab written visibly."""
    return _BUT_LINES.sub(_visible, text)
