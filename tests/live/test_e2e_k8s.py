"""End to end on Kubernetes: pilots submitted to a CE-like pool are routed by the real JobRouter
with the shipped routes, the real gridmanager starts the installed ``k8s_gahp``, and the GAHP runs
each pilot as a pod on the simulated cluster. Runs on every HTCondor series of the harness; the tests
of the Kubernetes side (marked both_engines) also on the real control plane (tests/engines.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from typing import Any, Callable, Dict, List

import pytest

from e2e import (ANN_SANDBOX_ID, BAD_IMAGE, COMPLETED, HELD, IDLE, LABEL_QUEUE, LABEL_SANDBOX, NAMESPACE,
                 RUNNING, container, env_of, gahp_pids, grid_parts, iwd, job_id, kube_sim, pilot_submit,
                 pod_creations, pod_deletions, pod_of, pods_by_sandbox, routed_jobs,
                 start_k8s_ce, wait_done, wait_for_pods, write_user_file, x509_proxy)
from podgahp_sim.k8s import KubeSim
from harness import Installation, Pool

pytestmark = pytest.mark.live

__all__ = ["kube_sim"]  # the fixture, imported for pytest


@pytest.mark.both_engines
def test_pilot_becomes_pod_and_completes(make_pool: Callable[..., Pool], installation: Installation,
                                         kube_sim: KubeSim) -> None:
    """condor_submit to the CE schedd -> routed (K8s_Cpu) -> one pod -> completes with the pod's
    exit code; Out/Err in the submitter's Iwd; the routed job's GridJobId names the pod."""
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "plain", run_seconds=4, exit_code=3,
                                       extra=["+xcount = 2", "+maxMemory = 3000"]), cwd=home)

    # The routed copy (in the queue while the pilot runs, then in the history) names the pod.
    source = f"{cluster}.0"
    pods = wait_for_pods(pool, cluster, 1)
    pod_name = pods[source]
    routed = routed_jobs(pool, cluster)  # the queue's, or the history's once the 4 s are over
    assert len(routed) == 1, routed
    grid = grid_parts(routed[0])
    assert grid[:2] == ["batch", "k8s"], routed[0]
    assert routed[0]["RouteName"] == "K8s_Cpu"
    assert grid[3] == f"k8s/{NAMESPACE}/{pod_name}"
    pod = kube_sim.pod(NAMESPACE, pod_name)
    assert pod is not None, f"GridJobId names pod {pod_name}, which the cluster does not have"
    assert pod["metadata"]["annotations"][ANN_SANDBOX_ID] == grid[2]
    assert pod["metadata"]["labels"][LABEL_QUEUE] == "cpu"
    pilot = container(pod)
    assert pilot["command"] == ["/pilot/pilot.sh"]
    assert pilot["args"] == ["plain", "glidein"]
    assert pilot["resources"]["requests"]["cpu"] == "2"
    assert pilot["resources"]["requests"]["memory"] == "3000Mi"
    assert env_of(pod)["PODGAHP_SIM_EXIT_CODE"] == "3"

    # The source job ends completed with the pod's exit code.
    done = wait_done(pool, cluster, 1)
    assert done[0]["ExitCode"] == 3, done[0]
    routed_final = [ad for ad in routed_jobs(pool, cluster) if ad.get("JobStatus") == COMPLETED]
    assert routed_final and routed_final[0]["ExitCode"] == 3, routed_final
    final = kube_sim.pod(NAMESPACE, pod_name)
    assert final is not None and final["status"]["phase"] == "Failed", final
    assert final["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3

    # Out and Err were written into the submitter's Iwd, owned by the submitter.
    out = pool.path(f"{home}/plain.out")
    err = pool.path(f"{home}/plain.err")
    out_text = out.read_text()
    assert f"pod {NAMESPACE}/{pod_name} container pilot" in out_text, out_text
    assert "exited with code 3" in out_text, out_text
    assert f"pod {NAMESPACE}/{pod_name}" in err.read_text()
    owner = installation.user("pilot")
    assert (out.stat().st_uid, err.stat().st_uid) == (owner.uid, owner.uid)

    # Exactly one pod was ever created for this pilot.
    assert len(pod_creations(kube_sim)) == 1
    assert list(pods_by_sandbox(kube_sim).values()) == [[pod_name]]


def _routed_of(pool: Pool, cluster: int) -> Dict[str, Any]:
    ads = routed_jobs(pool, cluster, in_queue_only=True)
    assert len(ads) == 1, ads
    return ads[0]


def _wait_pod_gone(pool: Pool, sim: KubeSim, name: str) -> None:
    pool.wait_for(lambda: sim.pod(NAMESPACE, name) is None, timeout=60, interval=0.5,
                  what=f"pod {name} to be deleted")
    assert 200 in pod_deletions(sim, name) or 202 in pod_deletions(sim, name), pod_deletions(sim, name)


def _wait_running(pool: Pool, sim: KubeSim, name: str) -> None:
    def running() -> bool:
        pod = sim.pod(NAMESPACE, name)
        return pod is not None and pod["status"].get("phase") == "Running"
    pool.wait_for(running, timeout=60, interval=0.5, what=f"pod {name} to run")


@pytest.mark.both_engines
def test_condor_rm_deletes_the_pod(make_pool: Callable[..., Pool], installation: Installation,
                                   kube_sim: KubeSim) -> None:
    """condor_rm of the pilot (the CE's source job) removes the routed job, whose pod is deleted."""
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "removed", run_seconds=300), cwd=home)
    pod_name = wait_for_pods(pool, cluster, 1)[f"{cluster}.0"]
    _wait_running(pool, kube_sim, pod_name)

    pool.run(["condor_rm", f"{cluster}.0"], user="pilot")
    _wait_pod_gone(pool, kube_sim, pod_name)
    pool.wait_for(lambda: not pool.q(f"ClusterId == {cluster} || RoutedFromJobId =?= \"{cluster}.0\""),
                  timeout=60, what="the removed jobs to leave the queue")
    history = pool.history(f"ClusterId == {cluster}", ["JobStatus"])
    assert [ad["JobStatus"] for ad in history] == [3], history
    assert len(pod_creations(kube_sim)) == 1


