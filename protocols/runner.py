"""The one command runner: every command a protocol runs goes through here.

``LocalRunner`` runs on this machine; :class:`protocols.ssh.SshRunner` (paramiko) runs on
a login node (:func:`protocols.registry.runner_for` picks one for a host). Both return
:class:`CommandResult` and raise :class:`CommandTimeout` (the SSH
runner also :class:`ContactError` when the host cannot be reached), and count the
commands they ran (the scheduler etiquette benchmark reads the counts). A command that
ran and failed is a result (its status and stderr), not an exception: a protocol decides
what a failure means. The two exceptions belong to the one tree in :mod:`pwe.base.errors`
(re-exported here); the subprocess module's are mapped in :class:`LocalRunner`, once.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass

from pwe.base.errors import CommandTimeout, ContactError

__all__ = ["CommandResult", "CommandRunner", "CommandTimeout", "ContactError", "InDir", "LocalRunner"]


@dataclass
class CommandResult:
    command: list[str]
    status: int
    stdout: str
    stderr: str


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
        except OSError as exc:  # found but cannot be run (not executable, a directory): as a shell says it
            return CommandResult(argv, 126, "", f"{argv[0]}: {exc.strerror or exc}")
        return CommandResult(argv, p.returncode, p.stdout, p.stderr)

    def write_file(self, path: str, text: str, mode: int = 0o700) -> None:
        import os

        with open(path, "w") as fh:
            fh.write(text)
        os.chmod(path, mode)


class InDir(CommandRunner):
    """Another runner, with the commands in ``names`` run from ``directory`` (a host's
    ``commands_dir``: its batch system's commands where they are not on the PATH, or where
    another system's of the same names come first). It counts nothing itself: the calls
    are the runner's it wraps."""

    def __init__(self, inner: CommandRunner, directory: str, names: tuple[str, ...]) -> None:
        self.inner = inner
        self.calls = inner.calls
        self.directory = directory.rstrip("/") or "/"
        self.names = frozenset(names)

    def run(self, argv: list[str], timeout: float = 30.0, input: str | None = None,
            cwd: str | None = None) -> CommandResult:
        if argv and argv[0] in self.names:
            argv = [f"{self.directory}/{argv[0]}", *argv[1:]]
        return self.inner.run(argv, timeout, input, cwd)

    def close(self) -> None:
        self.inner.close()

    def write_file(self, path: str, text: str, mode: int = 0o700) -> None:
        self.inner.write_file(path, text, mode)

    def __getattr__(self, name: str):  # (what else the runner says of itself: display...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
