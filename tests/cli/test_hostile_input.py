"""Hostile and broken input (issue 10, items 8-12): one line naming the file, the line and
what to do, exit status 2, no traceback, nothing made. And where a value meets a command
line, it cannot become an option or a command, even when the checks are bypassed.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import ROOT, call_cli, let_time_pass, output, run_cli
from pwe.cli.main import cli

ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def _one_line_refusal(result_or_tuple, where=None, phrase=None):
    """exit 2, one line on stderr (starting with ``where``, holding ``phrase``), no traceback."""
    if isinstance(result_or_tuple, tuple):
        status, _, err = result_or_tuple
    else:
        status, err = result_or_tuple.exit_code, result_or_tuple.stderr
    assert status == 2, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.endswith("\n"), err
    if where is not None:
        assert err.startswith(where), err
    if phrase is not None:
        assert phrase in err, err
    return err


# -- 8. values that reach a command line ------------------------------------------------------

EVIL_NODES = ["-oProxyCommand=touch${IFS}MARKER", "-oProxyCommand='touch MARKER'"]


@pytest.mark.parametrize("evil", EVIL_NODES)
def test_a_node_name_that_is_an_ssh_option_is_refused_at_load(tmp_path, evil):
    marker = tmp_path / "pwned"
    hosts = tmp_path / "hosts.yaml"
    name = evil.replace("MARKER", str(marker))
    hosts.write_text(f"hosts:\n  box:\n    cores_per_node: 1\n    nodes:\n      - n1\n      - {json.dumps(name)}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\ndefaults: {host: box}\nnodes:\n  a:\n    parameters: {k: [1, 2, 3]}\n    run: 'true'\n")
    for args in (["hosts", "list", "--hosts", hosts], ["hosts", "check", "box", "--hosts", hosts], ["plan", wf],
                 ["validate", wf], ["run", wf, "--run-dir", tmp_path / "run"]):
        _one_line_refusal(call_cli(*args, cwd=tmp_path), f"{hosts}:6: ", "not a host name")
    assert not (tmp_path / "run").exists()
    assert not marker.exists()


@pytest.mark.parametrize("how", ["hosts", "hostfile"])
@pytest.mark.parametrize("evil", EVIL_NODES)
def test_the_pilot_never_runs_a_node_name_even_bypassing_the_checks(tmp_path, evil, how):
    """The pilot's --hosts argument (or host file) written directly, as no pwe command
    would: the name never reaches ssh as an option, so its ProxyCommand never runs."""
    marker = tmp_path / "pwned"
    name = evil.replace("MARKER", str(marker))
    d = tmp_path / "pilot"
    d.mkdir()
    task = {"k": "task", "n": "a", "m": 0, "a": 1, "cmd": "true", "cwd": str(d / "m0"), "env": {}, "ranks": 1,
            "threads": 1, "wall": None}
    (d / "tasks.jsonl").write_text(json.dumps(task) + "\n" + json.dumps({"k": "stop"}) + "\n")
    if how == "hosts":
        where = [f"--hosts={name}:1"]
    else:
        (tmp_path / "nodes").write_text(f"{name} 1\n")
        where = ["--hostfile", str(tmp_path / "nodes")]
    proc = subprocess.run([sys.executable, "-m", "pilot", "--dir", str(d), *where, "--launcher", "ssh",
                           "--idle-timeout", "2", "--heartbeat", "0.5"], env=ENV, timeout=60,
                          capture_output=True, text=True)
    let_time_pass(0.5, "a ProxyCommand would have run by now")
    assert not marker.exists()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "not a host name" in proc.stderr, proc.stderr


def test_ssh_gets_node_names_after_double_dash():
    """Defence in depth: whatever a node is called, ssh reads it as a host, never an option."""
    from pilot.allocation import Node
    from pilot.launchers import wrap

    argv = wrap("ssh", ["true"], "true", [(Node("n1", 1), 1)], 1, 1, "/d", {})
    assert argv[-3:-1] == ["--", "n1"]
    # a prefix's fields are filled in word by word: a value never splits into more words
    argv = wrap("srun", ["true"], "x", [(Node("a b", 1), 1)], 1, 1, "/d e", {}, prefix="srun -w {node} -D {cwd}")
    assert argv == ["srun", "-w", "a b", "-D", "/d e", "bash", "-c", "x"]


def test_job_ids_that_are_not_job_ids_never_reach_the_scheduler():
    from protocols.runner import CommandResult, CommandRunner
    from protocols.slurm import Slurm
    from pwe.base.errors import SubmitError

    class Recorder(CommandRunner):
        def __init__(self, answer=""):
            super().__init__()
            self.ran, self.answer = [], answer

        def _run(self, argv, timeout, input, cwd):
            self.ran.append(argv)
            return CommandResult(argv, 0, self.answer, "")

    r = Recorder()
    slurm = Slurm(r)
    slurm.cancel(["-u", "12", "--me"])
    assert r.ran == [["scancel", "12"]]
    states = slurm.status(["--me", "13"])
    assert states["--me"].value == "unknown"
    assert all("--me" not in a for argv in r.ran for a in argv)
    from helpers import sample_pilot_job

    r = Recorder(answer="-u root\n")
    with pytest.raises(SubmitError, match="job id"):
        Slurm(r).submit(sample_pilot_job(), "/runs/r1/pilots/p1/job.sh")


SCHEDULING_WORDS = ["queue", "account", "qos", "reservation", "nodeAttributes", "jobName", "mailUser", "mailOptions"]
NOT_WORDS = ["-x", "abc --wrap=id", "a\tb"]


def _scheduling(field, value):
    return f"name: a\ndefaults:\n  scheduling: {{{field}: {json.dumps(value)}}}\nnodes:\n  a: {{run: x}}\n"


@pytest.mark.parametrize("field", SCHEDULING_WORDS)
@pytest.mark.parametrize("value", NOT_WORDS)
def test_scheduling_words_cannot_become_options(write, field, value):
    path = write(_scheduling(field, value))
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:3: ", "must be one word")


HOST_VALUES = [  # (a slurm host's entry, its line, what the one line says)
    ("    partitions: [{name: '-p'}]\n", 4, "must be one word"),
    ("    account: 'abc --wrap=id'\n", 4, "must be one word"),
    ("    env: {'X=1; touch /tmp/pwned #': 1}\n", 4, "not a valid variable name"),
    ("    ssh_config: -oProxyCommand=x\n", 4, "must not start with '-'"),
    ("    identity_file: -i\n", 4, "must not start with '-'"),
    ('    env:\n      X: "a\\0"\n', 5, "NUL"),
]


@pytest.mark.parametrize("entry, line, phrase", HOST_VALUES)
def test_host_values_that_reach_a_job_script_or_ssh(tmp_path, entry, line, phrase):
    hosts = tmp_path / "h.yaml"
    hosts.write_text("hosts:\n  c:\n    protocol: slurm\n" + entry)
    _one_line_refusal(CliRunner().invoke(cli, ["hosts", "list", "--hosts", str(hosts)]), f"{hosts}:{line}: ", phrase)


# -- 12. hosts: refused by `pwe hosts check`, `plan` and `run` in one line, before anything is made

BAD_HOSTS = [
    ("contact-ssh-alone", "    protocol: slurm\n    contact: 'ssh://'\n", 4, "write the contact as ssh://user@host"),
    ("contact-port-not-a-number", "    protocol: slurm\n    contact: 'ssh://me@login:ssh'\n", 4, "a port from 1"),
    ("contact-port-zero", "    protocol: slurm\n    contact: 'ssh://me@login:0'\n", 4, "a port from 1"),
    ("contact-an-option", "    protocol: slurm\n    contact: '-oProxyCommand=touch /tmp/pwned'\n", 4,
     "write 'local' or ssh://user@host"),
    ("contact-host-an-option", "    protocol: slurm\n    contact: 'ssh://-oProxyCommand=x'\n", 4, "not a host name"),
    ("contact-user-an-option", "    protocol: slurm\n    contact: 'ssh://-lroot@login'\n", 4, "not a user name"),
    ("duplicate-nodes", "    nodes: [n1, n2, n1]\n", 3, "node 'n1' is listed twice"),
    ("local-with-ssh-contact", "    protocol: local\n    contact: ssh://me@login\n", 2, "protocol local runs on this"),
]


def _bad_host(entry):
    return "hosts:\n  c:\n" + entry + "    cores_per_node: 2\n"


ON_HOST_C = "name: w\nnodes:\n  a:\n    host: c\n    run: 'true'\n"


@pytest.mark.parametrize("case, entry, line, phrase", BAD_HOSTS, ids=[c[0] for c in BAD_HOSTS])
def test_a_bad_host_is_refused_by_hosts_check_and_plan(tmp_path, case, entry, line, phrase):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(_bad_host(entry))
    wf = tmp_path / "wf.yaml"
    wf.write_text(ON_HOST_C)
    for args in (["hosts", "check", "c", "--hosts", str(hosts)], ["plan", str(wf)]):
        _one_line_refusal(CliRunner().invoke(cli, args), f"{hosts}:{line}: ", phrase)


WIDE = [  # (host, scheduling, what the one line says)
    # the pilot of an ssh host runs on its head node alone: 4 x 2 cores never fit its 4
    ("{protocol: ssh, contact: 'ssh://me@login', cores_per_node: 4}", "{ranksPerMember: 4, threadsPerRank: 2}",
     "a member needs 8 cores"),
    # one node per pilot at most
    ("{protocol: slurm, cores_per_node: 4, max_nodes: 1}", "{ranksPerMember: 3, threadsPerRank: 2}",
     "a member needs 6 cores"),
    ("{protocol: slurm, cores_per_node: 4}", "{ranksPerMember: 3, threadsPerRank: 2, maxNodes: 1}",
     "a member needs 6 cores"),
    # three ranks of three threads: one per node of 4 cores, on two nodes
    ("{protocol: local, cores_per_node: 4, nodes: [n1, n2]}", "{ranksPerMember: 3, threadsPerRank: 3}",
     "a member needs 9 cores"),
    ("{protocol: slurm, cores_per_node: 8}", "{ranksPerMember: 2, threadsPerRank: 2, maxCpus: 2}",
     "maxCpus"),
]


def _wide(host, scheduling):
    return f"hosts:\n  c: {host}\n", ON_HOST_C + f"    scheduling: {scheduling}\n"


@pytest.mark.parametrize("host, scheduling, phrase", WIDE)
def test_ranks_times_threads_wider_than_a_hosts_pilot_is_refused(tmp_path, host, scheduling, phrase):
    hosts, text = _wide(host, scheduling)
    (tmp_path / "hosts.yaml").write_text(hosts)
    wf = tmp_path / "wf.yaml"
    wf.write_text(text)
    _one_line_refusal(CliRunner().invoke(cli, ["plan", str(wf)]), f"{wf}:3: ", phrase)


MERGED = "name: a\ndefaults:\n  scheduling: {minCpus: 8}\nnodes:\n  a:\n    run: x\n    scheduling: {maxCpus: 2}\n"


def test_a_merged_scheduling_profile_that_contradicts_itself_is_one_line(write):
    """defaults.scheduling and a node's scheduling, each fine alone, merged: was a pydantic traceback."""
    path = write(MERGED)
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:7: ",
                      "node 'a': 'scheduling' with defaults.scheduling: minCpus (8) is larger than maxCpus (2)")


