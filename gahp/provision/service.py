"""The provisioner's cycles: read demand, pilots and the pool's slots, decide, act, say what and why.

A cycle that cannot know the demand, the pilots or the slots submits nothing (under-provisioning is
safe, a guess is not). ``--once`` runs one cycle (cron); the service runs one every
``PODGAHP_PROVISION_INTERVAL_SECONDS`` until stopped. What a cycle remembers for the next
(:mod:`gahp.provision.history`) is kept in memory and in a file next to the pilots' submit
directory, so that cycles of ``--once`` remember as the service does.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from gahp.core.errors import GahpError
from gahp.provision import history as histories
from gahp.provision.demand import Demand, Jobs, group_jobs, read_jobs
from gahp.provision.history import History, PilotRecord
from gahp.provision.pilots import CeQueue, provisioner_key
from gahp.provision.plan import Decision, Ending, Pilot, Row, Slot, decide
from gahp.provision.pool import read_slots
from gahp.provision.settings import ProvisionSettings

log = logging.getLogger(__name__)


def history_path(settings: ProvisionSettings, directory: str) -> str:
    """One history file per provisioner name and CE in ``directory``."""
    return os.path.join(directory, "history-" + provisioner_key(settings) + ".json")


def default_directory(settings: ProvisionSettings) -> str:
    """Where a provisioner submits its pilots from (they write their output there) and keeps its
    history: ``~/.podgahp/provision/<key>``, one per provisioner name and CE, so that provisioners of
    the same user for different CEs (whose job ids repeat) never share their pilots' files."""
    return os.path.join(os.path.expanduser("~"), ".podgahp", "provision", provisioner_key(settings))


#: A history saved longer ago than this many cycles (and at least 10 minutes) says nothing of the pilots
#: at the CE now: what became of them is unknown, so their records are dropped (group records stay).
STALE_CYCLES = 5


def describe(row: Row) -> str:
    """One group's line: what it has, what was done, why not more."""
    text = (f"{row.key}: {row.waiting} jobs waiting, {row.starting} pilots starting, {row.booting} booting, "
            f"{row.idle} idle in the pool, {row.busy} running, {row.submit} submitted, {row.remove} removed")
    return f"{text}; {row.note}" if row.note else text


class Provisioner:
    def __init__(self, settings: ProvisionSettings, ce: Optional[CeQueue] = None,
                 read: Callable[[ProvisionSettings], Tuple[Jobs, List[str]]] = read_jobs,
                 clock: Callable[[], float] = time.time,
                 slots: Optional[Callable[[ProvisionSettings], Sequence[Slot]]] = None,
                 directory: Optional[str] = None) -> None:
        """``directory``: where pilots are submitted from and the history kept (default
        :func:`default_directory`); None with a given ``ce``: the history is kept in memory only."""
        if directory is None and ce is None:
            directory = default_directory(settings)
        self.settings = settings
        self.ce = ce or CeQueue(settings, str(directory))
        self.read = read
        self.slots = slots or (lambda s: read_slots(s, clock))
        self.clock = clock
        self.path = history_path(settings, directory) if directory else None
        self.history = histories.load(self.path) if self.path else History()
        if clock() - self.history.saved_at > max(600, STALE_CYCLES * settings.interval_s):
            self.history.pilots.clear()
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
            slots = list(self.slots(settings))
        except GahpError as e:
            log.error("cycle skipped, nothing submitted: %s", e)
            self.errors.append(f"cycle skipped, nothing submitted: {e}")
            return None
        now = self.clock()
        decision = decide(demand.groups, demand.waiting, pilots, slots, settings.policy, self.history, now,
                          complete=not failed and not demand.deferred_groups, endings=self._endings(pilots))
        log.info("demand: %d idle jobs in %d groups (%d unusable%s%s); pilots: %d starting, %d booting, "
                 "%d idle in the pool, %d running; %d slots in the pool",
                 demand.jobs, len(demand.groups), demand.unusable,
                 f"; {demand.deferred_groups} more groups of {demand.deferred} jobs wait for a later cycle "
                 f"(at most {settings.max_groups} groups)" if demand.deferred_groups else "",
                 f"; schedds not answering: {', '.join(failed)}" if failed else "",
                 sum(r.starting for r in decision.rows), sum(r.booting for r in decision.rows),
                 sum(r.idle for r in decision.rows), sum(r.busy for r in decision.rows), len(slots))
        self._remove(decision)
        for row in decision.rows:
            if row.group is not None and row.submit:
                self._submit(row, decision, now)
            log.info("group %s", describe(row))
        if decision.capped:
            log.info("submissions capped: %s", decision.capped)
        self.history = decision.history
        self.history.saved_at = now
        if self.path:
            error = histories.save(self.history, self.path)
            if error:
                log.warning("%s", error)
        return decision

    def _endings(self, pilots: Sequence[Pilot]) -> Dict[str, Ending]:
        """How the pilots gone since the last cycle, never seen in the pool, ended (the CE's history):
        one that ran as a pilot in the pool does is not a failure of its group. Not known when the CE
        cannot say (logged): they count as never joined."""
        present = {p.job_id for p in pilots}
        gone = [job_id for job_id, record in self.history.pilots.items()
                if job_id not in present and not (record.joined or record.lost or record.removed)]
        if not gone:
            return {}
        try:
            return self.ce.endings(gone)
        except GahpError as e:
            log.warning("how %d pilots ended is not known, they count as never in the pool: %s", len(gone), e)
            return {}

    def _submit(self, row: Row, decision: Decision, now: float) -> None:
        assert row.group is not None
        try:
            cluster = self.ce.submit(row.group, row.submit)
        except GahpError as e:
            log.error("group %s: submitting %d failed: %s", row.key, row.submit, e)
            self.errors.append(f"group {row.key}: submitting {row.submit} failed: {e}")
            row.submit = 0
            decision.failures += 1
            return
        log.info("group %s: submitted %d (cluster %s)", row.key, row.submit, cluster)
        for proc in range(row.submit):  # remembered now: a pilot may end before the next cycle sees it
            decision.history.pilots[f"{cluster}.{proc}"] = PilotRecord(row.key, now)

    def _remove(self, decision: Decision) -> None:
        by_reason: Dict[str, List[Pilot]] = {}
        for pilot in decision.remove:
            by_reason.setdefault(decision.reasons.get(pilot.job_id, "podgahp provision"), []).append(pilot)
        for reason, pilots in by_reason.items():
            try:
                self.ce.remove(pilots, reason)
            except GahpError as e:
                log.error("removing %d pilots failed (%s): %s", len(pilots), reason, e)
                self.errors.append(f"removing {len(pilots)} pilots failed: {e}")
                decision.failures += 1
                for pilot in pilots:  # still there: the next cycle counts them again
                    decision.history.pilots.pop(pilot.job_id, None)
                continue
            log.info("removed %d pilots, %s: %s", len(pilots), reason, " ".join(p.job_id for p in pilots[:20]))

    def serve(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.cycle()
            except Exception:  # noqa: BLE001 - the service outlives a bad cycle; the log says why
                log.exception("cycle failed")
            stop.wait(max(0.0, self.settings.interval_s - (time.monotonic() - started)))
