"""Where each pilot is, in its own job ad: ``podgahp reap`` writes what the census of the pass says of a
routed grid job's remote job into a few attributes of that job, so that ``condor_ce_q`` shows them
(``condor_ce_q -pr /usr/share/podgahp/podgahp.cpf``: the table ``podgahp q`` prints), and the
JobRouter copies them back to the source job (``PODGAHP_ATTRS_TO_COPY``, 50-podgahp-reap-defaults.conf).

=================  ===========================================================================
``PodgahpPod``     the service's name for the remote job (pod name, Lancium job number)
``PodgahpNode``    the node it runs on, when the service says (a pod's ``spec.nodeName``)
``PodgahpPhase``   the service's word for its state (``Pending``, ``Running``; Lancium's ``queued``...)
``PodgahpReason``  why it is where it is: the scheduler's reason of a pending pod, a container's
                   waiting reason, empty when it simply runs
``PodgahpCluster`` the cluster it is in, only where the CE's queues use several
=================  ===========================================================================

Nothing in podgahp reads these attributes back for any decision: this module reads them only to
compare them with what they should be, so a pass writes only what changed, and a job owner's
``condor_qedit`` of them is put right at the next pass. Each value is a ClassAd string built from the
service's answer: made printable, at most :data:`MAX_VALUE` characters, quoted by the bindings' rules.

A job is written only when it is a grid job of a backend of this CE (``GridResource``), its
``GridJobId`` names a remote job of the census, and that remote job was made for this very job: its
sandbox is the one ``GridJobId`` names and ends in this job's ``<cluster>.<proc>`` (where the census
says the sandbox: a pod's annotation; a Lancium job named by a grid job is listed without it). A grid job that names
no remote job yet (a new route of a source job that carries the last pilot's values) has the attributes
set to ``undefined``. A job whose remote job the census does not have keeps its last values.

The writes are grouped: one transaction per (attribute, value) over every job that needs it
(:func:`gahp.core.schedd.edit_jobs`), so a pass costs a transaction per new pod (each pod's name is its own
value) and one per distinct node, phase and reason that changed, whatever the number of unchanged
pilots. At most ``PODGAHP_REAP_MAX_JOB_AD_EDITS`` jobs are written per pass, in job-id order; the rest
wait for the next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from gahp.backends.base import RemoteJob
from gahp.core.config import Knobs
from gahp.core.errors import GahpError
from gahp.core.logs import printable
from gahp.core.schedd import gahp_job_ids, gahp_type

#: The attributes written, in the order of the print format's columns.
ATTRIBUTES = ("PodgahpPod", "PodgahpNode", "PodgahpPhase", "PodgahpReason", "PodgahpCluster")

#: What a pass reads of every grid job (with ``GridJobId``, which reap reads anyway).
READ = ("ClusterId", "ProcId", "GridResource") + ATTRIBUTES

#: Most characters of a value (a pod's reason may be a long message of the scheduler's).
MAX_VALUE = 300

#: The value of an attribute a job should not carry.
UNDEFINED = None

_SANDBOX_END = re.compile(r"_([0-9]+)\.([0-9]+)_[0-9]+$")


@dataclass(frozen=True)
class JobAdSettings:
    enabled: bool = True
    """``PODGAHP_REAP_JOB_ATTRIBUTES``: whether a pass writes the attributes."""
    max_jobs: int = 2000
    """``PODGAHP_REAP_MAX_JOB_AD_EDITS``: most jobs whose ad one pass writes."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> "JobAdSettings":
        return cls(enabled=knobs.boolean("PODGAHP_REAP_JOB_ATTRIBUTES", True),
                   max_jobs=knobs.integer("PODGAHP_REAP_MAX_JOB_AD_EDITS", 2000, minimum=0, maximum=1_000_000))


@dataclass(frozen=True)
class Edit:
    """One transaction: ``attribute`` set to ``value`` (None: ``undefined``) in every job of ``jobs``."""

    attribute: str
    value: Optional[str]
    jobs: Tuple[str, ...]

    @property
    def text(self) -> str:
        """The value as a ClassAd expression: a quoted string, or ``undefined``."""
        return "undefined" if self.value is None else quote(self.value)


@dataclass
class Written:
    """What the job-ad writes of one pass did."""

    jobs: int = 0
    """Jobs whose ad was written (or, in a dry run, would have been)."""
    transactions: int = 0
    """Schedd transactions made."""
    deferred: int = 0
    """Jobs that needed a write beyond the pass's bound, left for the next."""
    errors: List[str] = field(default_factory=list)


