"""The service (pwe service, pwe trigger, pwe submit --service) with its real parts: Celery
worker and beat as real processes, the embedded broker (kombu's filesystem transport, no
Redis), the tests' real Redis with its password (db 1), real kill -9. The cron rules
(DST, catch-up) are unit tests on fixed instants: nothing waits for a clock to change."""

import json
import os
import re
import secrets
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from helpers import LEDGER_WF, ROOT, Service, ledger_counts, let_time_pass, one_line_error, run_cli, wait_for


# -- helpers ---------------------------------------------------------------------------------
def alive(pid) -> bool:
    try:
        with open(f"/proc/{int(pid)}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, ValueError):
        return False


def tcp_sockets(pids):
    """The TCP connections (local, remote as hex addr:port) held by these processes."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[9] in inodes:
                out.append((f[1], f[2]))
    return out


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """One service with the embedded broker (no Redis anywhere in its config), shared by
    the tests that do not kill it."""
    home = tmp_path_factory.mktemp("svc") / "home"
    svc = Service(home)
    out = svc.ok("service", "start", "--json", env={"PWE_SERVICE_STALE": "8"})
    st = json.loads(out)
    assert st["running"] and st["broker"].startswith("filesystem://")
    yield svc
    svc.cleanup()


# -- the service runs submissions ----------------------------------------------------------------
def test_embedded_service_runs_a_submission_to_its_end(embedded, tmp_path):
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=3, sleep=0.1))
    run_id = embedded.ok("submit", "--service", wf).strip()
    assert re.fullmatch(r"ledger-\d{8}-\d{6}-[0-9a-f]{4}", run_id)
    rec = embedded.wait_phase(run_id)
    starts, ends = ledger_counts(ledger)
    members = {(n, str(i)) for n in "ab" for i in range(3)}
    assert set(starts) == set(ends) == members and set(starts.values()) == set(ends.values()) == {1}
    st = embedded.status()
    assert st["running"] and st["consuming"] and isinstance(st["queue_depth"], int)
    assert st["broker"].startswith("filesystem://") and "redis" not in json.dumps(st)
    # the embedded broker needs no server: worker and beat hold no TCP connection at all
    assert tcp_sockets(embedded.processes()) == []
    assert Path(rec["run_dir"]).parent == embedded.dir / "runs"
    assert oct(embedded.dir.stat().st_mode & 0o777) == "0o700"
    # pwe status reads the service's run like any other
    rc, out, _ = run_cli("status", rec["run_dir"], "--json")
    assert rc == 0 and json.loads(out)["phase"] == "succeeded"
    # a batch system's edge event for the run, over the broker: signed into the run as pwe notify does
    sys.path.insert(0, str(ROOT))
    from pwe.runstate.notify import receive
    from pwe.service.app import send
    from pwe.runstate.service_store import Store

    send("filesystem://", "pwe", Store(embedded.dir), "pwe.runstate.notify", run_id=run_id, pilot="p9", event="started",
         job="4242")
    edges = Path(rec["run_dir"]) / "edges"
    wait_for(lambda: edges.is_dir() and any(edges.iterdir()), 30, "the edge event in the run")
    [(event, verified)] = receive(Path(rec["run_dir"]), set())
    assert verified and event["pilot"] == "p9" and event["job"] == "4242" and event["event"] == "started"


def test_a_service_run_is_found_by_id_and_prefix_by_every_command_from_anywhere(embedded, tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=tmp_path / "ledger", n=2, sleep=0.05))
    run_id = embedded.ok("submit", "--service", wf).strip()
    rec = embedded.wait_phase(run_id)
    elsewhere = tmp_path / "elsewhere"  # no pwe-runs here: the run is the service's
    elsewhere.mkdir()

    def pwe(*args):
        return run_cli(*args, cwd=elsewhere, env={"PWE_HOME": str(embedded.home)})

    prefix = run_id[:-2]
    for ref in (run_id, prefix):
        rc, out, err = pwe("status", ref, "--json")
        assert rc == 0 and json.loads(out)["run_id"] == run_id and json.loads(out)["phase"] == "succeeded", err
    for args in (["show", prefix], ["show", prefix, "-q", "state=done"], ["logs", prefix, "a:0"],
                 ["trace", prefix], ["report", prefix, "-o", str(tmp_path / "r.html")], ["events", prefix]):
        rc, out, err = pwe(*args)
        assert rc == 0, (args, err)
    rc, out, err = pwe("cancel", prefix)
    assert rc == 0 and out.strip() == f"{run_id}: already finished; nothing to cancel", err
    # pwe runs lists it, from the service, beside the command line's runs
    rows = {r["run_id"]: r for r in json.loads(pwe("runs", "--json")[1])}
    assert rows[run_id]["from"] == "service" and rows[run_id]["run_dir"] == rec["run_dir"], rows
    rc, text, err = pwe("runs")
    [line] = [l for l in text.splitlines() if l.startswith(run_id)]
    assert line.split()[1] == "service" and text.splitlines()[0].split()[:3] == ["run", "from", "state"], text
    # a run of the same workflow from the command line here: the shared prefix is ambiguous, said in one line
    rc, out, err = pwe("run", wf, "--cores", "1", "--json")
    local = json.loads(out)["run_id"]
    rc, out, err = pwe("status", "ledger-")
    err = one_line_error(rc, out, err)
    assert f"{run_id} ({Path(rec['run_dir']).parent}/)" in err and f"{local} (pwe-runs/)" in err, err
    assert "give more of the id" in err
    rows = {r["run_id"]: r["from"] for r in json.loads(pwe("runs", "--json")[1])}
    assert rows[local] == "command line" and rows[run_id] == "service"
    rc, out, err = pwe("status", "nosuchrun")
    err = one_line_error(rc, out, err)
    assert f"looked in pwe-runs/, {embedded.dir / 'runs'}/" in err, err


def test_a_submission_delivered_twice_is_one_run(embedded, tmp_path):
    """acks_late means a task may come twice: the client's run id makes the second a no-op."""
    sys.path.insert(0, str(ROOT))
    from pwe.service.app import send
    from pwe.runstate.service_store import Store
    from pwe.service.submit import prepare

    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=2, sleep=0.1))
    req = prepare(str(wf), {}, None, None)
    store = Store(embedded.dir)
    for _ in range(3):
        send("filesystem://", "pwe", store, "pwe.submit", req=req)
    embedded.wait_phase(req["run_id"])
    wait_for(lambda: embedded.status()["queue_depth"] == 0, 30, "the three messages to be taken")
    let_time_pass(1.5, "a tick or two: a second run, were there one, would have started by now")
    assert [r["run_id"] for r in embedded.status()["runs"]].count(req["run_id"]) == 1
    assert len(list((embedded.dir / "runs").glob(f"{req['run_id']}*"))) == 1
    starts, ends = ledger_counts(ledger)
    assert len(starts) == 4 and set(starts.values()) == set(ends.values()) == {1}


