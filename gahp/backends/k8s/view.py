"""A typed view of a raw pod (the JSON the API server sends): the fields podgahp reads, each with its
type and default, read the same way everywhere.

A pod read back is not trusted to have the shape the API documents (a template, an admission
webhook or another client may have put anything in it): a field of the wrong type reads as absent.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, TypedDict

from gahp.backends.k8s.sharing import Canon

try:
    import msgspec
except ImportError:  # pragma: no cover - an installation without it (a distribution's python) parses whole
    msgspec = None  # type: ignore[assignment]

JsonObj = Dict[str, Any]

#: Pod phases after which nothing runs again.
TERMINAL_PHASES = ("Succeeded", "Failed")


def _obj(value: Any) -> JsonObj:
    return value if isinstance(value, dict) else {}


def _objs(value: Any) -> List[JsonObj]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


class PodView:
    """Read-only accessors over one raw pod."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw

    # -- metadata ---------------------------------------------------------------------------

    @property
    def metadata(self) -> JsonObj:
        return _obj(self.raw.get("metadata"))

    @property
    def name(self) -> str:
        return _text(self.metadata.get("name"))

    @property
    def namespace(self) -> str:
        return _text(self.metadata.get("namespace"))

    @property
    def labels(self) -> Mapping[str, Any]:
        return _obj(self.metadata.get("labels"))

    @property
    def annotations(self) -> Mapping[str, Any]:
        return _obj(self.metadata.get("annotations"))

    def label(self, key: str, default: str = "") -> str:
        return _text(self.labels.get(key)) or default

    def annotation(self, key: str) -> str:
        return _text(self.annotations.get(key))

    @property
    def deleting(self) -> bool:
        """Being deleted (``deletionTimestamp`` set)."""
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def created(self) -> str:
        return _text(self.metadata.get("creationTimestamp"))

    @property
    def owner_references(self) -> List[JsonObj]:
        return _objs(self.metadata.get("ownerReferences"))

    # -- spec --------------------------------------------------------------------------------

    @property
    def spec(self) -> JsonObj:
        return _obj(self.raw.get("spec"))

    @property
    def containers(self) -> List[JsonObj]:
        return _objs(self.spec.get("containers"))

    @property
    def node(self) -> str:
        return _text(self.spec.get("nodeName"))

    @property
    def volumes(self) -> List[JsonObj]:
        return _objs(self.spec.get("volumes"))

    # -- status ------------------------------------------------------------------------------

    @property
    def status(self) -> JsonObj:
        return _obj(self.raw.get("status"))

    @property
    def phase(self) -> str:
        return _text(self.status.get("phase")) or "Pending"

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def reason(self) -> str:
        return _text(self.status.get("reason"))

    @property
    def message(self) -> str:
        return _text(self.status.get("message"))

    @property
    def start_time(self) -> str:
        return _text(self.status.get("startTime"))

    @property
    def conditions(self) -> List[JsonObj]:
        return _objs(self.status.get("conditions"))

    def condition(self, kind: str) -> JsonObj:
        """The condition of this type ({} when absent)."""
        return next((dict(c) for c in self.conditions if c.get("type") == kind), {})

    def condition_true(self, kind: str) -> bool:
        return self.condition(kind).get("status") == "True"

    @property
    def container_statuses(self) -> List[JsonObj]:
        return _objs(self.status.get("containerStatuses"))

    def container_status(self, name: str) -> JsonObj:
        """The status of container ``name``; else of the first container of the spec; else the first
        status ({} when there is none)."""
        statuses = self.container_statuses
        for status in statuses:
            if status.get("name") == name:
                return status
        containers = self.containers
        first = containers[0].get("name") if containers else None
        for status in statuses:
            if status.get("name") == first:
                return status
        return statuses[0] if statuses else {}


def container_state(status: Mapping[str, Any], which: str) -> JsonObj:
    """``state.<which>`` (``waiting``, ``running``, ``terminated``) of a container status ({} if not)."""
    return _obj(_obj(status.get("state")).get(which))


def optional_text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value else None


#: The fields of a pod podgahp reads (everything else a pod carries — managedFields, the container's
#: environment and command, tolerations, affinity, most of the spec — is dropped from the watch copy).
_META_KEYS = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations", "deletionTimestamp",
              "creationTimestamp", "ownerReferences")
_STATUS_KEYS = ("phase", "reason", "message", "startTime")
_CONDITION_KEYS = ("type", "status", "reason", "message", "lastTransitionTime")
#: The pod conditions podgahp reads of a pod that has not finished (the others — Ready,
#: Initialized... — are dropped; a finished pod keeps them all: their times tell when it ended).
CONDITIONS_READ = ("PodScheduled", "DisruptionTarget")


