"""``podgahp q``: the CE's routed Kubernetes pilots joined with their pods.

The gridmanager keeps a pilot's pod name (in ``GridJobId``) but not its node, phase or why it waits;
this answers "where is pilot 1234.0 running, on which node, why is it still idle?" from two reads
whatever the number of pilots: one schedd query and one pod LIST per (cluster, namespace).
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from gahp.backends.k8s.identity import parse_job_id
from gahp.backends.k8s.pod import CONTAINER, LABEL_QUEUE
from gahp.backends.k8s.settings import KubernetesSettings, label_value
from gahp.backends.k8s.state import classify, parse_time
from gahp.backends.k8s.view import PodView, container_state
from gahp.errors import InvalidJob
from gahp.logs import printable
from gahp.schedd import gahp_job_ids

JsonObj = Dict[str, Any]

#: The ads' attributes ``podgahp q`` reads.
JOB_ATTRIBUTES = ["ClusterId", "ProcId", "Owner", "RouteName", "GridJobId", "GridResource", "JobStatus",
                  "RoutedFromJobId", "QDate", "HoldReason", "BatchQueue"]

#: HTCondor's one-letter job states, as condor_q shows them.
JOB_STATUS = {1: "I", 2: "R", 3: "X", 4: "C", 5: "H", 6: "E", 7: "S"}


@dataclass(frozen=True)
class PilotRow:
    """One routed pilot and what its pod says (pod fields empty when it has none)."""

    job: str
    source: str
    owner: str
    route: str
    queue: str
    status: str
    pod: str
    namespace: str
    node: str
    phase: str
    age_s: Optional[int]
    reason: str

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _pod_of(grid_job_id: str) -> Optional[Tuple[str, str]]:
    for word in gahp_job_ids(grid_job_id):
        try:
            return parse_job_id(word)
        except InvalidJob:
            continue
    return None


def _reason(pod: PodView, settings: KubernetesSettings, queue: str, now: datetime.datetime) -> str:
    """Why the pod is where it is, in the words the GAHP would use (empty when running normally)."""
    queues = {label_value(q.name.lower()): q for q in settings.queues.values()}
    q = queues.get(queue) or settings.queue(None)
    classified = classify(dict(pod.raw), now=now, unschedulable_timeout_s=q.unschedulable_timeout_s,
                          disruption_action=q.disruption_action)
    if classified.message:
        return classified.message
    waiting = container_state(pod.container_status(CONTAINER), "waiting")
    return str(waiting.get("reason") or pod.reason or "")


def join(ads: Iterable[Mapping[str, Any]], pods: Iterable[JsonObj], settings: KubernetesSettings,
         now: datetime.datetime) -> List[PilotRow]:
    """A row per routed job, in job-id order, with its pod (if the list has it)."""
    by_name = {(PodView(p).namespace, PodView(p).name): PodView(p) for p in pods}
    rows = []
    for ad in ads:
        where = _pod_of(str(ad.get("GridJobId") or ""))
        pod = by_name.get(where) if where else None
        queue = (pod.label(LABEL_QUEUE) if pod else "") or str(ad.get("BatchQueue") or "")
        created = parse_time(pod.created) if pod else None
        qdate = ad.get("QDate")
        since = created or (datetime.datetime.fromtimestamp(qdate, datetime.timezone.utc)
                            if isinstance(qdate, int) else None)
        if pod is not None:
            reason = _reason(pod, settings, queue, now)
        elif where is not None:
            reason = "pod gone"
        else:
            reason = "no pod yet"
        if JOB_STATUS.get(_int(ad.get("JobStatus"))) == "H" and ad.get("HoldReason"):
            reason = f"held: {ad.get('HoldReason')}"
        rows.append(PilotRow(
            job=f"{ad.get('ClusterId')}.{ad.get('ProcId')}", source=str(ad.get("RoutedFromJobId") or ""),
            owner=str(ad.get("Owner") or ""), route=str(ad.get("RouteName") or ""), queue=queue,
            status=JOB_STATUS.get(_int(ad.get("JobStatus")), "?"),
            pod=pod.name if pod else (where[1] if where else ""), namespace=where[0] if where else "",
            node=pod.node if pod else "", phase=pod.phase if pod else "",
            age_s=int((now - since).total_seconds()) if since else None, reason=" ".join(reason.split())))
    return sorted(rows, key=lambda r: tuple(int(x) if x.isdigit() else 0 for x in r.job.split(".")))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def matches(row: PilotRow, queue: Optional[str], node: Optional[str], phase: Optional[str]) -> bool:
    return ((queue is None or row.queue == label_value(queue.lower()))
            and (node is None or row.node == node)
            and (phase is None or row.phase.lower() == phase.lower()))


def age_text(seconds: Optional[int]) -> str:
    """condor_q's ``D+HH:MM:SS``."""
    if seconds is None:
        return "?"
    seconds = max(0, seconds)
    days, rest = divmod(seconds, 86400)
    return f"{days}+{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


COLUMNS = (("JOB", "job"), ("SOURCE", "source"), ("OWNER", "owner"), ("ROUTE", "route"), ("QUEUE", "queue"),
           ("ST", "status"), ("POD", "pod"), ("NODE", "node"), ("PHASE", "phase"), ("AGE", "age"),
           ("REASON", "reason"))


def table(rows: List[PilotRow]) -> str:
    """The rows as condor_q prints jobs: a header, one line each, a total. Every field is made printable
    (a hold reason, a queue or a source job id is user input: no ESC, BEL or CR reaches the terminal)."""
    cells = [[age_text(r.age_s) if key == "age" else (printable(str(getattr(r, key))) or "-") for _, key in COLUMNS]
             for r in rows]
    widths = [max([len(title)] + [len(c[i]) for c in cells]) for i, (title, _) in enumerate(COLUMNS)]
    widths[-1] = 0  # the reason is last and not padded
    lines = [" ".join(title.ljust(w) for (title, _), w in zip(COLUMNS, widths)).rstrip()]
    lines += [" ".join(c.ljust(w) for c, w in zip(cell, widths)).rstrip() for cell in cells]
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r.phase or "no pod"] = counts.get(r.phase or "no pod", 0) + 1
    summary = printable(", ".join(f"{n} {phase.lower()}" for phase, n in sorted(counts.items())))
    lines.append("")
    lines.append(f"Total for this CE: {len(rows)} pilots" + (f"; pods: {summary}" if rows else ""))
    return "\n".join(lines)


def long_form(rows: List[PilotRow]) -> str:
    """``-l``: each row as ``name = value`` lines, a blank line between pilots."""
    blocks = []
    for r in rows:
        blocks.append("\n".join(f"{key} = {value!r}" if isinstance(value, str) else f"{key} = {value}"
                                for key, value in r.as_dict().items() if value is not None))
    return "\n\n".join(blocks)