PRODUCTS_WF = """\
name: made
nodes:
  m:
    parameters: {{i: {{range: [0, 4]}}}}
    products: ["out/{{{{ i }}}}.txt"]
    run: 'echo "ran {{{{ i }}}}" >> {ledger}; mkdir -p "$PWE_WORKSPACE/out"; echo {{{{ i }}}} > "$PWE_WORKSPACE/out/{{{{ i }}}}.txt"'
"""


def test_a_submission_with_a_workspace_runs_only_the_members_whose_products_are_missing(embedded, tmp_path):
    """--workspace reaches the service: members whose products are there are complete and
    do not run; the others make theirs there. A workflow the service runs from the text it
    was sent (the file is not where it was) keeps the workspace resolved where it was sent."""
    sys.path.insert(0, str(ROOT))
    from pwe.service.app import send
    from pwe.runstate.service_store import Store
    from pwe.service.submit import prepare

    ledger, ws = tmp_path / "ledger", tmp_path / "ws"
    (ws / "out").mkdir(parents=True)
    for i in (0, 2):
        (ws / "out" / f"{i}.txt").write_text("made before\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(PRODUCTS_WF.format(ledger=ledger))
    run_id = embedded.ok("submit", "--service", wf, "--workspace", ws).strip()
    rec = embedded.wait_phase(run_id)
    assert sorted(ledger.read_text().split("\n")) == ["", "ran 1", "ran 3"]
    assert sorted(p.name for p in (ws / "out").iterdir()) == ["0.txt", "1.txt", "2.txt", "3.txt"]
    assert json.loads((Path(rec["run_dir"]) / "run.json").read_text())["workspace"] == str(ws)
    # no --workspace, and the service cannot see the file: the file's directory, as resolved here
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "1.txt").write_text("made before\n")
    ledger.unlink()
    req = prepare(str(wf), {}, None, None)
    req["path"] = str(tmp_path / "gone" / "wf.yaml")  # (the service runs the text it was sent)
    send("filesystem://", "pwe", Store(embedded.dir), "pwe.submit", req=req)
    rec = embedded.wait_phase(req["run_id"])
    assert sorted(ledger.read_text().split("\n")) == ["", "ran 0", "ran 2", "ran 3"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["0.txt", "1.txt", "2.txt", "3.txt"]


def test_service_over_redis_with_a_password_from_another_client(tmp_path, redis_url):
    url = re.sub(r"/\d*$", "", redis_url) + "/1"  # db 1 is the service's
    assert "@" in url, "the tests' Redis has a password"
    queue = f"pwe-test-{secrets.token_hex(4)}"
    svc = Service(tmp_path / "server")
    try:
        st = json.loads(svc.ok("service", "start", "--broker", url, "--queue", queue, "--json"))
        password = url.split("@")[0].rsplit(":", 1)[1]
        assert st["broker"].startswith("redis://") and password not in json.dumps(st) and "***" in st["broker"]
        assert oct((svc.dir / "config.json").stat().st_mode & 0o777) == "0o600"
        redis_port = int(re.search(r":(\d+)/", url).group(1))
        port = f":{redis_port:04X}"
        assert any(remote.endswith(port) for _, remote in tcp_sockets(svc.processes())), "not on Redis"
        # a client with no service of its own: only the broker's URL (another machine, in effect)
        client = Service(tmp_path / "client")
        ledger = tmp_path / "ledger"
        wf = tmp_path / "wf.yaml"
        wf.write_text(LEDGER_WF.format(ledger=ledger, n=2, sleep=0.1))
        run_id = client.ok("submit", "--service", "--broker", url, wf, env={"PWE_QUEUE": queue}).strip()
        svc.wait_phase(run_id)
        starts, ends = ledger_counts(ledger)
        assert len(ends) == 4 and set(starts.values()) == set(ends.values()) == {1}
        assert not (client.home / "state" / "service" / "runs").exists()
        # a wrong password is one line, not a hang or a traceback
        bad = re.sub(r":[^:@/]*@", ":wrong@", url)
        rc, out, err = client.pwe("submit", "--service", "--broker", bad, wf, timeout=60)
        assert rc == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err and "wrong" not in err
    finally:
        svc.cleanup()


# -- triggers --------------------------------------------------------------------------------------
TIMED_WF = """
name: {name}
properties: {{{value}: none, ledger: {ledger}}}
nodes:
  a:
    run: echo "start $PWE_RUN_ID $(date +%s.%N) {{{{ {value} }}}}" >> {{{{ ledger }}}}; sleep {sleep}; echo "end $PWE_RUN_ID $(date +%s.%N)" >> {{{{ ledger }}}}
"""


def read_runs(ledger):
    """{run id: {"start": t, "end": t, "value": v}} from a TIMED_WF ledger."""
    runs = {}
    for line in Path(ledger).read_text().splitlines() if Path(ledger).exists() else []:
        words = line.split()
        r = runs.setdefault(words[1], {})
        assert words[0] not in r, f"{words[1]} {words[0]} twice"
        r[words[0]] = float(words[2])
        if words[0] == "start":
            r["value"] = " ".join(words[3:])
    return runs


def test_cron_trigger_fires_runs_and_skips_while_one_runs(embedded, tmp_path):
    ledger = tmp_path / "ledger"
    wf = tmp_path / "cron.yaml"
    wf.write_text(TIMED_WF.format(name="every", value="scheduled_time", ledger=ledger, sleep=2.5))
    out = embedded.ok("trigger", "add", wf, "--cron", "* * * * * *", "--tz", "Europe/Paris", "--overlap", "skip",
                      "--id", "every", "--json")
    assert json.loads(out)["overlap"] == "skip"
    try:
        wait_for(lambda: sum("end" in r for r in read_runs(ledger).values()) >= 2, 90, "two cron runs to end")
    finally:
        embedded.ok("trigger", "remove", "every")
    history = json.loads(embedded.ok("trigger", "history", "every", "--limit", "0", "--json"))
    fired = [h for h in history if h["what"] == "fired"]
    assert len(fired) >= 2 and any(h["what"] == "skipped" for h in history)
    runs = read_runs(ledger)
    for h in fired:  # each run got its slot, in UTC, as the workflow's property
        if h["run"] in runs:
            assert runs[h["run"]]["value"] == h["values"]["scheduled_time"]
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", runs[h["run"]]["value"])
    # overlap skip: no run started while the trigger's previous one ran
    spans = sorted((r["start"], r.get("end", float("inf"))) for r in runs.values())
    for (_, e1), (s2, _) in zip(spans, spans[1:]):
        assert s2 >= e1, f"a run started at {s2} while the previous one ran until {e1}"
    listed = json.loads(embedded.ok("trigger", "list", "--json"))
    assert all(t["id"] != "every" for t in listed)
    # pwe runs lists the trigger's runs, saying which trigger started each
    rows = {r["run_id"]: r for r in json.loads(embedded.ok("runs", "--json"))}
    assert all(rows[h["run"]]["from"] == "trigger every" for h in fired), rows


def test_cron_trigger_with_overlap_queue_runs_one_after_another(embedded, tmp_path):
    ledger = tmp_path / "ledger"
    wf = tmp_path / "queued.yaml"
    wf.write_text(TIMED_WF.format(name="queued", value="scheduled_time", ledger=ledger, sleep=1.5))
    embedded.ok("trigger", "add", wf, "--cron", "* * * * * */2", "--overlap", "queue", "--id", "queued")
    try:
        wait_for(lambda: sum("end" in r for r in read_runs(ledger).values()) >= 3, 90, "three queued runs to end")
    finally:
        embedded.ok("trigger", "remove", "queued")
    history = json.loads(embedded.ok("trigger", "history", "queued", "--limit", "0", "--json"))
    queued = {h["run"] for h in history if h["what"] == "queued"}
    fired = [h["run"] for h in history if h["what"] == "fired"]
    assert queued and queued & set(fired), "no fire was queued and started later"
    assert not any(h["what"] == "skipped" for h in history)
    spans = sorted((r["start"], r.get("end", float("inf"))) for r in read_runs(ledger).values())
    for (_, e1), (s2, _) in zip(spans, spans[1:]):
        assert s2 >= e1, f"a queued run started at {s2} while the previous one ran until {e1}"


def test_a_worker_that_stops_consuming_is_restarted(embedded, tmp_path):
    """celery #8030 (a worker that stops consuming): stopped for real (SIGSTOP), the
    service sees no tick reach it and starts worker and beat again; runs go on."""
    old = json.loads((embedded.dir / "service.json").read_text())
    os.kill(old["worker"], signal.SIGSTOP)
    try:
        wait_for(lambda: json.loads((embedded.dir / "service.json").read_text())["worker"] != old["worker"], 60,
                 "a new worker")
    finally:
        if alive(old["worker"]):
            os.kill(old["worker"], signal.SIGCONT)
    wait_for(lambda: embedded.status()["consuming"], 60, "ticks to reach the new worker")
    assert "celery #8030" in (embedded.dir / "service.log").read_text()
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=1, sleep=0.1))
    embedded.wait_phase(embedded.ok("submit", "--service", wf).strip())


