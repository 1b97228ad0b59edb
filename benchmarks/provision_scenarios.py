"""Benchmark: pilots on demand in a model world, podgahp's provisioner next to two peers' algorithms.

A discrete-event model of an HTCondor pool whose idle jobs wait, and a Kubernetes cluster with room
for so many cores and GPUs (other tenants may take some). Provisioners make pods; a pod waits until
the cluster places it, starts, its startd joins the pool, the negotiator (every 60 s) gives it jobs
its START accepts, it reuses its claim while jobs fit and ends itself when unclaimed too long.

The provisioners, each at its own defaults:

* ``podgahp`` — podgahp's own code, unchanged: :class:`gahp.provision.service.Provisioner` (demand
  grouping, the decision of :mod:`gahp.provision.plan`, its history) with the model standing in
  for the user pool's schedds and collector and for the CE (a pilot reaches the cluster 20 s after
  its submission, the JobRouter and gridmanager's hop; the CE sees it running 10 s after its pod
  runs; a pod unschedulable for an hour is held and deleted, as podgahp's Kubernetes backend does).
* ``PRP`` — a model of the PRP provisioner's published algorithm (sfiligoi/prp-htcondor-portal,
  ``provisioner/docs/logic.txt`` and its event loop): every 120 s per exact shape, ``1 + idle/4``
  pods (damped above 20) at most 20 per shape, minus the pods pending or unclaimed; pods straight
  to the cluster, START requires exactly the shape, never deleted; pilots end after 20 min unclaimed.
* ``COBalD`` — a model of COBalD/TARDIS as its documentation configures it: a ``LinearController``
  (low utilisation 0.9, high allocation 0.9, 1 core per second) over a ``Limiter`` (at least 1, at
  most the site's core quota) over a factory pool of 8-core drones (a GPU machine type too where
  jobs ask for GPUs), checked every 30 s; drones report utilisation and allocation every 60 s,
  partitionable, any job that fits; a released drone drains then stops (a Deployment restarts a
  pilot that exits by itself, so drones do not end when idle).
* ``ideal`` — the cluster-bound ideal: every 5 s, one pod per waiting job not yet covered, straight
  to the cluster; a pod ends as soon as nothing waits for it.

Per scenario and provisioner: time until every job that can run has run (drain), pods created,
pods that never ran a job, core-hours of started pilots without a job, most pods pending at once,
pods that waited more than 2 minutes to be placed.

    .venv/bin/python benchmarks/provision_scenarios.py [--scenario S1 ...] [--knob NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import heapq
import logging
import math
import random
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gahp.core.config import Knobs  # noqa: E402
from gahp.provision.pilots import Pilot  # noqa: E402
from gahp.provision.pool import slot_of  # noqa: E402
from gahp.provision.service import Provisioner  # noqa: E402
from gahp.provision.settings import ProvisionSettings  # noqa: E402
from gahp.provision.shape import Group  # noqa: E402

HORIZON_S = 4 * 3600
NEGOTIATION_S = 60
NEGOTIATION_PHASE_S = 30
CONTAINER_START_S = 20
STARTD_JOIN_S = 15
BLACK_HOLE_EXIT_S = 30
CE_ROUTE_S = 20
CE_REPORT_S = 10
DIRECT_CREATE_S = 2
UNSCHEDULABLE_HOLD_S = 3600
LONG_PENDING_S = 120


# ------------------------------------------------------------------------------------------------
# The world: jobs, pods, the cluster, the pool
# ------------------------------------------------------------------------------------------------

@dataclass
class Job:
    id: int
    cpus: float
    memory: float
    gpus: float
    duration: float
    arrival: float
    attrs: Dict[str, object]
    """The job ad's requests as a provisioner reads them (odd values included)."""
    project: Optional[str] = None
    matches: bool = True
    """False: its requirements match no pilot (S5)."""
    runnable: bool = True
    """It could run in this cluster at all (counted for the drain)."""
    state: str = "future"
    end: float = 0.0


