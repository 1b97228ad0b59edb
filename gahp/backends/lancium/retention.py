"""Which of this GAHP's Lancium jobs its own clean-up deletes: those it recorded making (other users'
jobs are theirs to clean up) that stayed ``finished``, ``error`` or ``created`` for
``PODGAHP_LANCIUM_CLEANUP_AFTER_SECONDS`` after their outcome was reported, at most
``PODGAHP_LANCIUM_CLEANUP_MAX_PER_CYCLE`` per job-list refresh. What it remembers between cycles is
bounded by the account's jobs."""

from __future__ import annotations

import threading
from typing import Callable, Dict, List, Set

from gahp.backends.lancium.cache import Snapshot
from gahp.backends.lancium.identity import key_of_name
from gahp.backends.lancium.state import CLEANUP_STATES


class Retention:
    """The clean-up's memory: since when each finished job has been seen so, and which are not ours."""

    def __init__(self, after_s: float, per_cycle: int) -> None:
        self.after_s = after_s
        self.per_cycle = per_cycle
        self._lock = threading.Lock()
        self._terminal_seen: Dict[int, float] = {}
        self._not_ours: Set[int] = set()
        """Finished jobs with podgahp's form of name that this GAHP has no record of (never deleted)."""

    def due(self, snapshot: Snapshot, now: float, reported: Callable[[int], bool],
            recorded: Callable[[int], bool]) -> List[int]:
        """The jobs of ``snapshot`` to delete now (``now``: ``time.monotonic()``); ``reported(id)``: this
        process has given the job's final answer, or never tracked it; ``recorded(id)``: this GAHP
        recorded making it."""
        if self.after_s <= 0 or self.per_cycle <= 0:
            return []
        candidates: List[int] = []
        with self._lock:
            for lancium_id in list(self._terminal_seen):
                summary = snapshot.jobs.get(lancium_id)
                if summary is None or summary["status"] not in CLEANUP_STATES:
                    del self._terminal_seen[lancium_id]
                    self._not_ours.discard(lancium_id)
            for lancium_id, summary in snapshot.jobs.items():
                if (summary["status"] not in CLEANUP_STATES or key_of_name(summary["name"]) is None
                        or lancium_id in self._not_ours):
                    continue
                first = self._terminal_seen.setdefault(lancium_id, now)
                if reported(lancium_id) and now - first >= self.after_s:
                    candidates.append(lancium_id)
        due: List[int] = []
        for lancium_id in candidates:
            if len(due) >= self.per_cycle:
                break
            if not recorded(lancium_id):
                with self._lock:
                    self._not_ours.add(lancium_id)
                continue
            due.append(lancium_id)
        return due

    def done(self, lancium_id: int) -> None:
        """The job was deleted (or tried): forget it."""
        with self._lock:
            self._terminal_seen.pop(lancium_id, None)
