"""The interface every backend implements, and nothing else: what it must do, and what it may.

A backend is an adapter over one remote service (:class:`Backend`): a handful of verbs, *create* a
job's remote object, *observe* a job (its state-table row, its queue, the record the state came from,
its outputs to write), *remove* one, *ping*, and what the CE-wide tools list. The rules every backend
obeys are not its own: :class:`gahp.agent.Agent` wraps every call, the same way for every backend
(admission, the per-job lock, final answers, outputs, the black-hole verdict, the figures, the job
records and their cancels). A backend knows nothing about the BLAHP wire format nor about those rules:
it takes a :class:`~gahp.core.job.PilotJob`, returns job ids and :class:`~gahp.core.jobstate.JobState` values
in :class:`Seen` and :class:`Created`, and raises :mod:`gahp.core.errors` classes. Every verb may be called
from several worker threads at once, and from a process that has never seen the job before (the
gridmanager restarts GAHPs freely), so a job id alone must be enough to act.

Declared capabilities beyond the five verbs: a backend whose :meth:`Backend.ce_view` gives a
:class:`CeView` is covered by the CE-wide tools, ``podgahp reap`` (:meth:`CeView.census` and
:meth:`CeView.delete`), ``podgahp q`` and ``podgahp health`` (the census) and ``podgahp trace``
(:meth:`CeView.trace`, optional). A backend without one (the in-memory test backend) is skipped by
them. What the tools do with a census, the orphan rules, the table, the figures, is theirs, the
same for every backend (:mod:`gahp.ce.orphans`, :mod:`gahp.ce.q`, :mod:`gahp.ce.health`).
"""

from __future__ import annotations

import abc
import datetime
from dataclasses import dataclass, field
from typing import Callable, ClassVar, FrozenSet, List, Optional, Tuple

from gahp.rules.blackhole import GuardSettings
from gahp.core.config import Knobs
from gahp.rules.hops import Hop
from gahp.core.job import PilotJob
from gahp.core.jobstate import JobState
from gahp.rules.records import JobRecords

#: The four states ``podgahp health`` counts remote jobs in, per queue (``Queue_<q>_Pods<state>``).
HEALTH_STATES = ("Pending", "Running", "Succeeded", "Failed")


@dataclass(frozen=True)
class RemoteJob:
    """One remote job of this CE as a census saw it, in words every backend gives. Built from what the
    remote side says, which others may have written: the tools act on it only by their own rules."""

    job_id: str
    """The job id the GAHP handed out for it (what a grid job's ``GridJobId`` names)."""
    name: str
    """The service's name for it (pod name, Lancium job number)."""
    queue: str
    """The queue it was made for ("" when it does not say)."""
    state: str
    """The service's own word for its state (``Pending``, ``queued``...)."""
    health: str
    """Its state as ``podgahp health`` counts it: one of :data:`HEALTH_STATES`."""
    alive: bool
    """It may hold a live pilot (pending or running, not being deleted)."""
    sandbox: str
    """The sandbox id it was made for ("" when it does not say)."""
    created: Optional[datetime.datetime]
    """When it was made, on the clock of :attr:`listed_at`."""
    listed_at: Optional[datetime.datetime]
    """The clock the census read it by when it read it (the service's where it says: its ``Date``);
    None when unknown, and then its age is unknown."""
    where: str = ""
    """Where it is, when a service has places (a namespace; with the cluster's context when the CE's
    queues use several clusters)."""
    cluster: str = ""
    """The cluster it is in, only where the CE's queues use several (a kubeconfig's context, else the
    kubeconfig); empty otherwise."""
    node: str = ""
    """The machine it runs on, when the service says."""
    reason: str = ""
    """Why it is where it is, in the words the GAHP would use (empty when it simply runs)."""
    deleting: bool = False
    """Its deletion has begun."""


@dataclass
class Census:
    """Every remote job of this CE, all users, by one backend; and what could not be read."""

    backend: str
    jobs: List[RemoteJob] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    """What could not be listed or looked at (each a line for the admin)."""
    queues: Tuple[str, ...] = ()
    """Every configured queue, as :attr:`RemoteJob.queue` names it: ``podgahp health`` gives each
    its series, 0 while it has no job."""


