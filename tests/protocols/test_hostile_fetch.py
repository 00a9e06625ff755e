"""A hostile login node: the names it lists are confined to the run directory (issue 31.1).

The login node is a real SSH server in this test (paramiko's server side, on 127.0.0.1,
its host key made here and put in the known_hosts the host entry names). Its commands
run for real on this machine's files (its "disk" is a directory of the test), its SFTP
serves those files, and its ``pwe`` is a stub that makes a finished run there. What it
lies about is the listing of the run directory: a name climbing out (``../``), an
absolute name, a name with a line break; and a product fetched into a workspace where a
symlink leads out. A real ``pwe run`` on the workstation stages, submits, follows and
fetches over that connection; the fetch is refused in one line naming the name, the exit
status is not 0, and not one file is written outside the run directory (nor any file of
the refused batch inside it).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers import ROOT

paramiko = pytest.importorskip("paramiko")

PY = sys.executable

#: the login node's ``pwe``: ``submit`` makes a finished run (its files, a product), ``status`` says so
FAKE_PWE = r'''
import json, os, sys
args = sys.argv[1:]
def opt(name):
    return args[args.index(name) + 1]
if args[0] == "submit":
    run, ws, rid = opt("--run-dir"), opt("--workspace"), opt("--run-id")
    os.makedirs(f"{run}/members/a/0/0", exist_ok=True)
    os.makedirs(f"{ws}/out", exist_ok=True)
    with open(f"{run}/run.json", "w") as fh:
        json.dump({"run_id": rid, "workflow": "x", "copy": "workflow.yaml"}, fh)
    with open(f"{run}/members/a/0/0/stdout", "w") as fh:
        fh.write("hello\n")
    with open(f"{ws}/out/0.txt", "w") as fh:
        fh.write("product\n")
    print(json.dumps({"run_id": rid, "run_dir": run}))
elif args[0] == "status":
    print(json.dumps({"phase": "succeeded", "totals": {"done": 1}}))
else:
    sys.exit(2)
'''

_LIST_MARK = "find . -type f -printf"


class LoginNode(paramiko.ServerInterface):
    """Accepts the test's key; runs each command for real, but answers the listing of a
    run directory with the extra names ``lies`` (each made there first, so that a fetch
    that believed them would find a file to bring)."""

    def __init__(self, client_key, lies):
        self.client_key = client_key
        self.lies = lies

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        ok = key.get_base64() == self.client_key.get_base64()
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        threading.Thread(target=self._exec, args=(channel, command.decode()), daemon=True).start()
        return True

    def _exec(self, chan, command):
        p = subprocess.run(["sh", "-c", command], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        out = p.stdout
        words = shlex.split(command)
        if _LIST_MARK in command and words[-1].endswith("/run"):
            directory = words[-1]
            for name in self.lies:
                there = Path(directory + "/" + name)  # (where the remote path of that name is, there)
                there.parent.mkdir(parents=True, exist_ok=True)
                there.write_text("planted by the login node\n")
                out += f"26 644 {name}\0".encode()
        chan.sendall(out)
        chan.sendall_stderr(p.stderr)
        chan.send_exit_status(p.returncode)
        chan.close()


class Handle(paramiko.SFTPHandle):
    def stat(self):
        try:
            return paramiko.SFTPAttributes.from_stat(os.fstat(self.readfile.fileno()))
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)

    def chattr(self, attr):
        try:
            if attr.st_size is not None:
                self.writefile.truncate(attr.st_size)
            return paramiko.SFTP_OK
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)


class Disk(paramiko.SFTPServerInterface):
    """SFTP over this machine's files (the login node's disk), paths as given."""

    def _do(self, fn, *args):
        try:
            fn(*args)
            return paramiko.SFTP_OK
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)

    def canonicalize(self, path):
        return os.path.normpath(path if path.startswith("/") else os.path.join(os.getcwd(), path))

    def stat(self, path):
        try:
            return paramiko.SFTPAttributes.from_stat(os.stat(path))
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)

    lstat = stat

    def open(self, path, flags, attr):
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)
        mode = "rb" if not flags & (os.O_WRONLY | os.O_RDWR) else ("r+b" if flags & os.O_RDWR else "wb")
        fh = os.fdopen(fd, mode)
        h = Handle(flags)
        h.filename, h.readfile, h.writefile = path, fh, fh
        return h

    def mkdir(self, path, attr):
        return self._do(os.mkdir, path, 0o700)

    def remove(self, path):
        return self._do(os.remove, path)

    def rename(self, old, new):
        return self._do(os.replace, old, new)

    posix_rename = rename

    def chattr(self, path, attr):
        return self._do(os.chmod, path, attr.st_mode & 0o7777) if attr.st_mode is not None else paramiko.SFTP_OK


@pytest.fixture
def login_node(tmp_path):
    """start(lies) -> the hosts file of a host whose login node is the hostile server."""
    host_key = paramiko.ECDSAKey.generate()
    client_key = paramiko.ECDSAKey.generate()
    identity = tmp_path / "id_ecdsa"
    client_key.write_private_key_file(str(identity))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    transports = []
    state = {"lies": []}

    def serve():
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            t = paramiko.Transport(sock)
            t.add_server_key(host_key)
            t.set_subsystem_handler("sftp", paramiko.SFTPServer, Disk)
            t.start_server(server=LoginNode(client_key, state["lies"]))
            transports.append(t)

    threading.Thread(target=serve, daemon=True).start()
    fake = tmp_path / "fakepwe.py"
    fake.write_text(FAKE_PWE)
    (tmp_path / "ssh_config").write_text("")
    login = tmp_path / "login"
    login.mkdir()

    def start(lies):
        state["lies"][:] = lies
        hosts = tmp_path / "hosts.yaml"
        hosts.write_text(json.dumps({"hosts": {"far": {
            "protocol": "ssh", "contact": f"ssh://tester@127.0.0.1:{port}", "shared_fs": False,
            "remote_dir": str(login), "remote_pwe": [PY, str(fake)], "identity_file": str(identity),
            "known_hosts": str(known), "ssh_config": str(tmp_path / "ssh_config"), "cores_per_node": 1}}}))
        return hosts

    yield start
    listener.close()
    for t in transports:
        t.close()


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def test_a_login_node_listing_names_out_of_the_run_directory_is_refused(tmp_path, login_node):
    """Each lie of the listing, one run each: refused in one line naming it, exit status not
    0; nothing written outside the run directory, and nothing of the refused fetch inside."""
    abs_target = tmp_path / "abs-target"
    lies = {"climbs": "../escape", "absolute": str(abs_target), "line break": "a\nb"}
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(home))
    for what, lie in lies.items():
        ws = tmp_path / f"ws-{what.replace(' ', '-')}"
        ws.mkdir()
        wf = ws / "wf.yaml"
        wf.write_text("name: far\ndefaults: {host: far}\nnodes:\n  a:\n    run: 'true'\n")
        hosts = login_node([lie])
        run_dir = tmp_path / f"run-{what.replace(' ', '-')}"
        before = files_under(tmp_path) - files_under(tmp_path / "login")
        p = subprocess.run([PY, "-m", "pwe", "run", str(wf), "--hosts", str(hosts), "--run-dir", str(run_dir)],
                           cwd=ws, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        lines = p.stderr.strip().splitlines()
        assert p.returncode != 0, (what, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr and lines, (what, p.stderr)
        last = lines[-1]
        assert f"into {run_dir}: {lie!r} is not a plain relative name" in last and "refused" in last, (what, p.stderr)
        after = files_under(tmp_path) - files_under(tmp_path / "login")
        written = after - before
        outside = [f for f in written if not f.is_relative_to(run_dir)]
        assert outside == [], (what, outside)
        assert not (tmp_path / "escape").exists() and not abs_target.exists()
        # checked before any file of the fetch was written: the good ones did not come either
        assert not (run_dir / "members" / "a").exists() and not (run_dir / "a\nb").exists(), (what, sorted(written))


def test_a_product_fetched_through_a_symlink_out_of_the_workspace_is_refused(tmp_path, login_node):
    """The workspace holds a symlink to a directory elsewhere, and a member's product is
    listed under it: refused in one line, the directory the link names stays empty."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "out").symlink_to(elsewhere)
    wf = ws / "wf.yaml"
    wf.write_text("name: far\ndefaults: {host: far}\nnodes:\n  a:\n    run: 'true'\n    products: ['out/0.txt']\n")
    hosts = login_node([])
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(home))
    run_dir = tmp_path / "run"
    p = subprocess.run([PY, "-m", "pwe", "run", str(wf), "--hosts", str(hosts), "--run-dir", str(run_dir)],
                       cwd=ws, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode != 0 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    last = p.stderr.strip().splitlines()[-1]
    assert "'out/0.txt'" in last and "leads out of" in last and "refused" in last, p.stderr
    assert list(elsewhere.iterdir()) == []
    # the run directory's own files came before the products: they stay
    assert (run_dir / "members" / "a" / "0" / "0" / "stdout").read_text() == "hello\n"  # (the fake login node's file)


def test_the_stager_confines_every_name_before_it_fetches_any(tmp_path):
    """protocols.staging.Stager.get: a batch holding one name out of its directory fetches
    nothing at all (its runner is never asked), and says which name, in one line."""
    from pwe.base.errors import Unconfined
    from protocols.runner import CommandRunner
    from protocols.staging import Stager

    class Never(CommandRunner):
        def _run(self, argv, timeout, input, cwd):
            raise AssertionError(f"ran {argv}")

        def sftp(self):
            raise AssertionError("opened sftp")

    into = tmp_path / "into"
    into.mkdir()
    (into / "link").symlink_to(tmp_path)
    for bad in ("../x", "/etc/x", "a\nb", "a\0b", "link/x", "x" * 5000, ""):
        with pytest.raises(Unconfined) as caught:
            Stager(Never()).get(into, [("/there/good", "good"), ("/there/bad", bad)])
        assert "\n" not in str(caught.value) and "refused" in str(caught.value)
    assert sorted(p.name for p in into.iterdir()) == ["link"]


def test_a_run_json_naming_a_workflow_copy_outside_its_run_directory_is_refused(tmp_path):
    """A name read back from a file of the run directory is confined as a listing's is:
    run.json's ``copy`` climbing out is one line, exit status 2, and the file it names is
    never read as the run's workflow."""
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a:\n    run: 'true'\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def pwe(*args):
        return subprocess.run([PY, "-m", "pwe", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)

    assert pwe("run", "wf.yaml", "--run-dir", "r").returncode == 0
    (tmp_path / "elsewhere.yaml").write_text("name: w\nnodes:\n  a:\n    run: 'true'\n")
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    info.update(copy="../elsewhere.yaml", workflow=str(tmp_path / "gone.yaml"))
    (tmp_path / "r" / "run.json").write_text(json.dumps(info))
    p = pwe("show", "r")
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    (line,) = p.stderr.strip().splitlines()
    assert "run.json" in line and "'../elsewhere.yaml'" in line and "refused" in line, line
