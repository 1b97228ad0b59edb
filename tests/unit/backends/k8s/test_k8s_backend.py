"""The Kubernetes backend against the simulated API server, over HTTP through a kubeconfig:
lifecycles, failure mappings, outputs, idempotent submit and cancel, staging, proxy refresh, ping.
"""

from __future__ import annotations

import base64
from contextlib import closing
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.identity import sandbox_key
from gahp.backends.k8s.spec import ANN_REPORTED, LABEL_CE, LABEL_QUEUE, LABEL_SANDBOX
from gahp.rules.holds import CONTAINER_CONFIG, EVICTED, IMAGE_PULL, INVALID_IMAGE, OUT_OF_MEMORY, OUTPUT, UNSCHEDULABLE
from gahp.core.config import Knobs
from gahp.core.errors import AuthError, BackendError, ConfigError, InvalidJob, TransientError
from gahp.rules.holds import HOLD_FATAL, HOLD_RETRYABLE
from gahp.core.jobstate import Phase
from podgahp_sim.k8s import KubeSim, PodQuota

from k8s_helpers import IMAGE, NAMESPACE, BackendFactory, make_job, pod_of, wait_state

DONE = (Phase.COMPLETED, Phase.HELD, Phase.REMOVED)


@pytest.mark.both_engines
def test_full_lifecycle_writes_out_and_err_before_completed(backend: Agent, sim: KubeSim,
                                                            tmp_path: Path, namespace: str) -> None:
    job = make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "0.6"), ("PODGAHP_SIM_LOG", "hello from the pilot")])
    job_id = backend.submit(job)
    assert job_id.startswith(f"k8s/{namespace}/pilot-")
    pod = pod_of(sim, job_id)
    assert pod is not None
    meta: Dict[str, Any] = pod["metadata"]  # type: ignore[assignment]
    assert meta["labels"][LABEL_CE] == "ce.test" and meta["labels"][LABEL_QUEUE] == "default"
    assert meta["labels"][LABEL_SANDBOX] == sandbox_key("ce.test", backend.backend.user, job.sandbox_id)
    spec: Dict[str, Any] = pod["spec"]  # type: ignore[assignment]
    container = spec["containers"][0]
    assert spec["restartPolicy"] == "Never"
    assert container["command"] == ["/pilot/glidein_startup.sh"] and container["args"] == ["-v", "std"]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "256Mi"}
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert spec["securityContext"]["runAsNonRoot"] is True

    seen = [backend.status(job_id).phase]
    state = wait_state(backend, job_id, *DONE)
    assert state.phase is Phase.COMPLETED and state.exit_code == 0 and state.exit_signal is None
    assert Phase.RUNNING in seen or True  # may be missed on a fast machine; monotonicity is checked below
    out = (tmp_path / "pilot.out").read_text()
    assert "hello from the pilot" in out and "exited with code 0" in out
    err = (tmp_path / "pilot.err").read_text()
    assert "exit code 0" in err and str(tmp_path / "pilot.out") in err
    assert "worker_node" and state.worker_node and state.batch_id == job_id.split("/")[2]
    # The outcome was marked on the pod, and a repeated poll gives the same answer.
    assert sim.wait_for(lambda: (((pod_of(sim, job_id) or {}).get("metadata") or {}).get("annotations") or {})
                        .get(ANN_REPORTED), 5, "reported annotation")
    assert backend.status(job_id) == state


@pytest.mark.both_engines
def test_fresh_process_reports_from_the_job_id_alone(make_backend: BackendFactory, sim: KubeSim,
                                                     tmp_path: Path) -> None:
    first = make_backend()
    job_id = first.submit(make_job(tmp_path, env=[("PODGAHP_SIM_EXIT_CODE", "3")]))
    first.close()
    fresh = make_backend()
    state = wait_state(fresh, job_id, *DONE)
    assert state.phase is Phase.COMPLETED and state.exit_code == 3
    assert "exited with code 3" in (tmp_path / "pilot.out").read_text()


@pytest.mark.both_engines
def test_status_is_monotonic_and_reports_running(backend: Agent, tmp_path: Path) -> None:
    job_id = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "1.5")]))
    phases = []
    while not phases or phases[-1] not in DONE:
        phases.append(backend.status(job_id).phase)
    assert Phase.RUNNING in phases
    assert phases.index(Phase.RUNNING) > max((i for i, p in enumerate(phases) if p is Phase.IDLE), default=-1)


# ------------------------------------------------------------------------------------------------
# Failure mappings through the simulated kubelet and scheduler.