@dataclass(eq=False)
class Pod:
    id: int
    owner: str
    cpus: float
    memory: float
    gpus: float
    accepts: Callable[[Job], bool]
    partitionable: bool = False
    idle_exit_s: Optional[float] = None
    label: str = ""
    state: str = "creating"
    created: float = 0.0
    started: float = 0.0
    jobs: List[Job] = field(default_factory=list)
    used: float = 0.0
    used_memory: float = 0.0
    used_gpus: float = 0.0
    idle_since: float = 0.0
    joined_at: float = 0.0
    ran_job: bool = False
    ce_id: str = ""
    draining: bool = False
    on_end: Optional[Callable[["Pod"], None]] = None
    on_start: Optional[Callable[["Pod"], None]] = None
    accounted: float = 0.0
    """Idle core-time accounted up to this time."""
    pending_since: Optional[float] = None
    """When it reached the cluster, while it waits there to be placed."""
    pending_s: float = 0.0
    """How long it waited to be placed (or until it was deleted, or the end of the run)."""


@dataclass
class Scenario:
    name: str
    what: str
    jobs: List[Job]
    cores: int
    gpus: int = 0
    memory_per_core: float = 4096.0
    tenants: Sequence[Tuple[float, int]] = ()
    """(time, cores other tenants use from then on)."""
    black_hole_until: float = 0.0
    """Pilots started before this end 30 s after starting without joining the pool."""
    removals: Sequence[float] = ()
    """Times at which every job is removed (queued and running)."""
    group_by: str = ""
    late: Optional[str] = None
    """A project whose drain is reported apart (the group others may starve)."""


