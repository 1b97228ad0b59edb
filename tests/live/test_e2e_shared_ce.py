"""A shared CE under attack, with the real schedd, JobRouter and gridmanager: a user claiming another
user's sandbox, a job ad asking for an image the admin did not allow, and orphan pods cleaned up by
``podgahp reap`` run by the schedd as a cron job (the shipped 50-podgahp-reap-defaults.conf)."""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable, Dict, List, Optional

import pytest

from e2e import (ANN_SANDBOX_ID, CE_NAME, COMPLETED, HELD, IMAGE, NAMESPACE, iwd, kube_sim, pilot_submit,
                 pod_deletions, routed_jobs, start_k8s_ce, wait_done, wait_for_pods)
from podgahp_sim.k8s import KubeSim
from harness import Installation, Pool

pytestmark = pytest.mark.live

__all__ = ["kube_sim"]  # the fixture, imported for pytest


def _running(sim: KubeSim, name: str) -> bool:
    return ((sim.pod(NAMESPACE, name) or {}).get("status") or {}).get("phase") == "Running"


def test_claiming_another_users_sandbox_cannot_touch_the_victim(make_pool: Callable[..., Pool],
                                                                installation: Installation,
                                                                kube_sim: KubeSim) -> None:
    installation.ensure_user("mallory")
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    victim_home = iwd(pool)
    victim = pool.submit(pilot_submit(victim_home, "victim", run_seconds=25), cwd=victim_home)
    victim_pod = wait_for_pods(pool, victim, 1)[f"{victim}.0"]
    pool.wait_for(lambda: _running(kube_sim, victim_pod), timeout=60, what="the victim's pod running")
    sandbox = kube_sim.pod(NAMESPACE, victim_pod)["metadata"]["annotations"][ANN_SANDBOX_ID]  # type: ignore[index]

    mallory_home = iwd(pool, "mallory")
    attack = pool.submit(pilot_submit(mallory_home, "attack", run_seconds=300,
                                      extra=[f'+remote_JobDirectory = "home_bl_{sandbox}"']),
                         user="mallory", cwd=mallory_home)
    attack_pod = wait_for_pods(pool, attack, 1)[f"{attack}.0"]
    assert attack_pod != victim_pod
    pool.run(["condor_rm", f"{attack}.0"], user="mallory")
    pool.wait_for(lambda: not pool.q(f"ClusterId == {attack}"), timeout=60, what="the attack removed")
    assert _running(kube_sim, victim_pod) and not kube_sim.pod(NAMESPACE, victim_pod)["metadata"].get(  # type: ignore[index]
        "deletionTimestamp")
    done = wait_done(pool, victim, 1, timeout=120)
    assert done[0]["JobStatus"] == COMPLETED


def test_hostile_image_override_is_held_naming_the_knob(make_pool: Callable[..., Pool], installation: Installation,
                                                        kube_sim: KubeSim) -> None:
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "miner", extra=['+remote_CERequirements = k8s_image == "evil/miner"']),
                          cwd=home)

    def held() -> Optional[List[Dict[str, Any]]]:
        ads = [ad for ad in routed_jobs(pool, cluster) if ad.get("JobStatus") == HELD]
        return ads or None
    ads = pool.wait_for(held, timeout=90, interval=1, what="the routed job held")
    assert "PODGAHP_K8S_CPU_ALLOWED_IMAGES" in str(ads[0].get("HoldReason")), ads[0]
    assert not [p for p in kube_sim.pods(NAMESPACE) if p["spec"]["containers"][0]["image"] == "evil/miner"]


def reap_config(installation: Installation) -> str:
    """The shipped schedd cron job running ``podgahp reap`` every 5 s, with a grace of 3 s."""
    return (f"include : {installation.src_dir}/condor_config.d/50-podgahp-reap-defaults.conf\n"
            "GRIDMANAGER_JOB_PROBE_INTERVAL_BATCH = 2\n"  # the tests' pace (E2E_FAST), not the CE's
            f"SCHEDD_CRON_PODGAHP_REAP_EXECUTABLE = {installation.bin('podgahp')}\n"
            "PODGAHP_REAP_PERIOD = 5\nPODGAHP_REAP_GRACE_SECONDS = 3\n")


