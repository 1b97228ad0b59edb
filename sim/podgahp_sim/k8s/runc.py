"""The container runtime of a simulated node whose containers really run: each container is a runc
bundle made from its pod spec (:mod:`.oci`), on an overlay of the image's layers (:mod:`.registry`)
with a writable layer of its own, beside the pod's volumes (:mod:`.volumes`).

Owns everything on the machine that its containers use, under one directory per simulator
(``<runtime_dir>/<pid>-<hex>``, held by an ``flock`` while the simulator lives: :mod:`..instances`):
runc's state, the bundles and overlays, the volumes and the container logs; and the cgroups runc
makes below the simulator's own (``podgahp-sim/<instance>/<container>``).  When it starts, it removes what
simulators that are gone (killed with -9, say) left behind: their containers, processes, mounts,
cgroups and files.  Containers run in their own pid, mount, IPC and UTS namespaces and in the host's
network namespace.

``runc run --keep`` runs in the foreground as a child of the simulator, its stdout and stderr the
container's log file; its exit status is the container's (128 + signal when killed).  An OOM kill
in a container's memory cgroup makes the runtime kill the whole container, as the kubelet does on
cgroup v2 (``memory.oom.group``), and the container ends ``OOMKilled``.

Called by :class:`~.cluster.Cluster` under the store's lock; removing containers and pods happens in
a worker thread of its own.  Knows nothing of HTTP or of pod phases.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from ..instances import clean_dead, new_instance, take
from .envvars import ContainerConfigError, Lookup, command_line, container_environment
from .oci import Mount, bind, fs_group, resolve_user, runtime_config
from .quantity import parse_quantity
from .registry import Image, Registry
from .store import JsonObj
from .volumes import PLUGIN_DIRS, TMPFS_KINDS, AtomicDir, Identity, owner_mode, payloads, volume_kind

log = logging.getLogger(__name__)

CGROUP_PARENT = "podgahp-sim"
"""Cgroups of every simulator's containers are below ``<the simulator's cgroup>/podgahp-sim``."""
MAX_TERMINATION_MESSAGE = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2


class RuntimeUnavailable(RuntimeError):
    """This machine cannot run real containers (no runc, not root): the message says what to do."""


@dataclass(frozen=True)
class Exit:
    """How a container ended: exit code, reason (``Completed``, ``Error``, ``OOMKilled``,
    ``StartError``) and the termination message."""

    code: int
    reason: str
    message: str = ""


@dataclass
class Container:
    """One container created by the runtime."""

    id: str
    pod_uid: str
    name: str
    directory: str
    spec: JsonObj
    policy: str
    process: "Optional[subprocess.Popen[bytes]]" = None
    log_path: str = ""
    log_start: int = 0
    termination_path: str = ""
    cgroup: str = ""
    """``cgroupsPath`` (relative to the simulator's own cgroup)."""
    memory_cgroup: str = ""
    oom: bool = False
    exit: Optional[Exit] = None
    pending_signal: Optional[int] = None
    removed: bool = False
    pid: Optional[int] = None
    """The container's first process, once runc has made it."""


@dataclass
class Sandbox:
    """A pod on the node: its directory, hosts files and volumes."""

    uid: str
    directory: str
    volumes: Dict[str, str] = field(default_factory=dict)
    """Volume name -> host directory."""
    writers: Dict[str, AtomicDir] = field(default_factory=dict)
    memory_dirs: Dict[str, str] = field(default_factory=dict)
    """emptyDir volumes of medium Memory (a tmpfs), name -> host directory."""
    disk_dirs: Dict[str, Tuple[str, Optional[Fraction]]] = field(default_factory=dict)
    """emptyDir volumes on disk, name -> (host directory, sizeLimit)."""
    mounts: List[str] = field(default_factory=list)
    containers: List[Container] = field(default_factory=list)


_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str, flags: int, data: str) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags), data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s on %s (%s): %s" % (fstype, target, data, os.strerror(err)))


