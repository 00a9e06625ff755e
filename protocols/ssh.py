"""The SSH command runner: a protocol's commands run on a login node over one connection.

:class:`SshRunner` is the other :class:`~protocols.runner.CommandRunner`: ``run(argv)`` and
``write_file(path, text)``, nothing more, so the rest of pwe never sees SSH. paramiko is
imported on the first connection, not with this module.

- **Contact.** ``ssh://[user@]host[:port]``. ``host`` may be an alias of an ssh_config
  file (the host's ``ssh_config``, else ``~/.ssh/config``): HostName, Port, User,
  IdentityFile, IdentitiesOnly, UserKnownHostsFile, ConnectTimeout, ServerAliveInterval
  and ProxyCommand are read from it. What the URL says wins over the file.
- **Host keys** are checked against ``/etc/ssh/ssh_known_hosts``, ``~/.ssh/known_hosts``,
  the file's UserKnownHostsFile and the ``known_hosts`` option. An unknown key is refused
  (``accept_new_host_keys`` trusts it on first use and records it); a changed key is
  always refused. Nothing runs on a host whose key was refused.
- **Commands** are argv lists sent shell-quoted (``shlex.join``), so every value reaches
  the remote program as one literal argument. One connection is opened on first use and
  kept; a dropped one is reopened once, and only before a command started, so a
  submission never runs twice.
- **Timeouts.** A command that does not answer in time raises
  :class:`~protocols.runner.CommandTimeout` here, and the host's own ``timeout``
  (coreutils) ends it a moment later there: closing an SSH channel does not stop the
  remote program (OpenSSH ignores a channel's signal request). Hosts without ``timeout``
  run the command as it is.
- **Errors.** paramiko's and the socket's exceptions become
  :class:`~protocols.runner.ContactError` here and nowhere else (:meth:`SshRunner._map`);
  one raised before this runner ever connected says so (``maybe_ran`` False: nothing ran).

Why one module of ~500 lines: the contact, the host-key policy, the connection and the
command path share one connection's state, and the security checks (which key is
trusted, when a command may be sent again) are easiest to review read together.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import logging
import os
import posixpath
import re
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from pilot.allocation import check_node_name

from .runner import CommandResult, CommandRunner, CommandTimeout, ContactError

log = logging.getLogger(__name__)

GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
_BUF = 65536
MAX_SESSIONS = 8  # commands at once over the one connection
_QUIET = logging.NullHandler()
_EXIT_GRACE = 0.5  # s to wait for the end of output once the remote command has exited
#: The remote end of a timeout: the host's coreutils `timeout` (process group: TERM, then
#: KILL 5 s later), given a little longer than we wait so that our CommandTimeout comes
#: first. Without `timeout` on the host, the command runs as it is.
_REMOTE_SLACK = 2
_BOUNDED = ('if command -v timeout >/dev/null 2>&1; then exec timeout -k 5 "$0" "$@"; '
            'else exec "$@"; fi')


@dataclass
class _Target:
    """Where and how to connect, once the contact and the ssh_config file are read."""

    hostname: str
    port: int
    user: str
    identities: list[str]
    identities_only: bool
    known_hosts: list[str]          # every file read, in order
    record_to: str                  # where a key accepted on first use is written
    timeout: float
    keepalive: int
    proxy_command: str | None = None
    tried: list[str] = field(default_factory=list)

    @property
    def key_name(self) -> str:
        """The host's name in known_hosts."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


_IPV6 = re.compile(r"[0-9A-Fa-f:.]+")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@$-]*")


def split_contact(contact: str) -> tuple[str | None, str, int | None]:
    """``(user, host, port)`` of ``ssh://[user@]host[:port]``; ValueError saying how to
    write it otherwise (the hosts model checks contacts with this, so a bad one is a
    hosts file error before anything runs)."""
    url = urlsplit(contact)
    try:
        port = url.port
    except ValueError:
        port = -1
    if url.scheme != "ssh" or not url.hostname or port in (-1, 0) or url.path not in ("", "/") or \
            url.query or url.fragment or url.password is not None:
        raise ValueError("write the contact as ssh://user@host or ssh://user@host:port (a port from 1 to 65535)")
    host = url.hostname
    if not (_IPV6.fullmatch(host) and ":" in host):
        check_node_name(host)  # (ValueError: not a host name, e.g. an ssh option)
    user = unquote(url.username) if url.username else None
    if user is not None and not _USER.fullmatch(user):
        raise ValueError(f"{user!r} is not a user name (letters, digits, '.', '_', '-', '@' and '$', not "
                         "starting with '-')")
    return user, host, port


