"""The one command runner: every command a protocol runs goes through here.

``LocalRunner`` runs on this machine; :class:`protocols.ssh.SshRunner` (paramiko) runs on
a login node. Both return :class:`CommandResult` and raise :class:`CommandTimeout` (the SSH
runner also :class:`ContactError` when the host cannot be reached), and count the
commands they ran (the scheduler etiquette benchmark reads the counts).
"""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass


@dataclass
class CommandResult:
    command: list[str]
    status: int
    stdout: str
    stderr: str


class CommandTimeout(Exception):
    def __init__(self, command: list[str], timeout: float):
        super().__init__(f"{command[0]} did not answer within {timeout:g} s")
        self.command = command


class ContactError(Exception):
    """A host could not be reached: nothing listens, its host key is unknown or changed,
    authentication failed, or the connection dropped. Carries the host and the reason."""

    def __init__(self, host: str, reason: str):
        super().__init__(f"cannot reach {host}: {reason}")
        self.host, self.reason = host, reason


class CommandRunner:
    """Runs argv lists (never a shell string) with a timeout."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def close(self) -> None:
        """Let go of any connection (a no-op on this machine)."""

    def run(self, argv: list[str], timeout: float = 30.0, input: str | None = None,
            cwd: str | None = None) -> CommandResult:
        self.calls[argv[0].rsplit("/", 1)[-1]] += 1
        return self._run(argv, timeout, input, cwd)

    def _run(self, argv: list[str], timeout: float, input: str | None,
             cwd: str | None) -> CommandResult:  # pragma: no cover
        raise NotImplementedError

    def write_file(self, path: str, text: str, mode: int = 0o700) -> None:  # pragma: no cover
        raise NotImplementedError


class LocalRunner(CommandRunner):
    def _run(self, argv: list[str], timeout: float, input: str | None, cwd: str | None) -> CommandResult:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input, cwd=cwd,
                               stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CommandTimeout(argv, timeout) from None
        except FileNotFoundError:
            return CommandResult(argv, 127, "", f"{argv[0]}: command not found")
        return CommandResult(argv, p.returncode, p.stdout, p.stderr)

    def write_file(self, path: str, text: str, mode: int = 0o700) -> None:
        import os

        with open(path, "w") as fh:
            fh.write(text)
        os.chmod(path, mode)
