"""Type schemas of the kinds the simulated API server serves, for its OpenAPI documents (``kubectl
explain``): every type a kind reaches, with its fields, their types, descriptions and which are
required, named as kube-apiserver names them (``io.k8s.api.core.v1.PodSpec``).

They are read from the models of the Kubernetes Python client (generated from the API's own
OpenAPI document), so they follow the API release that client was built for; descriptions are the
client's (it keeps none for a field of another type: ``kubectl explain`` shows that type's).  Owns no HTTP: :mod:`podgahp_sim.k8s.openapi` turns these into OpenAPI v2 and v3.
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kubernetes.client import models

JsonObj = Dict[str, Any]

#: (group, version, kind) -> the client's model class of that kind.
KIND_MODELS: Dict[Tuple[str, str, str], str] = {
    ("", "v1", "Pod"): "V1Pod",
    ("", "v1", "Secret"): "V1Secret",
    ("", "v1", "Event"): "CoreV1Event",
    ("", "v1", "Namespace"): "V1Namespace",
    ("", "v1", "Node"): "V1Node",
    ("", "v1", "ConfigMap"): "V1ConfigMap",
    ("", "v1", "ServiceAccount"): "V1ServiceAccount",
    ("", "v1", "Service"): "V1Service",
    ("apps", "v1", "Deployment"): "V1Deployment",
    ("rbac.authorization.k8s.io", "v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"): "V1RoleBinding",
    ("scheduling.k8s.io", "v1", "PriorityClass"): "V1PriorityClass",
    ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"): "V1SelfSubjectAccessReview",
    ("authorization.k8s.io", "v1", "SelfSubjectRulesReview"): "V1SelfSubjectRulesReview",
    ("authentication.k8s.io", "v1", "SelfSubjectReview"): "V1SelfSubjectReview",
    ("authentication.k8s.io", "v1", "TokenRequest"): "AuthenticationV1TokenRequest",
}

#: Go packages of the types outside core/v1, by the start of the client's class name (the first
#: match wins: authorization's LabelSelectorAttributes is not meta's LabelSelector).
_PACKAGES: Sequence[Tuple[str, Tuple[str, ...]]] = (
    ("io.k8s.api.apps.v1", ("V1Deployment", "V1RollingUpdateDeployment")),
    ("io.k8s.api.rbac.v1", ("V1Role", "V1PolicyRule", "RbacV1")),
    ("io.k8s.api.scheduling.v1", ("V1PriorityClass",)),
    ("io.k8s.api.authorization.v1", (
        "V1SelfSubjectAccessReview", "V1SelfSubjectRulesReview", "V1SubjectAccessReview", "V1SubjectRulesReview",
        "V1ResourceAttributes", "V1NonResourceAttributes", "V1ResourceRule", "V1NonResourceRule",
        "V1FieldSelectorAttributes", "V1LabelSelectorAttributes", "V1FieldSelectorRequirement")),
    ("io.k8s.api.authentication.v1", (
        "V1SelfSubjectReview", "V1UserInfo", "AuthenticationV1", "V1TokenRequest", "V1BoundObjectReference")),
    ("io.k8s.apimachinery.pkg.apis.meta.v1", (
        "V1ObjectMeta", "V1ListMeta", "V1OwnerReference", "V1ManagedFieldsEntry", "V1LabelSelector",
        "V1Condition", "V1Status", "V1DeleteOptions", "V1Preconditions")),
)
_CLIENT_PREFIX = re.compile(r"^(?:[A-Z][a-z]+V\d+(?:(?:alpha|beta)\d+)?|V\d+(?:(?:alpha|beta)\d+)?)(?=[A-Z])")
_LIST = re.compile(r"^[Ll]ist\[(.+)\]$")
_DICT = re.compile(r"^(?:[Dd]ict\(str, (.+)\)|Dict\[str, (.+)\])$")
_PRIMITIVES: Dict[str, JsonObj] = {
    "str": {"type": "string"}, "int": {"type": "integer", "format": "int64"}, "bool": {"type": "boolean"},
    "float": {"type": "number", "format": "double"}, "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"}, "bytes": {"type": "string", "format": "byte"},
    "object": {"type": "object"},
}


@dataclass(frozen=True)
class Ref:
    """A field's type is another named schema."""

    name: str