# -- 9. NUL bytes and lone surrogates: refused at validate, naming the value's place ---------

NUL_IN_WORKFLOW = [  # (workflow, line, the value's place)
    ('name: a\nproperties:\n  p: "a\\0b"\nnodes:\n  a: {run: "echo {{ p }}"}\n', 3, "property 'p'"),
    ('name: a\nproperties:\n  p: "a\\ud800b"\nnodes:\n  a: {run: "echo {{ p }}"}\n', 3, "property 'p'"),
    ('name: a\nnodes:\n  a:\n    run: echo {{ t }}\n    parameters:\n      t: [1, "x\\x00"]\n', 6,
     "parameter 't' of node 'a'"),
    ('name: a\nnodes:\n  a:\n    run: echo {{ t }}\n    parameters:\n      t:\n        - 1\n        - "\\udfff"\n', 8,
     "parameter 't' of node 'a'"),
    ('name: a\nnodes:\n  a:\n    run: echo\n    env:\n      X: "\\0"\n', 6, "env 'X' of node 'a'"),
    ('name: a\nnodes:\n  a:\n    run: "echo \\0"\n', 4, "'run' of node 'a'"),
]


@pytest.mark.parametrize("text, line, phrase", NUL_IN_WORKFLOW)
def test_nul_and_lone_surrogates_are_refused_at_validate(write, text, line, phrase):
    path = write(text)
    err = _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:{line}: ", phrase)
    assert "NUL" in err or "surrogate" in err


