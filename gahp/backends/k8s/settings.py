"""Settings of the Kubernetes backend: the knobs it reads, grouped into frozen value objects.

Owns knob names, defaults and validation. Every knob is read through :class:`gahp.core.config.Knobs`;
a queue's knob ``PODGAHP_K8S_<QUEUE>_<WHAT>`` falls back to the global ``PODGAHP_K8S_<WHAT>``.
Nothing here talks to a cluster or touches files other than naming them: a missing kubeconfig or
pod template is reported later by ping and submit, so that a broken file never stops the GAHP.
"""

from __future__ import annotations

import hashlib
import re
import socket
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from gahp.rules.blackhole import GuardSettings
from gahp.core.config import Knobs
from gahp.core.errors import ConfigError

PREFIX = "PODGAHP_K8S_"

#: Resources whose limit may be set equal to the request by ``PODGAHP_K8S_LIMITS``.
LIMITABLE = ("cpu", "memory", "ephemeral-storage")

#: What happens to a pilot whose pod was evicted, preempted or shut down with its node.
DISRUPTION_ACTIONS = ("complete", "hold")

#: How a pilot asking for a whole node is sized (``largest`` node, or held).
WHOLE_NODE_MODES = ("largest", "hold")

_QUEUE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")

#: Where the kubelet mounts a pod's service account.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

#: Name of the queue used when ``PODGAHP_K8S_QUEUES`` is not set.
IMPLICIT_QUEUE = "default"


def label_value(text: str) -> str:
    """``text`` made into a valid label value: allowed characters, at most 63, alphanumeric ends."""
    value = _LABEL_VALUE_BAD.sub("-", text)[:63].strip("-_.")
    return value or "unknown"


#: A label value (``k8s.io/apimachinery/pkg/util/validation``: at most 63 characters).
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
#: Hex digits of the hash that ends the label of a CE name that is not a label value itself.
CE_HASH_LENGTH = 16


def ce_label(name: str) -> str:
    """The label value naming a CE: the name itself when it is a valid label value, else a readable
    part of it and a hash of the whole name. Label values are cut at 63 characters and limited to
    ``[A-Za-z0-9_.-]``: two CE names differing only past the 63rd character, or only in characters
    replaced, would otherwise share a label, and each CE's reaper would take the other's pods for its
    own orphans."""
    if name and _LABEL_VALUE.match(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:CE_HASH_LENGTH]
    readable = _LABEL_VALUE_BAD.sub("-", name)[:63 - CE_HASH_LENGTH - 1].strip("-_.")
    return f"{readable}-{digest}" if readable else digest


