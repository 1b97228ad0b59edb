"""Shared pieces of the end-to-end tests: a CE-like pool with the shipped routes whose gridmanager
starts the installed ``k8s_gahp`` / ``lancium_gahp``, wired to a simulated Kubernetes cluster or
Lancium service running in the test process.

The simulators listen on 127.0.0.1 (port 0); the chroot shares the host's network namespace, so the
GAHP inside the root reaches them. On the real engine (tests/engines.py) the cluster is the real
control plane with the simulator's kubelets as the same three nodes, its ``pilots`` namespace emptied
for each test, and the CE's kubeconfig a ServiceAccount bound to the shipped Role alone. Their credentials are written into the pool's per-run directory,
where the GAHP (running as the job owner ``pilot``) can read them.

Test modules import the fixtures they use from here (``from e2e import kube_sim``); the pool
fixtures themselves (``make_pool``, ``installation``) come from ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from engines import RealEngine, shipped_role
from podgahp_sim.k8s import KubeSim, SimConfig, SimNode, Taint
from podgahp_sim.kube.cluster import KubeCluster
from podgahp_sim.kube.node import NodeSpec
from podgahp_sim.lancium import LanciumSim
from harness import Installation, Pool

#: Namespace of the pilot pods.
NAMESPACE = "pilots"
#: Image of every queue (the simulator pulls any image whose name lacks "does-not-exist").
IMAGE = "registry.example.org/osg/pilot:1"
#: An image the simulated cluster cannot pull.
BAD_IMAGE = "registry.example.org/osg/does-not-exist:1"
#: Value of the pods' podgahp.htcondor.org/ce label.
CE_NAME = "e2e-ce"

LABEL_SANDBOX = "podgahp.htcondor.org/sandbox"
LABEL_QUEUE = "podgahp.htcondor.org/queue"
ANN_SANDBOX_ID = "podgahp.htcondor.org/sandbox-id"

#: The shipped routes (new syntax), as installed in the root.
ROUTES_FILE = "routes/50-podgahp-routes.conf"

#: Stand-in for a glidein: the pods run in the simulator, so only its name and arguments matter.
PILOT_SCRIPT = """#!/bin/sh
echo "pilot $* starting"
"""

#: Faster than the harness's fast knobs, so the suite stays within its time budget: status polls
#: every 2 s (harness 5 s), and the schedd counts jobs, and so tells the gridmanager about newly
#: routed grid jobs, every 2 s (harness 5 s; SCHEDD_MIN_INTERVAL, default 5, bounds it).
E2E_FAST = """\
GRIDMANAGER_JOB_PROBE_INTERVAL = 2
SCHEDD_INTERVAL = 2
SCHEDD_MIN_INTERVAL = 1
"""

#: Knobs of the Kubernetes backend for these tests; $(LOCAL_DIR) is the pool's per-run directory.
K8S_KNOBS = f"""\
PODGAHP_K8S_QUEUES = cpu gpu opportunistic
PODGAHP_K8S_DEFAULT_QUEUE = cpu
PODGAHP_K8S_KUBECONFIG = $(LOCAL_DIR)/kubeconfig
PODGAHP_K8S_NAMESPACE = {NAMESPACE}
PODGAHP_K8S_CE_NAME = {CE_NAME}
PODGAHP_K8S_IMAGE = {IMAGE}
PODGAHP_K8S_DELETE_GRACE_SECONDS = 2
PODGAHP_K8S_RETRIES = 2
PODGAHP_K8S_BACKOFF_SECONDS = 0.2
PODGAHP_K8S_GPU_MAX_GPUS = 4
PODGAHP_K8S_OPPORTUNISTIC_ALLOWED_PRIORITY_CLASSES = podgahp-opportunistic
PODGAHP_DEBUG = DEBUG
"""

#: JobStatus values.
IDLE, RUNNING, REMOVED, COMPLETED, HELD = 1, 2, 3, 4, 5

JOB_ATTRS = ["ClusterId", "ProcId", "JobStatus", "GridJobId", "GridResource", "HoldReason",
             "HoldReasonCode", "HoldReasonSubCode", "ExitCode", "ExitBySignal", "RoutedFromJobId",
             "RoutedToJobId", "RouteName", "GlobalJobId", "Iwd", "Out", "Err", "NumJobStarts",
             "EnteredCurrentStatus", "Owner"]


# ------------------------------------------------------------------------------------------------
# simulators


def sim_nodes() -> Sequence[SimNode]:
    """Two CPU nodes and one GPU node (tainted, as GPU nodes usually are), each 16 cores / 64 GiB."""
    return (
        SimNode("cpu-1", cpu="16", memory="64Gi"),
        SimNode("cpu-2", cpu="16", memory="64Gi"),
        SimNode("gpu-1", cpu="16", memory="64Gi", gpus=2, labels={"e2e/gpu": "true"},
                taints=(Taint("nvidia.com/gpu", "", "NoSchedule"),)),
    )


def node_specs(nodes: Sequence[SimNode], **options: Any) -> List[NodeSpec]:
    """The simulator's nodes as nodes of the real control plane (``podgahp sim node``), each with
    ``options`` (``runtime``, ``images``...)."""
    return [NodeSpec(n.name, cpus=n.cpu, memory=n.memory, gpus=n.gpus, pods=n.pods, labels=dict(n.labels),
                     taints=n.taints, **options) for n in nodes]


def real_nodes() -> Tuple[NodeSpec, ...]:
    """The nodes of :func:`sim_nodes` as the real engine's (the simulator's kubelet, modelled containers)."""
    return tuple(node_specs(sim_nodes()))


#: The PriorityClass of the opportunistic queue (PODGAHP_K8S_OPPORTUNISTIC_ALLOWED_PRIORITY_CLASSES).
OPPORTUNISTIC_PRIORITY = ("podgahp-opportunistic", -100)


def with_right(role: Dict[str, Any], verb: str, resource: str) -> Dict[str, Any]:
    """``role`` and one right more (``list events``, say)."""
    return dict(role, rules=list(role["rules"]) + [{"apiGroups": [""], "resources": [resource], "verbs": [verb]}])


def without_right(role: Dict[str, Any], verb: str, resource: str) -> Dict[str, Any]:
    """``role`` less one right (``create pods``, say)."""
    rules = [dict(r, verbs=[v for v in r["verbs"] if not (v == verb and resource in r["resources"])])
             for r in role["rules"]]
    return dict(role, rules=[r for r in rules if r["verbs"]])


@contextlib.contextmanager
def real_namespace(cluster: KubeCluster, namespace: str = NAMESPACE) -> Iterator[RealEngine]:
    """A namespace of the real control plane as a test's cluster: emptied before and after, its
    ServiceAccount bound to the shipped Role alone, the request log from here on."""
    cluster.add_namespace(namespace)
    engine = RealEngine(cluster, namespace)
    try:
        engine.empty_namespace()
        engine.enforce_role(shipped_role())
        engine.clear_requests()
        yield engine
    finally:
        engine.close()
        engine.empty_namespace()


@contextlib.contextmanager
def running_cluster() -> Iterator[KubeSim]:
    """A simulated Kubernetes cluster with the namespace of the pilots, stopped when the block ends."""
    sim = KubeSim(SimConfig(nodes=tuple(sim_nodes()), namespaces=("default", NAMESPACE))).start()
    sim.add_priority_class(*OPPORTUNISTIC_PRIORITY)
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def kube_sim(engine: str, request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    """The pilots' cluster: a simulated one with the namespace of the pilots, stopped after the test;
    on the real engine (a test marked both_engines) the real control plane's (:func:`real_namespace`),
    whose reads and request log are KubeSim's."""
    if engine == "real":
        with real_namespace(request.getfixturevalue("real_cluster")) as real:
            yield real  # type: ignore[misc]
        return
    with running_cluster() as sim:
        yield sim


