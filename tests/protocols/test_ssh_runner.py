"""The SSH command runner (protocols/ssh.py) and `pwe hosts check`, against the real sshd
of tests/services/ on 127.0.0.1:2222 (host pwe-local; same machine, same filesystem)."""

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time

import pytest

from helpers import ROOT, run_cli, wait_for
from protocols.runner import CommandTimeout, ContactError

ssh = pytest.importorskip("protocols.ssh")

HOSTILE = "it's a \"quoted\" value; with $(touch {x}) and `touch {x}` && echo $HOME > {x} | * ?"
ARGV_JSON = ["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


@pytest.fixture(autouse=True)
def no_user_ssh_files(tmp_path, monkeypatch):
    """Only the files a test names: not this user's ~/.ssh (config, known_hosts), not
    /etc/ssh/ssh_known_hosts, not an agent."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setattr(ssh, "GLOBAL_KNOWN_HOSTS", str(tmp_path / "no-global-known-hosts"))
    return home


@pytest.fixture
def local(ssh_nodes):
    """(contact URL, options) of the sshd on 127.0.0.1:2222 with the tests' key and known_hosts."""
    name, addr, port = ssh_nodes.local
    return f"ssh://root@{addr}:{port}", dict(identity_file=str(ssh_nodes.identity),
                                             known_hosts=str(ssh_nodes.known_hosts))


@pytest.fixture
def runner(local):
    contact, opts = local
    r = ssh.SshRunner(contact, **opts)
    yield r
    r.close()


def host_key_line(ssh_nodes):
    """The known_hosts line of 127.0.0.1:2222 from the tests' known_hosts."""
    for line in ssh_nodes.known_hosts.read_text().splitlines():
        if line.startswith("[127.0.0.1]:2222"):
            return line
    raise AssertionError("no [127.0.0.1]:2222 line in the tests' known_hosts")


def test_run_returns_exit_status_stdout_and_stderr(runner):
    res = runner.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.status, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert runner.run(["true"]).status == 0
    assert runner.run(["cat"], input="line 1\nline 2\n").stdout == "line 1\nline 2\n"
    assert runner.run(["no-such-command-pwe"]).status == 127
    assert runner.calls["sh"] == 1 and runner.calls["true"] == 1
    assert runner.connects == 1, "one connection, kept for every command"


def test_a_hostile_argument_arrives_as_one_literal_argument(runner, tmp_path):
    x = tmp_path / "X"
    value = HOSTILE.format(x=x)
    odd_dir = tmp_path / "a dir; with $(touch X) 'quotes'"
    odd_dir.mkdir()
    res = runner.run(ARGV_JSON + [value, "", "two words"], cwd=str(odd_dir))
    assert res.status == 0, res.stderr
    assert json.loads(res.stdout) == [value, "", "two words"]
    assert runner.run(["pwd"], cwd=str(odd_dir)).stdout.strip() == str(odd_dir)
    assert not x.exists() and not (odd_dir / "X").exists() and not (tmp_path / "X").exists()


def test_a_command_that_does_not_answer_raises_command_timeout(runner):
    marker = f"30.{os.getpid()}{int(time.time() * 1000) % 100000}"  # this test's own sleep, to find it
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout, match="sleep did not answer within 1 s"):
        runner.run(["sleep", marker], timeout=1)
    assert time.monotonic() - t0 < 25  # (cut at its timeout: the sleep is 30 s)
    assert runner.run(["echo", "still here"]).stdout == "still here\n"
    assert runner.connects == 1
    # and on the host the command was ended too (closing the channel alone leaves it running)
    def left():
        return [line for line in runner.run(["ps", "-eo", "args"]).stdout.splitlines()
                if line.startswith("sleep " + marker)]
    # the host's timeout ends it 2 s after ours, well before 30 s
    wait_for(lambda: not left(), 30, "the timed-out command to end on the host", step=0.1)


def test_a_command_leaving_a_background_process_returns(runner):
    t0 = time.monotonic()
    res = runner.run(["sh", "-c", "sleep 90 & echo started"], timeout=120)
    assert (res.status, res.stdout) == (0, "started\n")
    assert time.monotonic() - t0 < 60  # (did not wait for the background sleep's 90 s)


def test_write_file_makes_the_directory_and_sets_the_mode(runner, tmp_path):
    path = tmp_path / "new dir" / "deeper" / "job.sh"
    text = "#!/bin/sh\necho \"from $0\" 'é'\n"
    runner.write_file(str(path), text, mode=0o750)
    assert runner.run(["cat", str(path)]).stdout == text
    assert path.read_text() == text
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert runner.run([str(path)]).stdout == f"from {path} é\n"
    runner.write_file(str(path), "short\n")  # overwrite: truncated, not appended
    assert path.read_text() == "short\n"


