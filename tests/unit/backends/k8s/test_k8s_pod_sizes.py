"""A pod built from a job's own values (Arguments, Environment, the paths recorded in annotations) is
checked against the sizes a real API server refuses before it is sent: a job over them is held with a
reason naming what is too large, and the cluster sees no request; a large pod within them is created
(the simulated API server enforces the same limits: tests/sim/k8s/test_k8s_limits.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict

import pytest

from gahp.backends.k8s.limits import MAX_STORED_BYTES, check_pod, stored_bytes
from gahp.core.errors import InvalidJob
from podgahp_sim.k8s import KubeSim

from k8s_helpers import BackendFactory, make_job

pytestmark = pytest.mark.both_engines

MIB = 1024 * 1024


@pytest.mark.parametrize("fields, reason", [
    ({"arguments": ("x" * (3 * MIB + 100),)},
     r"the pod would take \d+ bytes, over the 3145728 the Kubernetes API accepts in one request \(the job's "
     r"Arguments take 3145828 bytes, its Environment 0 variables in 0 bytes\); pass large data in an input file"),
    ({"arguments": ("x" * (2 * MIB),)},
     r"the pod would take up to \d+ bytes as stored, over the 1572864 etcd keeps per object \(the job's "
     r"Arguments take 2097152 bytes"),
    ({"environment": tuple((f"V{i}", "x" * 10) for i in range(20000))},
     r"as stored, over the 1572864 etcd keeps per object \(the job's Arguments take \d+ bytes, its Environment "
     r"20000 variables in \d+ bytes\)"),
    ({"stdout": "/tmp/" + "o" * (200 * 1024), "stderr": "/tmp/" + "e" * (100 * 1024)},
     r"the pod's annotations would take \d+ bytes, over the 262144 Kubernetes allows an object in all: they "
     r"record the job's Iwd, Cmd, Out and Err paths"),
], ids=["arguments-over-the-body-limit", "arguments-over-etcd", "many-variables-over-etcd", "long-paths"])
@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_a_pod_over_the_api_servers_limits_is_held_before_any_request(
        make_backend: BackendFactory, sim: KubeSim, tmp_path: Path, fields: Dict[str, Any], reason: str) -> None:
    backend = make_backend()
    sim.clear_requests()
    with pytest.raises(InvalidJob, match=reason):
        backend.submit(make_job(tmp_path, **fields))
    assert not sim.requests("POST") and not sim.pods("pilots")


def test_a_large_pod_within_the_limits_is_created(make_backend: BackendFactory, sim: KubeSim,
                                                  tmp_path: Path) -> None:
    backend = make_backend()
    job = backend.submit(make_job(tmp_path, arguments=("a" * MIB,),
                                  environment=tuple((f"V{i}", "x" * 20) for i in range(1000))))
    pod = sim.pod(job.split("/")[1], job.split("/")[2])
    assert pod is not None and pod["spec"]["containers"][0]["args"] == ["a" * MIB]


def test_the_stored_size_estimate_is_never_below_the_json() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "b"}]}]}}
    assert stored_bytes(pod) > len(str(pod))
    check_pod(pod, "")
    many = {"spec": {"containers": [{"name": "c", "env": [{"name": f"V{i}", "value": ""} for i in range(30000)]}]}}
    assert stored_bytes(many) > MAX_STORED_BYTES


@pytest.mark.parametrize("entries", [1, 100, 5000, 20000])
@pytest.mark.parametrize("value_bytes", [0, 20, 200])
def test_the_estimate_covers_what_the_api_server_stores(sim: KubeSim, make_backend: BackendFactory, tmp_path: Path,
                                                        entries: int, value_bytes: int) -> None:
    """What the simulated API server counts for a pod as stored (defaults, status and managedFields
    added) never exceeds the GAHP's estimate: a pod the GAHP lets through is never refused for its size."""
    from gahp.backends.k8s.spec import build_pod, load_template
    from podgahp_sim.k8s import admission, limits as server_limits

    backend = make_backend()
    queue = backend.backend.settings.queue(None)
    job = make_job(tmp_path, environment=tuple((f"VARIABLE_{i}", "x" * value_bytes) for i in range(entries)))
    try:
        pod = build_pod(job, queue, load_template(None), name="pilot-0123456789abcdef0123-1", namespace="pilots",
                        ce_name="ce.test", generation=1, user="pilot", staged=[])
    except InvalidJob:
        return  # refused before sending: nothing to compare
    estimate = stored_bytes(pod)
    stored = copy.deepcopy(pod)
    stored["metadata"].update(uid="0" * 36, resourceVersion="123456", creationTimestamp="2026-11-24T12:00:00Z",
                              generation=1)
    admission.default_pod(stored, "abcde", 300)
    stored["status"] = {"phase": "Pending", "qosClass": admission.qos_class(stored)}
    assert server_limits.stored_size(stored) <= estimate


@pytest.mark.simulator_only("edits the simulator's state directly")
def test_inputs_of_a_full_mebibyte_fit_in_the_secret(make_backend: BackendFactory, sim: KubeSim,
                                                     tmp_path: Path) -> None:
    """Staged inputs are checked against the Secret limit (1 MiB of data) when staged; a Secret holding
    exactly that much is stored by the API server (as etcd keeps it: under 1.5 MiB)."""
    exe = tmp_path / "glidein_startup.sh"
    exe.write_text("#!/bin/sh\necho pilot\n")
    data = tmp_path / "data.bin"
    data.write_bytes(b"d" * (MIB - exe.stat().st_size))
    backend = make_backend()
    job = backend.submit(make_job(tmp_path, transfer_input=(str(data),)))
    secret = sim.store.get("secrets", "pilots", job.split("/")[2])
    assert secret is not None and len(secret["data"]) == 2
    data.write_bytes(b"d" * (MIB - exe.stat().st_size + 1))
    with pytest.raises(InvalidJob, match="exceed the Kubernetes Secret size limit"):
        backend.submit(make_job(tmp_path, sandbox="ce.test_host_2.0_1", transfer_input=(str(data),)))
