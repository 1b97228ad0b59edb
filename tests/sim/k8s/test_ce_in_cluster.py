"""The shipped manifests for a CE inside the cluster apply with kubectl (validation on), and podgahp
works with the in-cluster identity they define: the pod's service-account token, authorized only by
the Role they bind to it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, Set, Tuple

import pytest
import yaml

from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.rights import RIGHTS
from gahp.config import Knobs
from gahp.errors import BackendError
from gahp.job import PilotJob
from gahp.jobstate import Phase
from podgahp_sim.k8s import KubeSim, SimConfig
from test_k8s_support import kubectl_version
from paths import DOCS

MANIFESTS = DOCS / "ce-in-cluster.yaml"
KUBECTL = shutil.which("kubectl")
NS = "pilots"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(SimConfig(namespaces=("default", NS), tick_seconds=0.05, run_seconds=0.3,
                           container_create_seconds=0.05)) as running:
        yield running


def kubectl(sim: KubeSim, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    assert KUBECTL is not None
    env = dict(os.environ, KUBECONFIG=sim.write_kubeconfig(str(tmp_path / "admin-kubeconfig"), namespace=NS),
               HOME=str(tmp_path))
    return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60)


def granted(doc: dict) -> Set[Tuple[str, str]]:
    return {(r, v) for rule in doc["rules"] for r in rule["resources"] for v in rule["verbs"]}


def test_the_role_is_the_least_privilege_one() -> None:
    (role,) = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d and d["kind"] == "Role"]
    assert granted(role) == {(r, v) for r, v, _ in RIGHTS}


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl on this machine (make system-deps installs one)")
def test_manifests_apply_and_podgahp_runs_with_the_pods_identity(sim: KubeSim, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    validate = [] if kubectl_version(KUBECTL) >= (1, 27) else ["--validate=false"]
    applied = kubectl(sim, tmp_path, "apply", "-f", str(MANIFESTS), *validate)
    assert applied.returncode == 0, applied.stderr
    for line in ("serviceaccount/podgahp-ce created", "role.rbac.authorization.k8s.io/podgahp-ce created",
                 "rolebinding.rbac.authorization.k8s.io/podgahp-ce created", "configmap/podgahp-ce-config created",
                 "deployment.apps/podgahp-ce created"):
        assert line in applied.stdout, applied.stdout
    again = kubectl(sim, tmp_path, "apply", "-f", str(MANIFESTS), *validate)
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout + again.stderr

    # The CE pod's view: its service account's token, the cluster CA, its namespace.
    env = sim.write_service_account(str(tmp_path / "sa"), namespace=NS, account="podgahp-ce")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = yaml.safe_load(kubectl(sim, tmp_path, "get", "configmap", "podgahp-ce-config", "-o", "yaml").stdout)
    knobs = dict(line.split(" = ", 1) for line in config["data"]["99-podgahp-in-cluster.conf"].splitlines()
                 if " = " in line and not line.startswith("#"))
    knobs = {k: v for k, v in knobs.items() if v}
    knobs.update(PODGAHP_K8S_SERVICE_ACCOUNT_DIR=str(tmp_path / "sa"), PODGAHP_K8S_CE_NAME="ce.test",
                 PODGAHP_K8S_REAP_INTERVAL_SECONDS="0")
    backend = KubernetesBackend.from_knobs(Knobs(knobs))
    try:
        backend.ping()
        exe = tmp_path / "pilot.sh"
        exe.write_text("#!/bin/sh\n")
        job = PilotJob(executable=str(exe), iwd=str(tmp_path), sandbox_id="ce_1.0_1", memory_mb=64)
        job_id = backend.submit(job)
        assert job_id.startswith(f"k8s/{NS}/")
        sim.wait_for(lambda: backend.status(job_id).phase is Phase.COMPLETED, 30, "the pilot completed")
        assert not [r for r in sim.requests() if r.status == 403]
        # Without the binding, the same identity may do nothing, and ping says what is missing.
        assert kubectl(sim, tmp_path, "delete", "rolebinding", "podgahp-ce").returncode == 0
        with pytest.raises(BackendError, match="may not create pods"):
            backend.ping()
    finally:
        backend.close()
