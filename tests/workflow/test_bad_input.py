"""Bad input: one line `FILE:LINE: message`, exit status 2, no traceback. YAML side.

(The XML form's malformed inputs are in test_xml.py.)
"""

import pytest
from click.testing import CliRunner

from pwe.cli.main import cli
from helpers import call_cli, run_cli

GOOD_NODE = "nodes:\n  a:\n    run: echo hi\n"

# (id, file content, expected line or None, phrase the message must contain)
CASES = [
    ("empty-file", "", None, "the file is empty"),
    ("only-comments", "# nothing\n\n", None, "the file is empty"),
    ("list-document", "- a\n- b\n", 1, "the document is a list"),
    ("scalar-document", "hello\n", 1, "the document is a single value"),
    ("two-documents", "name: a\n" + GOOD_NODE + "---\nname: b\n", None, "2 YAML documents"),
    ("yaml-syntax", "name: a\nnodes:\n  a:\n    run: [echo\n", 5, "YAML syntax error"),
    ("bad-indent", "name: a\nnodes:\n  a:\n    run: echo\n   after: b\n", 5, "YAML syntax error"),
    ("tab-indent", "name: a\nnodes:\n\ta:\n", 3, "YAML syntax error"),
    ("duplicate-key", "name: a\nname: b\n" + GOOD_NODE, 2, "duplicate key 'name' (first given on line 1)"),
    ("duplicate-node", "name: a\nnodes:\n  a: {run: x}\n  a: {run: y}\n", 4, "duplicate key 'a'"),
    ("binary-junk", b"\x89PNG\r\n\x1a\n\x00\x00\rIHDR", 1, "not UTF-8 text"),
    ("nul-byte", "name: a\n\x00\n", 2, "NUL byte"),
    ("control-char", "name: a\x07b\n" + GOOD_NODE, 1, "not a YAML text file"),
    ("missing-name", GOOD_NODE, 1, "'name': missing"),
    ("missing-nodes", "name: a\n", 1, "'nodes': missing"),
    ("empty-nodes", "name: a\nnodes: {}\n", 2, "'nodes'"),
    ("missing-run", "name: a\nnodes:\n  a:\n    after: []\n", 3, "the node has no payload: give 'run'"),
    ("blank-run", "name: a\nnodes:\n  a:\n    run: '   '\n", 4, "the payload is blank"),
    ("typo-top-key", "name: a\nnode:\n  a: {run: x}\n", 2, "unknown key 'node' (did you mean 'nodes'?)"),
    ("typo-node-key", "name: a\nnodes:\n  a:\n    run: x\n    afer: [b]\n", 5, "did you mean 'after'?"),
    ("typo-scheduling", "name: a\nnodes:\n  a:\n    run: x\n    scheduling:\n      maxWalltime: 5\n", 6,
     "did you mean 'maxWallTime'?"),
    ("wrong-type-retries", "name: a\nnodes:\n  a:\n    run: x\n    retries: many\n", 5, "'nodes.a.retries'"),
    ("negative-walltime", "name: a\ndefaults:\n  scheduling: {maxWallTime: -5}\n" + GOOD_NODE, 3,
     "greater than 0"),
    ("bool-for-count", "name: a\nnodes:\n  a:\n    run: x\n    scheduling: {ranksPerMember: true}\n", 5,
     "ranksPerMember"),
    ("min-above-max", "name: a\nnodes:\n  a:\n    run: x\n    scheduling: {minCpus: 8, maxCpus: 2}\n", 5,
     "minCpus (8) is larger than maxCpus (2)"),
    ("bad-combine", "name: a\nnodes:\n  a:\n    run: x\n    combine: cross\n", 5, "'product' or 'zip'"),
    ("empty-values", "name: a\nnodes:\n  a:\n    run: x\n    parameters:\n      t: []\n", 6, "must not be empty"),
    ("scalar-values", "name: a\nnodes:\n  a:\n    run: x\n    parameters:\n      t: 5\n", 6,
     "a parameter's values are a list"),
    ("nested-value", "name: a\nnodes:\n  a:\n    run: x\n    parameters:\n      t: [[1, 2]]\n", 6,
     "'nodes.a.parameters.t[0]'"),
    ("range-zero-step", "name: a\nnodes:\n  a:\n    run: x\n    parameters:\n      t: {range: [0, 9, 0]}\n", 6,
     "step of a range cannot be 0"),
    ("range-empty", "name: a\nnodes:\n  a:\n    run: x\n    parameters:\n      t: {range: [5, 1]}\n", 6,
     "is empty"),
    ("range-typo", "name: a\nnodes:\n  a:\n    run: x\n    parameters:\n      t: {range: [0, 3], stpe: 1}\n", 6,
     "unknown key 'stpe'"),
    ("bad-param-name", "name: a\nnodes:\n  a:\n    run: x\n    parameters:\n      1t: [1]\n", 6,
     "not a valid name"),
    ("zip-unequal", "name: a\nnodes:\n  a:\n    run: x\n    combine: zip\n    parameters:\n      t: [1, 2]\n"
     "      s: [1, 2, 3]\n", 5, "zip needs parameters of equal length, got t=2, s=3"),
    ("case-clash", "name: a\nnodes:\n  a:\n    run: x\n    parameters:\n      t: [1]\n      T: [2]\n", 7,
     "would both be PWE_PARAM_T"),
    ("cycle", "name: a\nnodes:\n  a: {run: x, after: [c]}\n  b: {run: x, after: [a]}\n  c: {run: x, after: [b]}\n",
     None, "cycle: a -> b -> c -> a"),
    ("self-dependency", "name: a\nnodes:\n  a:\n    run: x\n    after: [a]\n", 5, "lists itself"),
    ("unknown-dependency", "name: a\nnodes:\n  prepare: {run: x}\n  b:\n    run: x\n    after: [prepar]\n", 6,
     "unknown node 'prepar' (did you mean 'prepare'?)"),
    ("undefined-template-name", "name: a\nproperties: {nsteps: 1}\nnodes:\n  a:\n    run: ./sim {{ nstep }}\n", 5,
     "undefined name 'nstep' (did you mean 'nsteps'?)"),
    ("template-syntax", "name: a\nnodes:\n  a:\n    run: echo {{ x \n", 4, "template error"),
    ("bad-workflow-name", "name: 'my flow'\n" + GOOD_NODE, 1, "not a valid name"),
    ("properties-not-mapping", "name: a\nproperties: [1, 2]\n" + GOOD_NODE, 2, "'properties'"),
    ("unhashable-key", "name: a\n? [1, 2]\n: x\n" + GOOD_NODE, 2, "mapping key must be a plain value"),
    ("unknown-tag", "name: !!python/object:os.system a\n" + GOOD_NODE, 1, "unsupported YAML tag"),
    ("missing-param-file", "name: a\nnodes:\n  a:\n    run: x\n    parameters:\n      t: {file: nope.csv}\n", 6,
     "no such file"),
]


