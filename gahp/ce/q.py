"""``podgahp q``: the CE's routed pilots joined with their remote jobs, whatever the backend.

The gridmanager keeps a pilot's job id (in ``GridJobId``) but not where it runs, its remote state or
why it waits; this answers "where is pilot 1234.0 running, on which node, why is it still idle?" from
two reads whatever the number of pilots: one schedd query and each backend's census
(:class:`gahp.backends.base.CeView`: for Kubernetes one pod LIST per cluster and namespace).
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from gahp.backends.base import RemoteJob
from gahp.ce.views import ReapSettings, ce_views, take_censuses
from gahp.core.logs import printable
from gahp.core import plugins
from gahp.core.config import Knobs
from gahp.core.schedd import GRID_UNIVERSE, SCHEDD_KNOBS, ScheddUnavailable, gahp_job_ids, gahp_type, query

#: The ads' attributes ``podgahp q`` reads.
JOB_ATTRIBUTES = ["ClusterId", "ProcId", "Owner", "RouteName", "GridJobId", "GridResource", "JobStatus",
                  "RoutedFromJobId", "QDate", "HoldReason", "BatchQueue"]

#: HTCondor's one-letter job states, as condor_q shows them.
JOB_STATUS = {1: "I", 2: "R", 3: "X", 4: "C", 5: "H", 6: "E", 7: "S"}


@dataclass(frozen=True)
class PilotRow:
    """One routed pilot and what its remote job says (remote fields empty when it has none)."""

    job: str
    source: str
    owner: str
    route: str
    backend: str
    """The batch type of its ``GridResource`` (``k8s``, ``lancium``)."""
    queue: str
    status: str
    remote: str
    """The service's name for its job (pod name, Lancium job number)."""
    where: str
    """Where the remote job is (a namespace), when the service has places."""
    node: str
    phase: str
    """The service's word for the remote job's state."""
    age_s: Optional[int]
    reason: str

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def join(ads: Iterable[Mapping[str, Any]], jobs: Iterable[RemoteJob], now: datetime.datetime) -> List[PilotRow]:
    """A row per routed grid job of a backend, in job-id order, with its remote job (if a census has it)."""
    by_id = {j.job_id: j for j in jobs}
    rows = [_row(ad, by_id, now) for ad in ads]
    return sorted(rows, key=lambda r: tuple(int(x) if x.isdigit() else 0 for x in r.job.split(".")))


def _row(ad: Mapping[str, Any], by_id: Mapping[str, RemoteJob], now: datetime.datetime) -> PilotRow:
    """One routed grid job's row: what its ad says, and what its remote job (if a census has it) says."""
    named = gahp_job_ids(str(ad.get("GridJobId") or ""))
    job_id = named[0] if named else ""
    remote = by_id.get(job_id) if job_id else None
    status = JOB_STATUS.get(_int(ad.get("JobStatus")), "?")
    if status == "H" and ad.get("HoldReason"):
        reason = f"held: {ad.get('HoldReason')}"
    else:
        reason = remote.reason if remote is not None else "remote job gone" if job_id else "no remote job yet"
    row = PilotRow(
        job=f"{ad.get('ClusterId')}.{ad.get('ProcId')}", source=str(ad.get("RoutedFromJobId") or ""),
        owner=str(ad.get("Owner") or ""), route=str(ad.get("RouteName") or ""),
        backend=gahp_type(ad.get("GridResource")) or "", queue=str(ad.get("BatchQueue") or ""), status=status,
        remote=job_id.rsplit("/", 1)[-1], where="", node="", phase="", age_s=_age_s(ad, remote, now),
        reason=" ".join(reason.split()))
    if remote is None:
        return row
    return replace(row, queue=remote.queue or row.queue, remote=remote.name, where=remote.where, node=remote.node,
                   phase=remote.state)


def _age_s(ad: Mapping[str, Any], remote: Optional[RemoteJob], now: datetime.datetime) -> Optional[int]:
    """Seconds since the remote job was created (as the census saw it), else since the grid job was queued."""
    qdate = ad.get("QDate")
    since = (remote.created if remote is not None and remote.created is not None
             else datetime.datetime.fromtimestamp(qdate, datetime.timezone.utc) if isinstance(qdate, int) else None)
    clock = remote.listed_at if remote is not None and remote.listed_at is not None and remote.created else now
    return int((clock - since).total_seconds()) if since else None


