"""A run the service started, taken up from the command line anywhere: `pwe retry`,
`pwe resume` and `pwe pilot add` find it by its id and by a unique prefix (rundir.roots(),
the one finder), from a directory with no pwe-runs of its own (issue 22, item 7); and the
broker's password, given to `pwe service start`, is in nothing said and in no file or
command line others may read (item 9). The service is real (Celery worker and beat, the
embedded broker; Redis with its password for the last test), as in test_service.py.
"""

import json
import os
import re
import secrets
from pathlib import Path

from helpers import LEDGER_WF, ledger_counts, one_line_error, run_cli, Service, wait_for
import test_service

embedded = test_service.embedded  # (the fixture: this module's own embedded service)

#: Member 1 fails (exit 3) until the file `ok` exists; each member writes its start and end.
FLAKY_WF = """
name: flaky
properties: {{ledger: {ledger}, ok: {ok}}}
nodes:
  a:
    parameters: {{i: {{range: [0, 3]}}}}
    run: 'echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; test "$PWE_MEMBER" != 1 || test -e {{{{ ok }}}} || exit 3; echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}'
"""

#: Every member waits for the file `go`.
WAITING_WF = """
name: waiting
properties: {{ledger: {ledger}, go: {go}}}
nodes:
  a:
    parameters: {{i: {{range: [0, 4]}}}}
    run: 'echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; while [ ! -e {{{{ go }}}} ]; do sleep 0.05; done; echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}'
"""


def _elsewhere(svc, tmp_path):
    """`pwe` run from a directory with no pwe-runs: the run can only be the service's."""
    where = tmp_path / "elsewhere"
    where.mkdir()

    def pwe(*args, timeout=120):
        return run_cli(*args, cwd=where, env={"PWE_HOME": str(svc.home)}, timeout=timeout)
    return pwe


def test_retry_finds_a_service_run_by_prefix_and_id_and_reruns_only_its_failed_member(embedded, tmp_path):
    ledger, ok = tmp_path / "ledger", tmp_path / "ok"
    wf = tmp_path / "wf.yaml"
    wf.write_text(FLAKY_WF.format(ledger=ledger, ok=ok))
    run_id = embedded.ok("submit", "--service", wf).strip()
    embedded.wait_phase(run_id, ("failed",))
    record = embedded.dir / "submissions" / f"{run_id}.json"
    wait_for(lambda: json.loads(record.read_text()).get("final"), 30, "the service to take the run's end")
    starts, ends = ledger_counts(ledger, attempts=True)
    assert set(starts) == {("a", str(i), "1") for i in range(3)} and ("a", "1", "1") not in ends
    pwe = _elsewhere(embedded, tmp_path)
    ok.touch()
    rc, out, err = pwe("retry", run_id[:-2])  # a unique prefix
    assert rc == 0 and f"{run_id}: 3 done of 3" in out, (out, err)
    starts, ends = ledger_counts(ledger, attempts=True)
    want = {("a", "0", "1"): 1, ("a", "1", "1"): 1, ("a", "2", "1"): 1, ("a", "1", "2"): 1}
    assert starts == want and ends == {k: 1 for k in want if k != ("a", "1", "1")}, (starts, ends)
    rc, out, err = pwe("status", run_id, "--json")
    assert rc == 0 and json.loads(out)["phase"] == "succeeded", err
    # the service's own listing says what the run is now (it said "failed", its phase when it ended)
    assert embedded.run(run_id)["phase"] == "succeeded"
    # by its whole id: nothing failed, nothing runs again
    rc, out, err = pwe("retry", run_id)
    assert rc == 0 and f"{run_id}: 3 done of 3" in out, (out, err)
    assert ledger_counts(ledger, attempts=True)[0] == want


