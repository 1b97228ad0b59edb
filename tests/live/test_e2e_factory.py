"""End to end the way a pilot factory submits: a grid-universe job of type ``condor`` (HTCondor-C)
from the factory's own schedd to the CE's schedd, which routes it to the installed ``k8s_gahp``,
whose pod runs on the simulated cluster; the outputs travel back to the factory.

Two pools run side by side in one installation: the CE (shipped routes, Kubernetes backend) and
the factory (a schedd with no routes, whose gridmanager runs HTCondor-C).
"""

from __future__ import annotations

import re
from typing import Callable

import pytest

from e2e import (ANN_SANDBOX_ID, E2E_FAST, COMPLETED, NAMESPACE, container, grid_parts, iwd, kube_sim, pod_creations,
                 pods_by_sandbox, routed_jobs, start_k8s_ce, wait_for_pods)
from podgahp_sim.k8s import KubeSim
from harness import Installation, Pool

pytestmark = pytest.mark.live

__all__ = ["kube_sim"]  # the fixture, imported for pytest

#: The factory's pool: only a schedd (and the collector it needs) submitting grid jobs. The CE's
#: periodic policies of ce-config/standalone would hold its grid-universe jobs, so they are off.
FACTORY_CONFIG = """\
JOB_ROUTER_ROUTE_NAMES =
SYSTEM_PERIODIC_HOLD = false
SYSTEM_PERIODIC_REMOVE = false
C_GAHP_CONTACT_SCHEDD_DELAY = 1
""" + E2E_FAST


#: The CE's schedd needs a name HTCondor-C can look up in the CE's collector. By default it is
#: named after the host, and a client treats such a name as a host name to resolve first, which
#: fails where the host name does not resolve; "<name>@" is looked up in the collector as is.
#: Remote submission itself needs nothing more than the CE's shipped security settings
#: (FS authentication on one machine, ALLOW_WRITE = *, the owner mapped from the client's uid).
CE_CONFIG = """\
SCHEDD_NAME = podgahp-ce@
"""


def collector_hostport(pool: Pool) -> str:
    """host:port of the pool's collector, from its address file (the port was chosen at start)."""
    text = pool.path(f"{pool.log_dir}/.collector_address").read_text()
    m = re.search(r"<([0-9.]+):(\d+)", text)
    assert m, f"no address in {pool.log_dir}/.collector_address: {text!r}"
    return f"{m.group(1)}:{m.group(2)}"


def schedd_name(pool: Pool) -> str:
    out = pool.run(["condor_status", "-schedd", "-af", "Name"]).stdout.split()
    assert len(out) == 1, out
    return out[0]


def factory_submit(iwd: str, ce_schedd: str, ce_collector: str, run_seconds: float, exit_code: int) -> str:
    """A glideinWMS-like HTCondor-C submit: CE attributes travel as plain job attributes."""
    return "\n".join([
        "universe = grid",
        f"grid_resource = condor {ce_schedd} {ce_collector}",
        f"executable = {iwd}/pilot.sh",
        "arguments = factory-pilot glidein",
        "output = factory.out",
        "error = factory.err",
        "log = factory.log",
        f"initialdir = {iwd}",
        "transfer_executable = true",
        "should_transfer_files = YES",
        "when_to_transfer_output = ON_EXIT",
        f'environment = "PODGAHP_SIM_RUN_SECONDS={run_seconds} PODGAHP_SIM_EXIT_CODE={exit_code}"',
        "+xcount = 2",
        "+maxMemory = 2500",
        "queue",
    ]) + "\n"


def test_factory_pilot_via_htcondor_c(make_pool: Callable[..., Pool], installation: Installation,
                                      kube_sim: KubeSim) -> None:
    """Factory schedd -> HTCondor-C -> CE schedd -> JobRouter -> k8s_gahp -> pod; the factory's job
    completes with the pod's exit code and its Out/Err come back to the factory's Iwd."""
    ce = start_k8s_ce(make_pool, installation, kube_sim, extra_config=CE_CONFIG)
    factory = make_pool(extra_config=FACTORY_CONFIG)
    home = iwd(factory)
    cluster = factory.submit(factory_submit(home, schedd_name(ce), collector_hostport(ce),
                                            run_seconds=4, exit_code=5), cwd=home)

    # The job arrives at the CE as a vanilla job (the source), which the router sends to k8s.
    def arrived() -> list:
        return ce.q("RoutedFromJobId =?= undefined && JobUniverse == 5", ["ClusterId", "ProcId", "Owner"])
    sources = ce.wait_for(arrived, timeout=90, what="the factory's job at the CE")
    assert [s["Owner"] for s in sources] == ["pilot"]
    ce_cluster = sources[0]["ClusterId"]
    pods = wait_for_pods(ce, ce_cluster, 1)
    pod_name = pods[f"{ce_cluster}.0"]
    routed = routed_jobs(ce, ce_cluster)  # the queue's, or the history's once the pilot's 4 s are over
    assert routed[0]["RouteName"] == "K8s_Cpu", routed
    pod = kube_sim.pod(NAMESPACE, pod_name)
    assert pod is not None
    assert pod["metadata"]["annotations"][ANN_SANDBOX_ID] == grid_parts(routed[0])[2]
    assert container(pod)["args"] == ["factory-pilot", "glidein"]
    assert container(pod)["resources"]["requests"]["cpu"] == "2"
    assert container(pod)["resources"]["requests"]["memory"] == "2500Mi"

    # The factory's job completes with the pod's exit code, and the outputs come back.
    def factory_done() -> list:
        return [ad for ad in factory.jobs(f"ClusterId == {cluster}", ["JobStatus", "ExitCode", "GridJobId"])
                if ad.get("JobStatus") == COMPLETED]
    done = factory.wait_for(factory_done, timeout=120, what="the factory's job to complete")
    assert done[0]["ExitCode"] == 5, done
    assert str(done[0]["GridJobId"]).startswith("condor "), done
    out = factory.path(f"{home}/factory.out").read_text()
    assert f"pod {NAMESPACE}/{pod_name} container pilot" in out, out
    assert "exited with code 5" in out, out
    assert f"pod {NAMESPACE}/{pod_name}" in factory.path(f"{home}/factory.err").read_text()

    # On the CE: the source and the routed copy both completed with that exit code; one pod.
    ce_final = ce.jobs(f"ClusterId == {ce_cluster} || RoutedFromJobId =?= \"{ce_cluster}.0\"",
                       ["ClusterId", "JobStatus", "ExitCode"])
    assert {(ad["JobStatus"], ad.get("ExitCode")) for ad in ce_final} == {(COMPLETED, 5)}, ce_final
    assert len(pod_creations(kube_sim)) == 1
    assert list(pods_by_sandbox(kube_sim).values()) == [[pod_name]]
