"""Limits on user-defined resources (issue 14), end to end.

Members append a start line and an end line, each with ``date +%s.%N``, to a ledger; the
test works out the most members holding a resource at once from those intervals, and
checks it equals the limit: never above it, and reached (so the check could fail). The
runs have more cores than the limit, so only the limit keeps the count down.
"""

import json
import os
import signal
from pathlib import Path

import pytest

from helpers import let_time_pass, most_at_once, run_cli, wait_for

RUN = ('echo "start $PWE_NODE $PWE_MEMBER $(date +%s.%N)" >> {{ ledger }}; sleep SLEEP; '
       'echo "end $PWE_NODE $PWE_MEMBER $(date +%s.%N)" >> {{ ledger }}')


def node(name: str, n: int, sleep: float, resources: str = "", extra: str = "") -> str:
    res = "    resources: {" + resources + "}\n" if resources else ""
    return ("  " + name + ":\n    parameters: {i: {range: [0, " + str(n) + "]}}\n" + res + extra
            + "    run: '" + RUN.replace("SLEEP", str(sleep)) + "'\n")


def workflow(path: Path, ledger: Path, nodes: str, limits: str = "") -> Path:
    head = "name: lic\nproperties: {ledger: " + str(ledger) + "}\n" + ("limits: {" + limits + "}\n" if limits else "")
    path.write_text(head + "nodes:\n" + nodes)
    return path


def intervals(ledger: Path, nodes: set[str]) -> dict[tuple[str, str], list[float]]:
    """(node, member) -> [start, end] from the ledger; each member started and ended once."""
    seen: dict[tuple[str, str], list[float]] = {}
    for line in ledger.read_text().splitlines():
        what, nid, m, t = line.split()
        if nid not in nodes:
            continue
        iv = seen.setdefault((nid, m), [])
        assert len(iv) == (0 if what == "start" else 1), f"{nid}[{m}] {what} out of place: ran twice?"
        iv.append(float(t))
    return seen


