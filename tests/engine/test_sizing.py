"""A retry that grew past its lane's nodes (pwe/engine/sizing.py): the attempt goes to the
host's partition whose nodes hold it, ``grow: {cap: true}`` holds it to the largest node,
and where no node holds it the engine fails it at once with one line naming the request
and the largest node. Real runs on a host of two partitions of this machine (a local host
whose hosts file states them: its pilots are processes here, each lane its own); the
members write their own ledger, and the journal says which lane's pilot ran each attempt.
(The same on the four-node SLURM, with a real partition and a real kill for memory:
tests/cluster/test_cluster.py.)"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter

import pytest

from helpers import (alive, engine_pid, one_line_error, read_journal, run_cli, show, by_key, status, no_traceback,
                     wait_for)

HOSTS = """\
hosts:
  parts:
    protocol: local
    cores_per_node: 2
    memory_per_node: 2000
    partitions:
      - {name: small, memory_per_node: 500}
      - {name: big}
"""

#: member 2's first attempt fails (exit 3); every attempt writes a line to the ledger first
WF = """\
name: grows
properties: {{ledger: {ledger}, gate: {gate}}}
defaults: {{host: parts}}
nodes:
  a:
    parameters: {{k: {{range: [0, 4]}}}}
    run: 'echo "$PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}; [ "$PWE_ATTEMPT" -gt 1 ] || [ {{{{ k }}}} -ne 2 ] || exit 3; [ "$PWE_MEMBER" -ne 2 ] || while [ ! -e {{{{ gate }}}} ]; do sleep 0.05; done'
    scheduling: {{memoryPerMember: 300}}
    retry: {{attempts: 3, on: [3], grow: {grow}}}
"""


def _setup(tmp_path, grow: str, gate: bool = True):
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    wf = tmp_path / "wf.yaml"
    wf.write_text(WF.format(ledger=tmp_path / "ledger", gate=tmp_path / "gate", grow=grow))
    if gate:
        (tmp_path / "gate").touch()
    return wf


def _ledger(tmp_path) -> Counter:
    return Counter(tuple(map(int, line.split())) for line in (tmp_path / "ledger").read_text().splitlines())


def _lanes(run) -> dict[str, str]:
    return {r["p"]: r["lane"] for r in read_journal(run) if r["e"] == "pilot"}


def _attempts(run) -> dict[tuple[int, int], dict]:
    """(member, attempt) -> its end record (the journal's)."""
    return {(r["m"], r["a"]): r for r in read_journal(run) if r["e"] == "end"}


def test_a_grown_attempt_runs_on_a_pilot_of_the_partition_that_holds_it(tmp_path):
    # 300 MB fits small (500 MB nodes), where the node's pilots go; member 2's retry asks 1,200 MB:
    # small cannot hold it, big can
    wf = _setup(tmp_path, "{memoryPerMember: 4}")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--hosts", tmp_path / "hosts.yaml", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    # every member ran once; member 2 twice, its first attempt failing (the members' own ledger)
    assert _ledger(tmp_path) == Counter({(0, 1): 1, (1, 1): 1, (2, 1): 1, (2, 2): 1, (3, 1): 1})
    lanes, ends = _lanes(run), _attempts(run)
    assert ends[(2, 1)]["rc"] == 3 and ends[(2, 2)]["rc"] == 0
    assert lanes[ends[(2, 1)]["p"]] == "parts" and lanes[ends[(2, 2)]["p"]] == "parts/big", (lanes, ends)
    assert {lanes[ends[(m, 1)]["p"]] for m in (0, 1, 3)} == {"parts"}
    asks = {(r["m"], r["a"]): r for r in read_journal(run) if r["e"] == "assign"}
    assert asks[(2, 2)].get("mem") == 1200, asks


def test_a_request_no_node_holds_fails_at_once_naming_the_request_and_the_largest_node(tmp_path):
    # x10: 3,000 MB: no node of the host (largest: big's 2,000 MB) holds it; failed with 1, not 3, it is not
    # retried again (retry.on: [3])
    wf = _setup(tmp_path, "{memoryPerMember: 10}")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--hosts", tmp_path / "hosts.yaml", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    no_traceback(err)
    # its later attempts never ran: only the first is in the ledger
    assert _ledger(tmp_path) == Counter({(0, 1): 1, (1, 1): 1, (2, 1): 1, (3, 1): 1})
    rec = by_key(show(run))[("a", 2)]
    assert rec["state"] == "failed"
    why = rec["why"]
    assert "cannot be placed" in why and "host 'parts'" in why and "partition big" in why, why
    assert "2,000 MB of memory per node < 3,000;" in why and "cap: true" in why, why
    assert "\n" not in why
    # no pilot of big was started for it
    assert set(_lanes(run).values()) == {"parts"}
    rc, out, err = run_cli("explain", run, "a:2", "--no-ask", cwd=tmp_path)
    assert rc == 0, err
    assert "does not fit any node: this attempt asks more than any node of host 'parts' has" in out, out


def test_cap_holds_a_grown_request_to_the_largest_node(tmp_path):
    wf = _setup(tmp_path, "{memoryPerMember: 10, cap: true}")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--hosts", tmp_path / "hosts.yaml", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    assert _ledger(tmp_path)[(2, 2)] == 1
    asks = {(r["m"], r["a"]): r for r in read_journal(run) if r["e"] == "assign"}
    assert asks[(2, 2)].get("mem") == 2000, asks  # (3,000 asked, held to the largest node's 2,000)
    ends, lanes = _attempts(run), _lanes(run)
    assert lanes[ends[(2, 2)]["p"]] == "parts/big"


def test_a_resumed_engine_takes_up_the_pilot_of_the_grown_lane(tmp_path, reaper):
    """kill -9 of the engine while member 2's grown attempt runs on the big lane's pilot:
    the resumed engine makes that lane again and takes its pilot up; member 2 ran its
    second attempt once (the ledger), and the run ends well."""
    wf = _setup(tmp_path, "{memoryPerMember: 4}", gate=False)
    run = tmp_path / "run"
    rc, out, err = run_cli("submit", wf, "--hosts", tmp_path / "hosts.yaml", "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    pid = wait_for(lambda: engine_pid(run), what="the engine")
    wait_for(lambda: (tmp_path / "ledger").exists() and (2, 2) in _ledger(tmp_path), timeout=120,
             what="member 2's second attempt to start")
    reaper(run, pid)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), what="the killed engine to be gone")
    (tmp_path / "gate").touch()
    rc, out, err = run_cli("resume", run, cwd=tmp_path, timeout=300)
    assert rc == 0, f"{out}\n{err}"
    assert _ledger(tmp_path) == Counter({(0, 1): 1, (1, 1): 1, (2, 1): 1, (2, 2): 1, (3, 1): 1})
    ends, lanes = _attempts(run), _lanes(run)
    assert ends[(2, 2)]["rc"] == 0 and lanes[ends[(2, 2)]["p"]] == "parts/big", (ends, lanes)
    # the end came from the pilot the killed engine had started there, taken up again
    started = [r["p"] for r in read_journal(run) if r["e"] == "start" and r["m"] == 2 and r["a"] == 2]
    assert started == [ends[(2, 2)]["p"]], started
    # ... as a pilot of its own lane (the engine's last word, state.json: its lanes and their pilots)
    lanes_seen = json.loads((run / "state.json").read_text())["lanes"]
    assert "parts/big" in lanes_seen, lanes_seen
    assert status(run)["phase"] == "succeeded"


