"""Benchmark: staging throughput to an ssh host (protocols/staging.py) against bare SFTP and scp.

    bash tests/cluster/up.sh    # once, if `ssh -F /var/tmp/pwe-ssh/ssh_config pwe-n1 true` fails
    python bench/staging.py [--repeat 3] [--quick] [--sets big,many] [--json FILE] [--profile]
    python bench/staging.py --parts           # where a put's and a get's time goes
    python bench/staging.py --what-if         # the same with one change at a time

Two file sets, made here in a fresh temporary directory: `big`, one 256 MiB random file, and
`many`, 2,000 random files of 16 KiB (a run's inputs). Each is sent to pwe-n1 into a fresh
directory under /var/tmp/pwe-bench-staging/ (removed at the end, with the local copies):
  pwe put           Stager.put: both sides hashed, sent to .part, checked, renamed
  pwe put again     Stager.put of the same set once more: nothing to send, the check alone
  pwe put resumed   every file's .part left at half its size (the file itself removed),
                    then Stager.put: the bytes it sent are reported
  pwe get           Stager.get of what `pwe put` sent into a fresh local directory
  paramiko put/get  bare SFTP over the same one connection (SFTPClient.put with
                    confirm=False, SFTPClient.get): no hashing, no .part, no checks
  scp put/get       OpenSSH's scp, one command for the whole set (`scp -r DIR` for `many`);
                    its figure includes opening its connection (the `ssh true` row says
                    what that costs); pwe and paramiko reuse one connection opened before
  rsync             over ssh, when the binary is here (and on the node)
Each figure is the median of --repeat runs, the ways interleaved (run k of every way, then
run k+1). Before each timed step the script syncs the disks, so writeback of the last step
is not billed to the next. The same local files are read each time: they are in the page
cache, so reading them costs no disk I/O (nor does the node's side, which writes into the
page cache too).

"client CPU" is this process's CPU (all its threads; for scp, its ssh child's) during the
step; "all CPU" is every core's busy time on the machine (/proc/stat), which includes the
node's sshd and sftp-server and the sha256sum of the checks: the nodes are network
namespaces on this machine. With 2 cores, "all CPU" close to 2 x wall means CPU-bound.

--profile: then one Stager.put and one Stager.get of each set under cProfile (the caller's
thread and paramiko's transport thread, which reads and decrypts every packet), top functions.
--parts (instead of the comparison): one put and one get of each set with a timer around each
of the staging's parts (the checks, making directories, sending, chmod, rename, hashing here).
--what-if (instead of the comparison): put and get of each set with one change at a time
patched in at run time (protocols/staging.py itself is not changed): TCP_NODELAY on the
connection's socket; each directory made once rather than once per file; the checks as one
`stat` and one `sha256sum` per batch rather than two processes per file; the hashes by one
`openssl dgst -sha256` per batch (SHA-NI where the CPU has it); all four.
"""

from __future__ import annotations

import cProfile
import functools
import io
import os
import pstats
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from common import ROOT, clock, parser, write_json

sys.path.insert(0, str(ROOT))

from protocols.ssh import SshRunner, sftp_makedirs  # noqa: E402
from protocols.staging import Stager, sha256_of  # noqa: E402

SSH_CONFIG = "/var/tmp/pwe-ssh/ssh_config"
REMOTE_ROOT = "/var/tmp/pwe-bench-staging"
MB = 1 << 20
# each file's .part made from the first half of the file, the file removed (untimed setup)
_HALF_PARTS = 'for f; do head -c $(( $(wc -c < "$f") / 2 )) "$f" > "$f.part" && rm -f -- "$f"; done'


def busy_cpu() -> float:
    """Seconds all cores of the machine have been busy (user, nice, system, irq, softirq)."""
    with open("/proc/stat") as fh:
        fields = fh.readline().split()[1:]
    ticks = [int(x) for x in fields]
    return (sum(ticks[:3]) + ticks[5] + ticks[6]) / os.sysconf("SC_CLK_TCK")


def client_cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, float, float, Any]:
    """(wall, client CPU, all CPU, what fn(*args) returned), disks synced first."""
    os.sync()
    c0, a0, t0 = client_cpu(), busy_cpu(), clock()
    out = fn(*args)
    wall = clock() - t0
    return wall, client_cpu() - c0, busy_cpu() - a0, out


