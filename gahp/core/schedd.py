"""What the schedd knows, read with the htcondor bindings: the grid jobs that exist (for ``podgahp
reap`` and ``podgahp q``) and the routing attributes of one job (for :mod:`gahp.rules.provenance`).

``podgahp reap`` runs on the CE (as a schedd cron job) and asks the schedd holding the routed jobs,
by default the local one, or ``JOB_ROUTER_SCHEDD2_NAME`` where the JobRouter routes into a second
schedd (``PODGAHP_REAP_SCHEDD_NAME`` / ``PODGAHP_REAP_SCHEDD_POOL`` override).

Which GAHP serves a job is decided as the gridmanager decides it (``INFNBatchJob`` in HTCondor's
``condor_gridmanager/infnbatchjob.cpp``): ``GridResource`` split at single spaces (an empty word
counts), the first word ``batch`` (exactly) followed by the batch type, which the gridmanager lower-cases
before it reads ``<type>_GAHP``; further words make it a remote GAHP. ``batch K8S`` therefore starts
``k8s_gahp``, ``batch  k8s`` (two spaces) or ``Batch k8s`` do not. The job id the GAHP handed out is
the fourth word of ``GridJobId`` (``batch <type> <sandbox> <job id>``).

A GAHP asks through :class:`QueryProcess`, a child process of its own: the bindings hold Python's
global lock while they wait for the schedd's answer (htcondor2 of HTCondor 23 and 25), so a query
made in the GAHP's process would stop all of it (status answers, watches, other submits) for as long
as a busy schedd takes to answer.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from gahp.core.errors import GahpError

#: The constraint of every question about grid jobs: the grid universe.
GRID_UNIVERSE = "JobUniverse == 9"

_TYPE = re.compile(r"^[A-Za-z0-9_]+$")


#: Which knobs choose the schedd podgahp reap, q and trace read, for their errors.
SCHEDD_KNOBS = ("(the schedd holding the routed jobs is PODGAHP_REAP_SCHEDD_NAME / PODGAHP_REAP_SCHEDD_POOL, "
                "default JOB_ROUTER_SCHEDD2_NAME / _POOL, else the local schedd of that configuration)")


class ScheddUnavailable(GahpError):
    """The schedd could not be asked; nothing may be deleted on a guess."""


class IncompleteAnswer(ScheddUnavailable):
    """The schedd answered, but the answer cannot be shown to hold every job; nothing may be deleted."""


class EditRefused(GahpError):
    """The schedd did not make an edit of job ads (no right to, or it failed); nothing of it was made."""


def query(constraint: str, projection: List[str], name: Optional[str] = None,
          pool: Optional[str] = None) -> List[Dict[str, object]]:
    """Job ads of the local schedd (or schedd ``name`` of ``pool``) matching ``constraint``, as dicts."""
    try:
        ads = locate(name, pool).query(constraint=constraint, projection=projection)
    except Exception as e:  # noqa: BLE001 - the bindings raise several kinds; any means "unknown"
        raise ScheddUnavailable(f"{describe(name, pool)} cannot be queried: {e}") from e
    return [{key: ad.get(key) for key in projection} for ad in ads]


def start_time(name: Optional[str] = None, pool: Optional[str] = None) -> Optional[float]:
    """When the local schedd (or schedd ``name`` of ``pool``) started, from its ad in the collector
    (``DaemonStartTime``); None when the ad has none."""
    try:
        import classad2
        import htcondor2

        collector = htcondor2.Collector(pool) if pool else htcondor2.Collector()
        where = collector.locate(htcondor2.DaemonType.Schedd, name) if name else \
            collector.locate(htcondor2.DaemonType.Schedd)
        quoted = classad2.quote(str(where.get("Name", "")))
        ads = collector.query(htcondor2.AdType.Schedd, constraint=f"Name == {quoted}",
                              projection=["Name", "DaemonStartTime"])
    except Exception as e:  # noqa: BLE001 - the bindings raise several kinds; any means "unknown"
        raise ScheddUnavailable(f"{describe(name, pool)}'s ad cannot be read from the collector: {e}") from e
    for ad in ads:
        value = ad.get("DaemonStartTime")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


@dataclass(frozen=True)
class Expression:
    """A value of a job ad that is not a string, number or boolean (an expression, a list...), as its
    text: never equal to a plain value, as the bindings' objects are not."""

    text: str