def quote(text: str) -> str:
    """``text`` as a ClassAd string literal (backslash and double quote escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _bounded(text: str) -> str:
    return printable(" ".join(text.split()))[:MAX_VALUE]


def wanted(remote: Optional[RemoteJob]) -> Dict[str, Optional[str]]:
    """The attributes a job whose remote job is ``remote`` should carry (None: no remote job yet)."""
    if remote is None:
        return {a: UNDEFINED for a in ATTRIBUTES}
    return {"PodgahpPod": _bounded(remote.name), "PodgahpNode": _bounded(remote.node),
            "PodgahpPhase": _bounded(remote.state), "PodgahpReason": _bounded(remote.reason),
            "PodgahpCluster": _bounded(remote.cluster) if remote.cluster else UNDEFINED}


def _current(value: object) -> Optional[str]:
    """A value of the ad as read, in the form of :func:`wanted` (anything not a string differs from
    every string: an expression or a number a user put there is rewritten)."""
    if value is None:
        return UNDEFINED
    return value if isinstance(value, str) else f"\0{value!r}"


def _made_for(remote: RemoteJob, sandbox: str, cluster: object, proc: object) -> bool:
    """Whether ``remote`` was made for the job ``cluster.proc`` whose ``GridJobId`` names ``sandbox``. A
    remote job whose sandbox the census does not say (a Lancium job a grid job names is listed without
    its details) is the grid job's as the census takes it: by ``GridJobId``."""
    if not remote.sandbox:
        return True
    end = _SANDBOX_END.search(remote.sandbox)
    return (remote.sandbox == sandbox and end is not None
            and (end.group(1), end.group(2)) == (str(cluster), str(proc)))


def _int(value: object) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def plan(ads: Iterable[Mapping[str, object]], jobs: Iterable[RemoteJob], backends: Iterable[str],
         max_jobs: int) -> Tuple[List[Edit], int]:
    """The grouped edits that put the attributes of ``ads`` (grid jobs as a pass read them, with
    :data:`READ` and ``GridJobId``) right for the remote jobs ``jobs`` of backends ``backends``, and how
    many jobs that needed a write are left for the next pass (beyond ``max_jobs``). A pure function."""
    by_id = {j.job_id: j for j in jobs}
    served = set(backends)
    changes = sorted(c for c in (_change(ad, by_id, served) for ad in ads) if c is not None)
    groups: Dict[Tuple[str, Optional[str]], List[str]] = {}
    for _, job, differ in changes[:max_jobs]:
        for attribute, value in differ.items():
            groups.setdefault((attribute, value), []).append(job)
    edits = [Edit(a, v, tuple(j)) for (a, v), j in groups.items()]
    return edits, max(0, len(changes) - max_jobs)


def _change(ad: Mapping[str, object], by_id: Mapping[str, RemoteJob],
            served: Set[str]) -> Optional[Tuple[Tuple[int, int], str, Dict[str, Optional[str]]]]:
    """(sort key, job id, attributes that differ) of one grid job that needs a write, else None."""
    cluster, proc = _int(ad.get("ClusterId")), _int(ad.get("ProcId"))
    if cluster is None or proc is None or gahp_type(ad.get("GridResource")) not in served:
        return None
    named = gahp_job_ids(ad.get("GridJobId"))
    remote = by_id.get(named[0]) if named else None
    if named:
        words = str(ad.get("GridJobId")).split(" ")
        if remote is None or not _made_for(remote, words[2] if len(words) > 2 else "", cluster, proc):
            return None  # not listed (gone, or its place could not be read), or not made for this job
    differ = {a: v for a, v in wanted(remote).items() if _current(ad.get(a)) != v}
    return ((cluster, proc), f"{cluster}.{proc}", differ) if differ else None


#: Writes one group: (job ids, attribute, ClassAd expression) -> jobs edited; raises GahpError.
Editor = Callable[[Sequence[str], str, str], int]


def write(edits: List[Edit], deferred: int, edit: Optional[Editor]) -> Written:
    """Make ``edits`` through ``edit`` (None: a dry run, nothing written); one failed group is an error
    of the pass, the others are still made."""
    written = Written(jobs=len({j for e in edits for j in e.jobs}), deferred=deferred)
    if edit is None:
        return written
    for one in edits:
        try:
            edit(one.jobs, one.attribute, one.text)
            written.transactions += 1
        except GahpError as e:
            written.errors.append(f"{one.attribute} of {len(one.jobs)} jobs (e.g. {one.jobs[0]}) not written: "
                                  f"{printable(str(e))[:300]}")
    return written