def schema_name(model: str) -> str:
    """``V1PodSpec`` -> ``io.k8s.api.core.v1.PodSpec``."""
    package = "io.k8s.api.core.v1"
    for candidate, prefixes in _PACKAGES:
        if model.startswith(prefixes):
            package = candidate
            break
    return "%s.%s" % (package, _CLIENT_PREFIX.sub("", model, count=1))


def _type_description(cls: Any) -> str:
    doc = inspect.cleandoc(cls.__doc__ or "")
    text = doc.split("Attributes:", 1)[0].strip()
    return "" if text.startswith("NOTE: This class is auto generated") else " ".join(text.split())


def _field(cls: Any, attr: str) -> Tuple[str, bool]:
    """A field's description and whether it is required, from either style of client model."""
    fields = getattr(cls, "model_fields", None)
    if isinstance(fields, dict) and attr in fields:  # pydantic models (client 32 and later)
        info = fields[attr]
        return " ".join((info.description or "").split()), bool(info.is_required())
    prop = getattr(cls, attr, None)  # classic models: the setter's docstring, a None check if required
    setter = getattr(prop, "fset", None)
    doc = inspect.cleandoc(getattr(setter, "__doc__", "") or "")
    paragraphs = [p for p in doc.split("\n\n")[1:] if not p.lstrip().startswith(":param")]
    text = paragraphs[0].replace("# noqa: E501", "") if paragraphs else ""
    try:
        required = "must not be `None`" in inspect.getsource(setter) if setter is not None else False
    except (OSError, TypeError):
        required = False
    return " ".join(text.split()), required


def _typed(type_text: str, pending: List[str]) -> JsonObj:
    """The schema of a client type string (``list[V1Container]``, ``Dict[str, str]``, ``V1ObjectMeta``);
    model types it names are added to ``pending``."""
    listed = _LIST.match(type_text)
    if listed:
        return {"type": "array", "items": _typed(listed.group(1), pending)}
    mapped = _DICT.match(type_text)
    if mapped:
        return {"type": "object", "additionalProperties": _typed(mapped.group(1) or mapped.group(2), pending)}
    if type_text in _PRIMITIVES:
        return dict(_PRIMITIVES[type_text])
    if hasattr(models, type_text):
        pending.append(type_text)
        return {"$ref": schema_name(type_text)}
    return {"type": "object"}


def _model_schema(model: str, pending: List[str]) -> JsonObj:
    cls = getattr(models, model)
    properties: JsonObj = {}
    required: List[str] = []
    for attr, type_text in sorted(cls.openapi_types.items(), key=lambda item: cls.attribute_map[item[0]]):
        name = cls.attribute_map[attr]
        description, needed = _field(cls, attr)
        prop = _typed(type_text, pending)
        if description:
            prop["description"] = description
        properties[name] = prop
        if needed:
            required.append(name)
    schema: JsonObj = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    description = _type_description(cls)
    if description:
        schema["description"] = description
    return schema


@functools.lru_cache(maxsize=None)
def _definitions_of(kinds: Tuple[Tuple[str, str, str], ...]) -> Dict[str, JsonObj]:
    found: Dict[str, JsonObj] = {}
    pending = [KIND_MODELS[k] for k in kinds]
    while pending:
        model = pending.pop()
        name = schema_name(model)
        if name not in found:
            found[name] = _model_schema(model, pending)
    for group, version, kind in kinds:
        found[schema_name(KIND_MODELS[(group, version, kind)])]["x-kubernetes-group-version-kind"] = [
            {"group": group, "kind": kind, "version": version}]
    return dict(sorted(found.items()))


def definitions(kinds: Sequence[Tuple[str, str, str]]) -> Dict[str, JsonObj]:
    """Schemas by name of these kinds (group, version, kind) and of every type they reach; a field
    of another type is ``{"$ref": name}`` (a bare name: each OpenAPI version writes its own path)."""
    return _definitions_of(tuple(sorted(k for k in kinds if k in KIND_MODELS)))


def kind_schema(group: str, version: str, kind: str) -> Optional[str]:
    """The schema name of a kind, if the simulator describes it."""
    model = KIND_MODELS.get((group, version, kind))
    return schema_name(model) if model is not None else None
