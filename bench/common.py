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


def journal_records(run_dir: Path, whole: bool = True) -> list[dict]:
    """A run's journal as the records its lines stand for (pwe.runstate.journal.unpack: one assign
    and one end a member). ``whole=False``: of a journal being written, the lines that are
    whole so far."""
    import json

    sys.path.insert(0, str(ROOT))
    from pwe.runstate.journal import unpack

    out: list[dict] = []
    with open(run_dir / "journal.jsonl", "rb") as fh:
        for line in fh:
            try:
                out += unpack(json.loads(line))
            except ValueError:
                if whole:
                    raise
    return out


def pilot_events(run_dir: Path) -> list[dict]:
    """Every message of every pilot of a run, from their own files, plain or sealed
    (compressed once a pilot left: pilot.transport.open_spool)."""
    import json

    sys.path.insert(0, str(ROOT))
    from pilot.transport import EVENTS, open_spool

    out: list[dict] = []
    for d in sorted((run_dir / "pilots").iterdir()):
        try:
            with open_spool(str(d / EVENTS)) as fh:
                out += [json.loads(line) for line in fh if line.strip()]
        except FileNotFoundError:
            pass
    return out


def check_ends(run_dir: Path, members: int) -> None:
    """The run's journal holds exactly ``members`` ends, each with exit status 0."""
    ends = [r for r in journal_records(run_dir) if r["e"] == "end"]
    assert all(r["rc"] == 0 for r in ends), next(r for r in ends if r["rc"])
    assert len(ends) == members, (len(ends), members)


def pilot_span(run_dir: Path) -> float:
    """First member start to last member end, from the pilots' own event records."""
    times: dict[str, list[float]] = {"start": [], "end": []}
    for ev in pilot_events(run_dir):
        if ev["k"] in times:
            times[ev["k"]].append(ev["t"])
    return max(times["end"]) - min(times["start"])
