"""Exactly once: a re-submit finds the pilot it already started (one test per row of the rule table),
and a cancel that failed keeps deleting until the pod is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.submit import RESUBMIT_RULES, resubmit_case
from gahp.core.errors import TransientError
from gahp.core.jobstate import Phase
from podgahp_sim.k8s import KubeSim

from k8s_helpers import BackendFactory, make_job, pod_of, wait_state

pytestmark = pytest.mark.both_engines


def generation(job_id: str) -> int:
    return int(job_id.rsplit("-", 1)[1])


def test_every_rule_has_a_case() -> None:
    assert [case for case, _ in RESUBMIT_RULES] == ["live", "finished, not reported", "finished and reported",
                                                    "being deleted"]
    pod: Dict[str, Any] = {"metadata": {}, "status": {"phase": "Running"}}
    assert resubmit_case(pod) == "live"
    pod["status"]["phase"] = "Succeeded"
    assert resubmit_case(pod) == "finished, not reported"
    pod["metadata"]["annotations"] = {"podgahp.htcondor.org/reported": "2026-01-01T00:00:00Z"}
    assert resubmit_case(pod) == "finished and reported"
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert resubmit_case(pod) == "being deleted"


def test_live_pod_is_returned(backend: Agent, sim: KubeSim, tmp_path: Path,
                              namespace: str) -> None:
    job = make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "60")])
    first = backend.submit(job)
    assert backend.submit(job) == first
    assert len(sim.pods(namespace)) == 1


@pytest.mark.fault_proxy
def test_finished_unreported_pod_is_returned_not_rerun(make_backend: BackendFactory, sim: KubeSim,
                                                       tmp_path: Path, namespace: str) -> None:
    job = make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "0.1")])
    crashed = make_backend()
    first = crashed.submit(job)
    sim.wait_for_phase(namespace, first.split("/")[2], "Succeeded", timeout=30)
    crashed.close()  # the GAHP died before the result was reported; the gridmanager submits again
    restarted = make_backend()
    assert restarted.submit(job) == first
    assert wait_state(restarted, first, Phase.COMPLETED).exit_code == 0
    assert len(sim.pods(namespace)) == 1 and len(sim.requests("POST", "/pods$")) == 1


def test_finished_and_reported_pod_makes_way_for_a_new_generation(backend: Agent, sim: KubeSim,
                                                                  tmp_path: Path) -> None:
    job = make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "0.1"), ("PODGAHP_SIM_EXIT_CODE", "0")])
    first = backend.submit(job)
    wait_state(backend, first, Phase.COMPLETED)
    again = backend.submit(job)
    assert generation(again) == generation(first) + 1


def test_pod_being_deleted_makes_way_for_a_new_generation(backend: Agent, sim: KubeSim,
                                                          tmp_path: Path) -> None:
    job = make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "60"), ("PODGAHP_SIM_SIGTERM_SECONDS", "5")])
    first = backend.submit(job)
    wait_state(backend, first, Phase.RUNNING)
    backend.cancel(first)
    sim.wait_for(lambda: (pod_of(sim, first) or {}).get("metadata", {}).get("deletionTimestamp"), 5, "deleting")
    assert generation(backend.submit(job)) == generation(first) + 1


@pytest.mark.fault_proxy
def test_failed_cancel_is_retried_until_the_pod_is_gone(backend: Agent, sim: KubeSim,
                                                        tmp_path: Path) -> None:
    job_id = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "600")]))
    wait_state(backend, job_id, Phase.RUNNING)
    # The API answers 503 to deletes for a while: more than the client's retries.
    fault = sim.fail_next(count=12, status=503, method="DELETE", path="/pods/")
    # Answered as failed: the gridmanager keeps a held job's pod id (a removed job it forgets anyway).
    with pytest.raises(TransientError, match="could not be deleted now.*HTTP 503.*retried in the background"):
        backend.cancel(job_id)
    assert fault.hits >= 4
    gone = sim.wait_for(lambda: (pod_of(sim, job_id) or {"metadata": {"deletionTimestamp": "gone"}})
                        ["metadata"].get("deletionTimestamp"), 20, "pod deleted after the API recovered")
    assert gone and fault.count == 0
    sim.wait_for(lambda: backend._cancels.pending() == 0, 10, "the retry recorded as done")


@pytest.mark.fault_proxy
@pytest.mark.parametrize("seconds", [0])
def test_cancel_retries_give_up_after_the_knob(make_backend: BackendFactory, sim: KubeSim, tmp_path: Path,
                                               seconds: int) -> None:
    backend_: Optional[KubernetesBackend] = make_backend(PODGAHP_K8S_CANCEL_RETRY_MAX_SECONDS=str(seconds))
    assert backend_ is not None
    job_id = backend_.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "600")]))
    wait_state(backend_, job_id, Phase.RUNNING)
    sim.fail_next(count=1000, status=503, method="DELETE", path="/pods/")
    with pytest.raises(TransientError):
        backend_.cancel(job_id)
    sim.wait_for(lambda: backend_._cancels.pending() == 0, 10, "retries given up")
    sim.clear_faults()
    assert pod_of(sim, job_id) is not None  # left to podgahp reap


@pytest.mark.fault_proxy
def test_a_create_answered_too_late_is_not_made_twice(make_backend: BackendFactory, sim: KubeSim,
                                                      tmp_path: Path, namespace: str) -> None:
    # The API server makes the pod but answers after the client's timeout: the retry's create gets
    # AlreadyExists, and the submit returns the pod that was made (not a second one).
    backend = make_backend(PODGAHP_K8S_REQUEST_TIMEOUT_SECONDS="0.5")
    sim.delay_next(1.5, method="POST", path="/pods$")
    job_id = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "60")]))
    sim.wait_for(lambda: len(sim.requests("POST", "/pods$")) >= 2, 10, "both creates answered")
    assert sorted(r.status for r in sim.requests("POST", "/pods$")) == [201, 409]
    assert len(sim.pods(namespace)) == 1 and pod_of(sim, job_id) is not None
