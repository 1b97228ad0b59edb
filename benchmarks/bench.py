"""What every benchmark script shares: the simulated cluster in a process of its own, CPU and memory
of a process, the machine's load, and medians of runs that take turns.

A figure from a busy machine is only worth its ratio to a baseline measured in the same run, so each
script runs the thing measured and its baseline (the zero-cost memory backend, or the blahp) one after
the other, ``--repeat`` times, and prints the median of each and the median of the pairs' ratios,
with the load average before and after. The simulator never shares a process (and so a GIL and a
garbage collector) with the driver or the GAHP: its CPU is its own, and is reported apart.
"""

from __future__ import annotations

import configparser
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import statistics
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from podgahp_sim.k8s import KubeSim, SimConfig  # noqa: E402

Row = Dict[str, float]


# ------------------------------------------------------------------------------------------------
# the machine and its processes

def load() -> str:
    """The load average (1, 5, 15 minutes) and the number of CPUs, for the line under a table."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (its threads included, its children not)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads_cpu_s(pid: int) -> float:
    """CPU seconds of the live threads of a process, to the nanosecond (``schedstat``): for short
    intervals in which no thread ends (a status round), where :func:`cpu_s`'s clock ticks (10 ms)
    would be most of the figure."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def memory_mb(pid: int) -> Tuple[float, float]:
    """Resident memory of a process now and at its peak (VmRSS, VmHWM), in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


# ------------------------------------------------------------------------------------------------
# runs taking turns

def alternate(kinds: Sequence[str], repeat: int, run: Callable[[str], Row]) -> Dict[str, List[Row]]:
    """``run(kind)`` for each kind in turn, ``repeat`` rounds: every kind sees the same share of a
    machine whose load changes as it goes."""
    rows: Dict[str, List[Row]] = {kind: [] for kind in kinds}
    for _ in range(repeat):
        for kind in kinds:
            rows[kind].append(run(kind))
    return rows


def median(rows: Sequence[Row], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def ratio(rows: Sequence[Row], baseline: Sequence[Row], key: str) -> float:
    """The median of the ratios of the runs taken in the same round (a round shares the machine's load)."""
    return statistics.median(r[key] / b[key] if b[key] else float("inf") for r, b in zip(rows, baseline))


def medians(rows: Sequence[Row]) -> Row:
    return {key: median(rows, key) for key in rows[0]}


# ------------------------------------------------------------------------------------------------
# the simulated cluster in its own process

class SimProcess:
    """A :class:`~podgahp_sim.k8s.KubeSim` served by a child process, driven through a pipe.

    Only what the benchmarks ask of it crosses the pipe (counts, not request logs). Use as a context
    manager; the child is stopped (and, if it does not stop, killed) on exit.
    """

    def __init__(self, config: SimConfig, priority_classes: Mapping[str, int] = {}) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._lock = threading.Lock()
        self.process = context.Process(target=_serve, args=(child, config, dict(priority_classes)),
                                       name="k8s-sim", daemon=True)
        self.process.start()
        child.close()
        self.url: str = self._answer(120)

    def _answer(self, timeout: float) -> Any:
        if not self._conn.poll(timeout):
            raise TimeoutError("the simulator process did not answer")
        ok, value = self._conn.recv()
        if not ok:
            raise RuntimeError(f"the simulator process failed:\n{value}")
        return value

    def call(self, name: str, *args: Any, timeout: float = 600) -> Any:
        with self._lock:
            self._conn.send((name, args))
            return self._answer(timeout)

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def cpu_s(self) -> float:
        return cpu_s(self.pid)

    def write_kubeconfig(self, path: str, namespace: str = "default") -> str:
        return str(self.call("write_kubeconfig", path, namespace))

    def kubeconfig_text(self, namespace: str = "default") -> str:
        return str(self.call("kubeconfig_text", namespace))

    def count(self, method: Optional[str] = None, path: Optional[str] = None, status: Optional[int] = None,
              watch: Optional[bool] = None) -> int:
        """Requests served so far, by method, path regex (searched), answer status and watch or not."""
        return int(self.call("count", method, path, status, watch))

    def clear_requests(self) -> None:
        self.call("clear_requests")

    def clone(self, namespace: str, pods: int) -> List[str]:
        """Make the one pod of ``namespace`` (a running pilot) ``pods`` pilots in all; their names."""
        return list(self.call("clone", namespace, pods))

    def sample(self) -> None:
        """Count the pods by phase every 0.2 s from now on (:meth:`timeline`)."""
        self.call("sample")

    def timeline(self) -> List[Tuple[float, int, int, int]]:
        """(time, pods created, pods running or done, pods done) every 0.2 s since :meth:`sample`."""
        return list(self.call("timeline"))

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.call("stop", timeout=30)
            except (OSError, EOFError, TimeoutError, RuntimeError):
                pass
            self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)
        self._conn.close()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ControlPlaneCluster:
    """:class:`SimProcess`'s counterpart on the real control plane (tests/engines.py: Kubernetes' own
    kube-apiserver, etcd, scheduler and controller-manager, as ``make k8s-control-plane`` builds them)
    with the simulator's kubelet as its nodes, in this process. Its request counts are the API
    server's own (``apiserver_request_total``) of pods and Secrets in a namespace (``scope``
    ``namespace``, or ``resource`` for one named object, creates included): the pilots', for the
    nodes, the scheduler and the controllers watch and list cluster-wide (``scope`` ``cluster``), and
    the nodes write pods' status through a subresource, which is not counted. Its CPU and memory are
    kube-apiserver's and etcd's."""

    def __init__(self, nodes: Sequence[Any], namespaces: Sequence[str]) -> None:
        from engines import control_plane_binaries
        from podgahp_sim.kube.cluster import KubeCluster

        self.cluster = KubeCluster(control_plane_binaries(), list(nodes)).start(timeout=300)
        for namespace in namespaces:
            self.cluster.add_namespace(namespace)
        self._baseline: Dict[Tuple[str, str], int] = {}
        self._samples: List[Tuple[float, int, int, int]] = []
        self._stop = threading.Event()

    def cpu_s(self) -> float:
        return sum(cpu_s(self.cluster.plane.procs[name].pid) for name in ("kube-apiserver", "etcd"))

    def sample(self, namespace: str) -> None:
        """Count the pods of ``namespace`` by phase every second from now on (:meth:`timeline`), from
        the API server's watch cache (a LIST at resourceVersion 0)."""
        def loop() -> None:
            while not self._stop.wait(1.0):
                try:
                    items = self.cluster.admin.get(f"/api/v1/namespaces/{namespace}/pods",
                                                   {"resourceVersion": "0"}).get("items") or []
                except (OSError, ValueError, RuntimeError):
                    continue
                phases = [(p.get("status") or {}).get("phase") for p in items]
                done = sum(1 for p in phases if p in ("Succeeded", "Failed"))
                self._samples.append((time.time(), len(items), done + phases.count("Running"), done))
        threading.Thread(target=loop, name="sampler", daemon=True).start()

    def timeline(self) -> List[Tuple[float, int, int, int]]:
        """(time, pods there, pods running or done, pods done) every second since :meth:`sample` (a pod
        deleted once done no longer counts: the caller keeps the highest counts)."""
        return list(self._samples)

    def rss_mb(self, name: str) -> float:
        """Resident memory of ``kube-apiserver`` or ``etcd`` now, in MB."""
        return memory_mb(self.cluster.plane.procs[name].pid)[0]

    def write_kubeconfig(self, path: str, namespace: str = "default") -> str:
        return self.cluster.write_kubeconfig(path, namespace=namespace)

    def _counts(self) -> Dict[Tuple[str, str], int]:
        """(verb, resource) -> requests served on objects of a namespace, for the pods and Secrets
        themselves (no subresource)."""
        import re

        counts: Dict[Tuple[str, str], int] = {}
        for line in self.cluster.admin.text("/metrics").splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line[:line.rindex("}")]))
            if labels.get("resource") in ("pods", "secrets") and not labels.get("subresource") \
                    and labels.get("scope") in ("namespace", "resource"):
                key = (labels.get("verb", ""), labels["resource"])
                counts[key] = counts.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
        return counts

    def clear_requests(self) -> None:
        self._baseline = self._counts()

    def count(self, method: Optional[str] = None, watch: Optional[bool] = None) -> int:
        """Requests since :meth:`clear_requests`: ``method`` POST, PUT, PATCH, DELETE, GET, LIST or
        WATCH, or every one (reads of pods only: the nodes read the Secrets of their pods); ``watch``
        True counts only watches, False leaves them out."""
        total = 0
        for (verb, resource), n in self._counts().items():
            if watch is not None and (verb == "WATCH") != watch:
                continue
            if method is None and (resource == "pods" or verb not in ("GET", "LIST", "WATCH")) or verb == method:
                total += n - self._baseline.get((verb, resource), 0)
        return total

    def clone(self, namespace: str, pods: int, threads: int = 4) -> List[str]:
        """SimProcess's ``clone`` through the API server: the one pod of ``namespace`` (a running
        pilot) made ``pods`` pilots in all, each its own name, sandbox key and output paths, bound to
        the original's node, each with its Secret (made first, so the node finds it when the pod
        comes, then owned by the pod); returns the names once every pod runs as the API server
        says. Made by the admin, ``threads`` requests at once."""
        from concurrent.futures import ThreadPoolExecutor

        from gahp.backends.k8s.identity import KEY_LENGTH
        from gahp.backends.k8s.spec import ANN_ERR, ANN_OUT, ANN_SANDBOX_ID, LABEL_SANDBOX

        admin, base = self.cluster.admin, f"/api/v1/namespaces/{namespace}"
        (original,) = admin.get(base + "/pods")["items"]
        meta0, spec = original["metadata"], original["spec"]
        secret0 = admin.get(base + "/secrets/" + meta0["name"])

        def make(i: int) -> str:
            key = f"{i:0{KEY_LENGTH}x}"
            name = f"pilot-{key}-1"
            labels = dict(meta0.get("labels") or {}, **{LABEL_SANDBOX: key})
            annotations = dict(meta0.get("annotations") or {}, **{
                ANN_SANDBOX_ID: f"bench_{i}.0", ANN_OUT: f"/var/lib/condor-ce/spool/{i}/p.out",
                ANN_ERR: f"/var/lib/condor-ce/spool/{i}/p.err"})
            admin.call("POST", base + "/secrets", {
                "apiVersion": "v1", "kind": "Secret", "type": secret0.get("type", "Opaque"),
                "metadata": {"name": name, "labels": dict(secret0["metadata"].get("labels") or {})},
                "data": secret0.get("data") or {}})
            made = admin.call("POST", base + "/pods", {
                "apiVersion": "v1", "kind": "Pod", "spec": spec,
                "metadata": {"name": name, "labels": labels, "annotations": annotations}})
            owner = dict(secret0["metadata"]["ownerReferences"][0], name=name, uid=made["metadata"]["uid"])
            admin.call("PATCH", f"{base}/secrets/{name}", {"metadata": {"ownerReferences": [owner]}},
                       content_type="application/merge-patch+json")
            return name

        with ThreadPoolExecutor(threads) as pool:
            names = [meta0["name"]] + list(pool.map(make, range(1, pods)))
        deadline = time.monotonic() + 3600
        while self._not_running(namespace):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {pods} pods of {namespace} did not all run")
            time.sleep(5)
        return names

    def _not_running(self, namespace: str) -> int:
        """Pods of ``namespace`` not running, from the API server's watch cache (resourceVersion 0: a
        LIST with a limit is read from etcd, and with 10,000 pods on a busy machine outlasted the
        client's 30 s); -1 when the API server did not answer in time."""
        try:
            listed = self.cluster.admin.get(f"/api/v1/namespaces/{namespace}/pods",
                                            {"fieldSelector": "status.phase!=Running", "resourceVersion": "0"})
        except OSError:
            return -1
        return len(listed.get("items") or [])

    def close(self) -> None:
        self._stop.set()
        self.cluster.stop()

    def __enter__(self) -> "ControlPlaneCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(conn: multiprocessing.connection.Connection, config: SimConfig, priority_classes: Dict[str, int]) -> None:
    """The child: a simulator and a loop answering the parent's calls."""
    import gc
    import tempfile

    sim = KubeSim(config).start()
    for name, value in priority_classes.items():
        sim.add_priority_class(name, value)
    samples: List[Tuple[float, int, int, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            with sim.store.lock:
                pods = sim.store.items("pods")
                phases = [(p.get("status") or {}).get("phase") for p in pods]
            done = sum(1 for p in phases if p in ("Succeeded", "Failed"))
            samples.append((time.time(), len(pods), done + phases.count("Running"), done))

    def kubeconfig_text(namespace: str) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            path = sim.write_kubeconfig(os.path.join(tmp, "kubeconfig"), namespace=namespace)
            return Path(path).read_text()

    def count(method: Optional[str], path: Optional[str], status: Optional[int], watch: Optional[bool]) -> int:
        return sum(1 for r in sim.requests(method, path) if (status is None or r.status == status)
                   and (watch is None or bool(r.query.get("watch")) == watch))

    def clone(namespace: str, pods: int) -> List[str]:
        names = clone_pilots(sim, namespace, pods)
        sim.tick()
        # The simulator's objects leave the cyclic collector, whose full passes over them would stall
        # the replies.
        gc.collect()
        gc.freeze()
        return names

    calls: Dict[str, Callable[..., Any]] = {
        "write_kubeconfig": lambda path, namespace: sim.write_kubeconfig(path, namespace=namespace),
        "kubeconfig_text": kubeconfig_text, "count": count, "clear_requests": sim.clear_requests,
        "clone": clone, "timeline": lambda: list(samples),
        "sample": lambda: threading.Thread(target=sample, name="sampler", daemon=True).start(),
    }
    conn.send((True, sim.url))
    try:
        while True:
            try:
                name, args = conn.recv()
            except EOFError:
                return
            if name == "stop":
                conn.send((True, None))
                return
            try:
                conn.send((True, calls[name](*args)))
            except Exception:  # noqa: BLE001 - the parent gets the traceback
                conn.send((False, traceback.format_exc()))
    finally:
        stop.set()
        sim.stop()


def clone_pilots(sim: KubeSim, namespace: str, pods: int) -> List[str]:
    """Make the one pod of ``namespace`` (a running pilot, with its Secret and its simulated run)
    ``pods`` pilots in all, as a CE that submitted them would have them: each its own sandbox key,
    name, uid, output paths and times (one pilot started a second, as a CE fills up over a day or
    more). What is equal across pilots (the spec, the Secret's data) is one object shared by all:
    stored objects are never changed in place. Loaded in one go, without an event per pod."""
    from gahp.backends.k8s.identity import KEY_LENGTH
    from gahp.backends.k8s.spec import ANN_ERR, ANN_OUT, ANN_SANDBOX_ID, LABEL_SANDBOX

    store, cluster = sim.store, sim.cluster
    with store.lock:
        (original,) = store.items("pods", namespace)
        meta0, status0 = original["metadata"], original["status"]
        secret = store.get("secrets", namespace, meta0["name"])
        run = cluster.runs[meta0["uid"]]
        names = [meta0["name"]]
        new_pods: List[Dict[str, Any]] = []
        new_secrets: List[Dict[str, Any]] = []
        started = time.time()
        for i in range(1, pods):
            key = f"{i:0{KEY_LENGTH}x}"
            name, uid = f"pilot-{key}-1", str(uuid.uuid4())
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started - i))
            meta = dict(meta0, name=name, uid=uid, creationTimestamp=stamp,
                        labels=dict(meta0["labels"], **{LABEL_SANDBOX: key}),
                        annotations=dict(meta0["annotations"], **{
                            ANN_SANDBOX_ID: f"bench_{i}.0", ANN_OUT: f"/var/lib/condor-ce/spool/{i}/p.out",
                            ANN_ERR: f"/var/lib/condor-ce/spool/{i}/p.err"}))
            status = dict(status0, startTime=stamp,
                          conditions=[dict(c, lastTransitionTime=stamp) for c in status0.get("conditions") or []],
                          containerStatuses=[dict(c, state={"running": {"startedAt": stamp}})
                                             for c in status0.get("containerStatuses") or []])
            new_pods.append(dict(original, metadata=meta, status=status))
            cluster.runs[uid] = dataclasses.replace(run, uid=uid, name=name)
            if secret is not None:
                owner = [dict(secret["metadata"]["ownerReferences"][0], name=name, uid=uid)]
                new_secrets.append(dict(secret, metadata=dict(secret["metadata"], name=name,
                                                              uid=str(uuid.uuid4()), ownerReferences=owner)))
            names.append(name)
        store.load("pods", new_pods)
        store.load("secrets", new_secrets)
    return names


