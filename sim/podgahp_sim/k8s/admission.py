"""What the API server does to a pod or secret before storing it: decoding checks (400), defaulting,
priority admission (403), validation (422), quota (403), QoS class.

Sources: ``pkg/apis/core/v1/defaults.go``, ``pkg/apis/core/validation/validation.go``,
``plugin/pkg/admission/priority``, ``plugin/pkg/admission/resourcequota``,
``k8s.io/apiserver/pkg/storage/names/generate.go``.  Messages are copied from those sources as far
as they are known; owns no state and knows nothing about HTTP or the scheduler.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import random
import re
from fractions import Fraction
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from .config import PodQuota, Taint
from .errors import FieldError, bad_request, forbidden
from .images import default_pull_policy
from .limits import annotation_errors
from .quantity import QuantityError, canonical_quantity, format_quantity, is_binary_resource, parse_quantity
from .selectors import label_key_error, label_value_error

JsonObj = Dict[str, Any]

NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""``k8s.io/apimachinery/pkg/util/rand`` alphabet: no vowels, no confusable digits."""
GENERATED_SUFFIX = 5
MAX_NAME = 63

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
SUBDOMAIN_HELP = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_HELP = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
              "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
              "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage", "storage", "pods")
RESTART_POLICIES = ("Always", "OnFailure", "Never")
MAX_SECRET_BYTES = 1024 * 1024
_rng = random.SystemRandom()


def generate_name(prefix: str) -> str:
    """``simpleNameGenerator.GenerateName``: prefix cut to 58 characters plus 5 random characters."""
    if len(prefix) > MAX_NAME - GENERATED_SUFFIX:
        prefix = prefix[:MAX_NAME - GENERATED_SUFFIX]
    return prefix + "".join(_rng.choice(NAME_ALPHABET) for _ in range(GENERATED_SUFFIX))


def admission_name(obj: JsonObj) -> str:
    """Name used in admission 403s: the name, else the generateName prefix (``admission/errors.go``)."""
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "Unknown")


def is_extended(resource: str) -> bool:
    """Extended resources (``nvidia.com/gpu``) cannot be overcommitted: request must equal limit."""
    return "/" in resource and not resource.startswith("kubernetes.io/") and not resource.startswith(
        "requests.")




# --------------------------------------------------------------------------- decoding (400)

def check_decodable(kind: str, obj: Any) -> None:
    """Structural checks the JSON decoder of the server makes; violations are 400, not 422."""
    prefix = '%s in version "v1" cannot be handled as a %s: ' % (kind, kind)
    if not isinstance(obj, dict):
        raise bad_request(prefix + "json: cannot unmarshal into Go value of type struct")
    for key in ("metadata", "spec", "status"):
        if key in obj and obj[key] is not None and not isinstance(obj[key], dict):
            raise bad_request(prefix + "json: cannot unmarshal %s into Go struct field %s.%s"
                              % (type(obj[key]).__name__, kind, key))
    meta = obj.get("metadata") or {}
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and (not isinstance(value, dict) or
                                  not all(isinstance(v, str) for v in value.values())):
            raise bad_request(prefix + "json: cannot unmarshal into Go struct field ObjectMeta.metadata.%s of "
                              "type map[string]string" % key)
    if kind == "Pod":
        spec = obj.get("spec") or {}
        for key in ("containers", "initContainers"):
            value = spec.get(key)
            if value is not None and (not isinstance(value, list) or
                                      not all(isinstance(c, dict) for c in value)):
                raise bad_request(prefix + "json: cannot unmarshal into Go struct field PodSpec.spec.%s of type "
                                  "[]v1.Container" % key)
            for container in value or []:
                resources = container.get("resources") or {}
                for part in ("requests", "limits"):
                    for quantity in (resources.get(part) or {}).values():
                        try:
                            parse_quantity(quantity)
                        except QuantityError as e:
                            raise bad_request(prefix + str(e)) from None
        for key in ("activeDeadlineSeconds", "terminationGracePeriodSeconds", "priority"):
            value = spec.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise bad_request(prefix + "json: cannot unmarshal %s into Go struct field PodSpec.spec.%s of "
                                  "type int64" % (type(value).__name__, key))
        canonicalize_quantities(obj)
    if kind == "Secret":
        data = obj.get("data") or {}
        if not isinstance(data, dict):
            raise bad_request(prefix + "json: cannot unmarshal into Go struct field Secret.data")
        for value in data.values():
            if not isinstance(value, str):
                raise bad_request(prefix + "json: cannot unmarshal into Go struct field Secret.data of type []uint8")
            try:
                base64.b64decode(value.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError, ValueError):
                raise bad_request(prefix + "illegal base64 data at input byte 0") from None


