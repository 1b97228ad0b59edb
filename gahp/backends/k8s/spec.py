"""Building a pilot's Pod and its input Secret from the queue's template and the submit ad.

Owns the pod's shape (names, labels, annotations, container, resources, staging mounts, safety
defaults), the allow-list of route overrides, and the staging of input files into Secret data.
Pure functions over dicts: no API calls; reads only the pod template and the files to stage.
"""

from __future__ import annotations

import base64
import copy
import fnmatch
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import yaml

from gahp.backends.http import JsonObj
from gahp.backends.k8s.identity import (ANN_USER, DOMAIN, LABEL_CE, LABEL_MANAGED_BY, LABEL_OWNER,
                                        LABEL_SANDBOX, MANAGED_BY, job_id_of, owner_labels, parse_job_id,
                                        pod_name, sandbox_key)
from gahp.backends.k8s.limits import check_pod
from gahp.backends.k8s.schema import schema_errors
from gahp.backends.k8s.settings import QueueSettings, label_value
from gahp.backends.k8s.view import Pod, record_of
from gahp.core.errors import ConfigError, InvalidJob
from gahp.core.files import TooLarge, read_input
from gahp.core.job import PilotJob


# ----------------------------------------------------------------------------------------------
# Labels and annotations: everything a fresh process needs is on the pod.

LABEL_QUEUE = f"{DOMAIN}/queue"
LABEL_GENERATION = f"{DOMAIN}/generation"
LABEL_JOB = f"{DOMAIN}/job"
"""The HTCondor job (``<cluster>.<proc>`` of the grid job) as its sandbox name says it, for people:
``kubectl get pods -l podgahp.htcondor.org/job=1234.0``. The sandbox is the job's to choose, so this
label only helps find a pod; podgahp never reads it."""
#: The gridmanager names a sandbox ``<host>_<port>_<schedd>_<cluster>.<proc>_<qdate>``.
_SANDBOX_JOB = re.compile(r"_([0-9]{1,9}\.[0-9]{1,9})_[0-9]{1,12}$")
ANN_SANDBOX_ID = f"{DOMAIN}/sandbox-id"
ANN_IWD = f"{DOMAIN}/iwd"
ANN_OUT = f"{DOMAIN}/out"
ANN_ERR = f"{DOMAIN}/err"
ANN_CMD = f"{DOMAIN}/cmd"
ANN_PROXY_KEY = f"{DOMAIN}/proxy-key"
ANN_REPORTED = f"{DOMAIN}/reported"
"""Set (RFC 3339 time) once the pilot's final state was reported and its outputs written."""
#: What podgahp reads back of the labels and annotations it puts on a pod (the watch copy keeps only
#: these; sandbox-id, iwd and cmd are for people reading the pod).
LABELS_READ = frozenset({LABEL_MANAGED_BY, LABEL_CE, LABEL_OWNER, LABEL_SANDBOX, LABEL_QUEUE, LABEL_GENERATION})
ANNOTATIONS_READ = frozenset({ANN_USER, ANN_PROXY_KEY, ANN_REPORTED})

CONTAINER = "pilot"
"""Name of the pilot container (the template's container of that name, else its first one)."""
WORK_VOLUME = "podgahp-work"
INPUT_VOLUME = "podgahp-input"
INPUT_DIR = ".podgahp"
"""Directory (under the working directory) where the whole input Secret is mounted; files there
follow Secret updates, so a refreshed proxy appears there."""
PROXY_KEY = "x509userproxy"
TOKEN_KEY = "token"
GPU_RESOURCE = "nvidia.com/gpu"

#: CERequirements attributes a route may set, and the pod field each one overrides.
OVERRIDES = {
    "k8s_image": "spec.containers[pilot].image",
    "k8s_priority_class": "spec.priorityClassName",
}

_KEY_BAD = re.compile(r"[^-._a-zA-Z0-9]+")


__all__ = ["ANN_USER", "LABEL_CE", "LABEL_MANAGED_BY", "LABEL_OWNER", "LABEL_SANDBOX", "MANAGED_BY", "job_id",
           "parse_job_id", "pod_name", "sandbox_key"]


