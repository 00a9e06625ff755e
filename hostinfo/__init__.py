"""The host registry (hostinfo): which protocol submits to each compute resource and how
it is reached. See :mod:`hostinfo.registry` and :mod:`hostinfo.model`.

``Host`` and ``Partition`` (the pydantic models) are imported on first use: the road to a
run's first member checks hosts without pydantic (:mod:`pwe.base.checker`)."""

from typing import Any

__all__ = ["Host", "Partition", "Registry", "load"]


def __getattr__(name: str) -> Any:
    if name in ("Host", "Partition"):
        from . import model

        return getattr(model, name)
    if name in ("Registry", "load"):
        from . import registry

        return getattr(registry, name)
    raise AttributeError(name)
