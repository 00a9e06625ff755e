"""The peers' side of bench/peers.py: run in the bench venv (bench/.peers-venv), never in pwe's.

    python bench/peers_drivers.py check
    python bench/peers_drivers.py run PEER --members N --slots S --work DIR -- ARGV...

`check` prints one JSON object: for hq, parsl and celery, whether it can run here (its
version) or why not. `run` starts the peer's system (server and worker, the DFK, or the
worker) with S slots, runs a small warm-up batch untimed, then times N members of ARGV and
prints one line `PEERS-RESULT {json}`: "wall" (seconds from the first submission to the
last member's end), the members' failures checked, and what else the peer tells. Whatever
it started is stopped in a `finally`; bench/peers.py also stops whatever is left
(it is their subreaper).
The Redis URL for Celery comes in PWE_PEERS_REDIS (not in argv, where ps shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from common import clock  # (standard library only: it runs in the peers' venv too)

HERE = Path(__file__).resolve().parent


def warm_count(slots: int) -> int:
    return 4 * slots


# ----------------------------------------------------------------------------- HyperQueue
def hq_binary() -> str | None:
    for d in [str(Path(sys.executable).parent), *os.environ.get("PATH", "").split(os.pathsep)]:
        p = Path(d) / "hq"
        if d and p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def run_hq(n: int, slots: int, argv: list[str], work: Path) -> dict:
    """Server and one worker with `slots` cpus, both inside this process (the wheel's
    LocalCluster: the Rust server and worker through its FFI). Each task has its stdout and
    stderr files in the job's directory, removed when it finishes (HQ's rm-if-finished), so
    the directory's mtime is the last task's end: wait_for_jobs itself polls once a second."""
    from hyperqueue import Job
    from hyperqueue.cluster import LocalCluster, WorkerConfig
    from hyperqueue.output import StdioDef

    cluster = LocalCluster(server_dir=str(work / "hq-server"), worker_config=WorkerConfig(cores=slots))
    try:
        client = cluster.client()

        def batch(count: int, tag: str) -> tuple[float, float]:
            d = work / f"hq-{tag}"
            d.mkdir()
            job = Job(default_workdir=d)
            for _ in range(count):
                job.program(argv, stdout=StdioDef.remove_if_finished(), stderr=StdioDef.remove_if_finished())
            t0 = time.time()
            sub = client.submit(job)
            failed = client.connection.wait_for_jobs([sub.id], lambda _jobs: None)
            waited = time.time() - t0
            if failed:
                tasks = client.connection.get_failed_tasks(failed)
                raise RuntimeError(f"hq: failed tasks: {str(tasks)[:500]}")
            outs = list(d.glob("job-*"))  # HQ's default place for them: job-ID/TASK.stdout
            left = [f for o in outs for f in os.listdir(o)]
            if len(outs) != 1 or left:
                raise RuntimeError(f"hq: expected one job-* folder, emptied, in {d}: {outs}, {len(left)} files left")
            return os.stat(outs[0]).st_mtime - t0, waited

        batch(warm_count(slots), "warm")
        wall, waited = batch(n, "timed")
    finally:
        cluster.stop()
    return {"wall": wall, "waited": waited}


# ----------------------------------------------------------------------------- Parsl
def member_rc(argv: list[str]) -> int:
    import subprocess as sp

    return sp.run(argv).returncode


def run_parsl(n: int, slots: int, argv: list[str], work: Path) -> dict:
    """HighThroughputExecutor with `slots` workers on one LocalProvider block (interchange and
    worker pool started by parsl.load, untimed), python_app members that run ARGV."""
    import parsl
    from parsl.config import Config
    from parsl.executors import HighThroughputExecutor
    from parsl.providers import LocalProvider

    ncpu = os.cpu_count() or 1
    # HTEX runs min(max_workers_per_node, floor(cores / cores_per_worker)) workers
    cpw = 1.0 if slots <= ncpu else ncpu / (slots + 0.5)
    ex = HighThroughputExecutor(label="htex", max_workers_per_node=slots, cores_per_worker=cpw,
                                address="127.0.0.1", worker_logdir_root=str(work / "parsl-workers"),
                                provider=LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1))
    cfg = Config(executors=[ex], run_dir=str(work / "parsl-runinfo"), strategy="none", usage_tracking=0)
    dfk = parsl.load(cfg)
    try:
        app = parsl.python_app(member_rc, executors=["htex"])

        def batch(count: int) -> float:
            t0 = clock()
            futs = [app(argv) for _ in range(count)]
            rcs = [f.result() for f in futs]
            wall = clock() - t0
            bad = [rc for rc in rcs if rc != 0]
            if bad:
                raise RuntimeError(f"parsl: {len(bad)} members ended non-zero: {bad[:5]}")
            return wall

        batch(warm_count(slots))
        wall = batch(n)
        counted = sum(m.get("worker_count", 0) for m in ex.connected_managers())
    finally:
        dfk.cleanup()
        parsl.clear()
    return {"wall": wall, "workers": counted}


# ----------------------------------------------------------------------------- Celery
_redis = None


def celery_app():
    from celery import Celery

    url = os.environ["PWE_PEERS_REDIS"]
    app = Celery("peers", broker=url)
    app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False,
                    broker_connection_retry_on_startup=True, worker_redirect_stdouts=False)

    @app.task(name="peers.member")
    def member(argv: list[str], key: str) -> None:
        # a count in Redis, not the result backend: no per-member result to collect
        global _redis
        import redis

        if _redis is None:
            _redis = redis.Redis.from_url(os.environ["PWE_PEERS_REDIS"])
        rc = subprocess.run(argv).returncode
        _redis.incr(key if rc == 0 else key + ":failed")

    return app


def __getattr__(name: str):  # `celery -A peers_drivers:app` (built only when asked for)
    if name == "app":
        globals()["app"] = a = celery_app()
        return a
    raise AttributeError(name)


def run_celery(n: int, slots: int, argv: list[str], work: Path) -> dict:
    """A prefork worker with concurrency `slots` on its own queue (started and warmed
    untimed), N tasks sent one by one; done when the members' count in Redis reaches N."""
    import redis

    r = redis.Redis.from_url(os.environ["PWE_PEERS_REDIS"])
    r.ping()
    # what an interrupted run left in this db (15: the bench's own, not the tests' 0)
    stale = list(r.scan_iter("*pwe-peers-*"))
    stale and r.delete(*stale)
    app = __getattr__("app")
    queue = f"pwe-peers-{uuid.uuid4().hex[:12]}"
    env = dict(os.environ, PYTHONPATH=str(HERE))
    log = open(work / "celery-worker.log", "w")
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "peers_drivers:app", "worker", "-c", str(slots),
                               "-P", "prefork", "-Q", queue, "-n", f"{queue}@%h", "--without-gossip",
                               "--without-mingle", "--without-heartbeat", "-l", "WARNING"],
                              cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
    keys = [f"{queue}:done", f"{queue}:done:failed"]
    try:
        def batch(count: int, limit: float) -> float:
            r.delete(*keys)
            task = app.tasks["peers.member"]
            t0 = clock()
            for _ in range(count):
                task.apply_async((argv, keys[0]), queue=queue)
            while True:
                done, failed = (int(v or 0) for v in r.mget(keys))
                if failed:
                    raise RuntimeError(f"celery: {failed} members ended non-zero")
                if done >= count:
                    return clock() - t0
                if worker.poll() is not None:
                    raise RuntimeError(f"celery worker exited {worker.returncode}: {tail(work / 'celery-worker.log')}")
                if clock() - t0 > limit:
                    raise RuntimeError(f"celery: {done} of {count} done after {limit:.0f} s")
                time.sleep(0.002)

        batch(warm_count(slots), 120)
        wall = batch(n, 60 + n * 0.05)
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
        r.delete(*keys, queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
    return {"wall": wall}


def tail(p: Path, n: int = 600) -> str:
    try:
        return p.read_text(errors="replace")[-n:]
    except OSError:
        return ""


# ----------------------------------------------------------------------------- check / main
def check() -> dict:
    out: dict[str, dict] = {}
    try:
        import hyperqueue
        from hyperqueue.cluster import LocalCluster  # noqa: F401

        from importlib.metadata import version

        binary = hq_binary()
        how = "the server and the worker run inside the driver process (the wheel's LocalCluster, through its FFI)"
        how += f"; an hq binary is at {binary}, unused" if binary else "; the wheel ships no `hq` binary"
        out["hq"] = {"ok": True, "version": version("hyperqueue"), "how": how, "module": hyperqueue.__file__}
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        out["hq"] = {"ok": False, "why": f"{type(e).__name__}: {e}"}
    try:
        import parsl

        out["parsl"] = {"ok": True, "version": parsl.__version__}
    except Exception as e:  # noqa: BLE001
        out["parsl"] = {"ok": False, "why": f"{type(e).__name__}: {e}"}
    try:
        import celery
        import redis

        url = os.environ.get("PWE_PEERS_REDIS")
        if not url:
            raise RuntimeError("no Redis URL (tests/services/setup.sh writes /var/tmp/pwe-redis/url)")
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
        out["celery"] = {"ok": True, "version": f"{celery.__version__} (redis-py {redis.__version__})"}
    except Exception as e:  # noqa: BLE001
        out["celery"] = {"ok": False, "why": f"{type(e).__name__}: {e}"}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("check")
    rp = sub.add_parser("run")
    rp.add_argument("peer", choices=["hq", "parsl", "celery"])
    rp.add_argument("--members", type=int, required=True)
    rp.add_argument("--slots", type=int, required=True)
    rp.add_argument("--work", type=Path, required=True)
    rp.add_argument("argv", nargs="+")
    args = ap.parse_args()
    if args.what == "check":
        print(json.dumps(check()))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally that stops the peer
    # parsl starts interchange.py and process_worker_pool.py from PATH: this venv's bin
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    run = {"hq": run_hq, "parsl": run_parsl, "celery": run_celery}[args.peer]
    got = run(args.members, args.slots, args.argv, args.work)
    print("PEERS-RESULT " + json.dumps(got), flush=True)


if __name__ == "__main__":
    main()
