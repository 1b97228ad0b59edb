"""A pod's volumes on the node's disk, as the kubelet lays them out.

Secret, projected and downward-API volumes are tmpfs mounts whose files the kubelet's atomic writer
(``pkg/volume/util/atomic_writer.go``) keeps: the payload in a timestamped directory, ``..data`` a
symlink to it, each visible name a symlink through ``..data``, so that an update (the kubelet's
periodic sync) replaces every file at once.  ConfigMap volumes are written the same way on disk.
emptyDir is a directory of mode 0777 on disk, or a tmpfs (``medium: Memory``) sized by its
``sizeLimit`` or else the pod's memory limit.  Files get the item's mode, else the volume's
``defaultMode`` (0644); with a pod ``fsGroup`` they belong to that group and are group readable
(``pkg/volume/volume_linux.go (SetVolumeOwnership)``).

Owns the payload of each volume (:func:`payloads`) and writing it (:class:`AtomicDir`); the runtime
decides where and mounts.  Objects are read through a lookup callable.
"""

from __future__ import annotations

import base64
import os
import shutil
import stat
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from .envvars import ContainerConfigError, Lookup, field_value, resource_value
from .store import JsonObj

DEFAULT_MODE = 0o644
DATA_LINK = "..data"
#: Volume kinds the simulated runtime makes, and their directory name under the pod (as the kubelet's plugins).
PLUGIN_DIRS = {"secret": "kubernetes.io~secret", "configMap": "kubernetes.io~configmap",
               "projected": "kubernetes.io~projected", "downwardAPI": "kubernetes.io~downward-api",
               "emptyDir": "kubernetes.io~empty-dir"}
#: Volume kinds whose files are in memory (a tmpfs of their own).
TMPFS_KINDS = ("secret", "projected", "downwardAPI")

#: (path, data, mode) of each file of a volume.
Payload = Dict[str, Tuple[bytes, int]]


@dataclass(frozen=True)
class Identity:
    """What the kubelet asks the API server for a service-account token volume."""

    token: Callable[[str, str], str]
    """(namespace, service account) -> a token the API server accepts."""
    ca_pem: bytes
    """The cluster CA (``kube-root-ca.crt``), empty without TLS."""


def volume_kind(volume: JsonObj) -> Optional[str]:
    for kind in PLUGIN_DIRS:
        if isinstance(volume.get(kind), dict) or (kind == "emptyDir" and "emptyDir" in volume):
            return kind
    return None


def _check_path(path: str, volume: str) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts or path.startswith(".."):
        raise ContainerConfigError("ContainerCreating",
                                   'MountVolume.SetUp failed for volume "%s" : invalid path %r' % (volume, path))
    return path


def _mode(value: object, default: int) -> int:
    return value & 0o777 if isinstance(value, int) and not isinstance(value, bool) else default


def _key_files(obj: JsonObj, kind: str) -> Dict[str, bytes]:
    files: Dict[str, bytes] = {}
    if kind == "secrets":
        for key, value in (obj.get("data") or {}).items():
            try:
                files[key] = base64.b64decode(str(value))
            except ValueError:
                continue
    else:
        files.update({k: str(v).encode() for k, v in (obj.get("data") or {}).items()})
        for key, value in (obj.get("binaryData") or {}).items():
            try:
                files[key] = base64.b64decode(str(value))
            except ValueError:
                continue
    return files


def _keyed(source: JsonObj, kind: str, name: str, namespace: str, default_mode: int, lookup: Lookup,
           volume: str, ca_pem: bytes) -> Payload:
    """Files of a Secret or ConfigMap source (``items`` pick keys; otherwise every key)."""
    obj = lookup(kind, namespace, name)
    if obj is None and kind == "configmaps" and name == "kube-root-ca.crt":
        obj = {"data": {"ca.crt": ca_pem.decode("ascii", "replace")}}
    what = "secret" if kind == "secrets" else "configmap"
    if obj is None:
        if source.get("optional"):
            return {}
        raise ContainerConfigError("ContainerCreating", 'MountVolume.SetUp failed for volume "%s" : %s "%s" not found'
                                   % (volume, what, name))
    data = _key_files(obj, kind)
    mode = _mode(source.get("defaultMode"), default_mode)
    items = source.get("items")
    if not items:
        return {_check_path(key, volume): (value, mode) for key, value in data.items()}
    payload: Payload = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        key = str(item.get("key") or "")
        if key not in data:
            if source.get("optional"):
                continue
            raise ContainerConfigError(
                "ContainerCreating", 'MountVolume.SetUp failed for volume "%s" : references non-existent %s key: %s'
                % (volume, what, key))
        payload[_check_path(str(item.get("path") or key), volume)] = (data[key], _mode(item.get("mode"), mode))
    return payload


def _downward(items: List[JsonObj], pod: JsonObj, mode: int, volume: str, pod_ip: str, host_ip: str,
              allocatable: Mapping[str, object]) -> Payload:
    payload: Payload = {}
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    for item in items:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("fieldRef"), dict):
            value = field_value(pod, str(item["fieldRef"].get("fieldPath") or ""), pod_ip, host_ip)
        elif isinstance(item.get("resourceFieldRef"), dict):
            value = resource_value(pod, containers[0], item["resourceFieldRef"], allocatable)  # type: ignore[arg-type]
        else:
            continue
        payload[_check_path(str(item.get("path") or ""), volume)] = (value.encode(), _mode(item.get("mode"), mode))
    return payload


