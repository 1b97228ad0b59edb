"""A container's environment, command and arguments as the kubelet and containerd make them.

``env`` (``value`` with ``$(VAR)`` references, ``valueFrom`` a Secret or ConfigMap key, a pod field
or a resource), ``envFrom``, the ``kubernetes`` service variables, the image's ``Env`` and
``HOSTNAME``; then ``command``/``args`` against the image's ``Entrypoint``/``Cmd`` with ``$(VAR)``
expanded (``kubelet/kuberuntime/kuberuntime_container.go``, ``kubelet/container/helpers.go
(ExpandContainerCommandAndArgs)``, ``third_party/forked/golang/expansion``).

Pure functions: objects are looked up through the callable the caller passes.  A reference that
cannot be resolved raises :class:`ContainerConfigError` with the kubelet's message.
"""

from __future__ import annotations

import base64
import math
import re
from fractions import Fraction
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from .quantity import parse_quantity
from .registry import Image
from .store import JsonObj

#: (resource, namespace, name) -> the stored object, or None.
Lookup = Callable[[str, str, str], Optional[JsonObj]]

_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


class ContainerConfigError(Exception):
    """The container cannot be made: ``reason`` (``CreateContainerConfigError``...) and message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(NAME)`` -> its value when defined (else kept), ``$$`` -> ``$``."""
    out: List[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env[name] if name in env else text[i:end + 1])
                    i = end + 1
                    continue
        out.append(char)
        i += 1
    return "".join(out)


def _data(obj: JsonObj, kind: str) -> Dict[str, str]:
    """The string data of a Secret (decoded) or ConfigMap."""
    values: Dict[str, str] = {}
    if kind == "secrets":
        for key, value in (obj.get("data") or {}).items():
            try:
                values[key] = base64.b64decode(str(value)).decode("utf-8", "replace")
            except ValueError:
                continue
        for key, value in (obj.get("stringData") or {}).items():
            values[key] = str(value)
    else:
        values.update({k: str(v) for k, v in (obj.get("data") or {}).items()})
    return values


_KIND = {"secrets": ("secret", "Secret"), "configmaps": ("configmap", "ConfigMap")}


def _key_ref(ref: JsonObj, kind: str, namespace: str, lookup: Lookup) -> Optional[str]:
    name = str(ref.get("name") or "")
    optional = bool(ref.get("optional"))
    obj = lookup(kind, namespace, name)
    lower, title = _KIND[kind]
    if obj is None:
        if optional:
            return None
        raise ContainerConfigError("CreateContainerConfigError", '%s "%s" not found' % (lower, name))
    data = _data(obj, kind)
    key = str(ref.get("key") or "")
    if key not in data:
        if optional:
            return None
        raise ContainerConfigError("CreateContainerConfigError",
                                   "couldn't find key %s in %s %s/%s" % (key, title, namespace, name))
    return data[key]


def field_value(pod: JsonObj, path: str, pod_ip: str, host_ip: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": pod_ip, "status.podIPs": pod_ip, "status.hostIP": host_ip, "status.hostIPs": host_ip,
    }
    if path in ("metadata.labels", "metadata.annotations"):
        items = sorted((meta.get(path.split(".")[1]) or {}).items())
        return "\n".join('%s="%s"' % (k, v) for k, v in items)
    if path not in simple:
        raise ContainerConfigError("CreateContainerConfigError", "unsupported fieldPath: %s" % path)
    return str(simple[path] or "")


def resource_value(pod: JsonObj, container: JsonObj, ref: JsonObj, allocatable: Mapping[str, Fraction]) -> str:
    """``resourceFieldRef``: a limit (the node's allocatable when unset) or request, over ``divisor``,
    rounded up (``pkg/api/v1/resource/helpers.go (ExtractContainerResourceValue)``)."""
    name = ref.get("containerName") or container.get("name")
    target = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == name), container)
    resource = str(ref.get("resource") or "")
    kind, _, what = resource.partition(".")
    resources = target.get("resources") or {}
    value = (resources.get(kind) or {}).get(what) if kind in ("limits", "requests") else None
    if value is not None:
        amount = parse_quantity(str(value))
    elif kind == "limits" and what in allocatable:
        amount = allocatable[what]
    elif kind == "requests" or kind == "limits":
        amount = Fraction(0)
    else:
        raise ContainerConfigError("CreateContainerConfigError", "unsupported container resource: %s" % resource)
    divisor = parse_quantity(str(ref.get("divisor") or "1")) or Fraction(1)
    return str(math.ceil(amount / divisor))


