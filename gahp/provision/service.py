"""The provisioner's cycles: read demand and pilots, decide, act, say what and why.

A cycle that cannot know the demand or the pilots submits nothing (under-provisioning is safe,
a guess is not). ``--once`` runs one cycle (cron); the service runs one every
``PODGAHP_PROVISION_INTERVAL_SECONDS`` until stopped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, List, Optional, Tuple

from gahp.errors import GahpError
from gahp.provision.demand import Demand, Jobs, group_jobs, read_jobs
from gahp.provision.pilots import CeQueue
from gahp.provision.plan import Caps, Decision, Pilot, decide
from gahp.provision.settings import ProvisionSettings

log = logging.getLogger(__name__)


def caps(settings: ProvisionSettings) -> Caps:
    return Caps(settings.max_idle_per_group, settings.max_idle, settings.max_pilots, settings.remove_idle_after_s)


class Provisioner:
    def __init__(self, settings: ProvisionSettings, ce: Optional[CeQueue] = None,
                 read: Callable[[ProvisionSettings], Tuple[Jobs, List[str]]] = read_jobs,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.ce = ce or CeQueue(settings, os.path.join(os.path.expanduser("~"), ".podgahp", "provision"))
        self.read = read
        self.clock = clock
        self.errors: List[str] = []
        """What went wrong in the last cycle (also logged): why it could not decide, what the CE refused."""

    def cycle(self) -> Optional[Decision]:
        """One cycle; None when it could not decide (the reason is logged and in :attr:`errors`)."""
        settings = self.settings
        self.errors = []
        try:
            jobs, failed = self.read(settings)
            demand: Demand = group_jobs(jobs, settings)
            pilots: List[Pilot] = self.ce.pilots()
        except GahpError as e:
            log.error("cycle skipped, nothing submitted: %s", e)
            self.errors.append(f"cycle skipped, nothing submitted: {e}")
            return None
        decision = decide(demand.groups, pilots, caps(settings), self.clock())
        for row in decision.rows:
            row.waiting = demand.waiting.get(row.group, 0) if row.group is not None else 0
        log.info("demand: %d idle jobs in %d groups (%d unusable%s%s); pilots: %d idle, %d running",
                 demand.jobs, len(demand.groups), demand.unusable,
                 f"; {demand.deferred_groups} more groups of {demand.deferred} jobs wait for a later cycle "
                 f"(at most {settings.max_groups} groups)" if demand.deferred_groups else "",
                 f"; schedds not answering: {', '.join(failed)}" if failed else "",
                 sum(r.idle for r in decision.rows), sum(r.running for r in decision.rows))
        for row in decision.rows:
            if row.group is None or not row.submit:
                log.info("group %s: %d jobs waiting, %d pilots idle, %d running, %d to remove, none submitted",
                         row.key, row.waiting, row.idle, row.running, row.remove)
                continue
            try:
                cluster = self.ce.submit(row.group, row.submit)
            except GahpError as e:
                log.error("group %s: %d jobs waiting, %d pilots idle, %d running; submitting %d failed: %s",
                          row.key, row.waiting, row.idle, row.running, row.submit, e)
                self.errors.append(f"group {row.key}: submitting {row.submit} failed: {e}")
                row.submit = 0
                decision.failures += 1
                continue
            log.info("group %s: %d jobs waiting, %d pilots idle, %d running; submitted %d (cluster %s)",
                     row.key, row.waiting, row.idle, row.running, row.submit, cluster)
        if decision.capped:
            log.info("submissions capped: %s", decision.capped)
        if decision.remove:
            reason = f"idle at the CE for more than {settings.remove_idle_after_s} s (podgahp provision)"
            try:
                self.ce.remove(decision.remove, reason)
                log.info("removed %d pilots %s: %s", len(decision.remove), reason,
                         " ".join(p.job_id for p in decision.remove[:20]))
            except GahpError as e:
                log.error("removing %d idle pilots failed: %s", len(decision.remove), e)
                self.errors.append(f"removing {len(decision.remove)} idle pilots failed: {e}")
                decision.failures += 1
        return decision

    def serve(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.cycle()
            except Exception:  # noqa: BLE001 - the service outlives a bad cycle; the log says why
                log.exception("cycle failed")
            stop.wait(max(0.0, self.settings.interval_s - (time.monotonic() - started)))