def test_a_dropped_connection_is_reopened_once(runner):
    assert runner.run(["true"]).status == 0
    runner._client.get_transport().close()  # the login node dropped us
    assert runner.run(["echo", "again"]).stdout == "again\n"
    assert runner.connects == 2


def test_a_connection_dropped_under_a_running_command_is_a_contact_error(runner):
    assert runner.run(["true"]).status == 0
    transport = runner._client.get_transport()
    threading.Timer(0.5, transport.close).start()
    with pytest.raises(ContactError, match="the connection dropped while sleep was running; whether it took "
                                           "effect is unknown"):
        runner.run(["sleep", "3"], timeout=20)  # never run again behind the caller's back
    assert runner.run(["echo", "next"]).stdout == "next\n"
    assert runner.connects == 2


def test_commands_from_many_threads_share_one_connection(runner):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(24) as pool:
        outs = list(pool.map(lambda i: runner.run(["echo", str(i)]).stdout, range(48)))
    assert outs == [f"{i}\n" for i in range(48)]
    assert runner.connects == 1


def test_an_unknown_host_key_is_refused_and_nothing_runs(local, tmp_path, ssh_nodes):
    contact, opts = local
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    x = tmp_path / "X"
    r = ssh.SshRunner(contact, identity_file=opts["identity_file"], known_hosts=str(empty))
    with pytest.raises(ContactError) as err:
        r.run(["touch", str(x)])
    msg = str(err.value)
    fp = subprocess.run(["ssh-keygen", "-lf", "-"], input=" ".join(host_key_line(ssh_nodes).split()[1:]),
                        capture_output=True, text=True).stdout.split()[1]
    assert msg.startswith("cannot reach root@127.0.0.1:2222: its host key is not known (ssh-ed25519 SHA256:")
    assert fp in msg and "nothing was run" in msg
    assert f"ssh-keyscan -p 2222 127.0.0.1 >> {empty}" in msg
    assert "accept_new_host_keys: true" in msg
    assert err.value.host == "root@127.0.0.1:2222"
    assert not x.exists()
    assert empty.read_text() == "", "a refused key is not recorded"


def test_a_wrong_host_key_is_refused_even_when_new_keys_are_accepted(local, tmp_path, ssh_nodes):
    contact, opts = local
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "impostor")], check=True)
    impostor = (tmp_path / "impostor.pub").read_text().split()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:2222 {impostor[0]} {impostor[1]}\n")
    x = tmp_path / "X"
    for accept in (False, True):
        r = ssh.SshRunner(contact, identity_file=opts["identity_file"], known_hosts=str(wrong),
                          accept_new_host_keys=accept)
        with pytest.raises(ContactError) as err:
            r.run(["touch", str(x)])
        msg = str(err.value)
        assert msg.startswith("cannot reach root@127.0.0.1:2222: its host key has CHANGED: it offers "
                              "ssh-ed25519 SHA256:")
        assert "man-in-the-middle" in msg and "nothing was run" in msg
        assert f"ssh-keygen -R '[127.0.0.1]:2222' -f {wrong}" in msg
        assert not x.exists()
    assert wrong.read_text().count("\n") == 1, "the known key is left alone"


def test_accept_new_host_keys_trusts_on_first_use_and_records_the_key(local, tmp_path, ssh_nodes):
    contact, opts = local
    kh = tmp_path / "kh" / "known_hosts"
    r = ssh.SshRunner(contact, identity_file=opts["identity_file"], known_hosts=str(kh), accept_new_host_keys=True)
    assert r.run(["echo", "hello"]).stdout == "hello\n"
    r.close()
    recorded = kh.read_text().split()
    assert recorded == ["[127.0.0.1]:2222"] + host_key_line(ssh_nodes).split()[1:]
    again = ssh.SshRunner(contact, identity_file=opts["identity_file"], known_hosts=str(kh))  # strict now
    assert again.run(["true"]).status == 0
    again.close()


def test_contact_read_through_an_ssh_config_alias(ssh_nodes):
    r = ssh.SshRunner("ssh://pwe-local", ssh_config=str(ssh_nodes.ssh_config))
    try:
        assert r.run(["id", "-un"]).stdout == "root\n"
        assert r.display == "pwe-local (root@127.0.0.1:2222)"
    finally:
        r.close()


def test_unreachable_contacts_raise_one_clear_contact_error(local, tmp_path):
    contact, opts = local
    with pytest.raises(ContactError, match=r"^cannot reach root@127\.0\.0\.1:2299: connection refused: "
                                           r"nothing listens on 127\.0\.0\.1:2299$"):
        ssh.SshRunner("ssh://root@127.0.0.1:2299", **opts).run(["true"])
    with pytest.raises(ContactError, match=r"^cannot reach nobody@127\.0\.0\.1:2222: authentication as nobody "
                                           r"failed \(tried: .*id_ed25519\)"):
        ssh.SshRunner("ssh://nobody@127.0.0.1:2222", **opts).run(["true"])
    with pytest.raises(ContactError, match="identity file .* does not exist"):
        ssh.SshRunner(contact, identity_file=str(tmp_path / "nokey"), known_hosts=opts["known_hosts"]).run(["true"])
    with pytest.raises(ContactError, match="write the contact as ssh://user@host"):
        ssh.SshRunner("ssh://root@host:notaport")


