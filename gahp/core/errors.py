"""The error tree every podgahp layer raises.

Backends translate client exceptions into these classes at one choke point (``raise ... from e``);
only the server's per-request boundary catches anything wider. Messages are what the gridmanager
turns into a hold reason, so they say what failed and, where an admin can act, what to do.
"""

from __future__ import annotations


class GahpError(Exception):
    """Base of every error podgahp raises on purpose."""


class ConfigError(GahpError):
    """A configuration knob is missing or has a value of the wrong form."""


class InvalidJob(GahpError):
    """The pilot job cannot run as described (bad submit ad, inputs too large, invalid spec).

    Permanent: the gridmanager holds the job with this message as its reason.
    """


class TransientError(GahpError):
    """The backend could not answer now (unreachable, overloaded, 5xx, 429); retrying may succeed."""


class AuthError(GahpError):
    """The backend refused our credentials or this identity may not do what was asked."""


class BackendError(GahpError):
    """The backend refused the request for a reason that retrying will not fix (quota, validation)."""


class RoutesError(GahpError):
    """Routes cannot be checked or converted; the message says what to fix."""


class NotFound(GahpError):
    """The remote object does not exist; cancel and status use this to stay idempotent."""


# --------------------------------------------------------------------------------------------
# Refusals of a remote service (Kubernetes API, Lancium API), shared by every backend so that the
# same HTTP answer means the same thing whichever service gave it.


class ServiceRefusal(GahpError):
    """A remote service's refusal, with its HTTP status, a truncated body and the service's own
    reason word (Kubernetes ``Status.reason``) kept, so callers can tell refusals apart without
    parsing the message."""

    status: int = 0
    body: str = ""
    reason: str = ""


class Conflict(BackendError, ServiceRefusal):
    """409: the object exists already, changed under us, or is not in a state that allows this."""


class Invalid(InvalidJob, ServiceRefusal):
    """400 / 422: the service found the object or request invalid (the pilot's or the route's fault)."""


class Expired(TransientError, ServiceRefusal):
    """410: a list or watch asked for a version the service no longer has; list again."""


class QuotaExceeded(BackendError, ServiceRefusal):
    """403 from an admission check (quota, unknown priority class), not from authorisation."""


class Unauthorized(AuthError, ServiceRefusal):
    """401 / 403: the service refused our credentials, or this identity may not do it."""


class Missing(NotFound, ServiceRefusal):
    """404: the remote object does not exist (any more)."""


class Unavailable(TransientError, ServiceRefusal):
    """429, 5xx, or no answer at all (status 0), after every attempt the request was allowed."""


class Refused(BackendError, ServiceRefusal):
    """Any other refusal (402, other 4xx): retrying will not fix it."""


def refusal(cls: "type[ServiceRefusal]", message: str, status: int, body: str = "",
            reason: str = "") -> ServiceRefusal:
    """An instance of ``cls`` carrying ``status``, ``body`` and ``reason``."""
    error = cls(message)
    error.status, error.body, error.reason = status, body, reason
    return error
