"""Kubernetes as podgahp reap, q and health see it: every pod of this CE, all users, in every cluster
and namespace the queues name (two clusters here), with its reason in the state table's words; a pass
deletes the orphans (the rules are gahp.ce.orphans') with the pod's uid as a precondition, at the cost of
one LIST per namespace and cluster and one DELETE per orphan; a CE name never shares a label."""

from __future__ import annotations

import contextlib
import datetime
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterator, List

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.census import KubernetesCeView
from gahp.backends.k8s.settings import KubernetesSettings, ce_label
from gahp.core.config import Knobs
from gahp.core.errors import GahpError
from gahp.core.jobstate import Phase
from gahp.ce.reap import ReapResult, classad_lines, reap, reap_views
from gahp.core.schedd import GridJobs
from podgahp_sim.k8s import KubeSim, SimConfig

from k8s_helpers import NAMESPACE, BackendFactory, knobs_for, make_job, wait_state

pytestmark = pytest.mark.both_engines


@contextlib.contextmanager
def view_of(kubeconfig: str, **extra: str) -> Iterator[KubernetesCeView]:
    found = KubernetesBackend.ce_view(Knobs(knobs_for(kubeconfig, **extra)))
    assert found is not None
    try:
        yield found
    finally:
        found.close()


def reap_once(kubeconfig: str, grid: GridJobs, grace_s: float, dry_run: bool = False, **extra: str) -> ReapResult:
    with view_of(kubeconfig, **extra) as view:
        return reap_views([view], grid, grace_s, dry_run)


@pytest.mark.parametrize("name, label", [
    ("ce.example.org", "ce.example.org"),
    ("CE_1.example.org", "CE_1.example.org"),
    ("a" * 63, "a" * 63),
], ids=["fqdn", "mixed", "63-chars"])
def test_a_ce_name_that_is_a_label_value_is_its_own_label(name: str, label: str) -> None:
    assert ce_label(name) == label


def test_ce_names_never_share_a_label() -> None:
    """Cut at 63 characters or with characters replaced, two names would share a label value, and each
    CE's reaper would delete the other's pods as orphans: a name that is no label value is hashed."""
    long_a, long_b = "ce-" + "x" * 60 + "-a.example.org", "ce-" + "x" * 60 + "-b.example.org"
    pairs = [(long_a, long_b), ("ce a", "ce-a"), ("ce a", "ce/a"), ("ce-" + "x" * 60, "ce-" + "x" * 60 + "y")]
    for one, other in pairs:
        assert ce_label(one) != ce_label(other), (one, other)
    for name in (long_a, "ce a", "ce/a", "ce-" + "x" * 61, "--", "é"):
        label = ce_label(name)
        assert len(label) <= 63 and label[0].isalnum() and label[-1].isalnum(), (name, label)
    settings = KubernetesSettings.from_knobs(Knobs({"PODGAHP_K8S_CE_NAME": long_a}))
    assert settings.ce_name == ce_label(long_a) and settings.ce_name.startswith("ce-xxx")


def _pods_left(sim: KubeSim, job_ids: List[str]) -> FrozenSet[str]:
    left = set()
    for jid in job_ids:
        current = sim.pod(NAMESPACE, jid.split("/")[2])
        if current is not None and not current["metadata"].get("deletionTimestamp"):
            left.add(jid)
    return frozenset(left)


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_a_pass_deletes_orphans_of_every_user_and_keeps_the_rest(make_backend: BackendFactory, sim: KubeSim,
                                                                 kubeconfig: str, tmp_path: Path) -> None:
    backend = make_backend()
    env = [("PODGAHP_SIM_RUN_SECONDS", "600")]
    kept = backend.submit(make_job(tmp_path, sandbox="ce.test_host_1.0_1", env=env))
    lost = backend.submit(make_job(tmp_path, sandbox="ce.test_host_2.0_1", env=env))
    done = backend.submit(make_job(tmp_path, sandbox="ce.test_host_3.0_1"))
    wait_state(backend, done, Phase.COMPLETED)
    sim.clear_requests()
    result = reap_once(kubeconfig, GridJobs(frozenset({kept}), 1, "host"), grace_s=0)
    assert (result.jobs, result.orphans, result.deleted, result.errors) == (3, 2, 2, [])
    assert _pods_left(sim, [kept, lost, done]) == {kept}
    # cost: one LIST for the namespace, one DELETE per orphan
    requests = sorted((r.method, r.path.rsplit("/", 1)[-1]) for r in sim.requests())
    assert requests == sorted([("GET", "pods"), ("DELETE", lost.split("/")[2]), ("DELETE", done.split("/")[2])])
    assert result.requests == 3
    assert "Deleted = 2" in classad_lines(result) and "Errors = 0" in classad_lines(result)


@pytest.fixture
def slow_clock_sim() -> Iterator[KubeSim]:
    """An API server whose clock is 660 s behind the machine's (as if the reaper's were ahead)."""
    config = SimConfig(namespaces=("default", NAMESPACE), tick_seconds=0.05, container_create_seconds=0.05,
                       clock_offset_seconds=-660)
    with KubeSim(config) as running:
        yield running


