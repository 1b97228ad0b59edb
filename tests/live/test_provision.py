"""``podgahp provision`` between two real pools: a user pool whose idle jobs have three shapes, and
a CE-like pool (shipped routes, gridmanager, podgahp) in front of the simulated cluster or the
simulated Lancium service. The provisioner runs in the CE's installation as the pilot factory's
user, reads the user pool through its collector and submits pilots to the CE's schedd.
"""

from __future__ import annotations

import base64
from typing import Any, Callable, Dict, List, Optional

import pytest

from e2e import (NAMESPACE, RUNNING, container, env_of, kube_sim, lancium_sim, pod_of, routed_jobs, start_k8s_ce,
                 start_lancium_ce, write_user_file)
from harness import Installation, Pool
from podgahp_sim.k8s import KubeSim
from podgahp_sim.lancium import LanciumSim

pytestmark = pytest.mark.live

__all__ = ["kube_sim", "lancium_sim"]  # the fixtures, imported for pytest

NAME = "e2e-provisioner"
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


def provision(ce: Pool, users: Pool, remote: bool = False, **knobs: str) -> List[str]:
    """One ``podgahp provision --once`` as the factory's user; its lines per group. It runs on the
    CE and submits to the local schedd, or (``remote``) runs with the user pool's configuration and
    submits to the CE's schedd by name through the CE's collector."""
    env = {"_CONDOR_PODGAHP_PROVISION_POOL": collector_of(users), "_CONDOR_PODGAHP_PROVISION_NAME": NAME,
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


def pilots(ce: Pool) -> List[Dict[str, Any]]:
    """The pilots as submitted (not the JobRouter's copies of them)."""
    return ce.q(f'PodgahpProvisioner =?= "{NAME}" && RoutedFromJobId =?= undefined', PILOT_ATTRS)


def per_group(ads: List[Dict[str, Any]], status: Optional[int] = None) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for ad in ads:
        if status is None or ad["JobStatus"] == status:
            counts[ad["PodgahpGroup"]] = counts.get(ad["PodgahpGroup"], 0) + 1
    return counts


def group_name(cpus: int, memory: int, gpus: int) -> str:
    return f"{cpus}c/{memory}MiB" + (f"/{gpus}gpu" if gpus else "") + "/1GiB"


PROVISION_KNOBS = dict(MAX_IDLE_PER_GROUP="2", MAX_IDLE="5", MAX_PILOTS="8",
                 PILOT_ENVIRONMENT="PODGAHP_SIM_RUN_SECONDS=600")


def test_pilots_per_shape_within_the_caps_until_the_jobs_are_gone(
        make_pool: Callable[..., Pool], installation: Installation, kube_sim: KubeSim) -> None:
    users = user_pool(make_pool)
    ce = start_k8s_ce(make_pool, installation, kube_sim)
    clusters = submit_jobs(users, SHAPES)
    token = f"{ce.user_dir()}/pool.token"
    write_user_file(ce, token, "eyJ0b2tlbiI6InRlc3QifQ\n", mode=0o600)
    knobs = dict(PROVISION_KNOBS, PILOT_TOKEN_FILE=token)

    # One cycle: every shape gets pilots; two idle per group at most, five idle in all, so the
    # groups take turns, the one with most jobs waiting first.
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
    assert shapes == {group_name(1, 1024, 0): {("1", "1024Mi", "0")}, group_name(2, 4096, 0): {("2", "4096Mi", "0")},
                      group_name(1, 2048, 1): {("1", "2048Mi", "1")}}, shapes

    # Running pilots are not pressure: the jobs still wait, so the next cycle adds pilots up to the
    # total cap of 8, and the one after adds none.
    ce.wait_for(lambda: len(per_group(pilots(ce), RUNNING)) == 3 and sum(per_group(pilots(ce), RUNNING).values()) == 5,
                timeout=120, interval=1, what="the 5 pilots running")
    provision(ce, users, **knobs)
    assert len(pilots(ce)) == 8
    provision(ce, users, **knobs)
    assert len(pilots(ce)) == 8

    # The jobs go: no new pilots, and none removed (pilots end themselves in their pool).
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
    assert lines == ["8c/16384MiB: 8 jobs waiting, 0 pilots idle, 0 running, 2 submitted, 0 removed"], lines

    def jobs() -> Optional[List[Dict[str, Any]]]:
        found = [j for j in lancium_sim.jobs().values() if str(j.get("name", "")).startswith("podgahp:")]
        return found if len(found) == 2 else None
    made = ce.wait_for(jobs, timeout=120, interval=0.5, what="2 Lancium jobs")
    assert {(j["resources"]["core_count"], j["resources"]["memory"]) for j in made} == {(8, 16)}, made
    log = ce.log("PodgahpProvisionLog")
    assert "(1 unusable" in log  # the GPU job fits no pilot of this shape

    for cluster in clusters:
        users.run(["condor_rm", str(cluster)], user="pilot")
    users.wait_for(lambda: not users.q("JobStatus == 1", ["ClusterId"]), timeout=60, interval=0.5,
                   what="the user jobs gone")
    lines = provision(ce, users, remote=True, **knobs)
    assert len(lines) == 1 and lines[0].startswith("8c/16384MiB: 0 jobs waiting, ") and \
        lines[0].endswith(" 0 submitted, 0 removed"), lines
    assert len(pilots(ce)) == 2
