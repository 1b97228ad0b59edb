"""How the Kubernetes backend reaches a cluster: HTTPS with the kubeconfig's CA, client
certificates, the in-cluster service account, and no credential ever sent over plain HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.api import ThrottledRefresh, k8s_client
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.core.config import Knobs
from gahp.core.errors import ConfigError
from gahp.core.jobstate import Phase
from podgahp_sim.k8s import KubeSim, SimConfig

from k8s_helpers import IMAGE, NAMESPACE, knobs_for, make_job, wait_state

pytestmark = pytest.mark.both_engines

FAST = dict(namespaces=("default", NAMESPACE), tick_seconds=0.05, run_seconds=0.3, container_create_seconds=0.05)


@pytest.fixture
def plain_sim() -> Iterator[KubeSim]:
    with KubeSim(SimConfig(**FAST), tls=False) as running:  # type: ignore[arg-type]
        yield running


@pytest.fixture
def tls_sim() -> Iterator[KubeSim]:
    with KubeSim(SimConfig(**FAST)) as running:  # type: ignore[arg-type]
        yield running


def backend_from(knobs: dict) -> Agent:
    return Agent(KubernetesBackend.from_knobs(Knobs(knobs)))


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_pilot_runs_over_https_with_client_certificate(tls_sim: KubeSim, tmp_path: Path) -> None:
    kubeconfig = tls_sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NAMESPACE, client_cert=True)
    backend = backend_from(knobs_for(kubeconfig))
    try:
        backend.ping()
        job_id = backend.submit(make_job(tmp_path))
        assert wait_state(backend, job_id, Phase.COMPLETED).exit_code == 0
    finally:
        backend.close()
    assert tls_sim.requests("POST", "/pods$")[-1].status == 201
    assert all("authorization" not in r.headers for r in tls_sim.requests())


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_token_over_plain_http_is_refused_without_a_request(plain_sim: KubeSim, tmp_path: Path) -> None:
    kubeconfig = plain_sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NAMESPACE)
    backend = backend_from(knobs_for(kubeconfig))
    try:
        with pytest.raises(ConfigError, match="plain HTTP.*PODGAHP_K8S_ALLOW_INSECURE_HTTP"):
            backend.ping()
        with pytest.raises(ConfigError, match="PODGAHP_K8S_ALLOW_INSECURE_HTTP"):
            backend.submit(make_job(tmp_path))
    finally:
        backend.close()
    assert plain_sim.requests() == []


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_plain_http_allowed_by_the_knob(plain_sim: KubeSim, tmp_path: Path) -> None:
    kubeconfig = plain_sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NAMESPACE)
    backend = backend_from(knobs_for(kubeconfig, PODGAHP_K8S_ALLOW_INSECURE_HTTP="True"))
    try:
        backend.ping()
    finally:
        backend.close()
    assert plain_sim.requests()


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_in_cluster_service_account(tls_sim: KubeSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = tls_sim.write_service_account(str(tmp_path / "sa"), namespace=NAMESPACE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    knobs = knobs_for("", PODGAHP_K8S_SERVICE_ACCOUNT_DIR=str(tmp_path / "sa"), PODGAHP_STATE_DIR=str(tmp_path))
    del knobs["PODGAHP_K8S_KUBECONFIG"]
    backend = backend_from(knobs)
    try:
        backend.ping()
        job_id = backend.submit(make_job(tmp_path))
        assert job_id.startswith(f"k8s/{NAMESPACE}/")  # the namespace file's namespace
        assert wait_state(backend, job_id, Phase.COMPLETED).exit_code == 0
    finally:
        backend.close()
    create = tls_sim.requests("POST", f"/namespaces/{NAMESPACE}/pods$")[-1]
    assert create.status == 201


def test_in_cluster_without_its_files_names_the_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    backend = backend_from({"PODGAHP_K8S_IMAGE": IMAGE,
                            "PODGAHP_K8S_SERVICE_ACCOUNT_DIR": str(tmp_path / "nothing")})
    try:
        with pytest.raises(ConfigError, match=r"nothing/token does not exist.*PODGAHP_K8S_SERVICE_ACCOUNT_DIR"):
            backend.ping()
    finally:
        backend.close()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_credential_refresh_runs_at_most_once_a_second_and_stays_in_place() -> None:
    """The client runs its refresh hook before every request; the kubeconfig loader's hook installs
    a new hook each time. The throttle runs the newest one at most once per interval."""
    calls = []
    configuration = k8s_client.Configuration()

    def loader_hook(conf: Any) -> None:  # as kube_config's: refresh, then install itself again
        calls.append("refresh")
        conf.api_key["BearerToken"] = f"token-{len(calls)}"
        conf.refresh_api_key_hook = loader_hook

    configuration.refresh_api_key_hook = loader_hook
    clock = Clock()
    throttle = ThrottledRefresh(configuration, every=1.0, clock=clock)
    assert configuration.refresh_api_key_hook is throttle
    for _ in range(50):
        configuration.get_api_key_with_prefix("BearerToken")
    assert calls == ["refresh"] and configuration.refresh_api_key_hook is throttle
    clock.now += 1.0
    assert configuration.get_api_key_with_prefix("BearerToken") == "token-2"
    assert configuration.refresh_api_key_hook is throttle


def test_a_failed_credential_refresh_is_tried_again_at_the_next_request() -> None:
    attempts = []
    configuration = k8s_client.Configuration()

    def failing(conf: Any) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("exec plugin failed")

    configuration.refresh_api_key_hook = failing
    ThrottledRefresh(configuration, every=60.0, clock=Clock())
    with pytest.raises(RuntimeError, match="exec plugin"):
        configuration.get_api_key_with_prefix("BearerToken")
    configuration.get_api_key_with_prefix("BearerToken")
    configuration.get_api_key_with_prefix("BearerToken")
    assert len(attempts) == 2


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_a_kubeconfig_token_is_sent_with_the_throttle_in_place(tls_sim: KubeSim, tmp_path: Path) -> None:
    """The loader's real hook under the throttle: every request carries the kubeconfig's token."""
    kubeconfig = tls_sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NAMESPACE)
    backend = backend_from(knobs_for(kubeconfig))
    try:
        for _ in range(3):
            backend.ping()
        apis = list(backend.backend.clusters.apis())
        assert apis and all(isinstance(api.configuration().refresh_api_key_hook, ThrottledRefresh)
                            for api in apis)
    finally:
        backend.close()
    assert tls_sim.requests() and all(r.status < 400 for r in tls_sim.requests())