NUL_IN_PARAMETER_FILES = [  # (file name, its content, its line, what the one line says)
    ("v.csv", b"t\n1\nx\x00y\n", 3, "NUL"),
    ("v.jsonl", b'{"t": 1}\n{"t": "a\\u0000"}\n', 2, "NUL"),
    ("v.jsonl", b'{"t": 1}\n{"t": 2}\n{"t": "\\ud800"}\n', 3, "surrogate"),
]


def _from_file(name):
    return f"name: a\nnodes:\n  a:\n    run: echo {{{{ t }}}}\n    parameters:\n      t: {{file: {name}}}\n"


@pytest.mark.parametrize("name, content, line, phrase", NUL_IN_PARAMETER_FILES)
def test_nul_and_lone_surrogates_in_a_parameter_file(write, tmp_path, name, content, line, phrase):
    (tmp_path / name).write_bytes(content)
    path = write(_from_file(name))
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{tmp_path / name}:{line}: ", phrase)


USES_P = "name: a\nproperties: {p: 1}\nnodes:\n  a: {run: 'echo {{ p }}'}\n"
SURROGATE_SET = ["--set", "p=a\udcffb"]  # a byte that is not UTF-8 in argv reaches Python as a lone surrogate


def test_a_lone_surrogate_from_the_command_line(write):
    """(In a process of its own: the value reaches pwe as bytes in argv.)"""
    _one_line_refusal(run_cli("validate", write(USES_P), *SURROGATE_SET), "--set p: ", "surrogate")


def _xml(ref):
    return (f'<workflow name="a"><property name="p">a{ref}</property><node id="a"><run>echo</run></node>'
            '</workflow>\n')


@pytest.mark.parametrize("ref", ["&#0;", "&#xD800;"])
def test_xml_cannot_carry_them_either(write, ref):
    path = write(_xml(ref), name="wf.xml")
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:1: ")


