"""The Lancium account's job list: one ``GET /jobs`` shared by every caller for a while, the last good
answer kept through short outages."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from gahp.backends.lancium.api import JobSummaryJSON, LanciumClient
from gahp.core.errors import GahpError, TransientError

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Snapshot:
    """One ``GET /jobs`` answer: every job of the account by id."""

    jobs: Mapping[int, JobSummaryJSON]
    fetched_at: float
    """``time.time()`` just before the request was sent: jobs created later may be missing."""


class JobList:
    """``GET /jobs`` at most once per ``max_age`` for all callers; the last good answer on failure."""

    def __init__(self, client: LanciumClient, max_age_s: float, stale_s: float) -> None:
        self._client = client
        self._max_age = max_age_s
        self._stale = stale_s
        self._lock = threading.Lock()
        self._snapshot: Optional[Snapshot] = None
        self._last_attempt = float("-inf")
        self._last_error: Optional[GahpError] = None
        self.fetches = 0
        """Number of ``GET /jobs`` sent (for logs and tests)."""

    def get(self, not_before: Optional[float] = None) -> Tuple[Snapshot, bool]:
        """The current snapshot and whether this call fetched it; TransientError without one.

        ``not_before`` (a ``time.time()``) asks for a list taken after that moment: fetched now
        unless another caller's fetch started after it (concurrent callers share one fetch).
        """
        with self._lock:
            now = time.monotonic()
            snapshot = self._snapshot
            if not_before is not None:
                stale = snapshot is None or snapshot.fetched_at < not_before
            else:
                stale = now - self._last_attempt >= self._max_age
            if stale:
                self._last_attempt = now
                started = time.time()
                try:
                    jobs = self._client.list_jobs()
                except GahpError as e:
                    self._last_error = e
                    log.warning("listing Lancium jobs failed, keeping the last good list: %s", e)
                else:
                    self.fetches += 1
                    self._snapshot = Snapshot({j["id"]: j for j in jobs}, started)
                    self._last_error = None
                    return self._snapshot, True
                if not_before is not None:
                    raise self._failure()
            if snapshot is None or (self._last_error is not None and time.time() - snapshot.fetched_at > self._stale):
                raise self._failure()
            return snapshot, False

    def _failure(self) -> GahpError:
        """The last failure to raise: transient ones say that listing failed, others as they are."""
        error = self._last_error
        if error is None:
            return TransientError("no Lancium job list yet")
        if isinstance(error, TransientError):
            wrapped = TransientError(f"cannot list Lancium jobs: {error}")
            wrapped.__cause__ = error
            return wrapped
        return error


