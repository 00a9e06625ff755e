"""A live check of one host (``pwe hosts check H``): can pwe reach it and submit to it?

Each check is ``(what, ok, detail)``. The host is reached as pwe reaches it (this machine,
or its ``ssh://`` contact), and every command runs there through the one command runner,
so a check sees the PATH, python3 and ssh that submissions and pilots will see.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Host

Check = tuple[str, bool, str]

#: the pilot is standard-library Python; this is the oldest python3 it is written for
MIN_PYTHON = (3, 8)
TIMEOUT = 20.0

# `command -v` is a shell builtin: a fixed script, the names passed as its arguments
_WHICH = 'for c in "$@"; do printf "%s\\t%s\\n" "$c" "$(command -v -- "$c" || true)"; done'
_PYVER = "import sys, platform; print(platform.python_version(), sys.executable)"


def check_host(host: Host, runner: Any = None) -> list[Check]:
    """Reach ``host`` and check what pwe needs there; one ``(what, ok, detail)`` per check.

    Stops after the first check when the host cannot be reached at all."""
    from protocols.runner import CommandTimeout, ContactError

    own = runner is None
    if own:
        from protocols.registry import runner_for

        try:
            runner = runner_for(host)
        except ContactError as exc:
            return [(f"reach {host.contact}", False, str(exc))]
    checks: list[Check] = []
    try:
        try:
            res = runner.run(["uname", "-n"], timeout=TIMEOUT)
        except (ContactError, CommandTimeout) as exc:
            return [(f"reach {host.contact}", False, str(exc))]
        where = res.stdout.strip() or "?"
        how = "this machine" if host.contact == "local" else getattr(runner, "display", host.contact)
        checks.append((f"reach {host.contact}", True, f"{how}, hostname {where}"))
        for step in (_commands, _python, _sinfo, _nodes):
            try:
                checks += step(host, runner)
            except (ContactError, CommandTimeout) as exc:
                checks.append((step.__name__.lstrip("_"), False, str(exc)))
    finally:
        if own:
            runner.close()
    return checks


def missing_commands(host: Host, runner: Any = None) -> list[str]:
    """The commands of ``host``'s protocol that are not on the PATH where pwe reaches it
    (all of them when it cannot be reached at all)."""
    from protocols.registry import info
    from protocols.runner import CommandTimeout, ContactError

    names = list(info(host.protocol).commands)
    own = runner is None
    try:
        if own:
            from protocols.registry import runner_for

            runner = runner_for(host)
        return [name for name, ok, _ in _commands(host, runner) if not ok and name in names]
    except (ContactError, CommandTimeout):
        return names
    finally:
        if own and runner is not None:
            runner.close()


def _commands(host: Host, runner: Any) -> list[Check]:
    from protocols.registry import info

    own = info(host.protocol).commands
    names = list(dict.fromkeys(own + (("ssh",) if host.nodes else ())))
    # the protocol's own commands from the host's commands_dir, when it names one
    where = {n: f"{host.commands_dir.rstrip('/')}/{n}" if host.commands_dir and n in own else n for n in names}
    res = runner.run(["sh", "-c", _WHICH, "sh", *where.values()], timeout=TIMEOUT)
    found = dict(line.split("\t", 1) for line in res.stdout.splitlines() if "\t" in line)
    missing = {n: f"not in commands_dir {host.commands_dir} of {_on(host)}" if where[n] != n else
               f"not found on the PATH of {_on(host)}" for n in names}
    return [(name, bool(found.get(where[name])), found.get(where[name]) or missing[name]) for name in names]


def _python(host: Host, runner: Any) -> list[Check]:
    res = runner.run(["python3", "-c", _PYVER], timeout=TIMEOUT)
    if res.status != 0:
        return [("python3 version", False, _why(res))]
    version, _, path = res.stdout.strip().partition(" ")
    nums = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    ok = nums >= MIN_PYTHON
    need = "" if ok else f"; the pilot needs {'.'.join(map(str, MIN_PYTHON))} or newer"
    return [("python3 version", ok, f"{version} ({path}){need}")]


def _sinfo(host: Host, runner: Any) -> list[Check]:
    if host.protocol != "slurm":
        return []
    res = runner.run(["sinfo", "-h", "-o", "%P %l %D %c"], timeout=TIMEOUT)
    if res.status != 0 or not res.stdout.strip():
        return [("sinfo partitions", False, _why(res) if res.status else "sinfo lists no partitions")]
    rows = [line.split() for line in res.stdout.splitlines() if len(line.split()) == 4]
    seen = {r[0].rstrip("*") for r in rows}
    summary = "; ".join(f"{p} (time limit {limit}, {n} nodes, {c} cpus)" for p, limit, n, c in rows)
    missing = [p.name for p in host.partitions if p.name not in seen]
    if missing:
        return [("sinfo partitions", False, f"no partition {', '.join(missing)} (from the host entry); "
                                            f"sinfo lists: {summary}")]
    return [("sinfo partitions", True, summary)]


def _nodes(host: Host, runner: Any) -> list[Check]:
    if not host.nodes:
        return []
    base = ["ssh"] + (["-F", host.ssh_config] if host.ssh_config else []) + \
        ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]

    def one(node: str) -> Check:
        from protocols.runner import CommandTimeout, ContactError

        cmd = base + ["--", node, "true"]
        try:
            res = runner.run(cmd, timeout=TIMEOUT)
        except (ContactError, CommandTimeout) as exc:
            return (f"node {node}", False, str(exc))
        if res.status == 0:
            return (f"node {node}", True, f"`ssh {node} true` answered")
        return (f"node {node}", False, f"`{' '.join(cmd)}` from {_on(host)}: {_why(res)}")

    with ThreadPoolExecutor(max_workers=min(16, len(host.nodes))) as pool:
        return list(pool.map(one, host.nodes))


def _on(host: Host) -> str:
    return "this machine" if host.contact == "local" else host.contact


def _why(res: Any) -> str:
    text = (res.stderr.strip() or res.stdout.strip()).splitlines()
    return f"exit status {res.status}" + (f": {text[-1]}" if text else "")
