"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, run from a directory of binaries in envtest's KUBEBUILDER_ASSETS layout (``etcd``,
``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler``; ``make k8s-control-plane``
builds one from Debian's sources, any release a site brings works too).

Owns its processes and their state, under one directory per control plane
(``<base>/<pid>-<hex>``, held by an ``flock`` while its owner lives: :mod:`..instances`): etcd's data,
the certificates (:mod:`.pki`), the kubeconfigs, each process's log, and the API server's audit log of
the requests that create or delete pods and Secrets (:meth:`ControlPlane.requests`, as the simulated
API server's request log). Every process listens on 127.0.0.1 only, on free
ports; the ports of 1.23 and older releases that serve without authentication are closed. Ready when
the API server's ``/readyz`` says so and the ``default`` ServiceAccount exists (pods can be made).
:meth:`ControlPlane.stop` leaves nothing (processes, ports, files); when a control plane's owner was
killed (-9), the next start finds its directory unlocked and kills and removes what it left.

Knows nothing of nodes (:mod:`.node`) or of the simulated API server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..instances import clean_dead, new_instance, take
from .client import opener
from .pki import ADMIN, CONTROLLER_MANAGER, KUBELET_CLIENT, SCHEDULER, Pki, node_identity

log = logging.getLogger(__name__)

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
DEFAULT_BASE = "/var/tmp/podgahp-control-plane"
SERVICE_CIDR = "10.96.0.0/16"
"""The Services' cluster IPs: a range only the API server uses (nothing is ever sent there)."""

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "verbs": ["create", "delete", "deletecollection"],
               "resources": [{"group": "", "resources": ["pods", "secrets"]}]},
              {"level": "None"}]}
"""What the API server's audit log records: who created or deleted which pod or Secret and how it was
answered (no bodies; not the subresources, such as the nodes' status writes)."""
METHOD_OF_VERB = {"create": "POST", "delete": "DELETE", "deletecollection": "DELETE"}


class ControlPlaneError(RuntimeError):
    """The control plane could not be started: a binary is missing or a process failed (its log named)."""


@dataclass(frozen=True)
class Request:
    """One request of the audit log, shaped as the simulated API server's request record: its method,
    path, query (the last value of each name) and answer's status."""

    method: str
    path: str
    query: Mapping[str, str]
    status: int


@dataclass(frozen=True)
class Release:
    """What ``kube-apiserver --version`` says: ``Kubernetes v1.20.2`` -> (1, 20)."""

    major: int
    minor: int
    text: str

    @property
    def has_insecure_ports(self) -> bool:
        """1.23 and older open ports without authentication unless told not to (the flags are gone since)."""
        return (self.major, self.minor) <= (1, 23)