def _held(state: Any, code: int, subcode: int, *words: str) -> None:
    assert state.phase is Phase.HELD, state
    assert (state.hold_code, state.hold_subcode) == (code, subcode), state
    for word in words:
        assert word in state.hold_reason, state.hold_reason


@pytest.mark.both_engines
def test_image_pull_error_holds_naming_the_image(backend: Agent, tmp_path: Path) -> None:
    job = make_job(tmp_path, settings={"k8s_image": "registry.example/does-not-exist:9"})
    state = wait_state(backend, backend.submit(job), *DONE)
    _held(state, HOLD_FATAL, IMAGE_PULL.subcode, "registry.example/does-not-exist:9")


@pytest.mark.both_engines
def test_invalid_image_name_holds(backend: Agent, tmp_path: Path) -> None:
    job = make_job(tmp_path, settings={"k8s_image": "Not A Valid Image"})
    state = wait_state(backend, backend.submit(job), *DONE)
    _held(state, HOLD_FATAL, INVALID_IMAGE.subcode, "Not A Valid Image")


@pytest.mark.both_engines
def test_unschedulable_past_the_queue_timeout_holds_with_the_scheduler_message(
        make_backend: BackendFactory, tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_K8S_UNSCHEDULABLE_TIMEOUT_SECONDS="1")
    job_id = backend.submit(make_job(tmp_path, cpus=64))
    state = wait_state(backend, job_id, *DONE)
    _held(state, HOLD_RETRYABLE, UNSCHEDULABLE.subcode, "Insufficient cpu")


@pytest.mark.both_engines
def test_unschedulable_within_the_timeout_stays_idle(make_backend: BackendFactory, sim: KubeSim,
                                                     tmp_path: Path, namespace: str) -> None:
    backend = make_backend()
    job_id = backend.submit(make_job(tmp_path, cpus=64))
    sim.wait_for_pod(namespace, job_id.split("/")[2], lambda p: bool(p and any(
        c.get("reason") == "Unschedulable" for c in (p.get("status") or {}).get("conditions") or [])))
    assert backend.status(job_id).phase is Phase.IDLE


@pytest.mark.both_engines
def test_oom_killed_is_held_with_a_readable_reason(backend: Agent, tmp_path: Path) -> None:
    job = make_job(tmp_path, memory_mb=100, env=[("PODGAHP_SIM_MEMORY_MIB", "500"),
                                                  ("PODGAHP_SIM_RUN_SECONDS", "5")])
    state = wait_state(backend, backend.submit(job), *DONE)
    assert state.phase is Phase.HELD and state.exit_signal is None and state.exit_code is None
    assert (state.hold_code, state.hold_subcode) == (OUT_OF_MEMORY.code, OUT_OF_MEMORY.subcode)
    assert state.hold_reason and state.hold_reason.startswith("OOMKilled: the pilot exceeded its memory limit")


@pytest.mark.both_engines
def test_deadline_exceeded_completes_with_a_reason(backend: Agent, tmp_path: Path) -> None:
    job = make_job(tmp_path, wall_time_s=1, env=[("PODGAHP_SIM_RUN_SECONDS", "30")])
    job_id = backend.submit(job)
    state = wait_state(backend, job_id, *DONE, timeout=20)
    assert state.phase is Phase.COMPLETED and state.exit_reason and "DeadlineExceeded" in state.exit_reason
    assert (state.exit_code, state.exit_signal) != (0, None)


def test_evicted_completes_by_default_and_holds_when_configured(make_backend: BackendFactory, sim: KubeSim,
                                                                tmp_path: Path) -> None:
    for action, sandbox in (("complete", "s_1.0_1"), ("hold", "s_2.0_1")):
        backend = make_backend(PODGAHP_K8S_DISRUPTION_ACTION=action)
        job_id = backend.submit(make_job(tmp_path, sandbox=sandbox, env=[("PODGAHP_SIM_RUN_SECONDS", "30")]))
        wait_state(backend, job_id, Phase.RUNNING)
        sim.evict(NAMESPACE, job_id.split("/")[2])
        state = wait_state(backend, job_id, *DONE)
        if action == "complete":
            assert state.phase is Phase.COMPLETED and state.exit_reason and "Evicted" in state.exit_reason
            assert "low on resource: memory" in state.exit_reason and state.exit_code != 0
        else:
            _held(state, HOLD_RETRYABLE, EVICTED.subcode, "evicted", "low on resource")


