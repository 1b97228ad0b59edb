"""What a site's control plane goes through while pilots run, on the real control plane (Debian's
release, tests/engines.py) with the simulator's kubelets as its nodes: the API server restarted (an
upgrade) behind 200 running pilots, etcd compacted and the API server restarted while the GAHP is cut
off from it (its watch then resumes from a ``resourceVersion`` the server no longer has: ``410 Gone``),
and etcd killed with -9 and started again. Throughout, a status is never reported wrongly, no pilot is
lost and none runs twice; every change made meanwhile is reported once the server is back.

The control plane here is this module's own (its nodes sized for 200 pilots), since the tests restart
its processes. The simulator's counterparts (an expired watch, an API that fails) are in
test_k8s_status_cache.py, where the simulator injects those faults.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.identity import LABEL_SANDBOX
from gahp.core.config import Knobs
from gahp.core.errors import GahpError
from gahp.core.jobstate import Phase
from engines import RealEngine, control_plane_binaries, namespace_for
from k8s_helpers import knobs_for, make_job, wait_state
from podgahp_sim.kube.cluster import KubeCluster
from podgahp_sim.kube.node import NodeSpec
from polling import wait_until
from tcp_proxy import CutProxy

PILOTS = 200
LONG = [("PODGAHP_SIM_RUN_SECONDS", "3600")]
NODES = tuple(NodeSpec("site-node-%d" % i, cpus="256", memory="512Gi", pods=160, tick_seconds=0.1,
                       run_seconds=0.5, container_create_seconds=0.05, sigterm_exit_seconds=0.2) for i in (1, 2))


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeCluster]:
    with KubeCluster(control_plane_binaries(), NODES) as running:
        yield running


@pytest.fixture
def site_engine(cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[RealEngine]:
    namespace = namespace_for(request.node.name)
    cluster.add_namespace(namespace)
    engine = RealEngine(cluster, namespace)
    try:
        yield engine
    finally:
        engine.close()
        cluster.delete_namespace(namespace)


def backend_of(engine: RealEngine, tmp_path: Path, server: str = "") -> Agent:
    kubeconfig = engine.write_kubeconfig(str(tmp_path / "kubeconfig"), server=server or None)
    return Agent(KubernetesBackend.from_knobs(Knobs(knobs_for(kubeconfig))))


def submit_all(backend: Agent, tmp_path: Path, count: int, prefix: str, env: List[Tuple[str, str]],
               ) -> List[str]:
    return [backend.submit(make_job(tmp_path, sandbox="ce.test_host_%s.%d_1795297304" % (prefix, n), env=env))
            for n in range(count)]


def all_in(backend: Agent, job_ids: List[str], phase: Phase, timeout: float) -> None:
    wait_until(lambda: [j for j in job_ids if backend.status(j).phase is not phase], "%d pilots %s"
               % (len(job_ids), phase.value), timeout, 0.5, done=lambda behind: not behind)


def pod_uids(engine: RealEngine) -> Dict[str, str]:
    """Pod name -> uid of the namespace's pilots' pods."""
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in engine.pods()}


def wait_deleted(engine: RealEngine, job_ids: List[str]) -> None:
    """Until the pilots' pods are gone, and their input Secrets (the garbage collector's)."""
    names = [j.split("/")[2] for j in job_ids]
    wait_until(lambda: [n for n in names if engine.pod(engine.namespace, n) or engine.secret(engine.namespace, n)],
               "the pods and Secrets of %d cancelled pilots deleted" % len(names), 120, 0.5, done=lambda left: not left)


def one_pod_per_pilot(engine: RealEngine) -> None:
    sandboxes = Counter(p["metadata"]["labels"][LABEL_SANDBOX] for p in engine.pods())
    assert sandboxes and set(sandboxes.values()) == {1}, [s for s, n in sandboxes.items() if n > 1]


class Poller:
    """Polls the status of every pilot in a loop, as the gridmanager does, and keeps what it was told."""

    def __init__(self, backend: Agent, job_ids: List[str]) -> None:
        self.backend, self.job_ids = backend, job_ids
        self.seen: Dict[str, List[Phase]] = {j: [] for j in job_ids}
        self.errors: List[str] = []
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> "Poller":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _poll(self) -> None:
        while not self._stop.is_set():
            for job_id in self.job_ids:
                try:
                    phase = self.backend.status(job_id).phase
                except GahpError as e:
                    self.errors.append("%s: %s" % (job_id, e))
                    continue
                if not self.seen[job_id] or self.seen[job_id][-1] is not phase:
                    self.seen[job_id].append(phase)
            self.rounds += 1

    def wait_rounds(self, more: int) -> None:
        target = self.rounds + more
        wait_until(lambda: self.rounds >= target, "%d more status rounds" % more, 120, 0.05)


@pytest.mark.timeout(900)
def test_api_server_restarted_behind_200_running_pilots(cluster: KubeCluster, site_engine: RealEngine,
                                                        tmp_path: Path) -> None:
    engine = site_engine
    backend = backend_of(engine, tmp_path)
    try:
        running = submit_all(backend, tmp_path, PILOTS, "run", LONG)
        all_in(backend, running, Phase.RUNNING, 400)
        before = pod_uids(engine)
        cancelled, kept = running[:10], running[10:]
        with Poller(backend, kept) as poller:
            poller.wait_rounds(1)
            cluster.plane.restart("kube-apiserver")
            poller.wait_rounds(1)
            for job_id in cancelled:
                backend.cancel(job_id)
            after = submit_all(backend, tmp_path, 10, "after", [("PODGAHP_SIM_RUN_SECONDS", "1")])
            all_in(backend, after, Phase.COMPLETED, 300)
            wait_deleted(engine, cancelled)
            poller.wait_rounds(2)
        assert poller.errors == []
        assert {j: poller.seen[j] for j in kept if poller.seen[j] != [Phase.RUNNING]} == {}
        now = pod_uids(engine)
        assert {name: now.get(name) for name in (j.split("/")[2] for j in kept) if now.get(name) != before[name]} == {}
        one_pod_per_pilot(engine)
    finally:
        backend.close()


@pytest.mark.timeout(600)
def test_a_compacted_history_while_the_gahp_is_cut_off_is_one_relist(cluster: KubeCluster, site_engine: RealEngine,
                                                                     tmp_path: Path) -> None:
    engine = site_engine
    proxy = CutProxy(("127.0.0.1", cluster.plane.port)).start()
    backend = backend_of(engine, tmp_path, server=proxy.url)
    try:
        job_ids = submit_all(backend, tmp_path, 20, "cut", LONG)
        all_in(backend, job_ids, Phase.RUNNING, 300)
        (cache,) = backend.backend.clusters.caches()
        lists = cache.lists
        proxy.cut()
        gone = job_ids[:5]
        for job_id in gone:  # an admin deletes pods while the GAHP cannot see it
            engine.api.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (engine.namespace, job_id.split("/")[2]),
                            {"gracePeriodSeconds": 0})
        wait_until(lambda: not [j for j in gone if engine.pod(engine.namespace, j.split("/")[2])], "the pods deleted")
        assert all(backend.status(j).phase is Phase.RUNNING for j in job_ids)  # what it last knew, from its copy
        cluster.plane.compact_etcd()
        cluster.plane.restart("kube-apiserver")
        proxy.restore()
        all_in(backend, gone, Phase.REMOVED, 120)
        assert all(backend.status(j).phase is Phase.RUNNING for j in job_ids[5:])
        assert cache.lists == lists + 1, "one LIST after the 410"
        assert proxy.refused > 0  # the GAHP did try while cut off
    finally:
        backend.close()
        proxy.close()


@pytest.mark.timeout(600)
def test_etcd_killed_and_started_again(cluster: KubeCluster, site_engine: RealEngine, tmp_path: Path) -> None:
    engine = site_engine
    backend = backend_of(engine, tmp_path)
    try:
        job_ids = submit_all(backend, tmp_path, 20, "etcd", LONG)
        all_in(backend, job_ids, Phase.RUNNING, 300)
        etcd = cluster.plane.procs["etcd"]
        etcd.kill()
        etcd.wait(30)
        assert all(backend.status(j).phase is Phase.RUNNING for j in job_ids)
        job = make_job(tmp_path, sandbox="ce.test_host_etcd.100_1795297304", env=LONG)
        with pytest.raises(GahpError) as refused:  # the gridmanager sends it again
            backend.submit(job)
        assert "Traceback" not in str(refused.value)
        cluster.plane.restart("etcd", kill=True)
        again = backend.submit(job)
        wait_state(backend, again, Phase.RUNNING, timeout=120)
        backend.cancel(job_ids[0])
        wait_deleted(engine, job_ids[:1])
        assert all(backend.status(j).phase is Phase.RUNNING for j in job_ids[1:])
        one_pod_per_pilot(engine)
    finally:
        backend.close()
