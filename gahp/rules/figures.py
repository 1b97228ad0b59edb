"""Health figures: what each GAHP counts, and their sum for the CE, published the HTCondor way.

Each GAHP (one per job owner and backend) keeps counters in memory and writes them, at most every
``STATS_PERIOD_S`` seconds while it works, to ``PodgahpStats.<ce>-<user>-<backend>.json`` in its
user's own directory in ``PODGAHP_STATE_DIR`` (:mod:`gahp.core.statedir`, next to its black-hole state). ``podgahp reap`` (the CE's schedd cron job, as
the condor user) adds the files of all users up, with what its own LIST of the cluster shows (pods per
queue and phase) and the black-hole state of each queue, and prints them as ClassAd attributes that the
schedd merges into its ad (``condor_ce_status -schedd -l``); ``PODGAHP_PROMETHEUS_FILE`` also gets them
in Prometheus text exposition format (for node_exporter's textfile collector). Only a user's own
directory is read for that user (another user can neither write there nor pre-create its name), and a
file whose owner is not that user is not counted: a user's files make that user's figures, no one
else's. A closure is counted at most until ``PODGAHP_BLACKHOLE_BACKOFF_MAX_SECONDS`` from now (no
GAHP closes a queue longer), and every text from a file is made printable (:func:`gahp.core.logs.printable`). Each figure is described in
:data:`FIGURES` and ``docs/kubernetes.md``.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from gahp.core.logs import printable
from gahp.core.statedir import user_directories

log = logging.getLogger(__name__)

#: Seconds between two writes of a GAHP's counters.
STATS_PERIOD_S = 5.0
#: Most closures of one queue a GAHP's file may claim (one a second for 11 days): beyond, not counted.
MAX_CLOSURES = 10 ** 6
#: Counter files older than this are from GAHPs long gone: not counted.
STALE_S = 7 * 86400.0

#: GAHP counters: (name in the file, ClassAd attribute, Prometheus metric, help text).
COUNTERS: Tuple[Tuple[str, str, str, str], ...] = (
    ("api_requests", "GahpApiRequests", "podgahp_gahp_api_requests_total",
     "API requests made by the GAHPs, every backend's (every attempt)"),
    ("api_errors", "GahpApiErrors", "podgahp_gahp_api_errors_total",
     "API requests that got an error answer or none"),
    ("api_seconds", "GahpApiSeconds", "podgahp_gahp_api_seconds_total",
     "Seconds the GAHPs waited for API answers"),
    ("pods_created", "GahpPodsCreated", "podgahp_gahp_pods_created_total", "Pods created for pilots"),
    ("pods_refused", "GahpPodsRefused", "podgahp_gahp_pods_refused_total",
     "Pod creations refused by the API server (admission, quota)"),
    ("submits_refused_blackhole", "GahpBlackHoleRefusals", "podgahp_gahp_blackhole_refusals_total",
     "Submits refused because their queue was closed as a black hole"),
    ("pilots_failed", "GahpPilotsFailed", "podgahp_gahp_pilots_failed_total",
     "Pilots that failed (held for their pod, or a fast error exit)"),
    ("pilots_succeeded", "GahpPilotsSucceeded", "podgahp_gahp_pilots_succeeded_total",
     "Pilots that ended without failing"),
    ("pods_cleaned", "GahpPodsCleaned", "podgahp_gahp_pods_cleaned_total",
     "Finished pods deleted by the GAHPs' own clean-up"),
)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:200]


def scope_of(ce_name: str, user: str, backend: str) -> str:
    """The name part of a GAHP's state files."""
    return _safe(f"{ce_name}-{user}-{backend}")


class Stats:
    """One GAHP's counters (thread-safe); ``api`` returns (requests, errors, seconds) of its API clients.

    :meth:`start` writes them every ``STATS_PERIOD_S`` seconds when they changed, from a thread of its
    own, so the file is current however the GAHP is used; :meth:`close` writes them a last time."""

    def __init__(self, state_dir: str, scope: str, api: Callable[[], Tuple[int, int, float]],
                 clock: Callable[[], float] = time.time) -> None:
        self.path = os.path.join(state_dir, f"PodgahpStats.{scope}.json")
        self._api = api
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: Dict[str, float] = {}
        self._last: Optional[Dict[str, float]] = None
        self._started = clock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="podgahp-stats", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(STATS_PERIOD_S):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.flush()

    def flush(self) -> None:
        """Write the counters if they changed since the last write."""
        requests, errors, seconds = self._api()
        with self._lock:
            figures = dict(self._counts, api_requests=requests, api_errors=errors, api_seconds=round(seconds, 3))
            if figures == self._last:
                return
            self._last = figures
        write_shared(self.path, json.dumps(dict(figures, started=self._started, updated=self._clock(),
                                                pid=os.getpid())))


