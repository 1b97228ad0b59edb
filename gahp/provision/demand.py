"""Demand: the idle jobs of the user pool that pilots may run, read with the htcondor bindings
from every schedd its collector knows, grouped by :mod:`gahp.provision.shape`."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from gahp.errors import GahpError
from gahp.provision.settings import SHAPE_ATTRIBUTES, ProvisionSettings
from gahp.provision.shape import Group, Shape, fits, group_of, pilots_for

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


def constraint(settings: ProvisionSettings) -> str:
    return f"{BASE_CONSTRAINT} && ({settings.job_filter})"


def _scalar(ad: Any, name: str) -> object:
    try:
        value = ad.eval(name)
    except Exception:  # noqa: BLE001 - an expression a job owner wrote may not evaluate
        return None
    return value if isinstance(value, (str, int, float, bool)) else None


#: Jobs as read: the distinct value sets of the projected attributes, each with how many jobs have it
#: (thousands of jobs of a few shapes take a few entries).
Jobs = List[Tuple[Dict[str, object], int]]


def read_jobs(settings: ProvisionSettings) -> Tuple[Jobs, List[str]]:
    """(the idle jobs' distinct attribute values with their counts, names of schedds that failed);
    DemandUnknown when the collector or every schedd fails."""
    import htcondor2

    projection = list(dict.fromkeys(SHAPE_ATTRIBUTES + settings.group_by))
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
            these = Counter(tuple(_scalar(ad, a) for a in projection) for ad in ads)
        except Exception as e:  # noqa: BLE001
            log.warning("schedd %s cannot be asked for idle jobs: %s", name, e)
            failed.append(name)
        else:
            counts.update(these)
    if schedds and len(failed) == len(schedds):
        raise DemandUnknown(f"no schedd of {settings.pool or 'the local pool'} could be asked ({', '.join(failed)})")
    return [(dict(zip(projection, values)), n) for values, n in counts.items()], failed


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
    demand.waiting = dict(demand.groups)
    return demand
