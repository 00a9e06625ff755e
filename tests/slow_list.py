"""Write tests/slow.txt from a measured run: the tests (by function: every case of a
parametrized test together) whose setup, call and teardown took more than ``--over`` seconds
in all. tests/conftest.py marks them ``slow``; ``bash tests/run.sh --quick`` leaves them out.

    .venv/bin/python -m pytest -m "not real" -n auto --durations=0 -p no:cacheprovider tests > durations.txt
    python tests/slow_list.py durations.txt [--over 2]

Measure on the machine the quick tier must fit (2 cores here), quiet, and run this again when
the quick tier grows past its 3 minutes (docs/development.md)."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

SLOW = Path(__file__).resolve().parent / "slow.txt"
HAND = "# By hand (kept when this list is written again):"
LINE = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(\S.*)$")


def totals(text: str) -> Counter:
    """Seconds by test function (node id without its parameters) from pytest's --durations lines."""
    out: Counter = Counter()
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m:
            out[m.group(2).split("[", 1)[0]] += float(m.group(1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("durations", type=Path, help="the output of a pytest run with --durations=0")
    ap.add_argument("--over", type=float, default=2.0, help="seconds a test function may take and not be slow")
    a = ap.parse_args(argv)
    seconds = totals(a.durations.read_text())
    if not seconds:
        ap.error(f"{a.durations}: no --durations=0 lines in it")
    # (and what is slow whatever it measured: written by hand below the marker line, kept)
    kept = SLOW.read_text().split(HAND, 1)[1] if SLOW.exists() and HAND in SLOW.read_text() else "\n"
    slow = sorted(k for k, v in seconds.items() if v > a.over)
    head = (f"# Tests slower than {a.over:g} s (setup, call and teardown, every case together), written by\n"
            f"# tests/slow_list.py from a measured run: {len(slow)} of the {len(seconds)} measured.\n")
    SLOW.write_text(head + "".join(f"{k}\n" for k in slow) + HAND + kept)
    print(f"{SLOW}: {len(slow)} slow of {len(seconds)}; the rest take {sum(v for v in seconds.values() if v <= a.over):.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
