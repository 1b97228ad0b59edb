"""``podgahp reap``: delete the pods whose HTCondor job no longer exists; ``podgahp q``: the pilots
with their pods.

Run by the CE's own condor as a schedd cron job (``50-podgahp-reap-defaults.conf``), as the condor user,
with the CE's configuration: it asks the schedd which grid jobs exist, then lists this CE's pods and
deletes those no job holds (after a grace period covering a submit whose answer has not reached the
schedd yet).  If the schedd cannot be asked, or its answer cannot be shown to be whole, nothing is
deleted (:mod:`gahp.backends.k8s.reaper` lists the rules).  Its output is ClassAd attributes,
which the schedd merges into its own ad (``condor_ce_status -schedd -l`` shows them).
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from gahp.backends.k8s.census import ce_pods
from gahp.backends.k8s.reaper import ReapResult, reap_orphans
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.config import Knobs
from gahp.logs import printable
from gahp.schedd import GRID_UNIVERSE, SCHEDD_KNOBS, ScheddUnavailable, gahp_type, grid_jobs, query

if TYPE_CHECKING:
    from gahp.backends.k8s.overview import PilotRow
    from gahp.health import CeHealth

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReapSettings:
    schedd_name: Optional[str]
    """``PODGAHP_REAP_SCHEDD_NAME``: schedd holding the routed jobs; default ``$(JOB_ROUTER_SCHEDD2_NAME)``,
    empty = the local schedd."""
    schedd_pool: Optional[str]
    """``PODGAHP_REAP_SCHEDD_POOL``: its collector; default ``$(JOB_ROUTER_SCHEDD2_POOL)``."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> "ReapSettings":
        return cls(schedd_name=knobs.optional("PODGAHP_REAP_SCHEDD_NAME") or knobs.optional("JOB_ROUTER_SCHEDD2_NAME"),
                   schedd_pool=knobs.optional("PODGAHP_REAP_SCHEDD_POOL") or knobs.optional("JOB_ROUTER_SCHEDD2_POOL"))


def reap(knobs: Optional[Knobs] = None, dry_run: bool = False) -> ReapResult:
    """One pass; raises GahpError (ScheddUnavailable, ConfigError) before any delete when it cannot know."""
    knobs = knobs or Knobs()
    settings = ReapSettings.from_knobs(knobs)
    backend_settings = KubernetesSettings.from_knobs(knobs)
    try:
        jobs = grid_jobs(settings.schedd_name, settings.schedd_pool)
    except ScheddUnavailable as e:
        raise type(e)(f"{e} {SCHEDD_KNOBS}") from e
    result = reap_orphans(backend_settings, jobs, backend_settings.reap_grace_s, dry_run)
    log.info("reap: %d pods, %d orphans, %d deleted, %d errors, %d API requests", result.pods, result.orphans,
             result.deleted, len(result.errors), result.requests)
    return result


def classad_lines(result: ReapResult) -> List[str]:
    """The pass as ``Attr = value`` lines for a schedd cron job (its PREFIX is prepended)."""
    lines = [f"Pods = {result.pods}", f"Orphans = {result.orphans}", f"Deleted = {result.deleted}",
             f"Errors = {len(result.errors)}", f"ApiRequests = {result.requests}"]
    if result.errors:
        first = printable(result.errors[0][:500]).replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'LastError = "{first}"')
    return lines


def pilots(knobs: Optional[Knobs] = None) -> Tuple[List["PilotRow"], List[str]]:
    """``podgahp q``: the routed Kubernetes pilots of the CE's schedd joined with this CE's pods, and
    the namespaces that could not be listed. Raises GahpError when the schedd cannot be asked."""
    from gahp.backends.k8s.overview import JOB_ATTRIBUTES, join

    knobs = knobs or Knobs()
    settings = ReapSettings.from_knobs(knobs)
    backend_settings = KubernetesSettings.from_knobs(knobs)
    try:
        ads = [ad for ad in query(GRID_UNIVERSE, JOB_ATTRIBUTES, settings.schedd_name, settings.schedd_pool)
               if gahp_type(ad.get("GridResource")) == "k8s"]
    except ScheddUnavailable as e:
        raise ScheddUnavailable(f"{e} {SCHEDD_KNOBS}") from e
    with ce_pods(backend_settings) as census:
        clocks = [listed.server_time for listed in census.namespaces if listed.server_time is not None]
        now = clocks[0] if clocks else datetime.datetime.now(datetime.timezone.utc)
        rows = join(ads, census.pods(), backend_settings, now)
    return rows, census.errors


def ce_health(knobs: Knobs, by_queue: Dict[str, Dict[str, int]]) -> "CeHealth":
    """The GAHPs' counters and black-hole states of this CE, with the pods per queue just listed."""
    from gahp.health import gather

    from gahp.backends.k8s.settings import label_value

    backend_settings = KubernetesSettings.from_knobs(knobs)
    # Every configured queue has its series, 0 while it has no pods (as the pods' queue label names it).
    pods: Dict[str, Dict[str, int]] = {label_value(name.lower()): {} for name in backend_settings.queues}
    pods.update({q: dict(phases) for q, phases in by_queue.items()})
    return gather(backend_settings.blackhole.state_dir, backend_settings.ce_name, "k8s", pods,
                  max_closed_s=backend_settings.blackhole.backoff_max_s)


def publish_prometheus(knobs: Knobs, health: "CeHealth", result: ReapResult) -> None:
    """Write ``PODGAHP_PROMETHEUS_FILE`` (when set) for a textfile collector."""
    from gahp.health import prometheus_text, write_shared

    path = knobs.optional("PODGAHP_PROMETHEUS_FILE")
    if not path:
        return
    ce_name = KubernetesSettings.from_knobs(knobs).ce_name
    text = prometheus_text(health, ce_name, [
        ("podgahp_reap_pods", "Pods of this CE seen by the last clean-up pass", result.pods),
        ("podgahp_reap_orphans", "Orphan pods found by the last clean-up pass", result.orphans),
        ("podgahp_reap_deleted", "Orphan pods deleted by the last clean-up pass", result.deleted),
        ("podgahp_reap_errors", "Errors of the last clean-up pass", len(result.errors)),
        ("podgahp_reap_api_requests", "API requests of the last clean-up pass", result.requests)])
    write_shared(path, text)

