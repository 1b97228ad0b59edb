"""``podgahp reap``: remote jobs no grid job holds deleted, and where each routed pilot is written into its
job ad, over every backend the CE uses.

Run by the CE's own condor as a schedd cron job (``50-podgahp-reap-defaults.conf``) with the CE's
configuration, it asks the schedd which grid jobs exist and deletes the remote jobs no grid job holds,
by the rules of :mod:`gahp.ce.orphans` (if the schedd cannot be asked, or its answer cannot be shown to
be whole, nothing is deleted), and writes where each routed pilot is into its job ad, from the same
query and census (:mod:`gahp.ce.jobads`: ``condor_ce_q -pr podgahp.cpf`` shows it). Its output is
ClassAd attributes, which the schedd merges into its own ad (``condor_ce_status -schedd -l`` shows
them), with the health figures (:mod:`gahp.ce.health`). The censuses are :mod:`gahp.ce.views`'.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from gahp.backends.base import Census, CeView, RemoteJob
from gahp.ce.jobads import READ as JOB_AD_READS, Editor, JobAdSettings, Written, plan as job_ad_plan, write as write_job_ads
from gahp.ce.orphans import REAP_MAX_DELETES, plan
from gahp.ce.views import ReapSettings, ce_views, take_censuses
from gahp.core.config import Knobs
from gahp.core.errors import GahpError
from gahp.core.logs import printable
from gahp.core.schedd import SCHEDD_KNOBS, GridJobs, ScheddUnavailable, edit_jobs, grid_jobs

log = logging.getLogger(__name__)


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
    result = ReapResult(censuses=take_censuses(views, grid.job_ids), ce_names={v.backend: v.ce_name for v in views})
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
