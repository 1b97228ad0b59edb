"""A container's OCI runtime configuration (``config.json`` of a runc bundle) from its pod spec, as
the kubelet and containerd make it.

User and groups (``runAsUser``/``runAsGroup``/``supplementalGroups``/``fsGroup`` over the image's
``User`` and ``/etc/passwd``), the ``runAsNonRoot`` check, capabilities (containerd's default set,
``add``/``drop``, ``privileged``), ``allowPrivilegeEscalation`` (``noNewPrivileges``),
``readOnlyRootFilesystem``, the default mounts, masked and read-only paths, and the cgroup limits
from requests and limits (``memory.limit_in_bytes``; CFS quota and shares, as
``pkg/kubelet/cm/helpers_linux.go``).  The network namespace is the host's: pods reach services on
the host's loopback.  Seccomp and AppArmor profiles are not applied.

Pure functions over dicts; the image's files are read through :class:`~.registry.Image`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .envvars import ContainerConfigError
from .quantity import parse_quantity
from .registry import Image
from .store import JsonObj

#: containerd's default capabilities (``oci/spec.go``, ``defaultUnixCaps``).
DEFAULT_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
                "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
                "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE")
ALL_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
            "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
            "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
            "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
            "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
            "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
            "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
            "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ")
MASKED_PATHS = ("/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
                "/sys/devices/virtual/powercap")
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
CFS_PERIOD_US = 100000
MIN_SHARES = 2
SHM_BYTES = 64 * 1024 * 1024
MAX_PASSWD_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Mount:
    """One mount of the container (``mounts[]`` of the runtime configuration)."""

    destination: str
    source: str
    type: str = "bind"
    options: Tuple[str, ...] = ("rbind", "rprivate")

    def spec(self) -> JsonObj:
        return {"destination": self.destination, "type": self.type, "source": self.source,
                "options": list(self.options)}


def bind(destination: str, source: str, read_only: bool = False) -> Mount:
    return Mount(destination, source, "bind", ("rbind", "rprivate") + (("ro",) if read_only else ()))


@dataclass(frozen=True)
class User:
    uid: int
    gid: int
    groups: Tuple[int, ...] = ()


def _security(pod: JsonObj, container: JsonObj) -> Tuple[JsonObj, JsonObj]:
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    return pod_sc, container.get("securityContext") or {}


def _setting(pod_sc: JsonObj, sc: JsonObj, name: str) -> Any:
    return sc[name] if sc.get(name) is not None else pod_sc.get(name)


def _table(image: Image, path: str) -> List[List[str]]:
    found = image.find(path)
    if found is None:
        return []
    try:
        with open(found, "rb") as f:
            text = f.read(MAX_PASSWD_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def _passwd(image: Image, name: Optional[str] = None, uid: Optional[int] = None) -> Optional[List[str]]:
    for entry in _table(image, "/etc/passwd"):
        if len(entry) >= 4 and (entry[0] == name or (uid is not None and entry[2] == str(uid))):
            return entry
    return None


def _group_id(image: Image, group: str) -> Optional[int]:
    if group.isdigit():
        return int(group)
    for entry in _table(image, "/etc/group"):
        if len(entry) >= 3 and entry[0] == group and entry[2].isdigit():
            return int(entry[2])
    return None


def _pod_name(pod: JsonObj) -> str:
    meta = pod.get("metadata") or {}
    return "%s_%s(%s)" % (meta.get("name"), meta.get("namespace"), meta.get("uid"))


def resolve_user(pod: JsonObj, container: JsonObj, image: Image) -> User:
    """The process's uid, gid and supplementary groups; ``runAsNonRoot`` refuses root
    (``kubelet/kuberuntime/security_context_others.go (verifyRunAsNonRoot)``)."""
    pod_sc, sc = _security(pod, container)
    run_as_user = _setting(pod_sc, sc, "runAsUser")
    run_as_group = _setting(pod_sc, sc, "runAsGroup")
    name = ""
    uid: Optional[int] = None
    gid: Optional[int] = None
    user_part, _, group_part = image.user.partition(":")
    if run_as_user is None and user_part:
        if user_part.isdigit():
            uid = int(user_part)
        else:
            name = user_part
    if run_as_user is not None:
        uid = int(run_as_user)
    name_for_check = name
    if _setting(pod_sc, sc, "runAsNonRoot"):
        if run_as_user is not None and uid == 0:
            raise ContainerConfigError("CreateContainerConfigError",
                                       "container's runAsUser breaks non-root policy (pod: \"%s\", container: %s)"
                                       % (_pod_name(pod), container.get("name")))
        if uid is None and name_for_check:
            raise ContainerConfigError(
                "CreateContainerConfigError",
                "container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root "
                "(pod: \"%s\", container: %s)" % (name_for_check, _pod_name(pod), container.get("name")))
        if uid is None or uid == 0:
            raise ContainerConfigError("CreateContainerConfigError",
                                       "container has runAsNonRoot and image will run as root (pod: \"%s\", "
                                       "container: %s)" % (_pod_name(pod), container.get("name")))
    entry = _passwd(image, name=name or None, uid=uid)
    if uid is None:
        if name:
            if entry is None:
                raise ContainerConfigError("CreateContainerError",
                                           "unable to find user %s: no matching entries in passwd file" % name)
            uid = int(entry[2])
        else:
            uid = 0
    if group_part and run_as_group is None:
        gid = _group_id(image, group_part)
        if gid is None:
            raise ContainerConfigError("CreateContainerError",
                                       "unable to find group %s: no matching entries in group file" % group_part)
    if run_as_group is not None:
        gid = int(run_as_group)
    if gid is None:
        gid = int(entry[3]) if entry is not None and entry[3].isdigit() else 0
    groups: List[int] = []
    user_name = entry[0] if entry is not None else ""
    if user_name:
        for group in _table(image, "/etc/group"):
            if len(group) >= 4 and user_name in group[3].split(",") and group[2].isdigit():
                groups.append(int(group[2]))
    groups.extend(int(g) for g in pod_sc.get("supplementalGroups") or [])
    if pod_sc.get("fsGroup") is not None:
        groups.append(int(pod_sc["fsGroup"]))
    return User(uid, gid, tuple(dict.fromkeys(g for g in groups if g != gid)))


def fs_group(pod: JsonObj) -> Optional[int]:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def capabilities(pod: JsonObj, container: JsonObj) -> List[str]:
    _pod_sc, sc = _security(pod, container)
    if sc.get("privileged"):
        return list(ALL_CAPS)
    caps = sc.get("capabilities") or {}
    drop = {("CAP_" + str(c).upper()).replace("CAP_CAP_", "CAP_") for c in caps.get("drop") or []}
    add = {("CAP_" + str(c).upper()).replace("CAP_CAP_", "CAP_") for c in caps.get("add") or []}
    chosen = list(ALL_CAPS) if "CAP_ALL" in add else [c for c in DEFAULT_CAPS]
    if "CAP_ALL" in drop:
        chosen = []
    chosen = [c for c in chosen if c not in drop] + sorted(c for c in add if c in ALL_CAPS and c not in drop)
    return list(dict.fromkeys(chosen))


def _quantity(container: JsonObj, kind: str, name: str) -> Optional[Fraction]:
    value = ((container.get("resources") or {}).get(kind) or {}).get(name)
    return None if value is None else parse_quantity(str(value))


def resources(container: JsonObj, pids_limit: int) -> JsonObj:
    """``linux.resources``: memory limit, CFS quota from the CPU limit, shares from the CPU request."""
    memory = _quantity(container, "limits", "memory")
    cpu_limit = _quantity(container, "limits", "cpu")
    cpu_request = _quantity(container, "requests", "cpu")
    if cpu_request is None:
        cpu_request = cpu_limit
    result: JsonObj = {"devices": [{"allow": False, "access": "rwm"}]}
    if memory is not None and memory > 0:
        result["memory"] = {"limit": int(memory)}
    cpu: JsonObj = {"shares": max(MIN_SHARES, int(cpu_request * 1024)) if cpu_request is not None else MIN_SHARES}
    if cpu_limit is not None and cpu_limit > 0:
        cpu["quota"] = max(1000, int(cpu_limit * CFS_PERIOD_US))
        cpu["period"] = CFS_PERIOD_US
    result["cpu"] = cpu
    if pids_limit > 0:
        result["pids"] = {"limit": pids_limit}
    return result


def default_mounts() -> List[Mount]:
    return [
        Mount("/proc", "proc", "proc", ("nosuid", "noexec", "nodev")),
        Mount("/dev", "tmpfs", "tmpfs", ("nosuid", "strictatime", "mode=755", "size=65536k")),
        Mount("/dev/pts", "devpts", "devpts", ("nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620",
                                               "gid=5")),
        Mount("/dev/mqueue", "mqueue", "mqueue", ("nosuid", "noexec", "nodev")),
        Mount("/sys", "/sys", "bind", ("rbind", "nosuid", "noexec", "nodev", "ro")),
        Mount("/dev/shm", "shm", "tmpfs", ("nosuid", "noexec", "nodev", "mode=1777", "size=%d" % SHM_BYTES)),
    ]


def sort_mounts(mounts: Sequence[Mount]) -> List[Mount]:
    """By number of path components, so a mount never hides a deeper one (containerd ``sortMounts``)."""
    def depth(m: Mount) -> int:
        return len([p for p in m.destination.split("/") if p])
    return sorted(mounts, key=depth)


def runtime_config(pod: JsonObj, container: JsonObj, image: Image, *, argv: List[str], env: Dict[str, str],
                   user: User, mounts: Sequence[Mount], cgroups_path: str, pids_limit: int) -> JsonObj:
    """The ``config.json`` of the container's bundle (its root file system is ``rootfs`` beside it)."""
    _pod_sc, sc = _security(pod, container)
    caps = capabilities(pod, container)
    if not argv:
        raise ContainerConfigError("CreateContainerError", "failed to generate container spec: no command specified")
    cwd = str(container.get("workingDir") or image.working_dir or "/")
    process: JsonObj = {
        "terminal": False,
        "user": {"uid": user.uid, "gid": user.gid, **({"additionalGids": list(user.groups)} if user.groups else {})},
        "args": argv,
        "env": ["%s=%s" % item for item in env.items()],
        "cwd": cwd,
        "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        "noNewPrivileges": sc.get("allowPrivilegeEscalation") is False and not sc.get("privileged"),
    }
    privileged = bool(sc.get("privileged"))
    taken = {m.destination for m in mounts}
    return {
        "ociVersion": "1.0.2",
        "process": process,
        "root": {"path": "rootfs", "readonly": bool(sc.get("readOnlyRootFilesystem"))},
        "hostname": str((pod.get("metadata") or {}).get("name") or ""),
        "mounts": [m.spec() for m in sort_mounts([m for m in default_mounts() if m.destination not in taken]
                                                 + list(mounts))],
        "linux": {
            "cgroupsPath": cgroups_path,
            "resources": resources(container, pids_limit),
            "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
            "maskedPaths": [] if privileged else list(MASKED_PATHS),
            "readonlyPaths": [] if privileged else list(READONLY_PATHS),
        },
    }
