"""pwe lint FILE (issue 47, part 4): each warning with its file and line, exit 0 (1 with
--strict); a FILE that does not validate, one line and exit 2; and its hostile input: a
FIFO, /dev/zero or a directory for FILE, terminal escapes in a parameter, a range of
10^12 members and one of 10^8 (counted, never expanded), a --json pipe closed early."""

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, call_cli, no_traceback, one_line_error, run_cli
from pwe.planning.lint import MANY_MEMBERS


@pytest.fixture(autouse=True)
def _no_user_hosts(tmp_path, monkeypatch):
    """No hosts.yaml of the user's ($XDG_CONFIG_HOME/pwe) in these tests' registry."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def lint(wf, *args, cwd=None):
    """pwe lint in this process: (exit status, the warnings' lines, stderr)."""
    rc, out, err = call_cli("lint", wf, *args, cwd=cwd or wf.parent)
    no_traceback(err)
    return rc, out.splitlines(), err


def lines_of(text: str, *needles: str) -> list[int]:
    """The line (1-based) of the first line of ``text`` holding each needle."""
    rows = text.splitlines()
    return [next(k for k, row in enumerate(rows, 1) if needle in row) for needle in needles]


# ------------------------------------------------------------------ scripts not in inputs
SCRIPTS = """\
name: scripts
nodes:
  sim:
    parameters: {seed: {range: [0, 3]}}
    run: ./sim.sh {{ seed }} > out.txt
  fit:
    parameters: {seed: {range: [0, 3]}}
    after: [sim]
    run: python3 fit.py --seed {{ seed }} --config=conf/fit.ini
  prep:
    parameters: {seed: {range: [0, 3]}}
    inputs: [scripts/prep.sh, "conf/{{ seed }}.ini"]
    run: bash scripts/prep.sh conf/{{ seed }}.ini
  shuffle:
    reuse: false
    run: bash "$PWE_WORKSPACE"/scripts/prep.sh
  made:
    parameters: {seed: {range: [0, 3]}}
    products: ["res/{{ seed }}.txt"]
    run: cat res/0.txt > res/{{ seed }}.txt; echo {{ seed }}
"""


def _workspace_files(d):
    for name in ("sim.sh", "fit.py", "out.txt", "seed", "conf/fit.ini", "conf/0.ini", "scripts/prep.sh",
                 "res/0.txt"):
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text("echo $PWE_PARAM_SEED\n")


def test_a_script_the_command_calls_that_inputs_do_not_name(write, tmp_path):
    """./sim.sh, python3 fit.py and --config=conf/fit.ini are files of the workspace their
    nodes' inputs: do not name: each warned of at its run's line. Not warned of: what
    inputs: name (a template of them too), a node that is not reused, what a redirection
    writes (out.txt), what a node's products make (res/0.txt), a word of a template ({{ seed
    }} is no file named seed), a file that does not exist."""
    wf = write(SCRIPTS)
    _workspace_files(tmp_path)
    rc, out, err = lint(wf)
    assert rc == 0, err
    sim, fit = lines_of(SCRIPTS, "run: ./sim.sh", "run: python3 fit.py")
    got = [l for l in out if "script-not-an-input" in l or "inputs: do not name" in l]
    assert got == [
        f"{wf}:{sim}: warning: node 'sim' is reused (reuse: true, the default) and its command calls ./sim.sh, a file "
        "of the workspace that its inputs: do not name: an edit to sim.sh would not make its members run again (add "
        "'sim.sh' to its inputs:, or say reuse: false)",
        f"{wf}:{fit}: warning: node 'fit' is reused (reuse: true, the default) and its command calls fit.py, a file of "
        "the workspace that its inputs: do not name: an edit to fit.py would not make its members run again (add "
        "'fit.py' to its inputs:, or say reuse: false)",
        f"{wf}:{fit}: warning: node 'fit' is reused (reuse: true, the default) and its command calls conf/fit.ini, a "
        "file of the workspace that its inputs: do not name: an edit to conf/fit.ini would not make its members run "
        "again (add 'conf/fit.ini' to its inputs:, or say reuse: false)",
    ], out
    assert not any(w in " ".join(out) for w in ("prep.sh", "out.txt", "res/0.txt", "calls seed")), out


def test_no_warning_no_output_and_strict(write, tmp_path):
    """A file with nothing to say: no output, exit 0 with --strict too; one warning: exit 0,
    and 1 with --strict; --json says the same as a document."""
    clean = write("name: clean\nnodes:\n  a:\n    parameters: {x: [1, 2]}\n    run: echo {{ x }}\n", "clean.yaml")
    assert lint(clean) == (0, [], "")
    assert lint(clean, "--strict") == (0, [], "")
    wf = write("name: one\nnodes:\n  a:\n    parameters: {x: [1, 2]}\n    run: echo hi\n", "one.yaml")
    rc, out, _ = lint(wf)
    assert rc == 0 and len(out) == 1 and out[0].startswith(f"{wf}:4: warning: node 'a': parameter 'x'"), out
    assert lint(wf, "--strict")[0] == 1
    rc, out, _ = lint(wf, "--json", "--strict")
    doc = json.loads("\n".join(out))
    assert rc == 1 and doc["count"] == 1 and doc["warnings"][0]["line"] == 4, doc
    assert doc["warnings"][0]["check"] == "parameter-unused" and doc["warnings"][0]["file"] == str(wf), doc
    assert doc["warnings"][0]["fix"] == ("use {{ x }} or $PWE_PARAM_X in its run (replicas meant as such too), or "
                                         "remove the parameter"), doc


# ------------------------------------------------------------------ parameters no template uses
PARAMS = """\
name: params
nodes:
  up:
    parameters:
      case: [a, b]
      seed: [1, 2, 3]
      mesh: [coarse, fine]
      one: [only]
    run: echo {{ seed }} $PWE_PARAM_MESH
  down:
    after: [up]
    parameters:
      case: [a, b]
      level: [1, 2]
      tag: [x, y]
      rep: {range: [0, 1000]}
    products: ["out/{{ level }}.txt"]
    env: {WHICH: PWE_PARAM_TAG}
    run: ./tool.sh
"""


def test_a_parameter_no_template_uses(write, tmp_path):
    """Used: in run ({{ seed }}), as $PWE_PARAM_MESH in run, in products (level), in env
    (tag), by a script the command calls (tool.sh reads $PWE_PARAM_REP), by an edge's
    matching (case); a parameter of one value multiplies nothing. Nothing else here."""
    wf = write(PARAMS)
    (tmp_path / "tool.sh").write_text("#!/bin/sh\necho $PWE_PARAM_REP\n")
    rc, out, _ = lint(wf)
    assert [l for l in out if "parameter '" in l] == [], out
    (tmp_path / "tool.sh").write_text("#!/bin/sh\necho nothing\n")
    rc, out, _ = lint(wf)
    rep, = lines_of(PARAMS, "rep: {range")
    assert [l for l in out if "parameter '" in l] == [
        f"{wf}:{rep}: warning: node 'down': parameter 'rep' (1,000 values: 0, 1, 2, ...) is used by no template of "
        "the node (run, check, products, inputs), no edge and no group, and its command does not read "
        "$PWE_PARAM_REP: it multiplies the members by 1,000, each running the same command (use {{ rep }} or "
        "$PWE_PARAM_REP in its run (replicas meant as such too), or remove the parameter)"], out


def test_terminal_escapes_in_a_parameter_are_shown_inert(write):
    """A parameter's value with escape sequences is shown as text in the warning, one of a
    megabyte in its first 40 characters (a name with an escape is refused by validation:
    one line, shown inert too)."""
    wf = write('name: esc\nnodes:\n  a:\n    parameters: {x: ["\\e]0;pwned\\a", "\\e[2Jb"]}\n    run: echo hi\n')
    rc, out, err = lint(wf)
    assert rc == 0 and len(out) == 1, (out, err)
    assert "\x1b" not in out[0] and "\x07" not in out[0], out
    assert "values: \\x1b]0;pwned\\x07, \\x1b[2Jb)" in out[0], out
    big = write(f'name: big\nnodes:\n  a:\n    parameters: {{x: ["{"v" * 1_000_000}", b]}}\n    run: echo hi\n',
                "big.yaml")
    rc, out, _ = lint(big)  # (a value of a megabyte: the warning shows its first 40 characters)
    assert rc == 0 and len(out) == 1 and f"values: {'v' * 40}..., b)" in out[0] and len(out[0]) < 1000, out
    bad = write('name: esc\nnodes:\n  a:\n    parameters: {"x\\e[31m": [1, 2]}\n    run: echo hi\n', "bad.yaml")
    line = one_line_error(*call_cli("lint", bad, cwd=bad.parent))
    assert line.startswith(f"{bad}:4:") and "\x1b" not in line, line


# ------------------------------------------------------------------ memory, products, hosts
HOSTS = """\
hosts:
  counted:
    protocol: pbs
    cores_per_node: 8
    memory_per_node: 64000
    max_nodes: 1
  parts:
    protocol: pbs
    cores_per_node: 8
    max_nodes: 1
    partitions:
      - {name: short, max_walltime: 100}
      - {name: big, memory_per_node: 500000}
  plain:
    protocol: pbs
    cores_per_node: 8
    max_nodes: 1
  standin:
    protocol: loadleveler
    cores_per_node: 4
    fallback: local
"""


def test_memory_unset_on_a_host_that_states_its_nodes_memory(write, tmp_path):
    """A node without memoryPerMember on a host whose nodes' memory a hosts file states (the
    host's or a partition's): warned at the node's line. Not: one that gives it, one on a
    host that states none, one on the built-in local host (this machine measured), nor one
    whose host falls back to this machine (fallback: local: the stand-in's memory is this
    machine's, measured, not stated). --hosts and --host choose the hosts as validate's do."""
    hosts = write(HOSTS, "hosts.yaml")
    text = """\
name: mem
nodes:
  bare:
    host: counted
    run: echo a
  asked:
    host: counted
    scheduling: {memoryPerMember: 1000}
    run: echo b
  partitioned:
    host: parts
    run: echo c
  nothing:
    host: plain
    run: echo d
  here:
    run: echo e
  fallen:
    host: standin
    run: echo f
"""
    wf = write(text)
    rc, out, _ = lint(wf)
    bare, part = lines_of(text, "  bare:", "  partitioned:")
    got = [l for l in out if "memoryPerMember" in l]
    assert got == [
        f"{wf}:{bare}: warning: node 'bare' gives no memoryPerMember and runs on host 'counted', whose nodes' memory "
        f"{hosts} states (64,000 MB per node): its members are packed as if they used no memory and none is held to "
        "a limit, so one that grows takes the node's memory from the others and the batch system's limit ends the "
        "whole pilot job (give scheduling: memoryPerMember: MB, e.g. what `pwe status RUN --usage` suggests)",
        f"{wf}:{part}: warning: node 'partitioned' gives no memoryPerMember and runs on host 'parts', whose nodes' "
        f"memory {hosts} states (500,000 MB per node): its members are packed as if they used no memory and none is "
        "held to a limit, so one that grows takes the node's memory from the others and the batch system's limit "
        "ends the whole pilot job (give scheduling: memoryPerMember: MB, e.g. what `pwe status RUN --usage` "
        "suggests)"], out
    hosts.rename(tmp_path / "site.yaml")
    wf = write("name: mem\nnodes:\n  a:\n    run: echo a\n", "plain.yaml")
    assert lint(wf) == (0, [], "")
    rc, out, _ = lint(wf, "--hosts", tmp_path / "site.yaml", "--host", "counted")
    assert out == [f"{wf}:3: warning: node 'a' gives no memoryPerMember and runs on host 'counted', whose nodes' "
                   f"memory {tmp_path / 'site.yaml'} states (64,000 MB per node): its members are packed as if they "
                   "used no memory and none is held to a limit, so one that grows takes the node's memory from the "
                   "others and the batch system's limit ends the whole pilot job (give scheduling: memoryPerMember: "
                   "MB, e.g. what `pwe status RUN --usage` suggests)"], out


def test_a_million_members_each_with_a_product_on_a_shared_file_system(write, tmp_path):
    """MANY_MEMBERS (10^6) members with products on a host that shares this machine's file
    system: warned at products:'s line, with the count, from a parameter range (counted,
    not run). One member fewer, or on this machine's own disk (the local host, tmp_path
    not on a network file system): nothing."""
    assert MANY_MEMBERS == 10**6
    write(HOSTS, "hosts.yaml")
    text = """\
name: many
nodes:
  sim:
    host: plain
    scheduling: {{maxWallTimePerMember: 10}}
    parameters: {{i: {{range: [0, {n}]}}}}
    products: ["out/{{{{ i }}}}.txt"]
    run: echo {{{{ i }}}} > out/{{{{ i }}}}.txt
"""
    wf = write(text.format(n=MANY_MEMBERS))
    rc, out, _ = lint(wf)
    products, = lines_of(text, "products:")
    assert out == [
        f"{wf}:{products}: warning: node 'sim' has 1,000,000 members, each with products: (1,000,000 files), and host "
        "'plain' shares this machine's file system (shared_fs: true): that many files in one directory tree load the "
        "file system's metadata servers for every user of it (make one product per group of members (an archive, or "
        "an HDF5 file per range of a parameter), or write them to node-local scratch and keep only a summary)"], out
    wf = write(text.format(n=MANY_MEMBERS - 1))
    assert lint(wf) == (0, [], "")
    wf = write(text.format(n=MANY_MEMBERS).replace("host: plain", "host: local"))
    assert lint(wf) == (0, [], "")


def test_hosts_keys_that_contradict_each_other(write, tmp_path):
    """Each contradiction at its key's line in the hosts file the workflow uses; hosts the
    workflow does not use are not looked at; what a hosts file cannot say at all
    (max_queued_pilots above max_pilots) is refused as validate refuses it."""
    text = """\
hosts:
  pbs1:
    protocol: pbs
    cores_per_node: 8
    max_nodes: 1
    broker: redis://127.0.0.1:6379/0
    remote_dir: elsewhere
    parallel_environment: mpi
    partitions:
      - {name: short, max_walltime: 100}
      - {name: short, max_walltime: 200}
  sge1:
    protocol: sge
    cores_per_node: 4
    max_nodes: 1
    gpus_per_node: 2
  unused:
    protocol: sge
    gpus_per_node: 2
"""
    hosts = write(text, "hosts.yaml")
    wf = write("name: h\nnodes:\n  a: {host: pbs1, run: echo a}\n  b: {host: sge1, run: echo b}\n")
    rc, out, _ = lint(wf)
    broker, remote, pe, second, gpus = lines_of(text, "broker:", "remote_dir:", "parallel_environment:",
                                                "max_walltime: 200", "gpus_per_node: 2")
    assert out == [
        f"{hosts}:{broker}: warning: host 'pbs1': broker is given but transport is spool (the default): the broker "
        "is never used (say transport: redis to use it, or remove the broker keys)",
        f"{hosts}:{remote}: warning: host 'pbs1': remote_dir given but shared_fs is true: nothing is staged, so it is "
        "never used (say shared_fs: false to stage runs to the login node, or remove it)",
        f"{hosts}:{pe}: warning: host 'pbs1': parallel_environment is given but protocol pbs has none (Grid Engine's "
        "-pe): it is never used (remove it, or use protocol: sge)",
        f"{hosts}:{second}: warning: host 'pbs1': partition 'short' is listed twice (entries 1 and 2) with its own "
        "limits each; a node's queue: finds the first (keep one entry per partition)",
        f"{hosts}:{gpus}: warning: host 'sge1': gpus_per_node 2 but protocol sge cannot ask for GPUs: a member that "
        "asks for them is refused here (run GPU members on a SLURM or PBS host, or drop gpus_per_node)",
    ], out
    write(text + "    max_pilots: 2\n    max_queued_pilots: 3\n", "hosts.yaml")
    wf = write("name: h\nnodes:\n  a: {host: unused, run: echo a}\n")
    line = one_line_error(*call_cli("lint", wf, cwd=wf.parent))
    assert line.startswith(f"{hosts}:") and "max_queued_pilots (3) is more than max_pilots (2)" in line, line


# ------------------------------------------------------------------ walltime against earlier runs
def test_a_member_walltime_far_from_what_the_last_runs_measured(write, tmp_path):
    """A real run of the workflow measures its members (about 1.2 s the longest); then a
    walltime below it (0.01 min) and one more than 10x it (600 min) are warned of at
    maxWallTimePerMember's line with the numbers; 5 min is neither. A damaged run of it
    says nothing. Runs are looked for in ./pwe-runs: from another directory, none is found
    and nothing is said."""
    text = """\
name: wt
nodes:
  nap:
    parameters: {{i: [1, 2]}}
    scheduling: {{maxWallTimePerMember: {wall}}}
    run: sleep 1.{{{{ i }}}}
"""
    wf = write(text.format(wall=5))
    rc, out, err = run_cli("run", wf, cwd=tmp_path)
    assert rc == 0, err
    line, = lines_of(text, "maxWallTimePerMember")
    run_id = next((tmp_path / "pwe-runs").iterdir()).name
    wf = write(text.format(wall=0.01))
    rc, out, _ = lint(wf)
    assert len(out) == 1 and out[0].startswith(
        f"{wf}:{line}: warning: node 'nap': maxWallTimePerMember 0.01 min (1 s), and the longest of 2 attempts the "
        "last 1 run(s) of this workflow here measured took "), out
    assert out[0].endswith(f" s ({run_id}): members like it would be killed at their walltime (give "
                           "maxWallTimePerMember: 1 (the longest and half again, in minutes))"), out
    damaged = tmp_path / "pwe-runs" / "zz-damaged"  # (newer than the real one, of this workflow here)
    damaged.mkdir()
    (damaged / "workflow.yaml").write_text(text.format(wall=5))
    (damaged / "journal.jsonl").write_text('garbage\n{"e":\n')
    (damaged / "run.json").write_text(json.dumps({"run_id": "zz-damaged", "workflow": str(wf.resolve()),
                                                  "workspace": str(tmp_path), "copy": "workflow.yaml", "lanes": {}}))
    wf = write(text.format(wall=600))
    rc, out, _ = lint(wf)
    assert len(out) == 1 and "maxWallTimePerMember 600 min (36,000 s)" in out[0] and "more than 10x" in out[0], out
    assert "last 1 run(s) of this workflow here measured took" in out[0] and f"({run_id})" in out[0], out
    wf = write(text.format(wall=5))
    assert lint(wf) == (0, [], "")
    other = tmp_path / "elsewhere"
    other.mkdir()
    wf = write(text.format(wall=0.01))
    rc, out, _ = lint(wf, cwd=other)  # (./pwe-runs of another directory: no run of it)
    assert out == [], out


# ------------------------------------------------------------------ hostile input
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_file_that_is_not_a_regular_file_is_refused_unread(tmp_path, kind):
    """A FIFO (no writer: a read would wait for ever), /dev/zero (a read would never end), a
    directory: refused as validate refuses them, one line, exit 2, at once."""
    if kind == "fifo":
        path = tmp_path / "wf.yaml"
        os.mkfifo(path)
        said = "not a regular file (a FIFO)"
    elif kind == "dev-zero":
        path, said = "/dev/zero", "not a regular file (a device)"
    else:
        path, said = tmp_path, "is a directory, not a workflow file"
    line = one_line_error(*run_cli("lint", path, cwd=tmp_path, timeout=60))
    assert line == f"{path}: {said}" + ("; a workflow file must be a regular file" if kind != "directory" else ""), line


def test_a_huge_range_is_counted_never_expanded(write, tmp_path, monkeypatch):
    """10^12 members: the usual refusal (one line, exit 2). 10^8 (the most a run has) with
    products: linted with a handful of members' values looked at, never 10^8 of them."""
    wf = write("name: huge\nnodes:\n  a:\n    parameters: {i: {range: [0, 1000000000000]}}\n    run: echo {{ i }}\n")
    line = one_line_error(*call_cli("lint", wf, cwd=tmp_path))
    assert line.startswith(f"{wf}:4:") and "1,000,000,000,000" in line, line
    from pwe.planning.params import ParameterSpace

    looked = []
    values_of = ParameterSpace.values_of
    monkeypatch.setattr(ParameterSpace, "values_of", lambda self, i: looked.append(i) or values_of(self, i))
    write("hosts:\n  plain: {protocol: pbs, cores_per_node: 8, max_nodes: 1}\n", "hosts.yaml")
    wf = write("name: huge\nnodes:\n  a:\n    host: plain\n    parameters: {i: {range: [0, 100000000]}}\n"
               "    products: ['o/{{ i }}']\n    run: echo {{ i }} > o/{{ i }}\n")
    rc, out, _ = lint(wf)
    assert rc == 0 and len(out) == 1 and "has 100,000,000 members" in out[0], out
    assert len(looked) < 100, len(looked)


def test_json_into_a_pipe_closed_early(write, tmp_path):
    """`pwe lint FILE --json | head -c1`: the document is larger than a pipe holds (300
    warnings), so pwe is still writing when head has gone: no traceback, the reader has
    what it wanted; the same in text."""
    nodes = "".join(f"  n{k}:\n    parameters: {{x: [1, 2]}}\n    run: echo {k}\n" for k in range(300))
    write(f"name: wide\nnodes:\n{nodes}")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for extra in ("--json", ""):
        proc = subprocess.run(["bash", "-c", f'"$0" -m pwe lint wf.yaml {extra} | head -c1; '
                               'echo " ${PIPESTATUS[0]}"', sys.executable], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=120)
        assert proc.stdout == ("{" if extra else "w") + " 0\n", proc.stdout  # (its first byte; pwe's exit 0)
        assert proc.stderr == "", proc.stderr


def test_files_the_command_names_that_are_not_regular_files_are_never_read(write, tmp_path):
    """The command names a FIFO (a read would wait for a writer for ever), a link to
    /dev/zero (a read would never end) and a link out of the workspace to a script that
    reads $PWE_PARAM_SEED: none is opened, none is a file inputs: could name, so each is
    passed over (no script warning), and the parameter they might have read is warned of."""
    os.mkfifo(tmp_path / "pipe.sh")
    (tmp_path / "zero.sh").symlink_to("/dev/zero")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.sh"
    outside.write_text("echo $PWE_PARAM_SEED\n")
    (tmp_path / "out.sh").symlink_to(outside)
    wf = write("name: odd\nnodes:\n  a:\n    parameters: {seed: [1, 2]}\n    run: ./pipe.sh; ./zero.sh; ./out.sh\n")
    rc, out, err = run_cli("lint", wf, cwd=tmp_path, timeout=60)
    no_traceback(err)
    assert rc == 0 and len(out.splitlines()) == 1, (out, err)
    assert out.startswith(f"{wf}:4: warning: node 'a': parameter 'seed' (2 values: 1, 2)"), out


def test_an_xml_workflow_is_linted_with_its_lines(write, tmp_path):
    """The same warnings of the XML form, at its lines."""
    (tmp_path / "sim.sh").write_text("#!/bin/sh\n")
    text = """\
<workflow name="x">
  <node id="a">
    <parameter name="mesh"><value>coarse</value><value>fine</value></parameter>
    <run>./sim.sh</run>
  </node>
</workflow>
"""
    wf = write(text, "wf.xml")
    rc, out, _ = lint(wf)
    assert [l.split(": warning: ")[0] for l in out] == [f"{wf}:3", f"{wf}:4"], out
    assert "parameter 'mesh'" in out[0] and "calls ./sim.sh" in out[1], out
