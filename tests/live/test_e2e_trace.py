"""``podgahp trace`` on a CE with the real schedd, JobRouter and gridmanager: a test pilot followed
through every hop; a factory's pilot whose pod cannot be placed, stalled at "scheduled" with the
scheduler's reason; a CE whose identity may not create pods, stalled before any pod with the missing
right named. The tool finds the CE's configuration without CONDOR_CONFIG, as condor_ce_trace does.
On both engines: on the real one the reason is the real scheduler's, the rights the real RBAC's."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict

import pytest

from e2e import iwd, kube_sim, pilot_submit, shipped_role, start_k8s_ce, with_right, without_right
from harness import Installation, Pool
from podgahp_sim.k8s import KubeSim

pytestmark = [pytest.mark.live, pytest.mark.both_engines]

__all__ = ["kube_sim"]  # the fixture, imported for pytest


def trace(pool: Pool, installation: Installation, *args: str, timeout: float = 240) -> "tuple[int, Dict[str, Any]]":
    """``podgahp trace --json ARGS`` as the pilot user, reading the CE's configuration itself."""
    home = pool.user_dir("pilot")
    proc = pool.run([installation.bin("podgahp"), "trace", "--json", "--interval", "1", *args], user="pilot",
                    cwd=home, env={"CONDOR_CONFIG": "", "PODGAHP_CE_CONDOR_CONFIG": pool.condor_config,
                                   "TMPDIR": home}, timeout=timeout, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_a_test_pilot_goes_through_every_hop(make_pool: Callable[..., Pool], installation: Installation,
                                             kube_sim: KubeSim) -> None:
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    status, report = trace(pool, installation, "--timeout", "180")
    assert status == 0 and report["outcome"] == "completed", report
    hops = {h["name"]: h for h in report["hops"]}
    assert list(hops) == ["submitted", "routed", "grid job", "GAHP request", "pod created", "scheduled", "running",
                          "completed", "output back"], report
    assert all(h["state"] == "done" for h in hops.values()), report
    assert "route K8s_Cpu" in hops["routed"]["detail"]
    assert hops["scheduled"]["detail"].startswith("on node ") or "cleaned up" in hops["scheduled"]["detail"]
    assert "test-pilot.out" in hops["output back"]["detail"]


def test_an_unschedulable_pilot_stalls_at_scheduled_with_the_reason(make_pool: Callable[..., Pool],
                                                                     installation: Installation,
                                                                     kube_sim: KubeSim) -> None:
    """The CE's identity may list Events besides the shipped Role's rights (which do not grant it: the
    trace then shows the pod's PodScheduled condition alone), so the trace shows the scheduler's."""
    kube_sim.enforce_role(with_right(shipped_role(), "list", "events"))
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config="PODGAHP_K8S_MAX_CPUS = 64\n")
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "big", run_seconds=60, extra=["+xcount = 32"]), cwd=home)
    status, report = trace(pool, installation, f"{cluster}.0", "--timeout", "60")
    assert status == 1 and report["outcome"] == "stalled" and report["stalled_at"] == "scheduled", report
    assert "Insufficient cpu" in report["why"] and "FailedScheduling" in report["why"], report
    # The pod carries the grid job's id as a label, for kubectl get pods -l podgahp.htcondor.org/job=...
    routed = next(h for h in report["hops"] if h["name"] == "routed")["detail"].rsplit(" ", 1)[1]
    labelled = [p for p in kube_sim.pods("pilots") if p["metadata"]["labels"].get("podgahp.htcondor.org/job") == routed]
    assert len(labelled) == 1, routed


def test_a_missing_right_is_named_where_the_pilot_stops(make_pool: Callable[..., Pool], installation: Installation,
                                                       kube_sim: KubeSim) -> None:
    kube_sim.enforce_role(without_right(shipped_role(), "create", "pods"))
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    status, report = trace(pool, installation, "--timeout", "60")
    assert status == 1 and report["stalled_at"] == "GAHP request", report
    assert "may not create pods" in report["why"], report
