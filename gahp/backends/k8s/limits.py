"""Sizes a real Kubernetes API server refuses, checked before a pod is sent, so that a job whose
arguments, environment or paths are too large is held with a reason its owner can act on instead of
failing at the API server (a 413, or a 500 that looks transient and would be retried).

Sources, Kubernetes 1.30:

* request bodies: at most 3 MiB (``MaxRequestBodyBytes``, ``k8s.io/apiserver/pkg/server/config.go``);
  longer: 413 "Request entity too large: limit is 3145728";
* one object as etcd stores it, with the ``managedFields`` the server adds: at most 1.5 MiB (etcd's
  default ``--max-request-bytes``); larger: 500 "etcdserver: request is too large";
* annotations: 256 KiB in all, keys and values (``TotalAnnotationSizeLimitB``,
  ``k8s.io/apimachinery/pkg/api/validation/objectmeta.go``); more: 422;
* Secret data: 1 MiB (``MaxSecretSize``): checked where inputs are staged
  (``PODGAHP_K8S_SECRET_MAX_BYTES``, at most that).

The stored size is estimated from above: the JSON encoding (etcd stores the smaller protobuf) plus an
upper bound of the field set the server records for the writer (one entry per field, each list item
keyed by its merge key), which for thousands of small environment entries is as large as the entries
themselves. Pure functions over the pod as built; no API calls.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from gahp.backends.http import JsonObj
from gahp.core.errors import InvalidJob


MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024
MAX_STORED_BYTES = 1536 * 1024
MAX_ANNOTATION_BYTES = 256 * 1024
#: Left of the stored size for what the server adds to a pod (status, defaults, its own annotations).
SERVER_ADDS_BYTES = 16 * 1024

#: Bytes of a field set entry beyond its key: quotes, colon, braces, comma.
_ENTRY_BYTES = 8
#: The JSON body and the estimate of its field set together are at most this many times the body
#: (worst: list items of one short field each, counted three times over in their keys).
_FIELD_SET_RATIO = 6


def annotation_bytes(annotations: Mapping[str, Any]) -> int:
    return sum(len(str(k).encode("utf-8", "surrogateescape")) + len(str(v).encode("utf-8", "surrogateescape"))
               for k, v in annotations.items())


def _field_set_bytes(value: Any) -> int:
    """An upper bound of the bytes of the field set (``fieldsV1``) recording ``value``."""
    if isinstance(value, dict):
        return 2 + sum(len(key) + 2 + _ENTRY_BYTES + _field_set_bytes(sub) for key, sub in value.items())
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        # each item keyed by its scalar fields (an upper bound of its merge key), escaped in the key
        return 2 + sum(2 * len(_json({k: v for k, v in item.items() if not isinstance(v, (dict, list))}))
                       + 2 + _ENTRY_BYTES + _field_set_bytes(item) for item in value)
    return 2


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def stored_bytes(pod: JsonObj) -> int:
    """An upper bound of the pod's size in etcd once created (see the module)."""
    return len(_json(pod).encode("utf-8", "surrogateescape")) + _field_set_bytes(pod) + SERVER_ADDS_BYTES


def check_pod(pod: JsonObj, what_user_sets: str) -> None:
    """InvalidJob when the API server would refuse ``pod`` for its size; ``what_user_sets`` names the
    parts of the job that make it large (shown in the reason)."""
    meta = pod.get("metadata") or {}
    annotations = annotation_bytes(meta.get("annotations") or {})
    if annotations > MAX_ANNOTATION_BYTES:
        raise InvalidJob(f"the pod's annotations would take {annotations} bytes, over the {MAX_ANNOTATION_BYTES} "
                         "Kubernetes allows an object in all: they record the job's Iwd, Cmd, Out and Err "
                         "paths (and the pod template's annotations); shorten them")
    body = len(_json(pod).encode("utf-8", "surrogateescape"))
    if body > MAX_REQUEST_BODY_BYTES:
        raise InvalidJob(f"the pod would take {body} bytes, over the {MAX_REQUEST_BODY_BYTES} the Kubernetes API "
                         f"accepts in one request ({what_user_sets}); pass large data in an input file")
    if body * _FIELD_SET_RATIO + SERVER_ADDS_BYTES <= MAX_STORED_BYTES:
        return  # the usual pod of a few KiB: no field-set estimate needed
    stored = stored_bytes(pod)
    if stored > MAX_STORED_BYTES:
        raise InvalidJob(f"the pod would take up to {stored} bytes as stored, over the {MAX_STORED_BYTES} etcd keeps "
                         f"per object ({what_user_sets}); pass large data in an input file")