class World:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.now = 0.0
        self.events: List[Tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.jobs = scenario.jobs
        self.waiting: Dict[Tuple[Any, ...], Deque[Job]] = {}
        self.pods: List[Pod] = []
        self.pending: List[Pod] = []
        self.unclaimed: Dict[int, Pod] = {}
        self.used_cores = 0.0
        self.used_gpus = 0.0
        self.used_memory = 0.0
        self.tenant_cores = 0
        self.place_scheduled = False
        self.peak_pending = 0
        self.idle_core_s = 0.0
        self.pod_ids = 0
        for job in self.jobs:
            self.at(job.arrival, lambda j=job: self.arrive(j))
        for when, cores in scenario.tenants:
            self.at(when, lambda c=cores: self.tenants(c))
        for when in scenario.removals:
            self.at(when, self.remove_all)
        self.every(NEGOTIATION_S, self.negotiate, NEGOTIATION_PHASE_S)

    # -- events ----------------------------------------------------------------------------------
    def at(self, when: float, action: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, action))

    def every(self, period: float, action: Callable[[], None], first: float = 0.0) -> None:
        def tick() -> None:
            action()
            self.at(self.now + period, tick)
        self.at(first, tick)

    def run(self, until: float = HORIZON_S) -> None:
        while self.events and self.events[0][0] <= until:
            when, _, action = heapq.heappop(self.events)
            self.now = when
            action()
        self.now = until
        for pod in self.pods:
            self.account(pod)

    # -- jobs ------------------------------------------------------------------------------------
    def arrive(self, job: Job) -> None:
        job.state = "waiting"
        self.waiting.setdefault(self.key(job), deque()).append(job)

    @staticmethod
    def key(job: Job) -> Tuple[Any, ...]:
        return (job.cpus, job.memory, job.gpus, job.project)

    def waiting_jobs(self) -> List[Job]:
        return [j for queue in self.waiting.values() for j in queue]

    def remove_all(self) -> None:
        for queue in self.waiting.values():
            for job in queue:
                job.state = "removed"
        self.waiting.clear()
        for pod in self.pods:
            for job in list(pod.jobs):
                job.state = "removed"
                self.release(pod, job)
        for job in self.jobs:
            if job.state == "future":
                job.state = "removed"

    # -- the cluster -----------------------------------------------------------------------------
    def tenants(self, cores: int) -> None:
        self.tenant_cores = cores
        self.schedule_place()

    def create(self, pod: Pod, delay: float) -> Pod:
        self.pod_ids += 1
        pod.id, pod.created = self.pod_ids, self.now
        self.pods.append(pod)
        self.at(self.now + delay, lambda: self.submit_pod(pod))
        return pod

    def submit_pod(self, pod: Pod) -> None:
        if pod.state != "creating":
            return
        pod.state, pod.pending_since = "pending", self.now
        self.pending.append(pod)
        self.schedule_place()

    def schedule_place(self) -> None:
        if not self.place_scheduled:
            self.place_scheduled = True
            self.at(self.now, self.place)

    def place(self) -> None:
        self.place_scheduled = False
        s = self.scenario
        still = []
        for pod in self.pending:
            if pod.state != "pending":
                continue
            free = s.cores - self.tenant_cores - self.used_cores
            if (pod.cpus <= free and pod.gpus <= s.gpus - self.used_gpus
                    and pod.memory <= s.cores * s.memory_per_core - self.used_memory):
                self.used_cores += pod.cpus
                self.used_gpus += pod.gpus
                self.used_memory += pod.memory
                pod.state = "starting"
                self.placed(pod)
                self.at(self.now + CONTAINER_START_S, lambda p=pod: self.container_started(p))
            else:
                still.append(pod)
        self.pending = still
        self.peak_pending = max(self.peak_pending, len(still))

    def placed(self, pod: Pod) -> None:
        """The pod no longer waits to be placed: how long it waited."""
        if pod.pending_since is not None:
            pod.pending_s, pod.pending_since = self.now - pod.pending_since, None

    def container_started(self, pod: Pod) -> None:
        if pod.state != "starting":
            return
        pod.state, pod.started, pod.accounted = "booting", self.now, self.now
        if pod.on_start:
            pod.on_start(pod)
        if self.now < self.scenario.black_hole_until:
            self.at(self.now + BLACK_HOLE_EXIT_S, lambda: self.end(pod))
        else:
            self.at(self.now + STARTD_JOIN_S, lambda: self.join(pod))

    def join(self, pod: Pod) -> None:
        if pod.state != "booting":
            return
        pod.state, pod.joined_at = "ready", self.now
        self.go_idle(pod)

    def delete(self, pod: Pod) -> None:
        """The provisioner deletes the pod (whatever it runs is requeued)."""
        if pod.state in ("creating", "pending"):
            self.placed(pod)
            pod.state = "gone"
            if pod.on_end:
                pod.on_end(pod)
            return
        self.end(pod)

    def end(self, pod: Pod) -> None:
        if pod.state == "gone":
            return
        if pod.state in ("starting", "booting", "ready"):
            self.account(pod)
            self.used_cores -= pod.cpus
            self.used_gpus -= pod.gpus
            self.used_memory -= pod.memory
            self.schedule_place()
        for job in list(pod.jobs):
            pod.jobs.remove(job)
            job.state = "waiting"
            self.waiting.setdefault(self.key(job), deque()).appendleft(job)
        pod.state = "gone"
        self.unclaimed.pop(pod.id, None)
        if pod.on_end:
            pod.on_end(pod)

    # -- the pool --------------------------------------------------------------------------------
    def account(self, pod: Pod) -> None:
        """Idle core-time of a started pod up to now."""
        if pod.state in ("booting", "ready"):
            self.idle_core_s += (pod.cpus - pod.used) * (self.now - pod.accounted)
        pod.accounted = self.now

    def go_idle(self, pod: Pod) -> None:
        if pod.jobs:
            return
        pod.idle_since = self.now
        self.unclaimed[pod.id] = pod
        if pod.draining:
            self.at(self.now, lambda: self.end(pod))
        elif pod.idle_exit_s is not None:
            since = self.now
            self.at(self.now + pod.idle_exit_s, lambda: self.idle_exit(pod, since))

    def idle_exit(self, pod: Pod, since: float) -> None:
        if pod.state == "ready" and not pod.jobs and pod.idle_since == since:
            self.end(pod)

    def fits(self, pod: Pod, job: Job) -> bool:
        if pod.partitionable:
            return (job.cpus <= pod.cpus - pod.used and job.memory <= pod.memory - pod.used_memory
                    and job.gpus <= pod.gpus - pod.used_gpus)
        return not pod.jobs

    def claim(self, pod: Pod) -> bool:
        """Start the first waiting job the pod accepts (claim reuse or a match); whether one started."""
        if pod.draining:
            return False
        for key in sorted(self.waiting, key=lambda k: (-k[0], -k[1], -k[2], str(k[3]))):
            queue = self.waiting[key]
            if not queue:
                continue
            job = queue[0]
            if job.matches and pod.accepts(job) and self.fits(pod, job):
                queue.popleft()
                if not queue:
                    del self.waiting[key]
                self.start_job(pod, job)
                return True
        return False

    def start_job(self, pod: Pod, job: Job) -> None:
        self.account(pod)
        job.state = "running"
        pod.jobs.append(job)
        pod.used += job.cpus if pod.partitionable else pod.cpus  # a static slot is claimed whole
        pod.used_memory += job.memory
        pod.used_gpus += job.gpus
        pod.ran_job = True
        self.unclaimed.pop(pod.id, None)
        self.at(self.now + job.duration, lambda: self.job_done(pod, job))

    def release(self, pod: Pod, job: Job) -> None:
        self.account(pod)
        pod.jobs.remove(job)
        pod.used -= job.cpus if pod.partitionable else pod.cpus
        pod.used_memory -= job.memory
        pod.used_gpus -= job.gpus
        if not pod.jobs:
            self.go_idle(pod)

    def job_done(self, pod: Pod, job: Job) -> None:
        if job.state != "running" or job not in pod.jobs:
            return
        job.state, job.end = "done", self.now
        self.release(pod, job)
        while self.claim(pod):  # the schedd reuses its claim for the next job that fits
            if not pod.partitionable:
                break

    def negotiate(self) -> None:
        for pod in sorted(self.unclaimed.values(), key=lambda p: p.id):
            while self.claim(pod):
                if not pod.partitionable:
                    break
        for pod in self.pods:  # partitionable pods with room left take more too
            if pod.partitionable and pod.state == "ready" and pod.jobs:
                while self.claim(pod):
                    pass


