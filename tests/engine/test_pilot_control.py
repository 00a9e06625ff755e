"""More pilots for a running run (``pwe pilot add / drain / list``) and per-node setup
(``setup_per_node``), end to end: the real SLURM for pilot jobs, the four ssh nodes for
per-node setup, the members' own ledger for what ran where and how often."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from helpers import ROOT, ledger_counts, read_journal, run_cli, wait_for

ENV = dict(os.environ, PYTHONPATH=str(ROOT))

#: n members that append "start NODE INDEX ATTEMPT HOSTNAME" and "end ..." to a ledger
LEDGER = """
name: {name}
properties: {{ledger: {ledger}}}
defaults:
  host: {host}
  scheduling: {{maxWallTime: 5}}
{defaults}
nodes:
  m:
    parameters: {{i: {{range: [0, {n}]}}}}
    run: echo "start $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT $(hostname)" >> {{{{ ledger }}}}; sleep {sleep} && echo "end $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT $(hostname)" >> {{{{ ledger }}}}
"""


def workflow(tmp_path, n, sleep, host="local", defaults="", name="helpers"):
    ledger = tmp_path / "ledger"
    wf = tmp_path / "wf.yaml"
    wf.write_text(LEDGER.format(name=name, ledger=ledger, host=host, n=n, sleep=sleep, defaults=defaults))
    return wf, ledger


def once_each(ledger, n):
    """Every member started and ended exactly once, in its first attempt (ledger's word)."""
    starts, ends = ledger_counts(ledger, attempts=True)
    want = Counter({("m", str(i), "1"): 1 for i in range(n)})
    # (the hostname after the attempt is dropped by ledger_counts' key: node, index, attempt, host)
    got_s = Counter(k[:3] for k in starts.elements())
    got_e = Counter(k[:3] for k in ends.elements())
    assert got_s == want, got_s - want or want - got_s
    assert got_e == want, got_e - want or want - got_e


def events(run_dir, pilot):
    path = Path(run_dir) / "pilots" / pilot / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def started(run_dir, pilot):
    return [e for e in events(run_dir, pilot) if e["k"] == "start"]


def submit(wf, run_dir, cwd, *extra):
    rc, out, err = run_cli("submit", wf, "--run-dir", run_dir, *extra, cwd=cwd)
    assert rc == 0, err
    return out.strip()


def wait_end(run_dir, timeout=240):
    wait_for(lambda: b'"e":"finish"' in (Path(run_dir) / "journal.jsonl").read_bytes(), timeout, "the run's end")
    from pwe.runstate.locks import EngineLock

    wait_for(lambda: not EngineLock(Path(run_dir)).holder(), 30, "the engine to leave")


# -- pwe pilot add / drain on the real SLURM ------------------------------------------------

SLURM_HOSTS = """
hosts:
  small:
    protocol: slurm
    cores_per_node: 2
    max_nodes: 1
    max_pilots: 1
"""


def test_pilot_add_and_drain_on_real_slurm(slurm_cluster, tmp_path):
    """A run on a SLURM host allowing one pilot job: `pwe pilot add` submits a second job,
    which joins and takes members; `pwe pilot drain p1` while p1's members run: p1 takes
    nothing new, hands back what it held unstarted, finishes what ran and leaves. The
    ledger: every member ran once, in its first attempt."""
    job = add_and_drain(tmp_path, SLURM_HOSTS, "small")
    assert slurm_cluster.job_state(job) in (None, "RUNNING", "COMPLETING", "COMPLETED")  # (None: forgotten)


HEAD_HOSTS = """
hosts:
  head:
    protocol: ssh
    contact: ssh://root@127.0.0.1:2222
    identity_file: /var/tmp/pwe-ssh/id_ed25519
    known_hosts: /var/tmp/pwe-ssh/known_hosts
    cores_per_node: 2
    max_pilots: 1
"""


def test_pilot_add_and_drain_on_an_interactive_head_node(ssh_nodes, tmp_path):
    """The same through the ssh protocol (pilots under nohup on a head node, their job ids
    pids): the second pilot is one more such process."""
    add_and_drain(tmp_path, HEAD_HOSTS, "head")


def add_and_drain(tmp_path, hosts_text, host):
    """Submit a run of 24 members to ``host`` (max_pilots 1), add a pilot, drain p1 while
    its members run, and check from the ledger and the pilots' own events; the added job."""
    (tmp_path / "hosts.yaml").write_text(hosts_text)
    n = 24
    wf, ledger = workflow(tmp_path, n, 1.5, host=host, name="addjob")
    run_dir = tmp_path / "run"
    submit(wf, run_dir, tmp_path)
    wait_for(lambda: started(run_dir, "p1"), 120, "p1's first member")
    rc, out, err = run_cli("pilot", "add", run_dir, "--json", cwd=tmp_path)
    assert rc == 0, err
    added = json.loads(out)
    assert added["ok"] and added["pilot"] == "p2" and added["job"], added
    assert added["job"] != next(r["job"] for r in read_journal(run_dir) if r["e"] == "pilot" and r["p"] == "p1")
    wait_for(lambda: started(run_dir, "p2"), 120, "the added pilot's first member")
    # drain p1 while its members run
    running = {(e["n"], e["m"]) for e in started(run_dir, "p1")} - \
        {(e["n"], e["m"]) for e in events(run_dir, "p1") if e["k"] == "end"}
    assert running
    rc, out, err = run_cli("pilot", "drain", run_dir, "p1", "--json", cwd=tmp_path)
    assert rc == 0, err
    assert json.loads(out)["ok"]
    rc, out, err = run_cli("pilot", "list", run_dir, "--json", cwd=tmp_path)
    assert rc == 0, err
    listed = {r["pilot"]: r for r in json.loads(out)}
    assert listed["p1"]["state"] in ("draining", "gone") and listed["p2"]["added"], listed
    wait_end(run_dir)
    journal = read_journal(run_dir)
    assert [r for r in journal if r["e"] == "pilot_drain" and r["p"] == "p1"]
    p1 = events(run_dir, "p1")
    assert [e for e in p1 if e["k"] == "down"][-1]["why"] == "leave"
    drain_at = next(r["t"] for r in journal if r["e"] == "pilot_drain")
    # what p1 ran when it was drained, it finished (not killed, not handed back)
    ends = {(e["n"], e["m"]): e for e in p1 if e["k"] == "end"}
    assert all(ends[k]["rc"] == 0 for k in running)
    # nothing started on p1 after the drain reached it (all its starts before its last back/down)
    down_t = [e for e in p1 if e["k"] == "down"][-1]["t"]
    assert all(e["t"] <= down_t for e in started(run_dir, "p1"))
    assert any(e["t"] > drain_at for e in started(run_dir, "p2"))  # the rest went to p2
    backs = [e for e in p1 if e["k"] == "back"]
    assert all(e["why"] == "the pilot is drained" for e in backs)
    once_each(ledger, n)  # nothing lost, nothing twice, no attempt spent
    rc, out, err = run_cli("status", run_dir, cwd=tmp_path)
    assert rc == 0 and "succeeded" in out, out + err
    return added["job"]


# -- setup_per_node on four ssh nodes -------------------------------------------------------

FOUR_HOSTS = """
hosts:
  four:
    protocol: local
    cores_per_node: 2
    nodes: [pwe-n1, pwe-n2, pwe-n3, pwe-n4]
    ssh_config: /var/tmp/pwe-ssh/ssh_config
"""


def test_setup_per_node_that_fails_on_one_node_keeps_members_off_it(ssh_nodes, tmp_path):
    (tmp_path / "hosts.yaml").write_text(FOUR_HOSTS)
    n = 24
    setup = ("  setup_per_node:\n    - echo \"staging on $(hostname)\"\n"
             "    - test \"$(hostname)\" != pwe-n3\n    - touch {}/staged-$(hostname)\n".format(tmp_path))
    run_dir = tmp_path / "run"
    # Each member waits until the pilot has told all four setups' outcomes: the run then
    # outlasts every setup, however slow one node's is on a busy machine (a pilot whose
    # members are all done is let go at once, and a setup still running then is killed).
    told = run_dir / "pilots" / "p1" / "events.jsonl"
    wait = f'1 && until [ "$(grep -c node_setup {told})" -ge 4 ]; do sleep 0.2; done'
    wf, ledger = workflow(tmp_path, n, wait, host="four", defaults=setup, name="four")
    submit(wf, run_dir, tmp_path)

    def status_says():
        rc, out, err = run_cli("status", run_dir, cwd=tmp_path)
        return "pilot p1: setup_per_node failed on pwe-n3: no member that needs it runs there" in out

    wait_for(status_says, 60, "pwe status to name the node")  # (while the run runs)
    wait_end(run_dir)
    assert b'"finish","ok":true' in (run_dir / "journal.jsonl").read_bytes()
    once_each(ledger, n)
    hosts = Counter(line.split()[4] for line in ledger.read_text().splitlines() if line.startswith("start"))
    assert "pwe-n3" not in hosts and set(hosts) <= {"pwe-n1", "pwe-n2", "pwe-n4"}, hosts
    assert sum(hosts.values()) == n
    # the setup ran once on each node (its output kept), and ran to its end except on pwe-n3
    logs = {p.name.split("-")[1] + "-" + p.name.split("-")[2]: p for p in (run_dir / "pilots" / "p1").glob("setup-*")}
    assert sorted(logs) == ["pwe-n1", "pwe-n2", "pwe-n3", "pwe-n4"]
    texts = {name: p.read_text() for name, p in logs.items()}
    # (a node's shell may print its own start-up complaints first, e.g. pyenv's rehash racing
    # another ssh session: the setup's line is there exactly once, and last)
    assert all(t.endswith(f"staging on {name}\n") and t.count("staging on") == 1 for name, t in texts.items()), texts
    assert sorted(p.name for p in tmp_path.glob("staged-*")) == ["staged-pwe-n1", "staged-pwe-n2", "staged-pwe-n4"]
    # seen in pwe events (the pilot's node_setup messages and the journal's note)
    rc, out, err = run_cli("events", run_dir, "--json", cwd=tmp_path)
    assert rc == 0, err
    evs = [json.loads(line) for line in out.splitlines()]
    setups = {e["node"]: e["rc"] for e in evs if e.get("k") == "node_setup"}
    assert setups["pwe-n3"] != 0 and all(setups[h] == 0 for h in ("pwe-n1", "pwe-n2", "pwe-n4")), setups
    assert any(e.get("record") == "note" and "setup_per_node failed on node pwe-n3" in e.get("what", "")
               for e in evs)


def test_setup_that_fails_on_every_node_hands_members_back_and_stops(tmp_path):
    """No node left for them: the members go back to the engine (never failed, no attempt
    spent), the next pilots try; after 3 pilots in a row the run stops, resumable."""
    wf, ledger = workflow(tmp_path, 4, 0, defaults="  setup_per_node: ['echo cannot stage; exit 3']", name="nosetup")
    run_dir = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--run-dir", run_dir, cwd=tmp_path, timeout=120)
    assert rc == 3, err
    last = err.strip().splitlines()[-1]
    assert "setup_per_node failed on every node of 3 pilots in a row" in last and "Traceback" not in err
    assert not ledger.exists()  # no member ran
    from pwe.observe.results import load_state

    _, st = load_state(run_dir)
    ns = st.nodes["m"]
    assert list(ns.attempt) == [0, 0, 0, 0] and ns.counts[0] + ns.counts[1] == 4  # waiting/ready, none failed
    assert (run_dir / "pilots" / "p1" / f"setup-{os.uname().nodename}-{_sid(['echo cannot stage; exit 3'])}.log") \
        .read_text() == "cannot stage\n"


def _sid(lines):
    import hashlib

    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


# -- pwe pilot on this machine: add, drain, list, and bad input -----------------------------

def test_pilot_add_and_drain_here_lose_nothing(tmp_path):
    n = 40
    wf, ledger = workflow(tmp_path, n, 0.4, name="here")
    run_dir = tmp_path / "run"
    submit(wf, run_dir, tmp_path, "--cores", "2")
    wait_for(lambda: len(started(run_dir, "p1")) >= 2, 60, "p1's members")
    rc, out, err = run_cli("pilot", "add", run_dir, cwd=tmp_path)
    assert rc == 0 and "pilot p2 added on local" in out, err
    rc, out, err = run_cli("pilot", "drain", run_dir, "p1", cwd=tmp_path)
    assert rc == 0 and "pilot p1 drains" in out, err
    wait_end(run_dir)
    p1 = events(run_dir, "p1")
    assert [e for e in p1 if e["k"] == "down"][-1]["why"] == "leave"
    assert [e for e in p1 if e["k"] == "back" and e["why"] == "the pilot is drained"]  # it held more than it ran
    assert started(run_dir, "p2")
    once_each(ledger, n)
    rc, out, err = run_cli("pilot", "list", run_dir, "--json", cwd=tmp_path)
    rows = json.loads(out)
    assert [(r["pilot"], r["state"], r["added"]) for r in rows] == [("p1", "gone", False), ("p2", "gone", True)]
    assert sum(r["done"] for r in rows) == n


def test_pilot_commands_say_what_is_wrong_in_one_line(tmp_path):
    wf, _ = workflow(tmp_path, 30, 0.5, name="bad")
    run_dir = tmp_path / "run"
    # no engine runs the run: one line, exit 2, nothing written
    quick = tmp_path / "quick.yaml"
    quick.write_text("name: quick\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("run", quick, "--run-dir", tmp_path / "done", cwd=tmp_path)
    assert rc == 0, err
    for args in (("add", tmp_path / "done"), ("drain", tmp_path / "done", "p1")):
        rc, out, err = run_cli("pilot", *args, cwd=tmp_path)
        assert rc == 2 and err.strip().startswith("no engine is running") and len(err.strip().splitlines()) == 1, err
    assert not any((tmp_path / "done" / "control").glob("pilot-*"))
    submit(wf, run_dir, tmp_path, "--cores", "2")
    wait_for(lambda: started(run_dir, "p1"), 60, "p1's members")
    cases = [
        (("add", run_dir, "--host", "nosuch"), "--host nosuch: unknown host 'nosuch'"),
        (("add", run_dir, "--nodes", "2"), "--nodes 2: host 'local' (local) allocates no nodes"),
        (("drain", run_dir, "p9"), "this run has no pilot 'p9' (its pilots: p1)"),
    ]
    for args, said in cases:
        rc, out, err = run_cli("pilot", *args, cwd=tmp_path)
        assert rc == 2 and err.strip().startswith(said) and len(err.strip().splitlines()) == 1, (args, err)
        assert "Traceback" not in err
    # a request not signed with the run's secret is refused, never acted on
    forged = run_dir / "control" / "pilot-0000.json"
    forged.write_text(json.dumps({"req": "add", "host": "local", "id": "0000", "t": 1, "mac": "0" * 64}))
    wait_for(lambda: (run_dir / "control" / "pilot-0000.answer").exists(), 30, "the engine's answer")
    assert not json.loads((run_dir / "control" / "pilot-0000.answer").read_text())["ok"]
    wait_end(run_dir)
    journal = read_journal(run_dir)
    assert [r["p"] for r in journal if r["e"] == "pilot"] == ["p1"]
    assert any(r["e"] == "note" and "bad signature" in r["what"] for r in journal)


def test_setup_per_node_bad_input_is_one_line(write):
    for value in ("module load x", "[[nested]]", "['ok', '']"):
        wf = write(f"name: x\ndefaults:\n  setup_per_node: {value}\nnodes:\n  a:\n    run: 'true'\n")
        rc, out, err = run_cli("validate", wf)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "setup_per_node" in err and ":3:" in err, err


def test_setup_per_node_xml_and_yaml_make_the_same_plan(write):
    from pwe.planning.plan import plan_workflow
    from pwe.engine.tasks import setup_sets

    y = write("name: s\ndefaults:\n  setup_per_node: [module load x, stage img]\nnodes:\n  a:\n    run: 'true'\n"
              "  b:\n    run: 'true'\n    setup_per_node: []\n  c:\n    run: 'true'\n    setup_per_node: [warm]\n")
    x = write("""<workflow name="s">
  <defaults><setup_per_node><line>module load x</line><line>stage img</line></setup_per_node></defaults>
  <node id="a"><run>true</run></node>
  <node id="b"><run>true</run><setup_per_node/></node>
  <node id="c"><run>true</run><setup_per_node><line>warm</line></setup_per_node></node>
</workflow>
""", "wf.xml")
    py, px = plan_workflow(y), plan_workflow(x)
    assert py.workflow == px.workflow
    sets = setup_sets(py)
    assert sorted((lines, nids) for lines, nids in sets.values()) == [(["module load x", "stage img"], ["a"]),
                                                                    (["warm"], ["c"])]
    assert setup_sets(px) == sets


def test_a_resumed_engine_knows_added_and_draining_pilots(tmp_path):
    """kill -9 of the engine after `pilot add` and `pilot drain`: the resumed engine
    reattaches the added pilot, gives the drained one nothing more, and the ledger shows
    every member once."""
    import signal

    from pwe.runstate.locks import EngineLock

    n = 40
    wf, ledger = workflow(tmp_path, n, 0.3, name="resume")
    run_dir = tmp_path / "run"
    submit(wf, run_dir, tmp_path, "--cores", "1")
    wait_for(lambda: started(run_dir, "p1"), 60, "p1's members")
    assert run_cli("pilot", "add", run_dir, cwd=tmp_path)[0] == 0
    assert run_cli("pilot", "drain", run_dir, "p1", cwd=tmp_path)[0] == 0
    os.kill(EngineLock(run_dir).holder()["pid"], signal.SIGKILL)
    wait_for(lambda: not EngineLock(run_dir).holder(), 30, "the engine's end")
    rc, out, err = run_cli("resume", run_dir, cwd=tmp_path, timeout=120)
    assert rc == 0, err
    journal = read_journal(run_dir)
    resumed = max(i for i, r in enumerate(journal) if r["e"] == "resume")
    assert not [r for r in journal[resumed:] if r["e"] == "assign" and r["p"] == "p1"]  # still draining
    assert [r for r in journal[:resumed] if r["e"] == "pilot" and r["p"] == "p2" and r.get("added")]
    assert not [r for r in journal[resumed:] if r["e"] == "pilot_gone" and r["p"] == "p2"
                and "lost" in (r.get("why") or "")]  # reattached, not lost
    once_each(ledger, n)
