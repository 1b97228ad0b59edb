"""End to end on Kubernetes: pilots submitted to a CE-like pool are routed by the real JobRouter
with the shipped routes, the real gridmanager starts the installed ``k8s_gahp``, and the GAHP runs
each pilot as a pod on the simulated cluster. Runs on every HTCondor series of the harness.
"""

from __future__ import annotations

import os
import signal
from typing import Any, Callable, Dict, List

import pytest

from e2e import (ANN_SANDBOX_ID, BAD_IMAGE, COMPLETED, HELD, IDLE, LABEL_QUEUE, LABEL_SANDBOX, NAMESPACE,
                 RUNNING, container, env_of, gahp_pids, grid_parts, iwd, job_id, kube_sim, pilot_submit,
                 pod_creations, pod_deletions, pod_of, pods_by_sandbox, routed_jobs, source_jobs,
                 start_k8s_ce, wait_done, wait_for_pods)
from gahp.sim.k8s import KubeSim
from harness import Installation, Pool

pytestmark = pytest.mark.live

__all__ = ["kube_sim"]  # the fixture, imported for pytest


def test_pilot_becomes_pod_and_completes(make_pool: Callable[..., Pool], installation: Installation,
                                         kube_sim: KubeSim) -> None:
    """condor_submit to the CE schedd -> routed (K8s_Cpu) -> one pod -> completes with the pod's
    exit code; Out/Err in the submitter's Iwd; the routed job's GridJobId names the pod."""
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "plain", run_seconds=4, exit_code=3,
                                       extra=["+xcount = 2", "+maxMemory = 3000"]), cwd=home)

    # While it runs: the CE's queue shows the routed copy, whose GridJobId names the pod.
    source = f"{cluster}.0"
    pods = wait_for_pods(pool, cluster, 1)
    pod_name = pods[source]
    routed = routed_jobs(pool, cluster, in_queue_only=True)
    assert len(routed) == 1, routed
    grid = grid_parts(routed[0])
    assert grid[:2] == ["batch", "k8s"], routed[0]
    assert routed[0]["RouteName"] == "K8s_Cpu"
    assert grid[3] == f"k8s/{NAMESPACE}/{pod_name}"
    pod = kube_sim.pod(NAMESPACE, pod_name)
    assert pod is not None, f"GridJobId names pod {pod_name}, which the cluster does not have"
    assert pod["metadata"]["annotations"][ANN_SANDBOX_ID] == grid[2]
    assert pod["metadata"]["labels"][LABEL_QUEUE] == "cpu"
    pilot = container(pod)
    assert pilot["command"] == ["/pilot/pilot.sh"]
    assert pilot["args"] == ["plain", "glidein"]
    assert pilot["resources"]["requests"]["cpu"] == "2"
    assert pilot["resources"]["requests"]["memory"] == "3000Mi"
    assert env_of(pod)["PODGAHP_SIM_EXIT_CODE"] == "3"

    # The source job ends completed with the pod's exit code.
    done = wait_done(pool, cluster, 1)
    assert done[0]["ExitCode"] == 3, done[0]
    routed_final = [ad for ad in routed_jobs(pool, cluster) if ad.get("JobStatus") == COMPLETED]
    assert routed_final and routed_final[0]["ExitCode"] == 3, routed_final
    final = kube_sim.pod(NAMESPACE, pod_name)
    assert final is not None and final["status"]["phase"] == "Failed", final
    assert final["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3

    # Out and Err were written into the submitter's Iwd, owned by the submitter.
    out = pool.path(f"{home}/plain.out")
    err = pool.path(f"{home}/plain.err")
    out_text = out.read_text()
    assert f"pod {NAMESPACE}/{pod_name} container pilot" in out_text, out_text
    assert "exited with code 3" in out_text, out_text
    assert f"pod {NAMESPACE}/{pod_name}" in err.read_text()
    owner = installation.user("pilot")
    assert (out.stat().st_uid, err.stat().st_uid) == (owner.uid, owner.uid)

    # Exactly one pod was ever created for this pilot.
    assert len(pod_creations(kube_sim)) == 1
    assert list(pods_by_sandbox(kube_sim).values()) == [[pod_name]]
