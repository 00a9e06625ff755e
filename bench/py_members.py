"""Benchmark W4 (issue 49, part 1): function members against command members and the peers.

    .venv/bin/python bench/py_members.py [--members 20000] [--cmd-members 200] [--slots 2] [--repeat 1]
        [--peers pwe,cmd,parsl,celery] [--write]

N calls of a function in a module whose import takes 0.2 s (a stand-in for numpy: the
module sleeps 0.2 s at its import), on S slots of this machine, in one invocation:

  pwe     a fresh `python -m pwe run --cores S` of a node `python: w4mod:work` (function
          members: warm workers, the module imported once per worker), the whole command;
          also the pilot's first start to its last end (its events)
  cmd     the same as command members, `python -c "import w4mod; w4mod.work(I)"` (each pays
          the interpreter and the import: --cmd-members of them, its rate is flat)
  parsl   Parsl HighThroughputExecutor, S workers, a python_app that imports w4mod and calls
          work(i) (the module imported once per worker), warm (bench/peers.py's way: started
          and warmed with 4 x S calls untimed; timed from the first submission to the last
          result)
  celery  Celery + the tests' Redis as broker, a prefork worker of concurrency S, a task that
          calls work(i) (imported once per worker process), warm as Parsl

Parsl and Celery run in bench/.peers-venv (`bench/peers.py --install [--wheels DIR]`); a
peer that is not installed or cannot run is reported absent with the reason. Figures:
calls per second, and pwe's ratio to each (target: >= 2x Parsl HTEX, >= 20x the command
path). `--write` appends the dated section to bench/BENCHMARKS.md (else it is printed).
The same script is its peers' driver in their venv (`driver PEER ...`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import ROOT, clock  # noqa: E402 (standard library only: it runs in the peers' venv too)

MODULE = """import time
time.sleep(0.2)  # a stand-in for an import of numpy


def work(i):
    return {"y": i * 2}