def container_environment(pod: JsonObj, container: JsonObj, image: Image, lookup: Lookup, *,
                          service: Tuple[str, int], pod_ip: str, host_ip: str,
                          allocatable: Mapping[str, Fraction]) -> Dict[str, str]:
    """The container's environment, in the order a process sees it (later names win)."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    host, port = service
    made: Dict[str, str] = {
        "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port), "KUBERNETES_PORT": "tcp://%s:%d" % (host, port),
        "KUBERNETES_PORT_443_TCP": "tcp://%s:%d" % (host, port), "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_443_TCP_PORT": str(port), "KUBERNETES_PORT_443_TCP_ADDR": host,
    }
    for source in container.get("envFrom") or []:
        if not isinstance(source, dict):
            continue
        prefix = str(source.get("prefix") or "")
        for field, kind in (("configMapRef", "configmaps"), ("secretRef", "secrets")):
            ref = source.get(field)
            if not isinstance(ref, dict):
                continue
            obj = lookup(kind, namespace, str(ref.get("name") or ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ContainerConfigError("CreateContainerConfigError",
                                           '%s "%s" not found' % (_KIND[kind][0], ref.get("name")))
            for key, text in sorted(_data(obj, kind).items()):
                if _ENV_NAME.fullmatch(prefix + key):
                    made[prefix + key] = text
    for var in container.get("env") or []:
        if not isinstance(var, dict) or not isinstance(var.get("name"), str):
            continue
        source = var.get("valueFrom")
        value: Optional[str]
        if isinstance(source, dict):
            if isinstance(source.get("secretKeyRef"), dict):
                value = _key_ref(source["secretKeyRef"], "secrets", namespace, lookup)
            elif isinstance(source.get("configMapKeyRef"), dict):
                value = _key_ref(source["configMapKeyRef"], "configmaps", namespace, lookup)
            elif isinstance(source.get("fieldRef"), dict):
                value = field_value(pod, str(source["fieldRef"].get("fieldPath") or ""), pod_ip, host_ip)
            elif isinstance(source.get("resourceFieldRef"), dict):
                value = resource_value(pod, container, source["resourceFieldRef"], allocatable)
            else:
                value = None
            if value is None:
                continue
        else:
            value = expand(str(var.get("value") or ""), made)
        made[var["name"]] = value
    env: Dict[str, str] = {"HOSTNAME": str((pod.get("metadata") or {}).get("name") or "")}
    for item in image.env:
        name, _, value = item.partition("=")
        env[name] = value
    env.update(device_environment(pod, container))
    env.update(made)
    return env


GPU_RESOURCE = "nvidia.com/gpu"


def device_environment(pod: JsonObj, container: JsonObj) -> Dict[str, str]:
    """What the simulated GPU device plugin gives a container with ``nvidia.com/gpu`` limits: the
    device list the NVIDIA plugin sets (``NVIDIA_VISIBLE_DEVICES``), and, since a simulated node has
    no device to discover, HTCondor's GPU discovery told to report that many (``-simulate``)."""
    value = ((container.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE)
    try:
        count = int(str(value)) if value is not None else 0
    except ValueError:
        count = 0
    if count <= 0:
        return {}
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    devices = ",".join("GPU-%s-%d" % (uid[:8], n) for n in range(count))
    return {"NVIDIA_VISIBLE_DEVICES": devices, "_CONDOR_GPU_DISCOVERY_EXTRA": "-simulate:0,%d" % count}


def command_line(container: JsonObj, image: Image, env: Mapping[str, str]) -> List[str]:
    """``command`` replaces the image's ``Entrypoint`` (and then its ``Cmd``); ``args`` replace ``Cmd``."""
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    if command:
        argv = command + args
    else:
        argv = list(image.entrypoint) + (args if args else list(image.cmd))
    return [expand(part, env) for part in argv]
