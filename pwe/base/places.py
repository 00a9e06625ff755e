"""Where pwe keeps what outlives one command (standard library only: hostinfo reads it too).

    state   $PWE_HOME/state   else $XDG_STATE_HOME/pwe   else ~/.local/state/pwe
            service/          the service's directory (pwe.service: its runs, submissions, triggers)
    config  $PWE_HOME/config  else $XDG_CONFIG_HOME/pwe  else ~/.config/pwe
            hosts.yaml        the hosts every workflow may use (hostinfo.registry)

``PWE_HOME`` overrides every XDG variable. The service keeps its lock and pid record
(service.lock, service.json) in its own directory, not in ``$XDG_RUNTIME_DIR``: that
directory is removed at logout while the service goes on, and a second service would then
find no lock to stop it.

Before these places, the service's directory was ``$PWE_HOME/service`` (``~/.pwe/service``):
when that exists and the new one does not, it is used still (:func:`service_dir` says which),
so that a service and its runs are never lost by an upgrade.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .errors import InputError
from .settings import HOME, SERVICE_DIR


#: The longest path a place may be (Linux's PATH_MAX less room for what pwe puts under it).
MOST_PATH = 3072


def _checked(text: str, var: str) -> Path:
    """A place given by ``var`` resolved, or one line naming it: a path too long for the
    system (ENAMETOOLONG later, in whatever command first writes there) or a symlink loop
    (resolve's RuntimeError or OSError: a traceback)."""
    if len(text) > MOST_PATH or any(len(part.encode(errors="surrogateescape")) > 255 for part in text.split("/")):
        raise InputError(f"{var}: a path of {len(text):,} characters, or with a name over 255 bytes; "
                         f"give one of at most {MOST_PATH:,}")
    try:
        path = Path(text).expanduser().resolve()
    except (OSError, RuntimeError) as exc:
        why = "a symlink loop" if isinstance(exc, RuntimeError) or exc.errno == errno.ELOOP else \
            (exc.strerror or str(exc))
        raise InputError(f"{var}: cannot be resolved ({why}); give a directory") from None
    if len(str(path)) > MOST_PATH:
        raise InputError(f"{var}: resolves to a path of {len(str(path)):,} characters; give one of at most "
                         f"{MOST_PATH:,}")
    return path


def _base(pwe_sub: str, xdg_var: str, fallback: str) -> Path:
    home = HOME.get()
    if home:
        return _checked(home, HOME.name) / pwe_sub
    xdg = os.environ.get(xdg_var)
    if xdg and os.path.isabs(xdg):  # (the XDG spec: a relative path is to be ignored)
        return _checked(xdg, xdg_var) / "pwe"
    return Path.home() / fallback / "pwe"


def state_dir() -> Path:
    """pwe's state: ``$PWE_HOME/state``, ``$XDG_STATE_HOME/pwe`` or ``~/.local/state/pwe``."""
    return _base("state", "XDG_STATE_HOME", ".local/state")


def config_dir() -> Path:
    """pwe's configuration: ``$PWE_HOME/config``, ``$XDG_CONFIG_HOME/pwe`` or ``~/.config/pwe``."""
    return _base("config", "XDG_CONFIG_HOME", ".config")


def legacy_service_dir() -> Path:
    """Where earlier versions kept the service: ``$PWE_HOME/service`` or ``~/.pwe/service``."""
    home = HOME.get()
    return (_checked(home, HOME.name) if home else Path.home() / ".pwe") / "service"


def service_dir() -> tuple[Path, bool]:
    """The service's directory and whether it is the old place (:func:`legacy_service_dir`,
    used while it exists and the new one, ``state_dir()/service``, does not)."""
    given = SERVICE_DIR.get()  # (set by the service for its worker and beat)
    if given:
        return Path(given), False
    new, old = state_dir() / "service", legacy_service_dir()
    if not new.exists() and (old / "config.json").is_file():
        return old, True
    return new, False