@pytest.mark.both_engines
def test_hold_deletes_the_pod_and_release_makes_a_new_one(make_pool: Callable[..., Pool],
                                                          installation: Installation,
                                                          kube_sim: KubeSim) -> None:
    """condor_hold of the grid job deletes its pod; condor_release submits the same sandbox again,
    which becomes a new pod (a later generation), and the pilot completes.

    The CE removes routed jobs that return to idle after they started unless job retries are
    enabled, so this CE enables them (ENABLE_JOB_RETRIES)."""
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config="ENABLE_JOB_RETRIES = True\n")
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "held", run_seconds=300), cwd=home)
    first = wait_for_pods(pool, cluster, 1)[f"{cluster}.0"]
    _wait_running(pool, kube_sim, first)
    routed = _routed_of(pool, cluster)
    sandbox = grid_parts(routed)[2]
    first_pod = kube_sim.pod(NAMESPACE, first)
    assert first_pod is not None
    label = first_pod["metadata"]["labels"][LABEL_SANDBOX]

    pool.run(["condor_hold", job_id(routed)], user="pilot")
    _wait_pod_gone(pool, kube_sim, first)
    held = pool.wait_for(lambda: [ad for ad in routed_jobs(pool, cluster, in_queue_only=True)
                                  if ad["JobStatus"] == HELD and len(grid_parts(ad)) < 4],
                         timeout=60, what="the held grid job to forget its pod")
    assert job_id(held[0]) == job_id(routed)

    pool.run(["condor_release", job_id(routed)], user="pilot")

    # The new pod may reuse the deleted pod's name (the next free generation): it is a new object.
    def new_pod() -> str:
        name = pod_of(_routed_of(pool, cluster))
        pod = kube_sim.pod(NAMESPACE, name) if name else None
        fresh = pod is not None and pod["metadata"]["uid"] != first_pod["metadata"]["uid"]  # type: ignore[index]
        return name if fresh and name else ""
    second = pool.wait_for(new_pod, timeout=90, interval=0.5, what="a new pod after condor_release")
    assert grid_parts(_routed_of(pool, cluster))[2] == sandbox  # the same sandbox, submitted again
    pod = kube_sim.pod(NAMESPACE, second)
    assert pod is not None and pod["metadata"]["labels"][LABEL_SANDBOX] == label
    assert pods_by_sandbox(kube_sim) == {label: [second]}

    kube_sim.wait_for_phase(NAMESPACE, second, "Running", timeout=30)
    kube_sim.exit_pod(NAMESPACE, second, 0)
    done = wait_done(pool, cluster, 1)
    assert done[0]["ExitCode"] == 0
    assert len(pod_creations(kube_sim)) == 2
    assert f"pod {NAMESPACE}/{second} container pilot" in pool.path(f"{home}/held.out").read_text()