@pytest.mark.simulator_only("skews the API server's clock")
def test_ages_are_taken_on_the_api_servers_clock(make_backend: BackendFactory, slow_clock_sim: KubeSim,
                                                 tmp_path: Path) -> None:
    """A pilot started a moment ago is not 660 s old because the reaper's clock is ahead of the API
    server's: with a grace of 600 s it is kept; once past the grace on the server's clock, it goes."""
    kubeconfig = slow_clock_sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NAMESPACE)
    backend = Agent(KubernetesBackend.from_knobs(Knobs(knobs_for(kubeconfig))))
    try:
        job = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "600")]))
        wait_state(backend, job, Phase.RUNNING)
    finally:
        backend.close()
    other = GridJobs(frozenset({"k8s/pilots/pilot-00000000000000000000-1"}), 1, "host")
    result = reap_once(kubeconfig, other, grace_s=600)
    assert (result.orphans, result.deleted) == (0, 0) and _pods_left(slow_clock_sim, [job]) == {job}
    result = reap_once(kubeconfig, other, grace_s=0)
    assert result.deleted == 1 and _pods_left(slow_clock_sim, [job]) == frozenset()


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_a_refused_pass_deletes_nothing_anywhere(make_backend: BackendFactory, sim: KubeSim, kubeconfig: str,
                                                 tmp_path: Path) -> None:
    """Another CE's pod under this CE's name stops the whole pass, loudly: this CE's own orphan stays too."""
    backend = make_backend()
    env = [("PODGAHP_SIM_RUN_SECONDS", "600")]
    ours = backend.submit(make_job(tmp_path, sandbox="ce.test_host_1.0_1", env=env))
    theirs = backend.submit(make_job(tmp_path, sandbox="ce2.test_otherhost_1.0_1", env=env))
    sim.clear_requests()
    result = reap_once(kubeconfig, GridJobs(frozenset(), 1, "host"), grace_s=0)
    assert result.deleted == 0 and not sim.requests("DELETE")
    assert any("another CE uses the same CE name (PODGAHP_K8S_CE_NAME" in e for e in result.errors), result.errors
    assert _pods_left(sim, [ours, theirs]) == {ours, theirs}
    assert any(line.startswith("LastError = ") for line in classad_lines(result))


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_dry_run_deletes_nothing(make_backend: BackendFactory, sim: KubeSim, kubeconfig: str,
                                 tmp_path: Path) -> None:
    make_backend().submit(make_job(tmp_path))
    result = reap_once(kubeconfig, GridJobs(frozenset(), 1, "host"), grace_s=0, dry_run=True)
    assert (result.orphans, result.deleted) == (1, 0) and not sim.requests("DELETE")


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_nothing_is_deleted_when_the_schedd_cannot_be_asked(make_backend: BackendFactory, sim: KubeSim,
                                                            kubeconfig: str, tmp_path: Path) -> None:
    make_backend().submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "600")]))
    knobs = Knobs({**knobs_for(kubeconfig), "PODGAHP_REAP_GRACE_SECONDS": "0",
                   "PODGAHP_REAP_SCHEDD_NAME": "no-such-schedd@nowhere.invalid",
                   "PODGAHP_REAP_SCHEDD_POOL": "127.0.0.1:1"})
    with pytest.raises(GahpError, match="schedd no-such-schedd@nowhere.invalid .*(cannot be queried|not known)"):
        reap(knobs)
    assert not sim.requests("DELETE")


def test_classad_lines_quote_errors() -> None:
    lines = classad_lines(ReapResult(jobs=1, errors=['pod "x": 503 \\ down']))
    assert lines[-1] == 'LastError = "pod \\"x\\": 503 \\\\ down"'


def test_an_error_text_forges_no_attribute_of_the_schedds_ad() -> None:
    lines = classad_lines(ReapResult(errors=['pod "x\nPodgahpReapDeleted = 999\x1b[2J" refused\r']))
    assert len(lines) == 8 and all(line.isprintable() for line in lines)
    assert lines[-1].startswith('LastError = "pod \\"x\\\\x0aPodgahpReapDeleted = 999')


NOW = datetime.datetime(2026, 11, 25, 12, 0, 0, tzinfo=datetime.timezone.utc)


def pod(name: str, phase: str, node: str = "", **status: Any) -> Dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "pilots", "labels": {"podgahp.htcondor.org/queue": "cpu"},
                         "creationTimestamp": "2026-11-25T11:59:00Z",
                         "annotations": {"podgahp.htcondor.org/sandbox-id": "ce.test_host_1.0_1"}},
            "spec": {"nodeName": node, "containers": [{"name": "pilot", "image": "img:1"}]},
            "status": dict(status, phase=phase)}


