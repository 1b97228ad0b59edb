"""Settings of the simulated Kubernetes API server: nodes, timings, auth, RBAC denials, quota.

Owns only plain value objects; it must not know about HTTP, storage or the scheduler.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple


@dataclass(frozen=True)
class Taint:
    """A node taint, as in ``node.spec.taints[]``."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"
    """``NoSchedule``, ``PreferNoSchedule`` or ``NoExecute``."""


@dataclass(frozen=True)
class SimNode:
    """One simulated node and its allocatable capacity (quantity strings as in the API)."""

    name: str
    cpu: str = "4"
    memory: str = "16Gi"
    ephemeral_storage: str = "100Gi"
    gpus: int = 0
    """Allocatable ``nvidia.com/gpu``."""
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra labels; ``kubernetes.io/hostname``, ``kubernetes.io/os`` and ``kubernetes.io/arch`` are always set."""
    taints: Tuple[Taint, ...] = ()


@dataclass(frozen=True)
class RbacRule:
    """A denial: requests with this verb on this resource (``pods``, ``pods/log``, ``secrets`` ...) are 403.

    ``namespace`` ``None`` matches every namespace and cluster-scoped requests; ``verb`` and
    ``resource`` may be ``"*"``.
    """

    verb: str
    resource: str
    namespace: Optional[str] = None


@dataclass(frozen=True)
class PodQuota:
    """A ResourceQuota-like limit on the pods of a namespace (``None`` namespace: every namespace).

    ``hard`` keys as in ``ResourceQuota.spec.hard``: ``pods``, ``requests.cpu``, ``requests.memory``,
    ``limits.cpu``, ``limits.memory``, ``requests.nvidia.com/gpu``.  Terminal pods do not count.
    """

    name: str = "compute-resources"
    hard: Mapping[str, str] = field(default_factory=dict)
    namespace: Optional[str] = None


@dataclass(frozen=True)
class PodLimitRange:
    """A LimitRange of ``type: Container`` (``None`` namespace: every namespace): the LimitRanger
    admission plugin sets a container's missing limits from ``default`` and missing requests from
    ``default_request``, and refuses a container whose limit is over ``max`` (403)."""

    name: str = "limits"
    max: Mapping[str, str] = field(default_factory=dict)
    default: Mapping[str, str] = field(default_factory=dict)
    default_request: Mapping[str, str] = field(default_factory=dict)
    namespace: Optional[str] = None


def default_nodes() -> Tuple[SimNode, ...]:
    """Two plain worker nodes (4 CPUs, 16 GiB memory each)."""
    return (SimNode("sim-node-1"), SimNode("sim-node-2"))


def default_priority_classes() -> Dict[str, int]:
    """The two classes every real cluster has built in."""
    return {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulator can be configured with.  All durations are in seconds."""

    token: str = "podgahp-sim-token"
    """Bearer token every request must carry (401 otherwise)."""
    user: str = "system:serviceaccount:default:podgahp"
    """User name shown in RBAC 403 messages."""
    namespaces: Tuple[str, ...] = ("default",)
    """The namespaces that exist, besides ``kube-system``, ``kube-public`` and ``kube-node-lease``."""
    nodes: Tuple[SimNode, ...] = field(default_factory=default_nodes)
    priority_classes: Mapping[str, int] = field(default_factory=default_priority_classes)
    """PriorityClass name -> value; unknown ``priorityClassName`` on create is 403."""
    rbac_deny: Tuple[RbacRule, ...] = ()
    quota: Optional[PodQuota] = None
    limit_range: Optional[PodLimitRange] = None
    tick_seconds: float = 0.1
    """Period of the scheduler/kubelet loop."""
    run_seconds: float = 2.0
    """How long a container runs unless ``PODGAHP_SIM_RUN_SECONDS`` says otherwise."""
    container_create_seconds: float = 0.2
    """Time from binding to the container starting (image pull included)."""
    image_backoff_seconds: float = 1.0
    """First ``ImagePullBackOff`` period; doubles per failed pull, at most 300 s."""
    crash_backoff_seconds: float = 1.0
    """First ``CrashLoopBackOff`` period for restartPolicy Always/OnFailure; doubles, at most 300 s."""
    sigterm_exit_seconds: float = 1.0
    """How long a container takes to exit after SIGTERM (``PODGAHP_SIM_SIGTERM_SECONDS`` overrides)."""
    sigterm_exit_code: int = 143
    """Exit code of a container that exits on SIGTERM (``PODGAHP_SIM_SIGTERM_EXIT_CODE`` overrides)."""
    pullable_images: Optional[Tuple[str, ...]] = None
    """If set, only these images (as written in the pod, or normalised) can be pulled.  If ``None``,
    every valid reference is pullable except names containing ``does-not-exist``."""
    full_sync_below_pods: int = 100
    """Below this many pods every tick visits every pod; from it on a tick visits only the pods that
    changed, are due or wait for a node (:mod:`podgahp_sim.k8s.agenda`)."""
    full_sync_seconds: float = 300.0
    """In a large cluster, a pass over every pod this often all the same (as the kubelet's periodic sync)."""
    gc_seconds: float = 0.3
    """Delay before the garbage collector deletes an object whose owners are all gone."""
    events_max: int = 1000
    """Most core/v1 Events kept; the oldest are deleted first."""
    event_log_size: int = 1000
    """Number of watch events kept for resuming watches; older resource versions get 410 Expired."""
    watch_max_seconds: float = 1800.0
    """Longest watch without ``timeoutSeconds`` (the real server picks 30-60 minutes)."""
    bookmark_seconds: float = 60.0
    """Period of BOOKMARK events on watches that allow them."""
    toleration_seconds: int = 300
    """``tolerationSeconds`` of the default not-ready/unreachable tolerations added to every pod."""
    git_version: str = "v1.30.0"
    """The release the API server says it is (``/version``); what differs between releases follows it
    where the simulator models the difference (the default RBAC roles)."""
    runtime: str = "model"
    """How containers run: ``model`` (their behaviour read from ``PODGAHP_SIM_*`` variables, no
    process) or ``runc`` (each container a real process tree, :mod:`podgahp_sim.k8s.runc`)."""
    images: Mapping[str, str] = field(default_factory=dict)
    """With ``runc``: image reference -> root filesystem or image directory (:mod:`podgahp_sim.k8s.registry`);
    the only images the nodes can pull."""
    runtime_dir: str = "/var/lib/podgahp-sim"
    """With ``runc``: where each simulator keeps its containers' bundles, volumes and logs."""
    kubelet_sync_seconds: float = 1.0
    """With ``runc``: period of the kubelet's sync of a running pod: Secret and ConfigMap volumes
    follow their objects, local storage use is measured (a real kubelet: about a minute for volumes,
    10 s for storage)."""
    pids_limit: int = 4096
    """With ``runc``: most processes per container (a kubelet's ``podPidsLimit``; 0: no limit)."""
    container_log_max_bytes: int = 10 * 1024 * 1024
    """With ``runc``: a container log past this size starts again (the kubelet's ``containerLogMaxSize``)."""
    clock_offset_seconds: float = 0.0
    """How far the API server's clock is ahead of the machine's (negative: behind). It stamps the
    ``creationTimestamp`` of new pods and secrets and the ``Date`` of every answer; the kubelet's own
    times (container start and finish) stay on the machine's clock."""

    def release(self) -> Tuple[int, int]:
        """(major, minor) of :attr:`git_version`: ``v1.30.0`` -> (1, 30)."""
        major, minor = self.git_version.lstrip("v").split(".")[:2]
        return int(major), int(re.sub(r"\D.*", "", minor) or 0)

    def server_now(self) -> float:
        """The API server's clock, seconds since the epoch."""
        return time.time() + self.clock_offset_seconds
