"""The scheduling profile reaches what it should: each protocol acts on the fields
placement says it uses, and on no other; the profile's account wins over the host's;
submissionType is honoured or reported; `pwe plan` warns exactly as `pwe run` does.

Nothing here is submitted: hosts have contact local and the engine's submit is stubbed
where a test looks at the job script the engine would hand to the batch system.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from helpers import call_cli, run_cli
from protocols.registry import PROTOCOLS
from pwe.cli.main import cli
from pwe.workflow.model import Scheduling

#: a value for every scheduling field, each unlike its default
SAMPLE = {
    "account": "acct9", "queue": "q9", "maxWallTime": 33, "minWallTime": 1, "maxWallTimePerMember": 5,
    "minWallTimePerMember": 1, "maxCpus": 8, "minCpus": 200, "ranksPerMember": 2, "ranksPerNode": 1, "threadsPerRank": 2,
    "maxMembers": 3, "coreUsageRule": 2, "shareNodes": False, "maxTotalMemory": 4000, "minTotalMemory": 100,
    "nodeAttributes": "bigmem", "requestedStart": "2030-01-01T00:00", "stdout": "o.txt", "stderr": "e.txt",
    "stdin": "i.txt", "memoryPerMember": 100, "gpusPerMember": 1, "tmpPerMember": 10, "minNodes": 2, "maxNodes": 3, "qos": "high",
    "reservation": "resv9", "priority": 5, "jobName": "jn", "mailUser": "a@b.c", "mailOptions": "END",
}

HOST = "hosts:\n  h: {{protocol: {p}, cores_per_node: 4, gpus_per_node: 4, memory_per_node: 8000{extra}}}\n"


def _workflow(d, sched: dict, members: int = 100) -> object:
    wf = d / "wf.yaml"
    wf.write_text(f"name: w\nnodes:\n  m:\n    parameters: {{i: {{range: [0, {members}]}}}}\n    run: 'true'\n"
                  f"    scheduling: {json.dumps(sched)}\n")
    return wf


def observe(d, protocol: str, sched: dict) -> dict:
    """What the engine does with a 100-member node on a host of ``protocol``: the job
    script it submits (the pilot's arguments for ``local``), the task it sends for member
    0 (without the environment, which only mirrors the task), and how many members it
    gives one pilot."""
    from pwe.engine.loop import Engine, PilotHandle

    d.mkdir()
    # (an SGE host's pilots of more than one slot name its parallel environment)
    (d / "hosts.yaml").write_text(HOST.format(p=protocol, extra=", parallel_environment: smp" if protocol == "sge"
                                              else ""))
    engine = Engine.create(_workflow(d, sched), run_dir=d / "run", host="h")
    engine._load()
    try:
        lane = engine.lanes["h"]
        lane.ready.extend(engine.state.ready)
        engine.state.ready.clear()
        if lane.protocol.batch:
            lane.protocol.submit = lambda job, path: "123"  # submitted nowhere
            pilot = engine.work.submit(lane)
            script = (pilot.dir / "job.sh").read_text()
        else:
            (engine.dir / "pilots" / "p1").mkdir(parents=True)
            pilot = PilotHandle("p1", engine.dir / "pilots" / "p1", 0, "here", lane.cores, lane="h")
            script = " ".join(lane.pilot_args)
        task = engine.feeder.task("m", 0, 1)
        task.pop("env")
        task.pop("eb")  # (names the shared environment: it too only mirrors the task, and holds the run id)
        fed = engine.feeder.feed_pilot(pilot, lane)
        pilot.close()
    finally:
        engine.journal.close()
    # the run's own directory and id, as `pwe plan` shows them
    seen = json.dumps({"script": script, "task": task, "fed": fed})
    return json.loads(seen.replace(str(engine.dir), "RUN_DIR").replace(engine.run_id, "w-RUN"))


def test_every_field_has_a_sample():
    assert set(SAMPLE) == set(Scheduling.model_fields) - {"submissionType"}


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_a_protocol_uses_exactly_the_fields_placement_says_it_uses(tmp_path, protocol):
    """For each field: setting it changes what the engine submits or sends to the pilot
    if and only if placement lists it as used on that protocol (and so does not warn
    that it is not). The table cannot drift from the code."""
    from pwe.planning.placement import USED_SCHEDULING

    base = observe(tmp_path / "base", protocol, {})
    wrong = []
    for field, value in SAMPLE.items():
        if field == "gpusPerMember" and not PROTOCOLS[protocol].asks_gpus:
            continue  # refused in one line before anything is made (tests/planning/test_partition.py)
        acted = observe(tmp_path / field, protocol, {field: value}) != base
        claimed = field in USED_SCHEDULING[protocol]
        if acted != claimed:
            wrong.append(f"{field}: {'acted on' if acted else 'not acted on'} but "
                         f"{'listed as used' if claimed else 'reported as not used'}")
    assert not wrong, f"{protocol}: " + "; ".join(wrong)


@pytest.mark.parametrize("protocol, directive", [("slurm", "#SBATCH --account=prof"), ("pbs", "#PBS -A prof"),
                                                 ("loadleveler", "# @ account_no = prof")])
def test_the_profiles_account_wins_over_the_hosts(tmp_path, protocol, directive):
    (tmp_path / "hosts.yaml").write_text(HOST.format(p=protocol, extra=", account: hostacct"))
    wf = _workflow(tmp_path, {"account": "prof"}, members=4)
    result = CliRunner().invoke(cli, ["plan", str(wf), "--host", "h"])
    assert result.exit_code == 0, result.output
    assert directive in result.stdout and "hostacct" not in result.stdout
    result = CliRunner().invoke(cli, ["plan", str(wf), "--host", "h", "--json"])
    script = json.loads(result.stdout)["pilot_scripts"]["h"]
    assert directive in script and "hostacct" not in script
    # without one in the profile, the host's
    wf = _workflow(tmp_path, {}, members=4)
    out = CliRunner().invoke(cli, ["plan", str(wf), "--host", "h"]).stdout
    assert directive.replace("prof", "hostacct") in out


@pytest.mark.parametrize("protocol", ["slurm", "pbs", "loadleveler", "ssh"])
def test_the_engine_submits_the_script_pwe_plan_shows(tmp_path, protocol):
    sched = {"account": "prof", "queue": "q9", "maxWallTime": 33}
    seen = observe(tmp_path / "e", protocol, sched)["script"]
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "hosts.yaml").write_text(HOST.format(p=protocol, extra=""))
    result = CliRunner().invoke(cli, ["plan", str(_workflow(tmp_path / "p", sched)), "--host", "h", "--json"])
    assert json.loads(result.stdout)["pilot_scripts"]["h"] == seen
    assert protocol == "ssh" or "prof" in seen  # (the ssh protocol has no account to state)


@pytest.mark.parametrize("protocol, kind, warned", [
    ("slurm", "glidein", False), ("slurm", "batch", True), ("slurm", "interactive", True),
    ("pbs", "batch", True), ("loadleveler", "interactive", True),
    ("ssh", "interactive", False), ("ssh", "batch", True),
    ("local", "interactive", False), ("local", "glidein", False), ("local", "batch", True),
])
def test_submission_type_is_honoured_or_reported(tmp_path, protocol, kind, warned):
    """glidein is what pwe does everywhere; interactive is what the local and ssh
    protocols do (the pilot runs on this machine or on the head node); batch (a job per
    member) is not built: a node asking for something not done is told so."""
    (tmp_path / "hosts.yaml").write_text(HOST.format(p=protocol, extra=""))
    wf = _workflow(tmp_path, {"submissionType": kind}, members=2)
    result = CliRunner().invoke(cli, ["plan", str(wf), "--host", "h", "--json"])
    assert result.exit_code == 0, result.output
    said = [w for w in json.loads(result.stdout)["warnings"] if "submissionType" in w]
    assert bool(said) == warned, said
    if kind == "batch":
        assert said == [f"node 'm': submissionType batch (one batch job per member) is not built; its members run "
                        f"in pilot jobs on host 'h' ({protocol})"]
    elif warned:  # (the contact is local: this machine is the head node)
        assert said == [f"node 'm': submissionType interactive is not built for host 'h' ({protocol}); its members "
                        "run in pilot jobs (to run them on the head node: a host with protocol local)"]


def _warnings(err: str) -> list[str]:
    return [line[len("warning: "):] for line in err.splitlines() if line.startswith("warning: ")]


def test_plan_shows_the_warnings_run_prints(tmp_path):
    """`pwe plan --host H` (text and --json) warns exactly as `pwe run` does, before it runs anything."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {protocol: local, cores_per_node: 2}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    parameters: {t: [1, 2]}\n    run: 'true'\n"
                  "  b:\n    after: [a]\n    parameters: {t: [1, 2, 3]}\n    run: 'true'\n"
                  "    scheduling: {account: x, queue: q, shareNodes: false, maxMembers: 2, submissionType: batch}\n")
    rc, out, err = run_cli("run", wf, "--host", "box", "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    ran = _warnings(err)
    assert any("match no member of 'a'" in w for w in ran), ran
    assert "node 'b': host 'box' has no batch system; scheduling account, queue not used" in ran, ran
    assert any("submissionType batch" in w for w in ran), ran
    rc, out, err = call_cli("plan", wf, "--host", "box", cwd=tmp_path)
    assert rc == 0 and _warnings(err) == ran, err
    rc, out, err = call_cli("plan", wf, "--host", "box", "--json", cwd=tmp_path)
    assert rc == 0 and json.loads(out)["warnings"] == ran


@pytest.mark.parametrize("protocol", ["slurm", "pbs", "loadleveler", "ssh"])
def test_plan_warns_as_the_engine_on_batch_hosts(tmp_path, protocol):
    from pwe.engine.loop import Engine

    (tmp_path / "hosts.yaml").write_text(HOST.format(p=protocol, extra=""))
    wf = _workflow(tmp_path, {"stdin": "x", "qos": "q", "shareNodes": False, "submissionType": "batch"}, members=2)
    engine = Engine.create(wf, host="h", run_dir=tmp_path / "run")
    result = CliRunner().invoke(cli, ["plan", str(wf), "--host", "h", "--json"])
    assert json.loads(result.stdout)["warnings"] == engine.warnings
    assert any("stdin" in w for w in engine.warnings) and not any("shareNodes" in w for w in engine.warnings)


# -- a member's walltime against its pilot jobs' (issue 22, item 5) ------------------------------

WALL_HOSTS = """hosts:
  cl:
    protocol: pbs
    cores_per_node: 4
    partitions:
      - {name: short, max_walltime: 30}
      - {name: long, max_walltime: 600}
"""

WALLTIMES = [  # (defaults' scheduling, the node's, line, what the one line says)
    # longer than the job: was refused, at the node's line (not the key's)
    ("{}", "{maxWallTime: 60, maxWallTimePerMember: 90}", 7,
     "maxWallTimePerMember (90 min) does not fit in a pilot's maxWallTime (60 min) less the pilot's start and "
     "hand-back margin (90 s): no pilot could start a member; raise maxWallTime to at least 91.5 or lower "
     "maxWallTimePerMember to at most 58.5"),
    # maxWallTime from defaults: the line of the node's maxWallTimePerMember
    ("{maxWallTime: 60}", "\n      maxWallTimePerMember: 60", 8, "maxWallTimePerMember (60 min)"),
    # within the hand-back margin: each pilot handed it back and the engine started another, for ever
    ("{maxWallTime: 60}", "\n      maxWallTimePerMember: 59.5", 8, "raise maxWallTime to at least 61"),
    # no maxWallTime: the default's 60 minutes, said so
    ("{}", "{maxWallTimePerMember: 59}", 7, "maxWallTime (60 min, the default)"),
    # a short walltime: a margin of a tenth of it
    ("{}", "{maxWallTime: 5, maxWallTimePerMember: 4.5}", 7, "(60 s): no pilot could start a member; raise "
     "maxWallTime to at least 5.6 or lower maxWallTimePerMember to at most 4"),
    # a queue whose max_walltime is shorter than the job's: it would never start
    ("{queue: short}", "\n      maxWallTime: 60", 8,
     "maxWallTime (60 min) is longer than the max_walltime of queue 'short' on host 'cl' (30 min): its pilot jobs "
     "would never start; set maxWallTime to at most 30 or choose another queue"),
    ("{queue: short}", "{maxWallTimePerMember: 20}", 3, "maxWallTime (60 min, the default) is longer than"),
]


def _walltimes(d, defaults, node):
    (d / "hosts.yaml").write_text(WALL_HOSTS)
    wf = d / "wf.yaml"
    sched = f"scheduling: {node}" if node.startswith("{") else f"scheduling:{node}"
    wf.write_text(f"name: w\ndefaults:\n  scheduling: {defaults}\n  host: cl\nnodes:\n  a:\n    {sched}\n"
                  "    run: 'true'\n")
    return wf


@pytest.mark.parametrize("defaults, node, line, phrase", WALLTIMES)
def test_a_member_walltime_that_no_pilot_job_can_hold_is_one_line(tmp_path, defaults, node, line, phrase):
    """validate, plan and run: exit 2, one line at the scheduling key to change, both numbers
    and what to change; nothing made."""
    wf = _walltimes(tmp_path, defaults, node)
    for args in (["validate", str(wf)], ["plan", str(wf)], ["run", str(wf), "--run-dir", str(tmp_path / "run")]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, (args, result.stderr)
        err = result.stderr
        assert "Traceback" not in err and err.count("\n") == 1, err
        assert err.startswith(f"{wf}:{line}: node 'a': "), err
        assert phrase in err, err
    assert not (tmp_path / "run").exists()


def test_the_xml_form_names_the_element(tmp_path):
    (tmp_path / "hosts.yaml").write_text(WALL_HOSTS)
    wf = tmp_path / "wf.xml"
    wf.write_text('<workflow name="w">\n  <defaults host="cl"/>\n  <node id="a">\n'
                  '    <run>true</run>\n    <scheduling>\n      <maxWallTime>60</maxWallTime>\n'
                  '      <maxWallTimePerMember>90</maxWallTimePerMember>\n    </scheduling>\n  </node>\n</workflow>\n')
    result = CliRunner().invoke(cli, ["validate", str(wf)])
    assert result.exit_code == 2 and result.stderr.startswith(f"{wf}:7: node 'a': maxWallTimePerMember (90 min)"), \
        result.stderr


@pytest.mark.parametrize("sched", ["{maxWallTime: 60, maxWallTimePerMember: 58.5}", "{maxWallTimePerMember: 58.5}",
                                   "{maxWallTime: 5, maxWallTimePerMember: 4}", "{queue: long, maxWallTime: 600}"])
def test_walltimes_that_fit_are_taken(tmp_path, sched):
    from pwe.planning.placement import PILOT_START_S, hand_back_margin

    assert hand_back_margin(60) + PILOT_START_S == 90  # (the pilot's own margin: pilot/__main__.py --margin)
    wf = _walltimes(tmp_path, "{}", sched)
    result = CliRunner().invoke(cli, ["plan", str(wf)])
    assert result.exit_code == 0, result.stderr


def test_a_local_host_has_no_job_walltime_to_fit(tmp_path):
    """On this machine a pilot is no job: maxWallTime is warned about as not used, and a
    member's walltime (its own limit) is not held against a pilot's margins (a member
    longer than maxWallTime itself is refused on every host: tests/cli/test_hostile_cli.py)."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    run: 'true'\n    scheduling: {maxWallTime: 60, maxWallTimePerMember: 59.5}\n")
    result = CliRunner().invoke(cli, ["validate", str(wf)])
    assert result.exit_code == 0 and "maxWallTime not used" in result.stderr, result.stderr
