"""Container images the tests build, for Debian's charliecloud (``ch-run`` 0.31): directory
images, made in a test's own directory in well under a second (files are hard-linked where
the file system allows, copied where not).

- :func:`busybox_image`: busybox-static and its links, the directories ch-run mounts over,
  empty passwd and group (FACTS: charliecloud 0.31), and a marker file (``/etc/pwe-marker``,
  which the host does not have: what reads it ran inside).
- :func:`python_image`: the same with this machine's own Python (its interpreter, the
  shared libraries ``ldd`` names, its standard library less tests and site-packages), so
  that a function member's worker can run inside (pilot/pyworkers.py).
- :func:`podman_import`: a directory image into podman's store under a name, with
  :data:`PODMAN_CONF`, what podman needs to start containers on these machines.

Used by the tests (tests/conftest.py's ``podman``) and by bench/env_cost.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

MARK = "inside-the-image"
BUSYBOX = "/bin/busybox"
#: what of the standard library an image leaves out (big, and no worker imports them)
_LEFT_OUT = frozenset({"test", "__pycache__", "site-packages", "dist-packages", "idlelib", "tkinter", "ensurepip"})


#: what podman needs to start containers on these machines (FACTS): runc, for crun refuses
#: their hybrid cgroups; ulimits no higher than the machine's own, for podman's defaults
#: (raised past the hard limit) are refused without CAP_SYS_RESOURCE. A site's setting, as
#: a site would write it (a containers.conf, given by CONTAINERS_CONF): pwe passes none of it
PODMAN_CONF = '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n[engine]\nruntime = "runc"\n'


#: a function module for a function member inside an image (``inside``): its import appends
#: its worker's pid to ``$IMPORTS``; each call appends to ``$LEDGER`` the image's marker, the
#: member and its attempt, writes in its $TMPDIR, and returns what it saw
INSIDE = '''
import os

with open(os.environ["IMPORTS"], "a") as fh:
    fh.write(f"{os.getpid()}\\n")


def inside(x):
    with open("/etc/pwe-marker") as fh:
        mark = fh.read().strip()
    with open(os.environ["LEDGER"], "a") as fh:
        fh.write(f"{mark} {os.environ['PWE_MEMBER']} {os.environ['PWE_ATTEMPT']}\\n")
    with open(os.path.join(os.environ["TMPDIR"], "t"), "w") as fh:
        fh.write("t")
    return {"mark": mark, "x": x, "tmp": os.environ["TMPDIR"], "foo": os.environ["FOO"], "pid": os.getpid(),
            "cwd": os.getcwd()}
'''


def podman_import(image: Path, name: str, env: dict[str, str]) -> str:
    """The directory image ``image`` imported into podman's store as ``name`` (with ``env``:
    its CONTAINERS_CONF); the name."""
    tar = subprocess.Popen(["tar", "-C", str(image), "-cf", "-", "."], stdout=subprocess.PIPE)
    got = subprocess.run(["podman", "import", "-q", "-", name], stdin=tar.stdout, capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    tar.stdout.close()
    tar.wait()
    if got.returncode != 0:
        raise RuntimeError(f"podman import {name}: {got.stderr.strip()}")
    return name


def busybox_image(where: Path) -> Path:
    """A charliecloud directory image of busybox-static (the module's docstring)."""
    for d in ("bin", "dev", "proc", "sys", "tmp", "etc", "home"):
        (where / d).mkdir(parents=True, exist_ok=True)
    (where / "etc" / "passwd").write_text("")
    (where / "etc" / "group").write_text("")
    (where / "etc" / "pwe-marker").write_text(MARK + "\n")
    shutil.copy2(BUSYBOX, where / "bin" / "busybox")
    for tool in ("sh", "cat", "echo", "test", "printf", "env", "ls", "touch", "mkdir", "true"):
        os.symlink("busybox", where / "bin" / tool)
    return where


def _place(src: str, image: Path) -> None:
    dst = image / src.lstrip("/")
    if dst.exists():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def python_image(where: Path) -> Path:
    """:func:`busybox_image` with this machine's Python as ``/usr/bin/python3`` (the module's
    docstring): at its own path too, so that it finds its standard library as here."""
    busybox_image(where)
    exe = os.path.realpath(sys.executable)
    _place(exe, where)
    listed = subprocess.run(["ldd", exe], capture_output=True, text=True, check=True).stdout
    for line in listed.splitlines():
        words = line.split()
        path = words[2] if "=>" in words and len(words) > 2 else (words[0] if words else "")
        if path.startswith("/"):
            _place(os.path.realpath(path), where)
            if os.path.realpath(path) != path:  # (as the loader asks for it: /lib64/ld-linux..., libc.so.6)
                link = where / path.lstrip("/")
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.exists():
                    os.symlink(os.path.realpath(path), link)
    (where / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    if not (where / "usr" / "bin" / "python3").exists():
        os.symlink(exe, where / "usr" / "bin" / "python3")
    lib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for root, dirs, files in os.walk(lib):
        dirs[:] = [d for d in dirs if d not in _LEFT_OUT]
        for name in files:
            _place(os.path.join(root, name), where)
    return where