# ------------------------------------------------------------------------------------------------
# podgahp: its own provisioner, the model standing in for the schedds, the collector and the CE
# ------------------------------------------------------------------------------------------------

@dataclass
class CeJob:
    id: str
    group: str
    status: int = 1
    since: float = 0.0
    pod: Optional[Pod] = None


class ModelCe:
    """The CE's schedd as the provisioner sees it (pilots, submit, remove), over the model's pods."""

    def __init__(self, world: World, settings: ProvisionSettings) -> None:
        self.world, self.settings = world, settings
        self.jobs: Dict[str, CeJob] = {}
        self.clusters = 0

    def pilots(self) -> List[Pilot]:
        return [Pilot(j.id, j.group, j.status != 2, j.since, j.status == 5) for j in self.jobs.values()]

    def submit(self, group: Group, count: int) -> str:
        self.clusters += 1
        shape = group.shape
        extra = dict(group.extra).get("Project")
        for proc in range(count):
            ce = CeJob(f"{self.clusters}.{proc}", str(group), 1, self.world.now)
            self.jobs[ce.id] = ce

            def accepts(job: Job, shape: Any = shape, extra: Any = extra) -> bool:
                return (job.cpus <= shape.cpus and job.memory <= shape.memory_mb and job.gpus <= shape.gpus
                        and job.project == extra)

            pod = Pod(0, "podgahp", shape.cpus, shape.memory_mb, shape.gpus, accepts,
                      idle_exit_s=self.settings.pilot_idle_minutes * 60.0, label=str(group), ce_id=ce.id)
            pod.on_end, pod.on_start = self.pod_ended, self.pod_started
            ce.pod = self.world.create(pod, CE_ROUTE_S)
            self.world.at(self.world.now + CE_ROUTE_S + UNSCHEDULABLE_HOLD_S, lambda c=ce: self.hold(c))
        return str(self.clusters)

    def pod_started(self, pod: Pod) -> None:
        """The CE learns a pod runs CE_REPORT_S after it started."""
        def report() -> None:
            ce = self.jobs.get(pod.ce_id)
            if ce is not None and ce.pod is pod and ce.status == 1 and pod.state in ("booting", "ready"):
                ce.status, ce.since = 2, self.world.now
        self.world.at(self.world.now + CE_REPORT_S, report)

    def hold(self, ce: CeJob) -> None:
        if ce.id in self.jobs and ce.status == 1 and ce.pod is not None and ce.pod.state == "pending":
            ce.status, ce.since = 5, self.world.now
            pod, ce.pod = ce.pod, None
            self.world.delete(pod)

    def pod_ended(self, pod: Pod) -> None:
        ce = self.jobs.get(pod.ce_id)
        if ce is not None and ce.pod is pod:
            del self.jobs[pod.ce_id]

    def endings(self, job_ids: Sequence[str]) -> Dict[str, Any]:
        """The model keeps no job history: how a pilot ended is never known."""
        return {}

    def remove(self, pilots: Sequence[Pilot], reason: str) -> None:
        for pilot in pilots:
            ce = self.jobs.pop(pilot.job_id, None)
            if ce is not None and ce.pod is not None:
                self.world.delete(ce.pod)

    def slots(self, settings: ProvisionSettings) -> List[Any]:
        found = []
        for ce in self.jobs.values():
            pod = ce.pod
            if pod is None or pod.state != "ready":
                continue
            ad = {"PodgahpProvisioner": settings.name, "PodgahpGroup": pod.label, "PodgahpPilotId": ce.id,
                  "State": "Claimed" if pod.jobs else "Unclaimed", "SlotType": "Static",
                  "EnteredCurrentState": pod.idle_since if not pod.jobs else self.world.now,
                  "DaemonStartTime": pod.joined_at, "MyCurrentTime": self.world.now,
                  "LastHeardFrom": self.world.now}
            slot = slot_of(ad, self.world.now)
            if slot is not None:
                found.append(slot)
        return found


