"""Benchmark: file-system metadata operations per member, counted with strace.

    nice -n 5 flock /tmp/pwe-bench.lock python bench/metadata_ops.py [--tree DIR] [--members 200]
        [--payload true|echo|both] [--directory own|shared] [--where disk|tmpfs|DIR] [--json PATH]

A whole `pwe run` of N members on 2 slots, then of 2N, each under `strace -f` (the engine,
its pilot, the pilot's members: every process). Each system call that names a path or
changes the tree is attributed to who made it:

  pilot    the pilot process, and each member's process *before* its exec succeeds (what
           posix_spawn's file actions do in the child: the stdout/stderr opens are pwe's work)
  engine   every other process of pwe (the `pwe run` process, the warm pilot interpreter
           before it becomes the pilot, the guardian)
  member   a member's program after its exec (its own doing: not pwe's; shown for scale)

and to where its path lies: `run` (under the run directory: the file system that is
Lustre or GPFS on a cluster, where each one is a round trip to the metadata server),
`above` (the run directory itself or one of its parents: the same file system, but
directories every client holds in its cache) or `else` (node-local: /tmp, /proc, the
interpreter's files). A relative path is resolved
against the process's working directory (followed through chdir). The figure per member is
(count at 2N - count at N) / N: what start-up, planning and the pilot's own start cost once
falls out of the difference.

Classes: mkdir, rmdir, unlink, open (open/openat/creat), stat (stat, lstat, newfstatat,
statx, access, faccessat), rename, chdir, execve; fstat (no path: on an open file) apart.

--tree runs another source tree of pwe (e.g. a detached worktree of main); --directory
writes `directory: VALUE` into the node (a pwe that knows the key).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from common import ROOT, parser, place, tree_env, write_json

CLASSES = {
    "mkdir": "mkdir", "mkdirat": "mkdir", "rmdir": "rmdir", "unlink": "unlink", "unlinkat": "unlink",
    "open": "open", "openat": "open", "openat2": "open", "creat": "open",
    "stat": "stat", "lstat": "stat", "newfstatat": "stat", "statx": "stat", "access": "stat",
    "faccessat": "stat", "faccessat2": "stat", "rename": "rename", "renameat": "rename", "renameat2": "rename",
    "chdir": "chdir", "execve": "execve", "fstat": "fstat",
}
ORDER = ["mkdir", "rmdir", "unlink", "open", "stat", "rename", "chdir", "execve", "fstat"]
TRACED = ",".join(sorted(set(CLASSES) | {"clone", "clone3", "vfork", "fork"}))

_LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()(.*)$")
_RET = re.compile(r"\)\s+=\s+(-?\d+)")
_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


def workflow(d: Path, members: int, payload: str, directory: str | None) -> Path:
    p = d / f"meta-{payload}-{members}.yaml"
    cmd = "true" if payload == "true" else "echo line"
    extra = f"    directory: {directory}\n" if directory else ""
    p.write_text(f"name: meta\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {members}]}}}}\n"
                 f"    run: {json.dumps(cmd)}\n{extra}")
    return p


def trace(python: str, env: dict[str, str], base: Path, members: int, payload: str,
          directory: str | None) -> tuple[Path, Path]:
    """(the trace file, the run directory) of one traced `pwe run`."""
    wf = workflow(base, members, payload, directory)
    # (a runs root of its own: the run of 2N members would reuse the N of the run before it
    # under the same root, pwe/planning/reuse.py, and the difference would not be N members)
    run_dir = base / f"root-{payload}-{members}" / "run"
    out = base / f"trace-{payload}-{members}.txt"
    os.sync()
    p = subprocess.run(["strace", "-f", "-qq", "-s", "4096", "-e", f"trace={TRACED}", "-o", str(out),
                        python, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir", str(run_dir)],
                       env=env, cwd=base, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"pwe run ({members} x {payload}) exit {p.returncode}: {p.stderr[-800:]}")
    return out, run_dir


def tree(lines: list[str]) -> tuple[dict[int, int], int]:
    """(child pid -> parent pid, the pilot's pid: the process that started the most)."""
    parent: dict[int, int] = {}
    children: Counter = Counter()
    for line in lines:
        m = _LINE.match(line)
        if m and (m.group(2) or m.group(3)) in ("clone", "clone3", "vfork", "fork"):
            r = _RET.search(line)
            if r and int(r.group(1)) > 0:
                parent[int(r.group(1))] = int(m.group(1))
                children[int(m.group(1))] += 1
    return parent, children.most_common(1)[0][0]


def where_of(cls: str, path: str, run: str) -> str:
    """run, above (the run directory or a parent of it), else, or fd (fstat)."""
    if cls == "fstat":
        return "fd"
    if path == run or path.startswith(run + "/"):
        return "run"
    if path and run.startswith(path):
        return "above"  # (the run directory's parents: the same file system on a cluster)
    return "else"


def count(trace_file: Path, run_dir: Path, root_cwd: Path) -> Counter:
    """(role, where, class) -> calls in one trace."""
    lines = trace_file.read_text(errors="replace").splitlines()
    parent, pilot = tree(lines)
    cwd: dict[int, str] = {}
    execd: set[int] = set()
    run = str(run_dir.resolve())
    got: Counter = Counter()
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        if m.group(2):  # (a call is counted where it begins, not where it resumes)
            r = _RET.search(line)
            if m.group(2) == "execve" and r and int(r.group(1)) == 0 and parent.get(int(m.group(1))) == pilot:
                execd.add(int(m.group(1)))
            continue
        pid, call, rest = int(m.group(1)), m.group(3), m.group(4)
        if pid not in cwd:
            cwd[pid] = cwd.get(parent.get(pid, -1), str(root_cwd))
        cls = CLASSES.get(call)
        if cls is None:
            continue
        r = _RET.search(rest)
        ok = r is not None and int(r.group(1)) >= 0
        s = _STR.search(rest)
        path = os.path.normpath(os.path.join(cwd[pid], s.group(1))) if s and s.group(1) else ""
        if call == "chdir" and ok:
            cwd[pid] = path
        if pid == pilot or (parent.get(pid) == pilot and pid not in execd):
            role = "pilot"
        else:
            role = "member" if pid in execd else "engine"
        got[(role, where_of(cls, path, run), cls)] += 1
        if call == "execve" and ok and parent.get(pid) == pilot:
            execd.add(pid)
    return got


def per_member(small: Counter, big: Counter, n: int) -> dict[str, dict[str, float]]:
    """role/where -> class -> calls per member, from runs of n and 2n members."""
    out: dict[str, dict[str, float]] = {}
    for key in set(small) | set(big):
        role, where, cls = key
        out.setdefault(f"{role}/{where}", {})[cls] = round((big[key] - small[key]) / n, 2)
    return out


def table(payload: str, figures: dict[str, dict[str, float]]) -> str:
    rows = [f"payload {payload!r}: calls per member", "",
            "| who / where | " + " | ".join(ORDER) + " | total (no fstat) |",
            "|---|" + "---|" * (len(ORDER) + 1)]
    for key in sorted(figures, key=lambda k: (["pilot", "engine", "member"].index(k.split("/")[0]), k)):
        vals = figures[key]
        total = sum(v for c, v in vals.items() if c != "fstat")
        if not any(abs(v) >= 0.01 for v in vals.values()):
            continue
        rows.append(f"| {key} | " + " | ".join(f"{vals.get(c, 0):.2f}" for c in ORDER) + f" | {total:.2f} |")
    return "\n".join(rows)


def main() -> None:
    ap = parser(__doc__, repeat=None, members=200, where="disk", json_out=True)
    ap.add_argument("--tree", type=Path, default=ROOT, help="the source tree of pwe to measure (default: this one)")
    ap.add_argument("--payload", choices=["true", "echo", "both"], default="both")
    ap.add_argument("--directory", help="write `directory: VALUE` into the node (own | shared)")
    ap.add_argument("--keep", action="store_true", help="keep the traces and run directories (their place is printed)")
    args = ap.parse_args()
    if shutil.which("strace") is None:
        raise SystemExit("metadata_ops.py: strace is not installed here")
    if not (args.tree / "pwe" / "__init__.py").exists():
        raise SystemExit(f"metadata_ops.py: --tree {args.tree} is not a source tree of pwe")
    env = tree_env(args.tree)
    base = Path(tempfile.mkdtemp(prefix="pwe-meta-", dir=place(args.where)))
    payloads = ["true", "echo"] if args.payload == "both" else [args.payload]
    result: dict = {"tree": str(args.tree.resolve()), "members": args.members, "directory": args.directory}
    try:
        for payload in payloads:
            counts = []
            for n in (args.members, 2 * args.members):
                tr, rd = trace(sys.executable, env, base, n, payload, args.directory)
                counts.append(count(tr, rd, base))
                files = sum(len(f) + len(d) for _, d, f in os.walk(rd / "members")) if (rd / "members").exists() else 0
                result.setdefault("members_entries_left", {})[f"{payload}-{n}"] = files
            figs = per_member(counts[0], counts[1], args.members)
            result[payload] = figs
            print(table(payload, figs))
            print(f"(entries left under members/ after {args.members} and {2 * args.members} members: "
                  f"{result['members_entries_left'][f'{payload}-{args.members}']}, "
                  f"{result['members_entries_left'][f'{payload}-{2 * args.members}']})\n", flush=True)
        print(f"tree: {result['tree']}; directory: {args.directory or '(unset)'}; "
              f"N = {args.members} and {2 * args.members}")
        write_json(args.json, result)
    finally:
        if args.keep:
            print(f"(kept: {base})")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
