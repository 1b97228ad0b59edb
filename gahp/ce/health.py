"""``podgahp health``: the GAHPs' counters and black-hole states of this CE added up
(:mod:`gahp.rules.figures`), with the remote jobs per queue and state of every backend's census
(:mod:`gahp.ce.views`), and the figures written for a Prometheus textfile collector.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Tuple

from gahp.backends.base import Census
from gahp.ce.reap import ReapResult
from gahp.ce.views import ReapSettings, ce_views, take_censuses
from gahp.core.config import Knobs
from gahp.core.errors import GahpError
from gahp.core.schedd import grid_jobs
from gahp.rules.blackhole import GuardSettings
from gahp.rules.figures import CeHealth, gather, prometheus_text, write_shared

log = logging.getLogger(__name__)


def census_health(knobs: Knobs, censuses: List[Census], ce_names: Dict[str, str]) -> CeHealth:
    """The GAHPs' counters and black-hole states of this CE, every backend's, with the remote jobs per
    queue and state just listed; every configured queue has its series, 0 while it has no job."""
    guard = GuardSettings.from_knobs(knobs)
    total = CeHealth()
    for census in censuses:
        jobs: Dict[str, Dict[str, int]] = {q: {} for q in census.queues}
        for job in census.jobs:
            states = jobs.setdefault(job.queue or "?", {})
            if job.health:
                states[job.health] = states.get(job.health, 0) + 1
        part = gather(guard.state_dir, ce_names.get(census.backend, ""), census.backend, jobs,
                      max_closed_s=guard.backoff_max_s)
        total.gahps += part.gahps
        for key, value in part.counters.items():
            total.counters[key] = total.counters.get(key, 0) + value
        for queue, states in part.pods.items():
            into = total.pods.setdefault(queue, {})
            for state, n in states.items():
                into[state] = into.get(state, 0) + n
        total.blackholes.update(part.blackholes)
    return total


def ce_health(knobs: Knobs) -> Tuple[CeHealth, List[str], str]:
    """``podgahp health``: the figures, what could not be listed, and the CE's name (for the metrics'
    label: the first backend's, Kubernetes' where the CE uses it)."""
    settings = ReapSettings.from_knobs(knobs)
    try:
        held = grid_jobs(settings.schedd_name, settings.schedd_pool).job_ids
    except GahpError as e:
        log.info("health: the schedd's grid jobs are not known (%s): only remote jobs shown to be this CE's "
                 "by their backend are counted", e)
        held = frozenset()
    with ce_views(knobs) as views:
        censuses = take_censuses(views, held)
        names = {v.backend: v.ce_name for v in views}
    return (census_health(knobs, censuses, names), [e for c in censuses for e in c.errors],
            next(iter(names.values()), ""))


def publish_prometheus(knobs: Knobs, health: CeHealth, result: ReapResult, ce_name: str) -> None:
    """Write ``PODGAHP_PROMETHEUS_FILE`` (when set) for a textfile collector."""
    path = knobs.optional("PODGAHP_PROMETHEUS_FILE")
    if not path:
        return
    text = prometheus_text(health, ce_name, [
        ("podgahp_reap_pods", "Remote jobs (pods, Lancium jobs) of this CE seen by the last clean-up pass",
         result.jobs),
        ("podgahp_reap_orphans", "Orphan remote jobs found by the last clean-up pass", result.orphans),
        ("podgahp_reap_deleted", "Orphan remote jobs deleted by the last clean-up pass", result.deleted),
        ("podgahp_reap_errors", "Errors of the last clean-up pass", len(result.errors)),
        ("podgahp_reap_api_requests", "API requests of the last clean-up pass", result.requests)])
    write_shared(path, text)
