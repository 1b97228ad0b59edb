"""The three PATCH flavours of the API server, applied to plain JSON objects.

* ``application/merge-patch+json``: RFC 7386 (maps merge, ``null`` deletes, lists replace).
* ``application/strategic-merge-patch+json``: like merge patch, but the lists named in
  :data:`MERGE_KEYS` merge element-wise by their key (``status.conditions`` by ``type``,
  ``containerStatuses``/``containers``/``env``/``volumes`` by ``name`` ...), and an element
  ``{"<key>": ..., "$patch": "delete"}`` removes that element.  Other directives
  (``$retainKeys``, ``$setElementOrder``, ``$deleteFromPrimitiveList``) are ignored; other lists replace.
* ``application/json-patch+json``: RFC 6902, all six operations.

Errors raise :class:`PatchError` (a 422 or 400 message at the HTTP layer).  Owns no state.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

MERGE_KEYS: Dict[str, str] = {
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ephemeralContainerStatuses": "name",
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "podIPs": "ip",
    "hostIPs": "ip",
}


class PatchError(ValueError):
    """A patch that cannot be applied; ``code`` is the HTTP status to answer with."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch; returns a new value."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: Dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, list_key: Optional[str] = None) -> Any:
    """The simplified strategic merge described in the module docstring."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result: Dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$") or key.startswith("$setElementOrder/") or key.startswith("$retainKeys"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, MERGE_KEYS[key])
        elif isinstance(value, list):
            result[key] = [
                {k: v for k, v in item.items() if k != "$patch"} if isinstance(item, dict) else item
                for item in copy.deepcopy(value)
                if not (isinstance(item, dict) and item.get("$patch") == "delete")
            ]
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_list(current: List[Any], patch: List[Any], key: str) -> List[Any]:
    """A list merged by ``key`` in the order apimachinery's strategic merge gives it
    (``normalizeElementOrder``, ``mergeSortedSlice``): the patch's items in the patch's order and the
    items only the object has in its order, the two interleaved by the object's order where both have
    a place in it, a new item of the patch ahead of an item only the object has."""
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return []
    if any(not isinstance(item, dict) or key not in item for item in patch):
        return [*copy.deepcopy(current), *(copy.deepcopy(i) for i in patch)]
    order = [old.get(key) if isinstance(old, dict) else None for old in current]
    patched = {item[key] for item in patch}
    merged: List[Any] = []
    for item in patch:
        if item.get("$patch") == "delete":
            continue
        index = next((i for i, old in enumerate(current) if isinstance(old, dict) and old.get(key) == item[key]),
                     None)
        merged.append(strategic_merge_patch(current[index] if index is not None else {}, item))
    only = [copy.deepcopy(old) for old in current if not (isinstance(old, dict) and old.get(key) in patched)]

    def place(item: Any) -> int:
        value = item.get(key) if isinstance(item, dict) else None
        return order.index(value) if value is not None and value in order else -1

    result: List[Any] = []
    i = j = 0
    while i < len(only) or j < len(merged):
        if j >= len(merged):
            result.append(only[i])
            i += 1
        elif i >= len(only):
            result.append(merged[j])
            j += 1
        elif place(only[i]) >= 0 and place(merged[j]) >= 0 and place(only[i]) < place(merged[j]):
            result.append(only[i])
            i += 1
        else:
            result.append(merged[j])
            j += 1
    return result


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> List[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError('invalid JSON pointer "%s"' % path)
    return [_unescape(t) for t in path[1:].split("/")]


def _parent(doc: Any, tokens: List[str], path: str) -> Any:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list) and token.isdigit() and int(token) < len(cur):
            cur = cur[int(token)]
        else:
            raise PatchError("doc is missing path: \"%s\": missing value" % path)
    return cur


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchError("doc is missing path: \"%s\": missing value" % path)


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError("Unable to remove nonexistent key: %s: missing value" % last)


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError("replace operation does not apply: doc is missing key: %s: missing value" % path)
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise PatchError("add operation does not apply: doc is missing path: \"%s\": missing value" % path)
    else:
        raise PatchError("doc is missing path: \"%s\": missing value" % path)
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902; returns a new document, the original is untouched."""
    if not isinstance(operations, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", code=400)
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError("Unexpected kind: %s" % (op.get("op") if isinstance(op, dict) else op))
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError("missing value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "move":
            value = _remove(doc, op.get("from", ""))
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op.get("from", ""))))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError("testing value %s failed: test failed" % path)
        else:
            raise PatchError("Unexpected kind: %s" % kind)
    return doc


PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json")


def apply_patch(content_type: str, target: Dict[str, Any], patch: Any) -> Dict[str, Any]:
    """Dispatch on the (parameter-free) content type; the caller has checked it is in PATCH_TYPES."""
    if content_type == "application/json-patch+json":
        result = json_patch(target, patch)
    elif content_type == "application/merge-patch+json":
        result = merge_patch(target, patch)
    else:
        result = strategic_merge_patch(target, patch)
    if not isinstance(result, dict):
        raise PatchError("the patched object is not a JSON object", code=400)
    return result