@pytest.fixture
def lancium_sim() -> Iterator[LanciumSim]:
    """A simulated Lancium service, stopped after the test."""
    sim = LanciumSim().start()
    try:
        yield sim
    finally:
        sim.stop()


def kubeconfig_text(sim: KubeSim, namespace: str = NAMESPACE) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kubeconfig")
        sim.write_kubeconfig(path, namespace=namespace)
        return Path(path).read_text()


# GPU pods must tolerate the GPU nodes' taint: the gpu queue's template says so.
GPU_TEMPLATE = """\
apiVersion: v1
kind: Pod
spec:
  nodeSelector: {e2e/gpu: "true"}
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  containers:
  - name: pilot
"""


# ------------------------------------------------------------------------------------------------
# pools


def routes_config(installation: Installation) -> str:
    """Configuration that loads the shipped routes file (as the root sees it)."""
    return f"include : {installation.src_dir}/{ROUTES_FILE}\n"


def start_k8s_ce(make_pool: Callable[..., Pool], installation: Installation, sim: KubeSim,
                 extra_config: str = "") -> Pool:
    """A CE-like pool with the shipped routes, K8S_GAHP = the installed k8s_gahp, pointed at `sim`.

    `extra_config` is read last (extra routes, limits, knobs)."""
    config = (routes_config(installation)
              + f"K8S_GAHP = {installation.bin('k8s_gahp')}\n"
              + K8S_KNOBS
              + E2E_FAST
              + "PODGAHP_K8S_GPU_POD_TEMPLATE = $(LOCAL_DIR)/gpu-template.yaml\n"
              + extra_config)
    return make_pool(extra_config=config,
                     files={"kubeconfig": kubeconfig_text(sim), "gpu-template.yaml": GPU_TEMPLATE})


