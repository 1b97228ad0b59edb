"""A pilot submitted to the CE-like pool is routed to podgahp by the real JobRouter and gridmanager.

The pool is ce-config/standalone with route K8s (tests/live/conftest.py); K8S_GAHP runs
`podgahp gahp --backend memory`, whose pilots idle 1 s, run 2 s and complete.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List

import classad2
import pytest

from gahp.program import protocol

from harness import Pool

pytestmark = pytest.mark.live

#: A pilot as a remote CE client sends it: CE attributes xcount, maxMemory (MiB),
#: maxWallTime (min) and queue, which the CE router defaults turn into the GAHP's submit ad.
PILOT = """\
universe = vanilla
executable = /bin/echo
arguments = hello pilot
output = pilot.out
error = pilot.err
+xcount = 4
+maxMemory = 3000
+maxWallTime = 90
+queue = "short"
queue
"""

ROUTE_TIMEOUT = 60
RUN_TIMEOUT = 120


def routed_copies(pool: Pool, cluster: int, attrs: List[str]) -> List[Dict[str, Any]]:
    return pool.jobs(f'RoutedFromJobId == "{cluster}.0"', attrs)


def wait_completed(pool: Pool, cluster: int) -> Dict[str, Any]:
    def completed() -> Any:
        ads = pool.jobs(f"ClusterId == {cluster}", ["JobStatus", "HoldReason"])
        if ads and ads[0].get("JobStatus") == 5:
            pytest.fail(f"pilot {cluster}.0 held: {ads[0].get('HoldReason')}")
        return ads[0] if ads and ads[0].get("JobStatus") == 4 else None

    return pool.wait_for(completed, timeout=RUN_TIMEOUT, interval=1, what=f"pilot {cluster}.0 to complete")


def submit_ads(pool: Pool) -> List[Any]:
    """The ClassAds of every BLAH_JOB_SUBMIT the gridmanager sent, from GridmanagerLog.pilot."""
    ads = []
    for line in pool.gahp_lines("pilot"):
        m = re.search(r"GAHP\[\d+\] <- '(BLAH_JOB_SUBMIT .*)'$", line)
        if m:
            args = protocol.split(m.group(1))
            assert len(args) == 3, f"BLAH_JOB_SUBMIT with {len(args)} arguments: {line}"
            ads.append(classad2.parseOne(args[2]))
    return ads


def test_pilot_is_routed_to_podgahp_and_completes(k8s_pool: Pool) -> None:
    pool = k8s_pool
    iwd = pool.user_dir("pilot")
    cluster = pool.submit(PILOT, user="pilot", cwd=iwd)

    pool.wait_for(lambda: routed_copies(pool, cluster, ["GridJobId"]), timeout=ROUTE_TIMEOUT,
                  what="the JobRouter to route the pilot")
    source = wait_completed(pool, cluster)
    assert source["JobStatus"] == 4

    attrs = ["GridJobId", "GridResource", "JobUniverse", "JobStatus", "ExitCode", "RouteName", "Owner"]
    (routed,) = routed_copies(pool, cluster, attrs)
    assert routed["RouteName"] == "K8s"
    assert routed["JobUniverse"] == 9
    assert routed["GridResource"] == "batch k8s"
    assert routed["Owner"] == "pilot"
    assert routed["JobStatus"] == 4
    assert routed.get("ExitCode", 0) == 0
    # batch k8s <sandbox id> <podgahp job id>: the GAHP accepted the submit and its id was recorded.
    tokens = routed["GridJobId"].split(" ")
    assert tokens[:2] == ["batch", "k8s"]
    assert len(tokens) == 4, routed["GridJobId"]

    # The gridmanager ran K8S_GAHP inside the installation as the job owner, and the GAHP inherited
    # the pool's CONDOR_CONFIG (the wrapper reports both on stderr, logged by the gridmanager).
    wrapper = [line for line in pool.gahp_lines("pilot") if "gahp-wrapper:" in line]
    assert wrapper, "K8S_GAHP was never started"
    assert f"user=pilot HOME=/home/pilot CONDOR_CONFIG={pool.condor_config}" in wrapper[0]

    # The memory backend writes the pilot's stdout into Iwd before reporting completion.
    assert pool.path(f"{iwd}/pilot.out").exists()


def test_submit_ad_reaches_gahp(k8s_pool: Pool) -> None:
    pool = k8s_pool
    iwd = pool.user_dir("pilot")
    cluster = pool.submit(PILOT, user="pilot", cwd=iwd)
    wait_completed(pool, cluster)

    lines = pool.gahp_lines("pilot")
    commands = [m.group(1) for m in (re.search(r"<- '([A-Z_]+)", line) for line in lines) if m]
    assert commands[0] == "COMMANDS"
    assert "BLAH_JOB_SUBMIT" in commands and "BLAH_JOB_STATUS" in commands

    (ad,) = submit_ads(pool)
    # ... and the GAHP accepted it: the result for that request id carries the job id the
    # gridmanager recorded in GridJobId.
    reqid = next(protocol.split(m.group(1))[1] for m in (re.search(r"<- '(BLAH_JOB_SUBMIT .*)'$", line)
                                                      for line in lines) if m)
    results = [line for line in lines if re.search(rf"-> '{reqid}' '0' 'NULL' '[^']+'$", line)]
    assert results, f"no successful result for BLAH_JOB_SUBMIT {reqid}"
    job_id = results[0].rsplit("'", 2)[1]
    (routed,) = routed_copies(pool, cluster, ["GridJobId"])
    assert routed["GridJobId"].split(" ")[3] == job_id

    assert ad["GridResource"] == "batch k8s"
    assert ad["gridtype"] == "k8s"
    assert ad["JobUniverse"] == 5
    assert ad["Cmd"] == "/bin/echo"
    assert (ad.get("Arguments") or ad.get("Args")) == "hello pilot"
    assert ad["Iwd"] == iwd
    assert ad["Out"] == "pilot.out"
    assert ad["Err"] == "pilot.err"
    assert ad["JobDirectory"].startswith("home_bl_127.0.0.1_0_")
    # CE router defaults (ce-config/standalone/config.d/01-ce-router-defaults.conf):
    assert ad["RequestMemory"] == 3000      # maxMemory
    assert ad["NodeNumber"] == 4            # xcount
    assert ad["SMPGranularity"] == 4        # xcount
    assert ad["BatchRuntime"] == 90 * 60    # maxWallTime, in seconds
    assert ad["Queue"] == "short"           # queue
    # default_CERequirements of the route, plus CondorCE, as "Attr == value && ...".
    cereq = str(ad.lookup("CERequirements"))
    for conjunct in ("RequestCpus == 4", 'k8s_namespace == "pilots"', "CondorCE == 1", "RequestDisk =="):
        assert conjunct in cereq, cereq


def test_removing_a_running_pilot_cancels_it(make_k8s_pool: Callable[..., Pool]) -> None:
    pool = make_k8s_pool("PODGAHP_MEMORY_RUN_SECONDS = 600\n")
    iwd = pool.user_dir("pilot")
    cluster = pool.submit(PILOT, user="pilot", cwd=iwd)

    def running() -> Any:
        ads = routed_copies(pool, cluster, ["JobStatus", "GridJobId"])
        return ads[0] if ads and ads[0].get("JobStatus") == 2 else None

    routed = pool.wait_for(running, timeout=RUN_TIMEOUT, what="the routed pilot to run")
    job_id = routed["GridJobId"].split(" ")[3]

    pool.run(["condor_rm", str(cluster)], user="pilot")
    pool.wait_for(lambda: not pool.q(f"ClusterId == {cluster} || RoutedFromJobId == \"{cluster}.0\"", ["JobStatus"]),
                  timeout=RUN_TIMEOUT, what="source and routed pilot to leave the queue")
    cancels = [line for line in pool.gahp_lines("pilot") if "<- 'BLAH_JOB_CANCEL" in line]
    assert cancels and job_id in cancels[0].replace("\\", ""), cancels


def test_ce_wrappers_use_the_pool(k8s_pool: Pool, installation: Any) -> None:
    pool = k8s_pool
    bin_dir = f"{installation.src_dir}/ce-config/bin"
    # The wrappers must pick the configuration themselves, not inherit the caller's.
    env = {"CONDOR_CONFIG": "/nonexistent", "PODGAHP_CE_CONDOR_CONFIG": pool.condor_config}

    # Without an override they name the stand-alone pool's shipped defaults.
    defaults = pool.run([f"{bin_dir}/condor_ce_config_val", "PODGAHP_CE_PORT", "LOCAL_DIR"],
                        env={"CONDOR_CONFIG": "/nonexistent"}).stdout.split()
    assert defaults == ["9619", "/var/lib/podgahp-ce"]

    iwd = pool.user_dir("pilot")
    out = pool.run([f"{bin_dir}/condor_ce_submit", "-terse", "-"], user="pilot", cwd=iwd, env=env,
                   input=PILOT).stdout
    cluster = int(out.split(".")[0])
    queue = pool.run([f"{bin_dir}/condor_ce_q", "-allusers", "-af", "ClusterId"], env=env).stdout.split()
    assert str(cluster) in queue
    status = pool.run([f"{bin_dir}/condor_ce_status", "-schedd", "-af", "MyType"], env=env).stdout.split()
    assert status == ["Scheduler"]
    routes = pool.run([f"{bin_dir}/condor_ce_job_router_info", "-config"], env=env).stdout
    assert "K8s" in routes and "batch k8s" in routes
    wait_completed(pool, cluster)
    router_q = pool.run([f"{bin_dir}/condor_ce_router_q", "-S"], env=env)
    assert router_q.returncode == 0
