"""A node's container image, as the plan sees it (``container:``): where it is, what it is
(its content id, part of the members' keys: pwe.planning.reuse) and, where this machine
can tell, that it and its runtime are there (``pwe validate``).

Where: charliecloud's and apptainer's image is a path, relative to the workflow file's
directory (absolute as written); podman's is a name of its store, taken as written.

Content id: a directory image's is a SHA-256 over every file and link below it (its path,
mode, size, modification time, a link's target), walked without following links, in name
order: what ``make`` and ``rsync`` look at, no file read (a 5 GB image costs a walk, not a
read). Directories themselves do not count, so an empty mount point made for a bind
(pilot/containers.py) changes nothing. An image file's (SquashFS, SIF) is its size and
modification time. A podman image's (of a node on ``local``) is its id in podman's store
(:func:`podman_id`). One not on this machine (a path as it is on another host, a podman
image of another host's store) is ``-``: its key then holds its path or name and runtime
only. Made once per plan and node.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from typing import Any

from ..base.errors import InputError

#: what each runtime's program is called
PROGRAMS = {"charliecloud": "ch-run", "apptainer": "apptainer", "podman": "podman"}


def container_of(plan: Any, nid: str) -> Any:
    """Node ``nid``'s ``container`` (its own, else the defaults'), or None."""
    pn = plan.nodes[nid]
    return pn.spec.container if pn.spec.container is not None else plan.workflow.defaults.container


def image_path(plan: Any, spec: Any) -> str:
    """The image as the pilot is given it: an absolute path (relative ones from the workflow
    file's directory), or podman's name as written."""
    if spec.runtime == "podman":
        return spec.image
    return os.path.normpath(os.path.join(plan.file.parent.resolve(), os.path.expanduser(spec.image)))


def content_id(path: str) -> str:
    """The image's content id (the module's docstring); ``-`` when it is not here."""
    try:
        st = os.lstat(path)
    except OSError:
        return "-"
    h = hashlib.sha256()
    if not stat.S_ISDIR(st.st_mode):
        st = os.stat(path) if stat.S_ISLNK(st.st_mode) else st
        h.update(f"file {st.st_size} {st.st_mtime_ns}".encode())
        return h.hexdigest()
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = sorted(os.scandir(os.path.join(path, rel)), key=lambda e: e.name, reverse=True)
        except OSError:
            h.update(f"unreadable {rel}\0".encode("utf-8", "surrogateescape"))
            continue
        for e in entries:
            name = f"{rel}/{e.name}" if rel else e.name
            try:
                s = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(s.st_mode):
                stack.append(name)
                continue
            target = os.readlink(e.path) if stat.S_ISLNK(s.st_mode) else ""
            h.update(f"{name}\0{s.st_mode:o} {s.st_size} {s.st_mtime_ns} {target}\0".encode("utf-8",
                                                                                         "surrogateescape"))
    return h.hexdigest()


def identity(plan: Any, nid: str) -> dict[str, str] | None:
    """What node ``nid``'s container adds to its members' keys: runtime, image (as the pilot
    gets it) and its content id, made once per plan; None without a container."""
    spec = container_of(plan, nid)
    if spec is None:
        return None
    pn = plan.nodes[nid]
    if pn.image_id is None:
        path = image_path(plan, spec)
        pn.image_id = {"runtime": spec.runtime, "image": path,
                       "id": podman_id(path) if spec.runtime == "podman" and pn.host == "local" else
                       "-" if spec.runtime == "podman" else content_id(path)}
    return pn.image_id


def podman_id(name: str) -> str:
    """A podman image's id in this machine's store (``podman image inspect``: the digest of
    its config, which changes with its content); ``-`` when podman or the image is not here."""
    import subprocess

    program = shutil.which("podman")
    if program is None:
        return "-"
    try:  # (its name one argument, never read by a shell; '--' ends the options)
        got = subprocess.run([program, "image", "inspect", "--format", "{{.Id}}", "--", name], capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return "-"
    text = got.stdout.strip()
    return text if got.returncode == 0 and text and all(c in "0123456789abcdef" for c in text) else "-"


def check(plan: Any) -> None:
    """What ``pwe validate`` checks, where this machine can tell: a relative image path
    (beside the workflow: here) must exist, as must an absolute one of a node on ``local``;
    a node on ``local`` with no ``modules`` (which may bring it) needs its runtime's program
    on PATH, and a podman image of such a node must be in podman's store here. One line
    naming file and line (:class:`InputError`) else."""
    for nid, pn in plan.nodes.items():
        spec = container_of(plan, nid)
        if spec is None:
            continue
        here = pn.host == "local"
        line = pn.container_line
        if spec.runtime != "podman" and (here or not os.path.isabs(os.path.expanduser(spec.image))):
            path = image_path(plan, spec)
            if not os.path.exists(path):
                raise InputError(f"node '{nid}': container image {spec.image!r}: {path} does not exist; build the "
                                 f"image there first ({spec.runtime}: a directory image or an image file)",
                                 plan.file, line)
        program = PROGRAMS[spec.runtime]
        if here and not pn.spec.modules and shutil.which(program) is None:
            raise InputError(f"node '{nid}': container runtime {spec.runtime}: {program} is not on PATH on this "
                             f"machine; install it (or load it with the node's modules:)", plan.file, line)
        if spec.runtime == "podman" and here and identity(plan, nid)["id"] == "-" and shutil.which(program):
            raise InputError(f"node '{nid}': container image {spec.image!r} is not in podman's store on this machine "
                             "(podman images lists it); pull, build or import it first", plan.file, line)