def selector(ce_name: str) -> str:
    """Label selector of every pod of this CE."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_CE}={ce_name}"


# ----------------------------------------------------------------------------------------------
# Templates.

#: Largest pod template read (real ones are a few KiB).
MAX_TEMPLATE_BYTES = 1024 * 1024

_template_lock = threading.Lock()
_template_cache: Dict[str, Tuple[float, JsonObj]] = {}


def generation_of(pod: Pod) -> int:
    """The pod's generation within its sandbox (label ``LABEL_GENERATION``; 0 when absent or odd)."""
    try:
        return int(record_of(pod).label(LABEL_GENERATION, "0"))
    except ValueError:
        return 0


def load_template(path: Optional[str]) -> JsonObj:
    """The queue's pod template (a fresh copy); cached per file and modification time."""
    if not path:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"containers": [{"name": CONTAINER}]}}
    try:
        mtime = os.stat(path).st_mtime
    except OSError as e:
        raise ConfigError(f"pod template {path} cannot be read: {e.strerror}") from e
    with _template_lock:
        cached = _template_cache.get(path)
    if cached is None or cached[0] != mtime:
        try:
            template = yaml.safe_load(read_input(path, "pod template", MAX_TEMPLATE_BYTES, "a pod template")
                                      .decode("utf-8"))
        except InvalidJob as e:
            raise ConfigError(str(e)) from None
        except (UnicodeDecodeError, yaml.YAMLError) as e:
            raise ConfigError(f"pod template {path} is not readable YAML: {e}") from e
        check_template(template, path)
        with _template_lock:
            _template_cache[path] = (mtime, template)
        cached = (mtime, template)
    return copy.deepcopy(cached[1])


def check_template(template: Any, path: str) -> None:
    if not isinstance(template, dict):
        raise ConfigError(f"pod template {path} is not a YAML mapping (a Pod manifest)")
    if template.get("kind", "Pod") != "Pod":
        raise ConfigError(f"pod template {path} has kind {template.get('kind')!r}, not Pod")
    spec = template.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list) or not spec["containers"]:
        raise ConfigError(f"pod template {path} has no spec.containers")
    if not all(isinstance(c, dict) for c in spec["containers"]):
        raise ConfigError(f"pod template {path}: spec.containers must be a list of mappings")
    for key in ("metadata",):
        if key in template and not isinstance(template[key], dict):
            raise ConfigError(f"pod template {path}: {key} is not a mapping")
    errors = schema_errors(template)
    if errors:
        raise ConfigError(f"pod template {path} does not fit the Pod schema: " + "; ".join(errors))


def pilot_container(spec: JsonObj) -> JsonObj:
    containers: List[JsonObj] = spec["containers"]
    for container in containers:
        if container.get("name") == CONTAINER:
            return container
    return containers[0]


# ----------------------------------------------------------------------------------------------
# Staging.


@dataclass(frozen=True)
class StagedFile:
    key: str
    """Secret data key."""
    path: str
    """File name in the working directory (and in the whole-Secret mount)."""
    mode: int
    data: bytes


def stage_inputs(job: PilotJob, queue: QueueSettings, max_bytes: int) -> List[StagedFile]:
    """Cmd, In, TransferInput, the proxy and the queue's token file, as Secret entries.

    InvalidJob when a file cannot be read, two inputs share a name, or all of them together are
    larger than ``max_bytes`` (a Secret holds at most 1 MiB).
    """
    wanted: List[Tuple[str, str, int, Optional[str]]] = [(job.executable, "executable (Cmd)", 0o555, None)]
    if job.stdin:
        wanted.append((job.stdin, "standard input (In)", 0o444, None))
    for entry in job.transfer_input:
        if "://" in entry:
            raise InvalidJob(f"TransferInput entry {entry} is a URL; the kubernetes backend stages only "
                             "local files")
        wanted.append((entry, "input file (TransferInput)", 0o444, None))
    if job.proxy:
        wanted.append((job.proxy, "X.509 proxy (x509userproxy)", 0o444, PROXY_KEY))
    if queue.token_file:
        wanted.append((queue.token_file, "token file (PODGAHP_K8S_TOKEN_FILE)", 0o444, TOKEN_KEY))

    staged: List[StagedFile] = []
    by_name: Dict[str, str] = {}
    keys = set()
    total = 0
    for path, what, mode, fixed_key in wanted:
        name = os.path.basename(path.rstrip("/"))
        if name in (INPUT_DIR, "", ".", ".."):
            raise InvalidJob(f"{what} {path} has a name that cannot be staged")
        if name in by_name:
            if by_name[name] == path:
                continue
            raise InvalidJob(f"inputs {by_name[name]} and {path} have the same name {name!r}; the pod's "
                             "working directory can hold only one")
        try:
            data = read_input(path, what, max(0, max_bytes - total), "PODGAHP_K8S_SECRET_MAX_BYTES")
        except TooLarge:
            data, total = b"", max_bytes + 1
        total += len(data)
        if total > max_bytes:
            raise InvalidJob(f"staged inputs exceed the Kubernetes Secret size limit: {total} bytes or more "
                             f"(Cmd, In, TransferInput and credentials together) > {max_bytes} bytes "
                             f"(PODGAHP_K8S_SECRET_MAX_BYTES); stage large inputs another way, e.g. in the "
                             "image or by URL from the pilot")
        key = fixed_key or (_KEY_BAD.sub("_", name)[:200] or "file")
        base, n = key, 1
        while key in keys:
            n += 1
            key = f"{base}.{n}"
        keys.add(key)
        by_name[name] = path
        staged.append(StagedFile(key=key, path=name, mode=mode, data=data))
    return staged


