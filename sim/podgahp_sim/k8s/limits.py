"""Sizes a real API server refuses: the request body, an object as etcd stores it, the annotations of
an object. (Label values and Secret data are checked with the rest of validation, in ``admission``.)

Sources, Kubernetes 1.30:

* ``k8s.io/apiserver/pkg/server/config.go``: ``MaxRequestBodyBytes`` 3 MiB; a longer body of a
  create, update, patch or delete is refused by ``limitedReadBody`` (``endpoints/handlers/rest.go``)
  with 413 ``RequestEntityTooLarge`` "Request entity too large: limit is 3145728";
* etcd's ``--max-request-bytes`` (default 1.5 MiB): a write of a larger object fails with
  "etcdserver: request is too large", which no storage error interpretation converts, so the client
  gets 500 with that message and no reason (``responsewriters.ErrorToAPIStatus``). etcd counts the
  object as stored, its ``managedFields`` included (the API server drops them and retries once on a
  create or update, to no avail for an object too large by itself). The simulator measures the JSON
  encoding, somewhat larger than the protobuf etcd stores, plus the field set the server would
  record for the writer: it refuses a little earlier than a real cluster, never later;
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

#: Keys of the lists the API server merges by key (their items appear as ``k:{...}`` in field sets).
_LIST_KEYS = ("name", "mountPath", "containerPort", "devicePath", "ip", "key", "uid", "type")


def body_too_large() -> ApiError:
    return ApiError(413, status_body(413, "RequestEntityTooLarge",
                                     "Request entity too large: limit is %d" % MAX_REQUEST_BODY_BYTES))


def annotation_errors(annotations: Mapping[str, Any]) -> List[FieldError]:
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > MAX_ANNOTATION_BYTES:
        return [FieldError("toolong", "metadata.annotations", "must have at most %d bytes" % MAX_ANNOTATION_BYTES)]
    return []


def _field_set(value: Any) -> JsonObj:
    """The ``fieldsV1`` the server records for a writer that set ``value``."""
    if isinstance(value, dict):
        out: JsonObj = {".": {}}
        for key, sub in value.items():
            out["f:" + key] = _field_set(sub)
        return out
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        out = {}
        for item in value:
            key = {k: item[k] for k in _LIST_KEYS if k in item and not isinstance(item[k], (dict, list))}
            out["k:" + json.dumps(key, separators=(",", ":"), sort_keys=True)] = _field_set(item)
        return out
    return {}


def stored_size(obj: JsonObj) -> int:
    """Bytes of ``obj`` as stored, with the ``managedFields`` entry of the writer who created it."""
    fields = {k: v for k, v in obj.items() if k not in ("status",)}
    entry = {"manager": "podgahp", "operation": "Update", "apiVersion": "v1", "time": "2006-01-02T15:04:05Z",
             "fieldsType": "FieldsV1", "fieldsV1": _field_set(fields)}
    return len(json.dumps(obj, separators=(",", ":"))) + len(json.dumps(entry, separators=(",", ":")))


#: The stored object (defaults and status added) and its field set are at most this many times the
#: request body that made it, plus ``_ADDED_BYTES``: below that, no need to measure.
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