def test_a_run_limit_holds_across_two_hosts_and_is_reached(tmp_path):
    """`limits: {license: 3}` for the run; `a` runs here and `b` on a second host (its own
    pilot): together never more than 3 members holding a licence, on 8 cores; `free`
    needs none and runs beside them."""
    ledger = tmp_path / "ledger"
    (tmp_path / "hosts.yaml").write_text("hosts:\n  other: {protocol: local, cores_per_node: 4}\n")
    wf = workflow(tmp_path / "wf.yaml", ledger,
                  node("a", 6, 0.4, "license: 1") + node("b", 6, 0.4, "license: 1", "    host: other\n")
                  + node("free", 4, 0.4), limits="license: 3")
    rc, out, err = run_cli("run", wf, "--cores", "4", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    held = intervals(ledger, {"a", "b"})
    assert len(held) == 12
    assert most_at_once(held.values()) == 3
    assert most_at_once(intervals(ledger, {"a", "b", "free"}).values()) > 3  # (the cores were there for more)


def test_no_pilot_is_started_for_members_a_limit_holds_back(tmp_path):
    """`limits: {license: 1}`: `hog` holds the one licence here for 3 s; meanwhile `a`'s
    members, on host `other`, become ready (after `quick`) and all need it. No pilot is
    started on `other` until the licence is free: on a batch host that pilot would sit in
    the queue, start, and idle out with nothing it may run."""
    ledger = tmp_path / "ledger"
    (tmp_path / "hosts.yaml").write_text("hosts:\n  other: {protocol: local, cores_per_node: 2}\n")
    wf = workflow(tmp_path / "wf.yaml", ledger,
                  node("hog", 1, 3, "license: 1") + node("quick", 1, 0.1)
                  + node("a", 2, 0.2, "license: 1", "    host: other\n    after: [quick]\n"), limits="license: 1")
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    journal = [json.loads(line) for line in (tmp_path / "run" / "journal.jsonl").read_text().splitlines()]
    hog_end = next(r["t"] for r in journal if r["e"] == "end" and r["n"] == "hog")
    quick_end = next(r["t"] for r in journal if r["e"] == "end" and r["n"] == "quick")
    assert quick_end < hog_end - 1  # (a's members were ready, and held, for over a second)
    other = [r for r in journal if r["e"] == "pilot" and r.get("lane") == "other"]
    assert len(other) == 1 and other[0]["t"] >= hog_end, (other, hog_end)
    held = intervals(ledger, {"hog", "a"})
    assert len(held) == 3 and most_at_once(held.values()) == 1


def test_a_host_limit_and_a_run_limit_both_apply(tmp_path):
    """The host says license: 2, the run 4: on that host 2 at once."""
    ledger = tmp_path / "ledger"
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  lab: {protocol: local, cores_per_node: 6, limits: {license: 2, seat: 1}}\n")
    wf = workflow(tmp_path / "wf.yaml", ledger,
                  node("a", 8, 0.3, "license: 1", "    host: lab\n")
                  + node("s", 3, 0.2, "seat: 1", "    host: lab\n"), limits="license: 4")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    assert most_at_once(intervals(ledger, {"a"}).values()) == 2
    assert most_at_once(intervals(ledger, {"s"}).values()) == 1
    rc, out, err = run_cli("plan", wf, "--json", cwd=tmp_path)
    assert rc == 0, err
    assert json.loads(out)["limits"] == {"run": {"license": 4}, "hosts": {"lab": {"license": 2, "seat": 1}},
                                         "nodes": {"a": {"license": 1}, "s": {"seat": 1}}}


def test_kill_9_of_the_engine_and_resume_never_exceed_the_limit(tmp_path):
    """The engine is killed (-9) while members hold licences; its pilot goes on with what it
    was given; the resumed engine counts what that pilot still holds (rebuilt from the
    journal) before it hands out more. Every member runs once, never more than 2 at once."""
    ledger = tmp_path / "ledger"
    wf = workflow(tmp_path / "wf.yaml", ledger, node("a", 10, 0.8, "license: 2"), limits="license: 4")
    run_dir = tmp_path / "run"
    rc, out, err = run_cli("submit", wf, "--cores", "6", "--run-dir", run_dir, cwd=tmp_path)
    assert rc == 0, err

    def started() -> int:
        return ledger.read_text().count("start ") if ledger.exists() else 0
    wait_for(lambda: started() >= 3, what="three members to start")
    engine_pid = json.loads((run_dir / "engine.lock").read_text())["pid"]
    os.kill(engine_pid, signal.SIGKILL)
    assert started() < 10, "the run got too far before the engine could be killed"
    let_time_pass(0.3, "the pilot goes on without the engine meanwhile")
    rc, out, err = run_cli("resume", run_dir, cwd=tmp_path)
    assert rc == 0, err
    held = intervals(ledger, {"a"})
    assert len(held) == 10 and all(len(iv) == 2 for iv in held.values())
    assert most_at_once(held.values()) == 2  # license 4, 2 each


@pytest.mark.parametrize("text,expect", [
    ("limits: {license: 2}\nnodes:\n  a:\n    resources: {license: 3}\n    run: 'true'\n",
     "wf.yaml:5: node 'a': a member needs 3 of 'license' but the workflow's limits allow 2 at once"),
    ("limits: {license: 2}\nnodes:\n  a:\n    resources: {licence: 1}\n    run: 'true'\n",
     "wf.yaml:5: node 'a': resource 'licence' has no limit (did you mean 'license'?)"),
    ("nodes:\n  a:\n    resources: {license: 1}\n    host: lab\n    run: 'true'\n",
     ""),  # the host's limit covers it: valid
    ("nodes:\n  a:\n    resources: {license: 3}\n    host: lab\n    run: 'true'\n",
     "wf.yaml:4: node 'a': a member needs 3 of 'license' but the limits of host 'lab' allow 2 at once"),
    ("limits: {license: 0}\nnodes:\n  a:\n    run: 'true'\n", "wf.yaml:2: 'limits.license': must be at least 1"),
])
def test_validate_refuses_a_resource_no_limit_allows(tmp_path, text, expect):
    # (the line named is the node's resources:, not the node's own)
    (tmp_path / "hosts.yaml").write_text("hosts:\n  lab: {protocol: local, limits: {license: 2}}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: lic\n" + text)
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    if not expect:
        assert rc == 0, err
        return
    assert rc == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and expect in err, err


def test_xml_and_yaml_say_the_same_limits_resources_and_order(tmp_path):
    from pwe.planning.plan import plan_workflow

    (tmp_path / "wf.yaml").write_text(
        "name: lic\norder: fifo\nlimits: {license: 3, seat: 1}\nnodes:\n  a:\n"
        "    resources: {license: 1, seat: 1}\n    run: 'true'\n")
    (tmp_path / "wf.xml").write_text(
        '<workflow name="lic" order="fifo">\n  <limits><limit name="license">3</limit><limit name="seat">1</limit>'
        '</limits>\n  <node id="a">\n    <resource name="license">1</resource>\n    <resource name="seat">1'
        '</resource>\n    <run>true</run>\n  </node>\n</workflow>\n')
    y, x = plan_workflow(tmp_path / "wf.yaml"), plan_workflow(tmp_path / "wf.xml")
    assert x.workflow == y.workflow
    assert x.workflow.limits == {"license": 3, "seat": 1} and x.workflow.order == "fifo"
    (tmp_path / "bad.xml").write_text('<workflow name="lic">\n  <node id="a">\n    <resource name="license">0'
                                      '</resource>\n    <run>true</run>\n  </node>\n</workflow>\n')
    rc, out, err = run_cli("validate", tmp_path / "bad.xml", cwd=tmp_path)
    assert rc == 2 and "bad.xml:3:" in err and len(err.strip().splitlines()) == 1, err


def test_a_host_limit_holds_in_a_slurm_pilot(slurm_cluster, tmp_path):
    """On the real SLURM: host `cluster` of examples/hosts.yaml says license: 2, the run 4.
    Its one pilot job has 8 cores; the members holding a licence run 2 at a time, the others
    beside them."""
    from helpers import EXAMPLES

    ledger = tmp_path / "ledger"
    wf = workflow(tmp_path / "wf.yaml", ledger,
                  node("a", 8, 0.5, "license: 1", "    scheduling: {maxWallTime: 5}\n")
                  + node("free", 4, 0.5, "", "    scheduling: {maxWallTime: 5}\n"), limits="license: 4")
    rc, out, err = run_cli("run", wf, "--host", "cluster", "--hosts", EXAMPLES / "hosts.yaml", "--run-dir",
                           tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    journal = [json.loads(line) for line in (tmp_path / "run" / "journal.jsonl").read_text().splitlines()]
    assert [r.get("batch") for r in journal if r["e"] == "pilot"] == ["slurm"]  # (one SLURM pilot job)
    held = intervals(ledger, {"a"})
    assert len(held) == 8
    assert most_at_once(held.values()) == 2
    assert most_at_once(intervals(ledger, {"a", "free"}).values()) > 2