def _umount(target: str) -> None:
    if _libc.umount2(target.encode(), 0) != 0 and _libc.umount2(target.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):
            log.warning("cannot unmount %s: %s", target, os.strerror(err))


def _mount_points(below: str) -> List[str]:
    prefix = below.rstrip("/") + "/"
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point.startswith(prefix):
                points.append(point)
    return points


def _unmount_below(directory: str) -> None:
    for point in sorted(set(_mount_points(directory)), key=len, reverse=True):
        _umount(point)


def _disk_usage(path: str) -> int:
    """Bytes of blocks used below ``path`` (as ``du``), not following symlinks or other file systems."""
    total = 0
    try:
        device = os.lstat(path).st_dev
    except OSError:
        return 0
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if info.st_dev != device:
                        continue
                    total += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def cgroup_dirs(relative: str) -> Dict[str, str]:
    """Hierarchy (``memory``, ``cpu,cpuacct``, ``name=systemd``, ``""`` for cgroup2) -> the directory
    ``relative`` names below this process's cgroup in it (where runc puts a relative ``cgroupsPath``)."""
    mounts: Dict[str, str] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
                continue
            point = fields[4]
            if rest[0] == "cgroup2":
                mounts.setdefault("", point)
                continue
            options = rest[2].split(",")
            names = sorted(o for o in options if o not in ("rw", "ro") and "=" not in o or o.startswith("name="))
            for name in names:
                mounts.setdefault(name, point)
    result: Dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) != 3:
                continue
            controllers = parts[1].split(",") if parts[1] else [""]
            found = next((mounts[c] for c in controllers if c in mounts), None)
            if found is not None:
                result[parts[1]] = os.path.join(found, parts[2].lstrip("/"), relative)
    return result


def _kill_cgroup(directory: str) -> None:
    """Kill every process in a cgroup and the cgroups below it, then remove them (deepest first)."""
    if not os.path.isdir(directory):
        return
    for root, dirs, _files in os.walk(directory, topdown=False):
        for _ in range(50):
            try:
                with open(os.path.join(root, "cgroup.procs")) as f:
                    pids = [int(p) for p in f.read().split()]
            except OSError:
                pids = []
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        with contextlib.suppress(OSError):
            os.rmdir(root)


