"""One CE, three places its pilots run: two Kubernetes clusters (the cpu queue on one, the opportunistic
queue on the other, each with its own kubeconfig) and Lancium. ``podgahp q``, ``podgahp health`` and
``podgahp reap``, run on the CE with its configuration, cover all three: q shows each pilot where it
runs, health counts each queue's remote jobs, and reap deletes an orphan in each place while every
pilot keeps running."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable, Dict, Iterator, Optional

import pytest

from e2e import (ANN_SANDBOX_ID, CE_NAME, E2E_FAST, GPU_TEMPLATE, IMAGE, K8S_KNOBS, KEY_FILE, NAMESPACE, grid_parts,
                 iwd, kube_sim, kubeconfig_text, lancium_sim, pilot_submit, routed_jobs, routes_config, running_cluster,
                 wait_for_pods)
from gahp.backends.lancium.api import LanciumClient
from gahp.backends.lancium.settings import ClientSettings
from gahp.identity import sandbox_key
from harness import Installation, Pool
from podgahp_sim.k8s import KubeSim
from podgahp_sim.lancium import LanciumSim

pytestmark = pytest.mark.live

__all__ = ["kube_sim", "lancium_sim"]  # the fixtures, imported for pytest


@pytest.fixture
def second_sim() -> Iterator[KubeSim]:
    """A second simulated cluster, for the opportunistic queue."""
    with running_cluster() as sim:
        yield sim


def start_ce(make_pool: Callable[..., Pool], installation: Installation, first: KubeSim, second: KubeSim,
             lancium: LanciumSim) -> Pool:
    config = (routes_config(installation)
              + f"K8S_GAHP = {installation.bin('k8s_gahp')}\n"
              + f"LANCIUM_GAHP = {installation.bin('lancium_gahp')}\n"
              + K8S_KNOBS
              + "PODGAHP_K8S_GPU_POD_TEMPLATE = $(LOCAL_DIR)/gpu-template.yaml\n"
              + "PODGAHP_K8S_OPPORTUNISTIC_KUBECONFIG = $(LOCAL_DIR)/kubeconfig-2\n"
              + f"PODGAHP_LANCIUM_BASE_URL = {lancium.url}\n"
              + f"PODGAHP_LANCIUM_API_KEY_FILE = $(LOCAL_DIR)/{KEY_FILE}\n"
              + f"PODGAHP_LANCIUM_CE_NAME = {CE_NAME}\n"
              + "PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS = 1\n"
              + "PODGAHP_REAP_GRACE_SECONDS = 0\n"
              + E2E_FAST)
    pool = make_pool(extra_config=config, files={"kubeconfig": kubeconfig_text(first),
                                                 "kubeconfig-2": kubeconfig_text(second),
                                                 "gpu-template.yaml": GPU_TEMPLATE, KEY_FILE: lancium.api_key + "\n"})
    owner = installation.user("pilot")
    key = pool.path(f"{pool.local_dir}/{KEY_FILE}")
    os.chown(key, owner.uid, owner.gid)
    os.chmod(key, 0o600)
    return pool


def _orphan_pod(sim: KubeSim, name: str, sandbox: str, queue: str) -> None:
    """A pod of this CE whose job the schedd no longer holds (made 60 s ago, running)."""
    with sim.store.lock:
        sim.store.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": f"{name}-uid",
            "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60)),
            "labels": {"app.kubernetes.io/managed-by": "podgahp", "podgahp.htcondor.org/ce": CE_NAME,
                       "podgahp.htcondor.org/queue": queue},
            "annotations": {ANN_SANDBOX_ID: sandbox}},
            "spec": {"containers": [{"name": "pilot", "image": IMAGE}]}, "status": {"phase": "Running"}})


def _gone(sim: KubeSim, name: str) -> bool:
    pod = sim.pod(NAMESPACE, name)
    return pod is None or bool(pod["metadata"].get("deletionTimestamp"))


def _lancium_job(pool: Pool, cluster: int) -> str:
    def named() -> Optional[str]:
        ads = [ad for ad in routed_jobs(pool, cluster, in_queue_only=True) if len(grid_parts(ad)) == 4]
        return grid_parts(ads[0])[3] if ads else None
    return pool.wait_for(named, timeout=90, interval=0.5, what="a routed job with a Lancium job")


def test_q_health_and_reap_cover_two_clusters_and_lancium(make_pool: Callable[..., Pool], installation: Installation,
                                                          kube_sim: KubeSim, second_sim: KubeSim,
                                                          lancium_sim: LanciumSim) -> None:
    pool = start_ce(make_pool, installation, kube_sim, second_sim, lancium_sim)
    home = iwd(pool)
    cpu = pool.submit(pilot_submit(home, "cpu", run_seconds=300), cwd=home)
    opportunistic = pool.submit(pilot_submit(home, "opp", run_seconds=300, extra=['+queue = "opportunistic"']),
                                cwd=home)
    lancium = pool.submit(pilot_submit(home, "lan", run_seconds=300, extra=['+queue = "lancium"']), cwd=home)
    cpu_pod = wait_for_pods(pool, cpu, 1)[f"{cpu}.0"]
    opp_pod = wait_for_pods(pool, opportunistic, 1)[f"{opportunistic}.0"]
    lancium_job = _lancium_job(pool, lancium)
    # each queue's pods in its own cluster
    assert kube_sim.pod(NAMESPACE, cpu_pod) is not None and second_sim.pod(NAMESPACE, cpu_pod) is None
    assert second_sim.pod(NAMESPACE, opp_pod) is not None and kube_sim.pod(NAMESPACE, opp_pod) is None

    # An orphan in each place: the sandbox of a job of this schedd that no longer exists.
    sandbox = kube_sim.pod(NAMESPACE, cpu_pod)["metadata"]["annotations"][ANN_SANDBOX_ID]  # type: ignore[index]
    orphan_sandbox = re.sub(r"_[0-9]+\.0_([0-9]+)$", r"_99999.0_\1", sandbox)
    _orphan_pod(kube_sim, "pilot-0123456789abcdef0123-1", orphan_sandbox, "cpu")
    _orphan_pod(second_sim, "pilot-0123456789abcdef0456-1", orphan_sandbox, "opportunistic")
    client = LanciumClient(ClientSettings(base_url=lancium_sim.url,
                                          api_key_file=str(pool.path(f"{pool.local_dir}/{KEY_FILE}"))))
    try:
        key = sandbox_key(CE_NAME, "pilot", orphan_sandbox)
        made = client.create_job({"name": f"podgahp-{key}-000000000000", "qos": "high", "image": "lancium/ubuntu",
                                  "command_line": "sleep 1", "max_run_time": 3600, "notes": json.dumps(
                                      {"podgahp": 1, "ce": CE_NAME, "user": "pilot", "sandbox": orphan_sandbox})})
    finally:
        client.close()
    lancium_orphan = int(made["id"])

    def listed() -> Optional[Dict[str, Any]]:
        rows = {row["source"]: row for row in json.loads(pool.run([installation.bin("podgahp"), "q", "--json"]).stdout)}
        lan = rows.get(f"{lancium}.0")
        return rows if lan is not None and lan["phase"] == "running" else None
    rows = pool.wait_for(listed, timeout=90, interval=1, what="podgahp q with the Lancium pilot running")
    assert (rows[f"{cpu}.0"]["backend"], rows[f"{cpu}.0"]["remote"], rows[f"{cpu}.0"]["queue"]) == ("k8s", cpu_pod, "cpu")
    assert rows[f"{cpu}.0"]["where"].startswith(f"{NAMESPACE} (cluster ")
    assert (rows[f"{opportunistic}.0"]["remote"], rows[f"{opportunistic}.0"]["queue"]) == (opp_pod, "opportunistic")
    assert rows[f"{opportunistic}.0"]["where"] != rows[f"{cpu}.0"]["where"]
    assert (rows[f"{lancium}.0"]["backend"], rows[f"{lancium}.0"]["remote"]) == ("lancium", lancium_job.split("/")[1])

    figures = dict(line.split(" = ", 1) for line in pool.run([installation.bin("podgahp"), "health"]).stdout.splitlines())
    assert figures["Queue_cpu_PodsRunning"] == "2"  # the pilot and the orphan
    assert figures["Queue_opportunistic_PodsRunning"] == "2"
    assert figures["Queue_lancium_PodsRunning"] == "1" and figures["Queue_lancium_PodsPending"] == "1"

    reaped = pool.run([installation.bin("podgahp"), "reap"], check=False)
    assert reaped.returncode == 0, reaped.stderr
    lines = dict(line.split(" = ", 1) for line in reaped.stdout.splitlines())
    assert (lines["Pods"], lines["Orphans"], lines["Deleted"], lines["Errors"]) == ("6", "3", "3", "0"), reaped.stdout
    assert _gone(kube_sim, "pilot-0123456789abcdef0123-1") and _gone(second_sim, "pilot-0123456789abcdef0456-1")
    assert lancium_orphan not in lancium_sim.jobs() or lancium_sim.job(lancium_orphan)["status"] == "delete pending"
    assert not _gone(kube_sim, cpu_pod) and not _gone(second_sim, opp_pod)
    assert lancium_sim.job(int(lancium_job.split("/")[1]))["status"] == "running"
