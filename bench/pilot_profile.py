"""Where a pilot's time goes: `pwe run` of N x `true` on this machine, its pilot under cProfile.

    python bench/pilot_profile.py [--members 5000] [--cores 2] [--where disk|tmpfs] [--top 15] [--save F]

The pilot is profiled from outside: the run uses a copy of the source tree whose
`pilot/__main__.py` runs the pilot under cProfile and writes its figures when it exits;
nothing in pwe itself knows. Printed: the wall time of the run, the pilot's own time
by what it did (spawning members, making and tidying their directories, reaping,
waiting), then its top functions by time of their own.
"""

from __future__ import annotations

import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PACKAGES, ROOT, parser, place, pwe_env, timed_run

#: what the copy's pilot/__main__.py runs instead of main() (pilots start with python -S:
#: no sitecustomize reaches them)
PROFILED = '''if __name__ == "__main__":
    import cProfile, os
    _prof = cProfile.Profile()
    try:
        _prof.runcall(await_start if sys.argv[1:] == ["--await-start"] else main)
    finally:
        _prof.dump_stats(os.path.join(os.environ["PWE_BENCH_PROFILE"], f"pilot-{os.getpid()}.prof"))
'''


#: the pilot's work by kind: (what, the functions whose own time counts)
KINDS = [
    ("spawning members (posix_spawn)", ("posix_spawn",)),
    ("making member directories (mkdir)", ("mkdir",)),
    ("tidying ended members' directories (unlink, rmdir)", ("rmdir", "unlink")),
    ("reaping (wait4)", ("wait4",)),
    ("waiting for a member to end or a task (epoll)", ("poll",)),
]


def main() -> None:
    ap = parser(__doc__, repeat=None, members=5000, cores=2, where="disk")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--save", type=Path, help="keep the pilot's profile here (for pstats)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pwe-prof-", dir=place(args.where)))
    try:
        src, profs = base / "src", base / "prof"
        profs.mkdir()
        for pkg in PACKAGES:
            shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        main_py = src / "pilot" / "__main__.py"
        text = main_py.read_text()
        tail = text.index('if __name__ == "__main__":')
        main_py.write_text(text[:tail] + PROFILED)
        wf = base / "wf.yaml"
        wf.write_text(f'name: prof\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {args.members}]}}}}\n'
                      '    run: "true"\n')
        env = pwe_env(PWE_BENCH_PROFILE=str(profs))
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True)
        env["PYTHONPATH"] = str(src)
        wall = timed_run([wf, "--cores", args.cores, "--run-dir", base / "run"], env, base)
        deadline = time.time() + 30  # (pwe run returns once the pilot is told to stop, not once it left)
        while not (files := sorted(profs.glob("pilot-*.prof"))) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # (the profile being written)
        if len(files) != 1:
            logs = [p.read_text()[-2000:] for p in (base / "run" / "pilots").glob("*/pilot.log")]
            raise SystemExit(f"expected one pilot profile, found {len(files)}; the pilots said: {logs}")
        stats = pstats.Stats(str(files[0]))
        total = stats.total_tt
        own: dict[str, float] = {}
        for (_, _, name), (_, _, tt, _, _) in stats.stats.items():  # type: ignore[attr-defined]
            own[name] = own.get(name, 0.0) + tt
        print(f"{args.members} x true on {args.cores} slots ({args.where}): pwe run {wall:.2f} s "
              f"({args.members / wall:.0f}/s); the pilot's profiled time {total:.2f} s")
        for what, names in KINDS:
            # (a built-in is "<built-in method posix.NAME>", a method "<method 'NAME' of ...>")
            t = sum(v for k, v in own.items() if any(f"posix.{n}" in k or f"'{n}' of" in k for n in names))
            print(f"  {t:6.3f} s  {100 * t / total:4.1f}%  {what}")
        print()
        stats.sort_stats("tottime").print_stats(args.top)
        if args.save:
            shutil.copyfile(files[0], args.save)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