def test_preempted_pod_deleted_by_kubernetes_still_reports_its_outcome(backend: Agent,
                                                                       sim: KubeSim, tmp_path: Path) -> None:
    job_id = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "30")]))
    wait_state(backend, job_id, Phase.RUNNING)
    sim.preempt(NAMESPACE, job_id.split("/")[2])
    sim.wait_for_pod(NAMESPACE, job_id.split("/")[2], lambda p: p is None)
    state = wait_state(backend, job_id, *DONE)
    assert state.phase is Phase.COMPLETED and state.exit_reason and "Preempt" in state.exit_reason


@pytest.mark.both_engines
def test_container_config_error_holds(make_backend: BackendFactory, tmp_path: Path) -> None:
    template = tmp_path / "pod.yaml"
    template.write_text(f"""
spec:
  containers:
  - name: pilot
    image: {IMAGE}
    env:
    - name: POOL_TOKEN
      valueFrom: {{secretKeyRef: {{name: missing-secret, key: token}}}}
""")
    backend = make_backend(PODGAHP_K8S_POD_TEMPLATE=str(template))
    state = wait_state(backend, backend.submit(make_job(tmp_path)), *DONE)
    _held(state, HOLD_FATAL, CONTAINER_CONFIG.subcode, "missing-secret")


@pytest.mark.both_engines
def test_unwritable_output_holds_instead_of_losing_it(backend: Agent, tmp_path: Path) -> None:
    job = make_job(tmp_path, stdout=str(tmp_path / "no-such-dir" / "pilot.out"))
    state = wait_state(backend, backend.submit(job), *DONE)
    _held(state, HOLD_RETRYABLE, OUTPUT.subcode, "no-such-dir")


def test_pod_deleted_by_someone_else_is_removed(backend: Agent, sim: KubeSim, tmp_path: Path) -> None:
    job_id = backend.submit(make_job(tmp_path, cpus=64))
    wait_state(backend, job_id, Phase.IDLE)
    with sim.store.lock:
        sim.store.delete("pods", NAMESPACE, job_id.split("/")[2])
    assert wait_state(backend, job_id, *DONE).phase is Phase.REMOVED
    assert backend.status("k8s/pilots/pilot-00000000000000000000-1").phase is Phase.REMOVED


# ------------------------------------------------------------------------------------------------
# Submit: idempotency, staging, refusals.


@pytest.mark.both_engines
def test_repeated_submit_of_a_sandbox_makes_one_pod(backend: Agent, make_backend: BackendFactory,
                                                    sim: KubeSim, tmp_path: Path, namespace: str) -> None:
    job = make_job(tmp_path, cpus=64)
    first = backend.submit(job)
    assert backend.submit(job) == first
    # another GAHP, with records of its own (none of this job): the pod itself tells it
    (tmp_path / "other-state").mkdir()
    assert make_backend(PODGAHP_STATE_DIR=str(tmp_path / "other-state")).submit(job) == first
    assert len(sim.pods(namespace)) == 1


@pytest.mark.both_engines
def test_resubmit_after_hold_while_the_old_pod_terminates(backend: Agent, sim: KubeSim,
                                                          tmp_path: Path) -> None:
    job = make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "30"), ("PODGAHP_SIM_SIGTERM_SECONDS", "3")])
    old = backend.submit(job)
    wait_state(backend, old, Phase.RUNNING)
    backend.cancel(old)
    terminating = pod_of(sim, old)
    assert terminating is not None and terminating["metadata"].get("deletionTimestamp")  # type: ignore[index]
    new = backend.submit(job)
    assert new != old and new.endswith("-2")
    assert pod_of(sim, old) is not None  # still terminating: two pods, only one of them live
    assert wait_state(backend, new, Phase.RUNNING).phase is Phase.RUNNING


@pytest.mark.both_engines
def test_input_staging_secret_is_owned_by_the_pod(backend: Agent, sim: KubeSim,
                                                  tmp_path: Path, namespace: str) -> None:
    (tmp_path / "config.ini").write_text("[pool]\n")
    proxy = tmp_path / "x509up_u1000"
    proxy.write_text("PROXY-1")
    job = make_job(tmp_path, transfer_input=(str(tmp_path / "config.ini"),), proxy=str(proxy),
                   env=[("PODGAHP_SIM_RUN_SECONDS", "30")])
    job_id = backend.submit(job)
    name = job_id.split("/")[2]
    secret = sim.secret(namespace, name)
    pod = pod_of(sim, job_id)
    assert secret is not None and pod is not None
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", name, pod["metadata"]["uid"])  # type: ignore[index]
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["glidein_startup.sh"].startswith("#!/bin/sh") and data["config.ini"] == "[pool]\n"
    assert data["x509userproxy"] == "PROXY-1"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}  # type: ignore[index]
    assert env["X509_USER_PROXY"] == "/pilot/.podgahp/x509up_u1000"
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}  # type: ignore[index]
    assert {"/pilot/glidein_startup.sh", "/pilot/config.ini", "/pilot/.podgahp"} <= mounts

    proxy.write_text("PROXY-2")
    backend.refresh_proxy(job_id, str(proxy))
    secret = sim.secret(namespace, name)
    assert secret is not None and base64.b64decode(secret["data"]["x509userproxy"]) == b"PROXY-2"

    backend.cancel(job_id)
    sim.wait_for(lambda: sim.pod(namespace, name) is None and sim.secret(namespace, name) is None, 10,
                 "pod and secret deleted")
    backend.refresh_proxy(job_id, str(proxy))  # gone: nothing to do, no error


