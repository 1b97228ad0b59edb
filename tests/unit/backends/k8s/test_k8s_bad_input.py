"""Bad and hostile input to the real ``k8s_gahp`` against the simulated cluster: every row ends in an
error result a user or admin can act on (never "internal error", never a traceback), with the GAHP's
memory under 300 MB."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from podgahp_sim.k8s import KubeSim, SimConfig
from gahp_driver import GahpProcess, gahp_env, script

pytestmark = pytest.mark.both_engines

MEMORY_BOUND_KB = 300 * 1024
NS = "pilots"


def ad(iwd: Path, **attrs: str) -> str:
    base = {"Cmd": f'"{iwd}/pilot.sh"', "Iwd": f'"{iwd}"', "JobDirectory": '"home_bl_ce_1.0_1"',
            "gridtype": '"k8s"', "GridResource": '"batch k8s"', "RequestMemory": "64"}
    base.update(attrs)
    return "[ " + "; ".join(f"{k} = {v}" for k, v in base.items() if v) + " ]"


def rows(iwd: Path) -> List[Tuple[str, str, str, str]]:
    """(id, command, argument, expected text in the error)."""
    big = iwd / "big"
    with open(big, "wb") as f:
        f.truncate(2 * 1024 ** 3)
    os.mkfifo(iwd / "fifo")
    (iwd / "dir").mkdir()
    return [
        ("malformed-ad", "BLAH_JOB_SUBMIT", "[ Cmd = ", "not a valid ClassAd"),
        ("not-an-ad", "BLAH_JOB_SUBMIT", "garbage", "not a valid ClassAd"),
        ("many-operators", "BLAH_JOB_SUBMIT", "[ A = " + "+".join(["1"] * 6000) + " ]", "operators outside strings"),
        ("relative-iwd", "BLAH_JOB_SUBMIT", ad(iwd, Iwd='"relative"'), "is not an absolute path"),
        ("no-jobdirectory", "BLAH_JOB_SUBMIT", ad(iwd, JobDirectory=""), "JobDirectory"),
        ("iwd-not-a-string", "BLAH_JOB_SUBMIT", ad(iwd, Iwd="5"), "is not a string"),
        ("input-2GB", "BLAH_JOB_SUBMIT", ad(iwd, TransferInput=f'"{big}"'), "exceed the Kubernetes Secret size limit"),
        ("input-dev-zero", "BLAH_JOB_SUBMIT", ad(iwd, TransferInput='"/dev/zero"'), "is a character device"),
        ("input-fifo", "BLAH_JOB_SUBMIT", ad(iwd, TransferInput=f'"{iwd}/fifo"'), "is a FIFO"),
        ("input-directory", "BLAH_JOB_SUBMIT", ad(iwd, TransferInput=f'"{iwd}/dir"'), "is a directory"),
        ("input-missing", "BLAH_JOB_SUBMIT", ad(iwd, TransferInput='"/nonexistent"'), "cannot be read"),
        ("stdin-dev-zero", "BLAH_JOB_SUBMIT", ad(iwd, In='"/dev/zero"'), "is a character device"),
        ("proxy-fifo", "BLAH_JOB_SUBMIT", ad(iwd, x509userproxy=f'"{iwd}/fifo"'), "is a FIFO"),
        ("input-url", "BLAH_JOB_SUBMIT", ad(iwd, TransferInput='"https://example.org/x"'), "is a URL"),
        ("image-override", "BLAH_JOB_SUBMIT", ad(iwd, CERequirements='k8s_image == "evil/miner"'),
         "ALLOWED_IMAGES"),
        ("too-many-cores", "BLAH_JOB_SUBMIT", ad(iwd, CERequirements="RequestCpus == 64"), "MAX_CPUS"),
        ("gpus", "BLAH_JOB_SUBMIT", ad(iwd, GPUNumber="2"), "MAX_GPUS"),
        ("job-id-dot", "BLAH_JOB_CANCEL", f"k8s/{NS}/.", "job id"),
        ("job-id-dotdot", "BLAH_JOB_STATUS", f"k8s/{NS}/..", "job id"),
        ("job-id-foreign", "BLAH_JOB_CANCEL", f"k8s/{NS}/site-db", "not the name of a pod podgahp creates"),
        ("job-id-binary", "BLAH_JOB_STATUS", "k8s/\x7f\u00e9/\x01", "job id"),
        ("proxy-refresh-zero", "BLAH_JOB_REFRESH_PROXY", f"k8s/{NS}/pilot-00000000000000000000-1",
         "proxy /dev/zero is a character device"),
    ]


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(SimConfig(namespaces=(NS,), tick_seconds=0.05)) as running:
        yield running


def start(sim: KubeSim, tmp_path: Path, **knobs: str) -> GahpProcess:
    kubeconfig = sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NS)
    env = gahp_env(str(tmp_path), PODGAHP_K8S_KUBECONFIG=kubeconfig, PODGAHP_K8S_IMAGE="registry.example/pilot:1",
                   PODGAHP_K8S_CE_NAME="ce.test", PODGAHP_K8S_REAP_INTERVAL_SECONDS="0", **knobs)
    gahp = GahpProcess([script("k8s_gahp")], env=env, cwd=str(tmp_path))
    gahp.start()
    return gahp


def peak_kb(gahp: GahpProcess) -> int:
    status = Path(f"/proc/{gahp.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def check(result: List[str], expected: str) -> None:
    assert result[0] == "1", result
    assert expected in result[1], result
    assert "internal error" not in result[1] and "Traceback" not in result[1], result


@pytest.mark.timeout(120)
def test_every_bad_input_is_a_clear_error_in_bounded_memory(sim: KubeSim, tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    (iwd / "pilot.sh").write_text("#!/bin/sh\n")
    table = rows(iwd)
    gahp = start(sim, tmp_path)
    try:
        for number, (_, command, argument, _) in enumerate(table, 2):
            extra = ["/dev/zero"] if command == "BLAH_JOB_REFRESH_PROXY" else []
            assert gahp.command(command, str(number), argument, *extra) == ["S"]
        results = gahp.wait_results([str(n) for n in range(2, len(table) + 2)], timeout=60)
        memory = peak_kb(gahp)
    finally:
        gahp.close()
    failures: Dict[str, str] = {}
    for number, (name, _, _, expected) in enumerate(table, 2):
        try:
            check(results[str(number)], expected)
        except AssertionError as e:
            failures[name] = str(e)
    assert failures == {}
    assert memory < MEMORY_BOUND_KB, memory
    assert sim.pods() == []


@pytest.mark.parametrize("knobs,expected", [
    ({"PODGAHP_K8S_POD_TEMPLATE": "TEMPLATE:spec: {containers: [{name: pilot, resources: big}]}"},
     "spec.containers[0].resources: expected a mapping"),
    ({"PODGAHP_K8S_POD_TEMPLATE": "TEMPLATE:spec: {volumes: x, containers: [{name: pilot}]}"},
     "spec.volumes: expected a list"),
    ({"PODGAHP_K8S_POD_TEMPLATE": "TEMPLATE:[not, a, pod]"}, "is not a YAML mapping"),
    ({"PODGAHP_K8S_REQUEST_TIMEOUT_SECONDS": "inf"}, "is not a finite number"),
    ({"PODGAHP_REQUEST_TIMEOUT_SECONDS": "nan"}, "is not a finite number"),
    ({"PODGAHP_K8S_RETRIES": "1e9"}, "is not an integer"),
], ids=["template-resources", "template-volumes", "template-not-a-pod", "knob-inf", "knob-nan", "knob-float"])
@pytest.mark.timeout(60)
def test_bad_templates_and_knobs_are_named(sim: KubeSim, tmp_path: Path, knobs: Dict[str, str],
                                           expected: str) -> None:
    for key, value in list(knobs.items()):
        if value.startswith("TEMPLATE:"):
            path = tmp_path / "pod.yaml"
            path.write_text(value[len("TEMPLATE:"):])
            knobs[key] = str(path)
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    (iwd / "pilot.sh").write_text("#!/bin/sh\n")
    gahp = start(sim, tmp_path, **knobs)
    try:
        assert gahp.command("BLAH_JOB_SUBMIT", "2", ad(iwd)) == ["S"]
        assert gahp.command("BLAH_PING", "3", "k8s") == ["S"]
        results = gahp.wait_results(["2", "3"], timeout=30)
    finally:
        gahp.close()
    for rid in ("2", "3"):
        check(results[rid], expected)


