"""Sizes a real API server refuses: the request body, an object as etcd stores it, the annotations of
an object. (Label values and Secret data are checked with the rest of validation, in ``admission``.)

Sources, Kubernetes 1.30:

* ``k8s.io/apiserver/pkg/server/config.go``: ``MaxRequestBodyBytes`` 3 MiB; a longer body of a
  create, update, patch or delete is refused by ``limitedReadBody`` (``endpoints/handlers/rest.go``)
  with 413 ``RequestEntityTooLarge`` "Request entity too large: limit is 3145728";
* etcd's ``--max-request-bytes`` (default 1.5 MiB): a write of a larger object fails with
  "etcdserver: request is too large", which no storage error interpretation converts, so the client
  gets 500 with that message and no reason (``responsewriters.ErrorToAPIStatus``). When the object
  is too large only with its ``managedFields``, the API server drops them and writes it again, which
  succeeds: only an object too large by itself is refused. The simulator measures the object's JSON
  encoding, larger than the protobuf etcd stores (a little for large values, up to about twice for
  many small fields): it refuses earlier than a real cluster, never later;
* ``k8s.io/apimachinery/pkg/api/validation/objectmeta.go``: ``TotalAnnotationSizeLimitB`` 256 KiB,
  keys and values together, in bytes: 422 "metadata.annotations: Too long: must have at most 262144
  bytes".

Owns no state and knows nothing about HTTP.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping

from .errors import ApiError, FieldError, status_body

JsonObj = Dict[str, Any]

MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024
MAX_STORED_BYTES = 1536 * 1024
MAX_ANNOTATION_BYTES = 256 * 1024


def body_too_large() -> ApiError:
    return ApiError(413, status_body(413, "RequestEntityTooLarge",
                                     "Request entity too large: limit is %d" % MAX_REQUEST_BODY_BYTES))


def annotation_errors(annotations: Mapping[str, Any]) -> List[FieldError]:
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > MAX_ANNOTATION_BYTES:
        return [FieldError("toolong", "metadata.annotations", "must have at most %d bytes" % MAX_ANNOTATION_BYTES)]
    return []


def stored_size(obj: JsonObj) -> int:
    """Bytes of ``obj`` as stored (its JSON; its ``managedFields`` are dropped when they do not fit)."""
    return len(json.dumps(obj, separators=(",", ":")))


#: The stored object (defaults and status added) is at most this many times the request body that
#: made it, plus ``_ADDED_BYTES``: below that, no need to measure.
_STORED_RATIO = 6
_ADDED_BYTES = 64 * 1024


def check_stored_size(obj: JsonObj, body_bytes: int = -1) -> None:
    """500 "etcdserver: request is too large" when ``obj`` would not fit in one etcd write;
    ``body_bytes``: the size of the create request that made it, when known (skips measuring the
    usual small object)."""
    if 0 <= body_bytes and body_bytes * _STORED_RATIO + _ADDED_BYTES <= MAX_STORED_BYTES:
        return
    if stored_size(obj) > MAX_STORED_BYTES:
        body = status_body(500, "", "etcdserver: request is too large")
        body.pop("reason", None)
        raise ApiError(500, body)