@dataclass(frozen=True)
class QueueSettings:
    """One queue: where its pods go and how they are built. Knob ``PODGAHP_K8S_[<QUEUE>_]<WHAT>``."""

    name: str
    """Queue name as listed in ``PODGAHP_K8S_QUEUES`` (matched case-insensitively to ``Queue``)."""
    kubeconfig: Optional[str]
    """``KUBECONFIG``: kubeconfig file; default empty = the pod's service account when running in a
    cluster (``KUBERNETES_SERVICE_HOST`` set), otherwise no cluster is configured."""
    context: Optional[str]
    """``CONTEXT``: kubeconfig context; default empty = the file's ``current-context``."""
    namespace: Optional[str]
    """``NAMESPACE``: namespace of the pods; default empty = the context's namespace, else ``default``."""
    pod_template: Optional[str]
    """``POD_TEMPLATE``: YAML Pod manifest the pods are built from; default empty = a bare pod."""
    image: Optional[str]
    """``IMAGE``: container image when the template names none; default empty."""
    max_pods: int
    """``MAX_PODS``: most live (pending or running) pods of the queue; default 0 = no cap."""
    unschedulable_timeout_s: int
    """``UNSCHEDULABLE_TIMEOUT_SECONDS``: seconds an unschedulable pod may wait before the pilot is
    held; default 3600, 0 = wait for ever."""
    delete_grace_s: int
    """``DELETE_GRACE_SECONDS``: grace period of cancel's delete, seconds; default 30."""
    limits: Tuple[str, ...]
    """``LIMITS``: resources whose limit equals the request (of cpu, memory, ephemeral-storage);
    default all three (Guaranteed QoS); ``none`` for requests only. GPUs always get a limit."""
    cpu_request_percent: int
    """``CPU_REQUEST_PERCENT``: CPU request as a percentage of the pilot's cores; default 100."""
    workdir: str
    """``WORKDIR``: the pilot's working directory in the container; default ``/pilot``."""
    token_file: Optional[str]
    """``TOKEN_FILE``: a token file staged with every pilot (``BEARER_TOKEN_FILE``); default empty."""
    allowed_images: Tuple[str, ...]
    """``ALLOWED_IMAGES``: shell patterns a job's ``k8s_image`` must match; default empty = no image
    override is accepted (job ads are user input: ``+remote_CERequirements`` reaches this)."""
    allowed_priority_classes: Tuple[str, ...]
    """``ALLOWED_PRIORITY_CLASSES``: patterns a job's ``k8s_priority_class`` must match; default empty =
    none accepted."""
    max_cpus: int
    """``MAX_CPUS``: most cores one pilot of the queue may ask for; default 8."""
    max_memory_mb: int
    """``MAX_MEMORY_MB``: most memory (MiB) one pilot may ask for; default 32768."""
    max_gpus: int
    """``MAX_GPUS``: most GPUs one pilot may ask for; default 0 (set it on GPU queues)."""
    disk_limit_floor_mb: int
    """``DISK_LIMIT_FLOOR_MB``: smallest ephemeral-storage limit of a pod (MiB); default 10240."""
    disruption_action: str
    """``DISRUPTION_ACTION``: ``complete`` (default) reports evicted/preempted pilots as completed
    with an ``ExitReason``; ``hold`` holds them with a retryable hold code."""
    whole_node: str = "largest"
    """``WHOLE_NODE``: how a pilot asking for a whole node (``WholeNodes``) is sized: ``largest``
    (default) the largest node the queue's pods may run on (needs ``list nodes``), unless
    ``WHOLE_NODE_CPUS`` and ``WHOLE_NODE_MEMORY_MB`` give the size; ``hold`` refuses such pilots."""
    whole_node_cpus: int = 0
    """``WHOLE_NODE_CPUS``: cores of a whole node of the queue; default 0 = found from the nodes."""
    whole_node_memory_mb: int = 0
    """``WHOLE_NODE_MEMORY_MB``: memory (MiB) of a whole node of the queue; default 0 = found from
    the nodes (95% of the node's allocatable memory)."""

    @property
    def cluster_key(self) -> Tuple[Optional[str], Optional[str]]:
        """Queues with the same key share one API client."""
        return (self.kubeconfig, self.context)