@pytest.mark.parametrize("xml, phrase", [
    ('<workflow name="a"><defaults retries="1&#10;2"/><node id="a"><run>echo</run></node></workflow>\n',
     'retries="1\\x0a2" is not a whole number'),
    ('<workflow name="a"><node id="a&#13;&#10;b"><run>echo</run></node></workflow>\n', "a\\x0d\\x0ab"),
    ('<workflow name="a"><node id="a"><run>echo</run><scheduling><maxCpus>1\n2</maxCpus></scheduling></node>'
     '</workflow>\n', "<maxCpus>1\\x0a2</maxCpus>"),
])
def test_a_line_break_an_xml_value_carries_never_makes_its_error_two_lines(write, xml, phrase):
    """XML gives an attribute a line break by &#10; and an element's text by itself; the error
    that shows the value showed it raw, and the one line was two. Every input error is one
    line now: a control character in it is written visibly, wherever the value was put."""
    path = write(xml, name="wf.xml")
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:1: ", phrase)


def test_a_workflow_file_whose_name_holds_a_line_break_is_refused_in_one_line(write):
    path = write("name: a\nnodes: {a: {run: echo, retries: many}}\n", name="w\nf.yaml")
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), None, "w\\x0af.yaml:2: ")


def test_a_member_that_cannot_be_spawned_fails_and_the_pilot_goes_on(tmp_path):
    """Bypassing validate, a NUL reaches the pilot's posix_spawn: the member fails with the
    reason (was: the pilot crashed, and three pilots in a row stopped the run, exit 3),
    and the other members run in the same pilot."""
    from helpers import read_journal
    from pwe.engine.loop import Engine

    wf = tmp_path / "wf.yaml"
    wf.write_text("name: a\nnodes:\n  a:\n    parameters: {k: [1, 2, 3]}\n    run: echo {{ k }}\n")
    engine = Engine.create(wf, run_dir=tmp_path / "run", cores=1)
    task = engine.feeder.task

    def poisoned(nid, i, attempt, retried=0):
        t = task(nid, i, attempt, retried)
        if i == 1:
            t["env"]["X"] = "a\0b"
        return t

    engine.feeder.task = poisoned
    assert engine.run() is False
    ns = engine.state.nodes["a"]
    assert [ns.state[i] for i in range(3)].count(ns.state[0]) == 2  # members 0 and 2 done
    assert "embedded null byte" in ns.why[1]
    assert sum(r["e"] == "pilot" for r in read_journal(tmp_path / "run")) == 1


# -- 10. templates: rendered for the first and last member at validate, their computation bounded

