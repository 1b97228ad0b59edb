"""What podgahp reads of a pod: :class:`PodRecord`, one flat object per pod with only those fields,
each with its type and default, read the same way everywhere; and the parsers of the API's JSON.

A pod read back is not trusted to have the shape the API documents (a template, an admission
webhook or another client may have put anything in it): a field of the wrong type reads as absent.

The watch copy holds one record per pod of the CE (tens of thousands), so a record is small: one
object with a slot per field (no dict per part of the pod), labels and annotations as tuples of
pairs, and everything equal across pods (label pairs, the containers of the spec, conditions,
container states, the node) one object shared through a :class:`~gahp.backends.k8s.sharing.Canon`.
What is each pod's own is its name, uid, resource version, times and sandbox label.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Collection, List, Mapping, Optional, Tuple, TypedDict, Union

from gahp.backends.http import JsonObj
from gahp.backends.k8s.sharing import Canon

try:
    import msgspec
except ImportError:  # pragma: no cover - an installation without it (a distribution's python) parses whole
    msgspec = None  # type: ignore[assignment]

Pairs = Tuple[Tuple[str, str], ...]

#: Pod phases after which nothing runs again.
TERMINAL_PHASES = ("Succeeded", "Failed")


def _obj(value: Any) -> JsonObj:
    return value if isinstance(value, dict) else {}


def _objs(value: Any) -> List[JsonObj]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


#: The pod conditions podgahp reads of a pod that has not finished (the others — Ready,
#: Initialized... — are dropped; a finished pod keeps them all: their times tell when it ended).
CONDITIONS_READ = ("PodScheduled", "DisruptionTarget")
_CONDITION_KEYS = ("type", "status", "reason", "message", "lastTransitionTime")


class PodRecord:
    """One pod as podgahp reads it (:meth:`of` builds it from the API's JSON). Read-only: the watch copy
    hands the same record to every reader, and its parts may be shared with other records."""

    __slots__ = ("name", "namespace", "uid", "resource_version", "_labels", "_annotations", "deleting", "created",
                 "owner_references", "containers", "node", "volumes", "_phase", "reason", "message", "start_time",
                 "conditions", "container_statuses")

    name: str
    namespace: str
    uid: str
    resource_version: Optional[str]
    """``metadata.resourceVersion`` as the server wrote it (None when absent)."""
    _labels: Pairs
    _annotations: Pairs
    deleting: bool
    """Being deleted (``deletionTimestamp`` set)."""
    created: str
    """``metadata.creationTimestamp``."""
    owner_references: List[JsonObj]
    containers: List[JsonObj]
    """The spec's containers: each its ``name``, ``image`` and ``resources``."""
    node: str
    """``spec.nodeName``."""
    volumes: List[JsonObj]
    """The spec's Secret volumes: each its ``name`` and ``secret.items``."""
    _phase: str
    reason: str
    message: str
    start_time: str
    conditions: List[JsonObj]
    """Of a finished pod every condition; else only :data:`CONDITIONS_READ` (a scheduled one without its
    time, so that it is the same for every running pilot)."""
    container_statuses: List[JsonObj]
    """Each its ``name``, ``image`` and ``state`` (a running state without its start time)."""

    @classmethod
    def of(cls, pod: Mapping[str, Any], canon: Optional[Canon] = None, *, labels: Optional[Collection[str]] = None,
           annotations: Optional[Collection[str]] = None) -> PodRecord:
        """The record of a pod (the API's JSON, parsed). With ``canon``, the parts equal across pods are
        shared with the records built before; with ``labels`` or ``annotations``, only those keys are
        kept of each."""
        share = canon.share if canon is not None else _same
        pairs = canon.pairs if canon is not None else _pairs
        meta, spec, status = _obj(pod.get("metadata")), _obj(pod.get("spec")), _obj(pod.get("status"))
        record = cls.__new__(cls)
        record.name = _text(meta.get("name"))
        record.namespace = share(_text(meta.get("namespace")))
        record.uid = _text(meta.get("uid"))
        version = meta.get("resourceVersion")
        record.resource_version = str(version) if version is not None else None
        record._labels = pairs(_obj(meta.get("labels")), labels)
        record._annotations = pairs(_obj(meta.get("annotations")), annotations)
        record.deleting = bool(meta.get("deletionTimestamp"))
        record.created = _text(meta.get("creationTimestamp"))
        record.owner_references = share(_objs(meta.get("ownerReferences")))
        record.containers = share([{k: c[k] for k in ("name", "image", "resources") if k in c}
                                   for c in _objs(spec.get("containers"))])
        record.node = share(_text(spec.get("nodeName")))
        record.volumes = share([{"name": v.get("name"), "secret": {"items": _obj(v["secret"]).get("items")}}
                                for v in _objs(spec.get("volumes")) if isinstance(v.get("secret"), dict)])
        record._phase = share(_text(status.get("phase")))
        record.reason = share(_text(status.get("reason")))
        record.message = share(_text(status.get("message")))
        started = _text(status.get("startTime"))
        record.start_time = record.created if started == record.created else started
        finished = (record._phase or "Pending") in TERMINAL_PHASES
        record.conditions = share([share(_condition(c, finished)) for c in _objs(status.get("conditions"))
                                   if finished or c.get("type") in CONDITIONS_READ])
        record.container_statuses = share([share(_container_status(c))
                                           for c in _objs(status.get("containerStatuses"))])
        return record

    def with_phase(self, phase: str) -> PodRecord:
        """A copy of this record in another phase (the last state of a pod Kubernetes deleted)."""
        copy = PodRecord.__new__(PodRecord)
        for slot in PodRecord.__slots__:
            setattr(copy, slot, getattr(self, slot))
        copy._phase = phase
        return copy

    # -- metadata ---------------------------------------------------------------------------

    @property
    def labels(self) -> Mapping[str, str]:
        return dict(self._labels)

    @property
    def annotations(self) -> Mapping[str, str]:
        return dict(self._annotations)

    def label(self, key: str, default: str = "") -> str:
        for k, v in self._labels:
            if k == key:
                return v or default
        return default

    def annotation(self, key: str) -> str:
        for k, v in self._annotations:
            if k == key:
                return v
        return ""

    # -- status ------------------------------------------------------------------------------

    @property
    def phase(self) -> str:
        return self._phase or "Pending"

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def condition(self, kind: str) -> JsonObj:
        """The condition of this type ({} when absent)."""
        return next((dict(c) for c in self.conditions if c.get("type") == kind), {})

    def condition_true(self, kind: str) -> bool:
        return self.condition(kind).get("status") == "True"

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

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PodRecord) and all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "PodRecord(" + ", ".join(f"{s.lstrip('_')}={getattr(self, s)!r}" for s in self.__slots__) + ")"


