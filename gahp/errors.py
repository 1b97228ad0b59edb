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


class NotFound(GahpError):
    """The remote object does not exist; cancel and status use this to stay idempotent."""