def reap_figures(pool: Pool, min_pods: int) -> List[str]:
    """PodgahpReapPods and PodgahpReapErrors of a pass that saw at least ``min_pods`` pods (the collector
    shows the schedd's ad of its last update; each pass replaces the previous one's figures)."""
    def published() -> Optional[List[str]]:
        words = pool.run(["condor_status", "-schedd", "-af", "PodgahpReapPods", "PodgahpReapErrors"]).stdout.split()
        return words if len(words) == 2 and words[0].isdigit() and int(words[0]) >= min_pods else None
    return pool.wait_for(published, timeout=60, interval=1, what="PodgahpReap* attributes in the schedd's ad")


def test_schedd_cron_reaps_orphan_pods(make_pool: Callable[..., Pool], installation: Installation,
                                       kube_sim: KubeSim) -> None:
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config=reap_config(installation))
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "kept", run_seconds=60), cwd=home)
    kept = wait_for_pods(pool, cluster, 1)[f"{cluster}.0"]
    kept_sandbox = kube_sim.pod(NAMESPACE, kept)["metadata"]["annotations"][ANN_SANDBOX_ID]  # type: ignore[index]
    # A pod of this CE whose job this schedd no longer holds: the sandbox id of a job of the same
    # schedd (the gridmanager's <collector>_<schedd name>_<cluster>.<proc>_<QDate>) with another cluster.
    orphan_sandbox = re.sub(r"_[0-9]+\.0_([0-9]+)$", r"_99999.0_\1", kept_sandbox)
    assert orphan_sandbox != kept_sandbox
    orphan = "pilot-0123456789abcdef0123-1"
    with kube_sim.store.lock:
        kube_sim.store.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": orphan, "namespace": NAMESPACE, "uid": "orphan-uid",
            "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60)),
            "labels": {"app.kubernetes.io/managed-by": "podgahp", "podgahp.htcondor.org/ce": CE_NAME},
            "annotations": {ANN_SANDBOX_ID: orphan_sandbox}},
            "spec": {"containers": [{"name": "pilot", "image": IMAGE}]}, "status": {"phase": "Running"}})
    pool.wait_for(lambda: kube_sim.pod(NAMESPACE, orphan) is None
                  or kube_sim.pod(NAMESPACE, orphan)["metadata"].get("deletionTimestamp"),  # type: ignore[index]
                  timeout=90, interval=1, what="the orphan pod deleted by podgahp reap")
    kept_pod = kube_sim.pod(NAMESPACE, kept)
    assert kept_pod is not None and not kept_pod["metadata"].get("deletionTimestamp")
    assert reap_figures(pool, 1)[1] == "0"


#: The only route: GridResource spelled "batch K8S". The gridmanager lower-cases the batch type and
#: starts K8S_GAHP for it, as for "batch k8s".
UPPER_CASE_ROUTE = """\
JOB_ROUTER_ROUTE_NAMES = Upper
JOB_ROUTER_ROUTE_Upper @=jrt
  TargetUniverse = 9
  GridResource = "batch K8S"
  REQUIREMENTS true
  SET BatchQueue "cpu"
  SET default_CERequirements "RequestCpus,RequestDisk"
@jrt
"""


def test_reap_keeps_the_running_pilot_of_a_batch_K8S_route(make_pool: Callable[..., Pool],
                                                          installation: Installation, kube_sim: KubeSim) -> None:
    """A route may spell GridResource "batch K8S"; its pilots run through k8s_gahp all the same, and
    ``podgahp reap`` must find their jobs (a case-sensitive match killed such a pilot within seconds)."""
    pool = start_k8s_ce(make_pool, installation, kube_sim,
                        extra_config=reap_config(installation) + UPPER_CASE_ROUTE)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "upper", run_seconds=30), cwd=home)
    name = wait_for_pods(pool, cluster, 1)[f"{cluster}.0"]
    routed = routed_jobs(pool, cluster)
    assert routed and routed[0]["GridResource"] == "batch K8S", routed
    pool.wait_for(lambda: _running(kube_sim, name), timeout=60, what="the pilot's pod running")
    # passes of the reaper see the pod, past its grace, while the pilot runs
    assert reap_figures(pool, 1)[1] == "0"
    done = wait_done(pool, cluster, 1, timeout=120)
    assert done[0]["ExitCode"] == 0, done[0]
    assert not pod_deletions(kube_sim, name), "podgahp reap deleted the pod of a running pilot"