def secret_body(name: str, namespace: str, pod_uid: str, labels: Dict[str, str],
                staged: List[StagedFile]) -> JsonObj:
    """The input Secret, owned by the pod so that deleting the pod deletes it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod_uid,
                                 "blockOwnerDeletion": False, "controller": False}],
        },
        "data": {f.key: base64.b64encode(f.data).decode() for f in staged},
    }


# ----------------------------------------------------------------------------------------------
# The pod.


def _cpu(cores: int, percent: int) -> str:
    millis = cores * 10 * percent
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _set_resources(container: JsonObj, job: PilotJob, queue: QueueSettings) -> None:
    resources = container.setdefault("resources", {}) or {}
    container["resources"] = resources
    requests: Dict[str, Any] = dict(resources.get("requests") or {})
    limits: Dict[str, Any] = dict(resources.get("limits") or {})
    wanted: Dict[str, Tuple[str, str]] = {"cpu": (_cpu(job.cpus, queue.cpu_request_percent), str(job.cpus))}
    if job.memory_mb is not None:
        wanted["memory"] = (f"{job.memory_mb}Mi", f"{job.memory_mb}Mi")
    if job.disk_kb is not None:
        # HTCondor 23.x sends a few KiB when the pilot asked for no disk: as a limit, a kubelet would
        # evict the pod at its first write. The limit never goes below the queue's floor.
        limit_kb = max(job.disk_kb, queue.disk_limit_floor_mb * 1024)
        wanted["ephemeral-storage"] = (f"{job.disk_kb}Ki", f"{limit_kb}Ki")
    for resource, (request, limit) in wanted.items():
        requests[resource] = request
        if resource in queue.limits:
            limits[resource] = limit
        else:
            limits.pop(resource, None)
    if job.gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(job.gpus)
    resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    else:
        resources.pop("limits", None)


def _allowed(value: str, patterns: Tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(value, p) for p in patterns)


def _knob(queue: QueueSettings, what: str) -> str:
    return f"PODGAHP_K8S_{queue.name.upper()}_{what} (or PODGAHP_K8S_{what})"


def check_limits(job: PilotJob, queue: QueueSettings) -> None:
    """A job ad's cores, memory and GPUs are user input: refuse what the queue's caps do not allow."""
    asked = (("cores", job.cpus, queue.max_cpus, "MAX_CPUS"),
             ("MiB of memory", job.memory_mb or 0, queue.max_memory_mb, "MAX_MEMORY_MB"),
             ("GPUs", job.gpus, queue.max_gpus, "MAX_GPUS"))
    for what, value, cap, knob in asked:
        if value > cap:
            raise InvalidJob(f"the pilot asks for {value} {what}; queue {queue.name} allows at most {cap} "
                             f"per pilot ({_knob(queue, knob)})")


def _allowed_setting(job: PilotJob, queue: QueueSettings, setting: str, what: str, allowed: Tuple[str, ...],
                     knob: str) -> Optional[str]:
    """A route's setting that only the queue's allow-list lets through (None when the job has none)."""
    value = job.setting(setting)
    if value is None:
        return None
    text = str(value)
    if not _allowed(text, allowed):
        raise InvalidJob(f"{what} {text!r} ({setting} from the job ad) is not allowed in queue {queue.name}; "
                         f"an admin allows it with {_knob(queue, knob)} = "
                         f"{' '.join(allowed) or '(empty: none allowed)'}")
    return text


def _apply_overrides(job: PilotJob, queue: QueueSettings, spec: JsonObj, container: JsonObj) -> None:
    image = _allowed_setting(job, queue, "k8s_image", "image", queue.allowed_images, "ALLOWED_IMAGES")
    if image is not None:
        container["image"] = image
    priority = _allowed_setting(job, queue, "k8s_priority_class", "priority class", queue.allowed_priority_classes,
                                "ALLOWED_PRIORITY_CLASSES")
    if priority is not None:
        spec["priorityClassName"] = priority
        spec.pop("priority", None)


def _safe_defaults(spec: JsonObj, container: JsonObj) -> None:
    """Non-root, no privilege escalation, no capabilities — unless the template says otherwise."""
    pod_sc = spec.setdefault("securityContext", {}) or {}
    spec["securityContext"] = pod_sc
    container_sc = container.setdefault("securityContext", {}) or {}
    container["securityContext"] = container_sc
    if "runAsNonRoot" not in pod_sc and "runAsNonRoot" not in container_sc and not (
            pod_sc.get("runAsUser") == 0 or container_sc.get("runAsUser") == 0):
        pod_sc["runAsNonRoot"] = True
    container_sc.setdefault("allowPrivilegeEscalation", False)
    if "capabilities" not in container_sc:
        container_sc["capabilities"] = {"drop": ["ALL"]}
    if "seccompProfile" not in pod_sc and "seccompProfile" not in container_sc:
        pod_sc["seccompProfile"] = {"type": "RuntimeDefault"}


def _merge_env(container: JsonObj, pairs: List[Tuple[str, str]]) -> None:
    env: List[JsonObj] = [e for e in (container.get("env") or []) if isinstance(e, dict)]
    names = {name for name, _ in pairs}
    env = [e for e in env if e.get("name") not in names]
    env.extend({"name": name, "value": value} for name, value in pairs)
    container["env"] = env


def build_pod(job: PilotJob, queue: QueueSettings, template: JsonObj, *, name: str, namespace: str,
              ce_name: str, generation: int, user: str, staged: List[StagedFile]) -> JsonObj:
    """The pilot's Pod: the template with the job's command, environment, resources and inputs."""
    check_limits(job, queue)
    pod = copy.deepcopy(template)
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    pod["metadata"] = _metadata(pod.get("metadata") or {}, job, queue, name=name, namespace=namespace,
                                ce_name=ce_name, generation=generation, user=user, staged=staged)
    pod.pop("status", None)

    spec: JsonObj = pod["spec"]
    container = pilot_container(spec)
    container["name"] = container.get("name") or CONTAINER
    _apply_overrides(job, queue, spec, container)
    if not container.get("image"):
        if not queue.image:
            raise ConfigError(f"queue {queue.name}: the pod template names no image and "
                              "PODGAHP_K8S_IMAGE is not set")
        container["image"] = queue.image
    spec["restartPolicy"] = "Never"
    # A pilot runs user code: it gets no API credentials unless the admin's template asks for them.
    spec.setdefault("automountServiceAccountToken", False)
    if job.wall_time_s:
        spec["activeDeadlineSeconds"] = job.wall_time_s
    _set_resources(container, job, queue)
    _safe_defaults(spec, container)
    _mount_inputs(spec, container, queue.workdir, name, staged)
    _set_command(container, job, queue, job_id_of(namespace, name), staged)
    check_pod(pod, _user_parts(job))
    return pod


def _user_parts(job: PilotJob) -> str:
    """What of the job's own values a pod carries, by size (for a reason when the pod is too large)."""
    arguments = sum(len(a.encode("utf-8", "surrogateescape")) for a in job.arguments)
    environment = sum(len(k.encode("utf-8", "surrogateescape")) + len(v.encode("utf-8", "surrogateescape"))
                      for k, v in job.environment)
    return (f"the job's Arguments take {arguments} bytes, its Environment {len(job.environment)} variables "
            f"in {environment} bytes")