# ------------------------------------------------------------------------------------------------
# podgahp in a root as pip installs it

#: Dependencies of podgahp (setup.cfg) that Debian's roots lack: the benchmarks add them to the
#: root's virtualenv from PyPI's wheels, so that what they measure is podgahp as ``pip install``
#: makes it (the live tests keep the roots' packages alone, and so the paths without them).
MISSING_IN_ROOTS = ("msgspec",)


def requirement(name: str) -> str:
    """The requirement of setup.cfg on ``name`` (e.g. ``msgspec>=0.18``)."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    for line in parser["options"]["install_requires"].split():
        if Requirement(line).name.lower() == name:
            return line
    raise KeyError(f"setup.cfg does not require {name}")


def add_dependency_wheels(installation: Any) -> str:
    """Give ``installation`` (a harness root) the wheels of :data:`MISSING_IN_ROOTS` for its Python,
    downloaded once into the harness cache (PyPI); what was added, or why nothing was, for the
    table's heading."""
    from harness.rootfs import cache_dir
    python = installation.run(["/usr/bin/python3" if installation.chroot else sys.executable, "-c",
                               "import sys; print('%d.%d' % sys.version_info[:2])"]).stdout.strip()
    wheels: List[Path] = []
    for name in MISSING_IN_ROOTS:
        directory = cache_dir() / "wheels" / f"py{python}"
        directory.mkdir(parents=True, exist_ok=True)
        found = sorted(directory.glob(f"{name}-*.whl"))
        if not found:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                 "--python-version", python, "--platform", "manylinux2014_x86_64", "--platform",
                 "manylinux_2_17_x86_64", "--dest", str(directory), requirement(name)],
                capture_output=True, text=True, timeout=300)
            found = sorted(directory.glob(f"{name}-*.whl"))
            if done.returncode or not found:
                return f"without {name} (no wheel for Python {python}: {done.stderr.strip()[-200:]})"
        wheels.append(found[-1])
    installation.wheels = tuple(wheels)
    return "with " + ", ".join(w.name.split("-")[0] + " " + w.name.split("-")[1] for w in wheels)