class CeView(abc.ABC):
    """One backend as the CE-wide tools see it: the remote jobs of this CE, every user's. Built from the
    CE's configuration by :meth:`Backend.ce_view`, run as whoever runs the tool (``podgahp reap`` runs as
    the condor user), so what it reads must be readable by them. Used from one thread."""

    backend: ClassVar[str]
    """The backend's name."""
    hops: ClassVar[Tuple[str, ...]] = ()
    """The names of the remote hops :meth:`trace` tells, in order (``pod created``, ``scheduled``,
    ``running``, ``completed``): ``podgahp trace`` shows them after "GAHP request", and the pilot's
    output after the last. Empty for a view that does not trace."""
    noun: ClassVar[str] = "remote job"
    """What the service's job is called in the tools' words (``pod``, ``Lancium job``)."""
    ce_name: str
    """The CE's name for its remote jobs (in errors, and the scope of the GAHPs' figure files)."""

    @property
    def requests(self) -> int:
        """Requests sent to the service so far through this view (censuses and deletes)."""
        return 0

    @abc.abstractmethod
    def census(self, held: FrozenSet[str]) -> Census:
        """Every remote job of this CE. ``held``: the job ids the CE's schedd names in its grid jobs'
        ``GridJobId``: jobs of those ids are this CE's without more proof; any other must be shown to be
        this CE's by the backend's own means (labels it sets, a name it derives) before it is listed.
        Never raises for what one place or one job could not tell: that is an error of the census."""

    @abc.abstractmethod
    def delete(self, job: RemoteJob) -> None:
        """Delete an orphan of the last census: that very object only (a job made since under the same
        name is kept). Already gone is success; raises :class:`~gahp.core.errors.GahpError` otherwise."""

    def trace(self, grid_job_id: str, queue: Optional[str], user: str, ping: bool) -> Tuple[List[Hop], List[str]]:
        """Optional, for ``podgahp trace``: the remote hops of the job a routed job's ``GridJobId``
        names (after "GAHP request"), the first of :attr:`hops` up to the one it stops at, and with
        ``ping`` what the GAHP's ping would find wrong. The default: no hops (the trace goes from the
        GAHP request to the pilot's output)."""
        return [], []

    def close(self) -> None:
        """Close connections; called once when the tool is done."""


@dataclass(frozen=True)
class Place:
    """Whose and where a backend's jobs are: what the agent keeps its rules for them by."""

    ce_name: str
    """This CE in the names of the GAHP's state files and remote objects (``$(FULL_HOSTNAME)``)."""
    user: str
    """The job owner this GAHP runs as."""
    blackhole: GuardSettings
    """``PODGAHP_BLACKHOLE_*`` and ``PODGAHP_STATE_DIR``, as every backend reads them."""
    cancel_retry_max_s: float = 3600.0
    """How long a failed removal is tried again in the background."""
    backoff_s: float = 1.0
    """The first wait between two tries of a removal (it doubles, up to :attr:`backoff_max_s`)."""
    backoff_max_s: float = 60.0
    """The longest wait between two tries of a removal."""


#: ``Out``/``Err`` writer of a finished job: True once written, False while the service prepares them;
#: OSError when they cannot be written (the agent holds the job).
Outputs = Callable[[], bool]


@dataclass(frozen=True)
class Seen:
    """A job as the backend observed it: its state-table row, and what the agent needs to answer it."""

    state: JobState
    """The backend's state table applied to its record of the job."""
    queue: str = ""
    """The queue the job was made for (the black-hole guard's); "" when unknown."""
    cause: str = ""
    """What the backend says of a held job, for the guard (the row's key and message)."""
    outputs: Optional[Outputs] = None
    """Writes the job's ``Out``/``Err`` before it is reported completed."""
    started: bool = False
    """The job is known to have run (an idle row is answered running)."""
    source: Optional[object] = None
    """The record :attr:`state` came from, when the same record always gives the same state: while the
    backend hands out that very object again (:meth:`Backend.cached`), the last answer is given again."""
    answered: Optional[Callable[[JobState], None]] = None
    """Told the answer the agent gave (a backend that marks the remote object, or keeps it)."""


@dataclass(frozen=True)
class Created:
    """A submit's remote job."""

    job_id: str
    """Printable, no spaces, self-describing (``<name>/...``)."""
    made: bool
    """This call made it (False: the sandbox's job was there already, and is the pilot)."""