def test_pilot_add_and_resume_find_a_running_service_run_by_prefix_and_id(embedded, tmp_path):
    ledger, go = tmp_path / "ledger", tmp_path / "go"
    wf = tmp_path / "wf.yaml"
    wf.write_text(WAITING_WF.format(ledger=ledger, go=go))
    run_id = embedded.ok("submit", "--service", "--cores", "1", wf).strip()
    wait_for(lambda: ledger.exists() and "start" in ledger.read_text(), 90, "the run's first member")
    pwe = _elsewhere(embedded, tmp_path)
    prefix = run_id[:-2]
    rc, out, err = pwe("pilot", "add", prefix, "--json")
    got = json.loads(out or "{}")
    assert rc == 0 and got.get("ok") and got.get("pilot") == "p2" and got.get("host") == "local", (out, err)
    rc, out, err = pwe("pilot", "list", run_id, "--json")
    assert rc == 0, err
    rows = {r["pilot"]: r for r in json.loads(out)}
    assert rows["p2"]["added"] and not rows["p1"]["added"], rows
    # resume, by prefix, while the service's engine holds the run: found, and said taken (by the run's id)
    err = one_line_error(*pwe("resume", prefix))
    assert err.startswith(f"{run_id}: already taken by pid ") and f"pwe cancel {run_id}" in err, err
    go.touch()
    embedded.wait_phase(run_id)
    starts, ends = ledger_counts(ledger, attempts=True)
    want = {("a", str(i), "1"): 1 for i in range(4)}
    assert starts == want and ends == want, (starts, ends)
    # resume by its whole id once it ended: found, nothing runs again
    rc, out, err = pwe("resume", run_id)
    assert rc == 0 and f"{run_id}: 4 done of 4" in out, (out, err)
    assert ledger_counts(ledger, attempts=True) == (want, want)
    # a prefix of nothing the service or this directory has: one line naming where it looked
    err = one_line_error(*pwe("pilot", "add", "nosuchrun"))
    assert "no run 'nosuchrun'" in err and str(embedded.dir / "runs") in err, err


def test_a_broker_password_is_in_nothing_said_and_no_file_others_may_read(tmp_path, redis_url):
    url = re.sub(r"/\d*$", "", redis_url) + "/1"  # db 1 is the service's
    password = url.split("@")[0].rsplit(":", 1)[1]
    assert password, "the tests' Redis has a password"
    queue = f"pwe-test-{secrets.token_hex(4)}"
    svc = Service(tmp_path / "server")
    try:
        said = [svc.ok("service", "start", "--broker", url, "--queue", queue)]
        wf = tmp_path / "wf.yaml"
        wf.write_text(LEDGER_WF.format(ledger=tmp_path / "ledger", n=2, sleep=0.05))
        run_id = svc.ok("submit", "--service", wf).strip()  # (config.json's broker and queue)
        svc.wait_phase(run_id)
        for args in (["service", "status"], ["service", "status", "--json"], ["runs"], ["runs", "--json"],
                     ["status", run_id, "--json"], ["submit", "--service", "--json", wf]):
            rc, out, err = svc.pwe(*args)
            assert rc == 0, (args, err)
            said.append(out + err)
        assert all(password not in text for text in said), said
        assert "***" in said[1]  # (the status names the broker, without its password)
        # no process of the service carries it on its command line (anyone may read /proc/PID/cmdline)
        for pid in svc.processes() + svc.engines():
            assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
        # files: the service's directory and its logs are owner-only; every file holding it is
        assert svc.dir.stat().st_mode & 0o077 == 0
        for name in ("service.log", "worker.log", "beat.log", "config.json"):
            assert (svc.dir / name).stat().st_mode & 0o077 == 0, name
        holding = [p for p in svc.home.rglob("*") if p.is_file() and not p.is_symlink()
                   and password.encode() in p.read_bytes()]
        assert holding == [svc.dir / "config.json"], holding
        assert all(os.stat(p).st_mode & 0o077 == 0 for p in holding)
    finally:
        svc.cleanup()