#: Seconds a query made through :class:`QueryProcess` may take before its process is replaced.
QUERY_TIMEOUT_S = 120.0


class QueryProcess:
    """:func:`query` made by a child process (``python -m gahp.core.schedd``), one at a time, each within
    ``timeout`` seconds. The process starts at the first query and again after it failed; it ends when
    this object is closed, or with the GAHP (its standard input ends). Thread-safe."""

    def __init__(self, timeout: float = QUERY_TIMEOUT_S, argv: Optional[Sequence[str]] = None) -> None:
        self.timeout = timeout
        self.argv = list(argv) if argv else [sys.executable, "-m", "gahp.core.schedd"]
        self._lock = threading.Lock()
        self._process: Optional["subprocess.Popen[bytes]"] = None
        self._buffer = b""

    def query(self, constraint: str, projection: List[str], name: Optional[str] = None,
              pool: Optional[str] = None) -> List[Dict[str, object]]:
        """As :func:`query`; ScheddUnavailable also when the process fails or takes too long."""
        request = json.dumps({"constraint": constraint, "projection": projection, "name": name, "pool": pool})
        with self._lock:
            try:
                answer = self._ask(request.encode() + b"\n")
            except (OSError, ValueError, TimeoutError) as e:
                self._stop()
                raise ScheddUnavailable(f"{describe(name, pool)} cannot be queried: the query process failed: {e}") from e
        if "error" in answer:
            raise ScheddUnavailable(str(answer["error"]))
        return [{k: _value(v) for k, v in ad.items()} for ad in answer["ads"]]

    def start_time(self, name: Optional[str] = None, pool: Optional[str] = None) -> Optional[float]:
        """As :func:`start_time`, asked of the process."""
        request = json.dumps({"kind": "start", "name": name, "pool": pool})
        with self._lock:
            try:
                answer = self._ask(request.encode() + b"\n")
            except (OSError, ValueError, TimeoutError) as e:
                self._stop()
                raise ScheddUnavailable(f"{describe(name, pool)}'s start cannot be read: the query process failed: "
                                        f"{e}") from e
        if "error" in answer:
            raise ScheddUnavailable(str(answer["error"]))
        value = answer.get("start")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def _ask(self, request: bytes) -> Dict[str, Any]:
        process = self._process
        if process is None or process.poll() is not None:
            process = self._process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                       close_fds=True)
            self._buffer = b""
        stdin, stdout = process.stdin, process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(request)
        stdin.flush()
        deadline = time.monotonic() + self.timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer in {self.timeout:g} s")
            ready, _, _ = select.select([stdout], [], [], remaining)
            if ready:
                chunk = os.read(stdout.fileno(), 1 << 16)
                if not chunk:
                    raise OSError(f"the query process ended (exit code {process.wait(5)})")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise ValueError("the query process sent something that is not an answer")
        return answer

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            _end(process, kill=True)

    def close(self) -> None:
        """End the process (its input ends; killed if it does not exit)."""
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            _end(process, kill=False)


def _end(process: "subprocess.Popen[bytes]", kill: bool) -> None:
    try:
        if kill:
            process.kill()
        elif process.stdin is not None:
            process.stdin.close()
        process.wait(10)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait(10)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


def _value(value: Any) -> object:
    if isinstance(value, dict):
        return Expression(str(value.get("expression")))
    return value


def _plain(value: Any) -> Any:
    """A value of a job ad as JSON: a string, number, boolean or None as it is, anything else as its text."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return {"expression": str(value)}


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The query process: one JSON request a line in, one JSON answer a line out, until the input ends."""
    for line in requests:
        try:
            request = json.loads(line)
            answer: Dict[str, Any]
            if request.get("kind") == "start":
                answer = {"start": start_time(request.get("name"), request.get("pool"))}
            else:
                ads = query(str(request["constraint"]), [str(a) for a in request["projection"]],
                            request.get("name"), request.get("pool"))
                answer = {"ads": [{k: _plain(v) for k, v in ad.items()} for ad in ads]}
        except ScheddUnavailable as e:
            answer = {"error": str(e)}
        except (ValueError, KeyError, TypeError) as e:
            answer = {"error": f"a query the process cannot read: {e}"}
        answers.write(json.dumps(answer).encode() + b"\n")
        answers.flush()


