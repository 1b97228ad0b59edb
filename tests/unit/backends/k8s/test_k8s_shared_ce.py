"""One namespace, many users: what a hostile user can reach through job ads and job ids.

Every attack is refused with a message naming why, and the victim's pod sees no write."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, List

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.identity import LABEL_OWNER, parse_job_id
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.core.config import Knobs
from gahp.core.errors import InvalidJob
from gahp.core.jobstate import Phase
from podgahp_sim.k8s import KubeSim

from k8s_helpers import IMAGE, NAMESPACE, knobs_for, make_job, pod_of, wait_state

pytestmark = pytest.mark.both_engines

VICTIM_SANDBOX = "ce.test_victim_12.0_1795297304"


@pytest.fixture
def users(kubeconfig: str) -> Iterator[List[Agent]]:  # noqa: F811
    """The GAHPs of two users of one CE (the gridmanager runs one per job owner)."""
    settings = KubernetesSettings.from_knobs(Knobs(knobs_for(kubeconfig)))
    made = [Agent(KubernetesBackend(settings, user="alice")), Agent(KubernetesBackend(settings, user="mallory"))]
    yield made
    for backend in made:
        backend.close()


def writes(sim: KubeSim) -> List[str]:  # noqa: F811
    return [f"{r.method} {r.path}" for r in sim.requests() if r.method in ("DELETE", "PATCH", "PUT")]


def test_claiming_another_users_sandbox_gets_a_pod_of_ones_own(users: List[Agent], sim: KubeSim,  # noqa: F811
                                                               tmp_path: Path) -> None:
    alice, mallory = users
    env = [("PODGAHP_SIM_RUN_SECONDS", "60")]
    victim = alice.submit(make_job(tmp_path, sandbox=VICTIM_SANDBOX, env=env))
    wait_state(alice, victim, Phase.RUNNING)
    # +remote_JobDirectory = "home_bl_<victim's sandbox>": same sandbox id, another user
    attacker = mallory.submit(make_job(tmp_path, sandbox=VICTIM_SANDBOX, env=env))
    assert attacker != victim
    assert pod_of(sim, attacker)["metadata"]["labels"][LABEL_OWNER] == "mallory"  # type: ignore[index]
    mallory.cancel(attacker)
    assert pod_of(sim, attacker) is None or pod_of(sim, attacker)["metadata"].get("deletionTimestamp")  # type: ignore[index]
    victim_pod = pod_of(sim, victim)
    assert victim_pod is not None and not victim_pod["metadata"].get("deletionTimestamp")  # type: ignore[index]
    assert alice.status(victim).phase is Phase.RUNNING


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_another_users_job_id_is_refused_without_a_write(users: List[Agent], sim: KubeSim,  # noqa: F811
                                                         tmp_path: Path) -> None:
    alice, mallory = users
    victim = alice.submit(make_job(tmp_path, sandbox=VICTIM_SANDBOX, env=[("PODGAHP_SIM_RUN_SECONDS", "60")]))
    wait_state(alice, victim, Phase.RUNNING)
    proxy = tmp_path / "proxy"
    proxy.write_text("not a proxy")
    sim.clear_requests()
    with pytest.raises(InvalidJob, match="belongs to another user, not 'mallory'"):
        mallory.cancel(victim)
    with pytest.raises(InvalidJob, match="belongs to another user"):
        mallory.status(victim)
    with pytest.raises(InvalidJob, match="belongs to another user"):
        mallory.refresh_proxy(victim, str(proxy))
    assert writes(sim) == []
    assert alice.status(victim).phase is Phase.RUNNING


@pytest.mark.parametrize("crafted", [
    "k8s/pilots/site-db", "k8s/pilots/.", "k8s/pilots/..", "k8s/pilots/", "k8s/../pilots", "k8s/pilots/a/b",
    "k8s/Pilots/pilot-00000000000000000000-1", "k8s/pilots/pilot-0000000000000000000g-1",
    "k8s/pilots/pilot-00000000000000000000-0", "k8s/pilots/pilot-00000000000000000000-1?watch=1",
    "k8s/pilots/pilot-00000000000000000000-1%2F..", "k8s/pilots/pilot-00000000000000000000-1 ",
])
@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_crafted_job_ids_never_reach_the_api(users: List[Agent], sim: KubeSim,  # noqa: F811
                                             crafted: str) -> None:
    _, mallory = users
    sim.clear_requests()
    for verb in (mallory.cancel, mallory.status):
        with pytest.raises(InvalidJob, match="job id"):
            verb(crafted)
    assert sim.requests() == []


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_a_pod_podgahp_did_not_make_is_not_touched(users: List[Agent], sim: KubeSim) -> None:  # noqa: F811
    alice, _ = users
    name = "pilot-0123456789abcdef0123-1"
    with sim.store.lock:
        sim.store.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": "u-1", "labels": {"app": "site-db"}},
            "spec": {"containers": [{"name": "db", "image": IMAGE}]}, "status": {"phase": "Running"}})
    sim.clear_requests()
    with pytest.raises(InvalidJob, match="was not created by podgahp"):
        alice.cancel(f"k8s/{NAMESPACE}/{name}")
    assert writes(sim) == [] and sim.pod(NAMESPACE, name) is not None


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_cancel_deletes_exactly_the_jobs_pod(users: List[Agent], sim: KubeSim,  # noqa: F811
                                             tmp_path: Path) -> None:
    alice, _ = users
    jid = alice.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "60")]))
    wait_state(alice, jid, Phase.RUNNING)
    uid = pod_of(sim, jid)["metadata"]["uid"]  # type: ignore[index]
    sim.clear_requests()
    alice.cancel(jid)
    (delete,) = sim.requests("DELETE", "/pods/")
    assert delete.path.endswith("/" + parse_job_id(jid)[1])
    assert delete.status == 200 and uid


def test_pilot_pods_get_no_service_account_token(users: List[Agent], sim: KubeSim,  # noqa: F811
                                                 tmp_path: Path) -> None:
    alice, _ = users
    pod = pod_of(sim, alice.submit(make_job(tmp_path)))
    assert pod is not None and pod["spec"]["automountServiceAccountToken"] is False  # type: ignore[index]


@pytest.mark.parametrize("fresh", [False, True], ids=["same-gahp", "fresh-gahp"])
def test_a_patched_out_annotation_sends_no_output_elsewhere(users: List[Agent], sim: KubeSim,  # noqa: F811
                                                            kubeconfig: str, tmp_path: Path, fresh: bool,
                                                            namespace: str) -> None:
    """Someone allowed to patch pods in the namespace points the pod's out/err annotations at a private
    file of the victim, outside the pilot's directory. The victim's GAHP (the same one, or a fresh one
    that only has the job id) writes the pod log to the pilot's own Out, and nothing else."""
    from kubernetes import client, config

    alice, _ = users
    private = tmp_path / "alice-home" / ".ssh" / "authorized_keys"
    private.parent.mkdir(parents=True)
    private.write_text("alice's key\n")
    os.chmod(private, 0o600)
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    job = make_job(iwd, env=[("PODGAHP_SIM_RUN_SECONDS", "1"), ("PODGAHP_SIM_LOG", "ssh-rsa mallory")])
    jid = alice.submit(job)
    name = parse_job_id(jid)[1]
    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig, persist_config=False))
    try:
        core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
            "podgahp.htcondor.org/out": str(private), "podgahp.htcondor.org/err": str(private),
            "podgahp.htcondor.org/iwd": str(private.parent)}}})
    finally:
        core.api_client.close()
    gahp = alice
    if fresh:
        gahp = Agent(KubernetesBackend(alice.backend.settings, user="alice"))
    try:
        state = wait_state(gahp, jid, Phase.COMPLETED)
    finally:
        if fresh:
            gahp.close()
    assert state.exit_code == 0
    assert private.read_text() == "alice's key\n"
    assert "ssh-rsa mallory" in Path(job.stdout or "").read_text()
    assert "podgahp: exit code 0" in Path(job.stderr or "").read_text()
