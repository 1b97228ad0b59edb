"""What installed packages add to podgahp, by entry points: the one registry of backends and of
``podgahp`` commands.

* ``podgahp.backends``: ``<name> = <module>:<Backend class>``, the backend serving
  ``GridResource = "batch <name>"``; its program is the console script ``<name>_gahp``
  (:mod:`gahp.cli`) and its knob ``<NAME>_GAHP``. A new backend registers here, in ``setup.cfg``, and
  nowhere else in the code: every list of backends (the programs, ``podgahp gahp --backend``,
  ``podgahp routes check``, ``podgahp reap``/``q``/``health``) is read from this group.
* ``podgahp.commands``: ``<name> = <module>:<click command>``, added under ``podgahp`` (the
  simulators' ``podgahp sim``, where that distribution is installed).

Reads the installed distributions' metadata only: nothing is imported until an entry is loaded, so
listing the backends costs no client library. Knows nothing of any backend.
"""

from __future__ import annotations

import functools
import sys
from importlib import metadata
from typing import Dict, List, Mapping

BACKENDS = "podgahp.backends"
COMMANDS = "podgahp.commands"


@functools.lru_cache(maxsize=None)
def entries(group: str) -> Mapping[str, metadata.EntryPoint]:
    """The entry points of ``group`` by name (the first of a name where two distributions give it);
    read once per process (do not change the answer)."""
    if sys.version_info >= (3, 10):
        found = list(metadata.entry_points(group=group))
    else:  # a mapping of group -> entry points
        found = list(metadata.entry_points().get(group, ()))
    named: Dict[str, metadata.EntryPoint] = {}
    for entry in found:
        named.setdefault(entry.name, entry)
    return named


def backend_names() -> List[str]:
    """The names of the installed backends, sorted (each the ``batch <name>`` it serves)."""
    return sorted(entries(BACKENDS))


def programs() -> List[str]:
    """The backends that have a GAHP program, the console script ``<name>_gahp``, sorted (the in-memory
    test backend has none: it runs as ``podgahp gahp --backend memory``)."""
    scripts = entries("console_scripts")
    return [name for name in backend_names() if f"{name}_gahp" in scripts]