Pod = Union[PodRecord, Mapping[str, Any]]
"""A pod as a record, or as the API's JSON."""


def record_of(pod: Pod) -> PodRecord:
    """``pod`` as a record (built, unshared, from the API's JSON)."""
    return pod if isinstance(pod, PodRecord) else PodRecord.of(pod)


def container_state(status: Mapping[str, Any], which: str) -> JsonObj:
    """``state.<which>`` (``waiting``, ``running``, ``terminated``) of a container status ({} if not)."""
    return _obj(_obj(status.get("state")).get(which))


def optional_text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def _pairs(mapping: JsonObj, only: Optional[Collection[str]] = None) -> Pairs:
    return tuple((k, v) for k, v in mapping.items() if type(v) is str and (only is None or k in only))


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
# With msgspec installed, the API's JSON of a pod is parsed into only what a PodRecord keeps (labels
# and annotations whole; a container's name, image and resources...): the rest (managedFields, the
# container's environment and command, tolerations...) is skipped by the parser, never built as
# Python objects. Values are Any: a field of an unexpected type is kept as it is and read as absent
# by PodRecord; a pod whose shape the schema refuses (a list where an object must be) is parsed whole
# and recorded the same. Without msgspec, the json module parses everything (the same record, several
# times slower).


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


class _ListMeta(TypedDict, total=False):
    metadata: Any


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
    """A pod from the API's JSON, with what a :class:`PodRecord` keeps (ValueError if it is not JSON)."""
    return _obj(_pod(data))


def decode_pod_list(data: bytes) -> JsonObj:
    """A page of a pod LIST (``items``, ``metadata``), each pod as :func:`decode_pod` gives it."""
    return _obj(_pod_list(data))


_list_meta = msgspec.json.Decoder(_ListMeta).decode if msgspec is not None else None


def continue_token(page: bytes, missing: Optional[str]) -> Optional[str]:
    """The ``continue`` token of a LIST page, read without building its pods ("" when it has none);
    ``missing`` when that cannot be done (no msgspec, or not a page)."""
    if _list_meta is None:
        return missing
    try:
        meta = _list_meta(page).get("metadata")
    except (msgspec.DecodeError, msgspec.ValidationError):
        return missing
    token = meta.get("continue") if isinstance(meta, dict) else None
    return token if isinstance(token, str) else ""


def decode_event(line: bytes) -> JsonObj:
    """One line of a pod WATCH: ``type`` and ``object`` (a pod as :func:`decode_pod` gives it, else the
    ``Status`` of an ERROR or the bookmark, whole)."""
    event = _obj(_event(line))
    raw = event.get("object")
    if msgspec is None or not isinstance(raw, msgspec.Raw):
        return event
    kind = event.get("type")
    return {"type": kind, "object": decode_pod(raw) if kind in _POD_EVENTS else decode(raw)}
