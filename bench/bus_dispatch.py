"""Dispatch with the Redis bus against the spool bus, side by side (issue 23's row: at most 5%
apart).

    python bench/bus_dispatch.py [--members 5000] [--cores 2] [--repeat 5]
        [--redis-url-file /var/tmp/pwe-redis/url] [--password-file /var/tmp/pwe-redis/password]

Each repeat runs one whole `pwe run` of MEMBERS x `true` with the local host's default
transport (the spool: events in the pilot's events.jsonl) and one with `transport: redis`
(the pilot's events through a Redis stream; tasks still through the spool), in an order
that alternates; run directories on tmpfs; each run's every end checked in its journal.
The Redis server is the tests' (tests/services/setup.sh). Printed: each transport's median
members/s and the ratio of the pairs (redis / spool), median and each.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from common import interleave, parser, pwe_env, timed_run
from dispatch_local import check, settle, workflow


def main() -> None:
    ap = parser(__doc__, repeat=5, members=5000, cores=2)
    ap.add_argument("--redis-url-file", type=Path, default=Path("/var/tmp/pwe-redis/url"))
    ap.add_argument("--password-file", type=Path, default=Path("/var/tmp/pwe-redis/password"))
    args = ap.parse_args()
    u = urlsplit(args.redis_url_file.read_text().strip())
    broker = f"redis://{u.hostname}:{u.port}{u.path or '/0'}"  # (the password from its owner-only file)
    env = pwe_env()
    bases = {w: Path(tempfile.mkdtemp(prefix=f"pwe-bus-{w}-", dir="/dev/shm")) for w in ("spool", "redis")}
    (bases["redis"] / "hosts.yaml").write_text(
        f"hosts:\n  local:\n    cores_per_node: {args.cores}\n    transport: redis\n    broker: {broker}\n"
        f"    broker_password_file: {args.password_file}\n")
    def rate(who: str, k: int) -> float:
        run_dir = bases[who] / f"run-{time.time_ns()}"
        wf = workflow(bases[who], args.members, "true")
        settle()
        wall = timed_run([wf, "--cores", args.cores, "--run-dir", run_dir], env)
        check(run_dir, args.members)
        print(f"  repeat {k + 1} {who}: {args.members / wall:,.0f}/s", flush=True)
        return args.members / wall

    try:
        rates = interleave({"spool": lambda k: rate("spool", k), "redis": lambda k: rate("redis", k)}, args.repeat)
        if not any((bases["redis"]).glob("run-*/pilots/*/events.redis.jsonl")):
            raise SystemExit("the redis runs left no events.redis.jsonl: their events did not come through Redis")
    finally:
        for b in bases.values():
            shutil.rmtree(b, ignore_errors=True)
    pairs = [r / s for r, s in zip(rates["redis"], rates["spool"])]
    for who, v in rates.items():
        print(f"{who:6} median {statistics.median(v):,.0f}/s  runs {', '.join(f'{x:,.0f}' for x in v)}")
    print(f"redis / spool: median {statistics.median(pairs):.3f} (each pair {', '.join(f'{p:.2f}' for p in pairs)}); "
          f"bar: within 5% ({'met' if abs(statistics.median(pairs) - 1) <= 0.05 else 'NOT met'})")


if __name__ == "__main__":
    main()