def payloads(pod: JsonObj, lookup: Lookup, identity: Identity, *, pod_ip: str, host_ip: str,
             allocatable: Mapping[str, object]) -> Dict[str, Payload]:
    """The files of every Secret, ConfigMap, projected and downward-API volume of ``pod``, by volume name.

    :class:`ContainerConfigError` (reason ``ContainerCreating``) when a referenced object or key is
    missing and not optional: the kubelet keeps the pod waiting and retries."""
    namespace = str(pod["metadata"].get("namespace") or "default")
    account = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
    result: Dict[str, Payload] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        name = str(volume.get("name") or "")
        kind = volume_kind(volume)
        source = volume.get(kind or "") or {}
        if kind == "secret":
            result[name] = _keyed(source, "secrets", str(source.get("secretName") or ""), namespace,
                                  DEFAULT_MODE, lookup, name, identity.ca_pem)
        elif kind == "configMap":
            result[name] = _keyed(source, "configmaps", str(source.get("name") or ""), namespace,
                                  DEFAULT_MODE, lookup, name, identity.ca_pem)
        elif kind == "downwardAPI":
            result[name] = _downward(list(source.get("items") or []), pod, _mode(source.get("defaultMode"),
                                     DEFAULT_MODE), name, pod_ip, host_ip, allocatable)
        elif kind == "projected":
            mode = _mode(source.get("defaultMode"), DEFAULT_MODE)
            files: Payload = {}
            for part in source.get("sources") or []:
                if not isinstance(part, dict):
                    continue
                if isinstance(part.get("secret"), dict):
                    ref = part["secret"]
                    files.update(_keyed(ref, "secrets", str(ref.get("name") or ""), namespace, mode, lookup, name,
                                        identity.ca_pem))
                elif isinstance(part.get("configMap"), dict):
                    ref = part["configMap"]
                    files.update(_keyed(ref, "configmaps", str(ref.get("name") or ""), namespace, mode, lookup,
                                        name, identity.ca_pem))
                elif isinstance(part.get("downwardAPI"), dict):
                    files.update(_downward(list(part["downwardAPI"].get("items") or []), pod, mode, name, pod_ip,
                                           host_ip, allocatable))
                elif isinstance(part.get("serviceAccountToken"), dict):
                    path = _check_path(str(part["serviceAccountToken"].get("path") or "token"), name)
                    files[path] = (identity.token(namespace, account).encode(), mode)
            result[name] = files
    return result


def owner_mode(mode: int, fs_group: Optional[int], directory: bool = False, read_only: bool = True) -> int:
    """A file's mode after ``SetVolumeOwnership``: group read (and write, for writable volumes), plus
    setgid and search on directories, when the pod has an ``fsGroup``."""
    if fs_group is None:
        return mode
    mask = 0o440 if read_only else 0o660
    if directory:
        return mode | mask | 0o110 | stat.S_ISGID
    return mode | mask


class AtomicDir:
    """The kubelet's atomic writer over one directory (see the module docstring)."""

    def __init__(self, path: str, fs_group: Optional[int]) -> None:
        self.path = path
        self.fs_group = fs_group
        self.current: Optional[Payload] = None

    def write(self, payload: Payload) -> bool:
        """Make the directory show ``payload``; returns whether anything changed."""
        if payload == self.current:
            return False
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()) + "%09d" % (time.time_ns() % 10 ** 9)
        target = os.path.join(self.path, stamp)
        os.mkdir(target, 0o755)
        gid = -1 if self.fs_group is None else self.fs_group
        for rel, (data, mode) in sorted(payload.items()):
            full = os.path.join(target, rel)
            parent = os.path.dirname(full)
            if parent != target:
                os.makedirs(parent, 0o755, exist_ok=True)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chown(full, 0, gid)
            os.chmod(full, owner_mode(mode, self.fs_group))
        if self.fs_group is not None:
            for dirpath, _dirs, _files in os.walk(target):
                os.chown(dirpath, 0, gid)
                os.chmod(dirpath, owner_mode(0o755, self.fs_group, directory=True))
        old = os.readlink(os.path.join(self.path, DATA_LINK)) if self.current is not None else None
        tmp_link = os.path.join(self.path, "..data_tmp")
        if os.path.lexists(tmp_link):
            os.unlink(tmp_link)
        os.symlink(stamp, tmp_link)
        os.rename(tmp_link, os.path.join(self.path, DATA_LINK))
        tops = {rel.split("/", 1)[0] for rel in payload}
        for top in sorted(tops):
            link = os.path.join(self.path, top)
            if not os.path.lexists(link):
                os.symlink(os.path.join(DATA_LINK, top), link)
        for entry in os.listdir(self.path):
            if not entry.startswith("..") and entry not in tops:
                os.unlink(os.path.join(self.path, entry))
        if old is not None and old != stamp:
            shutil.rmtree(os.path.join(self.path, old), ignore_errors=True)
        self.current = dict(payload)
        return True
