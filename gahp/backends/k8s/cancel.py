"""Cancels that failed are not forgotten: they are retried in the background until the pod is gone.

The gridmanager forgets a job once its cancel request was answered, whatever the answer, so a delete
that failed (API server down, timeout) would leave the pod running for ever.  :class:`CancelRetries`
keeps each such delete and tries it again with growing back-off (capped at the client's longest
back-off) until it succeeds, the pod is gone, or ``PODGAHP_K8S_CANCEL_RETRY_MAX_SECONDS`` have passed.
Should the GAHP itself go away first, ``podgahp reap`` (run by the CE's condor) deletes the pod, since
its job no longer exists.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, Optional

from gahp.errors import GahpError, InvalidJob, NotFound
from gahp.retry import Backoff

log = logging.getLogger(__name__)

Delete = Callable[[], None]


class CancelRetries:
    """Pending deletes by job id, retried by one daemon thread."""

    def __init__(self, max_seconds: float, first_backoff_s: float, max_backoff_s: float) -> None:
        self.max_seconds = max_seconds
        self.first_backoff_s = max(first_backoff_s, 0.05)
        self.max_backoff_s = max(max_backoff_s, self.first_backoff_s)
        self._pending: Dict[str, Delete] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def add(self, jid: str, delete: Delete) -> None:
        """Keep trying ``delete`` (which raises on failure) for ``jid``."""
        with self._lock:
            self._pending[jid] = delete
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cancel-retries", daemon=True)
                self._thread.start()
        self._wake.set()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _run(self) -> None:
        started: Dict[str, float] = {}
        backoff = Backoff(self.first_backoff_s, self.max_backoff_s)
        rounds_failed = 0
        delay = self.first_backoff_s
        while not self._stop.is_set():
            self._wake.wait(delay if self.pending() else None)
            self._wake.clear()
            with self._lock:
                todo = dict(self._pending)
            failed = False
            for jid, delete in todo.items():
                first = started.setdefault(jid, time.monotonic())
                try:
                    delete()
                except NotFound:
                    pass
                except InvalidJob as e:
                    log.warning("[%s] cancel not retried: %s", jid, e)
                except GahpError as e:
                    if time.monotonic() - first < self.max_seconds:
                        failed = True
                        log.info("[%s] cancel failed again, will retry: %s", jid, e)
                        continue
                    log.error("[%s] cancel failed for %.0f s, giving up (podgahp reap deletes the pod once "
                              "its job is gone): %s", jid, self.max_seconds, e)
                else:
                    log.info("[%s] cancel succeeded on retry", jid)
                with self._lock:
                    self._pending.pop(jid, None)
                started.pop(jid, None)
            rounds_failed = rounds_failed + 1 if failed else 0
            delay = backoff.delay(rounds_failed + 1) if failed else self.first_backoff_s

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
