"""One CE, three places its pilots run: two Kubernetes clusters (the cpu queue on one, the opportunistic
queue on the other, each with its own kubeconfig) and Lancium. ``podgahp q``, ``podgahp health`` and
``podgahp reap``, run on the CE with its configuration, cover all three: q shows each pilot where it
runs, health counts each queue's remote jobs, and reap deletes an orphan in each place while every
pilot keeps running.

On the real engine the two clusters are two namespaces of the one real control plane, each queue's
kubeconfig a ServiceAccount of its namespace bound to the shipped Role there: both queues then meet
the real API server (its RBAC, lists, deletions), and the two queues share one server as two
namespaces of a site's cluster do, where neither identity sees the other's pods."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional

import pytest

from e2e import (ANN_SANDBOX_ID, CE_NAME, E2E_FAST, GPU_TEMPLATE, IMAGE, K8S_KNOBS, KEY_FILE, NAMESPACE, grid_parts,
                 iwd, kube_sim, kubeconfig_text, lancium_sim, pilot_submit, real_namespace, routed_jobs, routes_config,
                 running_cluster, wait_for_pods)
from gahp.backends.lancium.api import LanciumClient
from gahp.backends.lancium.settings import ClientSettings
from gahp.rules.identity import sandbox_key
from harness import Installation, Pool
from podgahp_sim.k8s import KubeSim
from podgahp_sim.kube.client import Client, read_kubeconfig
from podgahp_sim.lancium import LanciumSim

pytestmark = [pytest.mark.live, pytest.mark.both_engines]

__all__ = ["kube_sim", "lancium_sim"]  # the fixtures, imported for pytest

#: The opportunistic queue's namespace on the real engine.
SECOND_NAMESPACE = "pilots-opportunistic"


@pytest.fixture
def second_sim(engine: str, request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    """A second simulated cluster, for the opportunistic queue; on the real engine a second namespace
    of the real control plane."""
    if engine == "real":
        with real_namespace(request.getfixturevalue("real_cluster"), SECOND_NAMESPACE) as real:
            yield real  # type: ignore[misc]
        return
    with running_cluster() as sim:
        yield sim


def namespace_of(sim: KubeSim) -> str:
    """The pilots' namespace of a cluster (a real engine's own, else the simulator's ``pilots``)."""
    return str(getattr(sim, "namespace", NAMESPACE))


def start_ce(make_pool: Callable[..., Pool], installation: Installation, first: KubeSim, second: KubeSim,
             lancium: LanciumSim) -> Pool:
    config = (routes_config(installation)
              + f"K8S_GAHP = {installation.bin('k8s_gahp')}\n"
              + f"LANCIUM_GAHP = {installation.bin('lancium_gahp')}\n"
              + K8S_KNOBS
              + "PODGAHP_K8S_GPU_POD_TEMPLATE = $(LOCAL_DIR)/gpu-template.yaml\n"
              + "PODGAHP_K8S_OPPORTUNISTIC_KUBECONFIG = $(LOCAL_DIR)/kubeconfig-2\n"
              + f"PODGAHP_K8S_OPPORTUNISTIC_NAMESPACE = {namespace_of(second)}\n"
              + f"PODGAHP_LANCIUM_BASE_URL = {lancium.url}\n"
              + f"PODGAHP_LANCIUM_API_KEY_FILE = $(LOCAL_DIR)/{KEY_FILE}\n"
              + f"PODGAHP_LANCIUM_CE_NAME = {CE_NAME}\n"
              + "PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS = 1\n"
              + "PODGAHP_REAP_GRACE_SECONDS = 0\n"
              + E2E_FAST)
    pool = make_pool(extra_config=config, files={"kubeconfig": kubeconfig_text(first),
                                                 "kubeconfig-2": kubeconfig_text(second, namespace_of(second)),
                                                 "gpu-template.yaml": GPU_TEMPLATE, KEY_FILE: lancium.api_key + "\n"})
    owner = installation.user("pilot")
    key = pool.path(f"{pool.local_dir}/{KEY_FILE}")
    os.chown(key, owner.uid, owner.gid)
    os.chmod(key, 0o600)
    return pool


def _orphan_pod(sim: KubeSim, name: str, sandbox: str, queue: str, tmp_path: Path) -> None:
    """A running pod of this CE whose job the schedd no longer holds, made as the CE's identity."""
    namespace = namespace_of(sim)
    client = Client(read_kubeconfig(sim.write_kubeconfig(str(tmp_path / f"kubeconfig-{queue}"), namespace=namespace)))
    client.call("POST", f"/api/v1/namespaces/{namespace}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name,
        "labels": {"app.kubernetes.io/managed-by": "podgahp", "podgahp.htcondor.org/ce": CE_NAME,
                   "podgahp.htcondor.org/queue": queue},
        "annotations": {ANN_SANDBOX_ID: sandbox}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "pilot", "image": IMAGE, "env": [{"name": "PODGAHP_SIM_RUN_SECONDS", "value": "3600"}]}]}})
    sim.wait_for_phase(namespace, name, "Running", timeout=60)