@pytest.mark.parametrize("case_id,text,line,phrase", CASES, ids=[c[0] for c in CASES])
def test_bad_workflow_is_one_clear_line(write, case_id, text, line, phrase):
    path = write(text)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == ""
    err = result.stderr
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    prefix = f"{path}:{line}: " if line else f"{path}"
    assert err.startswith(prefix), err
    assert phrase in err, err


def test_cycle_points_at_a_line_of_the_cycle(write):
    path = write("name: a\nnodes:\n  a: {run: x, after: [c]}\n  b: {run: x, after: [a]}\n  c: {run: x, after: [b]}\n")
    err = CliRunner().invoke(cli, ["validate", str(path)]).stderr
    assert err.split(":")[1] in {"3", "4", "5"}


def test_bad_csv_values_name_the_csv_line(write, tmp_path):
    (tmp_path / "v.csv").write_text("a,b\n1,2\n3\n")
    path = write("name: a\nnodes:\n  n:\n    run: x\n    parameters:\n      b: {file: v.csv}\n")
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{tmp_path / 'v.csv'}:3: ")


def test_bad_csv_column_gets_did_you_mean(write, tmp_path):
    (tmp_path / "v.csv").write_text("temperature\n1\n")
    path = write("name: a\nnodes:\n  n:\n    run: x\n    parameters:\n      temp: {file: v.csv, column: temprature}\n")
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "did you mean 'temperature'?" in result.stderr