def make_set(d: Path, kind: str, big_mb: int, files: int, file_kb: int) -> list[Path]:
    d.mkdir(parents=True)
    if kind == "big":
        path = d / "big.dat"
        with open(path, "wb") as fh:
            for _ in range(big_mb):
                fh.write(os.urandom(MB))
        return [path]
    out = []
    for i in range(files):
        path = d / f"in-{i:05d}.dat"
        path.write_bytes(os.urandom(file_kb * 1024))
        out.append(path)
    return out


def local_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def scp(args: list[str]) -> None:
    proc = subprocess.run(["scp", "-F", SSH_CONFIG, "-q", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"scp {' '.join(args)} failed: {proc.stderr.strip()}")


def rsync(src: str, dest: str) -> None:
    proc = subprocess.run(["rsync", "-a", "-e", f"ssh -F {SSH_CONFIG}", src, dest], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"rsync {src} {dest} failed: {proc.stderr.strip()}")


class Bench:
    def __init__(self, host: str, sets: dict[str, list[Path]], work: Path, remote: str):
        self.host, self.sets, self.work, self.remote = host, sets, work, remote
        self.runner = SshRunner(f"ssh://{host}", ssh_config=SSH_CONFIG)
        self.runner.run(["mkdir", "-p", remote])
        self.sftp = self.runner.sftp()  # (connection and SFTP session opened before any timing)
        self.stager = Stager(self.runner)
        self.rows: dict[tuple[str, str], list[dict]] = {}
        have = shutil.which("rsync") is not None
        there = self.runner.run(["sh", "-c", "command -v rsync"]).status == 0
        self.rsync = have and there
        self.rsync_note = "" if self.rsync else (
            f"rsync: absent ({'here' if not have else ''}{' and ' if not have and not there else ''}"
            f"{'on ' + host if not there else ''}); not measured")

    def record(self, set_name: str, way: str, nbytes: int, nfiles: int, step: tuple, sent: int | None = None) -> None:
        wall, ccpu, acpu, _ = step
        self.rows.setdefault((set_name, way), []).append(
            {"wall": wall, "client_cpu": ccpu, "all_cpu": acpu, "bytes": nbytes, "files": nfiles, "sent": sent})

    def run_once(self, k: int) -> None:
        for name, files in self.sets.items():
            src = files[0].parent
            nbytes = sum(p.stat().st_size for p in files)
            n = len(files)
            base = f"{self.remote}/{name}-{k}"
            local = self.work / f"back-{name}-{k}"

            # pwe: put, put again, get, put resumed
            dest = f"{base}/pwe"
            pairs = [(p, f"{dest}/{p.name}") for p in files]
            step = timed(self.stager.put, pairs)
            assert all(not m.skipped and m.sent == m.size for m in step[3])
            self.record(name, "pwe put", nbytes, n, step, sum(m.sent for m in step[3]))
            step = timed(self.stager.put, pairs)
            assert all(m.skipped and m.sent == 0 for m in step[3])
            self.record(name, "pwe put again (all there)", nbytes, n, step, 0)
            back = [(r, p.name) for p, r in pairs]
            step = timed(self.stager.get, local / "pwe", back)
            assert local_bytes(local / "pwe") == nbytes
            self.record(name, "pwe get", nbytes, n, step, sum(m.sent for m in step[3]))
            for i in range(0, n, 256):  # (the runner's command is one argv string: at most 128 KiB)
                res = self.runner.run(["sh", "-c", _HALF_PARTS, "sh", *(r for _, r in pairs[i:i + 256])],
                                      timeout=600)
                assert res.status == 0, res.stderr
            step = timed(self.stager.put, pairs)
            assert all(m.resumed_at == m.size // 2 for m in step[3]), step[3][:3]
            self.record(name, "pwe put resumed (.part at half)", nbytes, n, step, sum(m.sent for m in step[3]))

            # bare paramiko over the same connection
            dest = f"{base}/paramiko"
            step = timed(self._paramiko_put, files, dest)
            self.record(name, "paramiko put (bare SFTP)", nbytes, n, step, nbytes)
            step = timed(self._paramiko_get, [f"{dest}/{p.name}" for p in files], local / "paramiko")
            assert local_bytes(local / "paramiko") == nbytes
            self.record(name, "paramiko get (bare SFTP)", nbytes, n, step, nbytes)

            # OpenSSH scp: one command, its own connection
            dest = f"{base}/scp"
            self.runner.run(["mkdir", "-p", dest])
            if name == "big":
                step = timed(scp, [str(files[0]), f"{self.host}:{dest}/"])
            else:
                step = timed(scp, ["-r", str(src), f"{self.host}:{dest}/"])
            self.record(name, "scp put", nbytes, n, step, nbytes)
            (local / "scp").mkdir(parents=True)
            remote_src = f"{dest}/{files[0].name}" if name == "big" else f"{dest}/{src.name}"
            step = timed(scp, ["-r", f"{self.host}:{remote_src}", str(local / "scp") + "/"])
            assert local_bytes(local / "scp") == nbytes
            self.record(name, "scp get", nbytes, n, step, nbytes)

            if self.rsync:
                dest = f"{base}/rsync"
                step = timed(rsync, str(src) + "/", f"{self.host}:{dest}/")
                self.record(name, "rsync put", nbytes, n, step, nbytes)
            shutil.rmtree(local)  # (the local copies; the node's stay until the end)

        step = timed(subprocess.check_call, ["ssh", "-F", SSH_CONFIG, self.host, "true"])
        self.record("-", "ssh HOST true (a connection's cost)", 0, 0, step)

    def _paramiko_put(self, files: list[Path], dest: str) -> None:
        self.sftp.mkdir(dest, 0o700)
        for p in files:
            self.sftp.put(str(p), f"{dest}/{p.name}", confirm=False)

    def _paramiko_get(self, remotes: list[str], dest: Path) -> None:
        dest.mkdir(parents=True)
        for r in remotes:
            self.sftp.get(r, str(dest / r.rsplit("/", 1)[1]))

    def pieces(self, k: int) -> None:
        """What the staging's parts cost alone, on what run k's `pwe put` left on the node."""
        for name, files in self.sets.items():
            dest = f"{self.remote}/{name}-{k}/pwe"
            remotes = [f"{dest}/{p.name}" for p in files]
            nbytes = sum(p.stat().st_size for p in files)
            n = len(files)
            self.record(name, "piece: local SHA-256 (hashlib) of the set", nbytes, n,
                        timed(lambda fs: [sha256_of(p) for p in fs], files))
            self.record(name, "piece: remote `sha256sum` of the set (a command per 256 files)", nbytes, n,
                        timed(self._sha256sum, remotes))
            self.record(name, "piece: Stager.remote_sums (one stat + one sha256sum per 256 files)", nbytes, n,
                        timed(self.stager.remote_sums, remotes))
            self.record(name, "piece: sftp_makedirs of each file's directory", nbytes, n,
                        timed(self._makedirs, dest, n))
            self.record(name, "piece: per file open+close, chmod, rename (SFTP)", nbytes, n,
                        timed(self._round_trips, remotes))

    def _sha256sum(self, remotes: list[str]) -> None:
        for i in range(0, len(remotes), 256):  # (the runner's command is one argv string: at most 128 KiB)
            assert self.runner.run(["sha256sum", "--", *remotes[i:i + 256]], timeout=600).status == 0

    def _makedirs(self, dest: str, n: int) -> None:
        for _ in range(n):  # (Stager._put_batch makes each file's directory before sending it)
            sftp_makedirs(self.sftp, dest)

    def _round_trips(self, remotes: list[str]) -> None:
        for r in remotes:  # what _put_batch does per file besides the bytes: same round trips, in place
            self.sftp.open(r, "r+b").close()
            self.sftp.chmod(r, 0o644)
            self.sftp.posix_rename(r, r)

    def table(self) -> list[dict]:
        out = []
        for (name, way), runs in self.rows.items():
            wall = statistics.median(r["wall"] for r in runs)
            nbytes, nfiles = runs[0]["bytes"], runs[0]["files"]
            sent = [r["sent"] for r in runs if r["sent"] is not None]
            out.append({"set": name, "way": way, "wall_s": wall, "mb_s": nbytes / MB / wall if nbytes else None,
                        "files_s": nfiles / wall if nfiles > 1 else None,
                        "client_cpu_s": statistics.median(r["client_cpu"] for r in runs),
                        "all_cpu_s": statistics.median(r["all_cpu"] for r in runs),
                        "sent_mb": statistics.median(sent) / MB if sent else None,
                        "runs": [round(r["wall"], 3) for r in runs]})
        return out

    def close(self) -> None:
        try:
            self.runner.run(["rm", "-rf", "--", self.remote], timeout=600)
            self.runner.run(["rmdir", REMOTE_ROOT])  # (refused while another run's directory is in it)
        finally:
            self.runner.close()

# -- what if: the staging with one change at a time, patched in here (protocols/staging.py is
# not edited): whether each cost named by the pieces is what the figures say it is
_ONE_STAT_ONE_HASH = ('stat -c "%s %n" -- "$@" 2>/dev/null; echo "--"; '
                      'sha256sum -- "$@" 2>/dev/null; exit 0')
_OPENSSL_HASH = ('for f; do [ -f "$f" ] && printf "%s %s\\n" "$(wc -c < "$f")" "$f"; done; echo "--"; '
                 'openssl dgst -sha256 -r "$@" 2>/dev/null | sed "s/ \\*/  /"; exit 0')
_BOTH = ('stat -c "%s %n" -- "$@" 2>/dev/null; echo "--"; '
         'openssl dgst -sha256 -r "$@" 2>/dev/null | sed "s/ \\*/  /"; exit 0')
CHANGES = {
    "as it is": (),
    "TCP_NODELAY on the connection's socket": ("nodelay",),
    "each directory made once (not per file)": ("dirs",),
    "checks: one stat + one sha256sum per batch": ("batch",),
    "checks: hashes by one openssl dgst a batch": ("openssl",),
    "all four": ("nodelay", "dirs", "batch", "openssl"),
}


class Patched:
    """The staging with some of CHANGES applied, for the time of a with block."""

    def __init__(self, runner: SshRunner, changes: tuple[str, ...]):
        self.runner, self.changes = runner, changes

    def __enter__(self) -> None:
        import protocols.staging as staging

        self.saved = staging._SIZES_AND_HASHES, staging.sftp_makedirs
        if "batch" in self.changes or "openssl" in self.changes:
            staging._SIZES_AND_HASHES = {("batch",): _ONE_STAT_ONE_HASH, ("openssl",): _OPENSSL_HASH}.get(
                tuple(c for c in self.changes if c in ("batch", "openssl")), _BOTH)
        if "dirs" in self.changes:
            made: set[str] = set()

            def once(sftp: Any, directory: str) -> None:
                if directory not in made:
                    sftp_makedirs(sftp, directory)
                    made.add(directory)
            staging.sftp_makedirs = once
        self._nodelay(1 if "nodelay" in self.changes else 0)

    def __exit__(self, *exc: Any) -> None:
        import protocols.staging as staging

        staging._SIZES_AND_HASHES, staging.sftp_makedirs = self.saved
        self._nodelay(0)

    def _nodelay(self, on: int) -> None:
        self.runner._transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, on)


def what_if(bench: Bench, repeat: int) -> None:
    rows: dict[tuple[str, str, str], list[float]] = {}
    for k in range(repeat):
        for name, files in bench.sets.items():
            for label, changes in CHANGES.items():
                tag = f"{name}-{k}-{list(CHANGES).index(label)}"
                pairs = [(p, f"{bench.remote}/what-if-{tag}/{p.name}") for p in files]
                back = [(r, p.name) for p, r in pairs]
                get = functools.partial(bench.stager.get, bench.work / f"what-if-{tag}")
                with Patched(bench.runner, changes):
                    for what, fn, arg in (("put", bench.stager.put, pairs), ("get", get, back)):
                        wall, _, _, moved = timed(fn, arg)
                        assert all(not m.skipped and m.sent == m.size for m in moved)
                        rows.setdefault((name, what, label), []).append(wall)
                shutil.rmtree(bench.work / f"what-if-{tag}")
        print(f"what-if run {k + 1}/{repeat} done", file=sys.stderr, flush=True)
    print(f"\nwhat if (median of {repeat}; wall s, MB/s, and against `as it is`)\n")
    for (name, what, label), walls in rows.items():
        wall = statistics.median(walls)
        nbytes = sum(p.stat().st_size for p in bench.sets[name])
        base = statistics.median(rows[(name, what, "as it is")])
        print(f"{name:5} {what:4} {label:45} {wall:8.3f} {nbytes / MB / wall:7.1f} {base / wall:6.2f}x   "
              f"({', '.join(f'{w:.2f}' for w in walls)})")


def parts(bench: Bench) -> None:
    """One Stager.put and one Stager.get of each set, with a timer around each of its parts."""
    import protocols.staging as staging

    spent: dict[str, float] = {}
    calls: dict[str, int] = {}

    def wrap(owner: Any, attr: str, label: str) -> tuple[Any, str, Any]:
        raw = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        fn = raw.__func__ if isinstance(raw, staticmethod) else raw

        def timer(*a: Any, **kw: Any) -> Any:
            t0 = clock()
            try:
                return fn(*a, **kw)
            finally:
                spent[label] = spent.get(label, 0.0) + clock() - t0
                calls[label] = calls.get(label, 0) + 1
        setattr(owner, attr, staticmethod(timer) if isinstance(raw, staticmethod) else timer)
        return owner, attr, raw

    sftp_type = type(bench.sftp)
    saved = [wrap(staging.Stager, "remote_sums", "checks: Stager.remote_sums (remote commands)"),
             wrap(staging, "sftp_makedirs", "sftp_makedirs (a stat per path component)"),
             wrap(staging.Stager, "_send", "Stager._send: open, write, close"),
             wrap(staging.Stager, "_fetch", "Stager._fetch: open, prefetch, read, close"),
             wrap(staging, "sha256_of", "local sha256_of"),
             wrap(sftp_type, "chmod", "SFTP chmod"),
             wrap(sftp_type, "posix_rename", "SFTP posix_rename")]
    try:
        for name, files in bench.sets.items():
            pairs = [(p, f"{bench.remote}/parts-{name}/{p.name}") for p in files]
            back = [(r, p.name) for p, r in pairs]
            get = functools.partial(bench.stager.get, bench.work / f"parts-{name}")
            for what, fn, arg in (("put", bench.stager.put, pairs), ("get", get, back)):
                spent.clear()
                calls.clear()
                wall = timed(fn, arg)[0]
                print(f"\nStager.{what} of '{name}' ({len(files)} files): {wall:.2f} s")
                for label, t in sorted(spent.items(), key=lambda kv: -kv[1]):
                    print(f"  {label:48} {t:7.2f} s {100 * t / wall:4.0f}%  {calls[label]:5} calls "
                          f"{1000 * t / calls[label]:8.2f} ms each")
                print(f"  {'the rest (Python, local stat, mkdir, rename)':48} {wall - sum(spent.values()):7.2f} s")
    finally:
        for owner, attr, raw in saved:
            setattr(owner, attr, raw)


def profile(bench: Bench, top: int) -> None:
    """One put and one get of each set under cProfile: the caller's thread, and paramiko's
    transport thread (profiled from its run())."""
    import paramiko

    prof_t = cProfile.Profile()
    orig = paramiko.Transport.run

    def run(self: Any) -> None:
        prof_t.enable()
        try:
            orig(self)
        finally:
            prof_t.disable()

    paramiko.Transport.run = run  # type: ignore[method-assign]
    runner = SshRunner(f"ssh://{bench.host}", ssh_config=SSH_CONFIG)
    stager = Stager(runner)
    runner.run(["true"])
    runner.sftp()
    try:
        for name, files in bench.sets.items():
            dest = f"{bench.remote}/profile-{name}"
            pairs = [(p, f"{dest}/{p.name}") for p in files]
            back = [(r, p.name) for p, r in pairs]
            get = functools.partial(stager.get, bench.work / f"prof-{name}")
            for what, fn, arg in (("put", stager.put, pairs), ("get", get, back)):
                prof = cProfile.Profile()
                t0 = clock()
                prof.enable()
                fn(arg)
                prof.disable()
                wall = clock() - t0
                for label, p in ((f"caller's thread, Stager.{what} of '{name}' ({wall:.2f} s wall)", prof),
                                 ("paramiko's transport thread, so far (all profiled steps together)", prof_t)):
                    s = io.StringIO()
                    pstats.Stats(p, stream=s).sort_stats("tottime").print_stats(top)
                    print(f"\n== {label}\n" + "\n".join(s.getvalue().splitlines()[6:]))
    finally:
        paramiko.Transport.run = orig  # type: ignore[method-assign]
        runner.close()


def main() -> None:
    ap = parser(__doc__, repeat=3, json_out=True)
    ap.add_argument("--quick", action="store_true", help="32 MiB and 200 x 16 KiB, one run: under a minute")
    ap.add_argument("--sets", default="big,many", help="which sets: big, many, or both (default)")
    ap.add_argument("--big-mb", type=int, default=256, help="size of the big file, MiB")
    ap.add_argument("--files", type=int, default=2000, help="files in the many-file set")
    ap.add_argument("--file-kb", type=int, default=16, help="size of each of them, KiB")
    ap.add_argument("--host", default="pwe-n1")
    ap.add_argument("--profile", action="store_true", help="then profile one put and one get of each set")
    ap.add_argument("--parts", action="store_true",
                    help="instead of the comparison: one put and one get of each set, timed by part")
    ap.add_argument("--what-if", action="store_true",
                    help="instead of the comparison: Stager.put and .get with one change at a time patched in")
    ap.add_argument("--top", type=int, default=25, help="functions shown per profile")
    args = ap.parse_args()
    if args.quick:
        args.big_mb, args.files, args.repeat = 32, 200, 1
    check = subprocess.run(["ssh", "-F", SSH_CONFIG, args.host, "true"], capture_output=True)
    if check.returncode != 0:
        raise SystemExit(f"ssh -F {SSH_CONFIG} {args.host} true failed: run `bash tests/cluster/up.sh` first")

    work = Path(tempfile.mkdtemp(prefix="pwe-bench-staging-local-", dir="/var/tmp"))
    remote = f"{REMOTE_ROOT}/{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    sets = {name: make_set(work / f"src-{name}", name, args.big_mb, args.files, args.file_kb)
            for name in args.sets.split(",")}
    bench = Bench(args.host, sets, work, remote)
    try:
        if args.what_if or args.parts:
            if args.parts:
                parts(bench)
            if args.what_if:
                what_if(bench, args.repeat)
            return
        for k in range(args.repeat):
            bench.run_once(k)
            print(f"run {k + 1}/{args.repeat} done", file=sys.stderr, flush=True)
        for k in range(args.repeat):
            bench.pieces(k)
        rows = bench.table()
        describe = {"big": f"1 x {args.big_mb} MiB", "many": f"{args.files} x {args.file_kb} KiB"}
        print(f"\nto {args.host}; median of {args.repeat}; MB = 2^20 bytes\n")
        print(f"{'set':16} {'way':62} {'wall s':>8} {'MB/s':>7} {'files/s':>8} {'client CPU':>10} "
              f"{'all CPU':>8} {'sent MB':>8}")
        for r in rows:
            def f(v: Any, spec: str) -> str:
                return "" if v is None else format(v, spec)
            print(f"{describe.get(r['set'], r['set']):16} {r['way']:62} {r['wall_s']:8.3f} {f(r['mb_s'], '7.1f')} "
                  f"{f(r['files_s'], '8.0f')} {r['client_cpu_s']:10.2f} {r['all_cpu_s']:8.2f} "
                  f"{f(r['sent_mb'], '8.1f')}")
        if bench.rsync_note:
            print(bench.rsync_note)
        write_json(args.json, {"host": args.host, "repeat": args.repeat, "sets": describe, "rows": rows,
                               "rsync": bench.rsync_note or "measured"})
        if args.profile:
            profile(bench, args.top)
    finally:
        bench.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
