"""The message bus between pilots and engine: signed lines, sequence numbers, the spool and
Redis transports, a broker that goes away, the event history (pwe events).

Real parts: Debian's redis-server with a password (the shared one on 127.0.0.1:6391, db 0,
and one started here on a free port to be killed with SIGKILL), real pilots and members,
and the members' own ledger as the proof that nothing ran twice or was lost."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from helpers import LEDGER_WF, ROOT, ledger_counts, read_journal, run_cli, wait_for
from pilot import wire
from pilot.broker import BrokerError, EngineRedis, Broker, PilotRedis, Redis, stream_for
from pilot.transport import EngineSpool, PilotSpool


def _split(url: str, tmp_path: Path) -> tuple[str, Path]:
    """(broker URL without its password, an owner-only file holding the password)."""
    u = urlsplit(url)
    pw = tmp_path / "redis.pass"
    pw.write_text(u.password or "")
    pw.chmod(0o600)
    return f"redis://{u.hostname}:{u.port}{u.path or '/0'}", pw


def _hosts(tmp_path: Path, broker: str, pw: Path, cores: int = 2) -> None:
    (tmp_path / "hosts.yaml").write_text(
        f"hosts:\n  local:\n    cores_per_node: {cores}\n    transport: redis\n    broker: {broker}\n"
        f"    broker_password_file: {pw}\n")


# A node of n members that each write a line as they start and as they end (with their
# attempt), and wait for a gate file in between; b runs after all of a.
GATED_WF = """
name: gated
properties: {{ledger: {ledger}, gate: {gate}}}
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; for k in $(seq 1200); do [ -e {{{{ gate }}}} ] && break; sleep 0.05; done; echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}
    retries: 1
  b:
    after: [a]
    run: echo "start b 0 $PWE_ATTEMPT" >> {{{{ ledger }}}}; echo "end b 0 $PWE_ATTEMPT" >> {{{{ ledger }}}}