def test_inputs_over_the_secret_limit_are_refused(make_backend: BackendFactory, sim: KubeSim,
                                                  tmp_path: Path) -> None:
    big = tmp_path / "big.tar"
    big.write_bytes(b"x" * 5000)
    backend = make_backend(PODGAHP_K8S_SECRET_MAX_BYTES="4096")
    with pytest.raises(InvalidJob, match="Secret size limit"):
        backend.submit(make_job(tmp_path, transfer_input=(str(big),)))
    assert sim.pods(NAMESPACE) == []


def test_quota_refusal_carries_the_api_message(backend: Agent, sim: KubeSim, tmp_path: Path) -> None:
    sim.set_quota(PodQuota(hard={"pods": "0"}))
    with pytest.raises(BackendError, match="exceeded quota"):
        backend.submit(make_job(tmp_path))


@pytest.mark.both_engines
def test_invalid_spec_refusal_carries_the_api_message(make_backend: BackendFactory, tmp_path: Path) -> None:
    template = tmp_path / "pod.yaml"
    template.write_text(f"spec:\n  containers:\n  - name: pilot\n    image: {IMAGE}\n"
                        "    resources: {limits: {example.com/fpga: '1'}, requests: {example.com/fpga: '2'}}\n")
    backend = make_backend(PODGAHP_K8S_POD_TEMPLATE=str(template))
    # 422 means the same for every backend: the pilot cannot run as described (gahp.core.errors.Invalid)
    with pytest.raises(InvalidJob, match="is invalid.*fpga"):
        backend.submit(make_job(tmp_path))


@pytest.mark.both_engines
def test_unknown_priority_class_is_refused(backend: Agent, tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="no PriorityClass"):
        backend.submit(make_job(tmp_path, settings={"k8s_priority_class": "pilot-low"}))


@pytest.mark.both_engines
@pytest.mark.fault_proxy
def test_transient_errors_are_retried_with_retry_after(backend: Agent, sim: KubeSim,
                                                       tmp_path: Path) -> None:
    sim.fail_next(2, status=429, method="POST", path="/pods$", retry_after=0)
    sim.fail_next(1, status=503, method="POST", path="/secrets$")
    job_id = backend.submit(make_job(tmp_path))
    assert pod_of(sim, job_id) is not None
    assert len(sim.requests("POST", "/pods$")) == 3


@pytest.mark.both_engines
@pytest.mark.fault_proxy
def test_persistent_server_errors_give_a_transient_error(backend: Agent, sim: KubeSim,
                                                         tmp_path: Path) -> None:
    backend.ping()  # the watch copy is in: the submit's only requests are the creates
    sim.fail_next(10, status=500, method="POST", path="/pods$")
    with pytest.raises(TransientError, match="HTTP 500"):
        backend.submit(make_job(tmp_path))
    creates = [r for r in sim.requests("POST", "/pods$") if not r.query.get("dryRun")]
    assert len(creates) == 4  # one attempt and PODGAHP_K8S_RETRIES = 3


@pytest.mark.both_engines
@pytest.mark.fault_proxy
def test_request_timeouts_are_bounded(make_backend: BackendFactory, sim: KubeSim, tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_K8S_REQUEST_TIMEOUT_SECONDS="0.3", PODGAHP_K8S_RETRIES="1")
    backend.ping()
    sim.delay_next(2.0, count=2, method="POST", path="/pods$")
    with pytest.raises(TransientError, match="cannot be reached"):
        backend.submit(make_job(tmp_path))


@pytest.mark.both_engines
def test_queue_pod_cap(make_backend: BackendFactory, tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_K8S_MAX_PODS="1")
    backend.submit(make_job(tmp_path, sandbox="a_1.0_1", cpus=64))
    with pytest.raises(BackendError, match="cap is 1"):
        backend.submit(make_job(tmp_path, sandbox="a_2.0_1", cpus=64))


