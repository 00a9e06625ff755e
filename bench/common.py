"""What every benchmark script shares: where the source tree is, and the environment that
runs pwe from it the way an installed pwe runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pwe", "pilot", "hostinfo", "protocols")


def pwe_env(**extra: str) -> dict[str, str]:
    """os.environ with the source tree importable, its bytecode compiled first.

    An installed pwe has its bytecode compiled by pip. A source tree run under
    PYTHONDONTWRITEBYTECODE (set on this machine) would compile every module of the
    engine and the pilot on every start, which no user pays.
    """
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(ROOT / d) for d in PACKAGES)], check=True)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def timed_run(args: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    """Wall seconds of ``python -m pwe run ARGS`` (SystemExit with its stderr if it fails)."""
    import time

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", *map(str, args)], env=env, capture_output=True,
                          text=True, cwd=cwd)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"pwe run failed ({proc.returncode}): {proc.stderr}")
    return wall


def check_ends(run_dir: Path, members: int) -> None:
    """The run's journal holds exactly ``members`` ends, each with exit status 0."""
    import json

    ends = 0
    with open(run_dir / "journal.jsonl") as fh:
        for line in fh:
            r = json.loads(line)
            if r["e"] == "end":
                assert r["rc"] == 0, r
                ends += 1
    assert ends == members, (ends, members)


def pilot_span(run_dir: Path) -> float:
    """First member start to last member end, from the pilots' own event records."""
    import json

    times: dict[str, list[float]] = {"start": [], "end": []}
    for events in (run_dir / "pilots").glob("*/events.jsonl"):
        with open(events) as fh:
            for line in fh:
                ev = json.loads(line)
                if ev["k"] in times:
                    times[ev["k"]].append(ev["t"])
    return max(times["end"]) - min(times["start"])