class RuncRuntime:
    """See the module docstring.  ``lookup`` reads Secrets and ConfigMaps from the store,
    ``identity`` makes service-account tokens, ``service`` is the API server's (host, port)."""

    def __init__(self, runtime_dir: str, images: Mapping[str, str], lookup: Lookup, identity: Identity,
                 service: Tuple[str, int], pids_limit: int = 0, log_max_bytes: int = 10 * 1024 * 1024) -> None:
        self.base = runtime_dir
        self.registry = Registry(images)
        self.lookup = lookup
        self.identity = identity
        self.service = service
        self.pids_limit = pids_limit
        self.log_max_bytes = log_max_bytes
        self.instance = new_instance()
        self.directory = os.path.join(self.base, self.instance)
        self.state = os.path.join(self.directory, "runc")
        self.sandboxes: Dict[str, Sandbox] = {}
        self._lock_fd: Optional[int] = None
        self._runc = ""
        self._work: "queue.Queue[Optional[Callable[[], None]]]" = queue.Queue()
        self._worker: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Check the machine, remove what dead simulators left, and take this simulator's directory."""
        if os.geteuid() != 0:
            raise RuntimeUnavailable("the runc runtime needs root (mounts, cgroups, runc)")
        runc = shutil.which("runc")
        if runc is None:
            raise RuntimeUnavailable("runc is not installed: apt-get install runc (make system-deps)")
        self._runc = runc
        os.makedirs(self.base, 0o711, exist_ok=True)
        clean_dead_instances(self.base, runc)
        self._lock_fd = take(self.base, self.instance, 0o711)
        os.makedirs(os.path.join(self.directory, "pods"), 0o711)
        with open(os.path.join(self.directory, "cgroups.json"), "w") as f:
            json.dump(sorted(cgroup_dirs(os.path.join(CGROUP_PARENT, self.instance)).values()), f)
        self._worker = threading.Thread(target=self._run_work, name="k8s-sim-runtime", daemon=True)
        self._worker.start()
        log.info("runc runtime in %s (images: %s)", self.directory, ", ".join(self.registry.references()) or "none")

    def stop(self) -> None:
        """Kill every container and remove everything this runtime made."""
        if self._worker is not None:
            for uid in list(self.sandboxes):
                self.remove_pod(uid)
            self._work.put(None)
            self._worker.join(timeout=120)
            self._worker = None
        if self._lock_fd is not None:
            remove_instance(self.directory, self._runc)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _run_work(self) -> None:
        while True:
            job = self._work.get()
            if job is None:
                return
            try:
                job()
            except Exception:  # keep removing the rest; the failure is logged
                log.exception("simulated runtime: clean-up failed")

    # ------------------------------------------------------------------ images

    def image(self, reference: str) -> Optional[Image]:
        return self.registry.get(reference)

    # ------------------------------------------------------------------ pods

    def _sandbox(self, pod: JsonObj, pod_ip: str, host_ip: str, allocatable: Mapping[str, Fraction]) -> Sandbox:
        uid = str(pod["metadata"]["uid"])
        sandbox = self.sandboxes.get(uid)
        if sandbox is not None:
            return sandbox
        files = payloads(pod, self.lookup, self.identity, pod_ip=pod_ip, host_ip=host_ip, allocatable=allocatable)
        directory = os.path.join(self.directory, "pods", uid)
        os.makedirs(os.path.join(directory, "containers"), 0o711)
        sandbox = Sandbox(uid, directory)
        self.sandboxes[uid] = sandbox
        name = str(pod["metadata"].get("name") or "")
        with open(os.path.join(directory, "etc-hosts"), "w") as f:
            f.write("# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n"
                    "::1\tlocalhost ip6-localhost ip6-loopback\n127.0.0.1\t%s\n" % name)
        with open(os.path.join(directory, "hostname"), "w") as f:
            f.write(name + "\n")
        try:
            shutil.copyfile("/etc/resolv.conf", os.path.join(directory, "resolv.conf"))
        except OSError:
            open(os.path.join(directory, "resolv.conf"), "w").close()
        group = fs_group(pod)
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            if not isinstance(volume, dict):
                continue
            vname = str(volume.get("name") or "")
            kind = volume_kind(volume)
            if kind is None:
                continue
            path = os.path.join(directory, "volumes", PLUGIN_DIRS[kind], vname)
            os.makedirs(path, 0o777)
            if kind in TMPFS_KINDS:
                _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
                sandbox.mounts.append(path)
            if kind == "emptyDir":
                source = volume.get("emptyDir") or {}
                limit = parse_quantity(str(source["sizeLimit"])) if source.get("sizeLimit") else None
                if source.get("medium") == "Memory":
                    size = limit or _pod_memory(pod) or allocatable.get("memory") or Fraction(2 ** 30)
                    _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0777,size=%d" % int(size))
                    sandbox.mounts.append(path)
                    sandbox.memory_dirs[vname] = path
                else:
                    sandbox.disk_dirs[vname] = (path, limit)
                os.chmod(path, owner_mode(0o777, group, directory=True, read_only=False))
                if group is not None:
                    os.chown(path, 0, group)
            else:
                writer = AtomicDir(path, group)
                writer.write(files.get(vname, {}))
                sandbox.writers[vname] = writer
            sandbox.volumes[vname] = path
        return sandbox

    def sync_volumes(self, pod: JsonObj, pod_ip: str, host_ip: str, allocatable: Mapping[str, Fraction]) -> None:
        """The kubelet's periodic sync: Secret, ConfigMap, projected and downward-API volumes show the
        objects' current data (a volume whose object is gone keeps its last)."""
        sandbox = self.sandboxes.get(str(pod["metadata"]["uid"]))
        if sandbox is None or not sandbox.writers:
            return
        for name, writer in sandbox.writers.items():
            single = dict(pod, spec=dict(pod.get("spec") or {}, volumes=[
                v for v in (pod.get("spec") or {}).get("volumes") or [] if isinstance(v, dict) and v.get("name") == name]))
            try:
                files = payloads(single, self.lookup, self.identity, pod_ip=pod_ip, host_ip=host_ip,
                                 allocatable=allocatable)
            except ContainerConfigError:
                continue
            if writer.write(files.get(name, {})):
                log.debug("pod %s: volume %s updated", pod["metadata"].get("name"), name)

    def remove_pod(self, uid: str) -> None:
        """Kill the pod's containers and remove its mounts and files (in the background)."""
        sandbox = self.sandboxes.pop(uid, None)
        if sandbox is None:
            return
        for c in sandbox.containers:
            self._remove_container(c, kill=True)
        self._work.put(lambda: self._remove_sandbox(sandbox))

    def _remove_sandbox(self, sandbox: Sandbox) -> None:
        _unmount_below(sandbox.directory)
        shutil.rmtree(sandbox.directory, ignore_errors=True)

    # ------------------------------------------------------------------ containers

    def create(self, pod: JsonObj, spec: JsonObj, restart: int, *, pod_ip: str, host_ip: str,
               allocatable: Mapping[str, Fraction]) -> Container:
        """Make the container's bundle and start it; :class:`ContainerConfigError` when the spec cannot
        run (the container then waits with that reason, as with a real kubelet)."""
        image = self.registry.get(str(spec.get("image") or ""))
        if image is None:
            raise ContainerConfigError("ErrImagePull", "image %s is not in the simulated registry" % spec.get("image"))
        user = resolve_user(pod, spec, image)
        env = container_environment(pod, spec, image, self.lookup, service=self.service, pod_ip=pod_ip,
                                    host_ip=host_ip, allocatable=allocatable)
        argv = command_line(spec, image, env)
        sandbox = self._sandbox(pod, pod_ip, host_ip, allocatable)
        uid = sandbox.uid
        name = str(spec.get("name") or "")
        cid = "%s-%s-%d" % (uid, name, restart)
        directory = os.path.join(sandbox.directory, "containers", "%s-%d" % (name, restart))
        container = Container(cid, uid, name, directory, spec, str(spec.get("terminationMessagePolicy") or "File"))
        mounts = self._mounts(pod, spec, sandbox, directory)
        config = runtime_config(pod, spec, image, argv=argv, env=env, user=user, mounts=mounts,
                                cgroups_path=os.path.join(CGROUP_PARENT, self.instance, cid),
                                pids_limit=self.pids_limit)
        rootfs = os.path.join(directory, "rootfs")
        if os.path.lexists(directory):  # left by an attempt that failed
            _unmount_below(directory)
            shutil.rmtree(directory, ignore_errors=True)
        try:
            os.makedirs(directory, 0o711)
            for sub in ("upper", "work", "rootfs"):
                os.mkdir(os.path.join(directory, sub), 0o755)
            with open(os.path.join(directory, "config.json"), "w") as f:
                json.dump(config, f)
            _mount("overlay", rootfs, "overlay", 0, "lowerdir=%s,upperdir=%s,workdir=%s" % (
                ":".join(image.layers), os.path.join(directory, "upper"), os.path.join(directory, "work")))
        except OSError as e:
            raise ContainerConfigError("CreateContainerError", "failed to create containerd container: %s" % e) from e
        sandbox.containers.append(container)
        container.log_path = os.path.join(sandbox.directory, "containers", "%s-%d.log" % (name, restart))
        container.cgroup = os.path.join(CGROUP_PARENT, self.instance, cid)
        container.memory_cgroup = cgroup_dirs(container.cgroup).get("memory", "")
        with open(container.log_path, "ab") as logfile:
            container.log_start = logfile.tell()
            container.process = subprocess.Popen(
                [self._runc, "--root", self.state, "--log", os.path.join(directory, "runc.log"), "--log-format",
                 "json", "run", "--keep", "--bundle", directory, cid],
                stdin=subprocess.DEVNULL, stdout=logfile, stderr=logfile, start_new_session=True, close_fds=True)
        return container

    def _mounts(self, pod: JsonObj, spec: JsonObj, sandbox: Sandbox, directory: str) -> List[Mount]:
        mounts = [bind("/etc/hosts", os.path.join(sandbox.directory, "etc-hosts")),
                  bind("/etc/hostname", os.path.join(sandbox.directory, "hostname")),
                  bind("/etc/resolv.conf", os.path.join(sandbox.directory, "resolv.conf"))]
        path = str(spec.get("terminationMessagePath") or "/dev/termination-log")
        term = directory + ".termination-log"
        with open(term, "w"):
            pass
        os.chmod(term, 0o666)
        mounts.append(bind(path, term))
        for mount in spec.get("volumeMounts") or []:
            if not isinstance(mount, dict):
                continue
            name = str(mount.get("name") or "")
            if name not in sandbox.volumes:
                raise ContainerConfigError("CreateContainerConfigError",
                                           "cannot find volume \"%s\" to mount into container \"%s\"" % (
                                               name, spec.get("name")))
            source = sandbox.volumes[name]
            sub = str(mount.get("subPath") or "")
            if sub:
                source = self._sub_path(source, sub, name)
            mounts.append(bind(str(mount.get("mountPath") or ""), source, bool(mount.get("readOnly"))))
        return mounts

    @staticmethod
    def _sub_path(volume: str, sub: str, name: str) -> str:
        if sub.startswith("/") or ".." in sub.split("/"):
            raise ContainerConfigError("CreateContainerConfigError", "subPath %r of volume %s must be a relative "
                                       "path without '..'" % (sub, name))
        path = os.path.join(volume, sub)
        if not os.path.lexists(path):
            os.makedirs(path, 0o750)
        real = os.path.realpath(path)
        if real != os.path.realpath(volume) and not real.startswith(os.path.realpath(volume) + "/"):
            raise ContainerConfigError("CreateContainerConfigError",
                                       "subPath %r of volume %s is outside the volume" % (sub, name))
        return real

    def poll(self, container: Container) -> Optional[Exit]:
        """``None`` while the container runs (an OOM kill in it kills it whole), else how it ended."""
        if container.exit is not None:
            return container.exit
        process = container.process
        if process is None:
            return None
        if process.poll() is None:
            if container.pending_signal is not None:
                self.signal(container, container.pending_signal)
            if not container.oom and self._oom_kills(container) > 0:
                container.oom = True
                log.info("container %s: OOM kill in its cgroup, killing the container", container.id)
                self.signal(container, signal.SIGKILL)
            return None
        code = process.returncode
        failure = self._runc_error(container)
        if code != 0 and failure:
            with contextlib.suppress(OSError), open(container.log_path, "r+b") as f:
                f.truncate(container.log_start)  # runc's own error is not the container's output
            container.exit = Exit(128, "StartError", "failed to create containerd task: failed to create shim task: "
                                  "OCI runtime create failed: %s: unknown" % failure)
        else:
            oom = container.oom or self._oom_kills(container) > 0
            reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")
            container.exit = Exit(code if code >= 0 else 128 - code, reason, self._termination_message(container, code))
        self._remove_container(container, kill=False)
        return container.exit

    def signal(self, container: Container, signum: int) -> None:
        """Send ``signum`` to the container's first process (retried while runc has not made it yet)."""
        if container.exit is not None or container.process is None:
            return
        done = subprocess.run([self._runc, "--root", self.state, "kill", container.id, str(int(signum))],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
        if done.returncode == 0 or container.process.poll() is not None:
            container.pending_signal = None
        elif container.pending_signal != signal.SIGKILL:
            container.pending_signal = signum

    def started(self, container: Container) -> bool:
        """Whether the container's process runs its command (runc has made the container and started it)."""
        if container.pid is None:
            try:
                with open(os.path.join(self.state, container.id, "state.json")) as f:
                    container.pid = int(json.load(f)["init_process_pid"])
            except (OSError, ValueError, KeyError, TypeError):
                return False
        try:
            with open("/proc/%d/cmdline" % container.pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            return False
        return not (len(argv) >= 2 and argv[0].endswith(b"runc") and argv[1] == b"init")

    def running(self, container: Container) -> bool:
        return container.exit is None and container.process is not None and container.process.poll() is None

    def _oom_kills(self, container: Container) -> int:
        for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
            try:
                with open(os.path.join(container.memory_cgroup, name)) as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) == 2 and parts[0] == key:
                            return int(parts[1])
            except (OSError, ValueError):
                continue
        return 0

    @staticmethod
    def _runc_error(container: Container) -> str:
        try:
            with open(os.path.join(container.directory, "runc.log"), "rb") as f:
                lines = f.read(64 * 1024).decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("level") in ("error", "fatal"):
                return str(entry.get("msg", ""))[:1024]
        return ""

    def _termination_message(self, container: Container, code: int) -> str:
        try:
            with open(container.directory + ".termination-log", "rb") as f:
                text = f.read(MAX_TERMINATION_MESSAGE).decode("utf-8", "replace")
        except OSError:
            text = ""
        if not text and code != 0 and container.policy == "FallbackToLogsOnError":
            lines = self.log_lines(container)[-FALLBACK_LOG_LINES:]
            text = "\n".join(lines)[-FALLBACK_LOG_BYTES:]
        return text

    def _remove_container(self, container: Container, kill: bool) -> None:
        if container.removed:
            return
        container.removed = True
        process = container.process

        def remove() -> None:
            if process is not None:
                # runc may still be making the container: kill it as soon as it exists
                deadline = time.monotonic() + 30
                while kill and process.poll() is None and time.monotonic() < deadline:
                    subprocess.run([self._runc, "--root", self.state, "kill", container.id, "KILL"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout=0.2)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            subprocess.run([self._runc, "--root", self.state, "delete", "--force", container.id],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
            for directory in cgroup_dirs(container.cgroup).values():
                _kill_cgroup(directory)
            _umount(os.path.join(container.directory, "rootfs"))
        self._work.put(remove)

    # ------------------------------------------------------------------ logs and storage

    def log_lines(self, container: Container) -> List[str]:
        try:
            with open(container.log_path, "rb") as f:
                data = f.read(self.log_max_bytes * 2)
        except OSError:
            return []
        return data.decode("utf-8", "replace").splitlines()

    def storage_excess(self, pod: JsonObj, containers: List[Container]) -> str:
        """The kubelet's eviction message when the pod's local storage use is over a limit, else ''
        (``pkg/kubelet/eviction/eviction_manager.go (localStorageEviction)``); rotates big logs."""
        sandbox = self.sandboxes.get(str(pod["metadata"]["uid"]))
        if sandbox is None:
            return ""
        for name, (path, limit) in sorted(sandbox.disk_dirs.items()):
            if limit is not None and _disk_usage(path) > limit:
                return 'Usage of EmptyDir volume "%s" exceeds the limit "%s". ' % (
                    name, _size_limit(pod, name))
        total = sum(_disk_usage(path) for path, _ in sandbox.disk_dirs.values())
        pod_limit = Fraction(0)
        for c in containers:
            self._rotate(c)
            used = _disk_usage(os.path.join(c.directory, "upper"))
            with contextlib.suppress(OSError):
                used += os.stat(c.log_path).st_blocks * 512
            total += used
            limit_text = ((c.spec.get("resources") or {}).get("limits") or {}).get("ephemeral-storage")
            if limit_text is None:
                continue
            limit = parse_quantity(str(limit_text))
            pod_limit += limit
            if used > limit:
                return 'Container %s exceeded its local ephemeral storage limit "%s". ' % (c.name, limit_text)
        if pod_limit and total > pod_limit:
            return "Pod ephemeral local storage usage exceeds the total limit of containers %s. " % _format(pod_limit)
        return ""

    def _rotate(self, container: Container) -> None:
        """Past the kubelet's ``containerLogMaxSize`` the log starts again (the old part kept as ``.1``)."""
        with contextlib.suppress(OSError):
            if os.stat(container.log_path).st_size > self.log_max_bytes:
                shutil.copyfile(container.log_path, container.log_path + ".1")
                with open(container.log_path, "r+b") as f:
                    f.truncate(0)
                container.log_start = 0


def _pod_memory(pod: JsonObj) -> Optional[Fraction]:
    total = Fraction(0)
    for c in (pod.get("spec") or {}).get("containers") or []:
        value = ((c.get("resources") or {}).get("limits") or {}).get("memory")
        if value is None:
            return None
        total += parse_quantity(str(value))
    return total or None


def _size_limit(pod: JsonObj, name: str) -> str:
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if isinstance(volume, dict) and volume.get("name") == name:
            return str((volume.get("emptyDir") or {}).get("sizeLimit") or "")
    return ""


def _format(value: Fraction) -> str:
    from .quantity import format_quantity
    return format_quantity(value, True)


# ---------------------------------------------------------------------- clean-up


def remove_instance(directory: str, runc: str) -> None:
    """Remove everything of one simulator's runtime: containers, processes, cgroups, mounts, files."""
    state = os.path.join(directory, "runc")
    ids: List[str] = []
    if os.path.isdir(state):
        listed = subprocess.run([runc, "--root", state, "list", "--format", "json"], capture_output=True, text=True,
                                timeout=60)
        with contextlib.suppress(ValueError):
            ids = [str(c.get("id")) for c in json.loads(listed.stdout or "null") or [] if isinstance(c, dict)]
    for cid in ids:
        subprocess.run([runc, "--root", state, "kill", cid, "KILL"], capture_output=True, timeout=30)
    # the simulator's `runc run` processes end with their containers (they reap them); any still
    # there after a while (a container that never started) are killed
    marker = ("--root\0" + state + "\0").encode()
    deadline = time.monotonic() + 10
    while True:
        left = _processes_with(marker)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for cid in ids:
        subprocess.run([runc, "--root", state, "delete", "--force", cid], capture_output=True, timeout=60)
    try:
        with open(os.path.join(directory, "cgroups.json")) as f:
            parents = [str(p) for p in json.load(f)]
    except (OSError, ValueError):
        parents = []
    for parent in parents:
        _kill_cgroup(parent)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(parent))  # podgahp-sim, when no other simulator uses it
    _unmount_below(directory)
    mounted = _mount_points(directory)
    if mounted:
        log.warning("runtime directory %s still has mounts: %s", directory, mounted)
        return
    shutil.rmtree(directory, ignore_errors=True)


def _processes_with(marker: bytes) -> List[int]:
    """Pids of the processes whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                if marker in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def clean_dead_instances(base: str, runc: str) -> List[str]:
    """Remove what simulators that are gone left in ``base``; returns their directories."""
    def remove(directory: str) -> None:
        log.warning("removing what a stopped simulator left in %s", directory)
        remove_instance(directory, runc)
    # (a directory without a lock was made by an earlier version, which took the lock once it was made)
    return clean_dead(base, remove, unlocked_seconds=60)
