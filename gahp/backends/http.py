"""The one door to a remote service's HTTP API, every backend's: what a request is allowed to try again
and how long it waits, the log line of each attempt, and the translation of what went wrong into the one
error tree (:mod:`gahp.core.errors`), with the service's words cut to :data:`MESSAGE_MAX` characters.

A backend supplies its client calls, each an *attempt*: a callable that sends one request with the
backend's own client library and returns what the caller wants, or raises :class:`Failed` saying what
the service answered (its status, message, reason word, ``Retry-After``) or that nothing came back.
:meth:`Door.call` does the rest, the same for every backend:

* an answer worth another attempt is 429 or 5xx, or no answer at all (a connection refused or reset,
  a timeout);
* a request that is not idempotent (creating a job) is tried again only when the server cannot have
  acted on it: it was never sent (the connection could not be made), or the answer was 429 or 503;
* the wait is :class:`gahp.core.retry.Backoff`'s, doubling from the first, a ``Retry-After`` the service
  sent taking its place (capped too);
* the final failure is one class of the error tree per status, carrying the status, the service's
  message and its reason word (:class:`gahp.core.errors.ServiceRefusal`), with the backend's hint for
  that status (what an admin should fix) after the message.

Knows nothing of any service's vocabulary, client library or objects.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Type, TypeVar

from gahp.core.errors import (Conflict, Expired, GahpError, Invalid, Missing, QuotaExceeded, Refused, ServiceRefusal,
                         Unauthorized, Unavailable, refusal)
from gahp.core.retry import Backoff, retried

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A JSON object as a service's API sends or takes it (decoded, not yet checked).
JsonObj = Dict[str, Any]

#: Longest service message carried into an error (and so into a hold reason or a log line).
MESSAGE_MAX = 256
#: Statuses worth another attempt of an idempotent request.
TRANSIENT = frozenset({429, 500, 502, 503, 504})
#: Statuses after which the server surely did not act: worth another attempt of any request.
NOT_ACTED = frozenset({429, 503})


def truncate(text: str, limit: int = MESSAGE_MAX) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass(frozen=True)
class Failure:
    """What one attempt got instead of what it wanted, in words every client can give."""

    status: int
    """The HTTP status of the answer; 0 when there was none (unreachable, reset, timed out)."""
    message: str
    """The service's message (or the transport's), as it gave it; cut when used."""
    reason: str = ""
    """The service's own word for the refusal, where it has one (Kubernetes ``Status.reason``)."""
    retry_after: Optional[float] = None
    """The answer's ``Retry-After``, in seconds."""
    sent: bool = True
    """False when the request surely never reached the server (no connection could be made)."""
    admission: bool = False
    """A 403 from an admission check (a quota, an unknown priority class), not from authorisation."""


class Failed(Exception):
    """Raised by an attempt: what it got (:class:`Failure`)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass(frozen=True)
class Service:
    """One remote service as the door sees it: its name in messages, how often to try, and the hints an
    admin gets with a status (``401: check the token in the kubeconfig``)."""

    name: str
    """In messages: ``the Kubernetes API``, ``the Lancium API``."""
    retries: int
    """Attempts after the first."""
    backoff: Backoff
    hints: Mapping[int, str] = field(default_factory=dict)
    throttle_wait_s: float = 0.0
    """How long in all a request waits through ``429`` answers (the service throttles) before they
    count as failed attempts (:func:`gahp.core.retry.retried`)."""


def retryable(failure: Failure, idempotent: bool) -> bool:
    """Whether another attempt may be made after ``failure`` (see the module docstring)."""
    transient = failure.status == 0 or failure.status in TRANSIENT or failure.status >= 500
    if not transient:
        return False
    return idempotent or not failure.sent or failure.status in NOT_ACTED


#: The error class of each status (others: 5xx and 0 Unavailable, any other Refused).
CLASSES: Mapping[int, Type[ServiceRefusal]] = {
    400: Invalid, 411: Invalid, 412: Invalid, 422: Invalid,
    401: Unauthorized, 403: Unauthorized, 404: Missing, 409: Conflict, 410: Expired, 429: Unavailable,
}


def translate(failure: Failure, what: str, service: Service) -> GahpError:
    """The error of the tree for a request that failed for good (the one choke point for statuses)."""
    status = failure.status
    message = truncate(failure.message)
    if status == 0:
        return refusal(Unavailable, f"{what}: {service.name} cannot be reached: {message}", 0, message)
    cls = QuotaExceeded if status == 403 and failure.admission else CLASSES.get(status) or (
        Unavailable if status >= 500 else Refused)
    hint = service.hints.get(status, "")
    text = f"{what}: {service.name} answered HTTP {status}" + (f": {message}" if message else "") + (
        f"; {hint}" if hint and cls is not QuotaExceeded else "")
    return refusal(cls, text, status, message, failure.reason)


class Door:
    """The requests of one backend to one service (thread-safe; counters are approximate under races)."""

    def __init__(self, service: Service, sleep: Callable[[float], None] = time.sleep) -> None:
        self.service = service
        self._sleep = sleep
        self.requests = 0
        """Attempts made (each counts), for logs, tests and the health figures."""
        self.errors = 0
        """Attempts that failed (an error answer or none)."""
        self.seconds = 0.0
        """Time spent in attempts (until the headers, for a stream)."""

    def call(self, what: str, attempt: Callable[[], T], *, idempotent: bool = True, retry: bool = True,
             job_id: Optional[str] = None) -> T:
        """``attempt()`` until it succeeds or may not be tried again (:func:`gahp.core.retry.retried`); its
        result, or the error of the tree (:func:`translate`). ``what`` names the request in errors and
        logs (``create pod ns/x``); ``retry=False``: one attempt only. A
        :class:`~gahp.core.errors.GahpError` the attempt raises itself (an answer that cannot be read)
        passes through at once."""
        where = f"{what} [{job_id}]" if job_id else what

        def counted() -> T:
            self.requests += 1
            started = time.monotonic()
            try:
                result = attempt()
            except Failed:
                self.errors += 1
                raise
            finally:
                self.seconds += time.monotonic() - started
            log.debug("%s: done in %.3f s", where, time.monotonic() - started)
            return result

        try:
            return retried(counted, what=where, attempts=1 + (self.service.retries if retry else 0),
                           backoff=self.service.backoff, sleep=self._sleep,
                           retryable=lambda e: isinstance(e, Failed) and retryable(e.failure, idempotent),
                           retry_after=lambda e: e.failure.retry_after if isinstance(e, Failed) else None,
                           slowed=lambda e: isinstance(e, Failed) and e.failure.status == 429,
                           patience_s=self.service.throttle_wait_s if retry else 0.0)
        except Failed as e:
            log.debug("%s: failed: HTTP %d", where, e.failure.status)
            raise translate(e.failure, what, self.service) from None