def compact(pod: Mapping[str, Any], canon: Optional[Canon] = None, *, labels: Optional[Collection[str]] = None,
            annotations: Optional[Collection[str]] = None) -> JsonObj:
    """A pod with only what podgahp reads, in the same shape (so :class:`PodView` and the state table
    read it as the full pod): what the watch copy keeps, so memory stays small with many pilots. With
    ``canon``, the parts equal across pods (label and annotation keys and values, the spec, conditions,
    container states...) are shared with the pods compacted before. With ``labels`` or
    ``annotations``, only those keys are kept of each."""
    share = canon.share if canon is not None else _same
    mapping = canon.mapping if canon is not None else _same
    view = PodView(pod)
    meta: JsonObj = {}
    for key, value in view.metadata.items():
        if key not in _META_KEYS:
            continue
        if key in ("labels", "annotations") and isinstance(value, dict):
            only = labels if key == "labels" else annotations
            value = mapping(value if only is None else {k: v for k, v in value.items() if k in only})
        elif key in ("namespace", "creationTimestamp", "ownerReferences"):
            value = share(value)
        meta[key] = value
    containers = [{k: c[k] for k in ("name", "image", "resources") if k in c} for c in view.containers]
    spec: JsonObj = {"containers": containers}
    if view.node:
        spec["nodeName"] = view.node
    volumes = [{"name": v.get("name"), "secret": {"items": (v.get("secret") or {}).get("items")}}
               for v in view.volumes if isinstance(v.get("secret"), dict)]
    if volumes:
        spec["volumes"] = volumes
    status: JsonObj = {k: share(v) for k, v in view.status.items() if k in _STATUS_KEYS}
    finished = view.finished
    conditions = [share(_condition(c, finished)) for c in view.conditions
                  if finished or c.get("type") in CONDITIONS_READ]
    if conditions:
        status["conditions"] = share(conditions)
    statuses = [share(_container_status(c)) for c in view.container_statuses]
    if statuses:
        status["containerStatuses"] = share(statuses)
    return {"metadata": meta, "spec": share(spec), "status": status}


def _condition(condition: JsonObj, finished: bool) -> JsonObj:
    """What is read of a condition: when a pod that runs was scheduled is not (so that condition is
    the same for every scheduled pod); every time of a finished pod is."""
    kept: JsonObj = {k: condition[k] for k in _CONDITION_KEYS if k in condition}
    if not finished and kept.get("status") == "True" and kept.get("type") == "PodScheduled":
        kept.pop("lastTransitionTime", None)
    return kept


def _container_status(status: JsonObj) -> JsonObj:
    """What is read of a container status: its waiting and terminated states whole, only that it is
    running (not since when)."""
    kept: JsonObj = {k: status[k] for k in ("name", "image", "state") if k in status}
    state = kept.get("state")
    if isinstance(state, dict) and isinstance(state.get("running"), dict):
        kept["state"] = dict(state, running={})
    return kept


def _same(value: Any) -> Any:
    return value


# -- decoding ---------------------------------------------------------------------------------
# With msgspec installed, the API's JSON of a pod is parsed into only what compact() keeps (labels
# and annotations whole; a container's name, image and resources...): the rest (managedFields, the
# container's environment and command, tolerations...) is skipped by the parser, never built as
# Python objects. Values are Any: a field of an unexpected type is kept as it is and read as absent
# by PodView; a pod whose shape the schema refuses (a list where an object must be) is parsed whole
# and compacted the same. Without msgspec, the json module parses everything (the same result once
# compacted, several times slower).


class _Meta(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    labels: Any
    annotations: Any
    deletionTimestamp: Any
    creationTimestamp: Any
    ownerReferences: Any


class _Container(TypedDict, total=False):
    name: Any
    image: Any
    resources: Any


class _Volume(TypedDict, total=False):
    name: Any
    secret: Any


class _Spec(TypedDict, total=False):
    containers: List[_Container]
    nodeName: Any
    volumes: List[_Volume]


class _Status(TypedDict, total=False):
    phase: Any
    reason: Any
    message: Any
    startTime: Any
    conditions: Any
    containerStatuses: Any


class _Pod(TypedDict, total=False):
    metadata: _Meta
    spec: _Spec
    status: _Status


class _PodList(TypedDict, total=False):
    metadata: Any
    items: List[_Pod]


class _Event(TypedDict, total=False):
    type: Any
    object: "msgspec.Raw"


#: Watch event types whose object is a pod (else a Status, or a bookmark: parsed whole).
_POD_EVENTS = ("ADDED", "MODIFIED", "DELETED")


def _parser(schema: Any) -> Callable[[bytes], Any]:
    """A parser of ``schema`` falling back to a whole parse for a shape it refuses; ``json.loads``
    without msgspec."""
    if msgspec is None:  # pragma: no cover - see the import
        return json.loads
    typed, whole = msgspec.json.Decoder(schema).decode, msgspec.json.Decoder().decode

    def parse(data: bytes) -> Any:
        try:
            try:
                return typed(data)
            except msgspec.ValidationError:
                return whole(data)
        except msgspec.DecodeError as err:
            # A ValueError from msgspec 0.21 on; not before (0.20 is the last for Python 3.9).
            raise ValueError(str(err)) from err
    return parse


decode: Callable[[bytes], Any] = _parser(Any)
"""Any JSON document (ValueError if it is not JSON)."""
_pod, _pod_list, _event = _parser(_Pod), _parser(_PodList), _parser(_Event)


def decode_pod(data: bytes) -> JsonObj:
    """A pod from the API's JSON, with what :func:`compact` keeps (ValueError if it is not JSON)."""
    return _obj(_pod(data))


def decode_pod_list(data: bytes) -> JsonObj:
    """A page of a pod LIST (``items``, ``metadata``), each pod as :func:`decode_pod` gives it."""
    return _obj(_pod_list(data))


def decode_event(line: bytes) -> JsonObj:
    """One line of a pod WATCH: ``type`` and ``object`` (a pod as :func:`decode_pod` gives it, else the
    ``Status`` of an ERROR or the bookmark, whole)."""
    event = _obj(_event(line))
    raw = event.get("object")
    if msgspec is None or not isinstance(raw, msgspec.Raw):
        return event
    kind = event.get("type")
    return {"type": kind, "object": decode_pod(raw) if kind in _POD_EVENTS else decode(raw)}