def podgahp(world: World, knobs: Dict[str, str]) -> None:
    values = {"PODGAHP_PROVISION_NAME": "bench", "PODGAHP_PROVISION_POOL": "pool.example:9618"}
    if world.scenario.group_by:
        values["PODGAHP_PROVISION_GROUP_BY"] = world.scenario.group_by
    values.update({f"PODGAHP_PROVISION_{k}": v for k, v in knobs.items()})
    settings = ProvisionSettings.from_knobs(Knobs(values))
    ce = ModelCe(world, settings)

    def read(s: ProvisionSettings) -> Tuple[List[Tuple[Dict[str, object], int]], List[str]]:
        tally: Dict[Tuple[Any, ...], int] = {}
        for job in world.waiting_jobs():
            attrs = dict(job.attrs)
            if s.group_by:
                attrs["Project"] = job.project
            row = tuple(sorted(attrs.items()))
            tally[row] = tally.get(row, 0) + 1
        return [(dict(row), n) for row, n in tally.items()], []

    provisioner = Provisioner(settings, ce, read, clock=lambda: world.now, slots=ce.slots)  # type: ignore[arg-type]
    world.every(settings.interval_s, provisioner.cycle, 1.0)


# ------------------------------------------------------------------------------------------------
# PRP: a model of its published algorithm
# ------------------------------------------------------------------------------------------------

PRP_DEFAULT_MEMORY = 4096.0


def prp(world: World, knobs: Dict[str, str]) -> None:
    max_pods, max_submit, period = 20, 1000, 120

    def key(job: Job) -> Tuple[Any, ...]:
        a = job.attrs
        memory = a.get("RequestMemory")
        return (a.get("RequestCpus"), PRP_DEFAULT_MEMORY if memory is None else memory,
                a.get("RequestGPUs") or 0, job.project)

    pods: Dict[Tuple[Any, ...], List[Pod]] = {}

    def cycle() -> None:
        idle: Dict[Tuple[Any, ...], int] = {}
        for job in world.waiting_jobs():
            idle[key(job)] = idle.get(key(job), 0) + 1
        for k, n in idle.items():
            alive = [p for p in pods.get(k, []) if p.state != "gone"]
            pods[k] = alive
            unclaimed = sum(1 for p in alive if p.state in ("creating", "pending", "starting", "booting")
                            or (p.state == "ready" and not p.jobs))
            want = 1 + n // 4
            if want > 20:
                want = 20 + (want - 20) // 4
            want = min(want, max_pods)
            if len(alive) >= max_submit:
                want = 0
            cpus, memory, gpus, project = k
            if not all(isinstance(v, (int, float)) for v in (cpus, memory, gpus)):
                continue  # the pod's resources are not quantities: the submission fails
            for _ in range(max(0, want - unclaimed)):
                def accepts(job: Job, k: Tuple[Any, ...] = k) -> bool:
                    a = job.attrs  # START: exactly the shape (an undefined request equals nothing)
                    return (a.get("RequestCpus"), a.get("RequestMemory"), a.get("RequestGPUs") or 0,
                            job.project) == k
                pod = Pod(0, "prp", float(cpus), float(memory), float(gpus), accepts, idle_exit_s=1200.0,
                          label=str(k))
                alive.append(world.create(pod, DIRECT_CREATE_S))

    world.every(period, cycle, 1.0)


# ------------------------------------------------------------------------------------------------
# COBalD/TARDIS: a model of its documented controller and drone life
# ------------------------------------------------------------------------------------------------

@dataclass
class Drone:
    pod: Pod
    demand: float
    supply: float = 0.0
    utilisation: float = 0.0
    allocation: float = 0.0


