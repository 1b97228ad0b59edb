"""Black-hole protection in the Kubernetes backend, against the simulated cluster: a queue whose
image cannot be pulled stops receiving pods after the threshold, says so in BLAH_PING, stays closed
across a restart, and takes pilots again after the back-off once the image exists."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest

from gahp.agent import Agent
from gahp.core.errors import BackendError
from gahp.core.jobstate import Phase
from k8s_helpers import BackendFactory, make_job, wait_state
from podgahp_sim.k8s import KubeSim
from polling import wait_until

pytestmark = pytest.mark.both_engines

BAD = "registry.example/does-not-exist:9"


def creates(sim: KubeSim) -> int:
    return len([r for r in sim.requests("POST", "/pods$") if r.status == 201 and "dryRun" not in r.query])


@pytest.mark.simulator_only("drives the simulated cluster's hand (evictions, preemption, phases)")
def test_queue_closes_after_failures_and_recovers_once_the_image_exists(make_backend: BackendFactory, sim: KubeSim,
                                                                       tmp_path: Path) -> None:
    knobs = dict(PODGAHP_K8S_IMAGE=BAD, PODGAHP_BLACKHOLE_FAILURES="2", PODGAHP_BLACKHOLE_BACKOFF_SECONDS="2",
                 PODGAHP_STATE_DIR=str(tmp_path))
    backend = make_backend(**knobs)
    for i in range(2):
        job_id = backend.submit(make_job(tmp_path, sandbox=f"ce.test_host_{i}.0_1795297304"))
        wait_state(backend, job_id, Phase.HELD)
    made = creates(sim)
    assert made == 2

    with pytest.raises(BackendError, match="closed as a black hole") as refused:
        backend.submit(make_job(tmp_path, sandbox="ce.test_host_2.0_1795297304"))
    assert BAD in str(refused.value) and "ImagePull" in str(refused.value)
    with pytest.raises(BackendError, match="every queue is closed as a black hole"):
        backend.ping()
    restarted = make_backend(**knobs)  # a GAHP started again by the gridmanager
    with pytest.raises(BackendError, match="closed as a black hole"):
        restarted.submit(make_job(tmp_path, sandbox="ce.test_host_2.0_1795297304"))
    assert creates(sim) == made  # no pod was created for the closed queue

    sim.publish_image(BAD)

    def submitted() -> Optional[str]:
        try:
            return restarted.submit(make_job(tmp_path, sandbox="ce.test_host_3.0_1795297304"))
        except BackendError:
            return None
    job_id = wait_until(submitted, "the queue open again after its back-off", timeout=10, interval=0.2)
    assert wait_state(restarted, job_id, Phase.COMPLETED).exit_code == 0
    assert creates(sim) == made + 1


def test_fast_failing_pilots_close_the_queue_and_slow_ones_do_not(make_backend: BackendFactory, sim: KubeSim,
                                                                  tmp_path: Path) -> None:
    """A pilot that exits non-zero within PODGAHP_BLACKHOLE_FAST_SECONDS is a failure; one that ran
    longer (a pilot ending after useful work) is not."""
    (tmp_path / "slow").mkdir()
    slow: Agent = make_backend(PODGAHP_BLACKHOLE_FAILURES="1", PODGAHP_BLACKHOLE_FAST_SECONDS="0",
                                           PODGAHP_STATE_DIR=str(tmp_path / "slow"))
    job_id = slow.submit(make_job(tmp_path, env=[("PODGAHP_SIM_EXIT_CODE", "1")]))
    assert wait_state(slow, job_id, Phase.COMPLETED).exit_code == 1
    slow.submit(make_job(tmp_path, sandbox="ce.test_host_9.0_1795297304"))  # still open

    (tmp_path / "fast").mkdir()
    fast = make_backend(PODGAHP_BLACKHOLE_FAILURES="1", PODGAHP_BLACKHOLE_FAST_SECONDS="600",
                        PODGAHP_STATE_DIR=str(tmp_path / "fast"))
    job_id = fast.submit(make_job(tmp_path, sandbox="ce.test_host_7.0_1795297304",
                                  env=[("PODGAHP_SIM_EXIT_CODE", "1")]))
    wait_state(fast, job_id, Phase.COMPLETED)
    with pytest.raises(BackendError, match="pilot ended with exit code 1"):
        fast.submit(make_job(tmp_path, sandbox="ce.test_host_8.0_1795297304"))


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_health_figures_match_the_servers_request_log(make_backend: BackendFactory, sim: KubeSim,
                                                      tmp_path: Path) -> None:
    """The GAHP's published counters (requests, pods created, outcomes) are what the API server saw
    from it: its requests carry a User-Agent naming podgahp's GAHP."""
    import json

    backend = make_backend(PODGAHP_STATE_DIR=str(tmp_path))
    job_ids = [backend.submit(make_job(tmp_path, sandbox=f"ce.test_host_{i}.0_1795297304")) for i in range(3)]
    for job_id in job_ids:
        wait_state(backend, job_id, Phase.COMPLETED)
    backend.close()
    figures = json.loads(next(tmp_path.glob("Podgahp.*/PodgahpStats.ce.test-*-k8s.json")).read_text())
    served = [r for r in sim.requests() if r.headers.get("user-agent", "").startswith("podgahp/")]
    assert served and all(r.headers["user-agent"].endswith("(gahp)") for r in served)
    assert figures["api_requests"] == len(served)
    assert figures["api_errors"] == len([r for r in served if r.status >= 400])
    assert figures["pods_created"] == creates(sim) == 3
    assert figures["pilots_succeeded"] == 3 and figures.get("pilots_failed", 0) == 0
