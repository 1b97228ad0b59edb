"""The CE router defaults of ce-config/standalone, applied by the real condor_job_router_info.

Covers the transforms the end-to-end tests do not reach: tokens, the submitter's own on-exit
hold and wall time, GPUs, whole-node requests and the attributes Cleanup deletes.
"""

from __future__ import annotations

from typing import Callable, Dict

import classad2
import pytest

from harness import Pool

pytestmark = pytest.mark.live

ROUTE = """\
JOB_ROUTER_ROUTE_NAMES = K8s
JOB_ROUTER_ROUTE_K8s @=jrt
  GridResource = "batch k8s"
  SET default_CERequirements "RequestCpus,k8s_namespace"
  SET k8s_namespace "pilots"
  DEFAULT RequestGPUs 2
@jrt
"""

#: A source job in long ClassAd form, as condor_job_router_info -jobads reads it.
JOB = """\
ClusterId = 7
ProcId = 0
Owner = "pilot"
JobUniverse = 5
JobStatus = 1
Requirements = true
Cmd = "/bin/sleep"
RequestCpus = 1
RequestDisk = 1000
RequestMemory = 100
RequestGPUs = 0
AuthTokenSubject = "pilot@example"
OnExitHold = ExitCode =!= 0
OnExitHoldReason = "bad exit"
minWalltime = 10
BatchRuntime = 7200
Environment = "A=1"
WantWholeNode = true
PeriodicRemove = false
TotalSubmitProcs = 1
"""


def routed_ad(pool: Pool, job: str) -> Dict[str, str]:
    """Route `job` offline; returns the routed ad's attributes as unparsed expression text."""
    path = f"{pool.local_dir}/job.ad"
    pool.path(path).write_text(job)
    out = pool.run(["condor_job_router_info", "-route-jobs", "-", "-jobads", path]).stdout
    attrs: Dict[str, str] = {}
    for line in out.splitlines():
        name, sep, value = line.partition(" = ")
        if sep and name.strip() and " " not in name.strip():
            attrs[name.strip()] = value.strip()
    assert attrs.get("GridResource") == '"batch k8s"', out
    return attrs


def test_ce_router_defaults_transform_the_routed_job(make_pool: Callable[..., Pool]) -> None:
    pool = make_pool(extra_config=ROUTE)
    ad = routed_ad(pool, JOB)

    # Base, Cleanup, OrigRequests
    assert ad["RoutedJob"] == "true"
    assert "PeriodicRemove" not in ad and "TotalSubmitProcs" not in ad
    assert "AuthTokenSubject" not in ad and ad["orig_AuthTokenSubject"] == '"pilot@example"'
    assert ad["orig_BatchRuntime"] == "7200" and ad["orig_Environment"] == '"A=1"'
    assert ad["WholeNodes"] == "true"
    # Cpus, Gpus, Memory, Queue, BatchRuntime, CERequirements without CE attributes on the job
    assert ad["RequestCpus"] == "1"
    assert ad["remote_SMPGranularity"] == "1" and ad["remote_NodeNumber"] == "1"
    assert ad["RequestGPUs"] == "0"  # no CE default; DEFAULT keeps the job's own 0
    assert ad["RequestMemory"] == "2000"
    assert ad["BatchQueue"] == '""'
    assert ad["BatchRuntime"] == "7200"
    assert ad["CondorCE"] == "1"
    assert ad["CERequirements"] == '"RequestCpus,k8s_namespace,CondorCE"'

    # Env: the CE's collector joins the submitter's environment.
    env = ad["Environment"].strip('"')
    assert "A=1" in env.split() and any(v.startswith("CONDORCE_COLLECTOR_HOST=") for v in env.split()), env

    # OnExitHold keeps the submitter's own hold and adds the minWalltime check (subcode 42).
    names = ("OnExitHold", "orig_OnExitHold", "CondorCE_OnExitHold", "OnExitHoldSubcode",
             "CondorCE_OnExitHoldSubcode", "orig_OnExitHoldSubcode", "OnExitHoldReason",
             "CondorCE_OnExitHoldReason", "orig_OnExitHoldReason")
    hold = classad2.parseOne("[ " + "; ".join(f"{n} = {ad[n]}" for n in names if n in ad)
                             + "; minWalltime = 10; ExitCode = 0; RemoteWallClockTime = 0 ]")
    for wall, code, held, subcode in [(300, 0, True, 42), (900, 0, False, None), (900, 1, True, None)]:
        hold["RemoteWallClockTime"] = wall
        hold["ExitCode"] = code
        assert hold.eval("OnExitHold") is held, (wall, code)
        if subcode is not None:
            assert hold.eval("OnExitHoldSubcode") == subcode
            assert "minimum specified by the job (10)" in hold.eval("OnExitHoldReason")


def test_ce_attributes_of_the_job_win(make_pool: Callable[..., Pool]) -> None:
    pool = make_pool(extra_config=ROUTE)
    ad = routed_ad(pool, JOB + 'xcount = 8\nmaxMemory = 16000\nmaxWallTime = 30\nqueue = "gpu"\n')
    assert ad["RequestCpus"] == "8"
    assert ad["remote_SMPGranularity"] == "8" and ad["remote_NodeNumber"] == "8"
    assert ad["RequestMemory"] == "16000"
    assert ad["BatchRuntime"] == "1800"
    assert ad["BatchQueue"] == '"gpu"'