class Backend(abc.ABC):
    """An adapter over one remote service that runs pilots; see the module docstring."""

    #: The batch type this backend serves (``GridResource = "batch <name>"``).
    name: ClassVar[str]
    #: How a pilot asking for a whole node (``WantWholeNode``, forwarded as ``WholeNodes``) is given
    #: one, in a sentence for ``podgahp routes check`` (which knobs decide, what is refused).
    whole_node: ClassVar[str] = "this backend gives it the cores and memory it asks for, no more"
    #: What the service's job is called in messages (``pod``, ``Lancium job``).
    noun: ClassVar[str] = "remote job"
    #: The service, in messages (``the API server``).
    service: ClassVar[str] = "the service"
    #: What a removal is called (``deleted``, ``cancelled``), and what happens to one that failed
    #: should the GAHP exit first (a phrase after "; ", empty when nothing more).
    removed: ClassVar[str] = "removed"
    after_failed_removal: ClassVar[str] = ""

    place: Place
    """Set by the backend's constructor."""
    records: JobRecords
    """What this GAHP recorded of its jobs: lent by the agent (:meth:`bind`) before any verb."""

    @classmethod
    @abc.abstractmethod
    def from_knobs(cls, knobs: Knobs) -> Backend:
        """Build the backend from HTCondor configuration; raises :class:`~gahp.core.errors.ConfigError`."""

    @classmethod
    def queue_problem(cls, queue: Optional[str], knob: Callable[[str], Optional[str]]) -> Optional[str]:
        """Why a pilot asking for ``queue`` would be held for its queue alone, under the configuration
        ``knob`` reads a knob's raw value from (None: the queue is served, or the configuration does not
        say). ``podgahp routes check`` asks it of every pilot a route sends here."""
        return None

    def bind(self, records: JobRecords, tidied: Callable[[str], None]) -> None:
        """Called once by the agent: the job records to read and to write a job's into before it is made
        (:meth:`~gahp.rules.records.JobRecords.note`), and what to call with the job id of each of the GAHP's
        own finished jobs the backend's clean-up deleted (its record, answers and figures are the agent's)."""
        self.records = records
        self.tidied = tidied

    @abc.abstractmethod
    def queue_of(self, job: PilotJob) -> str:
        """The queue a pilot would be made in (the black-hole guard's name for it); raises
        :class:`~gahp.core.errors.InvalidJob` or ConfigError for a queue this backend does not serve."""

    def queues(self) -> Tuple[str, ...]:
        """Every queue this backend serves (when every one is closed as a black hole, ping fails)."""
        return ()

    @abc.abstractmethod
    def ping(self) -> List[str]:
        """What is wrong with the service or this identity's rights there, each a sentence telling an
        admin what to fix (empty: all is well); raises a :class:`~gahp.core.errors.GahpError` when even that
        cannot be found out."""

    @abc.abstractmethod
    def create(self, job: PilotJob) -> Created:
        """Start the pilot: idempotent per ``job.sandbox_id`` (while a live remote job exists for the
        sandbox, return it, ``made=False``). The job is recorded (``self.records.note``) before anything
        can make it run. Raises :class:`~gahp.core.errors.InvalidJob` or
        :class:`~gahp.core.errors.BackendError` for permanent refusals (QuotaExceeded and Invalid count
        against the queue), :class:`~gahp.core.errors.TransientError` when the service could not be reached."""

    def polled(self, job_id: str) -> None:
        """Called on a worker at every status of a job, before its lock is taken and whatever the answer
        (a final answer given before included): work that rides on the polls, such as a shared listing
        refreshed at most so often and the backend's clean-up over it. Raises as :meth:`observe`."""

    @abc.abstractmethod
    def observe(self, job_id: str) -> Seen:
        """The job as the service has it now, through the state table; a job that vanished without an
        outcome is ``Phase.REMOVED``. May do I/O; called with the job's lock held. Raises
        :class:`~gahp.core.errors.TransientError` only when the state cannot be known right now."""

    def cached(self, job_id: str) -> Optional[object]:
        """The backend's record of the job from memory, without I/O (:attr:`Seen.source`); None when it
        has none in memory."""
        return None

    def observe_cached(self, job_id: str, source: Optional[object]) -> Optional[Seen]:
        """The job observed at once, from ``source`` (:meth:`cached`'s) or memory, without I/O or waiting;
        None when :meth:`observe` must be asked on a worker (a job whose outputs are to be written)."""
        return None

    def check(self, job_id: str) -> None:
        """InvalidJob (nothing sent to the service) for a job id this GAHP may not act on."""

    @abc.abstractmethod
    def remove(self, job_id: str) -> None:
        """Stop and delete the job's remote object. Idempotent: unknown, finished or already deleted is
        success; a failure is tried again in the background by the agent."""

    @abc.abstractmethod
    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        """Replace the pilot's X.509 proxy with the file at ``proxy_path``."""

    def forget(self, job_id: str) -> None:
        """Drop what the backend keeps in memory of a job the agent forgot (cancelled, cleaned up)."""

    def totals(self) -> Tuple[int, int, float]:
        """(requests, errors, seconds waited) of the service's API so far, for the figures."""
        return 0, 0, 0.0

    def start(self) -> None:
        """Begin, in the background, what makes the first requests fast (connections, caches).
        Called once when the GAHP starts serving; must not block, and must not fail: a problem
        found here is the first request's to report."""

    def stop(self) -> None:
        """Make no new request from now on (a request waiting to be tried again gives up): the first
        step of closing."""

    def close(self) -> None:
        """Stop background work (watches, caches), then close connections. Called once when the GAHP exits."""

    @classmethod
    def ce_view(cls, knobs: Knobs) -> Optional[CeView]:
        """Optional: this backend as the CE-wide tools see it, built from the CE's configuration
        (:class:`CeView`); ConfigError when that configuration is wrong. None (the default): the
        tools skip this backend."""
        return None
