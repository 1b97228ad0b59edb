"""Every backend's view of this CE, for the CE-wide tools (``podgahp reap``, ``q`` and ``health``).

Each backend of the registry that declares a :class:`~gahp.backends.base.CeView` and is configured at
this CE gives its census: every remote job of this CE, all users, in every place its configuration
names (each cluster and namespace of the Kubernetes queues; the Lancium account). Which schedd holds
the routed jobs is :class:`ReapSettings`' (the ``PODGAHP_REAP_SCHEDD_*`` knobs).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import FrozenSet, Iterator, List, Optional

from gahp.backends import backend_class
from gahp.backends.base import Census, CeView
from gahp.core import plugins
from gahp.core.config import Knobs
from gahp.core.errors import GahpError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReapSettings:
    schedd_name: Optional[str]
    """``PODGAHP_REAP_SCHEDD_NAME``: schedd holding the routed jobs; default ``$(JOB_ROUTER_SCHEDD2_NAME)``,
    empty = the local schedd."""
    schedd_pool: Optional[str]
    """``PODGAHP_REAP_SCHEDD_POOL``: its collector; default ``$(JOB_ROUTER_SCHEDD2_POOL)``."""
    grace_s: int = 600
    """``PODGAHP_REAP_GRACE_SECONDS``: a remote job no grid job holds is deleted once it is this old (one
    made by a submit whose answer has not reached the schedd yet is younger)."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> "ReapSettings":
        return cls(schedd_name=knobs.optional("PODGAHP_REAP_SCHEDD_NAME") or knobs.optional("JOB_ROUTER_SCHEDD2_NAME"),
                   schedd_pool=knobs.optional("PODGAHP_REAP_SCHEDD_POOL") or knobs.optional("JOB_ROUTER_SCHEDD2_POOL"),
                   grace_s=knobs.integer("PODGAHP_REAP_GRACE_SECONDS", 600, minimum=0))


@contextmanager
def ce_views(knobs: Knobs) -> Iterator[List[CeView]]:
    """The views of every backend this CE uses; closed when the block ends. A backend whose package is
    not installed (an RPM subpackage left out) or that is not configured here is left out; one whose
    configuration is wrong raises its ConfigError."""
    views: List[CeView] = []
    try:
        for name in plugins.backend_names():
            try:
                cls = backend_class(name)
            except ImportError as e:
                log.debug("backend %s is not installed: %s", name, e)
                continue
            view = cls.ce_view(knobs)
            if view is not None:
                views.append(view)
        yield views
    finally:
        for view in views:
            view.close()


def take_censuses(views: List[CeView], held: FrozenSet[str]) -> List[Census]:
    censuses = []
    for view in views:
        try:
            censuses.append(view.census(held))
        except GahpError as e:
            censuses.append(Census(view.backend, errors=[f"{view.backend}: {e}"]))
    return censuses
