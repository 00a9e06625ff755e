"""A/B: two versions of pwe measured in one run, interleaved (A, B, B, A, ...): the one
A/B runner of bench/.

    python bench/ab.py --a 1ffc196 --b HEAD --measure help,status,w1,w2 --repeats 5
    python bench/ab.py --a /tmp/old --b . --measure w1 --repeats 8 [--where disk]
    python bench/ab.py --a OLD --a-python /opt/old/bin/python --b . --measure help

--a-directory / --b-directory VALUE: the node of w1, w1-echo and w2 says `directory: VALUE` on
that side (a pwe that knows the key: issue 34).

A side (--a, --b) is one of:
  a directory       a source tree of pwe, run from there (PYTHONPATH, its bytecode compiled
                    first) by --python (default: this interpreter, whose packages it uses)
  a git revision    of this repository: `git archive`d to bench/out/ab/SHA/src, its bytecode
                    compiled, with a venv of its own there (bench/out/ab/SHA/venv) that imports
                    that tree and borrows --python's packages (pwe's dependencies); kept and
                    reused by later runs (delete bench/out/ab to start afresh)
  any name, with --a-python / --b-python PATH: pwe as already installed for that interpreter

Measures (--measure, comma-separated; each a fresh process unless said):
  pass        python -c pass (the interpreter alone: the floor under every command)
  help        python -m pwe --help
  status      python -m pwe status RUN, RUN a finished 2-member run made by that side
              (or --a-run / --b-run)
  pilot       python -c "import pilot.agent" (what a pilot pays before its loop)
  first       seconds from the start of `pwe run --fresh` of a 2-member workflow (`true`, 2 cores) to
              its first member's start (the pilot's own record of it): a new file each round, so a
              first run of that file
  first-rerun the same, the same file every round (what a cache of its plan would serve)
  w1          W1: 5,000 x `true` on 2 slots, the whole `pwe run` command (--w1-members, --w1-slots)
  w1-echo     W1 with every member printing a line: 5,000 x `echo line` on 2 slots
  bare        the bare loop of bench/dispatch_local.py (a directory, stdout and stderr files, a
              posix_spawn of /bin/true, 2 at a time; no pwe) over --w1-members, in seconds: the
              machine's floor under w1 at that moment (the same for A and B: their spread is the noise)
  w2          W2: 400 x `sleep 0.05` on 8 slots, the whole `pwe run` command (--w2-members, --w2-slots)
  cpu-pilot   CPU seconds of an in-process PilotAgent given 3,000 x `true`
  cpu-engine  CPU seconds of an in-process Engine running 5,000 x `true` (its pilot not counted)
  replay      seconds of pwe.observe.results.load_state(RUN) in-process (--a-run and --b-run)
w1 and w2 check after each run that every member ended with exit status 0 (through that
side's own `pwe status --json`, outside the timed part). pass, help, status and pilot take
milliseconds and run --fast-repeats times (default 3 x --repeats).

Each measure runs its rounds before the next measure starts; within a round A and B take
turns, the order turned round every other round. The table gives each side's median, min,
max and spread ((max - min) / median), and B/A: the ratio of the medians and the median of
the rounds' own B/A ratios. The host this VM runs on drifts by a quarter within an hour:
only figures of one run are compared.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common import PACKAGES, ROOT, clock, interleave, parser, pilot_events, place, summary, timed, tree_env, write_json

MEASURES = ("pass", "help", "status", "pilot", "first", "first-rerun", "w1", "w1-echo", "bare", "w2", "cpu-pilot",
            "cpu-engine", "replay")
FAST = {"pass", "help", "status", "pilot", "first", "first-rerun"}
CACHE = ROOT / "bench" / "out" / "ab"

#: run in a side's interpreter: CPU seconds of its pilot or engine on a fixed piece of work
#: (what bench/bus_cpu.py measured: the bus's cost per process)
CPU_CHILD = r'''
import os, resource, shutil, sys
from pilot import wire
what = sys.argv[1]
base = f"/dev/shm/pwe-ab-cpu-{os.getpid()}"
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
try:
    if what == "pilot":
        from pilot.agent import PilotAgent
        d = f"{base}/pilots/p1"; os.makedirs(d)
        secret = b"ab" * 32
        open(f"{base}/secret", "wb").write(secret); os.chmod(f"{base}/secret", 0o600)
        tasks = [{"k": "task", "n": "m", "m": i, "a": 1, "cmd": "true", "cwd": f"{base}/members/m/{i // 1000}/{i}",
                  "env": {"PWE_MEMBER": str(i)}, "ranks": 1, "threads": 1, "wall": None} for i in range(3000)]
        tasks.append({"k": "stop"})
        key = wire.channel_key(secret, "p1", False) if hasattr(wire, "channel_key") else None
        open(f"{d}/tasks.jsonl", "wb").write(wire.encode(tasks, key) if key else wire.encode(tasks))
        p = PilotAgent(d, 2, idle_timeout=5)
        t = cpu(); p.run(); print(f"{cpu() - t:.4f}")
    else:
        from pwe.engine.loop import Engine
        os.makedirs(base)
        wf = f"{base}/ab.yaml"
        open(wf, "w").write('name: ab\nnodes:\n  m:\n    parameters: {i: {range: [0, 5000]}}\n    run: "true"\n')
        e = Engine.create(wf, cores=2, run_dir=f"{base}/r")
        t = cpu(); e.run(); print(f"{cpu() - t:.4f}")
finally:
    shutil.rmtree(base, ignore_errors=True)
'''

#: run in a side's interpreter: seconds of one replay of a run's journal (the one reader)
REPLAY_CHILD = r'''
import sys, time
from pathlib import Path
from pwe.observe.results import load_state
t = time.perf_counter(); load_state(Path(sys.argv[1])); print(f"{time.perf_counter() - t:.4f}")
'''


@dataclass
class Side:
    name: str  # A or B
    spec: str  # as given
    python: str  # the interpreter that runs this side's pwe
    env: dict[str, str]
    what: str  # how it is run, for the table's header
    kind: str  # installed, tree or revision
    run: Path | None = None  # a finished run of it, for status and replay
    unchecked: bool = False  # its pwe status gives no totals (said once)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def borrowed_site(python: str) -> str:
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()


def install(rev: str, python: str) -> tuple[str, str]:
    """(the interpreter, its description) of revision ``rev`` pip-installed in a venv of its
    own under bench/out/ab/SHA, made once and reused."""
    try:
        sha = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"--a/--b: {rev!r} is neither a directory nor a git revision of {ROOT}") from None
    home = CACHE / sha[:12]
    venv_py = home / "venv" / "bin" / "python"
    done = home / "installed"
    if not done.exists():
        shutil.rmtree(home, ignore_errors=True)
        (home / "src").mkdir(parents=True)
        t0 = clock()
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(home / "src")], input=archive, check=True)
        subprocess.run([python, "-m", "venv", "--without-pip", str(home / "venv")], check=True)
        # the venv sees the revision's tree first, then --python's packages (pwe's dependencies),
        # through plain path lines: the borrowed site's .pth files are not read, so no editable
        # pwe of its own shows; the tree's bytecode compiled, as pip would have
        site = subprocess.run([str(venv_py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        Path(site, "ab-revision.pth").write_text(f"{home / 'src'}\n{borrowed_site(python)}\n")
        subprocess.run([str(venv_py), "-m", "compileall", "-q", *(str(home / "src" / d) for d in PACKAGES)],
                       check=True)
        done.write_text(sha + "\n")
        print(f"({rev}: {sha[:12]} installed in {home} in {clock() - t0:.0f} s)", file=sys.stderr, flush=True)
    return str(venv_py), f"{rev} = {sha[:12]}, in its venv ({home.relative_to(ROOT)})"


def interpreter(option: str, text: str) -> str:
    """The absolute path of the interpreter an option names (a path, or a name on PATH);
    one line and exit 2 if there is none."""
    found = str(Path(text).absolute()) if os.sep in text else shutil.which(text)
    if not found or not os.access(found, os.X_OK):
        print(f"ab.py: {option}: {text!r} is not an interpreter here", file=sys.stderr)
        raise SystemExit(2)
    return found


def side(name: str, spec: str, python: str | None, default_python: str) -> Side:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if python:
        return Side(name, spec, python, env, f"{spec}: installed for {python}", "installed")
    if Path(spec).is_dir():
        root = Path(spec).resolve()
        if not (root / "pwe" / "__init__.py").exists():
            raise SystemExit(f"--a/--b: {spec} is a directory but not a source tree of pwe (no pwe/__init__.py)")
        return Side(name, spec, default_python, tree_env(root, default_python),
                    f"{spec}: source tree {root} on {default_python}", "tree")
    py, what = install(spec, default_python)
    return Side(name, spec, py, env, what, "revision")


def pwe_ok(s: Side, run_dir: Path, members: int, cwd: Path) -> None:
    """Every member of the run ended with exit status 0, by this side's own `pwe status
    --json`; a pwe too old to say (no JSON, no totals) is taken at its run's exit status,
    with a note once."""
    p = subprocess.run([s.python, "-m", "pwe", "status", str(run_dir), "--json"], env=s.env, cwd=cwd,
                       capture_output=True, text=True)
    try:
        done = json.loads(p.stdout)["totals"].get("done")
    except (ValueError, KeyError, TypeError, AttributeError):
        if not s.unchecked:
            s.unchecked = True
            print(f"({s.name}: its `pwe status --json` gives no totals: only the exit status of its runs is checked)",
                  file=sys.stderr)
        return
    if done != members:
        raise SystemExit(f"{s.name}: {run_dir}: {members} members should be done, {done} are: {p.stdout[:300]}")


def workflow(base: Path, name: str, members: int, cmd: str, directory: str | None = None) -> Path:
    wf = base / f"{name}.yaml"
    wf.write_text(f"name: {name}\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {members}]}}}}\n"
                  f"    run: {json.dumps(cmd)}\n" + (f"    directory: {directory}\n" if directory else ""))
    return wf


def child_figure(s: Side, code: str, *args: str) -> float:
    p = subprocess.run([s.python, "-c", code, *args], env=s.env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{s.name}: {p.stderr.strip()[-500:]}")
    return float(p.stdout.split()[-1])


def arm(measure: str, s: Side, base: Path, args) -> Callable[[int], float]:
    """The callable that takes one figure of ``measure`` for side ``s``."""
    py = s.python
    fixed = {"pass": [py, "-c", "pass"], "help": [py, "-m", "pwe", "--help"],
             "status": [py, "-m", "pwe", "status", str(s.run)], "pilot": [py, "-c", "import pilot.agent"]}
    if measure in fixed:
        return lambda k: timed(fixed[measure], s.env, base)
    if measure in ("first", "first-rerun"):
        def first(k: int) -> float:
            wf = workflow(base, f"{measure}-{s.name}" + (f"-{k}" if measure == "first" else ""), 2, "true")
            run_dir = base / f"{measure}-{s.name}-run-{k}"
            t0 = time.time()
            timed([py, "-m", "pwe", "run", "--fresh", wf, "--cores", "2", "--run-dir", run_dir], s.env, base)
            start = min(e["t"] for e in pilot_events(run_dir) if e["k"] == "start")
            shutil.rmtree(run_dir, ignore_errors=True)
            return start - t0
        return first
    if measure == "bare":
        from dispatch_local import bare_loop

        return lambda k: args.w1_members / bare_loop(base, args.w1_members, args.w1_slots)
    if measure in ("w1", "w1-echo", "w2"):
        n, slots, cmd = {"w1": (args.w1_members, args.w1_slots, "true"),
                         "w1-echo": (args.w1_members, args.w1_slots, "echo line"),
                         "w2": (args.w2_members, args.w2_slots, "sleep 0.05")}[measure]
        directory = args.a_directory if s.name == "A" else args.b_directory
        wf = workflow(base, f"{measure}-{s.name}", n, cmd, directory)

        def one(k: int) -> float:
            run_dir = base / f"{measure}-{s.name}-{k}"
            os.sync()  # what is dirty written back outside the timed part (bench/dispatch_local.py's settle)
            wall = timed([py, "-m", "pwe", "run", wf, "--cores", slots, "--run-dir", run_dir], s.env, base)
            pwe_ok(s, run_dir, n, base)
            shutil.rmtree(run_dir, ignore_errors=True)
            return wall
        return one
    if measure in ("cpu-pilot", "cpu-engine"):
        return lambda k: child_figure(s, CPU_CHILD, measure[4:])
    return lambda k: child_figure(s, REPLAY_CHILD, str(s.run))


def report(rows: list[tuple[str, dict[str, list[float]]]], args, sides: list[Side]) -> tuple[str, list[dict]]:
    unit = {"w1": "s", "w1-echo": "s", "bare": "s", "w2": "s", "cpu-pilot": "CPU s", "cpu-engine": "CPU s"}
    lines = [f"A: {sides[0].what}", f"B: {sides[1].what}", "",
             "| measure | side | runs | median | min | max | spread | B/A medians | B/A rounds (median) |",
             "|---|---|---|---|---|---|---|---|---|"]
    out: list[dict] = []
    notes: list[str] = []
    for measure, got in rows:
        a, b = summary(got["A"]), summary(got["B"])
        ratio = b["median"] / a["median"]
        rounds = statistics.median(y / x for x, y in zip(got["A"], got["B"]))
        for name, sm in (("A", a), ("B", b)):
            tail = f"| **{ratio:.3f}** | {rounds:.3f} |" if name == "B" else "| | |"
            lines.append(f"| {measure} ({unit.get(measure, 's')}) | {name} | {sm['n']} | {sm['median']:.4f} | "
                         f"{sm['min']:.4f} | {sm['max']:.4f} | {sm['spread']:.0%} {tail}")
        extra = ""
        if measure in ("w1", "w1-echo", "bare"):
            extra = (f"  {measure} members/s (medians): A {args.w1_members / a['median']:,.0f}, "
                     f"B {args.w1_members / b['median']:,.0f}")
        if measure == "w2":
            ideal = args.w2_members * 0.05 / args.w2_slots
            extra = f"  W2 efficiency (ideal {ideal:.2f} s / median): A {ideal / a['median']:.3f}, " \
                    f"B {ideal / b['median']:.3f}"
        if measure in ("help", "status", "first", "first-rerun") and any(m == "pass" for m, _ in rows):
            pa = {side: statistics.median(dict(rows)["pass"][side]) for side in ("A", "B")}
            extra = (f"{measure} x pass (medians, same run): A {a['median'] / pa['A']:.2f}, "
                     f"B {b['median'] / pa['B']:.2f}")
        if extra:
            out.append({"note": extra.strip()})
            notes.append(extra.strip())
        out.append({"measure": measure, "A": {**a, "runs": got["A"]}, "B": {**b, "runs": got["B"]},
                    "b_over_a": ratio, "b_over_a_rounds": rounds})
    return "\n".join(lines + ([""] + notes if notes else [])), out


def options():
    """ab.py's argument parser."""
    ap = parser(__doc__, repeat=5, where="tmpfs", json_out=True)
    ap.add_argument("--a", required=True, metavar="REV|DIR", help="side A: a git revision or a source tree")
    ap.add_argument("--b", required=True, metavar="REV|DIR", help="side B: a git revision or a source tree")
    ap.add_argument("--measure", default="help,status,w1,w2", help=f"comma-separated, of {','.join(MEASURES)}")
    ap.add_argument("--fast-repeats", type=int, help="rounds of pass, help, status, pilot (default 3 x --repeats)")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter that runs source trees and lends its packages to installed revisions")
    ap.add_argument("--a-python", help="side A is pwe as installed for this interpreter")
    ap.add_argument("--b-python", help="side B is pwe as installed for this interpreter")
    ap.add_argument("--a-run", type=Path, help="a finished run directory for A's status and replay")
    ap.add_argument("--b-run", type=Path, help="a finished run directory for B's status and replay")
    ap.add_argument("--a-directory", help="w1, w1-echo, w2: the node says `directory: VALUE` on side A (own | shared)")
    ap.add_argument("--b-directory", help="the same on side B")
    ap.add_argument("--w1-members", type=int, default=5000)
    ap.add_argument("--w1-slots", type=int, default=2)
    ap.add_argument("--w2-members", type=int, default=400)
    ap.add_argument("--w2-slots", type=int, default=8)
    return ap


def main() -> None:
    ap = options()
    args = ap.parse_args()
    measures = [m.strip() for m in args.measure.split(",") if m.strip()]
    if not measures or (bad := [m for m in measures if m not in MEASURES]):
        ap.error(f"--measure: {', '.join(bad) if measures else 'nothing'} not one of {','.join(MEASURES)}")
    if "replay" in measures and not (args.a_run and args.b_run):
        ap.error("--measure replay needs --a-run and --b-run (two finished run directories)")
    for r in (args.a_run, args.b_run):
        if r is not None and not (r / "journal.jsonl").exists():
            ap.error(f"--a-run/--b-run: {r} is not a run directory (no journal.jsonl)")
    t0 = clock()
    python = interpreter("--python", args.python)
    sides = [side(n, spec, own and interpreter(f"--{n.lower()}-python", own), python)
             for n, spec, own in (("A", args.a, args.a_python), ("B", args.b, args.b_python))]
    if sides[0].kind != sides[1].kind:
        print(f"(warning: A is a {sides[0].kind}, B a {sides[1].kind}: their start-up differs for that alone; "
              "compare two revisions, or two trees)", file=sys.stderr)
    base = Path(tempfile.mkdtemp(prefix="pwe-ab-", dir=place(args.where)))
    try:
        for s, given in zip(sides, (args.a_run, args.b_run)):
            s.run = given.resolve() if given else None
            if s.run is None and "status" in measures:  # a finished 2-member run made by that side
                wf = workflow(base, "two", 2, "true")
                s.run = base / f"two-{s.name}"
                timed([s.python, "-m", "pwe", "run", wf, "--cores", 2, "--run-dir", s.run], s.env, base)
        fast = args.fast_repeats or 3 * args.repeat
        rows = []
        for m in measures:
            rounds = fast if m in FAST else args.repeat
            print(f"({m}: {rounds} rounds of A and B ...)", file=sys.stderr, flush=True)
            rows.append((m, interleave({s.name: arm(m, s, base, args) for s in sides}, rounds)))
        text, figures = report(rows, args, sides)
        print(text)
        print(f"\n(load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"whole comparison {clock() - t0:.0f} s)")
        write_json(args.json, {"a": sides[0].what, "b": sides[1].what, "measures": figures,
                               "loadavg": os.getloadavg()})
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