def test_bad_set_option(write):
    path = write("name: a\n" + GOOD_NODE)
    result = CliRunner().invoke(cli, ["plan", str(path), "--set", "novalue"])
    assert result.exit_code == 2 and "expected NAME=VALUE" in result.stderr


def test_set_that_no_payload_uses_is_refused_before_anything_runs(write, tmp_path):
    path = write("name: a\nproperties: {nsteps: 10}\nnodes:\n  a:\n    run: echo {{ nsteps }}\n")
    run_dir = tmp_path / "run"
    status, out, err = call_cli("run", path, "--set", "nstep=3", "--run-dir", run_dir)
    assert status == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert err == f"--set nstep=3: no payload in {path.name} uses the property 'nstep' (did you mean 'nsteps'?)\n"
    assert not run_dir.exists()
    # a name the payload reads is fine, declared under properties or not
    assert CliRunner().invoke(cli, ["plan", str(path), "--set", "nsteps=3"]).exit_code == 0
    other = write("name: b\nnodes:\n  a:\n    run: echo {{ t }}\n", name="b.yaml")
    assert CliRunner().invoke(cli, ["plan", str(other), "--set", "t=1"]).exit_code == 0
    shadowed = write("name: c\nnodes:\n  a:\n    parameters: {t: [1, 2]}\n    run: echo {{ t }}\n", name="c.yaml")
    result = CliRunner().invoke(cli, ["plan", str(shadowed), "--set", "t=5"])
    assert result.exit_code == 2 and "no payload in c.yaml uses the property 't'" in result.stderr


def test_missing_file_and_directory(tmp_path):
    for target, phrase in ((tmp_path / "nope.yaml", "no such file"), (tmp_path, "is a directory")):
        result = CliRunner().invoke(cli, ["validate", str(target)])
        assert result.exit_code == 2 and phrase in result.stderr


def test_real_entry_point_exit_status_and_no_traceback(write):
    status, out, err = run_cli("validate", write("name: a\nnodes:\n  a: {run: x, after: [zz]}\n"))
    assert status == 2 and out == "" and "Traceback" not in err and err.count("\n") == 1


def test_a_line_break_cannot_smuggle_a_line_into_a_job_script(write, tmp_path):
    path = write('name: a\ndefaults:\n  scheduling: {account: "abc\\ntouch /tmp/pwned"}\nnodes:\n  a: {run: x}\n')
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and result.stderr.startswith(f"{path}:3: ")
    assert "must be one line" in result.stderr
    hosts = tmp_path / "h.yaml"
    hosts.write_text('hosts:\n  c:\n    protocol: slurm\n    partitions:\n      - {name: "short\\nrm -rf x"}\n')
    result = CliRunner().invoke(cli, ["hosts", "list", "--hosts", str(hosts)])
    assert result.exit_code == 2 and "must be one line" in result.stderr


@pytest.mark.parametrize("text, line, phrase", [
    ("root:x:0:0:root:/root:/bin/bash\n", 1, "the document is a single value (str); a hosts file is a mapping with 'hosts'"),
    ("", None, "the file is empty; a hosts file needs at least 'hosts'"),
    ("hosts:\n  c:\n    protocl: slurm\n", 3, "'hosts.c.protocl': unknown key (did you mean 'protocol'?)"),
    ("hosts:\n  c: {protocol: slurm, cores_per_node: many}\n", 2, "'hosts.c.cores_per_node'"),
    ("hosts:\n  c:\n    protocol: local\n    contact: ssh://me@login\n", 2,
     "'hosts.c': protocol local runs on this machine (contact local); for a remote head node use a protocol that "
     "submits there: ssh, slurm, pbs, sge, loadleveler"),
])
def test_bad_hosts_file_is_one_line_naming_it(tmp_path, text, line, phrase):
    hosts = tmp_path / "h.yaml"
    hosts.write_text(text)
    result = CliRunner().invoke(cli, ["hosts", "list", "--hosts", str(hosts)])
    where = f"{hosts}:{line}: " if line else f"{hosts}: "
    assert result.exit_code == 2 and result.stderr.startswith(where + phrase), result.stderr
    assert result.stderr.count("\n") == 1