#: The Lancium API key file in the pool's per-run directory.
KEY_FILE = "lancium/api_key"


def start_lancium_ce(make_pool: Callable[..., Pool], installation: Installation, sim: LanciumSim) -> Pool:
    """A CE-like pool with the shipped routes whose LANCIUM_GAHP talks to `sim`."""
    config = (routes_config(installation)
              + f"LANCIUM_GAHP = {installation.bin('lancium_gahp')}\n"
              + f"PODGAHP_LANCIUM_BASE_URL = {sim.url}\n"
              + f"PODGAHP_LANCIUM_API_KEY_FILE = $(LOCAL_DIR)/{KEY_FILE}\n"
              # Status polls every few seconds must see fresh job lists.
              + "PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS = 1\n"
              + "PODGAHP_LANCIUM_RETRIES = 1\n"
              + "PODGAHP_LANCIUM_BACKOFF_SECONDS = 0.2\n"
              + "PODGAHP_DEBUG = DEBUG\n"
              + E2E_FAST)
    pool = make_pool(extra_config=config, files={KEY_FILE: sim.api_key + "\n"})
    # The GAHP runs as the job owner and refuses a key file others can read.
    owner = installation.user("pilot")
    key = pool.path(f"{pool.local_dir}/{KEY_FILE}")
    os.chown(key, owner.uid, owner.gid)
    os.chmod(key, 0o600)
    return pool


def iwd(pool: Pool, user: str = "pilot") -> str:
    """A fresh Iwd owned by `user` holding the pilot script `pilot.sh`."""
    path = pool.user_dir(user)
    write_user_file(pool, f"{path}/pilot.sh", PILOT_SCRIPT, user, mode=0o755)
    return path


def write_user_file(pool: Pool, path: str, text: str, user: str = "pilot", mode: int = 0o644) -> None:
    host = pool.path(path)
    host.parent.mkdir(parents=True, exist_ok=True)
    host.write_text(text)
    owner = pool.installation.user(user)
    os.chown(host, owner.uid, owner.gid)
    os.chmod(host, mode)


def x509_proxy(days: int) -> str:
    """An X.509 certificate and key in one file, as a proxy is, valid for ``days``."""
    import datetime

    import trustme
    ca = trustme.CA(key_type=trustme.KeyType.RSA)
    cert = ca.issue_cert("pilot.podgahp.test", common_name="pilot",
                         not_after=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=days),
                         key_type=trustme.KeyType.RSA)
    return "".join(blob.bytes().decode() for blob in cert.cert_chain_pems) + cert.private_key_pem.bytes().decode()


def pilot_submit(iwd: str, name: str, run_seconds: float = 3, exit_code: Optional[int] = None,
                 extra: Sequence[str] = (), count: int = 1, env: Sequence[str] = ()) -> str:
    """A pilot as a factory sends it to a CE: vanilla universe, CE attributes as `extra` lines.

    With `count` > 1, $(Process) numbers the outputs."""
    suffix = "-$(Process)" if count > 1 else ""
    variables = [f"PODGAHP_SIM_RUN_SECONDS={run_seconds}"] + list(env)
    if exit_code is not None:
        variables.append(f"PODGAHP_SIM_EXIT_CODE={exit_code}")
    return "\n".join([
        "universe = vanilla",
        f"executable = {iwd}/pilot.sh",
        f"arguments = {name}{suffix} glidein",
        f"output = {name}{suffix}.out",
        f"error = {name}{suffix}.err",
        f"log = {name}.log",
        f"initialdir = {iwd}",
        f'environment = "{" ".join(variables)}"',
        *extra,
        f"queue {count}",
    ]) + "\n"


# ------------------------------------------------------------------------------------------------
# reading the queue and the simulated cluster


def job_id(ad: Dict[str, Any]) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