def fingerprint(key: Any) -> str:
    """OpenSSH's form: ``ssh-ed25519 SHA256:base64``."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


class SshRunner(CommandRunner):
    """Runs commands on one host over SSH. Connects on first use; no I/O before."""

    def __init__(self, contact: str, *, identity_file: str | None = None, known_hosts: str | None = None,
                 ssh_config: str | None = None, accept_new_host_keys: bool = False,
                 connect_timeout: float | None = None, name: str | None = None):
        super().__init__()
        try:
            self.url_user, self.alias, self.url_port = split_contact(contact)
        except ValueError as exc:
            raise ContactError(contact, str(exc), maybe_ran=False) from None
        self.contact = contact
        self.name = name
        self.identity_file = identity_file
        self.known_hosts = known_hosts
        self.ssh_config = ssh_config
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout = connect_timeout
        self.connects = 0               # connections opened (1 while all goes well)
        self._target: _Target | None = None
        self._client: Any = None
        self._sftp: Any = None
        self._lock = threading.Lock()
        # sshd allows 10 sessions per connection (MaxSessions); SFTP takes one
        self._sessions = threading.BoundedSemaphore(MAX_SESSIONS)

    @classmethod
    def from_host(cls, host: Any) -> "SshRunner":
        """From a registry host: its contact and ssh_config; identity_file, known_hosts,
        accept_new_host_keys and connect_timeout from the entry (or its properties)."""
        def opt(key: str) -> Any:
            value = getattr(host, key, None)
            return value if value is not None else host.properties.get(key)

        timeout = opt("connect_timeout")
        return cls(host.contact, identity_file=opt("identity_file"), known_hosts=opt("known_hosts"),
                   ssh_config=host.ssh_config, accept_new_host_keys=bool(opt("accept_new_host_keys")),
                   connect_timeout=float(timeout) if timeout is not None else None, name=host.name or None)

    # -- what a user reads ------------------------------------------------------------------
    @property
    def display(self) -> str:
        """``user@host:port``, with the alias (or the host entry) it came from."""
        t = self._target
        if t is None:
            return self.contact
        where = f"{t.user}@{t.hostname}" + (f":{t.port}" if t.port != 22 else "")
        label = self.name or (self.alias if self.alias != t.hostname else None)
        return f"{label} ({where})" if label else where

    def _error(self, reason: str) -> ContactError:
        return ContactError(self.display, reason)

    # -- the two methods --------------------------------------------------------------------
    def _run(self, argv: list[str], timeout: float, input: str | None, cwd: str | None) -> CommandResult:
        limit = str(int(timeout + 0.999) + _REMOTE_SLACK)
        command = shlex.join(["sh", "-c", _BOUNDED, limit, *argv])
        if cwd:
            command = f"cd {shlex.quote(cwd)} && {command}"
        with self._sessions:
            for attempt in (1, 2):
                transport = self._transport()
                try:
                    chan = transport.open_session(timeout=self._timeout())
                    chan.exec_command(command)
                except Exception as exc:  # noqa: BLE001 - paramiko raises SSHException, EOFError, OSError
                    if transport.is_active():  # the connection is fine; the host said no
                        raise self._error(f"the host refused to start {argv[0]} ({exc})") from None
                    self._drop(transport)
                    if attempt == 2:
                        raise self._error(f"the connection dropped before {argv[0]} could start ({exc})") from None
                    log.info("ssh %s: connection dropped (%s); reconnecting", self.display, exc)
                    continue
                return self._collect(chan, transport, argv, timeout, input)
        raise AssertionError("unreachable")

    def write_file(self, path: str, text: str, mode: int = 0o700) -> None:
        """Write ``text`` to ``path`` on the host over SFTP, making its directory first."""
        for attempt in (1, 2):
            sftp = self._sftp_client()
            try:
                parent = posixpath.dirname(path)
                if parent:
                    sftp_makedirs(sftp, parent)
                with sftp.open(path, "w") as fh:
                    sftp.chmod(path, mode)  # before the text is in it
                    fh.write(text.encode())
                return
            except OSError as exc:
                if self._alive():
                    raise OSError(exc.errno, f"cannot write {path} on {self.display}: "
                                             f"{exc.strerror or exc}") from None
                self._drop()
                if attempt == 2:
                    raise self._error(f"the connection dropped while writing {path}") from None
            except Exception as exc:  # noqa: BLE001 - SSHException, EOFError from a dead transport
                self._drop()
                if attempt == 2:
                    raise self._error(f"the connection dropped while writing {path} ({exc})") from None

    def sftp(self) -> Any:
        """The connection's SFTP client, opened on first use (protocols.staging moves files
        with it)."""
        return self._sftp_client()

    def close(self) -> None:
        with self._lock:
            self._drop_locked()

    # -- running one command ----------------------------------------------------------------
    def _collect(self, chan: Any, transport: Any, argv: list[str], timeout: float,
                 input: str | None) -> CommandResult:
        deadline = time.monotonic() + timeout
        if input is None:
            chan.shutdown_write()
        else:  # in a thread: a program that writes before it reads must not block us
            threading.Thread(target=_feed, args=(chan, input.encode()), daemon=True).start()
        out, err = bytearray(), bytearray()
        fd = chan.fileno()
        exited_at = None
        while True:
            while chan.recv_ready():
                out += chan.recv(_BUF)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(_BUF)
            if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                break
            now = time.monotonic()
            if chan.exit_status_ready():
                # exited, but something it left behind holds its output open
                exited_at = exited_at or now
                if now - exited_at > _EXIT_GRACE:
                    break
            if now >= deadline:
                chan.close()
                raise CommandTimeout(argv, timeout)
            wait = min(deadline - now, 0.2)
            if chan.eof_received:
                chan.status_event.wait(wait)  # the pipe stays readable after EOF
            else:
                select.select([fd], [], [], wait)
        while chan.recv_ready():
            out += chan.recv(_BUF)
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(_BUF)
        # -1: no exit status came (paramiko's mark); a program killed by a signal has none either
        status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        chan.close()
        if status == -1 and not transport.is_active():
            self._drop(transport)
            raise self._error(f"the connection dropped while {argv[0]} was running; whether it "
                              "took effect is unknown")
        return CommandResult(argv, status, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    # -- the connection ---------------------------------------------------------------------
    def _timeout(self) -> float:
        return self._target.timeout if self._target else (self.connect_timeout or 10.0)

    def _alive(self) -> bool:
        t = self._client.get_transport() if self._client is not None else None
        return t is not None and t.is_active()

    def _transport(self) -> Any:
        with self._lock:
            if not self._alive():
                self._drop_locked()
                try:
                    self._connect()
                except ContactError as exc:
                    if not self.connects:  # never connected: no command ever ran over this runner
                        exc.maybe_ran = False
                    raise
            return self._client.get_transport()

    def _sftp_client(self) -> Any:
        transport = self._transport()
        with self._lock:
            if self._sftp is None:
                try:
                    self._sftp = transport.open_sftp_client()
                except Exception as exc:  # noqa: BLE001
                    raise self._error(f"SFTP is not available ({exc})") from None
            return self._sftp

    def _drop(self, transport: Any = None) -> None:
        """Let the connection go; given the transport that failed, only if it is still ours
        (another thread may have reconnected meanwhile)."""
        with self._lock:
            if transport is None or (self._client is not None and self._client.get_transport() is transport):
                self._drop_locked()

    def _drop_locked(self) -> None:
        for thing in (self._sftp, self._client):
            if thing is not None:
                try:
                    thing.close()
                except Exception:  # noqa: BLE001 - closing a dead connection
                    pass
        self._sftp = self._client = None

    def _connect(self) -> None:
        import paramiko

        # paramiko logs handshake failures with tracebacks; they are mapped to one line here
        # (an application that configures logging still gets them)
        logging.getLogger("paramiko").addHandler(_QUIET)
        t = self._target = self._resolve()
        client = paramiko.SSHClient()
        _load_known_hosts(client.get_host_keys(), t.known_hosts)
        client.set_missing_host_key_policy(_HostKeyPolicy(self, t))
        agent = not t.identities_only or not t.identities
        t.tried = list(t.identities) + (["ssh-agent"] if agent and os.environ.get("SSH_AUTH_SOCK") else []) + \
            (["~/.ssh/id_*"] if not t.identities else [])
        try:
            sock = paramiko.ProxyCommand(t.proxy_command) if t.proxy_command else None
            client.connect(t.hostname, t.port, username=t.user, key_filename=t.identities or None,
                           allow_agent=agent, look_for_keys=not t.identities, timeout=t.timeout,
                           banner_timeout=t.timeout, auth_timeout=t.timeout, sock=sock)
        except Exception as exc:  # noqa: BLE001 - mapped right below, once
            client.close()
            raise self._map(exc, t) from None
        try:  # small SFTP requests (a file's open, close, rename) must not wait for Nagle's timer
            client.get_transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (AttributeError, OSError):
            pass  # (through a ProxyCommand: not a TCP socket here)
        transport = client.get_transport()
        if t.keepalive:
            transport.set_keepalive(t.keepalive)
        self._client = client
        self.connects += 1

    def _resolve(self) -> _Target:
        import paramiko

        cfg: dict[str, Any] = {}
        path = self.ssh_config or os.path.expanduser("~/.ssh/config")
        if self.ssh_config or os.path.exists(path):
            try:
                cfg = paramiko.SSHConfig.from_path(path).lookup(self.alias)
            except OSError as exc:
                raise ContactError(self.contact, f"cannot read ssh_config {path}: {exc.strerror or exc}") from None
            except Exception as exc:  # noqa: BLE001 - paramiko's parse errors
                raise ContactError(self.contact, f"cannot read ssh_config {path}: {exc}") from None
        if cfg.get("proxyjump"):
            raise ContactError(self.contact, f"ProxyJump ({path}) is not supported; write "
                                             f"'ProxyCommand ssh -W %h:%p {cfg['proxyjump']}' instead")
        try:
            port = self.url_port or int(cfg.get("port", 22))
            timeout = self.connect_timeout or float(cfg.get("connecttimeout", 10))
            keepalive = int(cfg.get("serveraliveinterval", 30))
        except ValueError as exc:
            raise ContactError(self.contact, f"{path}: {exc}") from None
        if self.identity_file:
            identities = [os.path.expanduser(self.identity_file)]
            if not os.path.exists(identities[0]):
                raise ContactError(self.contact, f"identity file {identities[0]} does not exist")
        else:  # like ssh: IdentityFile lines that name no file are passed over
            identities = [p for p in map(os.path.expanduser, cfg.get("identityfile", [])) if os.path.exists(p)]
        user_files = [os.path.expanduser(p) for p in cfg.get("userknownhostsfile", "").split()] or \
            [os.path.expanduser("~/.ssh/known_hosts")]
        explicit = [os.path.expanduser(self.known_hosts)] if self.known_hosts else []
        known = [GLOBAL_KNOWN_HOSTS, os.path.expanduser("~/.ssh/known_hosts")] + user_files + explicit
        known = [p for i, p in enumerate(known) if p not in known[:i] and p != "/dev/null"]
        return _Target(
            hostname=cfg.get("hostname", self.alias), port=port,
            user=self.url_user or cfg.get("user") or getpass.getuser(), identities=identities,
            identities_only=str(cfg.get("identitiesonly", "no")).lower() == "yes", known_hosts=known,
            record_to=(explicit or user_files)[0], timeout=timeout, keepalive=keepalive,
            proxy_command=cfg.get("proxycommand") if str(cfg.get("proxycommand", "none")).lower() != "none"
            else None)

    # -- paramiko and socket exceptions, mapped once ----------------------------------------
    def _map(self, exc: Exception, t: _Target) -> ContactError:
        import socket

        import paramiko

        where = f"{t.hostname}:{t.port}"
        if isinstance(exc, ContactError):  # an unknown host key, from _HostKeyPolicy
            return exc
        if isinstance(exc, paramiko.BadHostKeyException):
            files = _files_holding(t.known_hosts, t.key_name)
            return self._error(
                f"its host key has CHANGED: it offers {fingerprint(exc.key)} but "
                f"{', '.join(map(_tilde, files)) or 'known_hosts'} has {fingerprint(exc.expected_key)}. "
                f"Someone may be intercepting the connection (man-in-the-middle), or the host was reinstalled; "
                f"nothing was run. Ask the host's administrators; if the new key is right, remove the old one "
                f"(`ssh-keygen -R '{t.key_name}'"
                + (f" -f {_tilde(files[0])}" if files else "") + f"`) and add the new one "
                f"(`ssh-keyscan -p {t.port} {t.hostname} >> {_tilde(files[0] if files else t.record_to)}`)")
        if isinstance(exc, paramiko.PasswordRequiredException):
            return self._error(f"the key {', '.join(t.identities)} needs a passphrase: load it into "
                               f"ssh-agent (ssh-add) first")
        if isinstance(exc, paramiko.BadAuthenticationType):
            return self._error(f"the host does not accept keys for {t.user} (it allows: "
                               f"{', '.join(exc.allowed_types)})")
        if isinstance(exc, paramiko.AuthenticationException):
            return self._error(f"authentication as {t.user} failed (tried: {', '.join(t.tried) or 'no keys'}); "
                               "check the user and that the public key is in its authorized_keys")
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and exc.errors:
            exc = next(iter(exc.errors.values()))  # the socket's own error, for each address tried
        if isinstance(exc, ConnectionRefusedError):
            return self._error(f"connection refused: nothing listens on {where}")
        if isinstance(exc, socket.gaierror):
            return self._error(f"no such host name '{t.hostname}' ({exc.strerror})")
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return self._error(f"no answer from {where} within {t.timeout:g} s")
        if isinstance(exc, OSError):
            return self._error(f"{where}: {exc.strerror or exc}")
        if isinstance(exc, EOFError):
            return self._error(f"{where} closed the connection during the handshake")
        if isinstance(exc, paramiko.SSHException) and "banner" in str(exc):
            return self._error(f"{where} answered but does not speak SSH (no SSH banner within {t.timeout:g} s)")
        if isinstance(exc, paramiko.SSHException):
            return self._error(f"ssh: {exc}")
        return self._error(f"{type(exc).__name__}: {exc}")


class _HostKeyPolicy:
    """paramiko's missing-host-key hook: refuse, or trust on first use and record the key.

    (A key that differs from a known one never reaches here: paramiko refuses it.)"""

    def __init__(self, runner: SshRunner, target: _Target):
        self.runner, self.target = runner, target

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        t = self.target
        if not self.runner.accept_new_host_keys:
            raise self.runner._error(
                f"its host key is not known ({fingerprint(key)}); nothing was run. Check that "
                f"fingerprint with the host's administrators, then add the key with "
                f"`ssh-keyscan -p {t.port} {t.hostname} >> {_tilde(t.record_to)}`, or set "
                f"accept_new_host_keys: true in the host entry to trust it on first use")
        client.get_host_keys().add(hostname, key.get_name(), key)
        path = self.target.record_to
        try:
            from paramiko.hostkeys import HostKeyEntry

            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
            with open(path, "a") as fh:
                fh.write(HostKeyEntry([hostname], key).to_line())
            log.warning("ssh: trusted the new host key of %s (%s) and added it to %s", hostname,
                        fingerprint(key), path)
        except OSError as exc:
            log.warning("ssh: trusted the new host key of %s (%s) for this connection only: cannot write %s: %s",
                        hostname, fingerprint(key), path, exc.strerror)


def _load_known_hosts(keys: Any, files: list[str]) -> None:
    """Every usable line of every file (ssh skips a bad line; so do we). Markers
    (@cert-authority, @revoked) are not understood by paramiko and are skipped."""
    from paramiko.hostkeys import HostKeyEntry

    for path in files:
        try:
            with open(path) as fh:
                lines = fh.readlines()
        except OSError:
            continue
        for n, line in enumerate(lines, 1):
            if not line.strip() or line.lstrip().startswith(("#", "@")):
                continue
            try:
                entry = HostKeyEntry.from_line(line, n)
            except Exception:  # noqa: BLE001 - a bad key, an unknown key type
                entry = None
            if entry is None or entry.key is None:
                log.debug("ssh: %s:%d: skipped", path, n)
                continue
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)


def _files_holding(files: list[str], key_name: str) -> list[str]:
    import paramiko

    found = []
    for path in files:
        keys = paramiko.HostKeys()
        _load_known_hosts(keys, [path])
        if keys.lookup(key_name):
            found.append(path)
    return found


def sftp_makedirs(sftp: Any, directory: str) -> None:
    """``mkdir -p`` over SFTP (owner-only directories); one made meanwhile by another
    writer is fine."""
    parts = directory.split("/")
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d in ("", "."):
            continue
        try:
            sftp.stat(d)
        except FileNotFoundError:
            try:
                sftp.mkdir(d, 0o700)
            except OSError:
                sftp.stat(d)  # made meanwhile is fine; else this raises


def _tilde(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home not in ("", "/") and path.startswith(home + "/") else path


def _feed(chan: Any, data: bytes) -> None:
    try:
        chan.sendall(data)
        chan.shutdown_write()
    except Exception:  # noqa: BLE001 - the command exited without reading it all
        pass
