"""The words of ``podgahp trace``: a hop of a pilot's way and its state. Shared by :mod:`gahp.ce.trace`
(the hops the schedd tells) and the backends (the hops their remote side tells), so neither imports
the other's layer. Knows nothing of any backend or of HTCondor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

DONE, WAITING, FAILED = "done", "waiting", "failed"


@dataclass(frozen=True)
class Hop:
    name: str
    state: str
    """``done``, ``waiting`` or ``failed``."""
    detail: str
    events: List[str] = field(default_factory=list)
    """The remote side's latest events (a pod's Events), on a hop that waits or failed."""