def canonicalize_quantities(pod: JsonObj) -> None:
    """A decoded pod's quantities (resources, overhead, emptyDir sizes) in the canonical form the API
    server stores and writes back (``1024Mi`` reads ``1Gi``, ``0.5`` reads ``500m``), in place; one that
    does not parse is left to validation."""
    def rewrite(values: Any, names: Optional[Iterable[str]] = None) -> None:
        if isinstance(values, dict):
            for name in list(values) if names is None else [n for n in names if n in values]:
                with contextlib.suppress(QuantityError):
                    values[name] = canonical_quantity(values[name])
    spec = pod.get("spec") or {}
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            if isinstance(resources, dict):
                rewrite(resources.get("requests"))
                rewrite(resources.get("limits"))
    rewrite(spec.get("overhead"))
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict):
            rewrite(volume.get("emptyDir"), ["sizeLimit"])


# --------------------------------------------------------------------------- defaulting

def default_pod(pod: JsonObj, token_volume_suffix: str, toleration_seconds: int) -> None:
    """Fill in what the API server defaults on create (in place)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    if spec.get("restartPolicy") == "":
        spec["restartPolicy"] = "Always"
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = account
    spec["serviceAccount"] = account
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        # plugin/pkg/admission/defaulttolerationseconds
        if not any(t.get("key") == key and t.get("effect") in ("NoExecute", None, "") for t in tolerations
                   if isinstance(t, dict)):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": toleration_seconds})
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict) and isinstance(volume.get("secret"), dict):
            volume["secret"].setdefault("defaultMode", 420)
    mount_token = spec.get("automountServiceAccountToken", True) is not False
    token_volume = "kube-api-access-" + token_volume_suffix
    if mount_token and spec.get("containers"):
        spec.setdefault("volumes", []).append({"name": token_volume, "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}})
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            image = container.get("image")
            if isinstance(image, str) and image:
                container.setdefault("imagePullPolicy", default_pull_policy(image))
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            resources = container.setdefault("resources", {})
            limits = resources.get("limits") or {}
            if limits:
                requests = resources.setdefault("requests", {})
                for name, value in limits.items():
                    requests.setdefault(name, value)
            if mount_token:
                mounts = container.setdefault("volumeMounts", [])
                if not any(m.get("mountPath") == "/var/run/secrets/kubernetes.io/serviceaccount" for m in mounts):
                    mounts.append({"name": token_volume, "readOnly": True,
                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})


def admit_priority(pod: JsonObj, classes: Mapping[str, int]) -> None:
    """Priority admission: resolve ``priorityClassName`` into ``spec.priority`` or 403."""
    spec = pod.setdefault("spec", {})
    name = spec.get("priorityClassName")
    if name:
        if name not in classes:
            raise forbidden("pods", admission_name(pod), "no PriorityClass with name %s was found" % name)
        value = classes[name]
    else:
        value = 0
    if spec.get("priority") is not None and spec["priority"] != value:
        raise forbidden("pods", admission_name(pod),
                        "the integer value of priority (%d) must not be provided in pod spec; priority admission "
                        "controller computed %d from the given PriorityClass name" % (spec["priority"], value))
    spec["priority"] = value


def qos_class(pod: JsonObj) -> str:
    """``pkg/apis/core/v1/helper/qos.GetPodQOS`` restricted to cpu and memory."""
    containers = list((pod.get("spec") or {}).get("containers") or []) + list(
        (pod.get("spec") or {}).get("initContainers") or [])
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for resource in ("cpu", "memory"):
            req = _quantity_or_zero(requests.get(resource))
            lim = _quantity_or_zero(limits.get(resource))
            if req or lim:
                any_set = True
            if not lim or req != lim:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _quantity_or_zero(value: Any) -> Fraction:
    if value is None:
        return Fraction(0)
    try:
        return parse_quantity(value)
    except QuantityError:
        return Fraction(0)


def pod_requests(pod: JsonObj, part: str = "requests") -> Dict[str, Fraction]:
    """Effective pod requests (or limits): max(sum over containers, each init container)."""
    spec = pod.get("spec") or {}
    total: Dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get(part) or {}).items():
            total[name] = total.get(name, Fraction(0)) + _quantity_or_zero(value)
    for container in spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get(part) or {}).items():
            total[name] = max(total.get(name, Fraction(0)), _quantity_or_zero(value))
    return total


# --------------------------------------------------------------------------- validation (422)

def name_errors(path: str, name: Any, label: bool = False) -> List[FieldError]:
    if not isinstance(name, str) or not name:
        return [FieldError("required", path)]
    limit = 63 if label else 253
    if len(name) > limit:
        return [FieldError("invalid", path, "must be no more than %d characters" % limit, name)]
    if not (_LABEL if label else _SUBDOMAIN).match(name):
        return [FieldError("invalid", path, LABEL_HELP if label else SUBDOMAIN_HELP, name)]
    return []


def meta_errors(meta: JsonObj) -> List[FieldError]:
    errors: List[FieldError] = []
    if not meta.get("name"):
        errors.append(FieldError("required", "metadata.name", "name or generateName is required"))
    else:
        errors.extend(name_errors("metadata.name", meta["name"]))
    for key, value in (meta.get("labels") or {}).items():
        why = label_key_error(key)
        if why:
            errors.append(FieldError("invalid", "metadata.labels", why, key))
        why = label_value_error(value)
        if why:
            errors.append(FieldError("invalid", "metadata.labels", why, value))
    for key in (meta.get("annotations") or {}):
        why = label_key_error(key)
        if why:
            errors.append(FieldError("invalid", "metadata.annotations", why, key))
    errors.extend(annotation_errors(meta.get("annotations") or {}))
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        for field in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref, dict) or not ref.get(field):
                errors.append(FieldError("required", "metadata.ownerReferences[%d].%s" % (i, field)))
    return errors


TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")


def node_taints(taints: Any) -> Tuple[List[Taint], List[FieldError]]:
    """A node's ``spec.taints`` as :class:`Taint` values, and what validation refuses in them (as
    ``validateNodeTaints``: a qualified key, a label value, a known effect, no key and effect twice)."""
    found: List[Taint] = []
    errors: List[FieldError] = []
    if taints is None:
        return found, errors
    if not isinstance(taints, list):
        return found, [FieldError("invalid", "spec.taints", "must be a list", str(taints))]
    seen = set()
    for i, taint in enumerate(taints):
        path = "spec.taints[%d]" % i
        if not isinstance(taint, dict):
            errors.append(FieldError("invalid", path, "must be an object", str(taint)))
            continue
        key, value, effect = taint.get("key"), taint.get("value") or "", taint.get("effect")
        why = label_key_error(key) if isinstance(key, str) and key else "name part must be non-empty"
        if why:
            errors.append(FieldError("invalid", path + ".key", why, str(key)))
        why = label_value_error(value) if isinstance(value, str) else "must be a string"
        if why:
            errors.append(FieldError("invalid", path + ".value", why, str(value)))
        if effect not in TAINT_EFFECTS:
            errors.append(FieldError("notsupported", path + ".effect", 'supported values: "NoExecute", '
                                     '"NoSchedule", "PreferNoSchedule"', str(effect)))
        elif (key, effect) in seen:
            errors.append(FieldError("duplicate", path, "taints must be unique by key and effect pair",
                                     "%s:%s" % (key, effect)))
        seen.add((key, effect))
        if not errors:
            found.append(Taint(str(key), str(value), str(effect)))
    return found, errors


def _resource_errors(path: str, resources: JsonObj) -> List[FieldError]:
    errors: List[FieldError] = []
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    for part, values in (("limits", limits), ("requests", requests)):
        for name, value in values.items():
            key_path = "%s.%s[%s]" % (path, part, name)
            if name not in STANDARD_RESOURCES and "/" not in name and not name.startswith("hugepages-"):
                errors.append(FieldError("invalid", key_path, "must be a standard resource type or fully qualified",
                                         name))
                continue
            quantity = parse_quantity(value)
            if quantity < 0:
                errors.append(FieldError("invalid", key_path, "must be greater than or equal to 0",
                                         canonical_quantity(value)))
            elif is_extended(name) and quantity.denominator != 1:
                errors.append(FieldError("invalid", key_path, "must be an integer", canonical_quantity(value)))
    for name, value in requests.items():
        quantity = parse_quantity(value)
        if name in limits:
            limit = parse_quantity(limits[name])
            if is_extended(name) and quantity != limit:
                errors.append(FieldError("invalid", path + ".requests", "must be equal to %s limit of %s"
                                         % (name, canonical_quantity(limits[name])), canonical_quantity(value)))
            elif quantity > limit:
                errors.append(FieldError("invalid", path + ".requests", "must be less than or equal to %s limit of %s"
                                         % (name, canonical_quantity(limits[name])), canonical_quantity(value)))
        elif is_extended(name):
            errors.append(FieldError("required", path + ".limits", "Limit must be set for non overcommitable resources"))
    return errors


def pod_errors(pod: JsonObj) -> List[FieldError]:
    """Validation of a defaulted pod; an empty list means valid."""
    errors = meta_errors(pod.get("metadata") or {})
    spec = pod.get("spec") or {}
    volumes = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        vpath = "spec.volumes[%d]" % i
        errors.extend(name_errors(vpath + ".name", volume.get("name"), label=True))
        if volume.get("name") in volumes:
            errors.append(FieldError("duplicate", vpath + ".name", "", volume.get("name")))
        volumes.add(volume.get("name"))
        secret = volume.get("secret")
        if isinstance(secret, dict) and not secret.get("secretName"):
            errors.append(FieldError("required", vpath + ".secret.secretName"))
    containers = spec.get("containers") or []
    if not containers:
        errors.append(FieldError("required", "spec.containers"))
    names = set()
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            cpath = "spec.%s[%d]" % (key, i)
            errors.extend(name_errors(cpath + ".name", container.get("name"), label=True))
            if container.get("name") and container.get("name") in names:
                errors.append(FieldError("duplicate", cpath + ".name", "", container.get("name")))
            names.add(container.get("name"))
            image = container.get("image")
            if not isinstance(image, str) or not image:
                errors.append(FieldError("required", cpath + ".image"))
            elif image.strip() != image:
                errors.append(FieldError("invalid", cpath + ".image", "must not have leading or trailing whitespace",
                                         image))
            errors.extend(_resource_errors(cpath + ".resources", container.get("resources") or {}))
            for j, mount in enumerate(container.get("volumeMounts") or []):
                if mount.get("name") not in volumes:
                    errors.append(FieldError("notfound", "%s.volumeMounts[%d].name" % (cpath, j), "",
                                             mount.get("name")))
            policy = container.get("imagePullPolicy")
            if policy is not None and policy not in ("Always", "IfNotPresent", "Never"):
                errors.append(FieldError("notsupported", cpath + ".imagePullPolicy",
                                         'supported values: "Always", "IfNotPresent", "Never"', policy))
    policy = spec.get("restartPolicy")
    if policy not in RESTART_POLICIES:
        errors.append(FieldError("notsupported", "spec.restartPolicy",
                                 'supported values: "Always", "OnFailure", "Never"', policy))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and not 1 <= deadline <= 2147483647:
        errors.append(FieldError("invalid", "spec.activeDeadlineSeconds",
                                 "must be between 1 and 2147483647, inclusive", deadline))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and grace < 0:
        errors.append(FieldError("invalid", "spec.terminationGracePeriodSeconds",
                                 "must be greater than or equal to 0", grace))
    for i, toleration in enumerate(spec.get("tolerations") or []):
        op = toleration.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            errors.append(FieldError("notsupported", "spec.tolerations[%d].operator" % i,
                                     'supported values: "Equal", "Exists"', op))
        elif op == "Exists" and toleration.get("value"):
            errors.append(FieldError("invalid", "spec.tolerations[%d].operator" % i,
                                     "value must be empty when `operator` is 'Exists'", toleration.get("value")))
    return errors


def secret_errors(secret: JsonObj) -> List[FieldError]:
    errors = meta_errors(secret.get("metadata") or {})
    total = 0
    for key, value in (secret.get("data") or {}).items():
        if not _CONFIG_KEY.match(key):
            errors.append(FieldError("invalid", "data[%s]" % key,
                                     "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
                                     "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation "
                                     "is '[-._a-zA-Z0-9]+')", key))
        total += len(base64.b64decode(value))
    if total > MAX_SECRET_BYTES:
        errors.append(FieldError("toolong", "data", "must have at most %d bytes" % MAX_SECRET_BYTES))
    return errors


def normalise_secret(secret: JsonObj) -> None:
    """Fold ``stringData`` into ``data`` and default ``type`` (``pkg/registry/core/secret``)."""
    data = secret.get("data") or {}
    secret["data"] = data
    for key, value in (secret.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    if not data:
        secret.pop("data", None)
    secret["type"] = secret.get("type") or "Opaque"


# --------------------------------------------------------------------------- quota (403)

_QUOTA_PARTS: Mapping[str, Tuple[str, str]] = {
    "requests.cpu": ("requests", "cpu"), "cpu": ("requests", "cpu"),
    "requests.memory": ("requests", "memory"), "memory": ("requests", "memory"),
    "limits.cpu": ("limits", "cpu"), "limits.memory": ("limits", "memory"),
    "requests.ephemeral-storage": ("requests", "ephemeral-storage"),
    "limits.ephemeral-storage": ("limits", "ephemeral-storage"),
}


def pod_usage(pod: JsonObj, keys: Iterable[str]) -> Dict[str, Fraction]:
    """The pod's contribution to each quota key."""
    usage: Dict[str, Fraction] = {}
    for key in keys:
        if key in ("pods", "count/pods"):
            usage[key] = Fraction(1)
        elif key in _QUOTA_PARTS:
            part, resource = _QUOTA_PARTS[key]
            usage[key] = pod_requests(pod, part).get(resource, Fraction(0))
        elif key.startswith("requests."):
            usage[key] = pod_requests(pod, "requests").get(key[len("requests."):], Fraction(0))
    return usage


