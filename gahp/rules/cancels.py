"""Cancels that failed are not forgotten: they are retried in the background until the job is gone.

A cancel whose delete failed (API down, timeout) is answered as failed, so the gridmanager keeps a held
job's remote id and its view matches the cluster; but it forgets a removed job whatever the answer, so
a failed delete would leave the pod or Lancium job running.  :class:`CancelRetries` keeps each such
delete and tries it again with growing back-off (capped at the client's longest back-off) until it
succeeds, the job is gone, or the backend's time limit has passed. What outlives the GAHP is the
backend's: ``podgahp reap`` deletes a pod whose job is gone; the Lancium backend records the pending
cancel and takes it up again when a GAHP of the user starts.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, Optional

from gahp.core.errors import GahpError, InvalidJob, NotFound
from gahp.core.retry import Backoff

log = logging.getLogger(__name__)

Delete = Callable[[], None]


class CancelRetries:
    """Pending deletes by job id, retried by one daemon thread."""

    def __init__(self, max_seconds: float, first_backoff_s: float, max_backoff_s: float,
                 done: Optional[Callable[[str], None]] = None) -> None:
        self.max_seconds = max_seconds
        self.first_backoff_s = max(first_backoff_s, 0.05)
        self.max_backoff_s = max(max_backoff_s, self.first_backoff_s)
        self._pending: Dict[str, Delete] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._done = done

    def add(self, jid: str, delete: Delete) -> None:
        """Keep trying ``delete`` (which raises on failure) for ``jid``."""
        with self._lock:
            self._pending[jid] = delete
            if self._thread is None and not self._stop.is_set():
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
            if self._stop.is_set():
                return
            with self._lock:
                todo = dict(self._pending)
            failed = False
            for jid, delete in todo.items():
                first = started.setdefault(jid, time.monotonic())
                succeeded = False
                try:
                    delete()
                    succeeded = True
                    log.info("[%s] cancel succeeded on retry", jid)
                except NotFound:
                    succeeded = True
                except InvalidJob as e:
                    log.warning("[%s] cancel not retried: %s", jid, e)
                except GahpError as e:
                    if time.monotonic() - first < self.max_seconds:
                        failed = True
                        log.info("[%s] cancel failed again, will retry: %s", jid, e)
                        continue
                    log.error("[%s] cancel failed for %.0f s, giving up for now: %s", jid, self.max_seconds, e)
                if succeeded and self._done is not None:
                    self._done(jid)
                with self._lock:
                    self._pending.pop(jid, None)
                started.pop(jid, None)
            rounds_failed = rounds_failed + 1 if failed else 0
            delay = backoff.delay(rounds_failed + 1) if failed else self.first_backoff_s

    def close(self, timeout: float = 10.0) -> None:
        """Stop retrying and wait (at most ``timeout`` seconds) for a delete under way: after it, no
        delete is tried (the backend closes its client after this, so none waits long)."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
