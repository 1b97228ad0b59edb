"""Fixtures of the ``test_k8s_*`` files: a cluster (the simulated one with fast clocks, or for a test
marked ``both_engines`` also the real control plane, tests/engines.py), a kubeconfig for it, the
namespace the backends use, and Kubernetes backends built from knobs, each inside its agent (closed after the test)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.core.config import Knobs
from factories import made_then_ended
from k8s_helpers import NAMESPACE, BackendFactory, knobs_for
from podgahp_sim.k8s import KubeSim, SimConfig


@pytest.fixture
def sim(engine: str, request: pytest.FixtureRequest) -> Iterator[KubeSim]:
    """The cluster: a ``KubeSim``, or on the real engine a ``RealEngine`` (its reads are KubeSim's)."""
    if engine == "real":
        yield request.getfixturevalue("real_engine")
        return
    config = SimConfig(namespaces=("default", NAMESPACE), tick_seconds=0.05, run_seconds=0.5,
                       container_create_seconds=0.05, image_backoff_seconds=0.1, gc_seconds=0.1,
                       sigterm_exit_seconds=0.2)
    with KubeSim(config) as running:
        yield running


@pytest.fixture
def namespace(sim: KubeSim) -> str:
    """The namespace of the backends' kubeconfig: ``pilots`` on the simulator, the test's own on the real engine."""
    return str(getattr(sim, "namespace", NAMESPACE))


@pytest.fixture
def kubeconfig(sim: KubeSim, namespace: str, tmp_path: Path) -> str:
    return sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=namespace)


@pytest.fixture
def make_backend(kubeconfig: str) -> Iterator[BackendFactory]:
    """Build backends from knobs (keywords override); every one is closed afterwards."""
    yield from made_then_ended(
        lambda **extra: Agent(KubernetesBackend.from_knobs(Knobs(knobs_for(kubeconfig, **extra)))), Agent.close)


@pytest.fixture
def backend(make_backend: BackendFactory) -> Agent:
    return make_backend()