def test_run_end_trigger_and_file_trigger_with_settle_time(embedded, tmp_path):
    ledger = tmp_path / "ledger"
    first = tmp_path / "first.yaml"
    first.write_text(TIMED_WF.format(name="first", value="unused", ledger=ledger, sleep=0.1))
    after = tmp_path / "after.yaml"
    after.write_text(TIMED_WF.format(name="after", value="trigger_run", ledger=ledger, sleep=0.1))
    embedded.ok("trigger", "add", after, "--after-run", "success", "--of", "first", "--id", "after-first")
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    (incoming / "old.dat").write_text("there before the trigger\n")
    files_ledger = tmp_path / "files"
    onfile = tmp_path / "onfile.yaml"
    onfile.write_text(f"""
name: onfile
properties: {{trigger_file: none}}
nodes:
  count:
    run: echo "$(wc -l < {{{{ trigger_file }}}}) {{{{ trigger_file }}}}" >> {files_ledger}
""")
    embedded.ok("trigger", "add", onfile, "--on-file", incoming / "*.dat", "--settle", "2", "--id", "files",
                "--overlap", "allow")
    try:
        run_id = embedded.ok("submit", "--service", first).strip()
        embedded.wait_phase(run_id)
        wait_for(lambda: any(r.get("value") == run_id and "end" in r for r in read_runs(ledger).values()), 60,
                 "the run-end trigger's run")
        # a file written slowly (a line every 0.4 s for 4 s): taken only once whole
        writer = subprocess.Popen(["bash", "-c", f"for i in $(seq 1 10); do echo line $i >> {incoming}/new.dat; "
                                                 "sleep 0.4; done"])
        assert writer.wait(30) == 0
        wait_for(lambda: files_ledger.exists() and files_ledger.read_text().strip(), 60, "the file trigger's run")
        let_time_pass(3, "longer than the settle time: a second fire for the same file would show")
    finally:
        embedded.ok("trigger", "remove", "after-first")
        embedded.ok("trigger", "remove", "files")
    lines = files_ledger.read_text().splitlines()
    assert lines == [f"10 {incoming / 'new.dat'}"], lines  # whole, once; old.dat (there before) not taken
    runs = read_runs(ledger)
    assert [r["value"] for r in runs.values() if r.get("value") == run_id] == [run_id]  # one run after it
    history = json.loads(embedded.ok("trigger", "history", "--json"))
    assert [h["values"]["trigger_run"] for h in history if h["trigger"] == "after-first" and h["what"] == "fired"] \
        == [run_id]


