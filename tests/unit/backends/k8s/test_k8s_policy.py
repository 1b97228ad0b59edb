"""What a job ad may override, with the shipped (safe) defaults: image and priority class only
where an admin allows patterns; cores, memory and GPUs capped per queue; every refusal names the knob."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from gahp.backends.k8s.spec import build_pod, check_limits, stage_inputs
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.core.config import Knobs
from gahp.core.errors import InvalidJob

from k8s_helpers import make_job

pytestmark = pytest.mark.both_engines

QUEUES = {"PODGAHP_K8S_QUEUES": "cpu gpu", "PODGAHP_K8S_IMAGE": "registry.example/pilot:1"}


def build(tmp_path: Path, queue: str = "cpu", knobs: Optional[Dict[str, str]] = None, **job: Any) -> Dict[str, Any]:
    settings = KubernetesSettings.from_knobs(Knobs({**QUEUES, **(knobs or {})}))
    q = settings.queue(queue)
    pilot = make_job(tmp_path, queue=queue, **job)
    return build_pod(pilot, q, {"spec": {"containers": [{"name": "pilot"}]}}, name="pilot-x-1", namespace="ns",
                     ce_name="ce", generation=1, user="alice", staged=stage_inputs(pilot, q, 10 ** 6))


@pytest.mark.parametrize("job,message", [
    (dict(settings={"k8s_image": "evil/miner"}),
     r"image 'evil/miner' .* not allowed in queue cpu; .*PODGAHP_K8S_CPU_ALLOWED_IMAGES.* \(empty: none allowed\)"),
    (dict(settings={"k8s_priority_class": "system-node-critical"}),
     r"priority class 'system-node-critical' .*PODGAHP_K8S_CPU_ALLOWED_PRIORITY_CLASSES"),
    (dict(cpus=16), r"asks for 16 cores; queue cpu allows at most 8 per pilot \(PODGAHP_K8S_CPU_MAX_CPUS"),
    (dict(memory_mb=65536), r"65536 MiB of memory; queue cpu allows at most 32768 .*MAX_MEMORY_MB"),
    (dict(gpus=1), r"asks for 1 GPUs; queue cpu allows at most 0 .*PODGAHP_K8S_CPU_MAX_GPUS"),
], ids=["image", "priority-class", "cores", "memory", "gpus"])
def test_defaults_refuse_what_a_job_ad_asks_for(tmp_path: Path, job: Dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        build(tmp_path, **job)


def test_the_hostile_gpu_miner_of_the_report(tmp_path: Path) -> None:
    # +remote_CERequirements = k8s_image == "evil/miner" && RequestCpus == 16, +remote_Queue = "gpu"
    knobs = {"PODGAHP_K8S_GPU_MAX_GPUS": "4"}
    with pytest.raises(InvalidJob, match="16 cores"):
        build(tmp_path, "gpu", knobs, cpus=16, settings={"k8s_image": "evil/miner"})
    with pytest.raises(InvalidJob, match="evil/miner"):
        build(tmp_path, "gpu", knobs, cpus=4, settings={"k8s_image": "evil/miner"})


def test_admin_allowances_per_queue(tmp_path: Path) -> None:
    knobs = {"PODGAHP_K8S_GPU_MAX_GPUS": "4", "PODGAHP_K8S_GPU_MAX_CPUS": "32",
             "PODGAHP_K8S_ALLOWED_IMAGES": "hub.opensciencegrid.org/osg/*",
             "PODGAHP_K8S_CPU_ALLOWED_PRIORITY_CLASSES": "podgahp-*"}
    pod = build(tmp_path, "gpu", knobs, cpus=32, gpus=4, settings={"k8s_image": "hub.opensciencegrid.org/osg/pilot:2"})
    container = pod["spec"]["containers"][0]
    assert container["image"] == "hub.opensciencegrid.org/osg/pilot:2"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert build(tmp_path, "cpu", knobs, settings={"k8s_priority_class": "podgahp-low"})["spec"][
        "priorityClassName"] == "podgahp-low"
    with pytest.raises(InvalidJob, match="GPUs; queue cpu allows at most 0"):
        build(tmp_path, "cpu", knobs, gpus=1)
    with pytest.raises(InvalidJob, match="priority class"):
        build(tmp_path, "gpu", knobs, settings={"k8s_priority_class": "podgahp-low"})


def test_within_the_caps(tmp_path: Path) -> None:
    settings = KubernetesSettings.from_knobs(Knobs(QUEUES))
    check_limits(make_job(tmp_path, cpus=8, memory_mb=32768), settings.queue("cpu"))