#: A queue whose image cannot be pulled, reached through its own route (matched first).
BAD_IMAGE_QUEUE = """\
PODGAHP_K8S_QUEUES = cpu gpu opportunistic broken
PODGAHP_K8S_BROKEN_IMAGE = {image}
JOB_ROUTER_ROUTE_NAMES = BadImage $(JOB_ROUTER_ROUTE_NAMES)
JOB_ROUTER_ROUTE_BadImage @=jrt
  TargetUniverse = 9
  GridResource = "batch k8s"
  REQUIREMENTS queue =?= "broken"
  SET BatchQueue "broken"
  SET default_CERequirements "RequestCpus,RequestDisk"
@jrt
"""
BAD_IMAGE_CONFIG = BAD_IMAGE_QUEUE.format(image=BAD_IMAGE)


@pytest.mark.both_engines
def test_bad_image_is_held_naming_it(make_pool: Callable[..., Pool], installation: Installation,
                                     kube_sim: KubeSim) -> None:
    """A pod whose image cannot be pulled holds the pilot's grid job with a reason naming the image
    (HoldReasonCode 1002: fix the route or queue first), and the pod is deleted."""
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config=BAD_IMAGE_CONFIG)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "broken", extra=['+queue = "broken"']), cwd=home)

    # The pod may be made, found unpullable, held and deleted between two looks at the queue (under
    # load), so its name is taken from the hold reason, not from a GridJobId seen on the way.
    def held() -> List[Dict[str, Any]]:
        return [ad for ad in routed_jobs(pool, cluster, in_queue_only=True) if ad["JobStatus"] == HELD]
    ad = pool.wait_for(held, timeout=90, what="the grid job to be held")[0]
    assert ad["RouteName"] == "BadImage"
    assert BAD_IMAGE in ad["HoldReason"], ad
    assert ad["HoldReasonCode"] == 1002, ad
    named = re.search(rf"pod {NAMESPACE}/([a-z0-9-]+)", ad["HoldReason"])
    assert named, ad["HoldReason"]
    assert len(pod_creations(kube_sim)) == 1
    _wait_pod_gone(pool, kube_sim, named.group(1))
    assert not pool.path(f"{home}/broken.out").exists()


@pytest.mark.both_engines
def test_black_hole_queue_stops_receiving_pods_and_recovers(make_pool: Callable[..., Pool],
                                                           installation: Installation, kube_sim: KubeSim) -> None:
    """Pilots of a queue whose image cannot be pulled: after PODGAHP_BLACKHOLE_FAILURES of them the
    queue is closed, so the next pilot is held at submit with a reason naming the queue and the cause,
    and no pod is made; once the image exists and the back-off is over, pilots run again."""
    # The back-off must outlast the third pilot's way to the GAHP: the second pilot's hold ends the
    # user's gridmanager, so the third waits for the router, the schedd and a new gridmanager and GAHP
    # (about 10 s here, several times that on a busy machine). A shorter one let the queue open again
    # before the third pilot came: it got a pod, and was held for the image instead.
    # An image of this test's own: it publishes it, and a cluster shared with the other tests (the
    # real engine's, one per worker) must still lack BAD_IMAGE for them.
    image = f"registry.example.org/osg/does-not-exist-{os.getpid()}-{time.monotonic_ns()}:1"
    config = (BAD_IMAGE_QUEUE.format(image=image)
              + "PODGAHP_BLACKHOLE_FAILURES = 2\nPODGAHP_BLACKHOLE_BACKOFF_SECONDS = 75\n")
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config=config)
    home = iwd(pool)

    def held(cluster: int) -> Callable[[], List[Dict[str, Any]]]:
        return lambda: [ad for ad in routed_jobs(pool, cluster, in_queue_only=True) if ad["JobStatus"] == HELD]

    for name in ("first", "second"):
        cluster = pool.submit(pilot_submit(home, name, extra=['+queue = "broken"']), cwd=home)
        ad = pool.wait_for(held(cluster), timeout=90, what=f"the {name} pilot held")[0]
        assert image in ad["HoldReason"], ad
    assert len(pod_creations(kube_sim)) == 2

    third = pool.submit(pilot_submit(home, "third", extra=['+queue = "broken"']), cwd=home)
    ad = pool.wait_for(held(third), timeout=90, what="the third pilot held at submit")[0]
    assert "queue broken is closed as a black hole" in ad["HoldReason"], ad
    assert "ImagePull" in ad["HoldReason"], ad
    assert len(pod_creations(kube_sim)) == 2  # the closed queue got no pod

    kube_sim.publish_image(image)  # the image is fixed
    # The GAHP's state file says until when the queue is closed; wait for that time to pass.
    state = next(pool.path(pool.log_dir).glob("Podgahp.pilot.*/PodgahpBlackholes.*-pilot-k8s.json"))
    until = json.loads(state.read_text())["queues"]["broken"]["closed_until"]
    pool.wait_for(lambda: time.time() > until, timeout=120, what="the back-off over")
    fourth = pool.submit(pilot_submit(home, "fourth", extra=['+queue = "broken"']), cwd=home)
    done = wait_done(pool, fourth, 1)
    assert done[0]["ExitCode"] == 0, done[0]
    assert len(pod_creations(kube_sim)) == 3


