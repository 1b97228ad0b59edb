"""Lancium's refusals as :mod:`gahp.errors` classes, with the HTTP status and a short body kept, so
callers can tell 409 from 402 without parsing text; :func:`translate` is the one choke point."""

from __future__ import annotations

import json
from typing import Type

import requests

from gahp.errors import (AuthError, BackendError, Conflict, GahpError, Invalid, NotFound, ServiceRefusal,
                         TransientError, refusal)

BODY_LIMIT = 256
"""Characters of an error body kept in logs and messages."""

#: Statuses worth retrying on any request: throttled or a server-side hiccup.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

#: The shared refusal base (:class:`gahp.errors.ServiceRefusal`), under the name this module used.
LanciumHTTPError = ServiceRefusal


class LanciumNotFound(NotFound, ServiceRefusal):
    """404: the job (or input, output) does not exist (any more)."""


class LanciumConflict(Conflict):
    """409: the job is not in a state that allows the operation."""


class LanciumInvalid(Invalid):
    """400/411/412/422: the request or the job description was refused as invalid."""


class LanciumAuthError(AuthError, ServiceRefusal):
    """401/403: the API key or access token was refused."""


class BillingRequired(BackendError, ServiceRefusal):
    """402: the account has no billing information; only an administrator can fix that."""


class ServiceUnavailable(TransientError, ServiceRefusal):
    """503 after all retries (at submit: the requested QOS cannot be met)."""


class LanciumTransient(TransientError, ServiceRefusal):
    """429, 5xx or a transport failure after all retries."""


class LanciumRefused(BackendError, ServiceRefusal):
    """Any other 4xx: refused for a reason retrying will not fix."""


def _http_error(cls: Type[ServiceRefusal], message: str, status: int, body: str) -> GahpError:
    return refusal(cls, message, status, body)


def truncate(text: str, limit: int = BODY_LIMIT) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_text(response: requests.Response) -> str:
    """The ``errors`` of a Lancium error body as one short line (the raw body if not JSON)."""
    try:
        body: object = response.json()
    except ValueError:
        return truncate(response.text or "")
    errors = body.get("errors", body) if isinstance(body, dict) else body
    if isinstance(errors, dict):
        parts = []
        for key, messages in errors.items():
            if isinstance(messages, list):
                parts.append(f"{key}: {', '.join(str(m) for m in messages)}")
            else:
                parts.append(f"{key}: {messages}")
        return truncate("; ".join(parts))
    if isinstance(errors, list):
        return truncate("; ".join(str(e) for e in errors))
    return truncate(json.dumps(errors))


def translate(method: str, path: str, response: requests.Response) -> GahpError:
    """The :mod:`gahp.errors` class for a refused request (the one choke point for HTTP statuses)."""
    status = response.status_code
    body = error_text(response)
    what = f"Lancium refused {method} {path} (HTTP {status})"
    detail = f": {body}" if body else ""
    if status == 400 or status in (411, 412, 422):
        return _http_error(LanciumInvalid, f"{what}{detail}", status, body)
    if status in (401, 403):
        return _http_error(LanciumAuthError, f"{what}: credentials refused{detail}", status, body)
    if status == 402:
        return _http_error(
            BillingRequired,
            f"{what}: billing required — the Lancium account has no billing information; an "
            f"administrator must add it on the Lancium portal before pilots can run{detail}",
            status, body)
    if status == 404:
        return _http_error(LanciumNotFound, f"{what}: not found{detail}", status, body)
    if status == 409:
        return _http_error(LanciumConflict, f"{what}: conflict with the job's state{detail}", status, body)
    if status == 503:
        return _http_error(ServiceUnavailable, f"{what}: service unavailable{detail}", status, body)
    if status in RETRY_STATUSES or status >= 500:
        return _http_error(LanciumTransient, f"{what}{detail}", status, body)
    return _http_error(LanciumRefused, f"{what}{detail}", status, body)