# -- kill -9 of the service mid-run -----------------------------------------------------------------
def test_service_killed_mid_run_and_started_again_finishes_the_run(tmp_path):
    svc = Service(tmp_path / "home")
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    n = 4
    wf.write_text(LEDGER_WF.format(ledger=ledger, n=n, sleep=1))
    try:
        svc.ok("service", "start")
        run_id = svc.ok("submit", "--service", wf, "--cores", "2").strip()
        wait_for(lambda: ledger.exists() and ledger.read_text().count("end ") >= 2, 60, "members to end")
        victims = svc.processes() + svc.engines()
        assert len(victims) == 4, victims  # service, worker, beat, the run's engine
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not any(alive(p) for p in victims), 30, "the killed processes to be gone")
        assert svc.run(run_id)["phase"] != "succeeded"
        assert not svc.status()["running"]
        let_time_pass(2, "the service is down a while; the pilot goes on with what it was given")
        svc.ok("service", "start")
        svc.wait_phase(run_id, timeout=120)
    finally:
        svc.cleanup()
    starts, ends = ledger_counts(ledger)
    members = {(node, str(i)) for node in "ab" for i in range(n)}
    assert set(ends) == members, "a member was lost"
    assert set(starts.values()) == {1} and set(ends.values()) == {1}, "a member ran twice"


