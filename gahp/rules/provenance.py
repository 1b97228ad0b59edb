"""Whether a pilot came through a route of this CE: checked before every submit, whatever the backend.

A CE's users may submit grid-universe jobs themselves (``universe = grid``, ``grid_resource = batch
k8s``). Such a job skips the routes (their limits, their transforms) and the real HTCondor-CE does
not stop it: its periodic hold expression does not parse. So before a submit the GAHP asks the
schedd whose gridmanager started it for the job that owns the sandbox (its ``GridJobId`` holds the
sandbox id) and accepts it only when a JobRouter made it.

What a user cannot forge: every attribute the JobRouter writes (``RoutedBy``, ``RoutedFromJobId`` on
the routed job, ``RoutedToJobId``, ``Managed`` on the source job) it writes as the job's owner
(``SetEffectiveOwner`` in HTCondor's ``condor_job_router/submit_job.cpp``), so the owner can write
the same values: at submit time no ``IMMUTABLE_JOB_ATTRS`` or ``PROTECTED_JOB_ATTRS`` applies, and
protecting ``RoutedToJobId`` would refuse the router's own update. Nor does the schedd record in the
job who submitted it: the router connects over the daemons' family session, which carries no token
or proxy of its own, and impersonates the owner. What the schedd does record is its audit log
(:mod:`gahp.core.auditlog`, ``SCHEDD_AUDIT_LOG``, on in HTCondor-CE's shipped configuration): which
identity the connection that submitted each job authenticated as. So a job is accepted when:

* the audit log records its submitter as one of the schedd's own daemons: an identity of
  ``PODGAHP_ROUTER_IDENTITIES`` (``condor@family``, the router's over the family session, logged
  before HTCondor 24.8; ``condor`` of the schedd's ``UID_DOMAIN``, the CE's router as a site
  schedd sees it), or none (the identities the schedd does not log: its own daemons'). A user's
  submit is always logged with the user's identity, whatever the job says of itself;
* ``RoutedBy`` names one of ``PODGAHP_ROUTERS`` and the source job named by ``RoutedFromJobId`` (in
  the source schedd) points back at it with ``RoutedToJobId`` and has the same owner (a check of
  consistency).

Where the audit log cannot tell (none is kept, it cannot be read, it holds no record of the job) the
job is held, with the reason and the knob; nothing else on the CE depends on the check.

Anything else is refused with a reason the job's owner or the admin can act on; a schedd that cannot
be asked fails the submit as retryable.

The schedd answers such questions one at a time, between everything else it does, and the
gridmanager sends submits in bursts (up to ``GRIDMANAGER_MAX_PENDING_REQUESTS`` at once): asked
submit by submit, the schedd's answers would set the pace of a burst. So the questions of the
submits that wait at the same time are asked together (:class:`Batched`): one query for the jobs
holding any of their sandboxes, one for their source jobs. Each submit's answer comes from a query
sent after the submit arrived, so it sees every job that existed when it was asked. The JobRouter writes ``RoutedToJobId`` into the source job
after it has submitted the routed job, and the gridmanager may ask for the submit in between: a
source of the same owner not linked to any job yet is asked again, for up to :data:`LINK_WAIT_S`,
before the job is refused. The router does not write the link with its submit but at its next
update of the source job (HTCondor's ``JobRouter.cpp`` only sets it in its mirror of the ad: "just wait
for the next update"), a pass of its polling period (``JOB_ROUTER_POLLING_PERIOD``, 10 s) later, and
a pass over a burst on a busy CE takes longer: at load 17-25, 23 of 1,000 pilots of one burst were
still unlinked after 30 s.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Generic, List, Optional, Sequence, Tuple, TypeVar

import classad2

from gahp.core import auditlog
from gahp.core import schedd
from gahp.core.auditlog import AuditLog, AuditLogError, Submitter
from gahp.core.config import Knobs
from gahp.core.errors import InvalidJob, TransientError
from gahp.core.job import PilotJob
from gahp.core.retry import Backoff

log = logging.getLogger(__name__)

#: Sandbox ids as the gridmanager makes them (``CreateSandboxId``: COLLECTOR_HOST with ``:`` replaced
#: and cut at ``? , `` or a blank, then GlobalJobId, ``@ # :`` replaced): an IPv6 collector keeps its
#: brackets (``[__1]_9619_...``), one written as an address its angle brackets.
_SANDBOX = re.compile(r"^[A-Za-z0-9._\-\[\]<>]{1,512}$")
#: The characters of a sandbox id a regular expression reads as operators, each as a class of itself.
_LITERAL = str.maketrans({".": "[.]", "[": "[[]", "]": "[]]"})
_JOB_ID = re.compile(r"^([0-9]{1,10})\.([0-9]{1,10})$")

Query = Callable[[str, List[str], Optional[str], Optional[str]], List[Dict[str, object]]]
#: The schedd's start time (seconds since the epoch; None when unknown), of schedd (name, pool).
StartTime = Callable[[Optional[str], Optional[str]], Optional[float]]

#: How long a source job not yet linked to its routed job is waited for: several passes of the
#: JobRouter (HTCondor's 10 s period) on a busy CE. A job is asked about only after the audit log
#: named the JobRouter as its submitter, so a forged job never waits.
LINK_WAIT_S = 120.0
_LINK_BACKOFF = Backoff(0.25, 4.0)
#: Most questions asked in one query (a constraint of a few kilobytes).
BATCH_MAX = 100
_ROUTED = ["ClusterId", "ProcId", "Owner", "RoutedBy", "RoutedFromJobId", "QDate", "GridJobId"]
#: How long the schedd's start time (of its ad in the collector) is reused.
START_TTL_S = 60.0
_SOURCE = ["ClusterId", "ProcId", "RoutedToJobId", "Owner"]

K = TypeVar("K")
V = TypeVar("V")


class Batched(Generic[K, V]):
    """Answers to questions asked from many threads, asked of a slow service together: a thread that
    asks while a query is out waits for it to end, then one of the waiting threads sends every question
    that came meanwhile (at most ``most``) in one query (``fetch``: the keys asked -> their answers;
    a key it leaves out gets ``missing``). A question is always answered by a query sent after it was
    asked. An exception of ``fetch`` is raised in every thread whose question it carried."""

    def __init__(self, fetch: Callable[[Sequence[K]], Dict[K, V]], missing: V, most: int = BATCH_MAX) -> None:
        self._fetch = fetch
        self._missing = missing
        self._most = most
        self._cond = threading.Condition()
        self._waiting: List[_Question[K, V]] = []
        self._busy = False
        self.queries = 0
        """Queries sent (for tests and logs)."""

    def ask(self, key: K) -> V:
        question: _Question[K, V] = _Question(key)
        with self._cond:
            self._waiting.append(question)
            while not question.done and self._busy:
                self._cond.wait()
            if question.done:
                return question.answer()
            self._busy = True
            batch = [question] + [q for q in self._waiting if q is not question][:self._most - 1]
            self._waiting = [q for q in self._waiting if q not in batch]
            self.queries += 1
        try:
            answers = self._fetch(list(dict.fromkeys(q.key for q in batch)))
            for q in batch:
                q.value = answers.get(q.key, self._missing)
        except Exception as e:  # noqa: BLE001 - raised again in every thread that asked
            for q in batch:
                q.error = e
        finally:
            with self._cond:
                for q in batch:
                    q.done = True
                self._busy = False
                self._cond.notify_all()
        return question.answer()


class _Question(Generic[K, V]):
    __slots__ = ("key", "value", "error", "done")

    def __init__(self, key: K) -> None:
        self.key = key
        self.value: Optional[V] = None
        self.error: Optional[BaseException] = None
        self.done = False

    def answer(self) -> V:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class NotRouted(InvalidJob):
    """The job was not made by a route of this CE; it is held with this reason."""


@dataclass(frozen=True)
class ProvenanceSettings:
    """``PODGAHP_ROUTED_ONLY`` and where the routed and source jobs live."""

    routed_only: bool = True
    """``PODGAHP_ROUTED_ONLY``: refuse jobs no route made (default true)."""
    routers: Tuple[str, ...] = ("htcondor-ce",)
    """``PODGAHP_ROUTERS``: ``RoutedBy`` values accepted (default ``htcondor-ce`` and ``$(JOB_ROUTER_NAME)``)."""
    source_schedd_name: Optional[str] = None
    """``PODGAHP_SOURCE_SCHEDD_NAME``: the schedd holding source jobs when routed jobs live in another
    (``JOB_ROUTER_SCHEDD2_*``: the CE's schedd); default the schedd that runs the GAHP."""
    source_schedd_pool: Optional[str] = None
    """``PODGAHP_SOURCE_SCHEDD_POOL``: collector of that schedd."""
    router_identities: Tuple[str, ...] = ("condor@family",)
    """``PODGAHP_ROUTER_IDENTITIES``: identities of the JobRouter's connections to the schedd, as its
    audit log records them (default ``condor@family`` and ``condor@$(UID_DOMAIN)``)."""
    audit_log: Optional[str] = None
    """``PODGAHP_SCHEDD_AUDIT_LOG``: the schedd's audit log (default ``SCHEDD_AUDIT_LOG``, else
    ``SCHEDD_LOG`` where ``SCHEDD_DEBUG`` has ``D_AUDIT``); None: the schedd keeps none."""
    time_format: str = auditlog.DEFAULT_TIME_FORMAT
    """``DEBUG_TIME_FORMAT``: how the schedd writes a line's time."""
    deadline_s: float = auditlog.DEFAULT_DEADLINE_S
    """``SEC_TCP_SESSION_DEADLINE`` of the schedd: the longest handshake before a command is logged."""
    audit_rotated: int = 1
    """``MAX_NUM_SCHEDD_AUDIT_LOG``: rotated copies of the audit log the schedd keeps (HTCondor's 1)."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> ProvenanceSettings:
        default = ["htcondor-ce"]
        router = knobs.optional("JOB_ROUTER_NAME")
        if router and router not in default:
            default.append(router)
        identities = ["condor@family"]
        uid_domain = knobs.optional("UID_DOMAIN")
        if uid_domain:
            identities.append(f"condor@{uid_domain}")
        audit = knobs.optional("PODGAHP_SCHEDD_AUDIT_LOG") or knobs.optional("SCHEDD_AUDIT_LOG")
        if not audit and "D_AUDIT" in (knobs.optional("SCHEDD_DEBUG") or "").upper():
            audit = knobs.optional("SCHEDD_LOG")
        return cls(
            routed_only=knobs.boolean("PODGAHP_ROUTED_ONLY", True),
            routers=tuple(knobs.names("PODGAHP_ROUTERS", default)),
            source_schedd_name=knobs.optional("PODGAHP_SOURCE_SCHEDD_NAME"),
            source_schedd_pool=knobs.optional("PODGAHP_SOURCE_SCHEDD_POOL"),
            router_identities=tuple(knobs.names("PODGAHP_ROUTER_IDENTITIES", identities)),
            audit_log=audit,
            time_format=knobs.string("SCHEDD.DEBUG_TIME_FORMAT", knobs.string("DEBUG_TIME_FORMAT", auditlog.DEFAULT_TIME_FORMAT)),
            deadline_s=knobs.number("SCHEDD.SEC_TCP_SESSION_DEADLINE", knobs.number(
                "SEC_TCP_SESSION_DEADLINE", auditlog.DEFAULT_DEADLINE_S, minimum=1), minimum=1),
            audit_rotated=knobs.integer("MAX_NUM_SCHEDD_AUDIT_LOG", 1, minimum=0),
        )


class RouteCheck:
    """Checks one GAHP's submits: ``check(job)`` returns or raises :class:`NotRouted` / TransientError."""

    def __init__(self, settings: ProvenanceSettings, grid_type: str, query: Query = schedd.query,
                 sleep: Callable[[float], None] = time.sleep, start_time: Optional[StartTime] = None) -> None:
        self.settings = settings
        self.grid_type = grid_type
        self._query = query
        self._sleep = sleep
        self._start_time = start_time
        self._started: Tuple[float, Optional[float]] = (-START_TTL_S, None)
        self.audit = (AuditLog(settings.audit_log, settings.time_format, settings.deadline_s,
                               max_rotated=settings.audit_rotated) if settings.audit_log else None)
        self.routed: Batched[str, List[Dict[str, object]]] = Batched(self._holding, [])
        """Sandbox -> the jobs whose ``GridJobId`` holds it."""
        self.sources: Batched[Tuple[int, int], List[Dict[str, object]]] = Batched(self._jobs, [])
        """(ClusterId, ProcId) -> that job of the source schedd."""
        self.submitters: Batched[Tuple[str, float], _Verdict] = Batched(self._submitters, _Verdict(None, "no answer"))
        """(job id, QDate) -> who submitted it, as the schedd's audit log records it."""

    def _ask(self, constraint: str, projection: List[str], name: Optional[str] = None,
             pool: Optional[str] = None) -> List[Dict[str, object]]:
        try:
            return self._query(constraint, projection, name, pool)
        except schedd.ScheddUnavailable as e:
            raise TransientError(f"cannot check that the job came through a route of this CE: {e}") from e

    def _holding(self, sandboxes: Sequence[str]) -> Dict[str, List[Dict[str, object]]]:
        """The grid jobs whose ``GridJobId`` holds each sandbox (a word of it after a space): one query."""
        # No backslashes: the schedd reads constraints in the old ClassAd syntax, where they are
        # literal. A sandbox holds only [A-Za-z0-9._-[]<>]; ".", "[" and "]" are the regex characters
        # to quote, each as a class of itself.
        pattern = classad2.quote(" (" + "|".join(s.translate(_LITERAL) for s in sandboxes) + ")( |$)")
        ads = self._ask(f"JobUniverse == 9 && regexp({pattern}, GridJobId ?: \"\")", _ROUTED)
        found: Dict[str, List[Dict[str, object]]] = {s: [] for s in sandboxes}
        for ad in ads:
            words = str(ad.get("GridJobId") or "").split(" ")[1:]
            for sandbox in sandboxes:
                if sandbox in words:
                    found[sandbox].append(ad)
        return found

    def _jobs(self, ids: Sequence[Tuple[int, int]]) -> Dict[Tuple[int, int], List[Dict[str, object]]]:
        """Each job of the source schedd by (ClusterId, ProcId): one query."""
        s = self.settings
        constraint = " || ".join(f"(ClusterId == {c} && ProcId == {p})" for c, p in ids)
        found: Dict[Tuple[int, int], List[Dict[str, object]]] = {i: [] for i in ids}
        for ad in self._ask(constraint, _SOURCE, s.source_schedd_name, s.source_schedd_pool):
            key = (ad.get("ClusterId"), ad.get("ProcId"))
            if key in found:
                found[key].append(ad)
        return found

    def check(self, job: PilotJob) -> None:
        if not self.settings.routed_only:
            return
        sandbox = job.sandbox_id
        if not _SANDBOX.match(sandbox):
            raise NotRouted(f"sandbox id {sandbox!r} is not one the gridmanager makes; refusing the job")
        routed = self.routed.ask(sandbox)
        if len(routed) != 1:
            raise NotRouted(
                f"{len(routed)} jobs of {schedd.describe(None, None)} hold sandbox {sandbox}; podgahp accepts "
                f"only jobs a route of this CE made (PODGAHP_ROUTED_ONLY)")
        ad = routed[0]
        job_id = f"{ad.get('ClusterId')}.{ad.get('ProcId')}"
        routed_by, source_id = ad.get("RoutedBy"), ad.get("RoutedFromJobId")
        if routed_by not in self.settings.routers or not isinstance(source_id, str):
            raise NotRouted(
                f"job {job_id} was not made by a route of this CE (RoutedBy = {routed_by!r}): submit pilots "
                f"to the CE as ordinary (vanilla) jobs; grid-universe jobs for batch {self.grid_type} are "
                f"accepted only from the CE's routes (PODGAHP_ROUTED_ONLY)")
        self._check_submitter(ad, job_id)
        match = _JOB_ID.match(source_id)
        if not match:
            raise NotRouted(f"job {job_id} names no valid source job (RoutedFromJobId = {source_id!r})")
        s = self.settings
        waited, attempt = 0.0, 0
        source = (int(match.group(1)), int(match.group(2)))
        while True:
            sources = self.sources.ask(source)
            unlinked = (len(sources) == 1 and sources[0].get("RoutedToJobId") is None
                        and sources[0].get("Owner") == ad.get("Owner"))
            if not unlinked or waited >= LINK_WAIT_S:
                break
            attempt += 1
            delay = min(_LINK_BACKOFF.delay(attempt), LINK_WAIT_S - waited)
            log.info("source job %s of job %s is not linked to it yet (the JobRouter writes RoutedToJobId "
                     "after its submit); asking again in %.2f s", source_id, job_id, delay)
            self._sleep(delay)
            waited += delay
        if (len(sources) != 1 or sources[0].get("RoutedToJobId") != job_id
                or sources[0].get("Owner") != ad.get("Owner")):
            raise NotRouted(
                f"job {job_id} says it was routed from job {source_id}, but "
                f"{schedd.describe(s.source_schedd_name, s.source_schedd_pool)} holds no such job of "
                f"{ad.get('Owner')} routed to it (PODGAHP_ROUTED_ONLY)")
        log.debug("job %s routed by %s from %s", job_id, routed_by, source_id)

    def _schedd_start(self) -> Optional[float]:
        """When the schedd holding the routed jobs started (its ad's DaemonStartTime), asked at most
        once a minute; None when unknown. Lines of the audit log older than that are another
        lifetime's, whose connection numbers the schedd has since used again."""
        asked, value = self._started
        now = time.monotonic()
        if self._start_time is None or now - asked < START_TTL_S:
            return value
        try:
            value = self._start_time(None, None)
        except schedd.ScheddUnavailable as e:
            log.info("the schedd's start time is unknown (%s); the whole audit log is read", e)
            value = None
        self._started = (now, value)
        return value

    def _submitters(self, keys: Sequence[Tuple[str, float]]) -> Dict[Tuple[str, float], _Verdict]:
        """Who submitted each (job id, QDate), from the audit log: one start-time question a batch."""
        assert self.audit is not None
        start = self._schedd_start()
        answers: Dict[Tuple[str, float], _Verdict] = {}
        for job_id, qdate in keys:
            try:
                answers[(job_id, qdate)] = _Verdict(self.audit.submitter(job_id, qdate, since=start), None)
            except AuditLogError as e:
                answers[(job_id, qdate)] = _Verdict(None, str(e))
        return answers

    def _check_submitter(self, ad: Dict[str, object], job_id: str) -> None:
        """NotRouted unless the schedd's audit log records the job's submitter as one of its daemons."""
        s = self.settings
        off = "set PODGAHP_ROUTED_ONLY = false in 10-podgahp.conf only where the CE's users are trusted"
        if self.audit is None:
            raise NotRouted(
                f"cannot tell whether job {job_id} was submitted by the JobRouter: the schedd keeps no audit log "
                f"(HTCondor-CE ships SCHEDD_AUDIT_LOG = $(LOG)/AuditLog with SCHEDD_DEBUG = D_AUDIT; set them again "
                f"for this schedd, or {off}: PODGAHP_ROUTED_ONLY)")
        qdate = ad.get("QDate")
        if not isinstance(qdate, (int, float)) or isinstance(qdate, bool) or not math.isfinite(qdate):
            raise NotRouted(f"job {job_id} has no QDate; podgahp accepts only jobs a route of this CE made "
                            f"(PODGAHP_ROUTED_ONLY)")
        verdict = self.submitters.ask((job_id, float(qdate)))
        if verdict.error is not None:
            raise NotRouted(f"cannot tell whether job {job_id} was submitted by the JobRouter: {verdict.error} "
                            f"(PODGAHP_SCHEDD_AUDIT_LOG; or {off}: PODGAHP_ROUTED_ONLY)")
        found = verdict.submitter
        if found is None:
            raise NotRouted(
                f"job {job_id} was not submitted by the JobRouter: the schedd's audit log {self.audit.path} has no "
                f"record of its submission at its QDate ({int(qdate)}); podgahp accepts only jobs a route of this "
                f"CE made (PODGAHP_ROUTED_ONLY)")
        if found.identity is not None and found.identity not in s.router_identities:
            raise NotRouted(
                f"job {job_id} was not submitted by the JobRouter: the schedd's audit log {self.audit.path} records "
                f"its submitter as {_shown(found.identity)} ({found.method or 'no method'}), not one of the CE's "
                f"daemons ({', '.join(s.router_identities)}; PODGAHP_ROUTER_IDENTITIES): submit pilots to the CE "
                f"as ordinary (vanilla) jobs")
        log.debug("job %s submitted by %s (connection %d)", job_id, found.identity or "a daemon of the schedd",
                  found.cid)


@dataclass(frozen=True)
class _Verdict:
    """The audit log's answer for one job: its submitter (None: no record), or why there is none."""

    submitter: Optional[Submitter]
    error: Optional[str]


def _shown(value: object) -> str:
    """A value from a job ad, quoted and cut, for a hold reason."""
    return "undefined" if value is None else repr(str(value)[:100])