def test_grid_job_submitted_straight_to_the_ce_is_refused(make_pool: Callable[..., Pool],
                                                          installation: Installation, kube_sim: KubeSim) -> None:
    """A user's own grid-universe job for batch k8s skips the routes; the GAHP asks the schedd, finds
    no route made it, and refuses: the job is held with that reason and no pod is made. A routed pilot
    submitted alongside still runs (PODGAHP_ROUTED_ONLY, on by default)."""
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    direct = pool.submit("\n".join([
        "universe = grid", "grid_resource = batch k8s", f"executable = {home}/pilot.sh",
        "output = direct.out", "error = direct.err", "log = direct.log", f"initialdir = {home}",
        "+RoutedBy = \"htcondor-ce\"",  # a forged claim alone does not pass
        "queue"]) + "\n", cwd=home)
    routed = pool.submit(pilot_submit(home, "routed", run_seconds=1), cwd=home)

    def held() -> List[Dict[str, Any]]:
        return [ad for ad in pool.q(f"ClusterId == {direct}", ["JobStatus", "HoldReason"])
                if ad["JobStatus"] == HELD]
    ad = pool.wait_for(held, timeout=120, what="the direct grid job to be held")[0]
    assert "was not made by a route of this CE" in ad["HoldReason"], ad
    pods = wait_for_pods(pool, routed, 1)
    assert len(kube_sim.pods(NAMESPACE)) == len(pods) == 1


def test_forged_routing_links_are_refused(make_pool: Callable[..., Pool], installation: Installation,
                                         kube_sim: KubeSim) -> None:
    """A user forges everything the JobRouter writes: a held vanilla job, then a grid job claiming
    RoutedBy and RoutedFromJobId, then condor_qedit of the vanilla job's RoutedToJobId. The schedd's
    audit log recorded that the user, not the JobRouter, submitted the grid job: held, no pod. A
    routed pilot submitted alongside, which the router submitted, runs."""
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    vanilla = pool.submit(pilot_submit(home, "source", extra=["hold = true"]), cwd=home)
    forged = pool.submit("\n".join([
        "universe = grid", "grid_resource = batch k8s", f"executable = {home}/pilot.sh",
        "output = forged.out", "error = forged.err", "log = forged.log", f"initialdir = {home}",
        '+RoutedBy = "htcondor-ce"', f'+RoutedFromJobId = "{vanilla}.0"', '+Managed = "External"',
        "hold = true", "queue"]) + "\n", cwd=home)
    pool.run(["condor_qedit", f"{vanilla}.0", "RoutedToJobId", f'"{forged}.0"'], user="pilot")
    pool.run(["condor_qedit", f"{vanilla}.0", "Managed", '"External"'], user="pilot")
    pool.run(["condor_qedit", f"{vanilla}.0", "ManagedManager", '"htcondor-ce"'], user="pilot")
    pool.run(["condor_release", f"{forged}.0"], user="pilot")
    routed = pool.submit(pilot_submit(home, "routed", run_seconds=1), cwd=home)

    def held() -> List[Dict[str, Any]]:
        return [ad for ad in pool.q(f"ClusterId == {forged}", ["JobStatus", "HoldReason"])
                if ad["JobStatus"] == HELD and "JobRouter" in str(ad.get("HoldReason"))]
    ad = pool.wait_for(held, timeout=120, what="the forged grid job held")[0]
    assert "was not submitted by the JobRouter: the schedd's audit log" in ad["HoldReason"], ad
    assert "records its submitter as 'pilot@users.htcondor.org' (FS)" in ad["HoldReason"], ad
    source = pool.q(f"ClusterId == {vanilla}", ["RoutedToJobId"])[0]
    assert source["RoutedToJobId"] == f"{forged}.0"  # every link was in place
    done = wait_done(pool, routed, 1)
    assert done[0]["ExitCode"] == 0, done[0]
    assert len(kube_sim.pods(NAMESPACE)) <= 1 and len(pod_creations(kube_sim)) == 1, pod_creations(kube_sim)