def write_shared(path: str, text: str) -> None:
    """Replace ``path`` atomically with ``text``, readable by all (figures, never secrets); a failure
    is logged: counting goes on in memory."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".Podgahp.", dir=os.path.dirname(os.path.abspath(path)))
        try:
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        log.warning("%s cannot be written: %s", path, e)


def read_owned(path: str, user: str, limit: int = 1 << 20) -> Optional[Any]:
    """The JSON in ``path`` if it is a regular file owned by ``user`` (not a link); else None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            try:
                owner = pwd.getpwuid(info.st_uid).pw_name
            except KeyError:
                owner = str(info.st_uid)
            if owner != user and info.st_uid != 0:
                log.warning("%s belongs to %s, not %s: not counted", path, owner, user)
                return None
            return json.loads(f.read(limit))
    except (OSError, ValueError):
        return None


@dataclass
class CeHealth:
    """The CE's figures: GAHP counters summed over users, pods per queue and phase, black holes."""

    counters: Dict[str, float] = field(default_factory=dict)
    gahps: int = 0
    pods: Dict[str, Dict[str, int]] = field(default_factory=dict)
    """queue -> pod phase -> pods."""
    blackholes: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    """queue -> closed (bool), until (epoch), cause, closures (sum over users)."""


def gather(state_dir: str, ce_name: str, backend: str, pods_by_queue: Mapping[str, Mapping[str, int]],
           now: Optional[float] = None, max_closed_s: Optional[float] = None) -> CeHealth:
    """Add up the GAHPs' files of this CE and backend in each user's own directory in ``state_dir``;
    ``max_closed_s``: the longest a GAHP closes a queue (``PODGAHP_BLACKHOLE_BACKOFF_MAX_SECONDS``)."""
    now = time.time() if now is None else now
    health = CeHealth(pods={q: dict(p) for q, p in pods_by_queue.items()})
    for user, directory in sorted(user_directories(state_dir).items())[:10000]:
        scope = scope_of(ce_name, user, backend)
        stats = read_owned(os.path.join(directory, f"PodgahpStats.{scope}.json"), user)
        if isinstance(stats, dict):
            _add_counters(health, stats, now)
        holes = read_owned(os.path.join(directory, f"PodgahpBlackholes.{scope}.json"), user)
        if isinstance(holes, dict):
            _add_blackholes(health, holes.get("queues"), now, max_closed_s)
    return health


def _add_counters(health: CeHealth, data: Mapping[str, Any], now: float) -> None:
    updated = data.get("updated")
    if not isinstance(updated, (int, float)) or now - updated > STALE_S:
        return
    health.gahps += 1
    for key, _, _, _ in COUNTERS:
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e15:
            health.counters[key] = health.counters.get(key, 0) + value


def _add_blackholes(health: CeHealth, queues: Any, now: float, max_closed_s: Optional[float]) -> None:
    for queue, record in list(queues.items() if isinstance(queues, dict) else [])[:256]:
        if not isinstance(queue, str) or not isinstance(record, dict):
            continue
        entry = health.blackholes.setdefault(printable(queue[:200]),
                                             {"closed": False, "until": 0.0, "cause": "", "closures": 0})
        until = record.get("closed_until")
        closures = record.get("closed_count")
        if isinstance(closures, int) and not isinstance(closures, bool) and 0 <= closures < MAX_CLOSURES:
            entry["closures"] += closures
        if isinstance(until, (int, float)) and not isinstance(until, bool) and until > now and until > entry["until"]:
            if max_closed_s is not None:
                until = min(float(until), now + max_closed_s)
            cause = record.get("cause")
            entry.update(closed=True, until=float(until),
                         cause=printable(cause[:300]) if isinstance(cause, str) else "")