"""
VPY = HERE / ".peers-venv" / "bin" / "python"
REDIS_URL_FILE = Path("/var/tmp/pwe-redis/url")


def module_dir(base: Path) -> Path:
    d = base / "w4"
    d.mkdir(parents=True, exist_ok=True)
    (d / "w4mod.py").write_text(MODULE)
    return d


# ----------------------------------------------------------------------------- pwe
def run_pwe(base: Path, n: int, slots: int, function: bool) -> dict:
    """A fresh `pwe run` of n function members (or command members), whole command timed;
    every member checked done in its journal."""
    from common import pilot_events, pwe_env

    mods = module_dir(base)
    wf = mods / ("fn.yaml" if function else "cmd.yaml")
    payload = ("    python: w4mod:work\n" if function else f"    env: {{PYTHONPATH: {mods}}}\n"
               f"    run: {sys.executable} -c \"import w4mod; w4mod.work({{{{ i }}}})\"\n")
    wf.write_text(f"name: w4\nworkspace: {mods}\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {n}]}}}}\n{payload}")
    run_dir = base / f"pwe-{time.time_ns()}"
    os.sync()
    t0 = time.time()
    c0 = clock()
    p = subprocess.run([sys.executable, "-m", "pwe", "run", "--fresh", str(wf), "--cores", str(slots), "--run-dir",
                        str(run_dir)], env=pwe_env(), capture_output=True, text=True)
    wall = clock() - c0
    if p.returncode != 0:
        raise RuntimeError(f"pwe run exited {p.returncode}: {p.stderr[-500:]}")
    if f"{n} done of {n}" not in p.stdout:
        raise RuntimeError(f"pwe run: not every member done: {p.stdout[-300:]}")
    starts, ends = [], []
    for ev in pilot_events(run_dir):
        (starts if ev["k"] == "start" else ends if ev["k"] == "end" else []).append(ev["t"])
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"wall": wall, "first": min(starts) - t0, "span": max(ends) - min(starts)}


# ----------------------------------------------------------------------------- the peers' driver
def call(i):
    import w4mod  # (once per worker process: Python keeps it)

    return w4mod.work(i)


def driver_parsl(n: int, slots: int, work: Path, mods: Path) -> dict:
    import parsl
    from parsl.config import Config
    from parsl.executors import HighThroughputExecutor
    from parsl.providers import LocalProvider

    os.environ["PYTHONPATH"] = f"{mods}{os.pathsep}{HERE}"
    ncpu = os.cpu_count() or 1
    cpw = 1.0 if slots <= ncpu else ncpu / (slots + 0.5)
    ex = HighThroughputExecutor(label="htex", max_workers_per_node=slots, cores_per_worker=cpw,
                                address="127.0.0.1", worker_logdir_root=str(work / "parsl-workers"),
                                provider=LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1))
    dfk = parsl.load(Config(executors=[ex], run_dir=str(work / "parsl-runinfo"), strategy="none", usage_tracking=0))
    try:
        app = parsl.python_app(call, executors=["htex"])

        def batch(count: int) -> float:
            t0 = clock()
            futs = [app(i) for i in range(count)]
            got = [f.result() for f in futs]
            wall = clock() - t0
            if any(g != {"y": 2 * i} for i, g in enumerate(got)):
                raise RuntimeError("parsl: a call returned the wrong value")
            return wall

        batch(4 * slots)
        return {"wall": batch(n)}
    finally:
        dfk.cleanup()
        parsl.clear()


def celery_app():
    from celery import Celery

    app = Celery("w4", broker=os.environ["PWE_PEERS_REDIS"])
    app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False,
                    broker_connection_retry_on_startup=True, worker_redirect_stdouts=False)
    state: dict = {}

    @app.task(name="w4.call")
    def task(i: int, key: str) -> None:
        import redis

        if "r" not in state:
            state["r"] = redis.Redis.from_url(os.environ["PWE_PEERS_REDIS"])
        state["r"].incr(key if call(i) == {"y": 2 * i} else key + ":failed")

    return app


def __getattr__(name: str):  # `celery -A py_members:app` (built only when asked for)
    if name == "app":
        globals()["app"] = a = celery_app()
        return a
    raise AttributeError(name)


def driver_celery(n: int, slots: int, work: Path, mods: Path) -> dict:
    import uuid

    import redis

    r = redis.Redis.from_url(os.environ["PWE_PEERS_REDIS"])
    r.ping()
    app = __getattr__("app")
    queue = f"pwe-w4-{uuid.uuid4().hex[:12]}"
    env = dict(os.environ, PYTHONPATH=f"{HERE}{os.pathsep}{mods}")
    log = open(work / "celery-worker.log", "w")
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "py_members:app", "worker", "-c", str(slots),
                               "-P", "prefork", "-Q", queue, "-n", f"{queue}@%h", "--without-gossip",
                               "--without-mingle", "--without-heartbeat", "-l", "WARNING"],
                              cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
    keys = [f"{queue}:done", f"{queue}:done:failed"]
    try:
        def batch(count: int, limit: float) -> float:
            r.delete(*keys)
            task = app.tasks["w4.call"]
            t0 = clock()
            for i in range(count):
                task.apply_async((i, keys[0]), queue=queue)
            while True:
                done, failed = (int(v or 0) for v in r.mget(keys))
                if failed:
                    raise RuntimeError(f"celery: {failed} calls failed")
                if done >= count:
                    return clock() - t0
                if worker.poll() is not None:
                    raise RuntimeError(f"celery worker exited {worker.returncode}")
                if clock() - t0 > limit:
                    raise RuntimeError(f"celery: {done} of {count} done after {limit:.0f} s")
                time.sleep(0.002)

        batch(4 * slots, 120)
        return {"wall": batch(n, 60 + n * 0.05)}
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
        r.delete(*keys, queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")


def run_peer(peer: str, base: Path, n: int, slots: int) -> dict:
    """A fresh driver of ``peer`` in the peers' venv (its result line, or RuntimeError)."""
    if not VPY.exists():
        raise RuntimeError("not installed: run bench/peers.py --install [--wheels DIR]")
    mods = module_dir(base)
    work = Path(tempfile.mkdtemp(prefix=f"{peer}-", dir=base))
    env = dict(os.environ)
    if peer == "celery":
        try:
            env["PWE_PEERS_REDIS"] = REDIS_URL_FILE.read_text().strip().rsplit("/", 1)[0] + "/15"
        except OSError:
            raise RuntimeError(f"no Redis ({REDIS_URL_FILE}: tests/services/setup.sh)") from None
    try:
        p = subprocess.run([str(VPY), str(Path(__file__).resolve()), "driver", peer, "--members", str(n), "--slots",
                            str(slots), "--work", str(work), "--mods", str(mods)], capture_output=True, text=True,
                           env=env, timeout=300 + n * 0.05, start_new_session=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [x for x in p.stdout.splitlines() if x.startswith("W4-RESULT ")]
    if p.returncode != 0 or not lines:
        last = (p.stderr.strip().splitlines() or ["-"])[-1][-300:]
        raise RuntimeError(f"{peer} driver exited {p.returncode}: {last}")
    return json.loads(lines[-1][len("W4-RESULT "):])


# ----------------------------------------------------------------------------- main
def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "driver":
        ap = argparse.ArgumentParser()
        ap.add_argument("what")
        ap.add_argument("peer", choices=["parsl", "celery"])
        ap.add_argument("--members", type=int, required=True)
        ap.add_argument("--slots", type=int, required=True)
        ap.add_argument("--work", type=Path, required=True)
        ap.add_argument("--mods", type=Path, required=True)
        a = ap.parse_args()
        os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
        sys.path.insert(0, str(a.mods))
        got = (driver_parsl if a.peer == "parsl" else driver_celery)(a.members, a.slots, a.work, a.mods)
        print("W4-RESULT " + json.dumps(got), flush=True)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=20000)
    ap.add_argument("--cmd-members", type=int, default=200)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--peers", default="pwe,cmd,parsl,celery")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    peers = a.peers.split(",")
    base = Path(tempfile.mkdtemp(prefix="pwe-w4-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    rates: dict[str, list[float]] = {p: [] for p in peers}
    extra: dict[str, list[dict]] = {p: [] for p in peers}
    absent: dict[str, str] = {}
    try:
        for k in range(a.repeat):
            for peer in peers[k % len(peers):] + peers[:k % len(peers)]:
                if peer in absent:
                    continue
                n = a.cmd_members if peer == "cmd" else a.members
                try:
                    got = (run_pwe(base, n, a.slots, peer == "pwe") if peer in ("pwe", "cmd")
                           else run_peer(peer, base, n, a.slots))
                except RuntimeError as exc:
                    absent[peer] = str(exc)
                    print(f"{peer}: {exc}", file=sys.stderr)
                    continue
                rates[peer].append(n / got["wall"])
                extra[peer].append(got)
                print(f"{peer}: {n} calls, {got['wall']:.2f} s, {n / got['wall']:,.0f}/s {got}", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    lines = [f"### W4: function members ({time.strftime('%Y-%m-%d')}, {os.uname().nodename}, "
             f"{os.cpu_count()} cores)", "",
             f"`{' '.join(['.venv/bin/python', 'bench/py_members.py'] + sys.argv[1:])}`: {a.members:,} calls of a "
             f"function whose module's import takes 0.2 s, {a.slots} slots (command members: {a.cmd_members:,}); "
             f"median of {a.repeat}.", "",
             "| peer | calls/s | pwe's function members against it |", "|---|---:|---:|"]
    ours = statistics.median(rates["pwe"]) if rates.get("pwe") else None
    for peer in peers:
        if peer in absent:
            lines.append(f"| {peer} | absent: {absent[peer][:120]} | |")
            continue
        r = statistics.median(rates[peer])
        lines.append(f"| {peer} | {r:,.0f} | {'' if ours is None or peer == 'pwe' else f'{ours / r:.1f}x'} |")
    if extra.get("pwe"):
        spans = [e["span"] for e in extra["pwe"]]
        lines += ["", f"pwe's whole command includes its start (first call at {extra['pwe'][0]['first']:.2f} s); "
                  f"from the first call's start to the last one's end: {a.members / statistics.median(spans):,.0f}/s."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        with open(ROOT / "bench" / "BENCHMARKS.md", "a") as fh:
            fh.write("\n" + text)


if __name__ == "__main__":
    main()