@pytest.mark.parametrize("raw, state, health, alive, reason", [
    (pod("pilot-a-1", "Running", "node-1"), "Running", "Running", True, ""),
    (pod("pilot-a-1", "Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                              "message": "0/3 nodes are available: 3 Insufficient cpu."}]),
     "Pending", "Pending", True, "Insufficient cpu"),
    (pod("pilot-a-1", "Pending", "node-2", containerStatuses=[
        {"name": "pilot", "image": "img:1", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "nope"}}}]),
     "Pending", "Pending", True, "ImagePullBackOff"),
    (pod("pilot-a-1", "Unknown"), "Unknown", "", True, ""),
    (pod("pilot-a-1", "Failed", reason="Evicted", message="low on memory"), "Failed", "Failed", False, "low on memory"),
], ids=["running", "unschedulable", "image-pull", "unknown", "evicted"])
def test_a_pod_is_a_remote_job_with_the_state_tables_reason(raw: Dict[str, Any], state: str, health: str,
                                                            alive: bool, reason: str) -> None:
    view = KubernetesCeView(KubernetesSettings.from_knobs(Knobs(knobs_for("kc", PODGAHP_K8S_QUEUES="cpu"))))
    found = view._remote(raw, NOW, "")
    assert (found.job_id, found.name, found.queue, found.where) == ("k8s/pilots/pilot-a-1", "pilot-a-1", "cpu", "pilots")
    assert (found.state, found.health, found.alive, found.sandbox) == (state, health, alive, "ce.test_host_1.0_1")
    assert found.created == NOW - datetime.timedelta(seconds=60) and found.listed_at == NOW
    assert reason in found.reason and (reason or found.reason == "")


def test_a_ce_naming_no_cluster_has_no_kubernetes_view() -> None:
    assert KubernetesBackend.ce_view(Knobs({"PODGAHP_K8S_IMAGE": "i"})) is None


@pytest.fixture
def two_clusters(tmp_path: Path) -> Iterator[List[KubeSim]]:
    config = SimConfig(namespaces=("default", NAMESPACE), tick_seconds=0.05, run_seconds=0.5,
                       container_create_seconds=0.05)
    with KubeSim(config) as east, KubeSim(config) as west:
        yield [east, west]


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_every_cluster_the_queues_name_is_listed_and_reaped(two_clusters: List[KubeSim], tmp_path: Path) -> None:
    """One CE, queues on two clusters (a kubeconfig each): pods land in their queue's cluster, the census
    lists both with one LIST each, a pass deletes the orphans of both and keeps the held pods, and the
    figures count each queue's pods."""
    east, west = two_clusters
    east_config = east.write_kubeconfig(str(tmp_path / "east.kubeconfig"), namespace=NAMESPACE)
    west_config = west.write_kubeconfig(str(tmp_path / "west.kubeconfig"), namespace=NAMESPACE)
    extra = {"PODGAHP_K8S_QUEUES": "east west", "PODGAHP_K8S_EAST_KUBECONFIG": east_config,
             "PODGAHP_K8S_WEST_KUBECONFIG": west_config}
    backend = Agent(KubernetesBackend.from_knobs(Knobs(knobs_for(east_config, **extra))))
    env = [("PODGAHP_SIM_RUN_SECONDS", "600")]
    try:
        kept_east = backend.submit(make_job(tmp_path, sandbox="ce.test_host_1.0_1", env=env, queue="east"))
        lost_east = backend.submit(make_job(tmp_path, sandbox="ce.test_host_2.0_1", env=env, queue="east"))
        kept_west = backend.submit(make_job(tmp_path, sandbox="ce.test_host_3.0_1", env=env, queue="west"))
        lost_west = backend.submit(make_job(tmp_path, sandbox="ce.test_host_4.0_1", env=env, queue="west"))
        for job in (kept_east, lost_east, kept_west, lost_west):
            wait_state(backend, job, Phase.RUNNING)
    finally:
        backend.close()
    assert [p["metadata"]["name"] for p in east.pods(NAMESPACE)] == [j.split("/")[2] for j in (kept_east, lost_east)]
    assert [p["metadata"]["name"] for p in west.pods(NAMESPACE)] == [j.split("/")[2] for j in (kept_west, lost_west)]
    for sim in two_clusters:
        sim.clear_requests()
    held = frozenset({kept_east, kept_west})
    with view_of(east_config, **extra) as view:
        census = view.census(held)
        assert census.errors == [] and census.queues == ("east", "west")
        assert sorted((j.job_id, j.queue, j.where) for j in census.jobs) == sorted(
            [(kept_east, "east", f"{NAMESPACE} (cluster {east_config})"),
             (lost_east, "east", f"{NAMESPACE} (cluster {east_config})"),
             (kept_west, "west", f"{NAMESPACE} (cluster {west_config})"),
             (lost_west, "west", f"{NAMESPACE} (cluster {west_config})")])
        assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in east.requests()] == [("GET", "pods")]
        assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in west.requests()] == [("GET", "pods")]
        result = reap_views([view], GridJobs(held, 2, "host"), grace_s=0)
    assert (result.jobs, result.orphans, result.deleted, result.errors) == (4, 2, 2, [])
    assert _pods_left(east, [kept_east, lost_east]) == {kept_east}
    assert _pods_left(west, [kept_west, lost_west]) == {kept_west}
    from gahp.ce.health import census_health

    health = census_health(Knobs(knobs_for(east_config, **extra)), result.censuses, result.ce_names)
    assert health.pods == {"east": {"Running": 2}, "west": {"Running": 2}}
