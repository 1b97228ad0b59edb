"""Orphan pods: which pods ``podgahp reap`` deletes (its job is gone, past the grace period, not
already deleting), at what cost, and that it deletes nothing when it cannot ask the schedd."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Dict

import pytest

from gahp.backends.k8s.reaper import orphans, reap_orphans
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.config import Knobs
from gahp.errors import GahpError
from gahp.jobstate import Phase
from gahp.reaper import classad_lines, reap
from podgahp_sim.k8s import KubeSim

from k8s_helpers import NAMESPACE, BackendFactory, knobs_for, make_job, wait_state

NOW = datetime.datetime(2026, 11, 24, 12, 0, 0, tzinfo=datetime.timezone.utc)


def pod(name: str, age_s: float, deleting: bool = False) -> Dict[str, Any]:
    created = (NOW - datetime.timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta: Dict[str, Any] = {"name": name, "namespace": "ns", "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = created
    return {"metadata": meta}


@pytest.mark.parametrize("case,expected", [
    (pod("pilot-a-1", 3600), True),                   # job gone, old: orphan
    (pod("pilot-b-1", 3600), False),                  # its job exists
    (pod("pilot-a-1", 30), False),                    # too young: a submit may still be answering
    (pod("pilot-a-1", 3600, deleting=True), False),   # already being deleted
    ({"metadata": {"name": "pilot-a-1", "namespace": "ns"}}, False),  # no creation time: never guess
], ids=["orphan", "job-exists", "young", "deleting", "no-time"])
def test_orphan_rules(case: Dict[str, Any], expected: bool) -> None:
    assert bool(orphans([case], {"k8s/ns/pilot-b-1"}, NOW, grace_s=600)) is expected


def test_a_pass_deletes_orphans_of_every_user_and_keeps_the_rest(make_backend: BackendFactory, sim: KubeSim,
                                                                 kubeconfig: str, tmp_path: Path) -> None:
    backend = make_backend()
    env = [("PODGAHP_SIM_RUN_SECONDS", "600")]
    kept = backend.submit(make_job(tmp_path, sandbox="kept_1.0_1", env=env))
    lost = backend.submit(make_job(tmp_path, sandbox="lost_1.0_1", env=env))
    done = backend.submit(make_job(tmp_path, sandbox="done_1.0_1"))
    wait_state(backend, done, Phase.COMPLETED)
    sim.clear_requests()
    settings = KubernetesSettings.from_knobs(Knobs(knobs_for(kubeconfig)))
    result = reap_orphans(settings, live_job_ids={kept}, grace_s=0)
    assert (result.pods, result.orphans, result.deleted, result.errors) == (3, 2, 2, [])
    assert sim.pod(NAMESPACE, kept.split("/")[2])["metadata"].get("deletionTimestamp") is None  # type: ignore[index]
    for gone in (lost, done):
        current = sim.pod(NAMESPACE, gone.split("/")[2])
        assert current is None or current["metadata"].get("deletionTimestamp")
    # cost: one LIST for the namespace, one DELETE per orphan
    requests = sorted((r.method, r.path.rsplit("/", 1)[-1]) for r in sim.requests())
    assert requests == sorted([("GET", "pods"), ("DELETE", lost.split("/")[2]), ("DELETE", done.split("/")[2])])
    assert result.requests == 3
    assert "Deleted = 2" in classad_lines(result) and "Errors = 0" in classad_lines(result)


def test_dry_run_deletes_nothing(make_backend: BackendFactory, sim: KubeSim, kubeconfig: str,
                                 tmp_path: Path) -> None:
    make_backend().submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "600")]))
    settings = KubernetesSettings.from_knobs(Knobs(knobs_for(kubeconfig)))
    result = reap_orphans(settings, live_job_ids=set(), grace_s=0, dry_run=True)
    assert (result.orphans, result.deleted) == (1, 0) and not sim.requests("DELETE")


def test_nothing_is_deleted_when_the_schedd_cannot_be_asked(make_backend: BackendFactory, sim: KubeSim,
                                                            kubeconfig: str, tmp_path: Path) -> None:
    make_backend().submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "600")]))
    knobs = Knobs({**knobs_for(kubeconfig), "PODGAHP_K8S_REAP_GRACE_SECONDS": "0",
                   "PODGAHP_REAP_SCHEDD_NAME": "no-such-schedd@nowhere.invalid",
                   "PODGAHP_REAP_SCHEDD_POOL": "127.0.0.1:1"})
    with pytest.raises(GahpError, match="schedd no-such-schedd@nowhere.invalid .*cannot be queried"):
        reap(knobs)
    assert not sim.requests("DELETE")


def test_classad_lines_quote_errors() -> None:
    from gahp.backends.k8s.reaper import ReapResult

    lines = classad_lines(ReapResult(pods=1, errors=['pod "x": 503 \\ down']))
    assert lines[-1] == 'LastError = "pod \\"x\\": 503 \\\\ down"'