def test_pwe_help_does_not_import_celery():
    """Celery is imported by the service's commands only (every other command starts without it)."""
    code = "import sys, pwe.cli.main; pwe.cli.main.cli.main(['--help'], standalone_mode=False); assert 'celery' not in sys.modules"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and "service" in proc.stdout and "trigger" in proc.stdout, proc.stderr


# -- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["--cron", "61 * * * *"], "not a cron expression"),
    (["--cron", "* * *"], "not a cron expression"),
    (["--cron", "* * * * *", "--tz", "Mars/Olympus"], "unknown time zone"),
    (["--cron", "* * * * *", "--tz", "../../etc/passwd"], "unknown time zone"),
    (["--cron", "* * * * *", "--overlap", "sometimes"], "--overlap sometimes: one of allow, skip, queue"),
    (["--after-run", "maybe"], "--after-run maybe: one of success, failure, any"),
    (["--on-file", "x/*", "--settle", "-1"], "--settle"),
    ([], "give exactly one of"),
    (["--cron", "* * * * *", "--after-run", "any"], "give exactly one of"),
])
def test_bad_trigger_input_is_one_line_and_exit_2(tmp_path, args, words):
    svc = Service(tmp_path / "home")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    run: echo hi\n")
    err = one_line_error(*svc.pwe("trigger", "add", wf, *args))
    assert words in err, err
    assert not (svc.dir / "triggers.json").exists()


def test_bad_workflow_and_bad_broker_are_one_line(tmp_path):
    svc = Service(tmp_path / "home")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    runn: echo hi\n")
    err = one_line_error(*svc.pwe("trigger", "add", wf, "--cron", "* * * * *"))
    assert str(wf) in err
    err = one_line_error(*svc.pwe("submit", "--service", wf))
    assert str(wf) in err
    err = one_line_error(*svc.pwe("service", "start", "--broker", "amqp://x"))
    assert "redis://" in err
    err = one_line_error(*svc.pwe("trigger", "remove", "nope"))
    assert "no trigger 'nope'" in err
    rc, out, err = svc.pwe("service", "status")
    assert rc == 1 and "not running" in out