def test_podgahp_q_shows_each_pilots_node_phase_and_why_it_waits(make_pool: Callable[..., Pool],
                                                                   installation: Installation,
                                                                   kube_sim: KubeSim) -> None:
    """``podgahp q`` on the CE: each routed pilot with its pod's node and phase as the cluster has
    them, and the scheduler's reason for a pod that cannot be placed; filters select by phase."""
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config="PODGAHP_K8S_MAX_CPUS = 64\n")
    home = iwd(pool)
    running = pool.submit(pilot_submit(home, "runs", run_seconds=120), cwd=home)
    waiting = pool.submit(pilot_submit(home, "waits", run_seconds=120, extra=["+xcount = 32"]), cwd=home)
    running_pod = wait_for_pods(pool, running, 1)[f"{running}.0"]
    waiting_pod = wait_for_pods(pool, waiting, 1)[f"{waiting}.0"]
    pool.wait_for(lambda: _running(kube_sim, running_pod), timeout=60, what="the first pilot's pod running")

    listed = json.loads(pool.run([installation.bin("podgahp"), "q", "--json"]).stdout)
    rows = {row["source"]: row for row in listed}
    first, second = rows[f"{running}.0"], rows[f"{waiting}.0"]
    pod = kube_sim.pod(NAMESPACE, running_pod)
    assert pod is not None
    assert (first["remote"], first["node"], first["phase"]) == (running_pod, pod["spec"]["nodeName"], "Running")
    assert (first["route"], first["queue"], first["owner"]) == ("K8s_Cpu", "cpu", "pilot"), first
    assert (second["remote"], second["node"], second["phase"]) == (waiting_pod, "", "Pending"), second
    assert "Insufficient cpu" in second["reason"], second

    table = pool.run([installation.bin("podgahp"), "q", "--phase", "Pending"]).stdout
    assert waiting_pod in table and running_pod not in table, table
    assert "Insufficient cpu" in table and table.splitlines()[0].split()[:2] == ["JOB", "SOURCE"]


def test_health_figures_reach_the_collector_and_match_the_servers_log(make_pool: Callable[..., Pool],
                                                                      installation: Installation,
                                                                      kube_sim: KubeSim) -> None:
    """The schedd cron job publishes the GAHPs' counters and the pods per queue in the schedd's ad
    (condor_status -schedd) and in a Prometheus file; the API requests it reports for the GAHPs are
    those the API server logged from them (their User-Agent names podgahp's GAHP)."""
    config = (f"include : {installation.src_dir}/condor_config.d/50-podgahp-reap-defaults.conf\n"
              "GRIDMANAGER_JOB_PROBE_INTERVAL_BATCH = 2\n"  # the tests' pace (E2E_FAST), not the CE's
              f"SCHEDD_CRON_PODGAHP_REAP_EXECUTABLE = {installation.bin('podgahp')}\n"
              f"PODGAHP_REAP_PERIOD = 5\nPODGAHP_PROMETHEUS_FILE = $(LOG)/podgahp.prom\n")
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config=config)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "measured", run_seconds=2), cwd=home)
    wait_done(pool, cluster, 1)
    names = ["PodgahpReapGahpApiRequests", "PodgahpReapGahpPodsCreated", "PodgahpReapGahpPilotsSucceeded",
             "PodgahpReapGahpCount", "PodgahpReapQueue_cpu_BlackHole"]

    def published() -> Optional[List[str]]:
        words = pool.run(["condor_status", "-schedd", "-af", *names]).stdout.split()
        served = [r for r in kube_sim.requests() if r.headers.get("user-agent", "").endswith("(gahp)")]
        if len(words) == len(names) and words[0] == str(len(served)) and words[1] == "1":
            return words
        return None
    figures = pool.wait_for(published, timeout=120, interval=1,
                            what="the GAHP's figures in the schedd's ad, equal to the server's log")
    assert figures[2:] == ["1", "1", "false"], figures
    text = pool.path(f"{pool.log_dir}/podgahp.prom").read_text()
    assert 'podgahp_gahp_pods_created_total{ce="' in text and "podgahp_reap_pods{" in text, text
    assert f"podgahp_gahp_api_requests_total{{ce=\"{CE_NAME}\"}} " in text, text
