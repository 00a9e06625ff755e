"""The message bus: events/s taken in from the spool and through Redis, and the latency
from a member's end to the engine's record of it.

    python bench/bus.py --redis-url-file /var/tmp/pwe-redis/url [--events 200000] [--batch 100]

Ingestion: a pilot's transport writes N signed ``end`` messages (numbered, in batches, as
the pilot sends them); the engine's side then reads them all. Two figures each way:

* bus: the transport's ``receive`` (read, signature checked, decoded) and the engine's
  admission of each message by its sequence number (:meth:`pwe.engine.intake.Intake.admit`);
* engine: the same messages through the engine's whole ``Intake.ingest`` (admission, journal
  record, state applied), for N members assigned to the pilot.

Latency: a real ``pwe run`` (in-process, the engine's ``_take`` timed) of members that
end one after another (``sleep`` then the member writes its own end time, ``date
+%s.%N``, to its outputs as its last act); latency = the engine's clock when it takes the
``end`` in - that time. Members run 2 at a time, the engine and pilot idle between ends
(the engine's slowest polling: the worst case).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import clock, parser  # noqa: E402
from pilot import wire  # noqa: E402
from pilot.broker import Broker, EngineRedis, PilotRedis  # noqa: E402
from pilot.transport import EngineSpool, PilotSpool  # noqa: E402


def _msgs(n: int, start: int):
    return [{"k": "end", "n": "a", "m": i, "a": 1, "rc": 0, "dt": 0.01, "out": {}, "t": 1795390000.123}
            for i in range(start, start + n)]


class _Admit:
    """The engine's admission alone (the same method, on a bare handle)."""

    def __init__(self):
        from pwe.engine.intake import Intake

        self.secret = b"x"
        self._admit = Intake.admit.__get__(self)

        class H:
            q = 0
            qs: dict = {}

        self.h = H()


def bus_rate(engine, n: int) -> tuple[float, int]:
    adm = _Admit()
    t0 = clock()
    cursor, got, refused = 0, 0, 0
    while got < n:
        msgs, cursor = engine.receive(cursor)
        for m in msgs:
            if adm._admit(adm.h, m):
                refused += 1
        got += len(msgs)
    return n / (clock() - t0), refused


def engine_rate(make_transport, n: int, tmp: Path) -> float:
    """N end messages through the engine's Intake.ingest (journal + state), members assigned first."""
    from pwe.engine.loop import Engine, PilotHandle

    wf = tmp / "wf.yaml"
    wf.write_text(f"name: b\nnodes:\n  a:\n    parameters: {{i: {{range: [0, {n}]}}}}\n    run: 'true'\n")
    eng = Engine.create(wf, cores=1, run_dir=tmp / "run")
    eng._load()
    eng.notice = lambda line: None
    eng.ledger.take({"e": "pilot", "p": "p1", "pid": 0, "host": "x", "lane": "local", "slots": 1})
    for i in range(n):
        eng.ledger.take({"e": "assign", "n": "a", "m": i, "a": 1, "p": "p1"})
    eng.journal.flush()
    secret = eng.intake.secret
    (eng.dir / "pilots" / "p1").mkdir()
    writer, reader = make_transport(eng.dir / "pilots" / "p1", secret)
    for k in range(0, n, BATCH):
        writer.send(_msgs(min(BATCH, n - k), k))
    pilot = PilotHandle("p1", eng.dir / "pilots" / "p1", 0, "x", 1, lane="local", transport=reader)
    eng.pilots["p1"] = pilot
    t0 = clock()
    got = 0
    while got < n:
        got += eng.intake.ingest(pilot)
    eng.journal.flush()
    rate = n / (clock() - t0)
    assert eng.state.totals()[4] == n, eng.state.totals()
    if hasattr(reader, "forget"):
        reader.forget()  # (its stream goes)
    writer.close()
    reader.close()
    eng.journal.close()
    return rate