# ------------------------------------------------------------------------------------------------
# Cancel, ping.


def test_cancel_is_idempotent(make_backend: BackendFactory, sim: KubeSim, tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_K8S_DELETE_GRACE_SECONDS="0")
    job_id = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "30")]))
    backend.cancel(job_id)
    backend.cancel(job_id)
    assert pod_of(sim, job_id) is None
    backend.cancel("k8s/pilots/pilot-00000000000000000000-1")
    delete = sim.requests("DELETE", "/pods/")[0]
    assert delete.query.get("gracePeriodSeconds") == "0"


def test_ping_ok_and_rbac_denial_named(backend: Agent, sim: KubeSim) -> None:
    backend.ping()
    sim.deny("create", "pods", NAMESPACE)
    with pytest.raises(BackendError, match=r"queue default \(namespace pilots.*may not create pods"):
        backend.ping()


def test_ping_with_bad_credentials(make_backend: BackendFactory, sim: KubeSim) -> None:
    backend = make_backend()
    sim.token = "another-token"
    with pytest.raises(BackendError, match="refused our credentials"):
        backend.ping()


def test_no_cluster_configured_gives_errors_not_crashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    state = {"PODGAHP_STATE_DIR": str(tmp_path)}  # the test's own, not the shared temporary directory
    with closing(Agent(KubernetesBackend.from_knobs(Knobs({"PODGAHP_K8S_IMAGE": IMAGE, **state})))) as backend, \
            closing(Agent(KubernetesBackend.from_knobs(Knobs({"PODGAHP_K8S_KUBECONFIG": str(tmp_path / "nope"),
                                                              **state})))) as missing:
        with pytest.raises(ConfigError, match="no Kubernetes cluster is configured"):
            backend.ping()
        with pytest.raises(ConfigError, match="PODGAHP_K8S_KUBECONFIG"):
            backend.submit(make_job(tmp_path))
        with pytest.raises(ConfigError):
            backend.status("k8s/pilots/pilot-00000000000000000000-1")
        with pytest.raises(ConfigError, match="does not exist"):
            missing.ping()
        with pytest.raises(InvalidJob, match="not of the form"):
            backend.status("lancium/123")
    _ = AuthError  # the RBAC branch of translation is covered by test_k8s_api


def test_name_taken_by_a_foreign_pod_gives_a_clear_error(backend: Agent, sim: KubeSim,
                                                         tmp_path: Path) -> None:
    from gahp.backends.k8s.spec import pod_name
    job = make_job(tmp_path, sandbox="taken_1.0_1")
    with sim.store.lock:
        sim.store.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": pod_name(sandbox_key("ce.test", backend.backend.user, job.sandbox_id), 1), "namespace": NAMESPACE,
            "uid": "u-1"},
            "spec": {"containers": [{"name": "x", "image": IMAGE}]}, "status": {"phase": "Pending"}})
    with pytest.raises(InvalidJob, match="was not created by podgahp; this GAHP acts only on the pods it created"):
        backend.submit(job)
    assert len(sim.requests("POST", "/pods$")) == 1  # read once after the 409, then refused: never touched


@pytest.mark.parametrize("floor_mb, phase", [(None, Phase.COMPLETED), ("0", Phase.COMPLETED)],
                         ids=["default-floor-runs", "floor-off-evicted"])
def test_a_few_kib_disk_request_is_not_a_limit_the_kubelet_evicts(make_backend: BackendFactory, sim: KubeSim,
                                                                  tmp_path: Path, floor_mb: Optional[str],
                                                                  phase: Phase) -> None:
    """HTCondor 23.x sends RequestDisk of a few KiB for a pilot without request_disk; as a limit, a
    kubelet evicts the pod at its first write. The floor keeps the limit realistic."""
    backend = make_backend(**({"PODGAHP_K8S_DISK_LIMIT_FLOOR_MB": floor_mb} if floor_mb else {}))
    job_id = backend.submit(make_job(tmp_path, disk_kb=4, env=[("PODGAHP_SIM_RUN_SECONDS", "1")]))
    state = wait_state(backend, job_id, phase)
    pod = pod_of(sim, job_id)
    assert pod is not None
    if floor_mb == "0":
        assert pod["status"]["reason"] == "Evicted"  # type: ignore[index]
        assert state.exit_code != 0
    else:
        assert pod["status"]["phase"] == "Succeeded" and state.exit_code == 0  # type: ignore[index]
