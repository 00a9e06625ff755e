"""What every benchmark script shares: where the source tree is, the environment that runs
pwe from it the way an installed pwe runs, the options every script takes (`parser`), the
one timer (`clock`, `timed`, `timed_run`), the one A/B runner (`interleave`, `summary`)
and the readers of a run's records."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pwe", "pilot", "hostinfo", "protocols")

#: the one clock of every figure (monotonic, the best resolution the platform has)
clock = time.perf_counter

#: where a run directory goes, by the name --where takes
PLACES = {"tmpfs": Path("/dev/shm"), "disk": ROOT / "bench" / "out"}


# ----------------------------------------------------------------------------- options
def parser(doc: str | None = None, *, repeat: int | None = 3, members: int | None = None,
           cores: int | None = None, where: str | None = None, both: bool = False,
           json_out: bool = False) -> argparse.ArgumentParser:
    """The script's argument parser with the options benchmarks share, each only where its
    default is given: ``--repeat N`` (also spelt ``--repeats``, ``--runs``: the names older
    commands in BENCHMARKS.md use), ``--members N``, ``--cores N``, ``--where
    tmpfs|disk[|both]|DIR`` (see `place`) and ``--json PATH`` (the figures as JSON too:
    `write_json`). The description is the first paragraph of ``doc`` (the script's
    docstring)."""
    ap = argparse.ArgumentParser(description=(doc or "").strip().split("\n\n")[0] or None,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    if repeat is not None:
        ap.add_argument("--repeat", "--repeats", "--runs", dest="repeat", type=positive, default=repeat,
                        metavar="N", help=f"runs of each case; the figure is their median (default {repeat})")
    if members is not None:
        ap.add_argument("--members", type=positive, default=members, help=f"members of a run (default {members})")
    if cores is not None:
        ap.add_argument("--cores", type=positive, default=cores, help=f"slots of a run (default {cores})")
    if where is not None:
        names = "tmpfs|disk|both" if both else "tmpfs|disk"
        ap.add_argument("--where", type=where_type(both), default=where, metavar=names.upper() + "|DIR",
                        help=f"where run directories go: tmpfs (/dev/shm), disk (bench/out), "
                             f"{'both (one row each), ' if both else ''}or a directory (default {where})")
    if json_out:
        ap.add_argument("--json", "--out", dest="json", type=Path, metavar="PATH",
                        help="write the figures to PATH as JSON too")
    return ap


def positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return n


def where_type(both: bool) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text in PLACES or (both and text == "both") or Path(text).is_dir():
            return text
        raise argparse.ArgumentTypeError(f"{text!r} is neither {'tmpfs, disk nor both' if both else 'tmpfs nor disk'}"
                                         " nor an existing directory")
    return check


def place(where: str) -> Path:
    """The directory --where names (made if it is bench/out)."""
    d = PLACES.get(where, Path(where))
    d.mkdir(parents=True, exist_ok=True)
    return d.resolve()


def write_json(path: Path | None, figures: object) -> None:
    """``figures`` to ``path`` (the --json option) if one was given."""
    if path is not None:
        Path(path).write_text(json.dumps(figures, indent=1, default=str) + "\n")
        print(f"(figures written to {path})", file=sys.stderr)


# ----------------------------------------------------------------------------- the timer
def measure(argv: list, env: dict[str, str] | None = None, cwd: Path | None = None, stdin: bytes | None = None,
            ok: tuple[int, ...] = (0,), out: bool = False) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in KiB, its stdout if ``out`` else "") of one process ARGV,
    reaped with wait4 so that the RSS is its own; SystemExit with the end of its stderr if
    its exit status is not in ``ok``."""
    import tempfile

    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as given:
        given.write(stdin or b"")
        given.seek(0)
        t0 = clock()
        proc = subprocess.Popen([str(a) for a in argv], env=env, cwd=cwd, stdin=given if stdin is not None else None,
                                stdout=subprocess.PIPE if out else subprocess.DEVNULL, stderr=err)
        text = proc.stdout.read().decode(errors="replace") if out else ""
        _, status, usage = os.wait4(proc.pid, 0)
        took = clock() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.stdout:
            proc.stdout.close()
        if proc.returncode not in ok:
            err.seek(0)
            raise SystemExit(f"{' '.join(map(str, argv[:4]))} ...: exit {proc.returncode}: "
                             f"{err.read().decode(errors='replace')[-500:]}")
    return took, usage.ru_maxrss, text


