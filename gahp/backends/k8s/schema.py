"""Checking an admin's pod template against the Pod schema, with the official client's models.

Each model class of the ``kubernetes`` client lists its fields (``attribute_map``: JSON name ->
attribute) and their types (``openapi_types``: ``str``, ``int``, ``bool``, ``datetime``, ``object``,
``V1Container``, ``list[V1Volume]`` / ``List[V1Volume]``, ``dict(str, str)`` / ``Dict[str, str]``
depending on the client release).  :func:`schema_errors` walks a template with them and names every
field of the wrong type (``spec.volumes: expected a list, got a string``) or unknown to the schema,
so a broken template is refused when it is loaded, with the file, field and expected type.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, List

_models: Any = importlib.import_module("kubernetes.client")

_LIST = re.compile(r"^(?:list\[|List\[)(.*)\]$")
_DICT = re.compile(r"^(?:dict\(str, |Dict\[str, )(.*)[\])]$")
_SCALARS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "date": (str,),
            "datetime": (str,), "object": (object,)}
_NAMES = {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number",
          bool: "true or false", type(None): "null"}

#: Maps of resource quantities (the client types their values as strings; numbers are fine too).
_QUANTITY_MAPS = {"limits", "requests", "overhead"}

#: Most problems reported for one template.
MAX_ERRORS = 10


def _what(value: Any) -> str:
    return _NAMES.get(type(value), type(value).__name__)


def schema_errors(value: Any, type_name: str = "V1Pod", path: str = "") -> List[str]:
    """Problems of ``value`` as the schema type ``type_name`` (empty: it conforms)."""
    errors: List[str] = []
    _check(value, type_name, path, errors)
    return errors[:MAX_ERRORS]


def _check(value: Any, type_name: str, path: str, errors: List[str]) -> None:
    if len(errors) >= MAX_ERRORS or value is None:
        return
    where = path or "(top level)"
    listed, mapped = _LIST.match(type_name), _DICT.match(type_name)
    if listed:
        _check_list(value, listed.group(1), path, where, errors)
    elif mapped:
        _check_dict(value, mapped.group(1), path, where, errors)
    elif type_name in _SCALARS:
        _check_scalar(value, type_name, where, errors)
    else:
        _check_model(value, type_name, path, where, errors)


def _check_list(value: Any, item_type: str, path: str, where: str, errors: List[str]) -> None:
    if not isinstance(value, list):
        errors.append(f"{where}: expected a list, got {_what(value)}")
        return
    for i, item in enumerate(value):
        _check(item, item_type, f"{path}[{i}]", errors)


def _check_dict(value: Any, item_type: str, path: str, where: str, errors: List[str]) -> None:
    if not isinstance(value, dict):
        errors.append(f"{where}: expected a mapping, got {_what(value)}")
        return
    quantities = path.rsplit(".", 1)[-1] in _QUANTITY_MAPS
    for key, item in value.items():
        if quantities and isinstance(item, (int, float)) and not isinstance(item, bool):
            continue  # a quantity written as a number (cpu: 1) is accepted by the API server
        _check(item, item_type, f"{path}.{key}", errors)


def _check_scalar(value: Any, type_name: str, where: str, errors: List[str]) -> None:
    wanted = _SCALARS[type_name]
    if isinstance(value, bool) and bool not in wanted and object not in wanted:
        errors.append(f"{where}: expected {_NAMES.get(wanted[0], type_name)}, got true or false")
    elif not isinstance(value, wanted):
        errors.append(f"{where}: expected {_NAMES.get(wanted[0], type_name)}, got {_what(value)}")


def _check_model(value: Any, type_name: str, path: str, where: str, errors: List[str]) -> None:
    model = getattr(_models, type_name, None)
    if model is None:  # a type this client release does not describe: accept
        return
    if type_name in ("IntOrString", "V1IntOrString") or "quantity" in type_name.lower():
        return
    if not isinstance(value, dict):
        errors.append(f"{where}: expected a mapping ({type_name}), got {_what(value)}")
        return
    fields = {json_name: attr for attr, json_name in getattr(model, "attribute_map", {}).items()}
    types = getattr(model, "openapi_types", {})
    prefix = path + "." if path else ""
    for key, item in value.items():
        attr = fields.get(key)
        if attr is None:
            errors.append(f"{prefix}{key}: not a field of {type_name}")
            continue
        _check(item, types.get(attr, "object"), f"{prefix}{key}", errors)
