"""Knobs of the Kubernetes backend: defaults, per-queue fallback, errors naming knob and value, and
the packaged defaults file documenting every knob."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Optional

import pytest

from gahp.backends.k8s import settings as k8s_settings
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.core.config import Knobs
from gahp.core.errors import ConfigError
from paths import REPO

CONFIG = REPO / "condor_config.d"


def test_defaults_give_one_default_queue() -> None:
    settings = KubernetesSettings.from_knobs(Knobs({"FULL_HOSTNAME": "ce.example.org"}))
    queue = settings.queue(None)
    assert list(settings.queues) == ["default"] and settings.ce_name == "ce.example.org"
    assert (queue.kubeconfig, queue.namespace, queue.max_pods, queue.unschedulable_timeout_s) == (None, None, 0, 3600)
    assert queue.limits == ("cpu", "memory", "ephemeral-storage") and queue.workdir == "/pilot"
    assert settings.secret_max_bytes == 1048576 and settings.retries == 3


def test_queue_knobs_fall_back_to_global_ones() -> None:
    settings = KubernetesSettings.from_knobs(Knobs({
        "PODGAHP_K8S_QUEUES": "cpu, GPU", "PODGAHP_K8S_NAMESPACE": "pilots",
        "PODGAHP_K8S_GPU_NAMESPACE": "gpu-pilots", "PODGAHP_K8S_GPU_MAX_PODS": "5",
        "PODGAHP_K8S_LIMITS": "none", "PODGAHP_K8S_DEFAULT_QUEUE": "gpu"}))
    assert settings.queue("cpu").namespace == "pilots" and settings.queue("cpu").max_pods == 0
    assert settings.queue("gpu").namespace == "gpu-pilots" and settings.queue("Gpu").max_pods == 5
    assert settings.queue(None).name == "GPU" and settings.queue("cpu").limits == ()
    with pytest.raises(ConfigError, match="queue 'short' is not configured"):
        settings.queue("short")


@pytest.mark.parametrize("knobs, message", [
    ({"PODGAHP_K8S_QUEUES": "cpu", "PODGAHP_K8S_DEFAULT_QUEUE": "gpu"}, "PODGAHP_K8S_DEFAULT_QUEUE = 'gpu'"),
    ({"PODGAHP_K8S_QUEUES": "cpu-1"}, "queue name 'cpu-1'"),
    ({"PODGAHP_K8S_QUEUES": "a a"}, "listed twice"),
    ({"PODGAHP_K8S_LIMITS": "cpu, gpu"}, "PODGAHP_K8S_LIMITS"),
    ({"PODGAHP_K8S_QUEUES": "q", "PODGAHP_K8S_Q_DISRUPTION_ACTION": "ignore"},
     "PODGAHP_K8S_Q_DISRUPTION_ACTION = 'ignore'"),
    ({"PODGAHP_K8S_MAX_PODS": "many"}, "PODGAHP_K8S_MAX_PODS = 'many' is not an integer"),
    ({"PODGAHP_K8S_WORKDIR": "pilot"}, "PODGAHP_K8S_WORKDIR = 'pilot'"),
    ({"PODGAHP_K8S_NAMESPACE": "Pilots"}, "PODGAHP_K8S_NAMESPACE = 'Pilots'"),
    ({"PODGAHP_K8S_CPU_REQUEST_PERCENT": "150"}, "PODGAHP_K8S_CPU_REQUEST_PERCENT = 150"),
    ({"PODGAHP_K8S_SECRET_MAX_BYTES": "2000000"}, "PODGAHP_K8S_SECRET_MAX_BYTES"),
], ids=["default-queue", "queue-name", "duplicate", "limits", "disruption", "integer", "workdir",
        "namespace", "percent", "secret-size"])
def test_bad_knobs_name_knob_and_value(knobs: Dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        KubernetesSettings.from_knobs(Knobs(knobs))


def _knobs_read() -> set:
    source = Path(k8s_settings.__file__).read_text()
    found = {"PODGAHP_K8S_" + n for n in re.findall(r'PREFIX \+ "([A-Z_]+)"', source)}
    found |= {"PODGAHP_K8S_" + n for n in re.findall(r'q\.(?:optional|string|integer|names|name)\("([A-Z_]+)"',
                                                      source)}
    return found


def test_every_knob_is_in_the_defaults_and_admin_files() -> None:
    defaults = (CONFIG / "20-podgahp-k8s-defaults.conf").read_text()
    admin = (CONFIG / "20-podgahp-k8s.conf").read_text()
    knobs = _knobs_read()
    assert len(knobs) >= 25
    for knob in knobs:
        assert re.search(rf"^{knob} =", defaults, re.M), f"{knob} missing from the defaults file"
        assert re.search(rf"^# {knob} =", admin, re.M), f"{knob} missing from the admin file"
    documented = set(re.findall(r"^(PODGAHP_K8S_[A-Z_]+) =", defaults, re.M))
    assert documented == knobs, documented ^ knobs


@pytest.mark.parametrize("queues, queue, problem", [
    (None, "gpu", None),  # the configuration read does not say: nothing to report
    ("cpu, gpu", "GPU", None),
    ("cpu", None, None),  # no Queue: the default queue serves it
    ("cpu", "gpu", "queue 'gpu' is not configured: PODGAHP_K8S_QUEUES lists cpu"),
    ("", "cpu", "queue 'cpu' is not configured: PODGAHP_K8S_QUEUES lists default"),
], ids=["unknown", "listed", "default-queue", "missing", "implicit-only"])
def test_routes_check_learns_which_queues_would_hold_a_pilot(queues: Optional[str], queue: Optional[str],
                                                             problem: Optional[str]) -> None:
    from gahp.backends.k8s.backend import KubernetesBackend

    knobs = {} if queues is None else {"PODGAHP_K8S_QUEUES": queues}
    assert KubernetesBackend.queue_problem(queue, knobs.get) == problem