@dataclass(frozen=True)
class KubernetesSettings:
    """Settings of the whole backend (global knobs only) plus its queues."""

    queues: Dict[str, QueueSettings]
    """``PODGAHP_K8S_QUEUES``: queue names; default empty = one queue ``default`` from global knobs.
    Keys are lower-cased."""
    default_queue: str
    """``PODGAHP_K8S_DEFAULT_QUEUE``: queue of pilots without ``Queue``; default the first queue."""
    ce_name: str
    """``PODGAHP_K8S_CE_NAME``: the name marking this CE's pods; default ``FULL_HOSTNAME``. Held as its
    label value (:func:`ce_label`: the name, or part of it and a hash when it is no label value)."""
    connect_timeout_s: float
    """``PODGAHP_K8S_CONNECT_TIMEOUT_SECONDS``: TCP/TLS connect timeout of API calls; default 5."""
    request_timeout_s: float
    """``PODGAHP_K8S_REQUEST_TIMEOUT_SECONDS``: read timeout of one API call; default 20."""
    retries: int
    """``PODGAHP_K8S_RETRIES``: further attempts after a transient API failure; default 3."""
    backoff_s: float
    """``PODGAHP_K8S_BACKOFF_SECONDS``: first back-off between attempts, doubled each time; default 0.5."""
    backoff_max_s: float
    """``PODGAHP_K8S_BACKOFF_MAX_SECONDS``: longest back-off (also caps ``Retry-After``); default 10."""
    throttle_wait_s: float
    """``PODGAHP_K8S_THROTTLE_WAIT_SECONDS``: how long in all one request waits through ``429`` answers
    (API Priority and Fairness) before they count among the retries; default 120."""
    watch_timeout_s: int
    """``PODGAHP_K8S_WATCH_TIMEOUT_SECONDS``: length of one watch request; default 240."""
    sync_timeout_s: float
    """``PODGAHP_K8S_SYNC_TIMEOUT_SECONDS``: how long status waits for a namespace's first LIST; default 20."""
    secret_max_bytes: int
    """``PODGAHP_K8S_SECRET_MAX_BYTES``: largest staged input (all files), bytes; default 1048576
    (the Kubernetes Secret limit)."""
    output_max_bytes: int
    """``PODGAHP_K8S_OUTPUT_MAX_BYTES``: most bytes of pod log written to ``Out``; default 0 = all."""
    finished_retention_s: int
    """``PODGAHP_K8S_FINISHED_RETENTION_SECONDS``: a finished pod whose outcome was reported is
    deleted this long after the report; default 3600."""
    unreported_retention_s: int
    """``PODGAHP_K8S_UNREPORTED_RETENTION_SECONDS``: a finished pod never reported is deleted this
    long after it finished; default 604800 (7 days)."""
    reap_interval_s: int
    """``PODGAHP_K8S_REAP_INTERVAL_SECONDS``: period of the clean-up pass; default 300, 0 = never."""
    cancel_retry_max_s: int
    """``PODGAHP_K8S_CANCEL_RETRY_MAX_SECONDS``: how long a failed cancel is retried in the background;
    default 3600."""
    service_account_dir: str
    """``PODGAHP_K8S_SERVICE_ACCOUNT_DIR``: the in-cluster service account's directory (``token``,
    ``ca.crt``, ``namespace``), used when a queue has no kubeconfig and ``KUBERNETES_SERVICE_HOST`` is
    set; default ``/var/run/secrets/kubernetes.io/serviceaccount``."""
    allow_insecure_http: bool
    """``PODGAHP_K8S_ALLOW_INSECURE_HTTP``: send credentials to an ``http://`` API server; default
    false (a credential over plain HTTP is refused, as client-go refuses it)."""
    blackhole: GuardSettings = field(default_factory=lambda: GuardSettings.from_knobs(Knobs({})))
    """``PODGAHP_BLACKHOLE_*``, ``PODGAHP_STATE_DIR``: when a queue is closed as a black hole (gahp.rules.blackhole)."""

    def queue(self, name: Optional[str]) -> QueueSettings:
        """The queue named by the submit ad's ``Queue`` (case-insensitive), or the default queue."""
        key = (name or self.default_queue).lower()
        try:
            return self.queues[key]
        except KeyError:
            raise ConfigError(not_configured(name, sorted(self.queues))) from None

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> KubernetesSettings:
        names = queue_names(knobs)
        queues: Dict[str, QueueSettings] = {}
        for name in names:
            if not _QUEUE_NAME.match(name):
                raise ConfigError(f"{PREFIX}QUEUES: queue name {name!r} is not a letter followed by "
                                  "letters, digits or underscores")
            if name.lower() in queues:
                raise ConfigError(f"{PREFIX}QUEUES: queue {name!r} is listed twice")
            queues[name.lower()] = _queue_from_knobs(knobs, name, implicit=names == [IMPLICIT_QUEUE])
        default_queue = knobs.string(PREFIX + "DEFAULT_QUEUE", names[0])
        if default_queue.lower() not in queues:
            raise ConfigError(f"{PREFIX}DEFAULT_QUEUE = {default_queue!r} is not one of the queues in "
                              f"{PREFIX}QUEUES ({', '.join(names)})")
        host = knobs.raw("FULL_HOSTNAME") or socket.getfqdn()
        return cls(
            queues=queues,
            default_queue=default_queue.lower(),
            ce_name=ce_label(knobs.string(PREFIX + "CE_NAME", host)),
            connect_timeout_s=knobs.number(PREFIX + "CONNECT_TIMEOUT_SECONDS", 5.0, minimum=0.1),
            request_timeout_s=knobs.number(PREFIX + "REQUEST_TIMEOUT_SECONDS", 20.0, minimum=0.1),
            retries=knobs.integer(PREFIX + "RETRIES", 3, minimum=0, maximum=20),
            backoff_s=knobs.number(PREFIX + "BACKOFF_SECONDS", 0.5, minimum=0),
            backoff_max_s=knobs.number(PREFIX + "BACKOFF_MAX_SECONDS", 10.0, minimum=0),
            throttle_wait_s=knobs.number(PREFIX + "THROTTLE_WAIT_SECONDS", 120.0, minimum=0, maximum=3600),
            watch_timeout_s=knobs.integer(PREFIX + "WATCH_TIMEOUT_SECONDS", 240, minimum=1),
            sync_timeout_s=knobs.number(PREFIX + "SYNC_TIMEOUT_SECONDS", 20.0, minimum=0.1),
            secret_max_bytes=knobs.integer(PREFIX + "SECRET_MAX_BYTES", 1024 * 1024, minimum=1,
                                           maximum=1024 * 1024),
            output_max_bytes=knobs.integer(PREFIX + "OUTPUT_MAX_BYTES", 0, minimum=0),
            finished_retention_s=knobs.integer(PREFIX + "FINISHED_RETENTION_SECONDS", 3600, minimum=0),
            unreported_retention_s=knobs.integer(PREFIX + "UNREPORTED_RETENTION_SECONDS", 7 * 86400,
                                                 minimum=0),
            reap_interval_s=knobs.integer(PREFIX + "REAP_INTERVAL_SECONDS", 300, minimum=0),
            cancel_retry_max_s=knobs.integer(PREFIX + "CANCEL_RETRY_MAX_SECONDS", 3600, minimum=0),
            service_account_dir=knobs.string(PREFIX + "SERVICE_ACCOUNT_DIR", SERVICE_ACCOUNT_DIR),
            allow_insecure_http=knobs.boolean(PREFIX + "ALLOW_INSECURE_HTTP", False),
            blackhole=GuardSettings.from_knobs(knobs),
        )