TEMPLATES = [  # (payload, what the one line says)
    ("echo {{ x.__class__ }}", "access to attribute '__class__' of 'int' object is unsafe"),
    ("echo {{ x.__class__.__mro__[1].__subclasses__() }}", "unsafe"),
    ("echo {{ range(10**12) | length }}", "range"),
    ("echo {{ 10 ** (10 ** 10) }}", "too large"),
    ("echo {{ 'x' * 10 ** 10 }}", "too large"),
    ("echo {{ [1] * 10 ** 10 }}", "too large"),
    ("echo {{ '%0999999999d' % 1 }}", "too large"),
    ("echo {{ '%0999999999d' | format(1) }}", "too large"),
    ("echo {{ '{:0>999999999}'.format(1) }}", "too large"),
    ("echo {{ 'x'.center(10 ** 9) }}", "too large"),
    ("echo {{ ('x' * 100000).replace('x', 'yyyyyyyyyyyy') }}", "too large"),
    ("echo {{ 'x' * 200000 }}", "bytes"),
    ("echo {% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "seconds"),
    ("echo {{ 10 / (x - 3) }}", "member 2 cannot render 'run': ZeroDivisionError"),
]


def _payload(payload):
    return f"name: a\nnodes:\n  a:\n    parameters: {{x: [1, 2, 3]}}\n    run: {json.dumps(payload)}\n"


@pytest.mark.parametrize("payload, phrase", TEMPLATES)
def test_a_template_that_fails_or_runs_away_is_one_line_at_validate(write, payload, phrase):
    path = write(_payload(payload))
    t0 = time.monotonic()
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:5: node 'a': ", phrase)
    assert time.monotonic() - t0 < 60  # (a hang detector: a runaway takes hours)


def test_bounded_templates_still_compute_what_payloads_need(write):
    path = write("name: a\nproperties: {n: 12}\nnodes:\n  a:\n    parameters: {i: {range: [0, 3]}}\n"
                 "    run: \"echo {{ '%04d' % i }} {{ 2 ** n }} {{ '-' * 3 }} {{ range(3) | join(',') }} "
                 "{{ [i] * 2 }} {{ '{:>3}'.format(i) }} {{ '%.2f' | format(i / 3) }}\"\n")
    result = CliRunner().invoke(cli, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    cmds = [m["command"] for m in json.loads(result.stdout)["nodes"][0]["members_shown"]]
    assert cmds[1] == "echo 0001 4096 --- 0,1,2 '[1, 1]' '  1' 0.33"


# -- 11. sizes: each limit refused in one line, quickly ------------------------------------------

def _oversized():
    return "name: a\nnodes:\n  a: {run: x}\n" + ("#" * 79 + "\n") * (4 * 1024 * 1024 // 80 + 1)  # 4 MiB: README


def test_a_workflow_file_larger_than_the_limit(write):
    path = write(_oversized())
    t0 = time.monotonic()
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}: ", "at most 4 MiB")
    assert time.monotonic() - t0 < 60  # (a hang detector: a runaway takes hours)


def _special(path, kind):
    """A device (a link to /dev/zero), a FIFO, or a sparse file larger than a parameter file may be."""
    if kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        from pwe.planning.params import MAX_PARAMETER_FILE_BYTES

        with open(path, "wb") as fh:  # sparse: takes no disk
            fh.write(b"t\n1\n")
            fh.truncate(MAX_PARAMETER_FILE_BYTES + 1)


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_workflow_or_parameter_file_that_is_no_regular_file(tmp_path, write, kind):
    """(In a process of its own, under a timeout: a FIFO read would never end.)"""
    special = tmp_path / "special"
    _special(special, kind)
    t0 = time.monotonic()
    _one_line_refusal(run_cli("validate", special, timeout=30), f"{special}: ", "not a regular file")
    path = write(_from_file("special"))
    _one_line_refusal(run_cli("validate", path, timeout=30), f"{path}:6: ", "not a regular file")
    assert time.monotonic() - t0 < 60  # (a hang detector: a runaway takes hours)


def test_a_parameter_file_larger_than_the_limit(tmp_path, write):
    _special(tmp_path / "v.csv", "large")
    path = write(_from_file("v.csv"))
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:6: ", "at most 512 MiB")


NOT_FINITE = ["[0, .inf]", "[-.inf, 0]", "[0, .nan]", "[0, 10, .nan]", "[.nan, 1]"]


def _parameters(params):
    return "name: a\nnodes:\n  a:\n    run: echo {{ t }}\n    parameters:\n" + params


@pytest.mark.parametrize("bounds", NOT_FINITE)
def test_a_range_with_a_bound_that_is_no_number(write, bounds):
    path = write(_parameters(f"      t: {{range: {bounds}}}\n"))
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:6: ", "finite")


TOO_MANY = [  # (parameters, line, what the one line says)
    ("      t: {range: [0, 1.0e+30]}\n", 6, "a node has at most 100,000,000 members"),
    ("      t: {range: [0, 1, 1.0e-12]}\n", 6, "a node has at most 100,000,000 members"),
    ("      t: {range: [0, 100000]}\n      u: {range: [0, 100000]}\n", 5, "node 'a' has 10,000,000,000 members"),
]


@pytest.mark.parametrize("params, line, phrase", TOO_MANY)
def test_members_beyond_the_limit_are_refused_at_validate(write, params, line, phrase):
    path = write(_parameters(params))
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:{line}: ", phrase)


TOO_MANY_IN_A_RUN = ("name: a\nnodes:\n  a:\n    run: echo {{ t }}\n    parameters: {t: {range: [0, 60000000]}}\n"
                     "  b:\n    run: echo {{ t }}\n    parameters: {t: {range: [0, 60000000]}}\n")


def test_a_run_beyond_the_member_limit(write):
    _one_line_refusal(CliRunner().invoke(cli, ["validate", str(write(TOO_MANY_IN_A_RUN))]), None,
                      "120,000,000 members; a run has at most 100,000,000")


# -- 13. YAML aliases (issue 22, item 3): what they expand to is bounded, counted while composing

def _laughs(levels=9, width=9):
    """'billion laughs': each anchor a list of ``width`` aliases of the one before; the
    last one's alias stands for width ** levels strings, in a few hundred bytes."""
    lines = ["name: a", "x0: &x0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\nnodes:\n  a:\n    run: echo {{{{ t }}}}\n    parameters:\n      t: *x{levels}\n"


def _many_aliases(big=2000, aliases=1000):
    """One anchor of ``big`` values, and ``aliases`` nodes that each name it."""
    values = "[" + ", ".join(map(str, range(big))) + "]"
    nodes = "".join(f"  n{i}:\n    run: echo {{{{ t }}}}\n    parameters: {{t: *v}}\n" for i in range(1, aliases + 1))
    return f"name: a\nnodes:\n  n0:\n    run: echo {{{{ t }}}}\n    parameters: {{t: &v {values}}}\n" + nodes


def test_a_yaml_alias_bomb_is_refused_at_the_alias_that_crosses_the_bound(write):
    """9^9 (387 million) strings from 400 bytes: was more than 20 s (and gigabytes) in the
    text checks and validation that walk the tree; now counted while composing (aliases of
    x5 add 9^6 each: the fourth alias of x6, on line 8, passes a million)."""
    from pwe.base.yaml_reader import MAX_ALIAS_NODES

    assert MAX_ALIAS_NODES == 1_000_000
    path = write(_laughs())
    t0 = time.monotonic()
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert time.monotonic() - t0 < 60  # (a hang detector: it takes milliseconds, a runaway hours)
    _one_line_refusal(result, f"{path}:8: ", "YAML aliases expand to more than 1,000,000 nodes")


def test_many_aliases_of_one_large_anchor_are_refused_too(write):
    """No nesting: a thousand aliases of a list of 2,000 values (2 million in all)."""
    path = write(_many_aliases())
    line = 5 + 3 * 500  # the 500th alias (each adds 2,001 nodes) passes a million
    t0 = time.monotonic()
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert time.monotonic() - t0 < 60  # (a hang detector: a runaway takes hours)
    _one_line_refusal(result, f"{path}:{line}: ", "an alias bomb?")


def test_the_bound_counts_what_each_alias_stands_for(monkeypatch):
    """The mechanism, not the clock: each alias adds the size of its anchor written out
    (an alias of an alias counted whole), and the bound is crossed at that alias's line."""
    from pwe.base import yaml_reader
    from pwe.base.errors import InputError

    text = "name: a\nx: &x [1, 2, 3]\ny: &y [*x, *x]\nz: [*y]\nnodes: {a: {run: x}}\n"
    # x: 4 nodes; y: 1 + 4 + 4 = 9; the aliases add 4 + 4 + 9 = 17
    monkeypatch.setattr(yaml_reader, "MAX_ALIAS_NODES", 17)
    assert yaml_reader.read_yaml(Path("wf.yaml"), text)["z"] == [[[1, 2, 3], [1, 2, 3]]]
    monkeypatch.setattr(yaml_reader, "MAX_ALIAS_NODES", 16)
    with pytest.raises(InputError) as info:
        yaml_reader.read_yaml(Path("wf.yaml"), text)
    assert info.value.line == 4 and "more than 16 nodes" in info.value.message


MERGE_KEYS = """name: a
defaults:
  scheduling: &sched {maxWallTimePerMember: 5}
nodes:
  prepare:
    <<: &common
      retries: 2
      env: {MODE: fast}
    run: ./prepare
  simulate:
    <<: *common
    after: [prepare]
    parameters: {T: &temps [300, 350, 400]}
    scheduling: *sched
    run: ./sim {{ T }}
  analyze:
    <<: *common
    after: [simulate]
    parameters: {T: *temps}
    retries: 0
    run: ./analyze {{ T }}
"""


def test_ordinary_anchors_aliases_and_merge_keys_still_work(write):
    """Anchors are for this: a block of settings merged into each node (<<: *common), one
    list of values and one profile shared; a node's own key wins over a merged one."""
    from pwe.planning.plan import plan_workflow

    path = write(MERGE_KEYS)
    plan = plan_workflow(path)
    assert {n: (p.retries, dict(p.spec.env), p.size) for n, p in plan.nodes.items()} == {
        "prepare": (2, {"MODE": "fast"}, 1), "simulate": (2, {"MODE": "fast"}, 3), "analyze": (0, {"MODE": "fast"}, 3)}
    assert plan.nodes["simulate"].scheduling.maxWallTimePerMember == 5
    status, out, err = call_cli("validate", path)
    assert status == 0, err


# -- 14. ids and names (issue 22, item 4): at most MAX_NAME characters, the same rule in YAML, XML
#        and the JSON Schema; and a file system that refuses a member's directory while running

LONG = "n" * 101


NAMES_TOO_LONG = [  # (workflow, line, what the one line says)
    (f"name: w\nnodes:\n  {LONG}:\n    run: 'true'\n", 3, "node id 'nnnn"),
    (f"name: {LONG}\nnodes:\n  a:\n    run: 'true'\n", 1, "the workflow's name 'nnnn"),
    (f"name: w\nnodes:\n  a:\n    run: echo {{{{ {LONG} }}}}\n    parameters:\n      {LONG}: [1]\n", 6,
     "parameter 'nnnn"),
    (f"name: w\nproperties:\n  {LONG}: 1\nnodes:\n  a:\n    run: 'true'\n", 3, "property 'nnnn"),
    (f"name: w\nnodes:\n  a:\n    run: 'true'\n    env:\n      {LONG}: 1\n", 6, "env variable 'nnnn"),
]


@pytest.mark.parametrize("text, line, phrase", NAMES_TOO_LONG, ids=["node", "workflow", "parameter", "property", "env"])
def test_an_id_or_name_longer_than_the_bound_is_one_line_at_validate(write, text, line, phrase):
    """A node id of 300 characters validated, and its run then waited for ever (no member's
    directory could be made: ENAMETOOLONG, handed back again and again)."""
    path = write(text)
    err = _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:{line}: ", phrase)
    assert "is 101 characters long; ids and names have at most 100" in err


XML_NAMES_TOO_LONG = [  # (workflow, line, what the one line says)
    (f'<workflow name="w">\n  <node id="{LONG}">\n    <run>true</run>\n  </node>\n</workflow>\n', 2, "node id 'nnnn"),
    (f'<workflow name="{LONG}">\n  <node id="a">\n    <run>true</run>\n  </node>\n</workflow>\n', 1,
     "the workflow's name 'nnnn"),
    (f'<workflow name="w">\n  <node id="a">\n    <parameter name="{LONG}"><value>1</value></parameter>\n'
     '    <run>true</run>\n  </node>\n</workflow>\n', 3, "parameter 'nnnn"),
]


@pytest.mark.parametrize("text, line, phrase", XML_NAMES_TOO_LONG, ids=["node", "workflow", "parameter"])
def test_the_xml_form_bounds_them_alike(write, text, line, phrase):
    path = write(text, "wf.xml")
    err = _one_line_refusal(CliRunner().invoke(cli, ["validate", str(path)]), f"{path}:{line}: ", phrase)
    assert "is 101 characters long; ids and names have at most 100" in err


def test_an_id_of_exactly_the_bound_runs(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: {'w' * 100}\nnodes:\n  {'n' * 100}:\n    run: echo hi\n    parameters: {{{'p' * 100}: [1]}}\n")
    status, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=120)
    assert status == 0, err
    assert output(tmp_path / "run", "n" * 100, 0) == "hi\n"


def test_yaml_xml_and_the_json_schema_say_the_same_bound():
    from lxml import etree

    from pwe.workflow import model, schema

    assert model.MAX_NAME == 100
    xsd = etree.parse(str(ROOT / "schemas" / "workflow.xsd"))
    ns = {"xs": "http://www.w3.org/2001/XMLSchema"}
    for name in ("nodeId", "identifier"):
        bound, = xsd.xpath(f"//xs:simpleType[@name='{name}']//xs:maxLength/@value", namespaces=ns)
        assert int(bound) == model.MAX_NAME, name
    js = json.loads(schema.generate())
    assert js["properties"]["name"]["maxLength"] == model.MAX_NAME
    for where in (js["properties"]["nodes"], js["properties"]["properties"], js["properties"]["limits"],
                  js["$defs"]["Node"]["properties"]["parameters"], js["$defs"]["Node"]["properties"]["env"]):
        assert where["propertyNames"]["maxLength"] == model.MAX_NAME


def _deep_dir(tmp_path, length):
    """A directory whose path is ``length`` characters long (components of 200)."""
    path = str(tmp_path)
    while len(path) < length - 201:
        path += "/" + "d" * 200
    path += "/" + "r" * (length - len(path) - 1)
    assert len(path) == length
    return Path(path)


def _refused_while_running(run_dir, err, why):
    """The member failed with ``why`` (no attempt handed back for ever), one line naming it."""
    from helpers import read_journal

    journal = read_journal(run_dir)
    assert sum(r["e"] == "assign" for r in journal) == 1, [r["e"] for r in journal]  # (was: thousands)
    assert not any(r["e"] == "unassign" for r in journal)
    failed = [line for line in err.splitlines() if "failed:" in line]
    assert len(failed) == 1 and why in failed[0], err


def test_a_member_directory_too_long_for_the_file_system_fails_the_member(tmp_path):
    """A run directory so deep that its members' directories pass PATH_MAX: the pilot could
    not make one (ENAMETOOLONG) and handed the member back, as for a read-only directory;
    the engine, finding members/ writable, gave it out again, for ever, saying nothing
    (the journal grew by a megabyte a minute). Now the member fails, in one line."""
    run_dir = _deep_dir(tmp_path, 4096 - 40)  # (its own files fit; members/<node>/0/0 does not)
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: w\nnodes:\n  {'a' * 60}:\n    run: echo hi\n")
    status, out, err = run_cli("run", wf, "--run-dir", run_dir, cwd=tmp_path, timeout=60)  # (the hang detector)
    assert status == 1, err
    _refused_while_running(run_dir, err, "cannot start: File name too long")


def test_a_file_where_the_member_directory_must_be_fails_the_member(tmp_path):
    """members/<node> is a file (ENOTDIR): the same endless hand-back before; a failed member now."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    run: echo hi\n")
    code = ("import sys\nfrom pathlib import Path\nfrom pwe.engine.loop import Engine\n"
            f"e = Engine.create(Path({str(wf)!r}), run_dir=Path({str(tmp_path / 'run')!r}), cores=1)\n"
            f"Path({str(tmp_path / 'run' / 'members' / 'a')!r}).write_text('in the way')\n"
            "sys.exit(0 if e.run() else 1)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)  # (the hang detector)
    assert proc.returncode == 1, proc.stderr
    from helpers import read_journal

    journal = read_journal(tmp_path / "run")
    assert sum(r["e"] == "assign" for r in journal) == 1 and not any(r["e"] == "unassign" for r in journal)
    end, = [r for r in journal if r["e"] == "end"]
    assert end["rc"] == 126 and "Not a directory" in end["why"], end


# -- every hostile input above, through every command ------------------------------------------

def _catalogue():
    """(id, {file name: text, bytes or a _special kind}, extra arguments): every hostile input
    of this file, as a directory holding wf.yaml (or wf.xml) and what it reads; a hostile
    hosts file is hosts.yaml (beside the workflow: every command reads it)."""
    out = []
    for evil in EVIL_NODES:
        out.append((f"node {evil}", {"hosts.yaml": "hosts:\n  c:\n    cores_per_node: 1\n    nodes: [n1, "
                                     + json.dumps(evil.replace("MARKER", "/tmp/pwned-pwe")) + "]\n",
                                     "wf.yaml": ON_HOST_C}, []))
    out += [(f"{field}={value!r}", {"wf.yaml": _scheduling(field, value)}, [])
            for field, value in zip(SCHEDULING_WORDS, NOT_WORDS * 3)]
    out += [(f"host {entry.strip()}", {"hosts.yaml": "hosts:\n  c:\n    protocol: slurm\n" + entry,
                                       "wf.yaml": ON_HOST_C}, []) for entry, _, _ in HOST_VALUES]
    out += [(case, {"hosts.yaml": _bad_host(entry), "wf.yaml": ON_HOST_C}, []) for case, entry, _, _ in BAD_HOSTS]
    # (its hosts file is fine; it is given with --hosts, so `hosts list` is not asked)
    out += [(f"wide {phrase}", dict(zip(("wide.yaml", "wf.yaml"), _wide(host, sched))), ["--hosts", "wide.yaml"])
            for host, sched, phrase in WIDE]
    out.append(("merged-profile", {"wf.yaml": MERGED}, []))
    out += [(f"nul {phrase} {line}", {"wf.yaml": text}, []) for text, line, phrase in NUL_IN_WORKFLOW]
    out += [(f"nul in {name} {line}", {name: content, "wf.yaml": _from_file(name)}, [])
            for name, content, line, _ in NUL_IN_PARAMETER_FILES]
    out.append(("--set surrogate", {"wf.yaml": USES_P}, SURROGATE_SET))
    out += [(f"xml {ref}", {"wf.xml": _xml(ref)}, []) for ref in ("&#0;", "&#xD800;")]
    out += [(f"template {payload}", {"wf.yaml": _payload(payload)}, []) for payload, _ in TEMPLATES]
    out.append(("oversized workflow", {"wf.yaml": _oversized()}, []))
    out += [(f"workflow is a {kind}", {"wf.yaml": kind}, []) for kind in ("device", "fifo")]
    out += [(f"parameter file is {kind}", {"v.csv": kind, "wf.yaml": _from_file("v.csv")}, [])
            for kind in ("device", "fifo", "large")]
    out += [(f"range {bounds}", {"wf.yaml": _parameters(f"      t: {{range: {bounds}}}\n")}, []) for bounds in NOT_FINITE]
    out += [(f"members {params.strip()}", {"wf.yaml": _parameters(params)}, []) for params, _, _ in TOO_MANY]
    out.append(("members in a run", {"wf.yaml": TOO_MANY_IN_A_RUN}, []))
    out.append(("yaml alias bomb", {"wf.yaml": _laughs()}, []))
    out.append(("many aliases of one anchor", {"wf.yaml": _many_aliases()}, []))
    out.append(("alias bomb in hosts.yaml", {"hosts.yaml": _laughs().replace("name: a", "hosts: {}"),
                                             "wf.yaml": ON_HOST_C}, []))
    out += [(f"long {case}", {"wf.yaml": text}, []) for case, (text, _, _) in
            zip(("node", "workflow", "parameter", "property", "env"), NAMES_TOO_LONG)]
    out += [(f"long xml {case}", {"wf.xml": text}, []) for case, (text, _, _) in
            zip(("node", "workflow", "parameter"), XML_NAMES_TOO_LONG)]
    return out


CATALOGUE = _catalogue()


@pytest.mark.parametrize("files, extra", [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE])
def test_every_hostile_input_is_one_line_from_every_command(tmp_path, monkeypatch, files, extra):
    """validate, plan, run (and hosts list, where the input is a hosts file): exit status 2,
    one line, no traceback, no run directory, nothing else made."""
    from pwe.workflow import templates

    monkeypatch.chdir(tmp_path)
    # a runaway template within half a second, not 5 (that bound: test_a_template_that_fails_or_runs_away_...)
    monkeypatch.setattr(templates, "CHECK_SECONDS", 0.5)
    wf = None
    for name, content in files.items():
        path = tmp_path / name
        if content in ("device", "fifo", "large"):
            _special(path, content)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        wf = path if name.startswith("wf.") else wf
    before = set(os.listdir(tmp_path))
    commands = [["validate", str(wf)], ["plan", str(wf)], ["run", str(wf), "--run-dir", str(tmp_path / "run")]]
    if "hosts.yaml" in files:
        commands.append(["hosts", "list", "--workflow", str(wf)])
    for args in commands:  # (call_cli raises what is not an exit status, and fails a call that starts a process)
        _one_line_refusal(call_cli(*args, *(extra if args[0] != "hosts" else [])))
    assert set(os.listdir(tmp_path)) == before  # no run directory, no ./pwe-runs


def test_an_engine_that_cannot_start_leaves_no_run_directory(tmp_path, monkeypatch):
    """Defence in depth: whatever fails after the run directory is made and before the
    engine exists (here: a lane's protocol) takes the directory away again."""
    import pwe.engine.loop

    def broken(*args, **kwargs):
        raise RuntimeError("no lane")

    monkeypatch.setattr(pwe.engine.loop, "make_lanes", broken)
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: a\nnodes:\n  a: {run: 'true'}\n")
    with pytest.raises(RuntimeError):
        pwe.engine.loop.Engine.create(wf, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
