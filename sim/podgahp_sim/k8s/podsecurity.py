"""Pod Security admission (``PodSecurity``, on by default from 1.23): a namespace's
``pod-security.kubernetes.io/enforce`` label (``privileged``, ``baseline``, ``restricted``) refuses a
pod that breaks the Pod Security Standards of that level, with the server's words
(``violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "pilot" must set
securityContext.runAsNonRoot=true), ...``): one ``reason (detail)`` per failed check, in the order of
the checks' names, as the policy package reports them. What the simulator checks is the standards'
"latest" version, for Linux pods; the ``audit`` and ``warn`` labels are not simulated.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import forbidden
from .store import JsonObj

ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"
LEVELS = ("privileged", "baseline", "restricted")

BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                                "projected", "secret"})
VOLUME_SOURCES = ("awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "fc", "flexVolume",
                  "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", "iscsi", "nfs",
                  "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume")
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

Container = JsonObj
Violation = Tuple[str, str]


def admit(pod: JsonObj, namespace_labels: Mapping[str, str]) -> None:
    """Refuse ``pod`` (403) when it breaks its namespace's enforced level."""
    level = namespace_labels.get(ENFORCE, "privileged")
    if level not in LEVELS or level == "privileged":
        return
    found = violations(pod, level)
    if found:
        version = namespace_labels.get(ENFORCE_VERSION) or "latest"
        why = ", ".join("%s (%s)" % (reason, detail) if detail else reason for reason, detail in found)
        name = str((pod.get("metadata") or {}).get("name") or "")
        raise forbidden("pods", name, 'violates PodSecurity "%s:%s": %s' % (level, version, why))


def violations(pod: JsonObj, level: str) -> List[Violation]:
    """The failed checks of ``level`` (baseline's, and for restricted its own, which replace the
    baseline checks they tighten), ordered by the checks' names."""
    checks = dict(BASELINE)
    if level == "restricted":
        for name in ("capabilities_baseline", "hostPathVolumes", "seccompProfile_baseline"):
            checks.pop(name)
        checks.update(RESTRICTED)
    spec = pod.get("spec") or {}
    found = []
    for name in sorted(checks):
        result = checks[name](spec)
        if result is not None:
            found.append(result)
    return found


# ------------------------------------------------------------------ helpers


def _containers(spec: JsonObj) -> List[Container]:
    return [c for key in _CONTAINER_LISTS for c in spec.get(key) or [] if isinstance(c, dict)]


def _context(obj: JsonObj) -> JsonObj:
    context = obj.get("securityContext")
    return context if isinstance(context, dict) else {}


def _names(kind: str, names: Sequence[str]) -> str:
    """``container "a"`` or ``containers "a", "b"``."""
    quoted = ", ".join('"%s"' % n for n in names)
    return "%s %s" % (kind if len(names) == 1 else kind + "s", quoted)


def _each(spec: JsonObj, bad: Callable[[Container], bool]) -> List[str]:
    return [str(c.get("name")) for c in _containers(spec) if bad(c)]


def _must(reason: str, kind: str, names: Sequence[str], verb: str) -> Optional[Violation]:
    if not names:
        return None
    return reason, "%s must %s" % (_names(kind, names), verb)


# ------------------------------------------------------------------ baseline


def _privileged(spec: JsonObj) -> Optional[Violation]:
    return _must("privileged", "container", _each(spec, lambda c: _context(c).get("privileged") is True),
                 "not set securityContext.privileged=true")


def _host_namespaces(spec: JsonObj) -> Optional[Violation]:
    used = ["%s=true" % key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key) is True]
    return ("host namespaces", ", ".join(used)) if used else None


def _host_path(spec: JsonObj) -> Optional[Violation]:
    names = [str(v.get("name")) for v in spec.get("volumes") or [] if isinstance(v, dict) and v.get("hostPath")]
    return ("hostPath volumes", _names("volume", names)) if names else None


