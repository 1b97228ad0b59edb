"""Helpers for the ``test_k8s_*`` files: knobs for a backend, pilot jobs with real files to stage,
waiting for a state, the pod of a job. The fixtures (a simulated cluster with fast clocks, a
kubeconfig for it, backends built from knobs) are in ``conftest.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

from gahp.agent import Agent
from gahp.core.job import PilotJob
from gahp.core.jobstate import JobState, Phase
from podgahp_sim.k8s import KubeSim
from polling import wait_until

NAMESPACE = "pilots"
IMAGE = "registry.example/pilot:1.0"
BackendFactory = Callable[..., Agent]
"""Builds a Kubernetes backend from knobs, inside its agent (what the GAHP serves)."""


def knobs_for(kubeconfig: str, **extra: str) -> Dict[str, str]:
    """Knobs of a backend of the cluster of ``kubeconfig``; its state (job records, black-hole state,
    figures) next to the kubeconfig, the test's own."""
    knobs = {"PODGAHP_K8S_KUBECONFIG": kubeconfig, "PODGAHP_K8S_IMAGE": IMAGE,
             "PODGAHP_K8S_CE_NAME": "ce.test", "PODGAHP_K8S_BACKOFF_SECONDS": "0.05",
             "PODGAHP_K8S_BACKOFF_MAX_SECONDS": "0.2", "PODGAHP_K8S_REQUEST_TIMEOUT_SECONDS": "3",
             "PODGAHP_K8S_SYNC_TIMEOUT_SECONDS": "5", "PODGAHP_K8S_REAP_INTERVAL_SECONDS": "0",
             # Most backend tests ask for more than fits (64 cores) to keep a pod pending; the caps and
             # allow-lists themselves are tested with their defaults in test_k8s_policy.py.
             "PODGAHP_K8S_MAX_CPUS": "128", "PODGAHP_K8S_MAX_GPUS": "8",
             "PODGAHP_K8S_ALLOWED_IMAGES": "*", "PODGAHP_K8S_ALLOWED_PRIORITY_CLASSES": "*"}
    if kubeconfig and "PODGAHP_STATE_DIR" not in extra:
        knobs["PODGAHP_STATE_DIR"] = os.path.join(os.path.dirname(kubeconfig), "state")
        os.makedirs(knobs["PODGAHP_STATE_DIR"], exist_ok=True)
    knobs.update(extra)
    return knobs


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


def wait_state(backend: Agent, job_id: str, *phases: Phase, timeout: float = 60.0) -> JobState:
    """Poll status until it is in ``phases``; fails with the last state seen."""
    return wait_until(lambda: backend.status(job_id), f"{job_id} in {phases}", timeout, 0.05,
                      done=lambda state: state.phase in phases)


def pod_of(sim: KubeSim, job_id: str) -> Optional[Dict[str, object]]:
    _, namespace, name = job_id.split("/")
    return sim.pod(namespace, name)