"""


def _start_run(tmp_path: Path, wf: Path, run_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([os.sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(run_dir)], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def _status(run_dir: Path) -> dict:
    rc, out, err = run_cli("status", run_dir, "--json")
    assert rc == 0, err
    return json.loads(out)


def _rejects(run_dir: Path) -> list[dict]:
    return [r for r in read_journal_lines(run_dir) if r.get("e") == "reject"]


def read_journal_lines(run_dir: Path) -> list[dict]:
    """The journal so far (a run still going: a partial last line is left out)."""
    out = []
    for line in (run_dir / "journal.jsonl").read_bytes().splitlines(keepends=True):
        if line.endswith(b"\n"):
            out.append(json.loads(line))
    return out


def _each_once(ledger: Path, n: int) -> None:
    starts, ends = ledger_counts(ledger, attempts=True)
    assert all(c == 1 for c in starts.values()) and all(c == 1 for c in ends.values()), (starts, ends)
    assert set(starts) == set(ends)
    assert sorted(k for k in starts if k[0] == "a") == sorted(("a", str(i), "1") for i in range(n)), starts


# -- the wire: signed lines ---------------------------------------------------------------------

def test_a_signed_line_reads_back_and_any_change_to_it_is_forged():
    key = wire.channel_key(b"secret", "p1", True)
    data = wire.encode([{"k": "end", "n": "a", "m": 0, "a": 1, "rc": 0, "t": 1.5, "q": 7}], key)
    assert wire.decode(data, key)[0] == [{"k": "end", "n": "a", "m": 0, "a": 1, "rc": 0, "t": 1.5, "q": 7}]
    for bad in (data.replace(b'"rc":0', b'"rc":1'),  # changed
                data.replace(b'"s":"', b'"x":"'),  # no signature
                wire.encode([{"k": "end", "n": "a", "m": 0, "a": 1, "rc": 0, "q": 7}]),  # unsigned
                wire.encode([{"k": "end", "n": "a", "m": 0, "a": 1, "rc": 0, "q": 7}],
                            wire.channel_key(b"secret", "p2", True)),  # another pilot's channel
                wire.encode([{"k": "end", "n": "a", "m": 0, "a": 1, "rc": 0, "q": 7}],
                            wire.channel_key(b"secret", "p1", False))):  # the other direction
        assert wire.decode(bad, key)[0][0]["k"] == wire.FORGED, bad
    # signed, but not a message the wire lists: malformed
    for msg in ({"k": "boom", "q": 1}, {"k": "end", "n": "a", "m": 0, "a": 1, "rc": 0, "x": 1, "q": 2},
                {"k": "end", "n": "a", "m": 0, "a": 1, "rc": 0}):
        got = wire.decode(wire.encode([msg], key), key)[0][0]
        assert got["k"] == wire.MALFORMED and got["why"], got


def test_run_directory_and_secret_are_owner_only(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "run" / "secret").stat().st_mode) == 0o600
    # a pilot refuses a secret that others may read (it would sign with a key anybody has)
    (tmp_path / "run" / "secret").chmod(0o644)
    d = tmp_path / "run" / "pilots" / "p9"
    d.mkdir()
    p = subprocess.run([os.sys.executable, "-m", "pilot", "--dir", str(d), "--slots", "1"], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert p.returncode == 2 and "may be read by others: make it owner-only (chmod 600)" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


# -- Redis: the client, with a password ------------------------------------------------------------

def test_the_redis_client_needs_the_password(redis_url, tmp_path):
    broker, pw = _split(redis_url, tmp_path)
    r = Redis(broker, pw.read_text())
    assert r.call("PING") == "PONG"
    r.close()
    with pytest.raises(BrokerError):
        Redis(broker, "not-the-password")
    with pytest.raises(BrokerError, match="NOAUTH"):
        Redis(broker).call("XLEN", "pwe:test")


def test_a_host_entry_chooses_redis_and_keeps_the_password_out_of_it(tmp_path):
    from hostinfo.model import Host

    h = Host(name="x", transport="redis", broker="redis://127.0.0.1:6391/0", broker_password_file="/p")
    from pwe.planning.placement import pilot_args_for

    assert pilot_args_for(h)[-6:] == ["--transport", "redis", "--broker", "redis://127.0.0.1:6391/0",
                                      "--broker-password-file", "/p"]
    (tmp_path / "hosts.yaml").write_text("hosts:\n  x:\n    transport: redis\n    broker: redis://u:pw@h:1/0\n")
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a:\n    host: x\n    run: 'true'\n")
    rc, out, err = run_cli("validate", tmp_path / "wf.yaml", cwd=tmp_path)
    assert rc == 2 and "broker_password_file" in err and "pw" not in err.replace("password", ""), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_password_file_others_may_read_is_refused_before_anything_is_made(tmp_path):
    pw = tmp_path / "redis.pass"
    pw.write_text("x")
    pw.chmod(0o644)
    _hosts(tmp_path, "redis://127.0.0.1:6391/0", pw)
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("run", tmp_path / "wf.yaml", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 2 and "may be read by others: make it owner-only (chmod 600)" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_a_pilot_that_cannot_reach_its_broker_at_start_runs_through_the_spool(tmp_path):
    port = _free_port()  # (nothing listens there)
    pw = tmp_path / "redis.pass"
    pw.write_text("x")
    pw.chmod(0o600)
    _hosts(tmp_path, f"redis://127.0.0.1:{port}/0", pw)
    ledger, n = tmp_path / "ledger", 20
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=n, sleep=0))
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    _each_once(ledger, n)
    d = tmp_path / "run" / "pilots" / "p1"
    assert "events go to the spool" in (d / "pilot.log").read_text()
    assert (d / "events.jsonl").read_bytes().count(b'"k":"end"') == 2 * n
    notes = [r["what"] for r in read_journal(tmp_path / "run") if r["e"] == "note"]
    assert any("does not answer" in w for w in notes), notes


# -- runs: over Redis, and forged / replayed messages in each transport --------------------------

def test_a_run_over_redis_end_to_end(redis_url, tmp_path):
    broker, pw = _split(redis_url, tmp_path)
    _hosts(tmp_path, broker, pw)
    ledger, n = tmp_path / "ledger", 40
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=n, sleep=0))
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    _each_once(ledger, n)
    d = tmp_path / "run" / "pilots" / "p1"
    # every event came through the broker (none through the spool), and is kept in the run
    assert (d / "events.jsonl").read_bytes() == b""
    kept = [json.loads(line) for line in (d / "events.redis.jsonl").read_bytes().splitlines()]
    assert sum(1 for m in kept if m["k"] == "end") == 2 * n
    assert [m["q"] for m in kept] == list(range(1, len(kept) + 1))
    offsets = [r for r in read_journal(tmp_path / "run") if r["e"] == "offset"]
    assert offsets and all(isinstance(r["off"], list) for r in offsets)
    # the event history reads it back, as JSON lines
    rc, out, err = run_cli("events", tmp_path / "run", "--json")
    assert rc == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert sum(1 for e in events if e.get("k") == "end" and e["pilot"] == "p1") == 2 * n
    assert {e["via"] for e in events if e.get("pilot") == "p1"} == {"redis"}
    assert all(e["verdict"] == "applied" for e in events if e.get("pilot") == "p1" and e.get("k") != "up"
               or e.get("k") == "up")


@pytest.mark.parametrize("transport", ["spool", "redis"])
def test_forged_and_replayed_events_are_refused_counted_logged_never_applied(redis_url, tmp_path, transport):
    """While every member of a waits at a gate: forged `end`s (rc 0 and rc 1) for each of
    them and a replayed copy of a real signed line are written into the pilot's spool
    or its Redis stream. Applied, the rc 0 ones would let b run before the gate opens and
    the rc 1 ones would run members again (retries: 1); the ledger shows neither."""
    n = 3
    if transport == "redis":
        broker, pw = _split(redis_url, tmp_path)
        _hosts(tmp_path, broker, pw, cores=n)
    else:
        (tmp_path / "hosts.yaml").write_text(f"hosts:\n  local:\n    cores_per_node: {n}\n")
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    wf = tmp_path / "wf.yaml"
    wf.write_text(GATED_WF.format(ledger=ledger, gate=gate, n=n))
    run_dir = tmp_path / "run"
    proc = _start_run(tmp_path, wf, run_dir)
    try:
        wait_for(lambda: ledger.exists() and len(ledger.read_text().splitlines()) == n, 60, "a's members started")
        d = run_dir / "pilots" / "p1"
        secret = (run_dir / "secret").read_bytes().strip()
        key = wire.channel_key(secret, "p1", True)
        wrong = wire.channel_key(b"0" * 64, "p1", True)
        forged = wire.encode([{"k": "end", "n": "a", "m": i, "a": 1, "rc": rc, "dt": 0.0, "out": {}, "t": 0,
                               "q": 1000 + 2 * i + rc} for i in range(n) for rc in (0, 1)], wrong)
        if transport == "spool":
            wait_for(lambda: b'"k":"start"' in (d / "events.jsonl").read_bytes(), 30, "a start in the spool")
            real = next(line for line in (d / "events.jsonl").read_bytes().splitlines(keepends=True)
                        if b'"k":"start"' in line)
            with open(d / "events.jsonl", "ab") as fh:
                fh.write(forged)
                fh.write(real)  # the same signed line again
        else:
            r = Redis(broker, pw.read_text())
            stream = stream_for(key, str(d))
            entries = r.call("XRANGE", stream, "-", "+")
            real = dict(zip(entries[0][1][::2], entries[0][1][1::2]))[b"b"]  # its first batch, verbatim
            r.call("XADD", stream, "*", "b", forged)
            r.call("XADD", stream, "*", "b", real)
            r.close()
        n_real = len(real.splitlines())
        wait_for(lambda: len(_rejects(run_dir)) >= 2 * n + n_real, 30, "the engine refusing them")
        # nothing ran past the gate: b has not started, no member of a ran again
        assert [line for line in ledger.read_text().splitlines() if not line.startswith("start a ")] == []
        gate.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    starts, ends = ledger_counts(ledger, attempts=True)
    assert starts == ends and all(c == 1 for c in starts.values())
    assert sorted(starts) == sorted([("a", str(i), "1") for i in range(n)] + [("b", "0", "1")])
    rejects = _rejects(run_dir)
    assert sum(1 for r in rejects if r["why"] == "forged") == 2 * n
    assert sum(1 for r in rejects if r["why"] == "replayed") == n_real
    assert _status(run_dir)["rejected"] == {"forged": 2 * n, "replayed": n_real}
    rc, text, _ = run_cli("status", run_dir)
    assert f"pilot messages refused, never applied: {2 * n} forged, {n_real} replayed" in text, text
    rc, out, _ = run_cli("events", run_dir, "--json")
    verdicts = [e["verdict"] for e in map(json.loads, out.splitlines()) if e.get("pilot") == "p1"]
    assert verdicts.count("forged") == 2 * n and verdicts.count("duplicate") == n_real
    assert "a forged message refused" in err and "a replayed message refused" in err
    ends = [r for r in read_journal(run_dir) if r["e"] == "end"]
    assert sorted((r["n"], r["m"], r["a"], r["rc"]) for r in ends) == \
        sorted([("a", i, 1, 0) for i in range(n)] + [("b", 0, 1, 0)])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_pilot_whose_broker_is_killed_goes_on_through_the_spool(tmp_path, redis_url):
    """A Redis of its own, killed with SIGKILL mid-run (nothing persisted): the pilot writes
    what the engine had not acknowledged and everything after to the spool, the engine
    reads it there; every member ran once, none is lost. (It takes the shared Redis's
    fixture for the redis-server that set-up installs, and so is a `real` test.)"""
    port = _free_port()
    pw = tmp_path / "redis.pass"
    pw.write_text("s3cret-for-this-test")
    pw.chmod(0o600)
    conf = tmp_path / "redis.conf"
    conf.write_text(f"bind 127.0.0.1\nport {port}\nrequirepass s3cret-for-this-test\nsave \"\"\nappendonly no\n"
                    f"dir {tmp_path}\n")
    conf.chmod(0o600)
    redis = subprocess.Popen(["redis-server", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def up():
            try:
                Redis(f"redis://127.0.0.1:{port}/0", "s3cret-for-this-test").close()
                return True
            except OSError:
                return False

        wait_for(up, 30, "redis-server up")
        _hosts(tmp_path, f"redis://127.0.0.1:{port}/0", pw)
        ledger, n = tmp_path / "ledger", 150
        wf = tmp_path / "wf.yaml"
        wf.write_text(LEDGER_WF.format(ledger=ledger, n=n, sleep=0.02))
        run_dir = tmp_path / "run"
        proc = _start_run(tmp_path, wf, run_dir)
        wait_for(lambda: ledger.exists() and ledger.read_text().count("end a") >= 40, 60, "40 members done")
        os.kill(redis.pid, signal.SIGKILL)  # mid-run: nothing it held survives
        redis.wait(10)
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
    finally:
        if redis.poll() is None:
            redis.kill()
        redis.wait(10)
    _each_once(ledger, n)
    d = run_dir / "pilots" / "p1"
    assert "events go to the spool" in (d / "pilot.log").read_text()
    assert b'"k":"end"' in (d / "events.jsonl").read_bytes()
    notes = [r["what"] for r in read_journal(run_dir) if r["e"] == "note"]
    assert any("does not answer" in w for w in notes), notes
    ends = [(r["n"], r["m"], r["a"]) for r in read_journal(run_dir) if r["e"] == "end"]
    assert len(ends) == len(set(ends)) == 2 * n
    # no q was applied twice, none lost: together, what came each way is 1..last
    rejected = _status(run_dir)["rejected"]
    assert set(rejected) <= {"resent"}, rejected  # (what both carried: taken once)


# -- order and duplicates ------------------------------------------------------------------------

def test_an_end_before_its_start_and_everything_read_twice_change_nothing(tmp_path):
    from pwe.engine.loop import Engine, PilotHandle

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    parameters: {i: [1, 2]}\n    run: 'true'\n  b:\n    after: [a]\n"
                  "    run: 'true'\n")
    engine = Engine.create(wf, cores=1, run_dir=tmp_path / "run")
    engine._load()
    try:
        pilot = PilotHandle("p1", engine.dir / "pilots" / "p1", 0, "elsewhere", 2, lane="local",
                            transport=engine.intake.transport("local", "p1"))
        engine.pilots["p1"] = pilot
        engine.ledger.take({"e": "pilot", "p": "p1", "pid": 0, "host": "elsewhere", "lane": "local", "slots": 2})
        for i in (0, 1):
            engine.ledger.take({"e": "assign", "n": "a", "m": i, "a": 1, "p": "p1"})
        key = wire.channel_key(engine.intake.secret, "p1", True)
        spool = PilotSpool(str(pilot.dir), key_out=key)
        # a's member 0: its end (q 3) is read before its start (q 2) arrives; member 1 in order
        spool.send([{"k": "up", "v": wire.VERSION, "t": 0}])  # q 1
        late_start = {"k": "start", "n": "a", "m": 0, "a": 1, "pid": 0, "t": 0, "q": 2}
        spool.q = 2
        spool.send([{"k": "end", "n": "a", "m": 0, "a": 1, "rc": 0, "dt": 0, "out": {}, "t": 0},  # q 3
                    {"k": "start", "n": "a", "m": 1, "a": 1, "pid": 0, "t": 0},  # q 4
                    {"k": "end", "n": "a", "m": 1, "a": 1, "rc": 0, "dt": 0, "out": {}, "t": 0}])  # q 5
        assert engine.intake.ingest(pilot) == 4
        st = engine.state
        assert st.totals()[4] == 2 and st.nodes["b"].state[0] == 1  # a done, b ready
        before = (st.totals(), dict(st.nodes["a"].rc), pilot.q)
        # the start that comes late is not applied: a stays done (a start after its end,
        # from the transport that delivered q 5 already, is refused as replayed)
        with open(pilot.dir / "events.jsonl", "ab") as fh:
            fh.write(wire.encode([late_start], key))
        engine.intake.ingest(pilot)
        assert (st.totals(), dict(st.nodes["a"].rc), pilot.q) == before
        assert st.rejected == {"replayed": 1}
        # and applied straight to the state, past the sequence numbers, it changes nothing either
        assert st.apply({"e": "start", "n": "a", "m": 0, "a": 1, "p": "p1", "pid": 0}) is None
        # everything read again from the start: each q refused (replayed), the state unchanged
        pilot.cursor = 0
        engine.intake.ingest(pilot)
        assert (st.totals(), dict(st.nodes["a"].rc), pilot.q) == before
        assert st.rejected == {"replayed": 6}, st.rejected  # (1, then the 5 lines again)
        spool.close()
        pilot.close()
    finally:
        engine.journal.close()


def test_a_pilot_over_redis_hands_what_was_not_acknowledged_to_the_spool(redis_url, tmp_path):
    """The pilot's side alone: batches the engine acknowledged are forgotten; when the
    broker fails, the rest go to the spool first, in order."""
    broker, pw = _split(redis_url, tmp_path)
    d = tmp_path / "p1"
    d.mkdir()
    key = wire.channel_key(os.urandom(32), "p1", True)  # (a stream of its own)
    pilot = PilotRedis(str(d), broker, pw.read_text(), key_out=key)
    engine = EngineRedis(str(d), Broker(broker, pw.read_text()), key_in=key)
    for i in range(4):
        pilot.send([{"k": "hb", "running": i, "queued": 0, "t": 0}])
    pilot.broker.settle()  # (the last batch's reply read: the broker has it before the engine reads)
    got, cursor = engine.receive(0)
    assert [m["q"] for m in got] == [1, 2, 3, 4] and all(m["via"] == "redis" for m in got)
    engine.send([{"k": wire.ACK, "q": 2}])
    pilot.receive(0)  # takes the ack: batches 1 and 2 are forgotten
    assert [q for q, _ in pilot.unacked] == [3, 4]
    pilot.broker.sock.shutdown(socket.SHUT_RDWR)  # the connection breaks
    pilot.send([{"k": "hb", "running": 5, "queued": 0, "t": 0}])
    assert pilot.broker is None
    spooled = wire.decode((d / "events.jsonl").read_bytes(), key)[0]
    assert [m["q"] for m in spooled] == [3, 4, 5]
    got, cursor = engine.receive(cursor)
    assert [m["q"] for m in got] == [3, 4, 5] and all("via" not in m for m in got)
    engine.forget()
    engine.close()
    pilot.close()


def test_a_pilot_whose_engine_does_not_acknowledge_keeps_its_events_on_disk_not_in_memory(redis_url, tmp_path,
                                                                                          monkeypatch):
    """The unacknowledged batches are bounded (pilot/broker.py UNACKED_LIMIT): past it, the
    pilot writes them to its spool and stays there; the engine, back, reads every event
    once (the ones it read from the broker too are not applied twice)."""
    from pilot import broker as broker_mod

    broker, pw = _split(redis_url, tmp_path)
    d = tmp_path / "p1"
    d.mkdir()
    key = wire.channel_key(os.urandom(32), "p1", True)
    monkeypatch.setattr(broker_mod, "UNACKED_LIMIT", 2000)
    pilot = PilotRedis(str(d), broker, pw.read_text(), key_out=key)
    engine = EngineRedis(str(d), Broker(broker, pw.read_text()), key_in=key)
    got, cursor = [], 0
    for i in range(40):  # (an engine that reads now and then, and never acknowledges)
        pilot.send([{"k": "hb", "running": i, "queued": 0, "t": 0}])
        assert pilot.unacked_bytes <= 2000
        if i == 5:
            pilot.broker.settle()  # (the broker has the sixth batch before the engine reads)
            got, cursor = engine.receive(cursor)
    assert pilot.broker is None and not pilot.unacked and pilot.unacked_bytes == 0
    spooled = wire.decode((d / "events.jsonl").read_bytes(), key)[0]
    assert [m["q"] for m in spooled] == list(range(1, 41))  # everything not acknowledged, then the rest
    more, cursor = engine.receive(cursor)
    qs = [m["q"] for m in got + more]
    # every event reaches the engine (one read from both is applied once: pwe/engine/intake.py _admit)
    assert qs[:6] == list(range(1, 7)) and set(qs) == set(range(1, 41))
    engine.forget()
    engine.close()
    pilot.close()


KILLED_AFTER_SEND = """
import os, signal, sys
from pilot.broker import PilotRedis
pilot = PilotRedis(sys.argv[1], sys.argv[2], sys.argv[3], key_out=bytes.fromhex(sys.argv[4]))
pilot.send([{"k": "start", "n": "a", "m": 0, "a": 1, "nodes": ["x"], "t": 0}])
os.kill(os.getpid(), signal.SIGKILL)  # (its reply not read: the pilot dies with it unread or not yet come)
"""


def test_a_pilot_killed_just_after_it_sent_a_batch_loses_no_event(redis_url, tmp_path):
    """A batch's reply is read before the next command, not after the batch (pilot/broker.py
    Redis.send): a pilot killed with SIGKILL the instant after sending a member's start,
    its reply unread, still has that start in the broker. Twenty pilots, each its stream."""
    broker, pw = _split(redis_url, tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for k in range(20):
        d = tmp_path / f"p{k}"
        d.mkdir()
        key = wire.channel_key(os.urandom(32), f"p{k}", True)
        p = subprocess.run([os.sys.executable, "-c", KILLED_AFTER_SEND, str(d), broker, pw.read_text(), key.hex()],
                           env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == -signal.SIGKILL, p.stderr
        engine = EngineRedis(str(d), Broker(broker, pw.read_text()), key_in=key)
        got = wait_for(lambda e=engine: e.receive(0)[0], timeout=30)
        assert [(m["k"], m["q"], m["via"]) for m in got] == [("start", 1, "redis")], k
        engine.forget()
        engine.close()


def test_a_batch_the_broker_refused_goes_to_the_spool_with_the_next(redis_url, tmp_path):
    """The broker's error for a batch (its stream is not a stream: WRONGTYPE) is read with
    the next batch; both go to the spool, in order, and the pilot stays there."""
    broker, pw = _split(redis_url, tmp_path)
    d = tmp_path / "p1"
    d.mkdir()
    key = wire.channel_key(os.urandom(32), "p1", True)
    other = Redis(broker, pw.read_text())
    other.call("SET", stream_for(key, str(d)), "not a stream")
    pilot = PilotRedis(str(d), broker, pw.read_text(), key_out=key)
    pilot.send([{"k": "hb", "running": 1, "queued": 0, "t": 0}])
    assert pilot.broker is not None  # (its reply is not read yet)
    pilot.send([{"k": "hb", "running": 2, "queued": 0, "t": 0}])
    assert pilot.broker is None
    spooled = wire.decode((d / "events.jsonl").read_bytes(), key)[0]
    assert [m["q"] for m in spooled] == [1, 2]
    other.call("DEL", stream_for(key, str(d)))
    other.close()
    pilot.close()


def test_the_spool_transport_signs_and_checks(tmp_path):
    key_in, key_out = wire.channel_key(b"s", "p1", True), wire.channel_key(b"s", "p1", False)
    engine = EngineSpool(tmp_path, key_in, key_out)
    pilot = PilotSpool(str(tmp_path), key_out=key_in, key_in=key_out)
    engine.send([{"k": "task", "n": "a", "m": 0, "a": 1}])
    assert pilot.receive(0)[0] == [{"k": "task", "n": "a", "m": 0, "a": 1}]
    pilot.send([{"k": "hb", "running": 0, "queued": 0, "t": 0}, {"k": "hb", "running": 1, "queued": 0, "t": 0}])
    got, _ = engine.receive(0)
    assert [m["q"] for m in got] == [1, 2]
    engine.close()
    pilot.close()


def test_pwe_events_reads_back_a_spool_run(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    parameters: {i: [1, 2, 3]}\n    run: 'true'\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    rc, out, err = run_cli("events", tmp_path / "run", "--json")
    assert rc == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    mine = [e for e in events if e.get("pilot") == "p1"]
    assert [e["q"] for e in mine] == list(range(1, len(mine) + 1))
    assert sum(1 for e in mine if e["k"] == "end") == 3 and all(e["v"] == wire.VERSION for e in mine)
    assert {e.get("record") for e in events if "record" in e} >= {"run", "finish"}
    rc, text, err = run_cli("events", tmp_path / "run")
    assert rc == 0 and "p1" in text and "end" in text, err


def test_an_engine_killed_mid_run_over_redis_resumes_from_its_journaled_cursor(redis_url, tmp_path):
    """kill -9 of the engine while its pilot sends through Redis: the pilot goes on, its
    events wait in its stream; `pwe resume` reads on from the entry its journal names.
    Every member ran once, none was lost."""
    broker, pw = _split(redis_url, tmp_path)
    _hosts(tmp_path, broker, pw)
    ledger, n = tmp_path / "ledger", 80
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=n, sleep=0.05))
    run_dir = tmp_path / "run"
    proc = _start_run(tmp_path, wf, run_dir)
    wait_for(lambda: ledger.exists() and ledger.read_text().count("end a") >= 20, 60, "20 members done")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    rc, out, err = run_cli("resume", run_dir, cwd=tmp_path, timeout=180)
    assert rc == 0, err
    _each_once(ledger, n)
    ends = [(r["n"], r["m"], r["a"]) for r in read_journal(run_dir) if r["e"] == "end"]
    assert len(ends) == len(set(ends)) == 2 * n
    assert set(_status(run_dir)["rejected"]) <= {"resent"}


def test_what_the_engines_wait_read_is_taken_by_its_next_read_without_asking_again(redis_url, tmp_path,
                                                                                    monkeypatch):
    """A wake-up is one round trip: Broker.wait reads the entries it woke for and the
    transport's next receive takes them; entries added after the wait are read the round
    after; a wait's entries for another cursor (the engine went back) are not taken."""
    broker_url, pw = _split(redis_url, tmp_path)
    d = tmp_path / "p1"
    d.mkdir()
    key = wire.channel_key(os.urandom(32), "p1", True)
    pilot = PilotRedis(str(d), broker_url, pw.read_text(), key_out=key)
    broker = Broker(broker_url, pw.read_text())
    engine = EngineRedis(str(d), broker, key_in=key)
    conn = broker._conn()
    real_call = conn.call
    commands: list[str] = []

    def recorded(*args):
        commands.append(args[0])
        return real_call(*args)

    conn.call = recorded  # (this connection's commands, not the server's counters: others may use it)
    asked: list[bool] = []
    real_read = Broker.read

    def counted(self, stream, after, count=1000):
        before = commands.count("XREAD")
        out = real_read(self, stream, after, count)
        asked.append(commands.count("XREAD") > before)
        return out

    monkeypatch.setattr(Broker, "read", counted)
    try:
        got, cursor = engine.receive(0)
        assert got == [] and asked == [True]  # (nothing waited for: the broker asked)
        for i in range(3):
            pilot.send([{"k": "hb", "running": i, "queued": 0, "t": 0}])
        pilot.broker.settle()
        assert broker.wait({engine.stream: cursor[1]}, 5.0) is True
        pilot.send([{"k": "hb", "running": 3, "queued": 0, "t": 0}])  # (after the wait)
        pilot.broker.settle()
        got, cursor = engine.receive(cursor)
        assert [m["q"] for m in got] == [1, 2, 3] and asked[-1] is False  # (the wait's three, not asked again)
        got, cursor = engine.receive(cursor)
        assert [m["q"] for m in got] == [4] and asked[-1] is True  # (the one after the wait, read the round after)
        pilot.send([{"k": "hb", "running": 4, "queued": 0, "t": 0}])
        pilot.broker.settle()
        assert broker.wait({engine.stream: "0-0"}, 5.0) is True  # (a wait from an older cursor)
        got, cursor = engine.receive(cursor)
        assert [m["q"] for m in got] == [5] and asked[-1] is True  # (its entries not taken: asked after the cursor)
    finally:
        engine.forget()
        engine.close()
        pilot.close()