def _host_ports(spec: JsonObj) -> Optional[Violation]:
    names: List[str] = []
    ports: List[str] = []
    for c in _containers(spec):
        used = [p.get("hostPort") for p in c.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")]
        if used:
            names.append(str(c.get("name")))
            ports.extend(str(p) for p in used)
    if not names:
        return None
    return "hostPort", "%s %s %s %s" % (_names("container", names), "uses" if len(names) == 1 else "use",
                                        "hostPort" if len(ports) == 1 else "hostPorts", ", ".join(ports))


def _added(c: Container) -> List[str]:
    capabilities = _context(c).get("capabilities")
    added = capabilities.get("add") if isinstance(capabilities, dict) else None
    return [str(a) for a in added or []]


def _capabilities_not_in(allowed: frozenset) -> Callable[[JsonObj], List[str]]:  # type: ignore[type-arg]
    def details(spec: JsonObj) -> List[str]:
        out = []
        for c in _containers(spec):
            extra = [a for a in _added(c) if a not in allowed]
            if extra:
                out.append('container "%s" must not include %s in securityContext.capabilities.add'
                           % (c.get("name"), ", ".join('"%s"' % a for a in extra)))
        return out
    return details


def _capabilities_baseline(spec: JsonObj) -> Optional[Violation]:
    details = _capabilities_not_in(BASELINE_CAPABILITIES)(spec)
    return ("non-default capabilities", "; ".join(details)) if details else None


def _proc_mount(spec: JsonObj) -> Optional[Violation]:
    return _must("procMount", "container", _each(spec, lambda c: _context(c).get("procMount") not in (None, "Default")),
                 'not set securityContext.procMount to "Unmasked"')


def _seccomp_type(obj: JsonObj) -> Optional[str]:
    profile = _context(obj).get("seccompProfile")
    return str(profile.get("type")) if isinstance(profile, dict) and profile.get("type") else None


def _seccomp_baseline(spec: JsonObj) -> Optional[Violation]:
    details = []
    if _seccomp_type(spec) == "Unconfined":
        details.append('pod must not set securityContext.seccompProfile.type to "Unconfined"')
    names = _each(spec, lambda c: _seccomp_type(c) == "Unconfined")
    if names:
        details.append('%s must not set securityContext.seccompProfile.type to "Unconfined"'
                       % _names("container", names))
    return ("seccompProfile", "; ".join(details)) if details else None


BASELINE: Dict[str, Callable[[JsonObj], Optional[Violation]]] = {
    "capabilities_baseline": _capabilities_baseline, "hostNamespaces": _host_namespaces,
    "hostPathVolumes": _host_path, "hostPorts": _host_ports, "privileged": _privileged, "procMount": _proc_mount,
    "seccompProfile_baseline": _seccomp_baseline,
}


# ------------------------------------------------------------------ restricted


def _allow_privilege_escalation(spec: JsonObj) -> Optional[Violation]:
    return _must("allowPrivilegeEscalation != false", "container",
                 _each(spec, lambda c: _context(c).get("allowPrivilegeEscalation") is not False),
                 "set securityContext.allowPrivilegeEscalation=false")


def _capabilities_restricted(spec: JsonObj) -> Optional[Violation]:
    details = []
    undropped = _each(spec, lambda c: "ALL" not in [str(d) for d in (
        (_context(c).get("capabilities") or {}).get("drop") or [])])
    if undropped:
        details.append('%s must set securityContext.capabilities.drop=["ALL"]' % _names("container", undropped))
    details.extend(_capabilities_not_in(frozenset({"NET_BIND_SERVICE"}))(spec))
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def _restricted_volumes(spec: JsonObj) -> Optional[Violation]:
    bad = []
    for v in spec.get("volumes") or []:
        if isinstance(v, dict):
            kinds = [k for k in VOLUME_SOURCES if v.get(k) is not None]
            if kinds:
                bad.append((str(v.get("name")), kinds[0]))
    if not bad:
        return None
    if len(bad) == 1:
        return "restricted volume types", 'volume "%s" uses restricted volume type "%s"' % bad[0]
    return "restricted volume types", "%s use restricted volume types %s" % (
        _names("volume", [n for n, _ in bad]), ", ".join('"%s"' % k for k in dict.fromkeys(k for _, k in bad)))


def _run_as_non_root(spec: JsonObj) -> Optional[Violation]:
    pod_value = _context(spec).get("runAsNonRoot")
    details = []
    if pod_value is False:
        details.append("pod must not set securityContext.runAsNonRoot=false")
    explicit_false = _each(spec, lambda c: _context(c).get("runAsNonRoot") is False)
    if explicit_false:
        details.append("%s must not set securityContext.runAsNonRoot=false" % _names("container", explicit_false))
    if pod_value is not True:
        unset = _each(spec, lambda c: _context(c).get("runAsNonRoot") is None)
        if unset:
            details.append("pod or %s must set securityContext.runAsNonRoot=true" % _names("container", unset))
    return ("runAsNonRoot != true", "; ".join(details)) if details else None


def _run_as_user(spec: JsonObj) -> Optional[Violation]:
    details = []
    if _context(spec).get("runAsUser") == 0:
        details.append("pod must not set runAsUser=0")
    names = _each(spec, lambda c: _context(c).get("runAsUser") == 0)
    if names:
        details.append("%s must not set runAsUser=0" % _names("container", names))
    return ("runAsUser=0", "; ".join(details)) if details else None


def _seccomp_restricted(spec: JsonObj) -> Optional[Violation]:
    allowed = ("RuntimeDefault", "Localhost")
    pod_type = _seccomp_type(spec)
    details = []
    if pod_type is not None and pod_type not in allowed:
        details.append('pod must not set securityContext.seccompProfile.type to "%s"' % pod_type)
    bad = [(str(c.get("name")), _seccomp_type(c)) for c in _containers(spec)
           if _seccomp_type(c) is not None and _seccomp_type(c) not in allowed]
    for name, kind in bad:
        details.append('container "%s" must not set securityContext.seccompProfile.type to "%s"' % (name, kind))
    if pod_type not in allowed:
        unset = _each(spec, lambda c: _seccomp_type(c) is None)
        if unset:
            details.append('pod or %s must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
                           % _names("container", unset))
    return ("seccompProfile", "; ".join(details)) if details else None


RESTRICTED: Dict[str, Callable[[JsonObj], Optional[Violation]]] = {
    "allowPrivilegeEscalation": _allow_privilege_escalation, "capabilities_restricted": _capabilities_restricted,
    "restrictedVolumes": _restricted_volumes, "runAsNonRoot": _run_as_non_root, "runAsUser": _run_as_user,
    "seccompProfile_restricted": _seccomp_restricted,
}