def _pretty(values: Mapping[str, Fraction]) -> str:
    return ",".join("%s=%s" % (key, format_quantity(values[key], is_binary_resource(key)))
                    for key in sorted(values))


def check_quota(pod: JsonObj, quota: Optional[PodQuota], others: Iterable[JsonObj]) -> None:
    """``exceeded quota`` / ``must specify`` 403s of the ResourceQuota admission plugin."""
    if quota is None or not quota.hard:
        return
    namespace = (pod.get("metadata") or {}).get("namespace")
    if quota.namespace is not None and quota.namespace != namespace:
        return
    hard = {key: parse_quantity(value) for key, value in quota.hard.items()}
    missing = sorted(key for key in hard if key.startswith("limits.") and key in _QUOTA_PARTS and any(
        _QUOTA_PARTS[key][1] not in ((c.get("resources") or {}).get("limits") or {})
        for c in (pod.get("spec") or {}).get("containers") or []))
    if missing:
        raise forbidden("pods", admission_name(pod), "failed quota: %s: must specify %s"
                        % (quota.name, ",".join(missing)))
    used: Dict[str, Fraction] = {key: Fraction(0) for key in hard}
    for other in others:
        for key, value in pod_usage(other, hard).items():
            used[key] += value
    requested = pod_usage(pod, hard)
    exceeded = sorted(key for key in hard if key in requested and requested[key] > 0
                      and used[key] + requested[key] > hard[key])
    if exceeded:
        raise forbidden("pods", admission_name(pod), "exceeded quota: %s, requested: %s, used: %s, limited: %s" % (
            quota.name, _pretty({k: requested[k] for k in exceeded}), _pretty({k: used[k] for k in exceeded}),
            _pretty({k: hard[k] for k in exceeded})))