class Factory:
    """One machine type: LinearController -> Limiter -> FactoryPool of drones."""

    def __init__(self, world: World, cpus: int, memory: float, gpus: int, maximum: float) -> None:
        self.world, self.cpus, self.memory, self.gpus = world, cpus, memory, gpus
        self.maximum = maximum
        self.demand = 1.0
        self.hatchery: List[Drone] = []
        self.mortuary: List[Drone] = []

    def fitness(self, attribute: str) -> float:
        active = [d for d in self.hatchery + self.mortuary if d.supply > 0]
        if not active:
            return 1.0
        return sum(getattr(d, attribute) for d in active) / len(active)

    def control(self, dt: float) -> None:
        if self.fitness("utilisation") < 0.9:
            self.demand -= dt
        elif self.fitness("allocation") > 0.9:
            self.demand += dt
        self.demand = min(self.maximum, max(1.0, self.demand))

    def adjust(self) -> None:
        self.mortuary = [d for d in self.mortuary if d.pod.state != "gone"]
        self.hatchery = [d for d in self.hatchery if d.pod.state != "gone"]
        supply = sum(d.supply for d in self.hatchery + self.mortuary)
        if supply > self.demand:
            excess = sum(d.demand for d in self.hatchery) - self.demand
            for drone in sorted(self.hatchery, key=lambda d: d.supply * d.utilisation):
                if excess <= 0:
                    break
                if drone.demand <= excess:
                    excess -= drone.demand
                    self.release(drone)
        else:
            missing = self.demand - sum(d.demand for d in self.hatchery + self.mortuary)
            while missing > 0:
                pod = Pod(0, "cobald", self.cpus, self.memory, self.gpus, lambda job: True, partitionable=True)
                self.hatchery.append(Drone(self.world.create(pod, DIRECT_CREATE_S), float(self.cpus)))
                missing -= self.cpus

    def release(self, drone: Drone) -> None:
        drone.demand = 0.0
        self.hatchery.remove(drone)
        self.mortuary.append(drone)

    def heartbeat(self) -> None:
        for drone in self.hatchery + self.mortuary:
            pod = drone.pod
            if pod.state != "ready":
                drone.supply = 0.0
                continue
            if drone.demand == 0:
                drone.supply = 0.0
                pod.draining = True
                if not pod.jobs:
                    self.world.end(pod)
                continue
            used = [pod.used / pod.cpus, pod.used_memory / pod.memory] + ([pod.used_gpus / pod.gpus] if pod.gpus else [])
            drone.utilisation, drone.allocation, drone.supply = min(used), max(used), float(pod.cpus)


def cobald(world: World, knobs: Dict[str, str]) -> None:
    quota = float(world.scenario.cores)
    # machine types as an admin sets them for these jobs: 8 cores with 2 GiB each, and where jobs ask
    # for a GPU, 1 core, 4 GiB and 1 GPU
    factories = [Factory(world, 8, 8 * 2048.0, 0, quota)]
    if any(j.gpus for j in world.jobs):
        factories.append(Factory(world, 1, 4096.0, 1, quota))
    for factory in factories:
        world.every(10, lambda f=factory: f.control(10.0), 0.5)
        world.every(30, factory.adjust, 1.0)
        world.every(60, factory.heartbeat, 1.5)


# ------------------------------------------------------------------------------------------------
# The cluster-bound ideal
# ------------------------------------------------------------------------------------------------

def ideal(world: World, knobs: Dict[str, str]) -> None:
    mine: List[Pod] = []

    def cycle() -> None:
        alive = [p for p in mine if p.state != "gone"]
        mine[:] = alive
        covered: Dict[Any, int] = {}
        for pod in alive:
            if pod.state == "ready" and not pod.jobs and not world.waiting.get(pod.label):  # type: ignore[call-overload]
                world.end(pod)  # nothing waits for it
            elif pod.state != "ready" or not pod.jobs:
                covered[pod.label] = covered.get(pod.label, 0) + 1
        for key, queue in list(world.waiting.items()):
            runnable = sum(1 for j in queue if j.matches and j.runnable)
            for _ in range(runnable - covered.get(key, 0)):
                cpus, memory, gpus, project = key

                def accepts(job: Job, key: Tuple[Any, ...] = key) -> bool:
                    return World.key(job) == key
                pod = Pod(0, "ideal", cpus, memory, gpus, accepts, label=key)  # type: ignore[arg-type]
                mine.append(world.create(pod, 0.0))

    world.every(5, cycle, 0.0)