# -- cron rules on fixed instants (no waiting on real time) ---------------------------------------
def ts(*a):
    return datetime(*a, tzinfo=timezone.utc).timestamp()


@pytest.fixture
def cron():
    sys.path.insert(0, str(ROOT))
    from pwe.service import cron

    return cron


def test_dst_spring_forward_fixed_time_fires_right_after_the_change(cron):
    ny = cron.check_zone("America/New_York")  # 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC)
    assert [cron.iso(t) for t in cron.slots("30 2 * * *", ny, ts(2026, 3, 7), ts(2026, 3, 10))] == \
        ["2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
    # several slots in the skipped hour: one fire, at the change
    assert [cron.iso(t) for t in cron.slots("0,20,40 2 * * *", ny, ts(2026, 3, 8), ts(2026, 3, 8, 12))] == \
        ["2026-03-08T07:00:00Z"]


def test_dst_spring_forward_wildcard_follows_the_new_clock(cron):
    ny = cron.check_zone("America/New_York")
    assert [cron.iso(t) for t in cron.slots("*/30 * * * *", ny, ts(2026, 3, 8, 6), ts(2026, 3, 8, 8))] == \
        ["2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z", "2026-03-08T08:00:00Z"]


def test_dst_fall_back_repeated_hour_does_not_fire_twice(cron):
    paris = cron.check_zone("Europe/Paris")  # 2026-10-25 03:00 CEST -> 02:00 CET (01:00 UTC)
    assert [cron.iso(t) for t in cron.slots("30 2 * * *", paris, ts(2026, 10, 24, 12), ts(2026, 10, 26))] == \
        ["2026-10-25T00:30:00Z"]  # 02:30 CEST, the first pass only
    # an hourly (wildcard) job still runs every hour: both passes of 02:xx are real hours
    assert [cron.iso(t) for t in cron.slots("30 * * * *", paris, ts(2026, 10, 24, 23), ts(2026, 10, 25, 2))] == \
        ["2026-10-24T23:30:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]


def test_missed_schedule_fires_once_with_catch_up_and_not_at_all_without(cron):
    utc = cron.check_zone("UTC")
    last, now = ts(2026, 1, 1, 0, 0, 30), ts(2026, 1, 1, 10, 7)  # down from 00:00:30 to 10:07
    d = cron.decide("0 * * * *", utc, last, now, catchup=True)
    assert d.catchup and cron.iso(d.fire) == "2026-01-01T10:00:00Z" and len(d.missed) == 9  # one run, not ten
    d = cron.decide("0 * * * *", utc, last, now, catchup=False)
    assert d.fire is None and len(d.missed) == 10
    # on return at 10:00:20: the 10:00 slot is on time and fires (either way); the nine before are missed
    for flag in (True, False):
        d = cron.decide("0 * * * *", utc, last, ts(2026, 1, 1, 10, 0, 20), catchup=flag)
        assert cron.iso(d.fire) == "2026-01-01T10:00:00Z" and not d.catchup and len(d.missed) == 9
    # an ordinary evaluation a second after a slot: that slot, nothing missed
    d = cron.decide("*/5 * * * *", utc, ts(2026, 1, 1, 0, 4, 59), ts(2026, 1, 1, 0, 5, 1), catchup=False)
    assert cron.iso(d.fire) == "2026-01-01T00:05:00Z" and not d.missed and not d.coalesced


def test_a_long_outage_is_not_walked_slot_by_slot(cron):
    utc = cron.check_zone("UTC")
    d = cron.decide("* * * * * *", utc, ts(2025, 1, 1), ts(2026, 1, 1), catchup=True)  # a year of seconds
    assert cron.iso(d.fire) == "2026-01-01T00:00:00Z" and not d.catchup  # on time: the slot at `now`
    assert 0 < len(d.missed) <= 10_000


def test_next_slot_is_in_utc_from_the_zone(cron):
    tokyo = cron.check_zone("Asia/Tokyo")
    assert cron.iso(cron.next_slot("0 9 * * *", tokyo, ts(2026, 6, 1, 1))) == "2026-06-02T00:00:00Z"