def _attr_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def _classad_string(text: str) -> str:
    return '"' + printable(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def classad_lines(health: CeHealth) -> List[str]:
    """The figures as ``Attr = value`` lines (the schedd cron job's prefix is prepended)."""
    lines = [f"GahpCount = {health.gahps}"]
    for key, attr, _, _ in COUNTERS:
        value = health.counters.get(key, 0)
        lines.append(f"{attr} = {round(value, 3) if key == 'api_seconds' else int(value)}")
    requests = health.counters.get("api_requests", 0)
    latency = health.counters.get("api_seconds", 0) / requests if requests else 0.0
    lines.append(f"GahpApiLatencyAvg = {latency:.4f}")
    for queue in sorted(set(health.pods) | set(health.blackholes)):
        q = _attr_part(queue)
        for phase in ("Pending", "Running", "Succeeded", "Failed"):
            lines.append(f"Queue_{q}_Pods{phase} = {health.pods.get(queue, {}).get(phase, 0)}")
        hole = health.blackholes.get(queue, {})
        lines.append(f"Queue_{q}_BlackHole = {'true' if hole.get('closed') else 'false'}")
        lines.append(f"Queue_{q}_BlackHoleClosures = {hole.get('closures', 0)}")
        if hole.get("closed"):
            lines.append(f"Queue_{q}_BlackHoleUntil = {int(hole['until'])}")
            lines.append(f"Queue_{q}_BlackHoleCause = {_classad_string(str(hole.get('cause', '')))}")
    return lines


@dataclass(frozen=True)
class Family:
    """One metric family: its name (a counter's without ``_total``), type, help and samples."""

    name: str
    kind: str
    """``counter`` or ``gauge``."""
    text: str
    samples: Tuple[Tuple[Tuple[Tuple[str, str], ...], float], ...]
    """(labels as (name, value) pairs, value)."""


def metric_families(health: CeHealth, ce_name: str, extra: Iterable[Tuple[str, str, float]] = ()) -> List[Family]:
    """The figures as metric families, a sample for every series: every counter, and every queue known
    (configured, with pods, or with a black-hole state) with each pod phase, 0 when there is none;
    ``extra``: (gauge name, help, value)."""
    ce = (("ce", ce_name),)
    families = [Family("podgahp_gahps", "gauge", "GAHP processes whose counters are counted", ((ce, health.gahps),))]
    for key, _, name, text in COUNTERS:
        families.append(Family(name[:-len("_total")], "counter", text, ((ce, health.counters.get(key, 0)),)))
    queues = sorted(set(health.pods) | set(health.blackholes))
    families.append(Family("podgahp_pods", "gauge", "Pods of this CE by queue and phase", tuple(
        (ce + (("queue", q), ("phase", phase)), health.pods.get(q, {}).get(phase, 0))
        for q in queues for phase in ("Pending", "Running", "Succeeded", "Failed"))))
    families.append(Family("podgahp_queue_blackhole", "gauge", "1 while the queue is closed as a black hole", tuple(
        (ce + (("queue", q),), 1 if health.blackholes.get(q, {}).get("closed") else 0) for q in queues)))
    families.append(Family("podgahp_queue_blackhole_closures", "counter", "Times the queue was closed as a black hole",
                           tuple((ce + (("queue", q),), health.blackholes.get(q, {}).get("closures", 0))
                                 for q in queues)))
    families += [Family(name, "gauge", text, ((ce, value),)) for name, text, value in extra]
    return families


def _escape(text: str, quote: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if quote else text


def _number(value: float) -> str:
    if isinstance(value, bool) or (isinstance(value, int)):
        return str(int(value))
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(float(value))


def exposition(families: Iterable[Family], openmetrics: bool = False) -> str:
    """The families in the classic text format (0.0.4, what textfile collectors read: a counter's
    HELP and TYPE name its ``_total`` series) or in OpenMetrics 1.0 (they name the family; ``# EOF``)."""
    out: List[str] = []
    for family in families:
        sample_name = family.name + ("_total" if family.kind == "counter" else "")
        named = family.name if openmetrics else sample_name
        out.append(f"# HELP {named} {_escape(family.text, False)}")
        out.append(f"# TYPE {named} {family.kind}")
        for labels, value in family.samples:
            text = ",".join(f'{k}="{_escape(v, True)}"' for k, v in labels)
            out.append(f"{sample_name}{{{text}}} {_number(value)}")
    if openmetrics:
        out.append("# EOF")
    return "\n".join(out) + "\n"


def prometheus_text(health: CeHealth, ce_name: str, extra: Iterable[Tuple[str, str, float]] = (),
                    openmetrics: bool = False) -> str:
    """The figures in the Prometheus text exposition format (or OpenMetrics); ``extra``: (gauge, help, value)."""
    return exposition(metric_families(health, ce_name, list(extra)), openmetrics)


#: What a scraper sends in ``Accept`` when it takes OpenMetrics, and the type of that answer.
OPENMETRICS_TYPE = "application/openmetrics-text"
OPENMETRICS_CONTENT = "application/openmetrics-text; version=1.0.0; charset=utf-8"
CLASSIC_CONTENT = "text/plain; version=0.0.4; charset=utf-8"


def serve_metrics(families: Callable[[], List[Family]], address: str, port: int) -> Any:
    """An HTTP server answering ``/metrics`` with fresh figures at each scrape, in the format the
    scraper asks for (OpenMetrics when its ``Accept`` names it, else the classic text), in a thread of
    its own; returns the server (``server_address`` says the port, ``shutdown()`` stops it)."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            openmetrics = OPENMETRICS_TYPE in (self.headers.get("Accept") or "")
            body = exposition(families(), openmetrics).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", OPENMETRICS_CONTENT if openmetrics else CLASSIC_CONTENT)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            log.debug("metrics: " + format, *args)

    server = http.server.ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server