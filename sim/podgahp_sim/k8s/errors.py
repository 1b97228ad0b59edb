"""Kubernetes ``Status`` error bodies and the exception that carries them to the HTTP layer.

Shapes follow the real API server (``k8s.io/apimachinery/pkg/api/errors``): ``details.kind`` is the
lowercase plural resource for NotFound/AlreadyExists/Forbidden/Conflict and the Kind for Invalid.
Owns no state; must not know about HTTP routing or storage.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, TypedDict


class Cause(TypedDict):
    """One ``details.causes[]`` entry."""

    reason: str
    message: str
    field: str


class FieldError:
    """A validation failure, formatted like ``field.Error`` of apimachinery."""

    def __init__(self, kind: str, field_path: str, detail: str = "", value: Any = None) -> None:
        self.kind = kind
        self.field = field_path
        self.detail = detail
        self.value = value

    @property
    def reason(self) -> str:
        return {
            "required": "FieldValueRequired",
            "invalid": "FieldValueInvalid",
            "notsupported": "FieldValueNotSupported",
            "forbidden": "FieldValueForbidden",
            "duplicate": "FieldValueDuplicate",
            "toolong": "FieldValueTooLong",
            "notfound": "FieldValueNotFound",
        }[self.kind]

    def body(self) -> str:
        """The message without the field path (``causes[].message``)."""
        if self.kind == "required":
            text = "Required value"
        elif self.kind == "forbidden":
            text = "Forbidden"
        elif self.kind == "toolong":
            text = "Too long"
        else:
            prefix = {"invalid": "Invalid value", "notsupported": "Unsupported value",
                      "duplicate": "Duplicate value", "notfound": "Not found"}[self.kind]
            text = "%s: %s" % (prefix, _show(self.value))
        return "%s: %s" % (text, self.detail) if self.detail else text

    def __str__(self) -> str:
        return "%s: %s" % (self.field, self.body())


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return '"%s"' % value.replace("\\", "\\\\").replace('"', '\\"')
    return repr(value)


class ApiError(Exception):
    """Raised anywhere below the HTTP layer; becomes the HTTP status and ``Status`` body."""

    def __init__(self, code: int, body: Dict[str, Any], headers: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(body.get("message", ""))
        self.code = code
        self.body = body
        self.headers = dict(headers or {})


def status_body(code: int, reason: str, message: str, details: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """A failure ``Status`` object."""
    body: Dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason}
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success_status(details: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        body["details"] = details
    return body


def _qualified(resource: str, group: str) -> str:
    return "%s.%s" % (resource, group) if group else resource


def _details(resource: str, name: str, group: str) -> Dict[str, Any]:
    details: Dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(404, status_body(404, "NotFound", '%s "%s" not found' % (_qualified(resource, group), name),
                                     _details(resource, name, group)))


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(409, status_body(409, "AlreadyExists",
                                     '%s "%s" already exists' % (_qualified(resource, group), name),
                                     _details(resource, name, group)))


def conflict(resource: str, name: str) -> ApiError:
    message = ('Operation cannot be fulfilled on %s "%s": the object has been modified; '
               "please apply your changes to the latest version and try again" % (resource, name))
    return ApiError(409, status_body(409, "Conflict", message, _details(resource, name, "")))


def forbidden(resource: str, name: str, why: str, group: str = "") -> ApiError:
    what = '%s "%s"' % (_qualified(resource, group), name) if name else _qualified(resource, group)
    return ApiError(403, status_body(403, "Forbidden", "%s is forbidden: %s" % (what, why),
                                     _details(resource, name, group)))


def invalid(kind: str, name: str, errors: Sequence[FieldError], group: str = "") -> ApiError:
    """422 Invalid: one error printed bare, several as ``[a, b]`` (``errors.NewInvalid``)."""
    if len(errors) == 1:
        summary = str(errors[0])
    else:
        summary = "[%s]" % ", ".join(str(e) for e in errors)
    causes: List[Cause] = [{"reason": e.reason, "message": e.body(), "field": e.field} for e in errors]
    details: Dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    return ApiError(422, status_body(422, "Invalid", '%s "%s" is invalid: %s' % (kind, name, summary), details))


def bad_request(message: str) -> ApiError:
    return ApiError(400, status_body(400, "BadRequest", message))


def unauthorized() -> ApiError:
    return ApiError(401, status_body(401, "Unauthorized", "Unauthorized"))


def method_not_allowed() -> ApiError:
    return ApiError(405, status_body(405, "MethodNotAllowed",
                                     "the server does not allow this method on the requested resource"))


def no_route() -> ApiError:
    return ApiError(404, status_body(404, "NotFound", "the server could not find the requested resource",
                                     {}))


def unsupported_media() -> ApiError:
    return ApiError(415, status_body(415, "UnsupportedMediaType",
                                     'the body of the request was in an unknown format - accepted media '
                                     'types include: application/json-patch+json, application/merge-patch+json, '
                                     'application/apply-patch+yaml, application/strategic-merge-patch+json',
                                     {}))


def expired(requested: int, oldest: int) -> Dict[str, Any]:
    """The in-stream watch ``ERROR`` object for a too-old resource version."""
    return status_body(410, "Expired", "too old resource version: %d (%d)" % (requested, oldest))
