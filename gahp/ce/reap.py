"""``podgahp reap``, ``q`` and ``health``: the CE-wide views, over every backend the CE uses.

Each backend of the registry that declares a :class:`~gahp.backends.base.CeView` and is configured at
this CE gives its census: every remote job of this CE, all users, in every place its configuration
names (each cluster and namespace of the Kubernetes queues; the Lancium account). Then

* ``podgahp reap``, run by the CE's own condor as a schedd cron job (``50-podgahp-reap-defaults.conf``)
  with the CE's configuration, asks the schedd which grid jobs exist and deletes the remote jobs no
  grid job holds, by the rules of :mod:`gahp.ce.orphans` (if the schedd cannot be asked, or its answer
  cannot be shown to be whole, nothing is deleted), and writes where each routed pilot is into its job
  ad, from the same query and census (:mod:`gahp.ce.jobads`: ``condor_ce_q -pr podgahp.cpf`` shows it).
  Its output is ClassAd attributes, which the schedd merges into its own ad (``condor_ce_status
  -schedd -l`` shows them), with the health figures;
* ``podgahp q`` joins the routed grid jobs with their remote jobs (:mod:`gahp.ce.q`);
* ``podgahp health`` adds the GAHPs' counters and black-hole states up (:mod:`gahp.rules.figures`) with
  the remote jobs per queue and state.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from contextlib import contextmanager

from gahp.core import plugins
from gahp.backends import backend_class
from gahp.backends.base import Census, CeView, RemoteJob
from gahp.rules.blackhole import GuardSettings
from gahp.core.config import Knobs
from gahp.core.errors import GahpError
from gahp.rules.figures import CeHealth, gather
from gahp.ce.jobads import READ as JOB_AD_READS, Editor, JobAdSettings, Written, plan as job_ad_plan, write as write_job_ads
from gahp.core.logs import printable
from gahp.ce.orphans import REAP_MAX_DELETES, plan
from gahp.ce.q import JOB_ATTRIBUTES, PilotRow, join
from gahp.core.schedd import (GRID_UNIVERSE, SCHEDD_KNOBS, GridJobs, ScheddUnavailable, edit_jobs, gahp_job_ids, gahp_type,
                          grid_jobs, query)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReapSettings:
    schedd_name: Optional[str]
    """``PODGAHP_REAP_SCHEDD_NAME``: schedd holding the routed jobs; default ``$(JOB_ROUTER_SCHEDD2_NAME)``,
    empty = the local schedd."""
    schedd_pool: Optional[str]
    """``PODGAHP_REAP_SCHEDD_POOL``: its collector; default ``$(JOB_ROUTER_SCHEDD2_POOL)``."""
    grace_s: int = 600
    """``PODGAHP_REAP_GRACE_SECONDS``: a remote job no grid job holds is deleted once it is this old (one
    made by a submit whose answer has not reached the schedd yet is younger)."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> "ReapSettings":
        return cls(schedd_name=knobs.optional("PODGAHP_REAP_SCHEDD_NAME") or knobs.optional("JOB_ROUTER_SCHEDD2_NAME"),
                   schedd_pool=knobs.optional("PODGAHP_REAP_SCHEDD_POOL") or knobs.optional("JOB_ROUTER_SCHEDD2_POOL"),
                   grace_s=knobs.integer("PODGAHP_REAP_GRACE_SECONDS", 600, minimum=0))


@dataclass
class ReapResult:
    """What one pass saw and did (printed for the schedd's ad by ``podgahp reap``)."""

    jobs: int = 0
    """Remote jobs of this CE listed, every backend."""
    orphans: int = 0
    deleted: int = 0
    errors: List[str] = field(default_factory=list)
    requests: int = 0
    """Requests sent to the services (listing and deleting)."""
    censuses: List[Census] = field(default_factory=list)
    ce_names: Dict[str, str] = field(default_factory=dict)
    """Backend -> the CE's name for its remote jobs."""
    job_ads: Written = field(default_factory=Written)
    """The job-ad attributes written (:mod:`gahp.ce.jobads`)."""


@contextmanager
def ce_views(knobs: Knobs) -> Iterator[List[CeView]]:
    """The views of every backend this CE uses; closed when the block ends. A backend whose package is
    not installed (an RPM subpackage left out) or that is not configured here is left out; one whose
    configuration is wrong raises its ConfigError."""
    views: List[CeView] = []
    try:
        for name in plugins.backend_names():
            try:
                cls = backend_class(name)
            except ImportError as e:
                log.debug("backend %s is not installed: %s", name, e)
                continue
            view = cls.ce_view(knobs)
            if view is not None:
                views.append(view)
        yield views
    finally:
        for view in views:
            view.close()


def _censuses(views: List[CeView], held: FrozenSet[str]) -> List[Census]:
    censuses = []
    for view in views:
        try:
            censuses.append(view.census(held))
        except GahpError as e:
            censuses.append(Census(view.backend, errors=[f"{view.backend}: {e}"]))
    return censuses


def reap(knobs: Optional[Knobs] = None, dry_run: bool = False) -> ReapResult:
    """One pass; raises GahpError (ScheddUnavailable, ConfigError) before any delete when it cannot know."""
    knobs = knobs or Knobs()
    settings = ReapSettings.from_knobs(knobs)
    ads = JobAdSettings.from_knobs(knobs)
    with ce_views(knobs) as views:
        try:
            grid = grid_jobs(settings.schedd_name, settings.schedd_pool, JOB_AD_READS if ads.enabled else ())
        except ScheddUnavailable as e:
            raise type(e)(f"{e} {SCHEDD_KNOBS}") from e

        def edit(jobs: Sequence[str], attribute: str, expression: str) -> int:
            return edit_jobs(jobs, attribute, expression, settings.schedd_name, settings.schedd_pool)

        result = reap_views(views, grid, settings.grace_s, dry_run, ads, edit)
    log.info("reap: %d remote jobs, %d orphans, %d deleted, %d errors, %d requests; job ads: %d written in %d "
             "transactions, %d left for the next pass", result.jobs, result.orphans, result.deleted,
             len(result.errors), result.requests, result.job_ads.jobs, result.job_ads.transactions,
             result.job_ads.deferred)
    return result