def latency(tmp: Path, hosts: str | None, members: int) -> list[float]:
    from pilot.wire import END
    from pwe.engine.loop import Engine

    if hosts:
        (tmp / "hosts.yaml").write_text(hosts)
    wf = tmp / "wf.yaml"
    wf.write_text(f"name: lat\nnodes:\n  a:\n    parameters: {{i: {{range: [0, {members}]}}}}\n"
                  "    run: sleep 0.1; echo te=$(date +%s.%N) >> $PWE_OUTPUTS\n")
    lat: list[float] = []

    eng = Engine.create(wf, cores=2, run_dir=tmp / "run", hosts_file=(tmp / "hosts.yaml") if hosts else None)
    take = eng.intake.take

    def timed_take(pilot, ev, held=None):  # (the engine's intake, each message as it is taken)
        if ev["k"] == END and ev.get("out", {}).get("te"):
            lat.append(time.time() - float(ev["out"]["te"]))
        take(pilot, ev, held)

    eng.intake.take = timed_take
    assert eng.run(), "the latency run failed"
    return lat


BATCH = 100


def main() -> None:
    global BATCH
    ap = parser(__doc__, repeat=None)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--members", type=int, default=200, help="members of the latency runs")
    ap.add_argument("--redis-url-file", default="/var/tmp/pwe-redis/url")
    args = ap.parse_args()
    BATCH = args.batch
    n = args.events
    url = Path(args.redis_url_file).read_text().strip()
    u = urlsplit(url)
    broker, password = f"redis://{u.hostname}:{u.port}{u.path or '/0'}", u.password
    base = Path(tempfile.mkdtemp(prefix="pwe-bus-", dir="/dev/shm"))
    key = wire.channel_key(os.urandom(32), "p1", True)
    try:
        # -- ingestion: the bus layer -------------------------------------------------------------
        d = base / "spool" / "p1"
        d.mkdir(parents=True)
        w = PilotSpool(str(d), key_out=key)
        t0 = clock()
        for k in range(0, n, BATCH):
            w.send(_msgs(min(BATCH, n - k), k))
        wrate = n / (clock() - t0)
        rate, refused = bus_rate(EngineSpool(d, key), n)
        print(f"spool  bus: write {wrate:,.0f} events/s, ingest {rate:,.0f} events/s ({refused} refused; "
              f"{n:,} events, batches of {BATCH})")
        d = base / "redis" / "p1"
        d.mkdir(parents=True)
        w = PilotRedis(str(d), broker, password, key_out=key)
        t0 = clock()
        for k in range(0, n, BATCH):
            w.send(_msgs(min(BATCH, n - k), k))
        wrate = n / (clock() - t0)
        assert w.broker is not None, "the broker went away during the benchmark"
        er = EngineRedis(str(d), Broker(broker, password), key)
        rate, refused = bus_rate(er, n)
        print(f"redis  bus: write {wrate:,.0f} events/s, ingest {rate:,.0f} events/s ({refused} refused; "
              f"{n:,} events, batches of {BATCH})")
        er.forget()
        er.close()
        w.close()

        # -- ingestion: the engine's whole Intake.ingest ---------------------------------------------------
        def spool_pair(dd: Path, secret: bytes):
            kin, kout = wire.channel_key(secret, "p1", True), wire.channel_key(secret, "p1", False)
            return PilotSpool(str(dd), key_out=kin), EngineSpool(dd, kin, kout)

        def redis_pair(dd: Path, secret: bytes):
            kin, kout = wire.channel_key(secret, "p1", True), wire.channel_key(secret, "p1", False)
            return PilotRedis(str(dd), broker, password, key_out=kin), \
                EngineRedis(str(dd), Broker(broker, password), kin, kout)

        m = min(n, 100_000)
        for name, pair in (("spool", spool_pair), ("redis", redis_pair)):
            tmp = base / f"engine-{name}"
            tmp.mkdir()
            rate = engine_rate(pair, m, tmp)
            print(f"{name} engine: ingest {rate:,.0f} events/s (Intake.ingest: admitted, journaled, applied; "
                  f"{m:,} end events)")

        # -- latency: a member's end -> the engine's record ------------------------------------------
        pw = base / "redis.pass"
        pw.write_text(password or "")
        pw.chmod(0o600)
        for name, hosts in (("spool", None),
                            ("redis", f"hosts:\n  local:\n    transport: redis\n    broker: {broker}\n"
                                      f"    broker_password_file: {pw}\n")):
            tmp = base / f"lat-{name}"
            tmp.mkdir()
            lat = sorted(latency(tmp, hosts, args.members))
            q = statistics.quantiles(lat, n=20)
            print(f"{name} latency member end -> engine record: median {1000 * statistics.median(lat):.1f} ms, "
                  f"p95 {1000 * q[18]:.1f} ms, max {1000 * lat[-1]:.1f} ms ({len(lat)} members, 2 at a time)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
