"""Demand: the idle jobs of the user pool that pilots may run, read with the htcondor bindings
from every schedd its collector knows, grouped by :mod:`gahp.provision.shape`."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from gahp.core.errors import GahpError
from gahp.provision.settings import SHAPE_ATTRIBUTES, ProvisionSettings
from gahp.provision.shape import INVALID, Group, Shape, fits, group_of, pilots_for

log = logging.getLogger(__name__)

#: Idle jobs only, never a pilot (a provisioner's own, or a job a CE routed).
BASE_CONSTRAINT = "JobStatus == 1 && JobUniverse =!= 9 && PodgahpProvisioner =?= undefined"


class DemandUnknown(GahpError):
    """No schedd of the pool could be asked: nothing may be submitted on a guess."""


@dataclass
class Demand:
    groups: Dict[Group, int] = field(default_factory=dict)
    """Waiting jobs per group (shaped pilots), or pilots wanted for the one pilot shape (partitionable)."""
    waiting: Dict[Group, int] = field(default_factory=dict)
    """Waiting jobs per group, either kind."""
    jobs: int = 0
    unusable: int = 0
    """Idle jobs whose shape could not be read, or that no pilot could hold."""
    deferred_groups: int = 0
    """Groups beyond ``MAX_GROUPS`` (the ones with fewest jobs waiting): not served this cycle."""
    deferred: int = 0
    """Their jobs."""


def constraint(settings: ProvisionSettings) -> str:
    return f"{BASE_CONSTRAINT} && ({settings.job_filter})"


#: Attributes HTCondor's default requests refer to (``RequestMemory`` from ``MemoryUsage`` or
#: ``ImageSize``, ``RequestDisk`` from ``DiskUsage``): read with the job so that its requests evaluate as
#: in the schedd, not tallied (they differ from job to job).
REFERENCED = ("MemoryUsage", "ImageSize", "DiskUsage", "ExecutableSize", "TransferInputSizeMB")


def value_of(ad: Any, name: str) -> object:
    """An attribute of a job ad as demand reads it: None when the job does not have it (or, for a
    GROUP_BY attribute, when it evaluates to ``undefined``), :data:`INVALID` when it evaluates to
    ``error``, to a list or an ad, or — a request — to ``undefined``; else its value.

    ``classad2.Value`` (undefined, error) is an ``IntEnum``: taken as a number, ``RequestMemory =
    MemoryUsage * 2`` of an idle job would read as 2 (MiB)."""
    import classad2

    if name not in ad:
        return None
    try:
        value = ad.eval(name)
    except Exception:  # noqa: BLE001 - an expression a job owner wrote may not evaluate
        return INVALID
    if isinstance(value, classad2.Value):
        return None if value == classad2.Value.Undefined and name not in SHAPE_ATTRIBUTES else INVALID
    return value if isinstance(value, (str, int, float, bool)) else INVALID


def tally(ads: Iterable[Any], names: Sequence[str]) -> "Counter[Tuple[object, ...]]":
    """How many jobs have each distinct set of values of ``names``."""
    return Counter(tuple(value_of(ad, a) for a in names) for ad in ads)


#: Jobs as read: the distinct value sets of the projected attributes, each with how many jobs have it
#: (thousands of jobs of a few shapes take a few entries).
Jobs = List[Tuple[Dict[str, object], int]]


def read_jobs(settings: ProvisionSettings) -> Tuple[Jobs, List[str]]:
    """(the idle jobs' distinct attribute values with their counts, names of schedds that failed);
    DemandUnknown when the collector or every schedd fails."""
    import htcondor2

    names = list(dict.fromkeys(SHAPE_ATTRIBUTES + settings.group_by))
    projection = list(dict.fromkeys(names + list(REFERENCED)))
    try:
        collector = htcondor2.Collector(settings.pool) if settings.pool else htcondor2.Collector()
        schedds = collector.locateAll(htcondor2.DaemonType.Schedd)
    except Exception as e:  # noqa: BLE001 - the bindings raise several kinds
        raise DemandUnknown(f"the collector of {settings.pool or 'the local pool'} cannot be asked: {e} "
                            "(the pool is PODGAHP_PROVISION_POOL, default the local COLLECTOR_HOST)") from e
    counts: "Counter[Tuple[object, ...]]" = Counter()
    failed: List[str] = []
    for location in schedds:
        name = str(location.get("Name", "?"))
        try:
            ads = htcondor2.Schedd(location).query(constraint=constraint(settings), projection=projection,
                                                   limit=settings.max_jobs_read)
            # counted apart, so that a schedd failing half-way counts for nothing
            these = tally(ads, names)
        except Exception as e:  # noqa: BLE001
            log.warning("schedd %s cannot be asked for idle jobs: %s", name, e)
            failed.append(name)
        else:
            counts.update(these)
    if schedds and len(failed) == len(schedds):
        raise DemandUnknown(f"no schedd of {settings.pool or 'the local pool'} could be asked ({', '.join(failed)})")
    return [(dict(zip(names, values)), n) for values, n in counts.items()], failed


def group_jobs(jobs: Iterable[Tuple[Mapping[str, object], int]], settings: ProvisionSettings) -> Demand:
    """Demand of jobs given as (attribute values, how many jobs have them)."""
    demand = Demand()
    if settings.kind == "partitionable":
        pilot = settings.partitionable
        total = [0, 0, 0, 0]
        for job, count in jobs:
            demand.jobs += count
            group = group_of(job, ())
            if group is None or not fits(group.shape, pilot):
                demand.unusable += count
                continue
            for i, value in enumerate((group.shape.cpus, group.shape.memory_mb, group.shape.gpus,
                                       group.shape.disk_kb)):
                total[i] += value * count
        if total[0]:
            group = Group(pilot)
            demand.groups[group] = pilots_for(Shape(*total), pilot)
            demand.waiting[group] = demand.jobs - demand.unusable
        return demand
    for job, count in jobs:
        demand.jobs += count
        found: Optional[Group] = group_of(job, settings.group_by)
        if found is None:
            demand.unusable += count
            continue
        demand.groups[found] = demand.groups.get(found, 0) + count
    if len(demand.groups) > settings.max_groups:
        # a flood of distinct shapes or values costs one pilot decision per group: serve the largest
        ranked = sorted(demand.groups.items(), key=lambda item: (-item[1], str(item[0])))
        demand.groups = dict(ranked[:settings.max_groups])
        demand.deferred_groups = len(ranked) - settings.max_groups
        demand.deferred = sum(n for _, n in ranked[settings.max_groups:])
    demand.waiting = dict(demand.groups)
    return demand
