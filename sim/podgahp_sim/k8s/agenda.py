"""What a tick of a large simulated cluster must look at, so that a tick costs the pods that change,
not every pod.

A small cluster is simulated by visiting every pod every tick. With tens of thousands of pods that
pass holds the store lock long enough to slow every API request, so a large cluster visits only:

- the pods and Secrets changed since the last tick (the store's event log from :attr:`Agenda.cursor`);
- the pods whose next step is due (a container to create, a container's exit, a deadline, an
  eviction: :meth:`Agenda.wake` timers);
- the pods not bound to a node yet (the scheduler retries them every tick, as kube-scheduler does);
- the objects whose owners may be gone (garbage-collector candidates: dependents of deleted objects
  and objects created with owner references).

It holds only keys and times; the cluster decides what a visit does. Knows nothing of HTTP.
"""

from __future__ import annotations

import heapq
from typing import Dict, Iterable, List, Optional, Set, Tuple

Key = Tuple[str, str, str]


class Agenda:
    """Pending visits of a large cluster; see the module docstring."""

    def __init__(self) -> None:
        self.cursor: Optional[int] = None
        """Store resource version up to which changes have been taken (None: take none; a full pass
        is due)."""
        self.unbound: Set[Key] = set()
        self.collectable: Set[Key] = set()
        self.last_full = 0.0
        self._timers: List[Tuple[float, Key]] = []
        self._next: Dict[Key, float] = {}
        """Earliest pending timer of each key (later heap entries of a key are stale)."""

    def wake(self, key: Key, at: float) -> None:
        """Visit ``key`` at ``at`` (or earlier if already due earlier)."""
        current = self._next.get(key)
        if current is not None and current <= at:
            return
        self._next[key] = at
        heapq.heappush(self._timers, (at, key))

    def due(self, now: float) -> Set[Key]:
        """The keys whose timer is due, each removed."""
        found: Set[Key] = set()
        while self._timers and self._timers[0][0] <= now:
            at, key = heapq.heappop(self._timers)
            if self._next.get(key) == at:
                del self._next[key]
                found.add(key)
        return found

    def forget(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self._next.pop(key, None)
            self.unbound.discard(key)

    def reset(self, cursor: int, now: float) -> None:
        """After a full pass: changes are taken up to ``cursor``; timers are set again by the pass."""
        self.cursor = cursor
        self.unbound.clear()
        self.collectable.clear()
        self._timers.clear()
        self._next.clear()
        self.last_full = now
