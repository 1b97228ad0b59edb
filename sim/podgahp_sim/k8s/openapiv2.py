"""``/openapi/v2``: the simulated API server's Swagger 2.0 document, in JSON or, as kubectl and
client-go's discovery ask for it (``kubectl explain --output plaintext-openapiv2``, client-side
validation of older kubectls), in protobuf.

The protobuf form is the ``openapi.v2.Document`` message of gnostic (``openapiv2/OpenAPIv2.proto``,
the format kube-apiserver serves for ``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``);
only the messages and fields this document uses are written, each by its field number there.
Owns no HTTP.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Dict, List

from . import openapi, schemas
from .store import JsonObj

PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
"""The media type kubectl asks for; kube-apiserver answers with this one (a dot for the ``@``)."""
PROTOBUF_ANSWER = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


@functools.lru_cache(maxsize=None)
def document(server_version: str) -> JsonObj:
    """The Swagger 2.0 document (callers do not change it)."""
    paths: Dict[str, JsonObj] = {}
    for gv in openapi.group_versions():
        for path, item in openapi.paths(gv).items():
            paths[path] = {method: dict(op, parameters=[_v2_param(p) for p in op["parameters"]])
                           for method, op in item.items()}
    definitions = {name: openapi.ref_schema(schema, "#/definitions/", False)
                   for name, schema in schemas.definitions(openapi.kinds()).items()}
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": server_version}, "paths": paths,
            "definitions": definitions}


def _v2_param(param: JsonObj) -> JsonObj:
    out = {k: v for k, v in param.items() if k != "schema"}
    out.update(param.get("schema") or {})
    return out


@functools.lru_cache(maxsize=None)
def protobuf(server_version: str) -> bytes:
    """:func:`document` as an ``openapi.v2.Document`` message."""
    doc = document(server_version)
    info = _string(1, doc["info"]["title"]) + _string(2, doc["info"]["version"])
    path_items = b"".join(_message(2, _string(1, path) + _message(2, _path_item(item)))
                          for path, item in doc["paths"].items())
    definitions = b"".join(_message(1, _string(1, name) + _message(2, _schema(schema)))
                           for name, schema in doc["definitions"].items())
    return (_string(1, doc["swagger"]) + _message(2, info) + _message(8, path_items)
            + _message(9, definitions))


# ------------------------------------------------------------------ messages (field numbers of OpenAPIv2.proto)

_OPERATIONS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def _path_item(item: JsonObj) -> bytes:
    return b"".join(_message(_OPERATIONS[method], _operation(op)) for method, op in item.items())


def _operation(op: JsonObj) -> bytes:
    out = _string(5, op["operationId"])
    for param in op["parameters"]:
        out += _message(8, _message(1, _message(2, _non_body(param))))  # ParametersItem.parameter.non_body
    responses = b"".join(_message(1, _string(1, code) + _message(2, _message(1, _string(1, r["description"]))))
                         for code, r in op["responses"].items())
    out += _message(9, responses)
    for key, value in op.items():
        if key.startswith("x-"):
            out += _message(13, _named_any(key, value))
    return out


def _non_body(param: JsonObj) -> bytes:
    """NonBodyParameter: a query (3) or path (4) parameter sub-schema."""
    if param["in"] == "path":  # PathParameterSubSchema
        body = (_bool(1, bool(param.get("required"))) + _string(2, "path") + _string(4, param["name"])
                + _string(5, param["type"]) + _bool(19, bool(param.get("uniqueItems"))))
        return _message(4, body)
    body = (_string(2, "query") + _string(4, param["name"]) + _string(6, param["type"])
            + _bool(20, bool(param.get("uniqueItems"))))
    return _message(3, body)


def _schema(schema: JsonObj) -> bytes:
    out = b""
    if "$ref" in schema:
        out += _string(1, schema["$ref"])
    if "format" in schema:
        out += _string(2, schema["format"])
    if schema.get("description"):
        out += _string(4, schema["description"])
    for name in schema.get("required") or []:
        out += _string(19, name)
    if "additionalProperties" in schema:
        out += _message(21, _message(1, _schema(schema["additionalProperties"])))
    if "type" in schema:
        out += _message(22, _string(1, schema["type"]))
    if "items" in schema:
        out += _message(23, _message(1, _schema(schema["items"])))
    if "properties" in schema:
        out += _message(25, b"".join(_message(1, _string(1, name) + _message(2, _schema(prop)))
                                     for name, prop in schema["properties"].items()))
    for key, value in schema.items():
        if key.startswith("x-"):
            out += _message(31, _named_any(key, value))
    return out


def _named_any(name: str, value: Any) -> bytes:
    """A vendor extension: its value as YAML text (JSON is YAML) in ``Any.yaml``."""
    return _string(1, name) + _message(2, _string(2, json.dumps(value) + "\n"))


# ------------------------------------------------------------------ wire format

def _varint(value: int) -> bytes:
    out: List[int] = []
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _message(field: int, body: bytes) -> bytes:
    """A length-delimited field (wire type 2): a string, bytes or an embedded message."""
    return _varint(field << 3 | 2) + _varint(len(body)) + body


def _string(field: int, text: str) -> bytes:
    return _message(field, text.encode()) if text else b""


def _bool(field: int, value: bool) -> bytes:
    return _varint(field << 3) + b"\x01" if value else b""