def test_a_pilot_with_a_proxy_runs_on_every_series(make_pool: Callable[..., Pool], installation: Installation,
                                                   kube_sim: KubeSim) -> None:
    """A routed pilot with an X.509 proxy file (as factories send them): the schedd records the proxy's
    subject and no token of its submitter on every series, and the audit log names the router all
    the same, so the pilot runs."""
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    write_user_file(pool, f"{home}/x509up", x509_proxy(2), mode=0o600)
    cluster = pool.submit(pilot_submit(home, "proxied", run_seconds=1, extra=["x509userproxy = x509up"]), cwd=home)
    done = wait_done(pool, cluster, 1)
    assert done[0]["ExitCode"] == 0, done[0]
    routed = routed_jobs(pool, cluster)[0]
    ad = pool.jobs(f"ClusterId == {routed['ClusterId']}", ["AuthTokenSubject", "x509UserProxySubject"])[0]
    assert ad.get("x509UserProxySubject") and ad.get("AuthTokenSubject") is None, ad


def test_a_schedd_without_an_audit_log_holds_the_pilots_naming_it(make_pool: Callable[..., Pool],
                                                                  installation: Installation,
                                                                  kube_sim: KubeSim) -> None:
    """Where the schedd keeps no audit log podgahp cannot tell who submitted a pilot: the pilot is held
    with the reason and the knobs, no pod is made, and routing itself goes on (a route to another
    batch system routes its job)."""
    config = ("SCHEDD_AUDIT_LOG =\nSCHEDD_DEBUG =\n"
              "JOB_ROUTER_ROUTE_NAMES = Slurm $(JOB_ROUTER_ROUTE_NAMES)\n"
              "JOB_ROUTER_ROUTE_Slurm @=jrt\n  UNIVERSE 9\n  REQUIREMENTS queue =?= \"slurm\"\n"
              "  SET GridResource \"batch slurm\"\n@jrt\n")
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config=config)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "unaudited", run_seconds=1), cwd=home)
    slurm = pool.submit(pilot_submit(home, "slurm", extra=['+queue = "slurm"']), cwd=home)

    def held() -> List[Dict[str, Any]]:
        return [ad for ad in routed_jobs(pool, cluster, in_queue_only=True)
                if ad["JobStatus"] == HELD and "JobRouter" in str(ad.get("HoldReason"))]
    reason = str(pool.wait_for(held, timeout=120, what="the unverifiable pilot held")[0]["HoldReason"])
    assert "the schedd keeps no audit log (HTCondor-CE ships SCHEDD_AUDIT_LOG = $(LOG)/AuditLog" in reason, reason
    assert "PODGAHP_ROUTED_ONLY" in reason, reason
    assert pod_creations(kube_sim) == []
    other = pool.wait_for(lambda: routed_jobs(pool, slurm, in_queue_only=True), timeout=60,
                          what="the Slurm route's job routed")
    assert other[0]["GridResource"] == "batch slurm", other


#: A route that lets at most 2 pilots be routed at a time, at most 1 of them idle. It is the only
#: route: a full route makes the router try the next one, and the shipped K8s_Cpu takes any queue.
LIMITED_CONFIG = """\
JOB_ROUTER_ROUTE_NAMES = Limited
JOB_ROUTER_ROUTE_Limited @=jrt
  TargetUniverse = 9
  GridResource = "batch k8s"
  REQUIREMENTS queue =?= "limited"
  MaxJobs = 2
  MaxIdleJobs = 1
  SET BatchQueue "cpu"
  SET default_CERequirements "RequestCpus,RequestDisk"
@jrt
"""