def _gone(sim: KubeSim, name: str) -> bool:
    pod = sim.pod(namespace_of(sim), name)
    return pod is None or bool(pod["metadata"].get("deletionTimestamp"))


def _lancium_job(pool: Pool, cluster: int) -> str:
    def named() -> Optional[str]:
        ads = [ad for ad in routed_jobs(pool, cluster, in_queue_only=True) if len(grid_parts(ad)) == 4]
        return grid_parts(ads[0])[3] if ads else None
    return pool.wait_for(named, timeout=90, interval=0.5, what="a routed job with a Lancium job")


def test_q_health_and_reap_cover_two_clusters_and_lancium(make_pool: Callable[..., Pool], installation: Installation,
                                                          kube_sim: KubeSim, second_sim: KubeSim,
                                                          lancium_sim: LanciumSim, tmp_path: Path) -> None:
    pool = start_ce(make_pool, installation, kube_sim, second_sim, lancium_sim)
    home = iwd(pool)
    cpu = pool.submit(pilot_submit(home, "cpu", run_seconds=300), cwd=home)
    opportunistic = pool.submit(pilot_submit(home, "opp", run_seconds=300, extra=['+queue = "opportunistic"']),
                                cwd=home)
    lancium = pool.submit(pilot_submit(home, "lan", run_seconds=300, extra=['+queue = "lancium"']), cwd=home)
    cpu_pod = wait_for_pods(pool, cpu, 1)[f"{cpu}.0"]
    opp_pod = wait_for_pods(pool, opportunistic, 1, namespace_of(second_sim))[f"{opportunistic}.0"]
    second = namespace_of(second_sim)
    lancium_job = _lancium_job(pool, lancium)
    # each queue's pods in its own cluster
    assert kube_sim.pod(NAMESPACE, cpu_pod) is not None and second_sim.pod(second, cpu_pod) is None
    assert second_sim.pod(second, opp_pod) is not None and kube_sim.pod(NAMESPACE, opp_pod) is None

    # An orphan in each place: the sandbox of a job of this schedd that no longer exists.
    sandbox = kube_sim.pod(NAMESPACE, cpu_pod)["metadata"]["annotations"][ANN_SANDBOX_ID]  # type: ignore[index]
    orphan_sandbox = re.sub(r"_[0-9]+\.0_([0-9]+)$", r"_99999.0_\1", sandbox)
    _orphan_pod(kube_sim, "pilot-0123456789abcdef0123-1", orphan_sandbox, "cpu", tmp_path)
    _orphan_pod(second_sim, "pilot-0123456789abcdef0456-1", orphan_sandbox, "opportunistic", tmp_path)
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
    assert rows[f"{opportunistic}.0"]["where"].startswith(f"{second} (cluster ")
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

    # The pass wrote where each pilot is into its grid job: the cluster too, as the queues use two.
    ads = {ad["RoutedFromJobId"]: ad for ad in pool.q("RoutedFromJobId =!= undefined", [
        "RoutedFromJobId", "PodgahpPod", "PodgahpNode", "PodgahpPhase", "PodgahpCluster"])}
    cpu_ad, opp_ad, lan_ad = ads[f"{cpu}.0"], ads[f"{opportunistic}.0"], ads[f"{lancium}.0"]
    assert (cpu_ad["PodgahpPod"], cpu_ad["PodgahpPhase"]) == (cpu_pod, "Running"), cpu_ad
    assert (opp_ad["PodgahpPod"], opp_ad["PodgahpPhase"]) == (opp_pod, "Running"), opp_ad
    assert cpu_ad["PodgahpCluster"] and opp_ad["PodgahpCluster"] and cpu_ad["PodgahpCluster"] != opp_ad["PodgahpCluster"]
    assert rows[f"{cpu}.0"]["where"].endswith(f"(cluster {cpu_ad['PodgahpCluster']})")
    assert cpu_ad["PodgahpNode"] == rows[f"{cpu}.0"]["node"] != ""
    # Lancium's job: its number and state; Lancium names no node, and the CE's pods' clusters are not its.
    assert (lan_ad["PodgahpPod"], lan_ad["PodgahpPhase"], lan_ad["PodgahpNode"]) == (
        lancium_job.split("/")[1], "running", ""), lan_ad
    assert "PodgahpCluster" not in lan_ad
