"""Nothing of a pilot is left in the pilots' namespace after its life, on both engines: 100 pilots run
and complete, their outcomes are reported, one clean-up pass deletes their pods, and the garbage
collector (the real one on the real control plane) their input Secrets, which the pods own. What an
admin sees with kubectl is then an empty namespace (but for the ServiceAccounts' token Secrets that
Kubernetes 1.20 makes in every namespace). The same holds for the pods of orphaned pilots that a
``podgahp reap`` pass deletes, and for cancelled pilots, with the shipped Role's rights alone; the
Role does not grant ``list secrets``, so what is left of the Secrets is read with the admin's rights."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List

import pytest

from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.spec import ANN_REPORTED
from gahp.core.config import Knobs
from gahp.core.jobstate import Phase
from gahp.ce.reap import reap_views
from gahp.core.schedd import GridJobs
from podgahp_sim.k8s import KubeSim

from engines import shipped_role
from k8s_helpers import BackendFactory, knobs_for, make_job, wait_state

pytestmark = pytest.mark.both_engines

PILOTS = 100


def kubectl(kubeconfig: str, *args: str) -> List[str]:
    kubectl_bin = shutil.which("kubectl")
    assert kubectl_bin, "kubectl is not installed (make system-deps installs it)"
    out = subprocess.run([kubectl_bin, "--kubeconfig", kubeconfig, *args, "-o", "name"], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.timeout(600)
def test_nothing_of_100_pilots_is_left_after_their_life(make_backend: BackendFactory, sim: KubeSim, tmp_path: Path,
                                                        kubeconfig: str) -> None:
    backend = make_backend(PODGAHP_K8S_FINISHED_RETENTION_SECONDS="0")
    jobs = [make_job(tmp_path, sandbox="ce.test_host_gc.%d_1795297304" % n, env=[("PODGAHP_SIM_RUN_SECONDS", "0.5")])
            for n in range(PILOTS)]
    with ThreadPoolExecutor(8) as pool:
        job_ids = list(pool.map(backend.submit, jobs))
    assert len(kubectl(kubeconfig, "get", "secrets", "--field-selector", "type!=kubernetes.io/service-account-token")
               ) == PILOTS
    for job_id in job_ids:
        assert wait_state(backend, job_id, Phase.COMPLETED, Phase.HELD, timeout=300).phase is Phase.COMPLETED
    (cache,) = backend.backend.clusters.caches()
    sim.wait_for(lambda: all(pod is not None and pod.annotation(ANN_REPORTED)
                             for pod in (cache.get(j.split("/")[2]) for j in job_ids)),
                 60, "every outcome marked reported in the watch copy")
    assert len(backend.backend.reap(cache)) == PILOTS
    sim.wait_for(lambda: not kubectl(kubeconfig, "get", "pods") and not kubectl(
        kubeconfig, "get", "secrets", "--field-selector", "type!=kubernetes.io/service-account-token"),
        120, "no pod and no Secret of the pilots left")



def _left(sim: KubeSim, namespace: str, job_ids: List[str]) -> List[str]:
    """The pods and Secrets of these pilots still in the namespace (a pilot's Secret is named as its pod),
    read with the admin's rights."""
    names = {j.split("/")[2] for j in job_ids}
    return sorted(["pod/" + p["metadata"]["name"] for p in sim.pods(namespace) if p["metadata"]["name"] in names]
                  + ["secret/" + s["metadata"]["name"] for s in sim.secrets(namespace)
                     if s["metadata"]["name"] in names])


def _running_pilots(backend: KubernetesBackend, tmp_path: Path, count: int) -> List[str]:
    """Pilots of schedd ``host``'s jobs 1.0, 2.0..., running."""
    jobs = [make_job(tmp_path, sandbox="ce.test_host_%d.0_1795297304" % (n + 1),
                     env=[("PODGAHP_SIM_RUN_SECONDS", "600")]) for n in range(count)]
    job_ids = [backend.submit(job) for job in jobs]
    for job_id in job_ids:
        assert wait_state(backend, job_id, Phase.RUNNING, timeout=120).phase is Phase.RUNNING
    return job_ids


@pytest.mark.timeout(300)
def test_a_reap_pass_deletes_orphans_and_the_garbage_collector_their_secrets(
        make_backend: BackendFactory, sim: KubeSim, tmp_path: Path, kubeconfig: str, namespace: str) -> None:
    """Running pilots whose jobs the schedd no longer has: a ``podgahp reap`` pass with the shipped Role's
    rights deletes their pods (and only theirs), and the garbage collector their Secrets; the pilots whose
    jobs remain keep both."""
    sim.enforce_role(shipped_role())
    backend = make_backend()
    job_ids = _running_pilots(backend, tmp_path, 8)
    kept, orphans = job_ids[:2], job_ids[2:]
    assert len(_left(sim, namespace, job_ids)) == 2 * len(job_ids)
    view = KubernetesBackend.ce_view(Knobs(knobs_for(kubeconfig)))
    assert view is not None
    try:
        result = reap_views([view], GridJobs(frozenset(kept), len(kept), "host"), grace_s=0)
    finally:
        view.close()
    assert (result.jobs, result.orphans, result.deleted, result.errors) == (len(job_ids), len(orphans),
                                                                              len(orphans), [])
    sim.wait_for(lambda: not _left(sim, namespace, orphans), 120, "no pod and no Secret of the orphans left")
    assert _left(sim, namespace, kept) == sorted(["pod/" + j.split("/")[2] for j in kept]
                                                 + ["secret/" + j.split("/")[2] for j in kept])
    for job_id in kept:
        assert backend.status(job_id).phase is Phase.RUNNING


@pytest.mark.timeout(300)
def test_cancelled_pilots_leave_neither_pod_nor_secret(make_backend: BackendFactory, sim: KubeSim,
                                                       tmp_path: Path, namespace: str) -> None:
    """Cancels with the shipped Role's rights: each running pilot's pod is deleted (through its node's
    confirmation on the real control plane) and the garbage collector deletes its Secret."""
    sim.enforce_role(shipped_role())
    backend = make_backend()
    job_ids = _running_pilots(backend, tmp_path, 6)
    assert len(_left(sim, namespace, job_ids)) == 2 * len(job_ids)
    for job_id in job_ids:
        backend.cancel(job_id)
    sim.wait_for(lambda: not _left(sim, namespace, job_ids), 120, "no pod and no Secret of the cancelled pilots")
    assert sim.pods(namespace) == [] and sim.secrets(namespace) == []
