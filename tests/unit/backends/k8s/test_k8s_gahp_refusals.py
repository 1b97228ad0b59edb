"""The real ``k8s_gahp`` over pipes, as the gridmanager speaks to it, where the cluster refuses: a delete
the API server does not carry out is a failed cancel (the gridmanager keeps the job and asks again), and
a pod the API server would refuse for its size is a failed submit naming what is too large, sent never."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from gahp_driver import GahpProcess, gahp_env, script
from podgahp_sim.k8s import KubeSim, SimConfig
from polling import wait_until

pytestmark = pytest.mark.both_engines

NS = "pilots"
MIB = 1024 * 1024


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(SimConfig(namespaces=(NS,), tick_seconds=0.05)) as running:
        yield running


@pytest.fixture
def gahp(sim: KubeSim, tmp_path: Path) -> Iterator[GahpProcess]:
    kubeconfig = sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NS)
    env = gahp_env(str(tmp_path), PODGAHP_K8S_KUBECONFIG=kubeconfig, PODGAHP_K8S_IMAGE="registry.example/pilot:1",
                   PODGAHP_K8S_CE_NAME="ce.test", PODGAHP_K8S_REAP_INTERVAL_SECONDS="0",
                   PODGAHP_STATE_DIR=str(tmp_path / "state"))
    os.mkdir(tmp_path / "state")
    process = GahpProcess([script("k8s_gahp")], env=env, cwd=str(tmp_path))
    process.start()
    yield process
    assert process.close() == 0


def submit_ad(iwd: Path, **attrs: str) -> str:
    iwd.mkdir(exist_ok=True)
    (iwd / "pilot.sh").write_text("#!/bin/sh\necho pilot\n")
    base = {"Cmd": f'"{iwd}/pilot.sh"', "Iwd": f'"{iwd}"', "JobDirectory": '"home_bl_ce.test_1.0_1700000000"',
            "gridtype": '"k8s"', "GridResource": '"batch k8s"', "RequestMemory": "64"}
    base.update(attrs)
    return "[ " + "; ".join(f"{k} = {v}" for k, v in base.items()) + " ]"


def pod_of(sim: KubeSim, job_id: str) -> object:
    return sim.pod(NS, job_id.split("/")[2])


@pytest.mark.simulator_only("injects API faults (errors, latency, dropped or expired watches)")
def test_a_delete_the_api_server_refuses_is_a_failed_cancel(gahp: GahpProcess, sim: KubeSim,
                                                            tmp_path: Path) -> None:
    rc, err, job_id = gahp.request("BLAH_JOB_SUBMIT", submit_ad(tmp_path / "iwd",
                                                                Environment='"PODGAHP_SIM_RUN_SECONDS=600"'))
    assert (rc, err) == ("0", "NULL"), err
    wait_until(lambda: gahp.request("BLAH_JOB_STATUS", job_id), "the pod running", 30, 0.05,
               done=lambda fields: fields[:3] == ["0", "NULL", "2"])
    fault = sim.fail_next(count=100000, status=503, method="DELETE", path="/pods/")
    rc, err = gahp.request("BLAH_JOB_CANCEL", job_id, timeout=60)
    assert rc != "0" and "HTTP 503" in err, (rc, err)
    assert fault.hits >= 1
    pod = pod_of(sim, job_id)
    assert isinstance(pod, dict) and not pod["metadata"].get("deletionTimestamp")
    sim.clear_faults()
    wait_until(lambda: gahp.request("BLAH_JOB_CANCEL", job_id), "the cancel done once the API server recovered",
               30, 0.1, done=lambda fields: fields == ["0", "NULL"])
    pod = pod_of(sim, job_id)
    assert pod is None or isinstance(pod, dict) and pod["metadata"].get("deletionTimestamp")


@pytest.mark.parametrize("attrs, words", [
    ({"Arguments": '"' + "x" * (3 * MIB + 100) + '"'}, "the Kubernetes API accepts in one request"),
    ({"Arguments": '"' + "x" * (2 * MIB) + '"'}, "etcd keeps per object"),
], ids=["over-the-request-limit", "over-what-etcd-keeps"])
@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_a_pod_too_large_for_the_api_server_is_a_failed_submit_never_sent(
        gahp: GahpProcess, sim: KubeSim, tmp_path: Path, attrs: dict, words: str) -> None:
    sim.clear_requests()
    result = gahp.request("BLAH_JOB_SUBMIT", submit_ad(tmp_path / "iwd", **attrs), timeout=60)
    assert result[0] == "1" and words in result[1] and "Traceback" not in result[1], result[:2]
    assert not sim.requests("POST") and not sim.pods(NS)
