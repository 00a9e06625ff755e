"""The host registry (hostinfo): which protocol submits to each compute resource and how
it is reached. See :mod:`hostinfo.registry` and :mod:`hostinfo.model`."""

from .model import Host, Partition
from .registry import Registry, load

__all__ = ["Host", "Partition", "Registry", "load"]