@pytest.mark.parametrize("cap", ['"yes"', "1", "[true]"])
def test_cap_that_is_not_a_boolean_is_one_line(tmp_path, cap):
    wf = _setup(tmp_path, f"{{memoryPerMember: 2, cap: {cap}}}")
    err = one_line_error(*run_cli("validate", wf, cwd=tmp_path))
    assert "wf.yaml:" in err and "cap" in err, err


def test_cap_in_xml_says_what_yaml_says(write):
    from pwe.workflow.load import load_workflow

    y = write("name: g\nnodes:\n  a:\n    run: 'true'\n"
              "    retry: {attempts: 2, grow: {memoryPerMember: 2, cap: true}}\n")
    x = write('<workflow name="g"><node id="a"><run>true</run>'
              '<retry attempts="2"><grow memoryPerMember="2" cap="true"/></retry></node></workflow>', "wf.xml")
    wx, wy = load_workflow(x)[0], load_workflow(y)[0]
    assert wx == wy and wx.nodes["a"].retry.grow.cap is True


def test_pwe_set_past_the_partition_sends_what_it_names_to_a_partition_that_holds_it(tmp_path):
    """pwe set memoryPerMember=1200 on a node whose pilots go to small (500 MB nodes): held
    by big's nodes, so it is taken (a value no node of the host holds is refused, one line),
    and the member pwe retry runs again goes to a pilot of big, asking 1,200 MB."""
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: sets\ndefaults: {host: parts}\nnodes:\n  a:\n    parameters: {k: {range: [0, 3]}}\n"
                  f"    run: 'echo \"$PWE_MEMBER $PWE_ATTEMPT\" >> {ledger}; [ $PWE_ATTEMPT -gt 1 ] || [ {{{{ k }}}} -ne 1 ]'\n"
                  "    scheduling: {memoryPerMember: 300}\n")
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--hosts", tmp_path / "hosts.yaml", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    err = one_line_error(*run_cli("set", run, "memoryPerMember=3000", cwd=tmp_path))
    assert "any node of host 'parts'" in err and "2,000 MB of memory at most" in err, err
    rc, out, err = run_cli("set", run, "memoryPerMember=1200", cwd=tmp_path)
    assert rc == 0, err
    rc, out, err = run_cli("retry", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    assert _ledger(tmp_path) == Counter({(0, 1): 1, (1, 1): 1, (1, 2): 1, (2, 1): 1})
    ends, lanes = _attempts(run), _lanes(run)
    assert ends[(1, 2)]["rc"] == 0 and lanes[ends[(1, 2)]["p"]] == "parts/big", (ends, lanes)
    asks = {(r["m"], r["a"]): r for r in read_journal(run) if r["e"] == "assign"}
    assert asks[(1, 2)].get("mem") == 1200, asks
