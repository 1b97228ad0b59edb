"""End to end on Lancium: pilots that choose queue "lancium" take the shipped Lancium route
(``GridResource = "batch lancium"``), the real gridmanager starts the installed ``lancium_gahp``,
and the GAHP runs each pilot as a job of the simulated Lancium service.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import pytest

from e2e import (COMPLETED, HELD, grid_parts, iwd, lancium_sim, pilot_submit, routed_jobs, start_lancium_ce,
                 wait_done)
from podgahp_sim.lancium import LanciumSim
from harness import Installation, Pool

pytestmark = pytest.mark.live

__all__ = ["lancium_sim"]  # the fixture, imported for pytest

def lancium_id(ad: Dict[str, Any]) -> int:
    """Lancium job id in GridJobId `batch lancium <sandbox> lancium/<id>`."""
    parts = grid_parts(ad)
    assert len(parts) == 4 and parts[:2] == ["batch", "lancium"] and parts[3].startswith("lancium/"), ad
    return int(parts[3].split("/", 1)[1])


def wait_lancium_job(pool: Pool, cluster: int) -> Dict[str, Any]:
    """The routed job of `cluster` once its GridJobId names a Lancium job."""
    def named() -> List[Dict[str, Any]]:
        # the history too: a short pilot's grid job may have left the queue between two looks
        return [ad for ad in routed_jobs(pool, cluster) if len(grid_parts(ad)) == 4]
    return pool.wait_for(named, timeout=90, interval=0.5, what="a routed job with a Lancium job")[0]


def test_lancium_pilot_runs_and_completes(make_pool: Callable[..., Pool], installation: Installation,
                                          lancium_sim: LanciumSim) -> None:
    """condor_submit -> Lancium route -> lancium_gahp -> one Lancium job of the pilot's shape and
    QOS -> completed with its exit code; stdout/stderr land in the submitter's Iwd."""
    pool = start_lancium_ce(make_pool, installation, lancium_sim)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(
        home, "lancium", run_seconds=3, exit_code=4,
        env=["PODGAHP_SIM_STDOUT='pilot says hello'", "PODGAHP_SIM_STDERR='pilot warns'"],
        extra=['+queue = "lancium"', "+xcount = 2", "+maxMemory = 4000"]), cwd=home)

    routed = wait_lancium_job(pool, cluster)
    assert routed["RouteName"] == "Lancium"
    job = lancium_sim.job(lancium_id(routed))
    assert job["name"].startswith("podgahp-") and grid_parts(routed)[2] in job["notes"], job
    assert f'"user":"{routed["Owner"]}"' in job["notes"] and home not in job["notes"], job
    assert job["qos"] == "medium", job  # the route's BatchQueue
    assert (job["resources"]["core_count"], job["resources"]["memory"]) == (2, 4), job

    done = wait_done(pool, cluster, 1)
    assert done[0]["ExitCode"] == 4, done
    final = [ad for ad in routed_jobs(pool, cluster) if ad["JobStatus"] == COMPLETED]
    assert final and final[0]["ExitCode"] == 4, final
    assert lancium_sim.job(lancium_id(routed))["status"] == "finished"
    assert pool.path(f"{home}/lancium.out").read_text().strip() == "pilot says hello"
    assert pool.path(f"{home}/lancium.err").read_text().strip() == "pilot warns"
    assert lancium_sim.count("POST", "/jobs", status=201) + lancium_sim.count("POST", "/jobs", status=200) == 1


def test_lancium_remove_and_error(make_pool: Callable[..., Pool], installation: Installation,
                                  lancium_sim: LanciumSim) -> None:
    """condor_rm of a running pilot terminates and deletes its Lancium job; a Lancium job that ends
    in `error` holds the pilot's grid job with Lancium's error text."""
    pool = start_lancium_ce(make_pool, installation, lancium_sim)
    home = iwd(pool)
    extra = ['+queue = "lancium"']
    removed = pool.submit(pilot_submit(home, "removed", run_seconds=300, extra=extra), cwd=home)
    failed = pool.submit(pilot_submit(home, "failed", run_seconds=2, extra=extra,
                                      env=["PODGAHP_SIM_ERROR='node lost power'"]), cwd=home)

    # The erroring pilot is held with the error text (1001: releasing may well succeed).
    def held() -> List[Dict[str, Any]]:
        return [ad for ad in routed_jobs(pool, failed, in_queue_only=True) if ad["JobStatus"] == HELD]
    ad = pool.wait_for(held, timeout=90, what="the failed pilot's grid job to be held")[0]
    assert "node lost power" in ad["HoldReason"], ad
    assert ad["HoldReasonCode"] == 1001, ad

    # The long pilot runs on Lancium, then condor_rm ends its job there.
    routed = wait_lancium_job(pool, removed)
    job_id = lancium_id(routed)
    lancium_sim.wait_for(job_id, "running", timeout=60)
    pool.run(["condor_rm", str(removed)], user="pilot")
    lancium_sim.wait_for(job_id, ("gone", "delete pending"), timeout=60)
    assert lancium_sim.count("POST", f"/jobs/{job_id}/terminate") >= 1
    pool.wait_for(lambda: not pool.q(f"ClusterId == {removed} || RoutedFromJobId =?= \"{removed}.0\""),
                  timeout=60, what="the removed pilot to leave the queue")
    assert [a["JobStatus"] for a in pool.history(f"ClusterId == {removed}", ["JobStatus"])] == [3]