def reap_views(views: List[CeView], grid: GridJobs, grace_s: float, dry_run: bool = False,
               job_ads: JobAdSettings = JobAdSettings(enabled=False), edit: Optional[Editor] = None) -> ReapResult:
    """One pass over ``views`` (every backend's census) given the schedd's answer ``grid``: the orphans
    of :func:`gahp.ce.orphans.plan` deleted, or nothing anywhere when the plan refuses; with ``job_ads``
    enabled, the attributes of :mod:`gahp.ce.jobads` written through ``edit`` to the jobs of ``grid.ads``
    (not in a dry run)."""
    result = ReapResult(censuses=_censuses(views, grid.job_ids), ce_names={v.backend: v.ce_name for v in views})
    for census in result.censuses:
        result.jobs += len(census.jobs)
        result.errors.extend(census.errors)
    decided = plan([j for c in result.censuses for j in c.jobs], grid, grace_s,
                   ", ".join(sorted({v.ce_name for v in views})))
    result.orphans = len(decided.orphans)
    result.errors.extend(decided.skipped)
    if decided.refused:
        log.error("reap: %s", decided.refused)
        result.errors.append(decided.refused)
    else:
        view_of = {id(j): v for v, c in zip(views, result.censuses) for j in c.jobs}
        for job in decided.orphans[:REAP_MAX_DELETES]:
            _delete(view_of[id(job)], job, dry_run, result)
    result.requests = sum(v.requests for v in views)
    if job_ads.enabled:
        _write_job_ads(views, grid, result, job_ads.max_jobs, None if dry_run else edit)
    return result


def _write_job_ads(views: List[CeView], grid: GridJobs, result: ReapResult, max_jobs: int,
                   edit: Optional[Editor]) -> None:
    """The attributes of :mod:`gahp.ce.jobads` for the census of this pass, written through ``edit``."""
    edits, deferred = job_ad_plan(grid.ads, [j for c in result.censuses for j in c.jobs],
                                  [v.backend for v in views], max_jobs)
    result.job_ads = write_job_ads(edits, deferred, edit)
    result.errors.extend(result.job_ads.errors)


def _delete(view: CeView, job: RemoteJob, dry_run: bool, result: ReapResult) -> None:
    if dry_run:
        log.info("[%s] orphan (its job no longer exists); not deleted (dry run)", job.job_id)
        return
    try:
        view.delete(job)
        log.info("[%s] orphan deleted: its job no longer exists in the schedd", job.job_id)
        result.deleted += 1
    except GahpError as e:
        result.errors.append(f"{job.job_id}: {printable(str(e))[:300]}")


def classad_lines(result: ReapResult) -> List[str]:
    """The pass as ``Attr = value`` lines for a schedd cron job (its PREFIX is prepended)."""
    lines = [f"Pods = {result.jobs}", f"Orphans = {result.orphans}", f"Deleted = {result.deleted}",
             f"Errors = {len(result.errors)}", f"ApiRequests = {result.requests}",
             f"JobAdsWritten = {result.job_ads.jobs}", f"JobAdTransactions = {result.job_ads.transactions}"]
    if result.errors:
        first = printable(result.errors[0][:500]).replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'LastError = "{first}"')
    return lines


def pilots(knobs: Optional[Knobs] = None) -> Tuple[List[PilotRow], List[str]]:
    """``podgahp q``: the routed grid jobs of the CE's schedd for podgahp's backends, joined with this
    CE's remote jobs, and what could not be listed. Raises GahpError when the schedd cannot be asked."""
    knobs = knobs or Knobs()
    settings = ReapSettings.from_knobs(knobs)
    names = set(plugins.backend_names())
    try:
        ads = [ad for ad in query(GRID_UNIVERSE, JOB_ATTRIBUTES, settings.schedd_name, settings.schedd_pool)
               if gahp_type(ad.get("GridResource")) in names]
    except ScheddUnavailable as e:
        raise ScheddUnavailable(f"{e} {SCHEDD_KNOBS}") from e
    held = frozenset(w for ad in ads for w in gahp_job_ids(ad.get("GridJobId"))[:1])
    with ce_views(knobs) as views:
        censuses = _censuses(views, held)
    errors = [e for c in censuses for e in c.errors]
    covered = {c.backend for c in censuses}
    for backend in sorted({gahp_type(ad.get("GridResource")) or "" for ad in ads} - covered):
        errors.append(f"{backend}: its remote jobs are not listed: the backend is not installed or not configured "
                      f"at this CE")
    now = datetime.datetime.now(datetime.timezone.utc)
    return join(ads, [j for c in censuses for j in c.jobs], now), errors


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
        censuses = _censuses(views, held)
        names = {v.backend: v.ce_name for v in views}
    return (census_health(knobs, censuses, names), [e for c in censuses for e in c.errors],
            next(iter(names.values()), ""))


def publish_prometheus(knobs: Knobs, health: CeHealth, result: ReapResult, ce_name: str) -> None:
    """Write ``PODGAHP_PROMETHEUS_FILE`` (when set) for a textfile collector."""
    from gahp.rules.figures import prometheus_text, write_shared

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