def matches(row: PilotRow, queue: Optional[str], node: Optional[str], phase: Optional[str],
            backend: Optional[str] = None) -> bool:
    return ((queue is None or row.queue.lower() == queue.lower())
            and (node is None or row.node == node)
            and (phase is None or row.phase.lower() == phase.lower())
            and (backend is None or row.backend == backend))


def age_text(seconds: Optional[int]) -> str:
    """condor_q's ``D+HH:MM:SS``."""
    if seconds is None:
        return "?"
    seconds = max(0, seconds)
    days, rest = divmod(seconds, 86400)
    return f"{days}+{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


COLUMNS = (("JOB", "job"), ("SOURCE", "source"), ("OWNER", "owner"), ("ROUTE", "route"), ("QUEUE", "queue"),
           ("ST", "status"), ("REMOTE", "remote"), ("NODE", "node"), ("PHASE", "phase"), ("AGE", "age"),
           ("REASON", "reason"))


def table(rows: List[PilotRow]) -> str:
    """The rows as condor_q prints jobs: a header, one line each, a total. Every field is made printable
    (a hold reason, a queue or a source job id is user input, a remote job's fields are whoever may
    write them: no ESC, BEL or CR reaches the terminal)."""
    cells = [[age_text(r.age_s) if key == "age" else (printable(str(getattr(r, key))) or "-") for _, key in COLUMNS]
             for r in rows]
    widths = [max([len(title)] + [len(c[i]) for c in cells]) for i, (title, _) in enumerate(COLUMNS)]
    widths[-1] = 0  # the reason is last and not padded
    lines = [" ".join(title.ljust(w) for (title, _), w in zip(COLUMNS, widths)).rstrip()]
    lines += [" ".join(c.ljust(w) for c, w in zip(cell, widths)).rstrip() for cell in cells]
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r.phase or "no remote job"] = counts.get(r.phase or "no remote job", 0) + 1
    summary = printable(", ".join(f"{n} {phase.lower()}" for phase, n in sorted(counts.items())))
    lines.append("")
    lines.append(f"Total for this CE: {len(rows)} pilots" + (f"; remote jobs: {summary}" if rows else ""))
    return "\n".join(lines)


def long_form(rows: List[PilotRow]) -> str:
    """``-l``: each row as ``name = value`` lines, a blank line between pilots."""
    blocks = []
    for r in rows:
        blocks.append("\n".join(f"{key} = {value!r}" if isinstance(value, str) else f"{key} = {value}"
                                for key, value in r.as_dict().items() if value is not None))
    return "\n\n".join(blocks)


def pilots(knobs: Optional[Knobs] = None) -> Tuple[List[PilotRow], List[str]]:
    """``podgahp q``: the routed grid jobs of the CE's schedd for podgahp's backends, joined with this
    CE's remote jobs, and what could not be listed. Raises GahpError when the schedd cannot be asked."""
    knobs = knobs or Knobs()
    settings = ReapSettings.from_knobs(knobs)
    names = set(plugins.backend_names())
    try:
        ads = [ad for ad in query(GRID_UNIVERSE, JOB_ATTRIBUTES, settings.schedd_name, settings.schedd_pool)
               if gahp_type(ad.get("GridResource")) in names]
    except ScheddUnavailable as e:
        raise ScheddUnavailable(f"{e} {SCHEDD_KNOBS}") from e
    held = frozenset(w for ad in ads for w in gahp_job_ids(ad.get("GridJobId"))[:1])
    with ce_views(knobs) as views:
        censuses = take_censuses(views, held)
    errors = [e for c in censuses for e in c.errors]
    covered = {c.backend for c in censuses}
    for backend in sorted({gahp_type(ad.get("GridResource")) or "" for ad in ads} - covered):
        errors.append(f"{backend}: its remote jobs are not listed: the backend is not installed or not configured "
                      f"at this CE")
    now = datetime.datetime.now(datetime.timezone.utc)
    return join(ads, [j for c in censuses for j in c.jobs], now), errors
