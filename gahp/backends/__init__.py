"""Backends: one adapter per kind of remote service, all behind :class:`gahp.backends.base.Backend`.

Which backends exist is read from one registry, the ``podgahp.backends`` entry points
(:mod:`gahp.core.plugins`); :func:`backend_class` imports only the backend asked for, so starting one GAHP
imports only the client library its backend needs. Nothing here names a backend.
"""

from __future__ import annotations

from typing import Type

from gahp.core import plugins
from gahp.backends.base import Backend
from gahp.core.errors import ConfigError


def backend_class(name: str) -> Type[Backend]:
    """The class of the backend registered as ``name``; ConfigError when there is none, ImportError
    (or another exception of its module) when its package is not installed whole."""
    entry = plugins.entries(plugins.BACKENDS).get(name)
    if entry is None:
        raise ConfigError(f"no backend is registered as {name!r} (registered: "
                          f"{', '.join(plugins.backend_names()) or 'none: is podgahp installed?'})")
    found = entry.load()
    if not (isinstance(found, type) and issubclass(found, Backend) and found.name == name):
        raise ConfigError(f"backend entry point {name} = {entry.value} is not a Backend named {name!r}")
    return found