def locate(name: Optional[str] = None, pool: Optional[str] = None) -> Any:
    """The local schedd, or schedd ``name`` as ``pool``'s collector (default the local one) knows it;
    raises what the bindings raise."""
    import htcondor2

    if not name:
        return htcondor2.Schedd()
    collector = htcondor2.Collector(pool) if pool else htcondor2.Collector()
    return htcondor2.Schedd(collector.locate(htcondor2.DaemonType.Schedd, name))


def describe(name: Optional[str], pool: Optional[str]) -> str:
    if not name:
        return "the local schedd"
    return f"schedd {name}" + (f" in pool {pool}" if pool else "")


def gahp_type(grid_resource: object) -> Optional[str]:
    """The batch type whose ``<TYPE>_GAHP`` the gridmanager starts for ``grid_resource`` (lower case),
    or None when it starts none of them (not a batch resource, a remote GAHP, a malformed value)."""
    if not isinstance(grid_resource, str) or not grid_resource[:5].lower() == "batch":
        return None
    words = grid_resource.split(" ")
    if words[0] == "batch":
        words = words[1:]
    if len(words) != 1 or not _TYPE.match(words[0]):
        return None  # no type, arguments after it (REMOTE_GAHP), or no <type>_GAHP knob can be named so
    return words[0].lower()


def gahp_job_ids(grid_job_id: object) -> List[str]:
    """The words of ``GridJobId`` from the fourth on: the GAHP's job id (and anything after it)."""
    if not isinstance(grid_job_id, str):
        return []
    return [word for word in grid_job_id.split(" ")[3:] if word]


@dataclass(frozen=True)
class GridJobs:
    """Every grid job of one schedd, read so that the answer can be shown to be whole."""

    job_ids: FrozenSet[str]
    """Every GAHP job id a grid job's ``GridJobId`` names, whatever its ``GridResource``."""
    jobs: int
    """Grid jobs in the answer."""
    schedd_name: str
    """The schedd's name (``Name`` of its ad): the gridmanager puts it in every sandbox id."""
    ads: Tuple[Mapping[str, object], ...] = ()
    """The grid jobs' ads as read: ``GridJobId`` and the attributes asked for (a value that is neither a
    string, a number nor a boolean as an :class:`Expression`; an undefined one as None)."""


def grid_jobs(name: Optional[str] = None, pool: Optional[str] = None,
              attributes: Sequence[str] = ()) -> GridJobs:
    """Every grid job of the schedd, or IncompleteAnswer / ScheddUnavailable.

    The answer is trusted only when it is shown to be whole: the schedd's own count of its grid jobs,
    asked just before (a summary-only query of the same constraint), is not above the number of ads
    received, and the schedd does not answer with an empty queue while its ad in the collector, at its
    last update, counted jobs (``TotalJobAds``). Either mismatch (a truncated answer, another schedd
    answering, a queue lost since the last update) means "cannot know": nothing is deleted this pass.
    ``attributes``: more of each ad to read in the same query (:attr:`GridJobs.ads`).
    """
    import htcondor2

    where = describe(name, pool)
    try:
        schedd = locate(name, pool)
        summary = schedd.query(constraint=GRID_UNIVERSE, opts=htcondor2.QueryOpt.SummaryOnly)
        projection = ["GridJobId"] + [a for a in attributes if a != "GridJobId"]
        ads = [{key: _read(ad.get(key)) for key in projection}
               for ad in schedd.query(constraint=GRID_UNIVERSE, projection=projection)]
        collector = htcondor2.Collector(pool) if pool else htcondor2.Collector()
        location = (collector.locate(htcondor2.DaemonType.Schedd, name) if name
                    else collector.locate(htcondor2.DaemonType.Schedd))
        schedd_name = str(location.get("Name") or "") if location is not None else ""
        advertised = collector.query(htcondor2.AdType.Schedd, constraint=f"Name == {_quote(schedd_name)}",
                                     projection=["Name", "TotalJobAds"]) if schedd_name else []
    except ScheddUnavailable:
        raise
    except Exception as e:  # noqa: BLE001 - the bindings raise several kinds; any means "unknown"
        raise ScheddUnavailable(f"{where} cannot be queried: {e}") from e
    counts = summary[0] if summary else {}
    counted, queue_total = _count(counts.get("Jobs")), _count(counts.get("AllusersJobs"))
    total_ads = _count(advertised[0].get("TotalJobAds")) if advertised else None
    return check_whole(where, schedd_name, ads, counted, queue_total, total_ads)


