"""Fixtures and helpers for the ``test_k8s_*`` files: a simulated cluster with fast clocks, a
kubeconfig for it, backends built from knobs, and pilot jobs with real files to stage.

Test files import the fixtures by name (``from k8s_helpers import ...``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from gahp.backends.k8s import KubernetesBackend
from gahp.config import Knobs
from gahp.job import JobState, Phase, PilotJob
from podgahp_sim.k8s import KubeSim, SimConfig

NAMESPACE = "pilots"
IMAGE = "registry.example/pilot:1.0"
BackendFactory = Callable[..., KubernetesBackend]


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    config = SimConfig(namespaces=("default", NAMESPACE), tick_seconds=0.05, run_seconds=0.5,
                       container_create_seconds=0.05, image_backoff_seconds=0.1, gc_seconds=0.1,
                       sigterm_exit_seconds=0.2)
    with KubeSim(config) as running:
        yield running


@pytest.fixture
def kubeconfig(sim: KubeSim, tmp_path: Path) -> str:
    return sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NAMESPACE)


def knobs_for(kubeconfig: str, **extra: str) -> Dict[str, str]:
    knobs = {"PODGAHP_K8S_KUBECONFIG": kubeconfig, "PODGAHP_K8S_IMAGE": IMAGE,
             "PODGAHP_K8S_CE_NAME": "ce.test", "PODGAHP_K8S_BACKOFF_SECONDS": "0.05",
             "PODGAHP_K8S_BACKOFF_MAX_SECONDS": "0.2", "PODGAHP_K8S_REQUEST_TIMEOUT_SECONDS": "3",
             "PODGAHP_K8S_SYNC_TIMEOUT_SECONDS": "5", "PODGAHP_K8S_REAP_INTERVAL_SECONDS": "0",
             # Most backend tests ask for more than fits (64 cores) to keep a pod pending; the caps and
             # allow-lists themselves are tested with their defaults in test_k8s_policy.py.
             "PODGAHP_K8S_MAX_CPUS": "128", "PODGAHP_K8S_MAX_GPUS": "8",
             "PODGAHP_K8S_ALLOWED_IMAGES": "*", "PODGAHP_K8S_ALLOWED_PRIORITY_CLASSES": "*"}
    knobs.update(extra)
    return knobs


@pytest.fixture
def make_backend(kubeconfig: str) -> Iterator[BackendFactory]:
    made: List[KubernetesBackend] = []

    def make(**extra: str) -> KubernetesBackend:
        backend = KubernetesBackend.from_knobs(Knobs(knobs_for(kubeconfig, **extra)))
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def backend(make_backend: BackendFactory) -> KubernetesBackend:
    return make_backend()


def make_job(tmp_path: Path, sandbox: str = "ce.test_host_1.0_1795297304",
             env: Sequence[Tuple[str, str]] = (), **fields: object) -> PilotJob:
    """A pilot whose executable exists under ``tmp_path``; ``env`` drives the simulated container."""
    exe = tmp_path / "glidein_startup.sh"
    if not exe.exists():
        exe.write_text("#!/bin/sh\necho pilot\n")
    values: Dict[str, object] = dict(
        executable=str(exe), iwd=str(tmp_path), sandbox_id=sandbox, arguments=("-v", "std"),
        environment=tuple(env), stdout=str(tmp_path / "pilot.out"), stderr=str(tmp_path / "pilot.err"),
        memory_mb=256)
    values.update(fields)
    return PilotJob(**values)  # type: ignore[arg-type]


def wait_state(backend: KubernetesBackend, job_id: str, *phases: Phase, timeout: float = 15.0) -> JobState:
    """Poll status until it is in ``phases``; fails with the last state seen."""
    deadline = time.monotonic() + timeout
    state: Optional[JobState] = None
    while time.monotonic() < deadline:
        state = backend.status(job_id)
        if state.phase in phases:
            return state
        time.sleep(0.05)
    raise AssertionError(f"{job_id} never reached {phases}; last state {state}")


def pod_of(sim: KubeSim, job_id: str) -> Optional[Dict[str, object]]:
    _, namespace, name = job_id.split("/")
    return sim.pod(namespace, name)
