"""Server-side printing (``meta.k8s.io/v1`` Table), as kube-apiserver answers ``kubectl get``.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the columns
the server sends (``-o wide`` adds the columns of priority 1).  The columns and cells follow the
API server's printers for pods, nodes, events, namespaces, secrets, role bindings, service accounts,
config maps and services; any other kind (a Role) gets the server's default table (Name, Created At).
"""

from __future__ import annotations

import calendar
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .store import JsonObj

Column = Tuple[str, str, int, str]  # name, type, priority, description


def human_duration(seconds: float) -> str:
    """``duration.HumanDuration`` of apimachinery: 45s, 5m10s, 3h2m, 4d, 2y30d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    minutes = s // 60
    if minutes < 10:
        return "%dm" % minutes if s % 60 == 0 else "%dm%ds" % (minutes, s % 60)
    if minutes < 180:
        return "%dm" % minutes
    hours = s // 3600
    if hours < 8:
        return "%dh" % hours if minutes % 60 == 0 else "%dh%dm" % (hours, minutes % 60)
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        return "%dd" % (hours // 24) if hours % 24 == 0 else "%dd%dh" % (hours // 24, hours % 24)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return "%dy" % (hours // 24 // 365) if days == 0 else "%dy%dd" % (hours // 24 // 365, days)
    return "%dy" % (hours // 24 // 365)


def _since(stamp: Optional[str], now: float) -> str:
    if not stamp:
        return "<unknown>"
    try:
        then = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return "<unknown>"
    return human_duration(now - then)


def _meta(obj: JsonObj) -> JsonObj:
    return obj.get("metadata") or {}


# ------------------------------------------------------------------ pods

POD_COLUMNS: Sequence[Column] = (
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
    ("Status", "string", 0, "The aggregate status of the containers in this pod."),
    ("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when "
                              "the last container in this pod has restarted."),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was "
                         "created."),
    ("IP", "string", 1, "podIP is the IP address allocated to the pod."),
    ("Node", "string", 1, "NodeName indicates in which node this pod is scheduled."),
    ("Nominated Node", "string", 1, "nominatedNodeName is set only when this pod preempts other pods on the node."),
    ("Readiness Gates", "string", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
)


def pod_status_reason(pod: JsonObj) -> str:
    """The STATUS column: phase, else the pod's reason, the last container's waiting or terminated
    reason, Terminating or Unknown while deleting (as ``kubectl get pods`` shows it)."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    has_running = False
    for cs in reversed(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated and terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated:
            reason = ("Signal:%d" % terminated["signal"]) if terminated.get("signal") else \
                "ExitCode:%d" % int(terminated.get("exitCode") or 0)
        elif cs.get("ready") and "running" in state:
            has_running = True
    if reason == "Completed" and has_running:
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        reason = "Running" if ready else "NotReady"
    if _meta(pod).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_cells(pod: JsonObj, now: float) -> List[Any]:
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    last = max((((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt") or "" for cs in statuses),
               default="")
    restart_text = "%d (%s ago)" % (restarts, _since(last, now)) if restarts and last else str(restarts)
    spec = pod.get("spec") or {}
    gates = spec.get("readinessGates") or []
    return [_meta(pod).get("name", ""), "%d/%d" % (ready, total), pod_status_reason(pod), restart_text,
            _since(_meta(pod).get("creationTimestamp"), now), status.get("podIP") or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
            "%d/%d" % (0, len(gates)) if gates else "<none>"]


# ------------------------------------------------------------------ nodes

NODE_COLUMNS: Sequence[Column] = (
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Status", "string", 0, "The status of the node"),
    ("Roles", "string", 0, "The roles of the node"),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was "
                         "created."),
    ("Version", "string", 0, "Kubelet Version reported by the node."),
    ("Internal-IP", "string", 1, "List of addresses reachable to the node."),
    ("External-IP", "string", 1, "List of addresses reachable to the node."),
    ("OS-Image", "string", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
    ("Kernel-Version", "string", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
    ("Container-Runtime", "string", 1, "ContainerRuntime Version reported by the node through runtime remote "
                                       "API (e.g. containerd://1.4.2)."),
)


def _node_cells(node: JsonObj, now: float) -> List[Any]:
    status = node.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = _meta(node).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k)
    roles += sorted(v for k, v in labels.items() if k == "kubernetes.io/role")
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        return next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == kind), "<none>")
    return [_meta(node).get("name", ""), state, ",".join(roles) or "<none>",
            _since(_meta(node).get("creationTimestamp"), now), info.get("kubeletVersion", ""),
            address("InternalIP"), address("ExternalIP"), info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


# ------------------------------------------------------------------ events, namespaces, secrets, default

EVENT_COLUMNS: Sequence[Column] = (
    ("Last Seen", "string", 0, "Time when this Event was last observed."),
    ("Type", "string", 0, "Type of this event (Normal, Warning), new types could be added in the future."),
    ("Reason", "string", 0, "This should be a short, machine understandable string that gives the reason for "
                            "the transition into the object's current status."),
    ("Object", "string", 0, "The object that this event is about."),
    ("Subobject", "string", 1, "The field of the object that this event is about."),
    ("Source", "string", 1, "The component reporting this event."),
    ("Message", "string", 0, "A human-readable description of the status of this operation."),
    ("First Seen", "string", 1, "The time at which the event was first recorded."),
    ("Count", "string", 1, "The number of times this event has occurred."),
    ("Name", "string", 1, "Name must be unique within a namespace."),
)


def _event_cells(event: JsonObj, now: float) -> List[Any]:
    involved = event.get("involvedObject") or {}
    source = event.get("source") or {}
    source_text = ", ".join(v for v in (source.get("component"), source.get("host")) if v) or "<none>"
    return [_since(event.get("lastTimestamp") or event.get("firstTimestamp"), now), event.get("type", ""),
            event.get("reason", ""), "%s/%s" % (str(involved.get("kind", "")).lower(), involved.get("name", "")),
            involved.get("fieldPath", ""), source_text, str(event.get("message", "")).strip(),
            _since(event.get("firstTimestamp"), now), str(event.get("count") or 1), _meta(event).get("name", "")]


NAMESPACE_COLUMNS: Sequence[Column] = (
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Status", "string", 0, "The status of the namespace"),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was "
                         "created."),
)

SECRET_COLUMNS: Sequence[Column] = (
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Type", "string", 0, "The type of data stored in the secret"),
    ("Data", "string", 0, "The number of entries in the secret"),
    ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this object was "
                         "created."),
)

DEFAULT_COLUMNS: Sequence[Column] = (
    ("Name", "string", 0, "Name must be unique within a namespace."),
    ("Created At", "date", 0, "CreationTimestamp is a timestamp representing the server time when this object "
                              "was created."),
)

# ------------------------------------------------------------------ objects applied by an admin

_AGE: Column = ("Age", "string", 0, "CreationTimestamp is a timestamp representing the server time when this "
                                    "object was created.")
_NAME: Column = ("Name", "string", 0, "Name must be unique within a namespace.")

ROLE_BINDING_COLUMNS: Sequence[Column] = (
    _NAME, ("Role", "string", 0, "Role of the binding."), _AGE,
    ("Users", "string", 1, "Users in the binding."), ("Groups", "string", 1, "Groups in the binding."),
    ("ServiceAccounts", "string", 1, "ServiceAccounts in the binding."),
)


def _role_binding_cells(binding: JsonObj, now: float) -> List[Any]:
    ref = binding.get("roleRef") or {}
    subjects = [s for s in binding.get("subjects") or [] if isinstance(s, dict)]

    def names(kind: str) -> str:
        return ", ".join(str(s.get("name", "")) for s in subjects if s.get("kind") == kind)
    accounts = ", ".join("%s/%s" % (s.get("namespace") or _meta(binding).get("namespace", ""), s.get("name", ""))
                         for s in subjects if s.get("kind") == "ServiceAccount")
    return [_meta(binding).get("name", ""), "%s/%s" % (ref.get("kind", ""), ref.get("name", "")),
            _since(_meta(binding).get("creationTimestamp"), now), names("User"), names("Group"), accounts]


SERVICE_COLUMNS: Sequence[Column] = (
    _NAME, ("Type", "string", 0, "type determines how the Service is exposed."),
    ("Cluster-IP", "string", 0, "clusterIP is the IP address of the service."),
    ("External-IP", "string", 0, "externalIPs is a list of IP addresses for which nodes in the cluster will "
                                 "also accept traffic for this service."),
    ("Port(s)", "string", 0, "The list of ports that are exposed by this service."), _AGE,
    ("Selector", "string", 1, "Route service traffic to pods with label keys and values matching this "
                              "selector."),
)


def _service_cells(service: JsonObj, now: float) -> List[Any]:
    spec = service.get("spec") or {}
    ports = ",".join("%s/%s" % (p.get("port", ""), p.get("protocol") or "TCP")
                     for p in spec.get("ports") or [] if isinstance(p, dict))
    selector = ",".join("%s=%s" % kv for kv in sorted((spec.get("selector") or {}).items()))
    return [_meta(service).get("name", ""), spec.get("type") or "ClusterIP", spec.get("clusterIP") or "<none>",
            ",".join(spec.get("externalIPs") or []) or "<none>", ports or "<none>",
            _since(_meta(service).get("creationTimestamp"), now), selector or "<none>"]


Printer = Tuple[Sequence[Column], Callable[[JsonObj, float], List[Any]]]

PRINTERS: Dict[str, Printer] = {
    "Pod": (POD_COLUMNS, _pod_cells),
    "Node": (NODE_COLUMNS, _node_cells),
    "Event": (EVENT_COLUMNS, _event_cells),
    "Namespace": (NAMESPACE_COLUMNS, lambda o, now: [
        _meta(o).get("name", ""), (o.get("status") or {}).get("phase", "Active"),
        _since(_meta(o).get("creationTimestamp"), now)]),
    "Secret": (SECRET_COLUMNS, lambda o, now: [
        _meta(o).get("name", ""), o.get("type", "Opaque"), len(o.get("data") or {}),
        _since(_meta(o).get("creationTimestamp"), now)]),
    "RoleBinding": (ROLE_BINDING_COLUMNS, _role_binding_cells),
    "ServiceAccount": ((_NAME, ("Secrets", "string", 0, "Secrets is the list of secrets allowed to be used by "
                                                         "pods running using this ServiceAccount"), _AGE),
                       lambda o, now: [_meta(o).get("name", ""), len(o.get("secrets") or []),
                                       _since(_meta(o).get("creationTimestamp"), now)]),
    "ConfigMap": ((_NAME, ("Data", "string", 0, "The number of entries in the ConfigMap"), _AGE),
                  lambda o, now: [_meta(o).get("name", ""), len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                                  _since(_meta(o).get("creationTimestamp"), now)]),
    "Service": (SERVICE_COLUMNS, _service_cells),
}


def wants_table(accept: str) -> bool:
    """Whether an ``Accept`` header asks for a ``meta.k8s.io`` Table."""
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def to_table(body: JsonObj, include_object: str = "Metadata", now: Optional[float] = None) -> JsonObj:
    """The Table for an object or a list (``kind`` ``<Kind>`` or ``<Kind>List``)."""
    now = time.time() if now is None else now
    kind = str(body.get("kind", ""))
    is_list = kind.endswith("List")
    item_kind = kind[:-4] if is_list else kind
    items = list(body.get("items") or []) if is_list else [body]
    columns, cells = PRINTERS.get(item_kind, (DEFAULT_COLUMNS, lambda o, _: [
        _meta(o).get("name", ""), _meta(o).get("creationTimestamp", "")]))
    api_version = str(body.get("apiVersion") or "v1")
    rows = []
    for item in items:
        row: JsonObj = {"cells": cells(item, now)}
        if include_object == "Object":
            row["object"] = dict(item, kind=item_kind, apiVersion=api_version)
        elif include_object != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": _meta(item)}
        rows.append(row)
    meta = {k: v for k, v in (_meta(body) if is_list else {}).items() if k in ("resourceVersion", "continue",
                                                                             "remainingItemCount")}
    if not is_list:
        meta["resourceVersion"] = _meta(body).get("resourceVersion", "")
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": [{"name": n, "type": t, "format": "name" if n == "Name" else "",
                                   "description": d, "priority": p} for n, t, p, d in columns],
            "rows": rows}
