"""The interface every backend implements, and nothing else: what it must do, and what it may.

A backend turns the five things the gridmanager asks of a batch system into calls to one remote
service (:class:`Backend`). It knows nothing about the BLAHP wire format: it takes a
:class:`~gahp.job.PilotJob`, returns job ids and :class:`~gahp.jobstate.JobState` values, and raises
:mod:`gahp.errors` classes. Every method may be called from several worker threads at once, and from
a process that has never seen the job before (the gridmanager restarts GAHPs freely), so a job id
alone must be enough to act.

Declared capabilities beyond the five verbs: a backend whose :meth:`Backend.ce_view` gives a
:class:`CeView` is covered by the CE-wide tools, ``podgahp reap`` (:meth:`CeView.census` and
:meth:`CeView.delete`), ``podgahp q`` and ``podgahp health`` (the census) and ``podgahp trace``
(:meth:`CeView.trace`, optional). A backend without one (the in-memory test backend) is skipped by
them. What the tools do with a census, the orphan rules, the table, the figures, is theirs, the
same for every backend (:mod:`gahp.orphans`, :mod:`gahp.overview`, :mod:`gahp.health`).
"""

from __future__ import annotations

import abc
import datetime
from dataclasses import dataclass, field
from typing import Callable, ClassVar, FrozenSet, List, Optional, Tuple

from gahp.config import Knobs
from gahp.hops import Hop
from gahp.job import PilotJob
from gahp.jobstate import JobState

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
        name is kept). Already gone is success; raises :class:`~gahp.errors.GahpError` otherwise."""

    def trace(self, grid_job_id: str, queue: Optional[str], user: str, ping: bool) -> Tuple[List[Hop], List[str]]:
        """Optional, for ``podgahp trace``: the remote hops of the job a routed job's ``GridJobId``
        names (after "GAHP request"), the first of :attr:`hops` up to the one it stops at, and with
        ``ping`` what the GAHP's ping would find wrong. The default: no hops (the trace goes from the
        GAHP request to the pilot's output)."""
        return [], []

    def close(self) -> None:
        """Close connections; called once when the tool is done."""


class Backend(abc.ABC):
    """One remote service that runs pilots."""

    #: The batch type this backend serves (``GridResource = "batch <name>"``).
    name: ClassVar[str]
    #: How a pilot asking for a whole node (``WantWholeNode``, forwarded as ``WholeNodes``) is given
    #: one, in a sentence for ``podgahp routes check`` (which knobs decide, what is refused).
    whole_node: ClassVar[str] = "this backend gives it the cores and memory it asks for, no more"

    @classmethod
    @abc.abstractmethod
    def from_knobs(cls, knobs: Knobs) -> Backend:
        """Build the backend from HTCondor configuration; raises :class:`~gahp.errors.ConfigError`."""

    @classmethod
    def queue_problem(cls, queue: Optional[str], knob: Callable[[str], Optional[str]]) -> Optional[str]:
        """Why a pilot asking for ``queue`` would be held for its queue alone, under the configuration
        ``knob`` reads a knob's raw value from (None: the queue is served, or the configuration does not
        say). ``podgahp routes check`` asks it of every pilot a route sends here."""
        return None

    @abc.abstractmethod
    def ping(self) -> None:
        """Check that the service answers and this identity may run pilots there.

        Raises a :class:`~gahp.errors.GahpError` whose message tells an admin what to fix.
        """

    @abc.abstractmethod
    def submit(self, job: PilotJob) -> str:
        """Start the pilot and return its job id: printable, no spaces, self-describing.

        Idempotent per ``job.sandbox_id``: while a live remote job exists for the sandbox, return
        its id instead of starting another. Raises :class:`~gahp.errors.InvalidJob` or
        :class:`~gahp.errors.BackendError` for permanent refusals, :class:`~gahp.errors.TransientError`
        when the service could not be reached.
        """

    @abc.abstractmethod
    def status(self, job_id: str) -> JobState:
        """The pilot's current state; a job that vanished without an outcome is ``Phase.REMOVED``.

        Outputs (``Out``/``Err``) are in place before a ``Phase.COMPLETED`` state is returned.
        Raises :class:`~gahp.errors.TransientError` only when the state cannot be known right now.
        """

    def status_now(self, job_id: str) -> Optional[JobState]:
        """The pilot's state if it can be known at once, from memory, without I/O or waiting; None
        when :meth:`status` must be asked (on a worker thread). The server answers a status from here
        on its reading thread, so this must never block."""
        return None

    @abc.abstractmethod
    def cancel(self, job_id: str) -> None:
        """Stop and delete the pilot. Idempotent: unknown, finished or already deleted is success."""

    @abc.abstractmethod
    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        """Replace the pilot's X.509 proxy with the file at ``proxy_path``."""

    def start(self) -> None:
        """Begin, in the background, what makes the first requests fast (connections, caches).
        Called once when the GAHP starts serving; must not block, and must not fail: a problem
        found here is the first request's to report."""

    def close(self) -> None:
        """Stop background work (watches, caches). Called once when the GAHP exits."""

    @classmethod
    def ce_view(cls, knobs: Knobs) -> Optional[CeView]:
        """Optional: this backend as the CE-wide tools see it, built from the CE's configuration
        (:class:`CeView`); ConfigError when that configuration is wrong. None (the default): the
        tools skip this backend."""
        return None
