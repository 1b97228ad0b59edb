"""The one back-off rule of every retry in podgahp (API calls, watches, submits, background cancels), the
one retry loop (:func:`retried`), and the one reconnect loop of a long-lived stream (:func:`reconnected`).

The wait after failed attempt *n* doubles from ``first_s``, is capped at ``max_s``, is replaced by a
``Retry-After`` the service sent (capped too), and gets up to ``jitter`` of itself added at random so
that many GAHPs retrying together do not hit the service in step.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

from gahp.core.errors import GahpError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    first_s: float
    """Wait after the first failure."""
    max_s: float
    """Longest wait (also caps ``Retry-After``)."""
    jitter: float = 0.1
    """Random share added to each wait (0.1: up to 10 % more)."""

    def delay(self, attempt: int, retry_after: Optional[float] = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1, 2, ...)."""
        base = self.first_s * 2.0 ** max(attempt - 1, 0) if retry_after is None else max(retry_after, 0.0)
        wait = min(base, self.max_s)
        return float(wait * (1 + self.jitter * random.random()))


def retried(attempt: Callable[[], T], *, what: str, attempts: int, backoff: Backoff,
            retryable: Callable[[Exception], bool], retry_after: Callable[[Exception], Optional[float]] = lambda e: None,
            sleep: Callable[[float], None] = time.sleep, slowed: Callable[[Exception], bool] = lambda e: False,
            patience_s: float = 0.0) -> T:
    """``attempt()`` until it returns, or raises what ``retryable`` refuses, or ``attempts`` are made (the
    last exception is raised as it was); between two attempts a line in the log and the wait of
    :class:`Backoff` (``retry_after`` gives the service's ``Retry-After`` of an exception, if any). A
    failure that ``slowed`` says is the service asking to slow down (a ``429``) is not a failed attempt
    while the waits after such failures add up to no more than ``patience_s``: a throttling service is
    waited for at the rate it sets. The one retry loop of podgahp: every request
    (:mod:`gahp.backends.http`) and every operation a backend repeats as a whole goes through it."""
    failed = 0
    waited = 0.0
    while True:
        try:
            return attempt()
        except Exception as e:  # noqa: BLE001 - handed to ``retryable``, re-raised when it says no
            patient = patience_s - waited > 1e-6 and slowed(e)
            failed += 0 if patient else 1
            if not retryable(e) or failed >= attempts:
                raise
            wait = backoff.delay(max(failed, 1), retry_after(e))
            if patient:  # a tenth of a second at least, so that a Retry-After of 0 still uses the patience up
                wait = min(max(wait, 0.1), patience_s - waited)
                waited += wait
                log.warning("%s: the service throttles (%s); again in %.1f s (%.0f of %.0f s waited so far)", what,
                            " ".join(str(e).split())[:200], wait, waited, patience_s)
            else:
                log.warning("%s: attempt #%d/%d failed (%s); retrying in %.1f s", what, failed, attempts,
                            " ".join(str(e).split())[:200], wait)
            sleep(wait)


def reconnected(session: Callable[[], None], *, what: str, backoff: Backoff, stop: threading.Event,
                failed: Callable[[Exception], None] = lambda e: None) -> None:
    """``session()`` again and again until ``stop`` is set: the one reconnect loop of a long-lived stream
    (a watch), which a request retry (:func:`retried`) cannot be, having no last attempt. A session that
    returns (the server ended the stream, or it must start over at once) is followed by the next at
    once; one that raises waits :class:`Backoff`'s delay for that many failures in a row (``stop``
    ends the wait), after ``failed`` heard of it (to tell the stream's readers). Never raises: an error
    of the tree (:mod:`gahp.core.errors`) is a warning, anything else is logged with its traceback (the
    stream outlives a bug), and waits at least a second."""
    failures = 0
    while not stop.is_set():
        try:
            session()
            failures = 0
            continue
        except GahpError as e:
            failures += 1
            wait = backoff.delay(failures)
            log.warning("%s failed (%d in a row); again in %.1f s: %s", what, failures, wait,
                        " ".join(str(e).split())[:300])
            error: Exception = e
        except Exception as e:  # noqa: BLE001 - the stream's thread must survive anything
            failures += 1
            wait = max(backoff.delay(failures), 1.0)
            log.exception("%s failed unexpectedly (%d in a row); again in %.1f s", what, failures, wait)
            error = e
        if stop.is_set():
            return
        failed(error)
        if stop.wait(wait):
            return
