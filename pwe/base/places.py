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

import os
from pathlib import Path

from .settings import HOME, SERVICE_DIR


def _base(pwe_sub: str, xdg_var: str, fallback: str) -> Path:
    home = HOME.get()
    if home:
        return Path(home).expanduser().resolve() / pwe_sub
    xdg = os.environ.get(xdg_var)
    if xdg and os.path.isabs(xdg):  # (the XDG spec: a relative path is to be ignored)
        return Path(xdg) / "pwe"
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
    return (Path(home).expanduser().resolve() if home else Path.home() / ".pwe") / "service"


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