def _metadata(meta: JsonObj, job: PilotJob, queue: QueueSettings, *, name: str, namespace: str, ce_name: str,
              generation: int, user: str, staged: List[StagedFile]) -> JsonObj:
    """The template's metadata, less what the API server sets, with podgahp's labels and annotations."""
    for key in ("name", "generateName", "namespace", "uid", "resourceVersion", "creationTimestamp",
                "ownerReferences", "finalizers"):
        meta.pop(key, None)
    labels = dict(meta.get("labels") or {})
    labels.update(owner_labels(ce_name, user))
    labels.update({
        LABEL_QUEUE: label_value(queue.name.lower()),
        LABEL_SANDBOX: sandbox_key(ce_name, user, job.sandbox_id),
        LABEL_GENERATION: str(generation),
    })
    named = _SANDBOX_JOB.search(job.sandbox_id)
    if named:
        labels[LABEL_JOB] = named.group(1)
    annotations = dict(meta.get("annotations") or {})
    annotations.update({ANN_SANDBOX_ID: job.sandbox_id, ANN_IWD: job.iwd, ANN_USER: user, ANN_CMD: job.executable})
    if job.stdout:
        annotations[ANN_OUT] = job.stdout
    if job.stderr:
        annotations[ANN_ERR] = job.stderr
    if any(f.key == PROXY_KEY for f in staged):
        annotations[ANN_PROXY_KEY] = PROXY_KEY
    meta.update(name=name, namespace=namespace, labels=labels, annotations=annotations)
    return meta


