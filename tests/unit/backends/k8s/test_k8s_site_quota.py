"""A site's pilots' namespace has a ResourceQuota and a LimitRange: what podgahp does with them, on
both engines (docs/kubernetes.md, "Cluster policies"). A submit past the quota is refused with the
server's words (the gridmanager holds the job with them) and leaves nothing behind; sent again when
room has freed, it makes its pod, one per sandbox. A pilot over the LimitRange's maximum is refused
naming the limit, as an admission refusal (not as a missing right); the LimitRange's defaults change
nothing of what a pilot asks for or is told it has.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.identity import LABEL_SANDBOX
from gahp.core.errors import QuotaExceeded
from gahp.core.jobstate import Phase
from podgahp_sim.k8s import KubeSim, PodLimitRange, PodQuota

from k8s_helpers import make_job, wait_state

pytestmark = pytest.mark.both_engines

LONG = [("PODGAHP_SIM_RUN_SECONDS", "3600")]


def sandbox(n: int) -> str:
    return "ce.test_host_q.%d_1795297304" % n


def test_a_submit_past_the_quota_is_refused_with_its_words_and_made_once_room_frees(
        backend: Agent, sim: KubeSim, tmp_path: Path, namespace: str) -> None:
    sim.set_quota(PodQuota(name="pilots-quota", hard={"pods": "3"}))
    running = [backend.submit(make_job(tmp_path, sandbox=sandbox(n), env=LONG)) for n in range(2)]
    ending = backend.submit(make_job(tmp_path, sandbox=sandbox(2), env=[("PODGAHP_SIM_RUN_SECONDS", "2")]))
    refused = make_job(tmp_path, sandbox=sandbox(3), env=LONG)
    with pytest.raises(QuotaExceeded) as error:
        backend.submit(refused)
    words = str(error.value)
    assert "exceeded quota: pilots-quota, requested: pods=1, used: pods=3, limited: pods=3" in words, words
    assert len(sim.pods(namespace)) == 3 and len(sim.secrets(namespace)) == 3  # nothing of the refused one

    assert wait_state(backend, ending, Phase.COMPLETED, Phase.HELD).phase is Phase.COMPLETED
    # a pod that ended counts no more: the gridmanager's submit after the job's release makes its pod
    again = sim.wait_for(lambda: _submitted(backend, refused), 60, "the refused pilot's pod once room freed")
    assert wait_state(backend, again, Phase.RUNNING).phase is Phase.RUNNING
    assert all(backend.status(j).phase is Phase.RUNNING for j in running)
    per_sandbox = Counter(p["metadata"]["labels"][LABEL_SANDBOX] for p in sim.pods(namespace))
    assert sorted(per_sandbox.values()) == [1, 1, 1, 1]


def _submitted(backend: Agent, job: object) -> str:
    try:
        return backend.submit(job)  # type: ignore[arg-type]
    except QuotaExceeded:  # the quota's count of the pod that ended may lag a moment behind
        return ""


def test_a_pilot_over_the_limit_range_maximum_is_refused_naming_the_limit(
        backend: Agent, sim: KubeSim, tmp_path: Path, namespace: str) -> None:
    sim.set_limit_range(PodLimitRange(name="pilots-limits", max={"memory": "1Gi", "cpu": "2"},
                                      default={"memory": "512Mi", "cpu": "500m"},
                                      default_request={"memory": "256Mi", "cpu": "250m"}))
    with pytest.raises(QuotaExceeded) as error:
        backend.submit(make_job(tmp_path, sandbox=sandbox(10), memory_mb=2048, env=LONG))
    words = str(error.value)
    assert "maximum memory usage per Container is 1Gi, but limit is 2Gi" in words, words
    assert sim.pods(namespace) == [] and sim.secrets(namespace) == []

    job_id = backend.submit(make_job(tmp_path, sandbox=sandbox(11), memory_mb=768, cpus=2, env=LONG))
    state = wait_state(backend, job_id, Phase.RUNNING)
    assert (state.cpus_provisioned, state.memory_provisioned_mb) == (2, 768)
    (pod,) = sim.pods(namespace)
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "2", "memory": "768Mi"}, "limits": {"cpu": "2", "memory": "768Mi"}}
