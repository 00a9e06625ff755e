"""The one error tree (pwe/base/errors.py): every exception class of pwe, protocols and hostinfo
is in it and drawn in its docstring, the host errors keep what the user needs on one
line, the status guard of every protocol, and backend errors that used to reach a user
as a traceback."""

import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys

import pytest

import pwe.base.errors
from helpers import ROOT, run_cli, sample_pilot_job
from protocols.base import JobState, get
from protocols.runner import CommandResult, CommandRunner, CommandTimeout, ContactError, LocalRunner
from pwe.base.errors import HostsFileError, InputError, PweError, SubmitError, UnknownProtocol

PACKAGES = ("pwe", "protocols", "hostinfo")  # pilot/ is standard library only and reports over the wire


def exception_classes():
    """Every exception class defined in a module of PACKAGES, by name."""
    found = {}
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        names = [package] + [m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")]
        for name in names:
            if name.endswith("__main__"):  # runs the CLI
                continue
            module = importlib.import_module(name)
            for cls_name, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == name:
                    found[cls_name] = cls
    return found


def drawing():
    """The tree in pwe.base.errors' docstring: {name: (parent name or None, exit status)}."""
    tree, stack = {}, []
    for line in pwe.base.errors.__doc__.splitlines():
        m = re.match(r"^    ([ |]*)(?:\+-- )?([A-Z]\w+)\s+(\d)\s", line)
        if not m or m.group(2) == "class":
            continue
        depth = (len(m.group(1)) + 4) // 5  # "" 0, " " 1, " |    " or 6 spaces 2
        del stack[depth:]
        tree[m.group(2)] = (stack[-1] if stack else None, int(m.group(3)))
        stack.append(m.group(2))
    return tree


def test_every_exception_class_is_in_the_one_tree_and_drawn():
    classes = exception_classes()
    assert {"PweError", "SubmitError", "CommandTimeout", "ContactError", "JournalError", "RunNotFound",
            "UnknownProtocol", "HostsFileError"} <= set(classes)
    outside = sorted(n for n, c in classes.items() if not issubclass(c, PweError))
    assert not outside, f"derive from PweError: {outside}"
    tree = drawing()
    undrawn = sorted(set(classes) - set(tree))
    assert not undrawn, f"draw in pwe/base/errors.py's docstring: {undrawn}"
    for name, (parent, status) in tree.items():
        cls = classes[name]
        assert cls.exit_status == status, (name, cls.exit_status, status)
        assert cls.__bases__ == ((classes[parent],) if parent else (Exception,)), (name, cls.__bases__, parent)
    assert len(tree) == len(classes)
    # the names the lower layers and the engine import still resolve, to the same classes
    import protocols.base
    import protocols.registry
    import pwe.runstate.journal
    import pwe.runstate.rundir

    assert protocols.base.SubmitError is SubmitError and protocols.registry.UnknownProtocol is UnknownProtocol
    assert pwe.runstate.journal.JournalError is pwe.base.errors.JournalError and pwe.runstate.rundir.RunNotFound is pwe.base.errors.RunNotFound


def test_the_errors_module_is_light_enough_for_the_lower_layers():
    """protocols and hostinfo import pwe.base.errors; importing it (or protocols' runner) must
    not import the engine, pydantic, jinja2 or networkx. The lazy public API still works."""
    code = ("import sys; import pwe.base.errors, protocols.runner; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pwe', 'hostinfo', 'pydantic', 'jinja2', 'networkx', 'yaml', 'lxml', 'paramiko'))))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert json.loads(out) == ["pwe", "pwe.base", "pwe.base.errors"]
    import pwe

    assert pwe.InputError is InputError and callable(pwe.plan_workflow) and callable(pwe.run_workflow)
    assert pwe.Engine.__name__ == "Engine"


def scripted(*answers):
    """A runner that answers each command with the next of ``answers``: a CommandResult,
    or an exception to raise. Which commands ran, ``runner.calls`` counts."""
    runner, left = CommandRunner(), list(answers)

    def answer(argv, timeout, input, cwd):
        a = left.pop(0)
        if isinstance(a, BaseException):
            raise a
        return a

    runner._run = answer
    return runner


def test_a_refused_submission_keeps_command_status_and_stderr_on_one_line():
    said = "sbatch: error: Batch job submission failed:\n  Invalid partition name specified\n"
    r = scripted(CommandResult(["sbatch", "--parsable", "job.sh"], 1, "", said))
    with pytest.raises(SubmitError) as err:
        get("slurm", r).submit(sample_pilot_job(), "job.sh")
    exc = err.value
    assert isinstance(exc, PweError) and exc.exit_status == 1
    assert (exc.command, exc.status, exc.stderr) == (["sbatch", "--parsable", "job.sh"], 1, said)
    assert str(exc) == ("sbatch failed: sbatch: error: Batch job submission failed: / "
                        "Invalid partition name specified")
    # an answer without a job id keeps what was run too
    r = scripted(CommandResult(["llsubmit", "job.sh"], 0, "llsubmit: hm\n", "a warning\n"))
    with pytest.raises(SubmitError) as err:
        get("loadleveler", r).submit(sample_pilot_job(), "job.sh")
    assert (err.value.command, err.value.status, err.value.stderr) == (["llsubmit", "job.sh"], 0, "a warning\n")


def test_timeouts_and_contact_errors_carry_their_command():
    t = CommandTimeout(["squeue", "-h"], 30)
    assert str(t) == "squeue did not answer within 30 s" and t.command == ["squeue", "-h"] and t.timeout == 30
    c = ContactError("me@login1", "connection refused:\nnothing listens", ["sbatch", "x"])
    assert str(c) == "cannot reach me@login1: connection refused: / nothing listens"
    assert (c.command, c.status, c.stderr, c.maybe_ran) == (["sbatch", "x"], None, "", True)
    # a submission that timed out and is not found: the timed-out command, and the chain
    r = scripted(CommandTimeout(["sbatch", "--parsable", "j"], 30), CommandResult(["squeue"], 0, "", ""))
    with pytest.raises(SubmitError, match="sbatch did not answer .* and no job named pwe-r1-p1 exists") as err:
        get("slurm", r).submit(sample_pilot_job(), "j")
    assert err.value.command == ["sbatch", "--parsable", "j"] and isinstance(err.value.__cause__, CommandTimeout)


def test_a_submission_that_could_not_have_run_is_not_looked_up():
    nothing_ran = ContactError("login1", "connection refused", maybe_ran=False)
    r = scripted(nothing_ran)
    with pytest.raises(ContactError) as err:
        get("slurm", r).submit(sample_pilot_job(), "j")
    assert err.value is nothing_ran and r.calls == {"sbatch": 1}  # no squeue -n
    dropped = ContactError("login1", "the connection dropped while sbatch was running")
    r = scripted(dropped, CommandResult([], 0, "77\n", ""))
    assert get("slurm", r).submit(sample_pilot_job(), "j") == "77" and r.calls == {"sbatch": 1, "squeue": 1}


def test_a_bad_ssh_contact_ran_nothing():
    from protocols.ssh import SshRunner

    with pytest.raises(ContactError) as err:
        SshRunner("ssh://me@login1:port")
    assert err.value.maybe_ran is False


@pytest.mark.parametrize("name", ["ssh", "slurm", "pbs", "loadleveler"])
def test_every_protocols_status_guard(name):
    """The common part of status, once in the base: no ids, no query; no answer (a
    timeout, an unreachable host), every job asked about UNKNOWN."""
    r = scripted()
    assert get(name, r).status([]) == {} and not r.calls
    for no_answer in (CommandTimeout(["x"], 1), ContactError("h", "connection refused")):
        r = scripted(no_answer)
        assert get(name, r).status(["7", "8"]) == {"7": JobState.UNKNOWN, "8": JobState.UNKNOWN}
        assert sum(r.calls.values()) == 1
    # a cancel that does not reach the host is not an error: the next status poll tells
    get(name, scripted(ContactError("h", "connection refused"))).cancel(["7"])


def test_a_command_that_cannot_be_executed_is_a_result_not_a_traceback(tmp_path):
    prog = tmp_path / "sbatch"
    prog.write_text("#!/bin/sh\necho hi\n")  # not executable
    res = LocalRunner().run([str(prog)])
    assert res.status == 126 and res.stderr == f"{prog}: Permission denied"
    with pytest.raises(SubmitError, match="failed: .*sbatch: Permission denied"):
        p = get("slurm", LocalRunner())
        p.submit_command = [str(prog)]
        p.submit(sample_pilot_job(pilot_dir=str(tmp_path)), "job.sh")


def test_a_bad_hosts_file_is_a_hosts_file_error(tmp_path):
    import hostinfo

    hosts = tmp_path / "h.yaml"
    for text, message in (("hosts: [\n", "YAML syntax error"), ("hosts:\n  c: {protocol: lsf}\n", "unknown protocol"),
                          ("hosts:\n  c: {protocol: slurm, contact: 'ssh://me@h:port'}\n",
                           "write the contact as ssh://user@host or ssh://user@host:port")):
        hosts.write_text(text)
        with pytest.raises(HostsFileError, match=message) as err:
            hostinfo.load(extra=hosts)
        assert err.value.file == str(hosts) and err.value.exit_status == 2
    with pytest.raises(HostsFileError, match="no such hosts file"):
        hostinfo.load(extra=tmp_path / "none.yaml")
    from protocols.registry import info

    with pytest.raises(UnknownProtocol, match="did you mean 'slurm'") as err:
        info("slrum")
    assert isinstance(err.value, InputError)


def test_a_contact_the_ssh_runner_cannot_read_is_refused_before_a_run(tmp_path):
    """Was: `pwe validate` passed and `pwe run` died with a ContactError traceback after
    making the run directory."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  c:\n    protocol: slurm\n    contact: ssh://me@h:abc\n"
                                         "    cores_per_node: 2\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: a\nnodes:\n  a:\n    host: c\n    run: 'true'\n")
    for args in (["validate", wf], ["run", wf, "--run-dir", tmp_path / "run"]):
        status, _, err = run_cli(*args, cwd=tmp_path)
        assert status == 2 and err == (f"{tmp_path / 'hosts.yaml'}:4: 'hosts.c.contact': contact 'ssh://me@h:abc': "
                                       "write the contact as ssh://user@host or ssh://user@host:port (a port from 1 "
                                       "to 65535)\n"), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("payload, said", [
    ("echo {{ x / 0 }}", "ZeroDivisionError: division by zero"),
    ("echo {{ x.__class__ }}", "access to attribute '__class__' of 'int' object is unsafe."),
    ("echo {{ x.nothing() }}", "'int object' has no attribute 'nothing'"),
])
def test_a_payload_that_cannot_render_is_one_line(tmp_path, payload, said):
    """Was: a jinja2 or Python traceback from `pwe plan`, and from `pwe run` mid-run."""
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: a\nnodes:\n  a:\n    parameters: {{x: [1, 2]}}\n    run: {json.dumps(payload)}\n")
    want = f"{wf}:5: node 'a': member 0 cannot render 'run': {said}\n"
    status, _, err = run_cli("plan", wf, cwd=tmp_path)
    assert (status, err) == (2, want)
    status, _, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert status == 2 and err.splitlines()[-1] == want.rstrip() and "Traceback" not in err, err


def test_notify_that_cannot_write_its_event_is_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "secret").write_text("k" * 64)
    (run / "edges").write_text("")  # where the directory should be
    status, _, err = run_cli("notify", "--run", run, "--pilot", "p1", "started", "42")
    assert status == 1 and "Traceback" not in err
    assert err.startswith(f"pwe notify: cannot record the started event of pilot p1 in {run / 'edges'}: "), err
    assert len(err.splitlines()) == 1
    os.remove(run / "edges")
    assert run_cli("notify", "--run", run, "--pilot", "p1", "started", "42")[0] == 0