def _mount_inputs(spec: JsonObj, container: JsonObj, workdir: str, secret: str, staged: List[StagedFile]) -> None:
    """A scratch work directory (unless the template mounts one there) and the staged inputs from
    the pilot's Secret: all under ``INPUT_DIR``, and each at its place in the work directory."""
    input_dir = f"{workdir}/{INPUT_DIR}"
    volumes: List[JsonObj] = [v for v in (spec.get("volumes") or [])
                              if v.get("name") not in (WORK_VOLUME, INPUT_VOLUME)]
    mounts: List[JsonObj] = [m for m in (container.get("volumeMounts") or [])
                             if m.get("name") not in (WORK_VOLUME, INPUT_VOLUME)]
    if not any(m.get("mountPath", "").rstrip("/") == workdir for m in mounts):
        volumes.append({"name": WORK_VOLUME, "emptyDir": {}})
        mounts.append({"name": WORK_VOLUME, "mountPath": workdir})
    volumes.append({"name": INPUT_VOLUME, "secret": {
        "secretName": secret, "defaultMode": 0o444,
        "items": [{"key": f.key, "path": f.path, "mode": f.mode} for f in staged]}})
    mounts.append({"name": INPUT_VOLUME, "mountPath": input_dir, "readOnly": True})
    for f in staged:
        mounts.append({"name": INPUT_VOLUME, "mountPath": f"{workdir}/{f.path}", "subPath": f.path,
                       "readOnly": True})
    spec["volumes"] = volumes
    container["volumeMounts"] = mounts
    container["workingDir"] = workdir


def _set_command(container: JsonObj, job: PilotJob, queue: QueueSettings, pod_job_id: str,
                 staged: List[StagedFile]) -> None:
    """The pilot's command, arguments and environment (its own, podgahp's, and where its
    credentials are)."""
    workdir = queue.workdir
    input_dir = f"{workdir}/{INPUT_DIR}"
    executable = f"{workdir}/{os.path.basename(job.executable)}"
    env: List[Tuple[str, str]] = list(job.environment)
    env += [("PODGAHP_JOB_ID", pod_job_id), ("PODGAHP_SANDBOX_ID", job.sandbox_id), ("PODGAHP_QUEUE", queue.name)]
    for f in staged:
        if f.key == PROXY_KEY:
            env.append(("X509_USER_PROXY", f"{input_dir}/{f.path}"))
        elif f.key == TOKEN_KEY:
            env.append(("BEARER_TOKEN_FILE", f"{input_dir}/{f.path}"))
    if job.stdin:
        # Kubernetes has no stdin redirection; a shell in the image does it.
        env.append(("PODGAHP_STDIN", f"{workdir}/{os.path.basename(job.stdin)}"))
        container["command"] = ["/bin/sh", "-c", 'exec "$0" "$@" < "$PODGAHP_STDIN"', executable]
    else:
        container["command"] = [executable]
    container["args"] = list(job.arguments)
    _merge_env(container, env)
