"""Nothing of a pilot is left in the pilots' namespace after its life, on both engines: 100 pilots run
and complete, their outcomes are reported, one clean-up pass deletes their pods, and the garbage
collector (the real one on the real control plane) their input Secrets, which the pods own. What an
admin sees with kubectl is then an empty namespace (but for the ServiceAccounts' token Secrets that
Kubernetes 1.20 makes in every namespace)."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List

import pytest

from gahp.backends.k8s.spec import ANN_REPORTED
from gahp.jobstate import Phase
from podgahp_sim.k8s import KubeSim

from k8s_helpers import BackendFactory, make_job, wait_state

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
    (cache,) = backend.clusters.caches()
    sim.wait_for(lambda: all(pod is not None and pod.annotation(ANN_REPORTED)
                             for pod in (cache.get(j.split("/")[2]) for j in job_ids)),
                 60, "every outcome marked reported in the watch copy")
    assert len(backend.reap(cache)) == PILOTS
    sim.wait_for(lambda: not kubectl(kubeconfig, "get", "pods") and not kubectl(
        kubeconfig, "get", "secrets", "--field-selector", "type!=kubernetes.io/service-account-token"),
        120, "no pod and no Secret of the pilots left")

