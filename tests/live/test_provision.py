"""``podgahp provision`` between two real pools: a user pool whose idle jobs have three shapes, and
a CE-like pool (shipped routes, gridmanager, podgahp) in front of the simulated cluster or the
simulated Lancium service. The provisioner runs in the CE's installation as the pilot factory's
user, reads the user pool through its collector and submits pilots to the CE's schedd.
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

import pytest

from e2e import (NAMESPACE, RUNNING, container, env_of, kube_sim, lancium_sim, pod_of, routed_jobs, start_k8s_ce,
                 start_lancium_ce, write_user_file)
from harness import Installation, Pool
from podgahp_sim.k8s import KubeSim
from podgahp_sim.lancium import LanciumSim

pytestmark = pytest.mark.live

__all__ = ["kube_sim", "lancium_sim"]  # the fixtures, imported for pytest

#: The provisioner's name, one per test: what it remembers between cycles is kept per name (and CE).
NAME = f"e2e-provisioner-{uuid.uuid4().hex[:8]}"
#: Idle jobs of three shapes (cores, MiB, GPUs) and how many of each.
SHAPES = {(1, 1024, 0): 4, (2, 4096, 0): 3, (1, 2048, 1): 2}
PILOT_ATTRS = ["ClusterId", "ProcId", "JobStatus", "PodgahpGroup", "RequestCpus", "RequestMemory", "RequestGPUs"]


def user_pool(make_pool: Callable[..., Pool]) -> Pool:
    """A pool with a schedd and no routes: its jobs stay idle until something runs them."""
    return make_pool(extra_config="JOB_ROUTER_ROUTE_NAMES =\nJOB_ROUTER_ENTRIES =\n")


def submit_jobs(pool: Pool, shapes: Dict[tuple, int]) -> List[int]:
    home = pool.user_dir()
    clusters = []
    for (cpus, memory, gpus), count in shapes.items():
        description = "\n".join([
            "universe = vanilla", "executable = /bin/true", f"initialdir = {home}",
            f"request_cpus = {cpus}", f"request_memory = {memory}",
            *([f"request_gpus = {gpus}"] if gpus else []), f"queue {count}"]) + "\n"
        clusters.append(pool.submit(description, cwd=home))
    return clusters


def collector_of(pool: Pool) -> str:
    return pool.path(f"{pool.log_dir}/.collector_address").read_text().splitlines()[0].strip()


def provision(ce: Pool, users: Pool, remote: bool = False, name: str = NAME, **knobs: str) -> List[str]:
    """One ``podgahp provision --once`` as the factory's user; its lines per group. It runs on the
    CE and submits to the local schedd, or (``remote``) runs with the user pool's configuration and
    submits to the CE's schedd by name through the CE's collector."""
    env = {"_CONDOR_PODGAHP_PROVISION_POOL": collector_of(users), "_CONDOR_PODGAHP_PROVISION_NAME": name,
           "_CONDOR_PODGAHP_PROVISION_LOG": f"{ce.log_dir}/PodgahpProvisionLog"}
    env.update({f"_CONDOR_PODGAHP_PROVISION_{k}": v for k, v in knobs.items()})
    where = ce
    if remote:
        name = ce.run(["condor_status", "-schedd", "-af", "Name"]).stdout.split()[0]
        env.update({"_CONDOR_PODGAHP_PROVISION_CE_SCHEDD": name,
                    "_CONDOR_PODGAHP_PROVISION_CE_POOL": collector_of(ce)})
        where = users
    out = where.run([ce.installation.bin("podgahp"), "provision", "--once"], user="pilot", env=env, timeout=120)
    return out.stdout.splitlines()


def pilots(ce: Pool, name: str = NAME) -> List[Dict[str, Any]]:
    """The pilots as submitted (not the JobRouter's copies of them)."""
    return ce.q(f'PodgahpProvisioner =?= "{name}" && RoutedFromJobId =?= undefined', PILOT_ATTRS)


def per_group(ads: List[Dict[str, Any]], status: Optional[int] = None) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for ad in ads:
        if status is None or ad["JobStatus"] == status:
            counts[ad["PodgahpGroup"]] = counts.get(ad["PodgahpGroup"], 0) + 1
    return counts


def group_name(cpus: int, memory: int, gpus: int) -> str:
    return f"{cpus}c/{memory}MiB" + (f"/{gpus}gpu" if gpus else "") + "/1GiB"


PROVISION_KNOBS = dict(RAMP_START="2", MAX_STARTING="5", MAX_PILOTS="8",
                       PILOT_ENVIRONMENT="PODGAHP_SIM_RUN_SECONDS=600")


def test_pilots_per_shape_within_the_caps_until_the_jobs_are_gone(
        make_pool: Callable[..., Pool], installation: Installation, kube_sim: KubeSim) -> None:
    users = user_pool(make_pool)
    ce = start_k8s_ce(make_pool, installation, kube_sim)
    clusters = submit_jobs(users, SHAPES)
    token = f"{ce.user_dir()}/pool.token"
    write_user_file(ce, token, "eyJ0b2tlbiI6InRlc3QifQ\n", mode=0o600)
    knobs = dict(PROVISION_KNOBS, PILOT_TOKEN_FILE=token)

    # One cycle: every shape gets its first pilots, two at most per group, five waiting to start in
    # all, so the groups take turns, the one with most jobs waiting first.
    lines = provision(ce, users, **knobs)
    assert len(lines) == 3, lines
    first = pilots(ce)
    assert per_group(first) == {group_name(1, 1024, 0): 2, group_name(2, 4096, 0): 2,
                                group_name(1, 2048, 1): 1}, (first, lines)

    # Each pilot became a pod of its group's shape (the GPU one through the GPU route).
    def pods() -> Optional[Dict[str, Dict[str, Any]]]:
        named = {pod_of(ad): ad for ad in routed_jobs(ce, in_queue_only=True) if pod_of(ad)}
        return {name: kube_sim.pod(NAMESPACE, str(name)) for name in named} if len(named) == 5 else None  # type: ignore[misc]
    made = ce.wait_for(pods, timeout=120, interval=0.5, what="5 pilot pods")
    shapes = {}
    for pod in made.values():
        assert pod is not None
        env = env_of(pod)
        requests = container(pod)["resources"]["requests"]
        limits = container(pod)["resources"].get("limits", {})
        shapes.setdefault(env["PODGAHP_PILOT_GROUP"], set()).add(
            (requests["cpu"], requests["memory"], limits.get("nvidia.com/gpu", "0")))
        assert env["CONDOR_HOST"] == collector_of(users)
        assert "TARGET.RequestCpus <= " in env["PODGAHP_PILOT_START"]
        # the pool's token travels as the pilot's input file, in its own Secret
        assert env["PODGAHP_PILOT_TOKEN_FILE"] == "pool.token"
        secret = kube_sim.secret(NAMESPACE, pod["metadata"]["name"])
        assert secret is not None and base64.b64encode(b"eyJ0b2tlbiI6InRlc3QifQ\n").decode() in \
            secret["data"].values()
    # the GAHP's 1024Mi, as the API server stores it: 1Gi
    assert shapes == {group_name(1, 1024, 0): {("1", "1Gi", "0")}, group_name(2, 4096, 0): {("2", "4Gi", "0")},
                      group_name(1, 2048, 1): {("1", "2Gi", "1")}}, shapes

    # Started, not yet in the pool, they are the first pilots of their groups: no more until they join.
    ce.wait_for(lambda: len(per_group(pilots(ce), RUNNING)) == 3 and sum(per_group(pilots(ce), RUNNING).values()) == 5,
                timeout=120, interval=1, what="the 5 pilots running")
    provision(ce, users, **knobs)
    assert len(pilots(ce)) == 5
    # They join the user pool and run jobs (their startds' ads, advertised here as they would send
    # them: pilots do not run startds in this test): the jobs beyond them still wait, so the next
    # cycle adds pilots up to the total cap of 8, and the one after adds none.
    advertise(users, [pilot_ad(dict(p, PodgahpProvisioner=NAME), "Claimed", 0) for p in first])
    users.wait_for(lambda: users.run(["condor_status", "-af", "State"]).stdout.split() == ["Claimed"] * 5,
                   timeout=60, interval=0.5, what="the 5 pilot ads in the user pool")
    provision(ce, users, **knobs)
    assert len(pilots(ce)) == 8
    provision(ce, users, **knobs)
    assert len(pilots(ce)) == 8

    # The jobs go: no new pilots, and none of those started removed (they end themselves in their
    # pool, or the provisioner removes them once its pool shows them idle).
    ce.wait_for(lambda: sum(per_group(pilots(ce), RUNNING).values()) == 8, timeout=120, interval=1,
                what="the 8 pilots running")
    for cluster in clusters:
        users.run(["condor_rm", str(cluster)], user="pilot")
    users.wait_for(lambda: not users.q("JobStatus == 1", ["ClusterId"]), timeout=60, interval=0.5,
                   what="the user jobs gone")
    before = sorted((ad["ClusterId"], ad["ProcId"]) for ad in pilots(ce))
    lines = provision(ce, users, **knobs)
    assert all("0 submitted" in line and " 0 jobs waiting" in line for line in lines), lines
    assert sorted((ad["ClusterId"], ad["ProcId"]) for ad in pilots(ce)) == before
    log = ce.log("PodgahpProvisionLog")
    assert "demand: 9 idle jobs in 3 groups" in log and "demand: 0 idle jobs in 0 groups" in log


def test_a_pilot_that_ran_its_idle_time_and_left_between_two_cycles_is_no_failure(
        make_pool: Callable[..., Pool], installation: Installation, kube_sim: KubeSim) -> None:
    """Two provisioners for the same jobs, one pilot each, never seen in the pool: one runs past a
    pilot's idle time (1 minute) and exits 0, as a pilot that joined and quit unclaimed does; the
    other exits 0 at once. Once both left the CE's queue, the CE's history tells them apart: the
    first group gets pilots again, the second backs off."""
    users = user_pool(make_pool)
    ce = start_k8s_ce(make_pool, installation, kube_sim)
    submit_jobs(users, {(1, 1024, 0): 4})
    ran, failed = f"{NAME}-ran", f"{NAME}-failed"
    knobs = dict(RAMP_START="1", PILOT_IDLE_MINUTES="1")
    for name, seconds in ((ran, "65"), (failed, "1")):
        provision(ce, users, name=name, PILOT_ENVIRONMENT=f"PODGAHP_SIM_RUN_SECONDS={seconds}", **knobs)
        assert len(pilots(ce, name)) == 1
    ce.wait_for(lambda: not pilots(ce, ran) and not pilots(ce, failed), timeout=240, interval=2,
                what="both pilots gone from the CE's queue")
    again = provision(ce, users, name=ran, **knobs)
    assert len(again) == 1 and "1 submitted" in again[0] and "without joining" not in again[0], again
    backs_off = provision(ce, users, name=failed, **knobs)
    assert len(backs_off) == 1 and "0 submitted" in backs_off[0] and "without joining" in backs_off[0], backs_off
    assert "how 1 pilots ended is not known" not in ce.log("PodgahpProvisionLog")


def test_partitionable_pilots_on_lancium(make_pool: Callable[..., Pool], installation: Installation,
                                        lancium_sim: LanciumSim) -> None:
    """Lancium gives 2 cores per 4 GB: partitionable pilots of 8 cores and 16 GiB, as many as the
    waiting jobs' cores and memory need (13 cores, 20 GiB: two). The provisioner runs next to the
    user pool here and submits to the CE's schedd through the CE's collector."""
    users = user_pool(make_pool)
    ce = start_lancium_ce(make_pool, installation, lancium_sim)
    clusters = submit_jobs(users, {(1, 1024, 0): 5, (2, 2048, 0): 2, (4, 8192, 0): 1, (2, 1024, 1): 1})
    knobs = dict(PILOT_KIND="partitionable", PILOT_QUEUE="lancium", PARTITIONABLE_CPUS="8",
                 PARTITIONABLE_MEMORY_MB="16384", PILOT_ENVIRONMENT="PODGAHP_SIM_RUN_SECONDS=600")
    lines = provision(ce, users, remote=True, **knobs)
    assert lines == ["8c/16384MiB: 8 jobs waiting, 0 pilots starting, 0 booting, 0 idle in the pool, 0 running, "
                     "2 submitted, 0 removed"], lines

    def jobs() -> Optional[List[Dict[str, Any]]]:
        found = [j for j in lancium_sim.jobs().values() if str(j.get("name", "")).startswith("podgahp-")]
        return found if len(found) == 2 else None
    made = ce.wait_for(jobs, timeout=120, interval=0.5, what="2 Lancium jobs")
    assert {(j["resources"]["core_count"], j["resources"]["memory"]) for j in made} == {(8, 16)}, made
    log = ce.log("PodgahpProvisionLog")
    assert "(1 unusable" in log  # the GPU job fits no pilot of this shape

    ce.wait_for(lambda: sum(per_group(pilots(ce), RUNNING).values()) == 2, timeout=120, interval=1,
                what="the 2 pilots running")
    for cluster in clusters:
        users.run(["condor_rm", str(cluster)], user="pilot")
    users.wait_for(lambda: not users.q("JobStatus == 1", ["ClusterId"]), timeout=60, interval=0.5,
                   what="the user jobs gone")
    lines = provision(ce, users, remote=True, **knobs)
    assert len(lines) == 1 and lines[0].startswith("8c/16384MiB: 0 jobs waiting, ") and \
        lines[0].endswith(" 0 submitted, 0 removed"), lines
    assert len(pilots(ce)) == 2


def advertise(pool: Pool, ads: List[Dict[str, Any]]) -> None:
    """Startd ads into the pool's collector, as running pilots' startds would send them."""
    def literal(value: Any) -> str:
        return f'"{value}"' if isinstance(value, str) else str(value)
    text = "\n\n".join("\n".join(f"{k} = {literal(v)}" for k, v in ad.items()) for ad in ads) + "\n"
    path = f"{pool.user_dir()}/startd-ads"
    pool.path(path).write_text(text)
    pool.run(["condor_advertise", "-multiple", "UPDATE_STARTD_AD", path])


def pilot_ad(pilot: Dict[str, Any], state: str, idle_s: float) -> Dict[str, Any]:
    """A startd ad as the shipped pilot script makes its startd advertise it."""
    now, job = int(time.time()), f"{pilot['ClusterId']}.{pilot['ProcId']}"
    return {"MyType": "Machine", "Name": f"slot1@pilot-{job}", "Machine": f"pilot-{job}",
            "MyAddress": "<127.0.0.1:9>", "State": state, "Activity": "Idle" if state == "Unclaimed" else "Busy",
            "SlotType": "Static", "Cpus": 1, "Memory": 1024, "Start": False, "Requirements": False,
            "EnteredCurrentState": now - int(idle_s), "DaemonStartTime": now - int(idle_s) - 10,
            "MyCurrentTime": now, "PodgahpProvisioner": pilot["PodgahpProvisioner"],
            "PodgahpGroup": pilot["PodgahpGroup"], "PodgahpPilotId": job}


def test_idle_pilots_in_the_pool_are_supply(make_pool: Callable[..., Pool], installation: Installation,
                                            kube_sim: KubeSim) -> None:
    """Pilots idle in the user pool are counted as supply for their group: no new pilots while they
    idle. Pilots here do not run startds: this test advertises the startd ads the pilots' startds
    would send (condor_advertise UPDATE_STARTD_AD with PodgahpProvisioner, PodgahpGroup and
    PodgahpPilotId) into the user pool's collector, standing in for running pilots. Once they have
    idled past UNMATCHED_SECONDS while their jobs waited, the jobs do not match them: they are removed
    and the group gets no new pilots, from one --once run to the next, and the output says why."""
    users = user_pool(make_pool)
    ce = start_k8s_ce(make_pool, installation, kube_sim)
    submit_jobs(users, {(1, 1024, 0): 2})
    name = f"e2e-supply-{uuid.uuid4().hex[:8]}"
    knobs = dict(RAMP_START="2", PILOT_ENVIRONMENT="PODGAHP_SIM_RUN_SECONDS=600")
    group = group_name(1, 1024, 0)

    lines = provision(ce, users, name=name, **knobs)
    assert lines == [f"{group}: 2 jobs waiting, 0 pilots starting, 0 booting, 0 idle in the pool, 0 running, "
                     "2 submitted, 0 removed"], lines
    ce.wait_for(lambda: sum(per_group(pilots(ce, name), RUNNING).values()) == 2, timeout=120, interval=1,
                what="the 2 pilots running at the CE")
    started = [dict(ad, PodgahpProvisioner=name) for ad in ce.q(
        f'PodgahpProvisioner =?= "{name}" && RoutedFromJobId =?= undefined',
        ["ClusterId", "ProcId", "PodgahpGroup"])]

    # Their startds joined the user pool, unclaimed: they are the supply of the 2 waiting jobs.
    advertise(users, [pilot_ad(p, "Unclaimed", 20) for p in started])
    users.wait_for(lambda: len(users.run(["condor_status", "-af", "PodgahpPilotId"]).stdout.split()) == 2,
                   timeout=60, interval=0.5, what="the 2 pilot ads in the user pool")
    for _ in range(2):
        lines = provision(ce, users, name=name, **knobs)
        assert lines == [f"{group}: 2 jobs waiting, 0 pilots starting, 0 booting, 2 idle in the pool, 0 running, "
                         "0 submitted, 0 removed"], lines
    assert len(pilots(ce, name)) == 2

    # Busy, they are not: their jobs are not the waiting ones, which get pilots of their own.
    advertise(users, [pilot_ad(p, "Claimed", 0) for p in started])
    users.wait_for(lambda: users.run(["condor_status", "-af", "State"]).stdout.split() == ["Claimed"] * 2,
                   timeout=60, interval=0.5, what="the 2 pilot ads claimed")
    lines = provision(ce, users, name=name, MAX_PILOTS="2", **knobs)
    assert lines == [f"{group}: 2 jobs waiting, 0 pilots starting, 0 booting, 0 idle in the pool, 2 running, "
                     "0 submitted, 0 removed; capped: at most 2 pilots in all"], lines

    # Idle far longer than a negotiation takes while the jobs waited: the jobs do not match them.
    advertise(users, [pilot_ad(p, "Unclaimed", 400) for p in started])
    users.wait_for(lambda: users.run(["condor_status", "-af", "State"]).stdout.split() == ["Unclaimed"] * 2,
                   timeout=60, interval=0.5, what="the 2 pilot ads idle again")
    lines = provision(ce, users, name=name, **knobs)
    assert len(lines) == 1 and lines[0].startswith(
        f"{group}: 2 jobs waiting, 0 pilots starting, 0 booting, 0 idle in the pool, 0 running, 0 submitted, "
        "2 removed; its pilots idled in the pool while its jobs waited: the jobs do not match them"), lines
    ce.wait_for(lambda: not pilots(ce, name), timeout=60, interval=0.5, what="the 2 idle pilots removed")
    lines = provision(ce, users, name=name, **knobs)
    assert len(lines) == 1 and " 0 submitted, 0 removed; its pilots idled in the pool" in lines[0], lines
    log = ce.log("PodgahpProvisionLog")
    assert "idle in the pool for " in log and "the jobs do not match them" in log