def test_route_max_jobs_and_max_idle_jobs(make_pool: Callable[..., Pool], installation: Installation,
                                          kube_sim: KubeSim) -> None:
    """A route's MaxJobs and MaxIdleJobs bound the routed jobs (and so the pods) at every moment;
    the pilots beyond them wait at the CE and all run eventually."""
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config=LIMITED_CONFIG)
    home = iwd(pool)
    # Long enough for two pilots to overlap: a routed pilot counts as idle until the GAHP reports
    # its pod running (the next status poll), and only then may the router route the next one.
    pilots = 3
    cluster = pool.submit(pilot_submit(home, "limited", run_seconds=8, count=pilots,
                                       extra=['+queue = "limited"']), cwd=home)
    samples: List[Dict[str, int]] = []
    start = time.monotonic()

    def step() -> bool:
        ads = pool.q(f"ClusterId == {cluster} || RoutedFromJobId =!= undefined",
                     ["ClusterId", "JobStatus", "RoutedFromJobId", "RoutedToJobId", "RouteName"])
        routed = [ad for ad in ads if "RoutedFromJobId" in ad and ad["JobStatus"] in (IDLE, RUNNING)]
        live_pods = [p for p in kube_sim.pods(NAMESPACE)
                     if p["status"].get("phase") in ("Pending", "Running")
                     and not p["metadata"].get("deletionTimestamp")]
        samples.append({"t": round(time.monotonic() - start), "routed": len(routed),
                        "idle": sum(ad["JobStatus"] == IDLE for ad in routed),
                        "waiting": sum(ad["ClusterId"] == cluster and ad["JobStatus"] == IDLE
                                       and "RoutedToJobId" not in ad for ad in ads),
                        "pods": len(live_pods)})
        assert all(ad.get("RouteName", "Limited") == "Limited" for ad in routed), routed
        return not any(ad["ClusterId"] == cluster for ad in ads)

    pool.wait_for(step, timeout=180, interval=0.3, what="every limited pilot to finish")
    assert max(s["routed"] for s in samples) == 2, samples
    assert max(s["idle"] for s in samples) == 1, samples
    assert max(s["pods"] for s in samples) <= 2, samples
    # MaxJobs held a pilot back while two were routed.
    assert any(s["waiting"] > 0 and s["routed"] == 2 for s in samples), samples
    done = wait_done(pool, cluster, pilots, timeout=10)
    assert sorted(ad["ExitCode"] for ad in done) == [0] * pilots
    assert len(pod_creations(kube_sim)) == pilots


@pytest.mark.both_engines
def test_pilot_resources_become_the_pod_spec(make_pool: Callable[..., Pool], installation: Installation,
                                            kube_sim: KubeSim) -> None:
    """A pilot asking 8 cores (xcount), 16000 MB (maxMemory), 1 GPU (RequestGPUs) and 20 GB of disk
    takes the K8s_Gpu route and gets exactly that as requests and limits of its pod."""
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "gpu", run_seconds=2, extra=[
        "+xcount = 8", "+maxMemory = 16000", "request_gpus = 1", "request_disk = 20000000"]), cwd=home)
    pod_name = wait_for_pods(pool, cluster, 1)[f"{cluster}.0"]
    # The pilot runs 2 s: its grid job may have left the queue already (routed_jobs reads the history too).
    assert [ad["RouteName"] for ad in routed_jobs(pool, cluster)] == ["K8s_Gpu"]
    pod = kube_sim.pod(NAMESPACE, pod_name)
    assert pod is not None
    want = {"cpu": "8", "memory": "16000Mi", "nvidia.com/gpu": "1", "ephemeral-storage": "20000000Ki"}
    resources = container(pod)["resources"]
    assert resources["requests"] == want, resources
    assert resources["limits"] == want, resources
    assert pod["metadata"]["labels"][LABEL_QUEUE] == "gpu"
    done = wait_done(pool, cluster, 1)
    assert done[0]["ExitCode"] == 0
    final = kube_sim.pod(NAMESPACE, pod_name)
    assert final is not None and final["spec"]["nodeName"] == "gpu-1", final


