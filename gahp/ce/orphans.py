"""Orphans: remote jobs of this CE whose HTCondor job no longer exists, whatever the backend and whatever
the path that left them (a cancel that failed for good, a submit that timed out after the service had
made the job, a schedd restored from a backup, a GAHP that was not running). ``podgahp reap`` asks the
schedd which jobs exist (:func:`gahp.core.schedd.grid_jobs`, which refuses an answer it cannot show to be
whole), takes each backend's census (:class:`gahp.backends.base.CeView`) and deletes what
:func:`plan`, a pure function, finds.

It fails safe: a remote job is deleted only when every rule below says so, and a pass that finds a
reason to doubt its inputs deletes nothing, in any backend, and says why (an error line, a non-zero
exit):

* the job's id is named by no grid job's ``GridJobId`` (whatever its ``GridResource`` spelling: the
  gridmanager accepts ``batch K8S``);
* the job is older than the grace period, on the clock it was listed by (the service's own where it
  says: it stamped the creation time, the reaper's clock may be off); a job whose age cannot be
  measured is kept;
* its sandbox id (which the gridmanager builds from the schedd's name and the job's ``GlobalJobId``)
  names a job of the schedd that was asked; a job of another schedd means that another CE labels its
  jobs with this CE's name, and the whole pass is refused;
* the schedd's answer holds at least one grid job, or none of the CE's remote jobs is pending or
  running: an empty queue while pilots run is far likelier a wrong answer than every job gone at once.

At most :data:`REAP_MAX_DELETES` jobs are deleted in one pass (the rest wait for the next).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional

from gahp.backends.base import RemoteJob
from gahp.core.schedd import GridJobs

#: Most orphans deleted in one pass.
REAP_MAX_DELETES = 500

#: The end of a sandbox id: ``_<cluster>.<proc>_<QDate>`` (from ``GlobalJobId``).
_SANDBOX_END = re.compile(r"_([0-9]+)\.([0-9]+)_([0-9]+)$")


@dataclass(frozen=True)
class Plan:
    """What a pass may delete, or why it deletes nothing."""

    orphans: List[RemoteJob]
    refused: Optional[str] = None
    """Set when the pass must delete nothing; says why (the orphans are what it would have deleted)."""
    skipped: List[str] = field(default_factory=list)
    """Jobs kept although no grid job holds them, with the reason (each an error of the pass)."""


def made_by(sandbox_id: str, schedd_name: str) -> bool:
    """Whether the gridmanager of schedd ``schedd_name`` made ``sandbox_id`` (``<collector host>_<its
    GlobalJobId with @ and # as _>``: the schedd's name, then the job's id and QDate)."""
    end = _SANDBOX_END.search(sandbox_id)
    if end is None or not schedd_name:
        return False
    name = schedd_name.replace("@", "_").replace("#", "_")
    return sandbox_id.endswith(f"_{name}{end.group(0)}") and len(sandbox_id) > len(name) + len(end.group(0)) + 1


def plan(jobs: Iterable[RemoteJob], grid: GridJobs, grace_s: float, ce_name: str = "") -> Plan:
    """The orphans among ``jobs`` (every backend's census of this pass), by the rules of this module."""
    listed = list(jobs)
    kinds: Dict[str, List[RemoteJob]] = {"kept": [], "unmeasured": [], "nameless": [], "foreign": [], "orphan": []}
    for job in listed:
        kinds[_kind(job, grid, grace_s)].append(job)
    found = kinds["orphan"]
    skipped = [f"{j.job_id}: no job holds it, but it names no sandbox of a job; not deleted" for j in kinds["nameless"]]
    alive = sum(1 for j in listed if j.alive and not j.deleting)
    return Plan(found, _refusal(kinds, grid, alive, ce_name), skipped)


def _kind(job: RemoteJob, grid: GridJobs, grace_s: float) -> str:
    """What one listed remote job is for this pass: kept (being deleted, held by a grid job, or too
    young), unmeasured (no clock to age it by), nameless (no job's sandbox), foreign (another
    schedd's job), or an orphan."""
    if job.deleting or job.job_id in grid.job_ids:
        return "kept"
    if job.listed_at is None:
        return "unmeasured"
    if job.created is None or (job.listed_at - job.created).total_seconds() < grace_s:
        return "kept"
    if not job.sandbox or _SANDBOX_END.search(job.sandbox) is None:
        return "nameless"
    if not made_by(job.sandbox, grid.schedd_name):
        return "foreign"
    return "orphan"


def _refusal(kinds: Dict[str, List[RemoteJob]], grid: GridJobs, alive: int, ce_name: str) -> Optional[str]:
    """Why nothing of this pass may be deleted, or None."""
    unmeasured, foreign = kinds["unmeasured"], kinds["foreign"]
    if unmeasured:
        return (f"{len(unmeasured)} remote jobs were listed without the service's time (e.g. "
                f"{unmeasured[0].job_id}): their ages cannot be measured on its clock; nothing deleted")
    if foreign:
        return (f"{len(foreign)} remote jobs named as this CE's ({ce_name!r}) belong to jobs of another "
                f"schedd than {grid.schedd_name!r}, e.g. {foreign[0].job_id} (sandbox {foreign[0].sandbox[:200]}): "
                "another CE uses the same CE name (PODGAHP_K8S_CE_NAME, PODGAHP_LANCIUM_CE_NAME) in the same place; "
                "give each CE its own name. Nothing deleted")
    if grid.jobs == 0 and alive and kinds["orphan"]:
        return (f"the schedd ({grid.schedd_name}) answers with no grid job while {alive} remote jobs of "
                "this CE are pending or running: not trusting an empty queue; nothing deleted")
    return None