class _QueueKnobs:
    """Reads ``PODGAHP_K8S_<QUEUE>_<WHAT>``, else ``PODGAHP_K8S_<WHAT>``, naming the knob used."""

    def __init__(self, knobs: Knobs, queue: str, implicit: bool) -> None:
        self.knobs = knobs
        self.queue_prefix = None if implicit else f"{PREFIX}{queue.upper()}_"

    def name(self, what: str) -> str:
        if self.queue_prefix and self.knobs.raw(self.queue_prefix + what) is not None:
            return self.queue_prefix + what
        return PREFIX + what

    def optional(self, what: str) -> Optional[str]:
        return self.knobs.optional(self.name(what))

    def string(self, what: str, default: str) -> str:
        return self.knobs.string(self.name(what), default)

    def integer(self, what: str, default: int, minimum: Optional[int] = None) -> int:
        return self.knobs.integer(self.name(what), default, minimum=minimum)

    def names(self, what: str, default: Tuple[str, ...]) -> Tuple[str, ...]:
        return tuple(self.knobs.names(self.name(what), list(default)))


def _queue_from_knobs(knobs: Knobs, name: str, implicit: bool) -> QueueSettings:
    q = _QueueKnobs(knobs, name, implicit)
    limits = tuple(n.lower() for n in q.names("LIMITS", LIMITABLE))
    if limits in (("none",), ()):
        limits = ()
    for resource in limits:
        if resource not in LIMITABLE:
            raise ConfigError(f"{q.name('LIMITS')} = {', '.join(limits)!r}: {resource!r} is not one of "
                              f"{', '.join(LIMITABLE)} (or none)")
    action = q.string("DISRUPTION_ACTION", "complete").lower()
    if action not in DISRUPTION_ACTIONS:
        raise ConfigError(f"{q.name('DISRUPTION_ACTION')} = {action!r} is not one of "
                          f"{', '.join(DISRUPTION_ACTIONS)}")
    workdir = q.string("WORKDIR", "/pilot").rstrip("/") or "/"
    if not workdir.startswith("/") or workdir == "/":
        raise ConfigError(f"{q.name('WORKDIR')} = {workdir!r} is not an absolute directory other than /")
    namespace = q.optional("NAMESPACE")
    if namespace is not None and not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", namespace):
        raise ConfigError(f"{q.name('NAMESPACE')} = {namespace!r} is not a namespace name "
                          "(lower-case letters, digits and '-')")
    whole_node = q.string("WHOLE_NODE", "largest").lower()
    if whole_node not in WHOLE_NODE_MODES:
        raise ConfigError(f"{q.name('WHOLE_NODE')} = {whole_node!r} is not one of {', '.join(WHOLE_NODE_MODES)}")
    whole_cpus = q.integer("WHOLE_NODE_CPUS", 0, minimum=0)
    whole_memory = q.integer("WHOLE_NODE_MEMORY_MB", 0, minimum=0)
    if bool(whole_cpus) != bool(whole_memory):
        raise ConfigError(f"{q.name('WHOLE_NODE_CPUS')} and {q.name('WHOLE_NODE_MEMORY_MB')} give a whole node's "
                          "size together: set both, or neither")
    percent = q.integer("CPU_REQUEST_PERCENT", 100, minimum=1)
    if percent > 100:
        raise ConfigError(f"{q.name('CPU_REQUEST_PERCENT')} = {percent} is above the maximum of 100")
    return QueueSettings(
        name=name,
        kubeconfig=q.optional("KUBECONFIG"),
        context=q.optional("CONTEXT"),
        namespace=namespace,
        pod_template=q.optional("POD_TEMPLATE"),
        image=q.optional("IMAGE"),
        max_pods=q.integer("MAX_PODS", 0, minimum=0),
        unschedulable_timeout_s=q.integer("UNSCHEDULABLE_TIMEOUT_SECONDS", 3600, minimum=0),
        delete_grace_s=q.integer("DELETE_GRACE_SECONDS", 30, minimum=0),
        limits=limits,
        cpu_request_percent=percent,
        workdir=workdir,
        token_file=q.optional("TOKEN_FILE"),
        allowed_images=q.names("ALLOWED_IMAGES", ()),
        allowed_priority_classes=q.names("ALLOWED_PRIORITY_CLASSES", ()),
        max_cpus=q.integer("MAX_CPUS", 8, minimum=1),
        max_memory_mb=q.integer("MAX_MEMORY_MB", 32768, minimum=1),
        max_gpus=q.integer("MAX_GPUS", 0, minimum=0),
        disk_limit_floor_mb=q.integer("DISK_LIMIT_FLOOR_MB", 10240, minimum=0),
        disruption_action=action,
        whole_node=whole_node,
        whole_node_cpus=whole_cpus,
        whole_node_memory_mb=whole_memory,
    )


def queue_names(knobs: Knobs) -> List[str]:
    """The queues ``PODGAHP_K8S_QUEUES`` lists, as written; unset or empty: the one implicit queue."""
    return knobs.names(PREFIX + "QUEUES", []) or [IMPLICIT_QUEUE]


def not_configured(name: Optional[str], names: Sequence[str]) -> str:
    """Why a pilot asking for queue ``name`` is refused when the queues are ``names``."""
    return f"queue {name!r} is not configured: PODGAHP_K8S_QUEUES lists {', '.join(names) or 'no queues'}"