def test_example_hosts_file_is_valid():
    from helpers import EXAMPLES

    result = CliRunner().invoke(cli, ["hosts", "list", "--hosts", str(EXAMPLES / "hosts.yaml"), "--json"])
    assert result.exit_code == 0, result.stderr
    import json

    assert {h["name"] for h in json.loads(result.stdout)} >= {"cluster", "torque", "four", "head", "local"}


def test_validate_checks_that_every_nodes_host_exists(tmp_path):
    (tmp_path / "hosts.yaml").write_text("hosts:\n  cluster: {protocol: slurm, cores_per_node: 8}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: a\nnodes:\n  prep:\n    run: x\n  sim:\n    after: [prep]\n    host: clustr\n    run: x\n")
    status, out, err = call_cli("validate", wf)
    assert status == 2 and out == "" and "Traceback" not in err, err
    assert err == (f"{wf}:7: node 'sim': unknown host 'clustr' (did you mean 'cluster'?); known hosts: cluster, "
                   "local (pwe hosts list)\n")
    # from defaults: the line of defaults.host
    wf.write_text("name: a\ndefaults:\n  host: clustr\nnodes:\n  prep:\n    run: x\n")
    result = CliRunner().invoke(cli, ["validate", str(wf)])
    assert result.exit_code == 2 and result.stderr.startswith(f"{wf}:3: node 'prep': unknown host 'clustr'")
    # --hosts FILE, as plan and run read it
    other = tmp_path / "other.yaml"
    other.write_text("hosts:\n  clustr: {protocol: pbs, cores_per_node: 8}\n")
    result = CliRunner().invoke(cli, ["validate", str(wf), "--hosts", str(other)])
    assert result.exit_code == 0, result.stderr


def test_an_unknown_protocol_is_one_line_from_every_command(tmp_path):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  grid:\n    protocol: lsf\n    cores_per_node: 8\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: a\nnodes:\n  a:\n    host: grid\n    run: x\n")
    want = (f"{hosts}:3: 'hosts.grid.protocol': unknown protocol 'lsf'; known: local, ssh, slurm, pbs, "
            "sge, loadleveler\n")
    for args in (["plan", wf], ["plan", wf, "--host", "grid"], ["validate", wf], ["run", wf, "--run-dir",
                 tmp_path / "run"], ["hosts", "list", "--hosts", hosts], ["hosts", "check", "grid", "--hosts", hosts]):
        status, out, err = call_cli(*args, cwd=tmp_path)
        assert (status, err) == (2, want), (args, err)
    assert not (tmp_path / "run").exists()
    hosts.write_text("hosts:\n  c: {protocol: slrum}\n")
    status, _, err = call_cli("hosts", "list", "--hosts", hosts)
    assert status == 2 and err == (f"{hosts}:2: 'hosts.c.protocol': unknown protocol 'slrum' (did you mean "
                                   "'slurm'?); known: local, ssh, slurm, pbs, sge, loadleveler\n"), err


# -- a usage error of any command: one line with the hint, exit 2 (issue 22 item 8b) ----------------

def _commands(group=cli, path=()):
    """Every visible command of pwe, as the words that name it (groups walked)."""
    import click

    for name, command in sorted(group.commands.items()):
        if command.hidden:
            continue
        if isinstance(command, click.Group):
            yield from _commands(command, path + (name,))
        else:
            yield path + (name,)


@pytest.mark.parametrize("command", list(_commands()), ids=" ".join)
def test_an_unknown_option_is_one_line_from_every_command(command):
    result = CliRunner().invoke(cli, [*command, "--no-such-thing"], prog_name="pwe")
    said = "pwe " + " ".join(command)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == f"{said}: no such option '--no-such-thing'; `{said} --help` lists them\n"