PROVISIONERS: Dict[str, Callable[[World, Dict[str, str]], None]] = {
    "podgahp": podgahp, "PRP": prp, "COBalD": cobald, "ideal": ideal}


# ------------------------------------------------------------------------------------------------
# Scenarios
# ------------------------------------------------------------------------------------------------

def jobs(count: int, cpus: float = 1, memory: float = 2048, gpus: float = 0, minutes: float = 6,
         at: float = 0.0, project: Optional[str] = None, attrs: Optional[Dict[str, object]] = None,
         matches: bool = True, runnable: bool = True, spread_s: float = 0.0, seed: int = 0) -> List[Job]:
    rng = random.Random(seed)
    shown = attrs if attrs is not None else {"RequestCpus": cpus, "RequestMemory": memory,
                                             **({"RequestGPUs": gpus} if gpus else {})}
    return [Job(0, math.ceil(cpus), math.ceil(memory), math.ceil(gpus),
                minutes * 60 * rng.uniform(0.9, 1.1), at + rng.uniform(0, spread_s), dict(shown), project,
                matches, runnable) for _ in range(count)]


def scenarios() -> List[Scenario]:
    made = [
        Scenario("S1", "burst: 1,000 identical 1-core jobs, room for 2,000 cores", jobs(1000), cores=2000),
        Scenario("S2", "three shapes: 600 x 1 core, 100 x 8 cores, 50 x 1 GPU", jobs(600, seed=1)
                 + jobs(100, cpus=8, memory=16384, minutes=20, seed=2)
                 + jobs(50, cpus=1, memory=4096, gpus=1, minutes=10, seed=3), cores=2000, gpus=32),
        Scenario("S3", "200 GPU jobs, no GPU in the cluster",
                 jobs(200, gpus=1, runnable=False), cores=2000, gpus=0),
        Scenario("S4", "500 jobs, 60 cores, all removed at minute 10", jobs(500, minutes=30), cores=60,
                 removals=(600.0,)),
        Scenario("S5", "100 jobs that never match the pilots", jobs(100, matches=False, runnable=False),
                 cores=2000),
        Scenario("S6", "40 groups x 50 jobs", [j for g in range(40) for j in
                                                jobs(50, project=f"p{g:02d}", minutes=20, seed=g)],
                 cores=2000, group_by="Project"),
        Scenario("S7", "odd requests: 2.0, 2.5, 100,000 cores, no memory, memory a string",
                 jobs(50, cpus=2.0, seed=1) + jobs(50, cpus=2.5, seed=2)
                 + jobs(10, attrs={"RequestCpus": 100000, "RequestMemory": 2048}, runnable=False)
                 + jobs(50, attrs={"RequestCpus": 1}, runnable=False)
                 + jobs(10, attrs={"RequestCpus": 1, "RequestMemory": "lots"}, runnable=False), cores=2000),
        Scenario("waves", "5 waves of 200 jobs, one every 40 minutes",
                 [j for w in range(5) for j in jobs(200, at=w * 2400.0, spread_s=120, seed=w)], cores=2000),
        Scenario("filling", "1,000 jobs of 20 min, others take 1,600 of 2,000 cores in the first hour, "
                 "500 more jobs at 1 h", jobs(1000, minutes=20) + jobs(500, minutes=20, at=3600.0, seed=1),
                 cores=2000, tenants=[(t * 300.0, int(1600 * t / 12)) for t in range(1, 13)]),
        Scenario("black hole", "pilots fail at start for the first hour; 300 jobs",
                 jobs(300, seed=4), cores=2000, black_hole_until=3600.0),
        Scenario("starving", "one group's 3,000 jobs of 30 min, another's 100 arrive at 10 min",
                 jobs(3000, minutes=30, project="big") + jobs(100, cpus=4, memory=8192, minutes=10, at=600.0,
                                                              project="late", seed=5),
                 cores=2000, group_by="Project", late="late"),
    ]
    for scenario in made:
        for number, job in enumerate(scenario.jobs):
            job.id = number
    return made


# ------------------------------------------------------------------------------------------------
# Figures
# ------------------------------------------------------------------------------------------------

@dataclass
class Figures:
    drain_s: Optional[float]
    left: int
    pods: int
    no_job: int
    idle_core_h: float
    peak_pending: int
    long_pending: int = 0
    """Pods that waited more than LONG_PENDING_S to be placed."""
    late_drain_s: Optional[float] = None
    seconds: float = 0.0