def check_whole(where: str, schedd_name: str, ads: List[Dict[str, object]], counted: Optional[int],
                queue_total: Optional[int], advertised_total: Optional[int]) -> GridJobs:
    """The rules of :func:`grid_jobs` over what the schedd and its collector said (a pure function)."""
    if counted is None or queue_total is None:
        raise IncompleteAnswer(f"{where} sent no job counts with its answer; not deleting on an answer "
                               "that cannot be checked")
    if len(ads) < counted:
        raise IncompleteAnswer(f"{where} answered with {len(ads)} grid jobs but counts {counted}: the answer "
                               "is incomplete; nothing is deleted this pass")
    if advertised_total is None:
        raise IncompleteAnswer(f"the collector has no ad of {where} ({schedd_name or 'no name'}): its job "
                               "counts cannot be cross-checked; nothing is deleted this pass")
    if queue_total == 0 and advertised_total > 0:
        raise IncompleteAnswer(f"{where} answers with an empty queue but its ad counted {advertised_total} "
                               "jobs at its last update: not trusting the answer this pass")
    ids = frozenset(job_id for ad in ads for job_id in gahp_job_ids(ad.get("GridJobId")))
    return GridJobs(job_ids=ids, jobs=len(ads), schedd_name=schedd_name, ads=tuple(ads))


def _read(value: Any) -> object:
    """A value of an ad the bindings gave, as :attr:`GridJobs.ads` holds it."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    import classad2

    if value is classad2.Value.Undefined:
        return None
    return Expression(str(value))


def edit_jobs(job_ids: Sequence[str], attribute: str, expression: str, name: Optional[str] = None,
              pool: Optional[str] = None) -> int:
    """Set ``attribute`` to ``expression`` (ClassAd text) in those of the grid jobs ``job_ids``
    (``cluster.proc``) that still exist, in one transaction of the schedd (``name`` of ``pool``, default
    the local one): the number edited. The transaction names the jobs (the schedd looks each up); when
    it fails, as it does when one of them has left the queue since it was read, one that chooses them by
    a constraint (the schedd reads every job of its queue) passes over the jobs gone. Raises
    EditRefused when the schedd does not make the edit (the identity may not edit some of the jobs:
    nothing is written), and ScheddUnavailable when it cannot be asked."""
    if not job_ids:
        return 0
    for job in job_ids:
        if not re.fullmatch(r"[0-9]+\.[0-9]+", job):
            raise ValueError(f"{job!r} is not a job id")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", attribute):
        raise ValueError(f"{attribute!r} is not an attribute name")
    listed = ", ".join(f'"{job}"' for job in job_ids)
    constraint = f'{GRID_UNIVERSE} && member(strcat(ClusterId, ".", ProcId), {{{listed}}})'
    try:
        schedd = locate(name, pool)
    except Exception as e:  # noqa: BLE001 - the bindings raise several kinds; any means "unknown"
        raise ScheddUnavailable(f"{describe(name, pool)} cannot be reached: {e}") from e
    try:
        return int(schedd.edit(list(job_ids), attribute, expression))
    except Exception:  # noqa: BLE001 - the bindings raise HTCondorException for any refusal
        pass  # a job gone, or a refusal: the constraint tells which
    try:
        return int(schedd.edit(constraint, attribute, expression))
    except Exception as e:  # noqa: BLE001 - the bindings raise HTCondorException for any refusal
        failure = e
    # The schedd refuses an edit whose constraint matches no job: every job of the list has gone.
    try:
        left = schedd.query(constraint=constraint, projection=["ClusterId"])
    except Exception as e:  # noqa: BLE001
        raise ScheddUnavailable(f"{describe(name, pool)} cannot be queried: {e}") from e
    if not left:
        return 0
    raise EditRefused(f"{describe(name, pool)} did not set {attribute} in {len(left)} jobs: {failure}") from failure


def _count(value: object) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _quote(text: str) -> str:
    import classad2

    return str(classad2.quote(text))


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