@pytest.mark.parametrize("args, line", [
    (["run", "WF", "--hots", "h.yaml"],
     "pwe run: no such option '--hots' (did you mean '--hosts'?); `pwe run --help` lists them"),
    (["run"], "pwe run: missing argument 'FILE'; `pwe run --help` says how it is used"),
    (["run", "WF", "--cores", "0"],
     "pwe run: invalid value for '--cores': 0 is out of range; give a whole number from 1 to 100000; "
     "`pwe run --help` says how it is used"),
    (["run", "WF", "--set"], "pwe run: option '--set' requires an argument; `pwe run --help` says how it is used"),
    (["trace", "r", "--format", "xml"], "pwe trace: invalid value for '--format': 'xml' is not one of 'tsv', "
     "'json'; `pwe trace --help` says how it is used"),
    (["status", "--jsn"], "pwe status: no such option '--jsn' (did you mean '--json'?); `pwe status --help` lists them"),
    (["stauts"], "pwe: no such command 'stauts' (did you mean 'status'?); `pwe --help` lists them"),
    (["hosts", "lst"], "pwe hosts: no such command 'lst' (did you mean 'list'?); `pwe hosts --help` lists them"),
    (["pilot", "add", "--count", "2"], "pwe pilot add: no such option '--count'; `pwe pilot add --help` lists them"),
    (["hosts", "check"], "pwe hosts check: missing argument 'NAME'; `pwe hosts check --help` says how it is used"),
    (["--bogus"], "pwe: no such option '--bogus'; `pwe --help` lists them"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "said")
def test_a_usage_error_is_one_line_with_the_hint(write, args, line):
    wf = write("name: a\n" + GOOD_NODE)
    status, out, err = call_cli(*[wf if a == "WF" else a for a in args])
    assert (status, out, err) == (2, "", line + "\n")


def test_help_is_still_help():
    status, out, _ = call_cli("run", "--help")
    assert status == 0 and out.startswith("Usage: pwe run [OPTIONS] FILE")
    status, _, err = call_cli()  # pwe alone: its help, as a usage error
    assert status == 2 and "Usage: pwe [OPTIONS] COMMAND" in err and "status" in err


# -- a workflow or hosts file too large: one line naming the file and the limit (item 8c) ------------

def _huge(path, head):
    """A file of 50 MB: ``head``, then comment lines."""
    with open(path, "w") as fh:
        fh.write(head)
        fh.write(("#" * 79 + "\n") * (50 * 1000 * 1000 // 80))
    return path


@pytest.mark.parametrize("args", [["validate"], ["plan"], ["run"], ["submit"]], ids=" ".join)
def test_a_50_mb_workflow_is_one_line_naming_it_and_the_limit(tmp_path, args):
    wf = _huge(tmp_path / "wf.yaml", "name: a\n" + GOOD_NODE)
    status, out, err = call_cli(*args, wf, cwd=tmp_path)
    assert status == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"{wf}: 47.7 MiB is too large; a workflow file holds at most 4 MiB"), err
    assert not (tmp_path / "pwe-runs").exists()


def test_a_50_mb_hosts_file_is_one_line_naming_it_and_the_limit(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: a\nnodes:\n  a: {run: 'sleep 0.1'}\n")
    hosts = tmp_path / "h.yaml"
    hosts.write_text("hosts:\n  h: {protocol: local}\n")
    rc, out, err = run_cli("submit", wf, "--hosts", hosts, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert rc == 0, err
    from helpers import wait_for

    wait_for(lambda: b'"e":"finish"' in (tmp_path / "run" / "journal.jsonl").read_bytes(), what="the run's end")
    _huge(hosts, "hosts:\n  h: {protocol: local}\n")
    want = f"{hosts}: 47.7 MiB is too large; a hosts file holds at most 4 MiB\n"
    for args in (["validate", wf, "--hosts", hosts], ["run", wf, "--hosts", hosts], ["hosts", "list", "--hosts", hosts],
                 ["resume", tmp_path / "run"]):  # (resume reads the run's hosts file again)
        status, out, err = call_cli(*args, cwd=tmp_path)
        assert (status, out, err) == (2, "", want), args