def test_no_connection_and_no_paramiko_before_use():
    code = ("import sys; import protocols.ssh as s, hostinfo.check as c; from hostinfo.model import Host;"
            "r = s.SshRunner('ssh://root@127.0.0.1:2299'); assert r.connects == 0;"
            "checks = c.check_host(Host(name='local', cores_per_node=1));"
            "assert all(ok for _, ok, _ in checks), checks;"
            "assert 'paramiko' not in sys.modules, 'paramiko imported for a local host'")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr


# -- pwe hosts check ---------------------------------------------------------------------------

def hosts_file(write, ssh_nodes, **extra):
    ident, kh = ssh_nodes.identity, ssh_nodes.known_hosts
    text = f"""
hosts:
  remote-slurm:
    protocol: slurm
    contact: ssh://root@127.0.0.1:2222
    partitions: [{{name: debug}}, {{name: short}}]
    properties: {{identity_file: {ident}, known_hosts: {kh}}}
  remote-nodes:
    protocol: local
    contact: local
    ssh_config: {ssh_nodes.ssh_config}
    nodes: [pwe-n1, pwe-n2]
  nowhere:
    protocol: pbs
    contact: ssh://root@127.0.0.1:2299
  stranger:
    protocol: slurm
    contact: ssh://root@127.0.0.1:2222
    properties: {{identity_file: {ident}}}
"""
    return write(text, "hosts.yaml")


def check(name, hosts, *more):
    home = hosts.parent / "home"
    return run_cli("hosts", "check", name, "--hosts", hosts, *more, env={"HOME": str(home), "SSH_AUTH_SOCK": ""})


def test_hosts_check_of_a_slurm_host_over_ssh(write, ssh_nodes, slurm_cluster):
    hosts = hosts_file(write, ssh_nodes)
    rc, out, err = check("remote-slurm", hosts)
    assert rc == 0, out + err
    lines = out.splitlines()
    assert lines[0] == "ok   reach ssh://root@127.0.0.1:2222: remote-slurm (root@127.0.0.1:2222), " \
                       f"hostname {os.uname().nodename}"
    assert f"ok   sbatch: {shutil.which('sbatch')}" in lines
    assert f"ok   squeue: {shutil.which('squeue')}" in lines
    assert any(l.startswith("ok   scancel: ") for l in lines)
    assert any(l.startswith("ok   python3 version: 3.") for l in lines)
    assert any(l.startswith("ok   sinfo partitions: debug* (") and "short (" in l for l in lines)
    assert "remote-slurm: all 6 checks passed" in err

    rc, out, _ = check("remote-slurm", hosts, "--json")
    data = json.loads(out)
    assert rc == 0 and data["ok"] is True and data["host"] == "remote-slurm"
    assert {c["check"] for c in data["checks"]} >= {"sbatch", "squeue", "scancel", "python3 version"}


def test_hosts_check_of_nodes_through_an_ssh_config(write, ssh_nodes):
    rc, out, err = check("remote-nodes", hosts_file(write, ssh_nodes))
    assert rc == 0, out + err
    assert "ok   node pwe-n1: `ssh pwe-n1 true` answered" in out.splitlines()
    assert "ok   node pwe-n2: `ssh pwe-n2 true` answered" in out.splitlines()


def test_hosts_check_of_an_unreachable_host_exits_1_with_one_clear_line(write, ssh_nodes):
    hosts = hosts_file(write, ssh_nodes)
    rc, out, err = check("nowhere", hosts)
    assert rc == 1
    assert out == ("FAIL reach ssh://root@127.0.0.1:2299: cannot reach nowhere (root@127.0.0.1:2299): "
                   "connection refused: nothing listens on 127.0.0.1:2299\n")
    assert "Traceback" not in err and "nowhere: 1 of 1 checks failed" in err

    rc, out, err = check("stranger", hosts)  # the tests' known_hosts not given, the user's is empty
    assert rc == 1
    assert out.startswith("FAIL reach ssh://root@127.0.0.1:2222: cannot reach stranger (root@127.0.0.1:2222): "
                          "its host key is not known (ssh-ed25519 SHA256:")
    assert "ssh-keyscan -p 2222 127.0.0.1 >> ~/.ssh/known_hosts" in out and "Traceback" not in err


def test_hosts_check_of_an_unknown_host_exits_2(write, ssh_nodes):
    rc, out, err = check("no-such-host", hosts_file(write, ssh_nodes))
    assert rc == 2 and out == ""
    assert err.startswith("unknown host 'no-such-host'")