def routed_jobs(pool: Pool, source_cluster: Optional[int] = None, in_queue_only: bool = False) -> List[Dict[str, Any]]:
    """Routed copies (grid jobs) in the queue, then in the history; of one source cluster if given."""
    constraint = "RoutedFromJobId =!= undefined"
    ads = pool.q(constraint, JOB_ATTRS) if in_queue_only else pool.jobs(constraint, JOB_ATTRS)
    if source_cluster is None:
        return ads
    return [ad for ad in ads if str(ad["RoutedFromJobId"]).split(".")[0] == str(source_cluster)]


def source_jobs(pool: Pool, cluster: int) -> List[Dict[str, Any]]:
    return pool.jobs(f"ClusterId == {cluster}", JOB_ATTRS)


def grid_parts(ad: Dict[str, Any]) -> List[str]:
    return str(ad.get("GridJobId") or "").split()


def pod_of(ad: Dict[str, Any], namespace: str = NAMESPACE) -> Optional[str]:
    """Pod name in a routed job's GridJobId (`batch k8s <sandbox> k8s/<ns>/<pod>`), else None."""
    parts = grid_parts(ad)
    if len(parts) == 4 and parts[3].startswith(f"k8s/{namespace}/"):
        return parts[3].split("/", 2)[2]
    return None


def wait_for_pods(pool: Pool, cluster: int, count: int, namespace: str = NAMESPACE,
                  timeout: float = 90) -> Dict[str, str]:
    """Wait until `count` routed jobs of `cluster` name a pod (in `namespace`); source job id -> pod
    name. A short pilot's grid job may leave the queue between two looks (on a busy machine): the
    history counts too."""
    def named() -> Optional[Dict[str, str]]:
        pods = {ad["RoutedFromJobId"]: pod_of(ad, namespace) for ad in routed_jobs(pool, cluster)}
        found = {k: v for k, v in pods.items() if v}
        return found if len(found) >= count else None
    return pool.wait_for(named, timeout=timeout, interval=0.5, what=f"{count} routed jobs with a pod")


def wait_done(pool: Pool, cluster: int, count: int, statuses: Sequence[int] = (COMPLETED,),
              timeout: float = 120) -> List[Dict[str, Any]]:
    """Wait until `count` source jobs of `cluster` are in one of `statuses` (queue or history)."""
    def done() -> Optional[List[Dict[str, Any]]]:
        ads = [ad for ad in source_jobs(pool, cluster) if "RoutedFromJobId" not in ad]
        unique = {job_id(ad): ad for ad in reversed(ads)}  # queue ads win over history
        finished = [ad for ad in unique.values() if ad.get("JobStatus") in statuses]
        return finished if len(finished) >= count else None
    return pool.wait_for(done, timeout=timeout, interval=1, what=f"{count} jobs of cluster {cluster} "
                         f"in status {list(statuses)}")


def pods_by_sandbox(sim: KubeSim) -> Dict[str, List[str]]:
    """Pod names per sandbox label, every pod the simulator still has."""
    out: Dict[str, List[str]] = {}
    for pod in sim.pods(NAMESPACE):
        label = pod["metadata"].get("labels", {}).get(LABEL_SANDBOX, "")
        out.setdefault(label, []).append(pod["metadata"]["name"])
    return out


def pod_creations(sim: KubeSim) -> List[str]:
    """Paths of the successful pod creations the simulator served (one per pod ever created; the
    dry-run creates of BLAH_PING store nothing and are not counted)."""
    return [r.path for r in sim.requests("POST", f"/namespaces/{NAMESPACE}/pods$")
            if r.status == 201 and not r.query.get("dryRun")]


def pod_deletions(sim: KubeSim, name: str) -> List[int]:
    """Status codes of DELETE requests for pod `name`."""
    return [r.status for r in sim.requests("DELETE", f"/namespaces/{NAMESPACE}/pods/{re.escape(name)}$")]


def container(pod: Dict[str, Any]) -> Dict[str, Any]:
    for c in pod["spec"]["containers"]:
        if c["name"] == "pilot":
            return c
    raise AssertionError(f"pod {pod['metadata']['name']} has no pilot container: {pod['spec']['containers']}")


def env_of(pod: Dict[str, Any]) -> Dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container(pod).get("env", [])}


def gahp_pids(pool: Pool, knob: str = "K8S_GAHP") -> List[int]:
    """Pids of the pool's processes running the program named by `knob` (K8S_GAHP, LANCIUM_GAHP)."""
    path = pool.config_val(knob)
    assert path, f"{knob} is not set"
    pids = []
    for pid in pool.processes():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        # The console script runs under the venv's python: argv = [python, script].
        if any(arg.decode(errors="replace") == path for arg in argv[:2]):
            pids.append(pid)
    return sorted(pids)
