"""The predicted GAHP submit ad of a routed job, the built-in samples and the shipped routes.
The tools themselves run in tests/live/test_routes_offline.py."""

from __future__ import annotations

from pathlib import Path

import classad2
import pytest

from gahp import routes
from gahp.routes import (CE_ROUTER_EMULATION, CE_ROUTER_ENV, SAMPLES, gahp_view, grid_type,
                         predict_submit_ad)

REPO = Path(__file__).resolve().parent.parent.parent


def routed(text: str) -> classad2.ClassAd:
    """A routed job ad from long-form lines."""
    return classad2.parseOne(text, classad2.ParserType.Old)


#: The 8-core GPU pilot after the K8s_Gpu route and the CE's transforms, as
#: condor_job_router_info -route-jobs printed it on 25.14.1 (trimmed).
GPU_ROUTED = """\
Args = "-v"
BatchQueue = "gpu"
BatchRuntime = 172800
CERequirements = "RequestCpus,RequestDisk,CondorCE"
Cmd = "pilot.sh"
CondorCE = 1
Environment = ""
Err = "pilot.err"
GridResource = "batch k8s"
In = "/dev/null"
Iwd = "/home/pilot"
JobUniverse = 9
Out = "pilot.out"
Owner = "pilot"
Remote_JobUniverse = 5
RequestCpus = 8
RequestDisk = DiskUsage * 2
DiskUsage = 10000000
RequestGPUs = 1
RequestMemory = maxMemory
RouteName = "K8s_Gpu"
default_CERequirements = "RequestCpus,RequestDisk"
maxMemory = 16000
remote_NodeNumber = 8
remote_SMPGranularity = 8
xcount = 8
"""


def test_the_gpu_pilot_as_podgahp_sees_it() -> None:
    text, job = gahp_view(routed(GPU_ROUTED), "ce_1.0")
    assert job.cpus == 8 and job.memory_mb == 16000 and job.gpus == 1 and job.disk_kb == 20000000
    assert job.queue == "gpu" and job.wall_time_s == 172800 and job.grid_type == "k8s"
    assert job.settings == {"condorce": 1}
    assert job.executable == "/home/pilot/pilot.sh"
    assert job.sandbox_id == "ce_1.0" and job.arguments == ("-v",)
    submit = classad2.parseOne(text)
    # Evaluated and copied as literals; what is not in the list stays behind.
    assert str(submit.lookup("RequestMemory")) == "16000"
    assert str(submit.lookup("CERequirements")) == "RequestCpus == 8 && RequestDisk == 20000000 && CondorCE == 1"
    assert "RequestCpus" not in submit and "RequestGPUs" not in submit and "Owner" not in submit
    assert submit["JobUniverse"] == 5 and submit["NodeNumber"] == 8 and submit["SMPGranularity"] == 8


@pytest.mark.parametrize("extra, expected", [
    ('CERequirements = "RequestCpus RequestDisk, k8s_image"\nk8s_image = "img:1"\nRequestCpus = 2\nRequestDisk = 5',
     'RequestCpus == 2 && RequestDisk == 5 && k8s_image == "img:1"'),
    ('CERequirements = "RequestCpus,Missing"\nRequestCpus = 2', "RequestCpus == 2 && Missing == undefined"),
    ('CERequirements = [ k8s_namespace = "pilots"; RequestCpus = 1 + 1 ]', None),
    ("CERequirements = RequestCpus > 1\nRequestCpus = 2", "RequestCpus > 1"),
], ids=["string-list", "undefined-name", "nested-ad", "other-expression-forwarded"])
def test_ce_requirements_as_the_gridmanager_builds_them(extra: str, expected: str) -> None:
    ad = predict_submit_ad(routed('Cmd = "/bin/p"\nIwd = "/h"\n' + extra), "s")
    text = str(ad.lookup("CERequirements"))
    if expected is None:  # member order of a nested ad is the ad's own
        assert sorted(text.split(" && ")) == ['RequestCpus == 2', 'k8s_namespace == "pilots"']
    else:
        assert text == expected


def test_queue_gpus_iwd_and_remote_attributes() -> None:
    ad = predict_submit_ad(routed(
        'Cmd = "/bin/p"\nIwd = "/h"\nRemoteIwd = "/remote"\nBatchQueue = ""\nRequestGPUs = 0\n'
        'x509userproxy = "proxy"\nArgs = "a"\nArguments = "b"\nEnvironment = "A=1"\n'
        'REMOTE_Arguments = strcat("x", "y")\nremote_Environment = "B=2"\nRemote_JobUniverse = 5\n'
        'GridResource = "batch lancium"'), "s")
    assert "Queue" not in ad and "GPUNumber" not in ad  # empty queue and zero GPUs are not sent
    assert ad["Iwd"] == "/remote" and ad["x509userproxy"] == "/remote/proxy"
    assert ad["gridtype"] == "lancium" and ad["JobDirectory"] == "home_bl_s"
    assert "Args" not in ad  # any REMOTE_ argument attribute clears both argument forms
    assert str(ad.lookup("Arguments")) == 'strcat("x","y")'  # copied unevaluated
    assert ad["Environment"] == "B=2" and ad["JobUniverse"] == 5

    ad = predict_submit_ad(routed('Cmd = "/bin/p"\nIwd = "/h"\nBatchQueue = "cpu"\nRequestGPUs = 2'), "s")
    assert ad["Queue"] == "cpu" and ad["GPUNumber"] == 2


@pytest.mark.parametrize("resource, expected", [
    ("batch k8s", ("k8s", [])),
    ("batch LANCIUM", ("lancium", [])),
    ("batch k8s user@host", ("k8s", ["user@host"])),
    ("pbs", ("pbs", [])),
], ids=["k8s", "case", "remote-mode", "no-batch-prefix"])
def test_grid_type(resource: str, expected: tuple) -> None:
    assert grid_type(resource) == expected


def test_samples_carry_what_the_router_needs() -> None:
    ads = list(classad2.parseAds(routes.samples_text(), classad2.ParserType.Old))
    assert len(ads) == len(SAMPLES) == 7
    for ad in ads:
        for name in ("Owner", "JobStatus", "ProcId", "ClusterId", "JobUniverse", "Requirements", "Iwd", "Cmd"):
            assert name in ad
        assert ad["JobUniverse"] == 5 and ad["JobStatus"] == 1
    assert len({ad["ClusterId"] for ad in ads}) == 7
    assert [ad.get("Environment") for ad in ads].count("PILOT_GROUP=atlas") == 1  # not twice in one ad


def test_the_emulation_is_the_pool_file() -> None:
    pool = REPO / "ce-config/standalone/config.d/01-ce-router-defaults.conf"
    assert pool.resolve() == CE_ROUTER_EMULATION and CE_ROUTER_EMULATION.is_file()
    env = REPO / "ce-config/standalone/ce-router-env.conf"
    assert env.resolve() == CE_ROUTER_ENV and CE_ROUTER_ENV.is_file()


@pytest.mark.parametrize("data,message", [(b"\x7fELF\x00\x01", "not a routes file"),
                                          (b"JOB_ROUTER_ENTRIES = \xff\xfe", "not UTF-8 text")])
def test_convert_of_a_binary_file_is_one_clear_line(tmp_path: Path, data: bytes, message: str) -> None:
    import subprocess
    import sys as system

    path = tmp_path / "bin.conf"
    path.write_bytes(data)
    podgahp = str(Path(system.executable).parent / "podgahp")
    proc = subprocess.run([podgahp, "routes", "convert", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
