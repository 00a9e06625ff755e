"""The host registry: built-in ``local``, then files, each later one overriding earlier.

Read, in order: ``hosts.yaml`` in pwe's configuration directory (:func:`pwe.base.places.config_dir`:
``$PWE_HOME/config``, else ``$XDG_CONFIG_HOME/pwe``, else ``~/.config/pwe``), a
``hosts.yaml`` beside the workflow, and ``--hosts FILE``. Whatever is wrong with a file
(unreadable, not YAML, against the hosts model: pydantic's errors, where the checker of
:mod:`hostinfo.records` cannot vouch for it) is one
:class:`~pwe.base.errors.HostsFileError` naming it and the line, raised in :func:`load` only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pwe.base.errors import HostsFileError, InputError
from pwe.base.errors import did_you_mean, wrong_value
from pwe.base.places import config_dir
from pwe.base.source import find_bad_text, locate
from pwe.base.yaml_reader import read_yaml

from . import records
from .records import Refused


def local_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def local_gpus() -> int:
    """GPUs members may use here, counted as a pilot on this machine counts them."""
    from pilot.allocation import local_gpu_ids

    return len(local_gpu_ids(os.environ))


def local_memory_mb() -> int | None:
    """This machine's memory in MB (Linux), for packing members by memoryPerMember."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def builtin_local(cores: int | None = None) -> Any:
    """The built-in host ``local``: this machine's cores, GPUs and memory (a Host record)."""
    return records.host({"name": "local", "protocol": "local", "contact": "local",
                         "cores_per_node": cores or local_cores(), "gpus_per_node": local_gpus(),
                         "memory_per_node": local_memory_mb()})


class Registry:
    def __init__(self, hosts: dict[str, Any], sources: dict[str, str]):
        self.hosts = hosts
        self.sources = sources

    def get(self, name: str) -> Any:
        if name not in self.hosts:
            raise InputError(f"unknown host '{name}'{did_you_mean(name, self.hosts)}; known hosts: "
                             f"{', '.join(sorted(self.hosts))} (pwe hosts list)")
        return self.hosts[name]


def default_files(workflow: Path | None = None, extra: str | Path | None = None) -> list[Path]:
    files = [config_dir() / "hosts.yaml"]
    if workflow is not None:
        files.append(Path(workflow).resolve().parent / "hosts.yaml")
    if extra is not None:
        files.append(Path(extra))
    return files


def load(workflow: Path | None = None, extra: str | Path | None = None, cores: int | None = None) -> Registry:
    hosts = {"local": builtin_local(cores)}
    sources = {"local": "built in"}
    for path in default_files(workflow, extra):
        if not path.exists():
            if extra is not None and path == Path(extra):
                raise HostsFileError("no such hosts file", path)
            continue
        try:
            raw = read_yaml(path, what="a hosts file", needs="'hosts'")
        except InputError as exc:  # the YAML reader's, said of a workflow file or any other
            raise HostsFileError(exc.message, exc.file, exc.line) from None
        bad = find_bad_text(raw)
        if bad:  # (a host's values reach job scripts and command lines)
            loc, problem = bad
            raise HostsFileError(f"'{'.'.join(map(str, loc))}' {problem}", path, locate(raw, loc))
        parsed = _hosts_file(raw, path)
        for name, host in parsed.hosts.items():
            if name == "local" and host.protocol == "local" and host.cores_per_node is None:
                host = host.model_copy(update={"cores_per_node": cores or local_cores()})
            hosts[name] = host.model_copy(update={"name": name})
            sources[name] = str(path)
    return Registry(hosts, sources)


def _hosts_file(raw: Any, path: Path) -> Any:
    """A hosts file's tree checked (without pydantic where the checker vouches for it), or
    one HostsFileError naming the key and its line (pydantic's first error)."""
    try:
        return records.check("HostsFile", raw)
    except Refused:
        pass
    from pydantic import ValidationError

    from .model import Host, HostsFile

    try:
        return HostsFile.model_validate(raw)
    except ValidationError as exc:
        err = min(exc.errors(include_url=False), key=lambda e: len(e["loc"]))
        loc = tuple(err["loc"])
        hint = ""
        if err["type"] == "extra_forbidden":
            known = Host.model_fields if len(loc) >= 3 else HostsFile.model_fields
            hint = did_you_mean(loc[-1], known)
        where = ".".join(str(p) for p in loc)
        msg = "unknown key" if err["type"] == "extra_forbidden" else wrong_value(err)
        raise HostsFileError(f"'{where}': {msg}{hint}", path, locate(raw, loc)) from None