def release_of(directory: Path) -> Release:
    out = subprocess.run([str(directory / "kube-apiserver"), "--version"], capture_output=True, text=True,
                         timeout=60).stdout.strip()
    m = re.search(r"v(\d+)\.(\d+)", out)
    if not m:
        raise ControlPlaneError(f"{directory / 'kube-apiserver'} --version said {out!r}")
    return Release(int(m.group(1)), int(m.group(2)), out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlPlane:
    """Start with :meth:`start` (or as a context manager), stop with :meth:`stop`."""

    def __init__(self, binaries: Path, base: Optional[Path] = None) -> None:
        self.binaries = Path(binaries)
        missing = [b for b in BINARIES if not os.access(self.binaries / b, os.X_OK)]
        if missing:
            raise ControlPlaneError(f"{self.binaries} lacks {', '.join(missing)} (make k8s-control-plane builds them)")
        self.base = Path(base or os.environ.get("PODGAHP_CONTROL_PLANE_DIR") or DEFAULT_BASE)
        self.instance = new_instance()
        self.directory = self.base / self.instance
        self.release = release_of(self.binaries)
        self.procs: Dict[str, "subprocess.Popen[bytes]"] = {}
        self._args: Dict[str, Sequence[str]] = {}
        self.etcd_url = ""
        self._lock_fd: Optional[int] = None
        self.port = 0
        self.pki: Optional[Pki] = None
        self.admin_kubeconfig = self.directory / "admin.kubeconfig"
        self._ssl: Optional[ssl.SSLContext] = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        assert self.pki is not None
        return self.pki.ca_pem

    def path(self, *parts: str) -> Path:
        return self.directory.joinpath(*parts)

    def log_file(self, name: str) -> Path:
        return self.path("logs", name + ".log")

    @property
    def audit_log(self) -> Path:
        return self.path("logs", "audit.log")

    def requests(self, method: Optional[str] = None, path: Optional[str] = None, since: int = 0) -> List[Request]:
        """The pod and Secret creations and deletions served so far, from the audit log, optionally
        filtered by method and path regex (searched), as ``KubeSim.requests``; with ``since``, those
        after the first ``since`` of the log (``len(requests())`` then: what was served since)."""
        pattern = re.compile(path) if path is not None else None
        found = []
        try:
            lines = self.audit_log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []
        served = 0
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written
            if event.get("stage") != "ResponseComplete":
                continue
            served += 1
            if served <= since:
                continue
            url = urllib.parse.urlsplit(str(event.get("requestURI") or ""))
            record = Request(METHOD_OF_VERB.get(str(event.get("verb")), str(event.get("verb")).upper()), url.path,
                             {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()},
                             int((event.get("responseStatus") or {}).get("code") or 0))
            if (method is None or record.method == method) and (pattern is None or pattern.search(record.path)):
                found.append(record)
        return found

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 180.0) -> "ControlPlane":
        self.base.mkdir(mode=0o711, parents=True, exist_ok=True)
        clean_dead_instances(self.base)
        self._lock_fd = take(str(self.base), self.instance, 0o700)
        try:
            self.path("logs").mkdir()
            self._start(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, deadline: float) -> None:
        pki = self.pki = Pki(self.path("pki"))
        serving = pki.serving("kube-apiserver", "127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                              "kubernetes.default.svc", "10.96.0.1")
        sa = pki.service_account_keys()
        kubelet_client = pki.client(*KUBELET_CLIENT)
        etcd_client, etcd_peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{etcd_client}"
        self.port = free_port()
        self._spawn("etcd", [
            "--name", "default", "--data-dir", str(self.path("etcd")),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{etcd_peer}",
            "--unsafe-no-fsync" if self._etcd_has("--unsafe-no-fsync") else "--snapshot-count=10000",
        ])
        insecure = ["--insecure-port=0"] if self.release.has_insecure_ports else []
        self.path("audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
        self._spawn("kube-apiserver", [
            "--etcd-servers", f"http://127.0.0.1:{etcd_client}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}", *insecure,
            f"--cert-dir={self.path('apiserver-certs')}",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={sa.cert}", f"--service-account-signing-key-file={sa.key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            f"--kubelet-client-certificate={kubelet_client.cert}", f"--kubelet-client-key={kubelet_client.key}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--requestheader-client-ca-file={pki.ca_cert}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--allow-privileged=true",
            f"--audit-policy-file={self.path('audit-policy.json')}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
        ])
        for user, group in (ADMIN, CONTROLLER_MANAGER, SCHEDULER):
            pki.kubeconfig(self._kubeconfig_path(user), self.url, user, group)
        self.admin_kubeconfig = self._kubeconfig_path(ADMIN[0])
        self._wait_ready(deadline)
        old = ["--port=0"] if self.release.has_insecure_ports else []
        cm_kubeconfig = self._kubeconfig_path(CONTROLLER_MANAGER[0])
        self._spawn("kube-controller-manager", [
            f"--kubeconfig={cm_kubeconfig}", f"--authentication-kubeconfig={cm_kubeconfig}",
            f"--authorization-kubeconfig={cm_kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", *old,
            f"--cert-dir={self.path('controller-manager-certs')}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={sa.key}", f"--root-ca-file={pki.ca_cert}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--controllers=*,-csrsigning",
        ])
        sched_kubeconfig = self._kubeconfig_path(SCHEDULER[0])
        self._spawn("kube-scheduler", [
            f"--kubeconfig={sched_kubeconfig}", f"--authentication-kubeconfig={sched_kubeconfig}",
            f"--authorization-kubeconfig={sched_kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", *old,
            f"--cert-dir={self.path('scheduler-certs')}", "--leader-elect=false",
        ])
        self._wait(deadline, "the default ServiceAccount", lambda: self.get_ok(
            "/api/v1/namespaces/default/serviceaccounts/default"))

    def _etcd_has(self, flag: str) -> bool:
        out = subprocess.run([str(self.binaries / "etcd"), "--help"], capture_output=True, text=True, timeout=60)
        return flag in out.stdout + out.stderr

    def _kubeconfig_path(self, user: str) -> Path:
        return self.path(user.replace("system:", "").replace(":", "-") + ".kubeconfig")

    def node_kubeconfig(self, name: str) -> Path:
        """A kubeconfig of node ``name``'s identity (``system:node:<name>`` in ``system:nodes``)."""
        assert self.pki is not None
        path = self.path("node-%s.kubeconfig" % name)
        return self.pki.kubeconfig(path, self.url, *node_identity(name))

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """An admin kubeconfig at ``path`` whose context's namespace is ``namespace``."""
        assert self.pki is not None
        return self.pki.kubeconfig(Path(path), self.url, ADMIN[0], ADMIN[1], namespace=namespace)

    def _spawn(self, name: str, args: Sequence[str]) -> None:
        self._args[name] = list(args)
        out = open(self.log_file(name), "ab")
        try:
            self.procs[name] = subprocess.Popen([str(self.binaries / name), *args], stdin=subprocess.DEVNULL,
                                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                                cwd=str(self.directory))
        finally:
            out.close()
        log.info("%s started (pid %d), log %s", name, self.procs[name].pid, self.log_file(name))

    # ------------------------------------------------------------------ what a site's cluster goes through

    def restart(self, name: str, kill: bool = False, timeout: float = 180.0) -> None:
        """Stop process ``name`` (SIGTERM as an upgrade does, or SIGKILL with ``kill``) and start it again
        with the same flags, ports and data; for etcd and kube-apiserver, wait until the API server's
        ``/readyz`` says so again."""
        proc = self.procs[name]
        if kill:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait(30)
        else:
            _stop_process(proc)
        self._spawn(name, self._args[name])
        if name in ("etcd", "kube-apiserver"):
            self._wait_ready(time.monotonic() + timeout)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision, as the API server does every five minutes
        (and keeps the last); returns that revision. A watch from an older ``resourceVersion`` that the
        API server's watch cache no longer holds is then answered ``410 Gone``."""
        revision = int(self._etcd("range", {"key": "AA=="})["header"]["revision"])
        self._etcd("compaction", {"revision": revision, "physical": True})
        return revision

    def _etcd(self, call: str, body: Dict[str, object]) -> Dict[str, Any]:
        """One call of etcd's v3 JSON gateway (``/v3/kv/<call>``)."""
        request = urllib.request.Request(f"{self.etcd_url}/v3/kv/{call}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with opener().open(request, timeout=30) as response:
            return dict(json.loads(response.read()))

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = self.log_file(name).read_text(errors="replace").splitlines()[-15:]
                raise ControlPlaneError(f"{name} exited with {proc.returncode}; the end of {self.log_file(name)}:\n"
                                        + "\n".join(tail))

    def _wait(self, deadline: float, what: str, ready: Callable[[], bool]) -> None:
        while True:
            self._check_alive()
            if ready():
                return
            if time.monotonic() >= deadline:
                raise ControlPlaneError(f"{what} not there in time; logs in {self.path('logs')}")
            time.sleep(0.2)

    def _wait_ready(self, deadline: float) -> None:
        self._wait(deadline, "kube-apiserver's /readyz", lambda: self.get_ok("/readyz"))

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            assert self.pki is not None
            context = ssl.create_default_context(cadata=self.pki.ca_pem.decode("ascii"))
            admin = self.pki.client(*ADMIN)
            context.load_cert_chain(str(admin.cert), str(admin.key))
            self._ssl = context
        return self._ssl

    def get(self, path: str, timeout: float = 10.0) -> Tuple[int, bytes]:
        """GET ``path`` on the API server as the admin: (status, body)."""
        request = urllib.request.Request(self.url + path, headers={"Accept": "application/json"})
        try:
            with opener(self._context()).open(request, timeout=timeout) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())

    def get_ok(self, path: str) -> bool:
        try:
            return self.get(path, timeout=5)[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after 10 s) and remove the directory."""
        for name in reversed(list(self.procs)):
            _stop_process(self.procs[name])
        self.procs.clear()
        if self._lock_fd is not None:
            remove_instance(self.directory)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> Dict[str, str]:
        return {"url": self.url, "release": self.release.text, "directory": str(self.directory),
                "admin_kubeconfig": str(self.admin_kubeconfig)}


def _stop_process(proc: "subprocess.Popen[bytes]") -> None:
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait(10)


def processes_of(directory: Path) -> List[int]:
    """Pids of the processes whose command line names ``directory`` (every control-plane process does)."""
    marker = str(directory).encode() + b"/"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                if marker in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def remove_instance(directory: Path) -> None:
    """Kill what still runs of one control plane and remove its directory."""
    for _ in range(100):
        left = processes_of(directory)
        if not left:
            break
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    shutil.rmtree(directory, ignore_errors=True)


def clean_dead_instances(base: Path) -> List[Path]:
    """Remove what control planes whose owner is gone (killed with -9, say) left in ``base``."""
    def remove(directory: str) -> None:
        log.warning("removing what a control plane whose owner is gone left in %s", directory)
        remove_instance(Path(directory))
    return [Path(d) for d in clean_dead(str(base), remove)]