def timed(argv: list, env: dict[str, str] | None = None, cwd: Path | None = None, stdin: bytes | None = None,
          ok: tuple[int, ...] = (0,)) -> float:
    """Wall seconds of one process ARGV (`measure`'s first figure)."""
    return measure(argv, env, cwd, stdin, ok)[0]


def timed_run(args: list, env: dict[str, str], cwd: Path | None = None, python: str | None = None) -> float:
    """Wall seconds of ``python -m pwe run --fresh ARGS`` (SystemExit with its stderr if it
    fails). ``--fresh``: every member runs, as in a first run; without it a bench that runs
    a workflow again under the same runs root would time a rerun that reuses its members
    (pwe/planning/reuse.py)."""
    return timed([python or sys.executable, "-m", "pwe", "run", "--fresh", *args], env, cwd)


def median_of(repeat: int, argv: list, env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    """The median wall seconds of ``repeat`` runs of ARGV."""
    return statistics.median(timed(argv, env, cwd) for _ in range(repeat))


def pwe_env(**extra: str) -> dict[str, str]:
    """os.environ with the source tree importable, its bytecode compiled first.

    An installed pwe has its bytecode compiled by pip. A source tree run under
    PYTHONDONTWRITEBYTECODE (set on this machine) would compile every module of the
    engine and the pilot on every start, which no user pays.
    """
    return tree_env(ROOT, **extra)


def tree_env(root: Path, python: str | None = None, **extra: str) -> dict[str, str]:
    """`pwe_env` for the source tree at ``root`` (another checkout of pwe)."""
    root = Path(root).resolve()
    subprocess.run([python or sys.executable, "-m", "compileall", "-q", *(str(root / d) for d in PACKAGES)],
                   check=True)
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


# ----------------------------------------------------------------------------- A/B
def interleave(arms: dict[str, Callable[[int], float]], repeat: int) -> dict[str, list[float]]:
    """Each arm's figures over ``repeat`` rounds, the arms taking turns within a round and
    the order turned round every other round (A B, B A, A B, ...): the host's drift, which
    on this VM is a quarter within an hour, then falls on every arm alike. An arm is called
    with the round's number and returns its figure."""
    got: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    for k in range(repeat):
        for name in names if k % 2 == 0 else reversed(names):
            got[name].append(arms[name](k))
    return got


def summary(values: list[float]) -> dict[str, float]:
    """median, min, max and spread ((max - min) / median) of one arm's figures."""
    med = statistics.median(values)
    return {"median": med, "min": min(values), "max": max(values),
            "spread": (max(values) - min(values)) / med if med else 0.0, "n": len(values)}


# ----------------------------------------------------------------------------- records
def journal_records(run_dir: Path, whole: bool = True) -> list[dict]:
    """A run's journal as the records its lines stand for (pwe.runstate.journal.unpack: one assign
    and one end a member). ``whole=False``: of a journal being written, the lines that are
    whole so far."""
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


# ----------------------------------------------------------------------------- a busy machine
def _spin(stop, parent: int) -> None:
    """A CPU hog: a busy loop until told to stop, or its parent is gone."""
    n = 0
    while not stop.is_set() and os.getppid() == parent:
        for _ in range(100_000):
            n += 1


class Hogs:
    """``with Hogs(n):`` n busy loops (one a core) beside what runs inside: the machine CI
    shares is busy like this (stress_kills.py, exactly_once_slots.py, soak.py)."""

    def __init__(self, n: int):
        import multiprocessing

        self.stop = multiprocessing.Event()
        self.procs = [multiprocessing.Process(target=_spin, args=(self.stop, os.getpid()), daemon=True)
                      for _ in range(n)]

    def __enter__(self) -> "Hogs":
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(5)
