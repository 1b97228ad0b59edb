"""The shipped manifests for a CE inside the cluster apply with kubectl (validation on), and podgahp
works with the in-cluster identity they define: the pod's service-account token, authorized only by
the Role they bind to it. On both engines (on the real control plane in a namespace of the test's
own, where the Deployment's controller makes the CE's pod too)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator, Set, Tuple

import pytest
import yaml

from gahp.agent import Agent
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.rights import RIGHTS
from gahp.core.config import Knobs
from gahp.core.errors import BackendError
from gahp.core.job import PilotJob
from gahp.core.jobstate import Phase
from engines import RealEngine
from podgahp_sim.k8s import KubeSim, SimConfig
from test_k8s_support import kubectl_version
from paths import DOCS

MANIFESTS = DOCS / "ce-in-cluster.yaml"
KUBECTL = shutil.which("kubectl")
NS = "pilots"


@pytest.fixture
def cluster(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tuple[Any, str, str]]:
    """(the engine's reads, the namespace of the pilots and the CE, an admin kubeconfig there) on either
    engine: a simulator with a ``pilots`` namespace, or a namespace of the test's own on the real control plane."""
    kubeconfig = str(tmp_path / "admin-kubeconfig")
    if engine == "real":
        real: RealEngine = request.getfixturevalue("real_engine")
        yield real, real.namespace, real.cluster.write_kubeconfig(kubeconfig, namespace=real.namespace)
        return
    with KubeSim(SimConfig(namespaces=("default", NS), tick_seconds=0.05, run_seconds=0.3,
                           container_create_seconds=0.05)) as running:
        yield running, NS, running.write_kubeconfig(kubeconfig, namespace=NS)


def kubectl(kubeconfig: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    assert KUBECTL is not None
    env = dict(os.environ, KUBECONFIG=kubeconfig, HOME=str(tmp_path))
    return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60)


def manifests(namespace: str, tmp_path: Path) -> str:
    """docs/ce-in-cluster.yaml, its namespace (``pilots``) the given one."""
    path = tmp_path / "ce-in-cluster.yaml"
    path.write_text(MANIFESTS.read_text().replace("namespace: pilots", "namespace: " + namespace).replace(
        "PODGAHP_K8S_NAMESPACE = pilots", "PODGAHP_K8S_NAMESPACE = " + namespace))
    return str(path)


def ping_refusal(backend: Agent) -> str:
    """Why ping fails ('' when it does not)."""
    try:
        backend.ping()
    except BackendError as e:
        return str(e)
    return ""


def granted(doc: dict) -> Set[Tuple[str, str]]:
    return {(r, v) for rule in doc["rules"] for r in rule["resources"] for v in rule["verbs"]}


def test_the_role_is_the_least_privilege_one() -> None:
    (role,) = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d and d["kind"] == "Role"]
    assert granted(role) == {(r, v) for r, v, _ in RIGHTS}


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl on this machine (make system-deps installs one)")
@pytest.mark.both_engines
def test_manifests_apply_and_podgahp_runs_with_the_pods_identity(cluster: Tuple[Any, str, str], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    engine, namespace, admin = cluster
    validate = [] if kubectl_version(str(KUBECTL)) >= (1, 27) else ["--validate=false"]
    manifest = manifests(namespace, tmp_path)
    applied = kubectl(admin, tmp_path, "apply", "-f", manifest, *validate)
    assert applied.returncode == 0, applied.stderr
    for line in ("serviceaccount/podgahp-ce created", "role.rbac.authorization.k8s.io/podgahp-ce created",
                 "rolebinding.rbac.authorization.k8s.io/podgahp-ce created", "configmap/podgahp-ce-config created",
                 "deployment.apps/podgahp-ce created"):
        assert line in applied.stdout, applied.stdout
    again = kubectl(admin, tmp_path, "apply", "-f", manifest, *validate)
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout + again.stderr

    # The CE pod's view: its service account's token, the cluster CA, its namespace.
    env = engine.write_service_account(str(tmp_path / "sa"), namespace=namespace, account="podgahp-ce")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = yaml.safe_load(kubectl(admin, tmp_path, "get", "configmap", "podgahp-ce-config", "-o", "yaml").stdout)
    knobs = dict(line.split(" = ", 1) for line in config["data"]["99-podgahp-in-cluster.conf"].splitlines()
                 if " = " in line and not line.startswith("#"))
    knobs = {k: v for k, v in knobs.items() if v}
    knobs.update(PODGAHP_K8S_SERVICE_ACCOUNT_DIR=str(tmp_path / "sa"), PODGAHP_K8S_CE_NAME="ce.test",
                 PODGAHP_K8S_REAP_INTERVAL_SECONDS="0")
    backend = Agent(KubernetesBackend.from_knobs(Knobs(knobs)))
    try:
        # (the real server's authorizer sees a new binding a moment later)
        engine.wait_for(lambda: not ping_refusal(backend), 30, "the Role in effect")
        exe = tmp_path / "pilot.sh"
        exe.write_text("#!/bin/sh\n")
        job = PilotJob(executable=str(exe), iwd=str(tmp_path), sandbox_id="ce_1.0_1", memory_mb=64)
        job_id = backend.submit(job)
        assert job_id.startswith(f"k8s/{namespace}/")
        engine.wait_for(lambda: backend.status(job_id).phase is Phase.COMPLETED, 60, "the pilot completed")
        if isinstance(engine, KubeSim):
            assert not [r for r in engine.requests() if r.status == 403]
        # Without the binding, the same identity may do nothing, and ping says what is missing.
        assert kubectl(admin, tmp_path, "delete", "rolebinding", "podgahp-ce").returncode == 0
        assert "may not create pods" in engine.wait_for(lambda: ping_refusal(backend), 30, "the binding gone")
    finally:
        backend.close()