def drain(jobs: Sequence[Job]) -> Tuple[Optional[float], int]:
    counted = [j for j in jobs if j.runnable and j.state != "removed" and j.matches]
    left = sum(1 for j in counted if j.state != "done")
    if left or not counted:
        return None, left
    return max(j.end for j in counted), 0


def run(scenario: Scenario, provisioner: str, knobs: Dict[str, str]) -> Figures:
    started = time.process_time()
    for job in scenario.jobs:
        job.state, job.end = "future", 0.0
    world = World(scenario)
    PROVISIONERS[provisioner](world, knobs)
    world.run()
    for pod in world.pods:
        world.placed(pod)
    drained, left = drain(scenario.jobs)
    late = None
    if scenario.late:
        late, _ = drain([j for j in scenario.jobs if j.project == scenario.late])
    return Figures(drained, left, len(world.pods), sum(1 for p in world.pods if not p.ran_job),
                   world.idle_core_s / 3600, world.peak_pending,
                   sum(1 for p in world.pods if p.pending_s > LONG_PENDING_S), late, time.process_time() - started)


def minutes(seconds: Optional[float], left: int = 0) -> str:
    if seconds is None:
        return f"— ({left} left)" if left else "—"
    return f"{seconds / 60:.1f} min"


def table(results: Dict[str, Dict[str, Figures]], chosen: Sequence[Scenario], names: Sequence[str]) -> str:
    lines = ["| scenario | provisioner | drain | pods created | pods that never ran a job | idle core-hours "
             f"| peak pending | pending > {LONG_PENDING_S // 60} min |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for scenario in chosen:
        for name in names:
            f = results[scenario.name][name]
            drained = minutes(f.drain_s, f.left)
            if f.late_drain_s is not None or scenario.late:
                drained += f" (late group {minutes(f.late_drain_s)})"
            lines.append(f"| {scenario.name} | {name} | {drained} | {f.pods:,} | {f.no_job:,} | "
                         f"{f.idle_core_h:,.1f} | {f.peak_pending:,} | {f.long_pending:,} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", nargs="+", help="scenario names (default: all)")
    parser.add_argument("--provisioner", nargs="+", default=list(PROVISIONERS), choices=list(PROVISIONERS))
    parser.add_argument("--knob", action="append", default=[],
                        help="a podgahp knob without its PODGAHP_PROVISION_ prefix, NAME=VALUE (repeatable)")
    args = parser.parse_args()
    logging.getLogger("gahp").setLevel(logging.CRITICAL)
    knobs = dict(item.split("=", 1) for item in args.knob)
    chosen = [s for s in scenarios() if not args.scenario or s.name in args.scenario]
    results: Dict[str, Dict[str, Figures]] = {}
    for scenario in chosen:
        for name in args.provisioner:
            results.setdefault(scenario.name, {})[name] = run(scenario, name, knobs)
    print(f"Model world, {HORIZON_S // 3600} h per scenario; podgahp knobs: "
          f"{', '.join(args.knob) if args.knob else 'its defaults'}")
    for scenario in chosen:
        print(f"  {scenario.name}: {scenario.what}")
    print(table(results, chosen, args.provisioner))
    s1 = results.get("S1", {})
    if "podgahp" in s1 and "ideal" in s1 and s1["podgahp"].drain_s and s1["ideal"].drain_s:
        peers = [s1[n].drain_s for n in ("PRP", "COBalD") if n in s1 and s1[n].drain_s]
        print(f"S1: podgahp drains in {s1['podgahp'].drain_s / s1['ideal'].drain_s:.2f}x the cluster-bound ideal"
              + (f", {min(peers) / s1['podgahp'].drain_s:.1f}x faster than the fastest peer" if peers else ""))
    for name in ("S4", "S5"):
        row = results.get(name, {})
        peers = [row[n].idle_core_h for n in ("PRP", "COBalD") if n in row]
        if "podgahp" in row and peers:
            print(f"{name}: podgahp {row['podgahp'].idle_core_h:.1f} idle core-hours, the most frugal peer "
                  f"{min(peers):.1f}")
    cpu = sum(f.seconds for r in results.values() for f in r.values())
    print(f"(model CPU time {cpu:.1f} s)")


if __name__ == "__main__":
    main()
