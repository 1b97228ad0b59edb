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
protecting ``RoutedToJobId`` would refuse the router's own update. The one thing the schedd records
that no client can set is the token the submitting connection authenticated with: ``AuthTokenSubject``
and ``AuthTokenIssuer`` are ``SECURE_JOB_ATTRS``, set by the schedd itself (``AddSessionAttributes``
in ``qmgmt.cpp``; the router drops the source job's own). A JobRouter that authenticates to its
schedd with IDTOKENS made from the pool signing key (``02-ce-podgahp-defaults.conf``) is recorded as
``condor@password`` of the CE's ``TRUST_DOMAIN``, which only holders of that key can be. So a job is
accepted when:

* its token names the router (``PODGAHP_ROUTER_TOKEN_SUBJECTS`` of ``PODGAHP_ROUTER_TOKEN_ISSUER``),
  unless ``PODGAHP_ROUTER_TOKEN_REQUIRED`` is false. HTCondor 25 records the token on every job; 23.x
  only on a job without an X.509 proxy file (it records the proxy's attributes instead);
* ``RoutedBy`` names one of ``PODGAHP_ROUTERS`` and the source job named by ``RoutedFromJobId`` (in
  the source schedd) points back at it with ``RoutedToJobId`` and has the same owner (forgeable by
  the owner on its own; a check of consistency, and all there is when no token is required).

Anything else is refused with a reason the job's owner or the admin can act on; a schedd that cannot
be asked fails the submit as retryable. The JobRouter writes ``RoutedToJobId`` into the source job
after it has submitted the routed job, and the gridmanager may ask for the submit in between: a
source of the same owner not linked to any job yet is asked again, for up to :data:`LINK_WAIT_S`,
before the job is refused.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import classad2

from gahp import schedd
from gahp.config import Knobs
from gahp.errors import InvalidJob, TransientError
from gahp.job import PilotJob
from gahp.retry import Backoff

log = logging.getLogger(__name__)

#: Sandbox ids as the gridmanager makes them (collector host and GlobalJobId, ``@ # :`` replaced).
_SANDBOX = re.compile(r"^[A-Za-z0-9._-]{1,512}$")
_JOB_ID = re.compile(r"^([0-9]{1,10})\.([0-9]{1,10})$")

Query = Callable[[str, List[str], Optional[str], Optional[str]], List[Dict[str, object]]]

#: How long a source job not yet linked to its routed job is waited for.
LINK_WAIT_S = 30.0
_LINK_BACKOFF = Backoff(0.25, 4.0)


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
    token_required: bool = True
    """``PODGAHP_ROUTER_TOKEN_REQUIRED``: accept only jobs whose submitting connection the schedd recorded
    as the JobRouter's token (default true)."""
    token_subjects: Tuple[str, ...] = ("condor@password",)
    """``PODGAHP_ROUTER_TOKEN_SUBJECTS``: ``AuthTokenSubject`` values of the JobRouter's connections
    (default ``condor@password``: a daemon's token made from the pool signing key)."""
    token_issuer: Optional[str] = None
    """``PODGAHP_ROUTER_TOKEN_ISSUER``: their ``AuthTokenIssuer`` (default ``$(TRUST_DOMAIN)``)."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> ProvenanceSettings:
        default = ["htcondor-ce"]
        router = knobs.optional("JOB_ROUTER_NAME")
        if router and router not in default:
            default.append(router)
        return cls(
            routed_only=knobs.boolean("PODGAHP_ROUTED_ONLY", True),
            routers=tuple(knobs.names("PODGAHP_ROUTERS", default)),
            source_schedd_name=knobs.optional("PODGAHP_SOURCE_SCHEDD_NAME"),
            source_schedd_pool=knobs.optional("PODGAHP_SOURCE_SCHEDD_POOL"),
            token_required=knobs.boolean("PODGAHP_ROUTER_TOKEN_REQUIRED", True),
            token_subjects=tuple(knobs.names("PODGAHP_ROUTER_TOKEN_SUBJECTS", ["condor@password"])),
            token_issuer=knobs.optional("PODGAHP_ROUTER_TOKEN_ISSUER") or knobs.optional("TRUST_DOMAIN"),
        )


class RouteCheck:
    """Checks one GAHP's submits: ``check(job)`` returns or raises :class:`NotRouted` / TransientError."""

    def __init__(self, settings: ProvenanceSettings, grid_type: str, query: Query = schedd.query,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self.grid_type = grid_type
        self._query = query
        self._sleep = sleep

    def _ask(self, constraint: str, projection: List[str], name: Optional[str] = None,
             pool: Optional[str] = None) -> List[Dict[str, object]]:
        try:
            return self._query(constraint, projection, name, pool)
        except schedd.ScheddUnavailable as e:
            raise TransientError(f"cannot check that the job came through a route of this CE: {e}") from e

    def check(self, job: PilotJob) -> None:
        if not self.settings.routed_only:
            return
        sandbox = job.sandbox_id
        if not _SANDBOX.match(sandbox):
            raise NotRouted(f"sandbox id {sandbox!r} is not one the gridmanager makes; refusing the job")
        # No backslashes: the schedd reads constraints in the old ClassAd syntax, where they are
        # literal. The sandbox holds only [A-Za-z0-9._-]; "." is the one regex character to quote.
        pattern = classad2.quote(" " + sandbox.replace(".", "[.]") + "( |$)")
        routed = self._ask(f"JobUniverse == 9 && regexp({pattern}, GridJobId ?: \"\")",
                           ["ClusterId", "ProcId", "Owner", "RoutedBy", "RoutedFromJobId", "AuthTokenSubject",
                            "AuthTokenIssuer", "x509UserProxySubject"])
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
        self._check_token(ad, job_id)
        match = _JOB_ID.match(source_id)
        if not match:
            raise NotRouted(f"job {job_id} names no valid source job (RoutedFromJobId = {source_id!r})")
        s = self.settings
        waited, attempt = 0.0, 0
        while True:
            sources = self._ask(f"ClusterId == {match.group(1)} && ProcId == {match.group(2)}",
                                ["RoutedToJobId", "Owner"], s.source_schedd_name, s.source_schedd_pool)
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

    def _check_token(self, ad: Dict[str, object], job_id: str) -> None:
        """NotRouted unless the schedd recorded the JobRouter's token for the connection that submitted the job."""
        s = self.settings
        if not s.token_required:
            return
        subject, issuer = ad.get("AuthTokenSubject"), ad.get("AuthTokenIssuer")
        if subject in s.token_subjects and isinstance(issuer, str) and issuer == s.token_issuer:
            return
        why = (f"job {job_id} was not submitted by the JobRouter: the schedd recorded its submitter's token as "
               f"AuthTokenSubject = {_shown(subject)}, AuthTokenIssuer = {_shown(issuer)}, not "
               f"{' or '.join(s.token_subjects)} of {s.token_issuer!r} (PODGAHP_ROUTER_TOKEN_SUBJECTS, "
               f"PODGAHP_ROUTER_TOKEN_ISSUER)")
        if subject is None:
            why += ("; the CE's JobRouter must authenticate to its schedd with IDTOKENS (02-ce-podgahp-defaults.conf)")
            if ad.get("x509UserProxySubject") is not None:
                why += (", and HTCondor 23.x records no token for a job with an X.509 proxy: set "
                        "PODGAHP_ROUTER_TOKEN_REQUIRED = false there, or route pilots without a proxy")
        raise NotRouted(why)


def _shown(value: object) -> str:
    """A value from a job ad, quoted and cut, for a hold reason."""
    return "undefined" if value is None else repr(str(value)[:100])