@pytest.mark.both_engines
def test_pods_get_what_a_real_ce_gives(make_pool: Callable[..., Pool], installation: Installation,
                                      kube_sim: KubeSim) -> None:
    """As on a real HTCondor-CE: the opportunistic route's default_maxWallTime macro (720 min) is the
    pod's deadline; every pod's environment has CONDORCE_COLLECTOR_HOST beside the pilot's own; a
    pilot without request_disk still gets a usable disk limit; a pilot that ends before its
    minWalltime is held with HoldReasonCode 3 and HoldReasonSubCode 42."""
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    opportunistic = pool.submit(pilot_submit(home, "opp", run_seconds=2, extra=['+queue = "opportunistic"']),
                                cwd=home)
    short = pool.submit(pilot_submit(home, "short", run_seconds=1, extra=["+minWalltime = 10"]), cwd=home)
    pods = {**wait_for_pods(pool, opportunistic, 1), **wait_for_pods(pool, short, 1)}
    opp_pod = kube_sim.pod(NAMESPACE, pods[f"{opportunistic}.0"])
    short_pod = kube_sim.pod(NAMESPACE, pods[f"{short}.0"])
    assert opp_pod is not None and short_pod is not None
    assert opp_pod["spec"]["activeDeadlineSeconds"] == 720 * 60
    assert short_pod["spec"]["activeDeadlineSeconds"] == 4320 * 60
    for pod in (opp_pod, short_pod):
        env = env_of(pod)
        assert env["CONDORCE_COLLECTOR_HOST"] == pool.config_val("COLLECTOR_HOST"), env
        assert env["PODGAHP_SIM_RUN_SECONDS"] in ("1", "2")
        # no request_disk: HTCondor's default RequestDisk (DiskUsage, a few KiB on 23.x) is a request,
        # never the limit (the GAHP's 10485760Ki, which the API server stores as it writes it: 10Gi)
        limit = container(pod)["resources"]["limits"]["ephemeral-storage"]
        assert limit == "10Gi", limit

    def held() -> List[Dict[str, Any]]:
        return [ad for ad in routed_jobs(pool, short) if ad.get("JobStatus") == HELD]
    ad = pool.wait_for(held, timeout=120, what="the short pilot to be held on exit")[0]
    assert (ad["HoldReasonCode"], ad["HoldReasonSubCode"]) == (3, 42), ad
    assert "less than the minimum specified by the job (10)" in ad["HoldReason"], ad
    assert wait_done(pool, opportunistic, 1)[0]["ExitCode"] == 0


@pytest.mark.both_engines
def test_gahp_killed_mid_run(make_pool: Callable[..., Pool], installation: Installation,
                             kube_sim: KubeSim) -> None:
    """kill -9 of k8s_gahp while pilots run: the gridmanager gets a new GAHP, which finds the pods
    again; no pilot gets a second pod and every pilot completes exactly once."""
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    home = iwd(pool)
    pilots = 3
    cluster = pool.submit(pilot_submit(home, "survivor", run_seconds=10, exit_code=7, count=pilots), cwd=home)
    pods = wait_for_pods(pool, cluster, pilots)
    for name in pods.values():
        _wait_running(pool, kube_sim, name)
    old = gahp_pids(pool)
    assert len(old) == 1, old
    os.kill(old[0], signal.SIGKILL)

    def new_gahp() -> List[int]:
        return [pid for pid in gahp_pids(pool) if pid not in old]
    pool.wait_for(new_gahp, timeout=90, interval=0.5, what="a new k8s_gahp")

    done = wait_done(pool, cluster, pilots, timeout=120)
    assert sorted(ad["ExitCode"] for ad in done) == [7] * pilots
    assert len(pod_creations(kube_sim)) == pilots
    by_sandbox = pods_by_sandbox(kube_sim)
    assert sorted(n for names in by_sandbox.values() for n in names) == sorted(pods.values())
    assert all(len(names) == 1 for names in by_sandbox.values()), by_sandbox
    for i in range(pilots):
        out = pool.path(f"{home}/survivor-{i}.out").read_text()
        assert out.count("exited with code 7") == 1, out
    routed = [ad for ad in routed_jobs(pool, cluster) if ad["JobStatus"] == COMPLETED]
    assert sorted(ad["RoutedFromJobId"] for ad in routed) == sorted(pods), routed
