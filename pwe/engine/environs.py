"""A node's environment as its pilots make it: ``modules:`` loaded and a ``container:``
checked, once per pilot node, as lines of its setup set (pilot/nodesetup.py runs them
before the node's first member there, after its ``setup_per_node`` lines); and the
container each of its tasks names (``ctr``: pilot/containers.py runs the member inside).

Every name and path goes into these lines shell-quoted (``shlex.quote``; a module's name is
one word of ``[A-Za-z0-9_.+/-]`` already: pwe.workflow.rules.module_name), so none is read
by the node's shell as more than one word. What the lines need from the pilot comes in
variables it sets: ``PWE_SETUP_ENV`` (where the environment before and after ``module
load`` is written, NUL-separated: the pilot gives members what the load changed) and
``PWE_SETUP_BINDS`` (the directories a container mounts, one a line).

A module that does not load, no ``module`` command, a runtime not on PATH, an image not
there: the set exits non-zero with a line saying so (in its log, setup-NODE-ID.log), so
that node takes none of the node's members (another pilot's nodes do): a setup failure
of that node, never a member's failure.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..planning.images import PROGRAMS, container_of, image_path

#: Where a site's ``module`` is set up, tried in order when the set's shell has none: Lmod
#: (its own variable, Debian's and the usual places), then Environment Modules.
MODULE_INITS = ('"${LMOD_PKG:+$LMOD_PKG/init/bash}"', "/usr/share/lmod/lmod/init/bash", "/etc/profile.d/lmod.sh",
                "/usr/share/Modules/init/bash", "/etc/profile.d/modules.sh")


def _fail(words: str, rc: int = 1) -> str:
    return f"{{ echo {shlex.quote('pwe: ' + words)} >&2; exit {rc}; }}"


def module_lines(modules: list[str]) -> list[str]:
    """Load ``modules`` through the site's ``module``, the environment written before and
    after (``$PWE_SETUP_ENV.0``, ``.1``)."""
    names = " ".join(shlex.quote(m) for m in modules)
    said = " ".join(modules)
    return [
        f"type module >/dev/null 2>&1 || for f in {' '.join(MODULE_INITS)}; do "
        'if [ -n "$f" ] && [ -r "$f" ]; then . "$f"; break; fi; done',
        "type module >/dev/null 2>&1 || " + _fail("modules: no module command on this node (neither Lmod nor "
                                                  "Environment Modules was found)", 127),
        'env -0 > "$PWE_SETUP_ENV.0"',
        f"module load {names} || " + _fail(f"modules: module load {said} failed"),
        'env -0 > "$PWE_SETUP_ENV.1"',
    ]


def container_lines(runtime: str, image: str) -> list[str]:
    """Check the runtime and the image once per node; for charliecloud, make the binds'
    mount points missing in a directory image (pilot/containers.py says why)."""
    program = PROGRAMS[runtime]
    img = shlex.quote(image)
    out = [f"command -v {program} >/dev/null 2>&1 || "
           + _fail(f"container runtime {runtime}: {program} is not on PATH on this node", 127)]
    if runtime == "podman":
        out.append(f"podman image exists {img} || " + _fail(f"container image {image}: not in podman's store on this "
                                                            "node (podman images lists it)"))
        return out
    out.append(f"[ -e {img} ] || " + _fail(f"container image {image}: no such file or directory on this node"))
    if runtime == "charliecloud":
        out.append(f'if [ -d {img} ]; then printf "%s\\n" "$PWE_SETUP_BINDS" | while IFS= read -r d; do '
                   f'case "$d" in ""|/tmp/*) continue;; esac; [ -d {img}"$d" ] || mkdir -p {img}"$d" || '
                   + _fail(f"container image {image}: cannot make the mount point of a bind in it (ch-run needs each "
                           "bound directory there: make it, or give a writable image)")
                   + "; done; fi")
    return out


def setup_lines(plan: Any, nid: str) -> list[str]:
    """Node ``nid``'s setup set: its ``setup_per_node`` lines (its own, else the defaults'),
    then its modules' and its container's lines; [] for none."""
    pn = plan.nodes[nid]
    lines = pn.spec.setup_per_node
    if lines is None:
        lines = plan.workflow.defaults.setup_per_node
    out = list(lines or [])
    if pn.spec.modules:
        out += module_lines(list(pn.spec.modules))
    spec = container_of(plan, nid)
    if spec is not None:
        out += container_lines(spec.runtime, image_path(plan, spec))
    return out


def container_task(plan: Any, nid: str, mounts: list[str]) -> dict[str, Any] | None:
    """What each task of node ``nid`` says of its container (``ctr``), or None: the
    runtime, the image as the pilot gives it, the directories mounted (``mounts``: the
    workspace and the run directory)."""
    spec = container_of(plan, nid)
    if spec is None:
        return None
    return {"rt": spec.runtime, "img": image_path(plan, spec), "bind": [m for m in mounts if m]}
