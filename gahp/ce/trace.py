"""``podgahp trace``: one pilot followed hop by hop through the CE to its remote job and back, as
HTCondor-CE's ``condor_ce_trace`` follows a test job: submitted, routed (by which route), grid job, GAHP
request (the job id podgahp gave it), then the remote job's own hops as its backend names them (a pod:
created, scheduled on which node, running, completed), and output back.

Each look reads the CE's schedd (the source job, its routed copy; the history once they left the
queue) and the remote job, through its backend's view (:meth:`gahp.backends.base.CeView.trace`, the
hops' names :attr:`~gahp.backends.base.CeView.hops`). The hops are a pure function of those reads
(:func:`schedd_hops`), so a stall is always named by the first hop not done, with why: the hold
reason, the state table's reason, what the service says of the job, or what the GAHP's ping finds
wrong. Knows no backend's words.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from gahp.core import logs
from gahp.core import plugins
from gahp.backends import backend_class
from gahp.backends.base import CeView
from gahp.core.config import ServerSettings
from gahp.core.errors import GahpError
from gahp.rules.hops import DONE, FAILED, WAITING, Hop
from gahp.core.schedd import gahp_type

#: The hops the schedd tells, in order; the remote job's come next (its backend's), then :data:`OUTPUT`.
SCHEDD_HOPS = ("submitted", "routed", "grid job", "GAHP request")
OUTPUT = "output back"

#: The job attributes a trace reads.
ATTRIBUTES = ["ClusterId", "ProcId", "Owner", "JobStatus", "HoldReason", "HoldReasonCode", "HoldReasonSubCode",
              "RoutedToJobId", "RoutedFromJobId", "RouteName", "GridResource", "GridJobId", "BatchQueue",
              "Iwd", "Out", "Err", "ExitCode", "GridResourceUnavailableTime", "LastRemoteStatusUpdate"]

JOB_STATUS = {1: "Idle", 2: "Running", 3: "Removed", 4: "Completed", 5: "Held", 6: "Transferring output",
              7: "Suspended"}
HELD, COMPLETED, REMOVED = 5, 4, 3


class TraceError(GahpError):
    """The trace cannot start (no such job, the schedd cannot be asked)."""


@dataclass
class Trace:
    """What is known of one pilot at one look."""

    job: str
    hops: List[Hop]
    problems: List[str] = field(default_factory=list)
    """What the GAHP's ping finds wrong, when the trace stops before the remote job exists."""
    expected: Tuple[str, ...] = SCHEDD_HOPS + (OUTPUT,)
    """Every hop of this pilot's way, in order (with its backend's remote hops once it is known)."""

    @property
    def stop(self) -> Optional[Hop]:
        """The first hop not done (None when the pilot went all the way)."""
        stop = next((h for h in self.hops if h.state != DONE), None)
        if stop is None and len(self.hops) < len(self.expected):
            return Hop(self.expected[len(self.hops)], WAITING, "not reached yet")
        return stop

    @property
    def failed(self) -> bool:
        return any(h.state == FAILED for h in self.hops)

    def as_dict(self, elapsed_s: float, outcome: str) -> Dict[str, Any]:
        stop = self.stop
        return {"job": self.job, "outcome": outcome, "elapsed_s": round(elapsed_s, 1),
                "hops": [asdict(h) for h in self.hops],
                "stalled_at": stop.name if stop and outcome != "completed" else None,
                "why": why(self) if stop and outcome != "completed" else None,
                "setup_problems": self.problems}


def why(trace: Trace) -> str:
    stop = trace.stop
    if stop is None:
        return ""
    parts = [stop.detail] + [f"event: {e}" for e in stop.events] + [f"ping: {p}" for p in trace.problems]
    return "; ".join(parts)


def _job_id(ad: Mapping[str, Any]) -> str:
    return f"{ad.get('ClusterId')}.{ad.get('ProcId')}"


def _status(ad: Mapping[str, Any]) -> str:
    status = ad.get("JobStatus")
    return JOB_STATUS.get(status if isinstance(status, int) else 0, f"status {status}")


def _held(ad: Mapping[str, Any]) -> str:
    return (f"held: {ad.get('HoldReason')} (HoldReasonCode {ad.get('HoldReasonCode')}, "
            f"HoldReasonSubCode {ad.get('HoldReasonSubCode')})")


def schedd_hops(source: Optional[Mapping[str, Any]], routed: Optional[Mapping[str, Any]],
                job: str, gahp_log: str = "PODGAHP_LOG") -> Tuple[List[Hop], bool]:
    """The hops the schedd tells: submitted, routed, grid job, GAHP request; and whether the remote
    job's hops come next (the GAHP gave the pilot a job id). ``gahp_log``: where the owner's GAHP logs."""
    if source is None:
        return [Hop("submitted", FAILED, f"job {job} is neither in the queue nor in the history of this schedd")], False
    hops = [Hop("submitted", DONE, f"job {job} of {source.get('Owner')}: {_status(source)}")]
    if routed is None:
        hops.append(_unrouted(source, job))
        return hops, False
    hops.append(Hop("routed", DONE, f"route {routed.get('RouteName') or '?'} made job {_job_id(routed)}"))
    grid_resource = str(routed.get("GridResource") or "")
    backend = gahp_type(grid_resource)  # as the gridmanager reads it: "batch K8S" starts K8S_GAHP too
    if backend not in plugins.backend_names():
        hops.append(Hop("grid job", FAILED, f"job {_job_id(routed)} has GridResource {grid_resource!r}, not "
                        f"\"batch <backend>\" of a podgahp backend ({', '.join(plugins.backend_names())}): the "
                        "route does not send it to podgahp"))
        return hops, False
    hops.append(Hop("grid job", DONE, f"job {_job_id(routed)}: GridResource \"{grid_resource}\", queue "
                    f"{routed.get('BatchQueue') or '(default)'}, {_status(routed)}"))
    request, remote_next = _gahp_request(routed, str(backend), gahp_log)
    hops.append(request)
    return hops, remote_next


def _unrouted(source: Mapping[str, Any], job: str) -> Hop:
    """The routed hop of a source job no route has taken."""
    if source.get("JobStatus") == HELD:
        return Hop("routed", FAILED, _held(source))
    if source.get("JobStatus") == REMOVED:
        return Hop("routed", FAILED, "the job was removed before it was routed")
    if source.get("GridResource") or source.get("RoutedFromJobId"):
        return Hop("routed", FAILED, f"job {job} is itself a grid job (GridResource "
                   f"{source.get('GridResource')!r}): give the job id a factory submitted")
    return Hop("routed", WAITING, "no route has taken it yet: check that a route matches it "
               "(condor_ce_job_router_info -match-jobs, podgahp routes check) and is below its "
               "MaxJobs/MaxIdleJobs, and that the JobRouter runs (condor_ce_router_q)")


def _gahp_request(routed: Mapping[str, Any], backend: str, gahp_log: str) -> Tuple[Hop, bool]:
    """The GAHP request hop of a routed grid job of a podgahp backend, and whether the remote job's
    hops come next."""
    grid_job_id = str(routed.get("GridJobId") or "")
    if routed.get("JobStatus") == HELD:
        return Hop("GAHP request", FAILED, _held(routed) if not grid_job_id else
                   f"pilot {grid_job_id.split()[-1]} {_held(routed)}"), bool(grid_job_id)
    if not grid_job_id:
        unavailable = routed.get("GridResourceUnavailableTime")
        detail = ("the gridmanager has no job id from the GAHP yet" +
                  (f": it finds the resource unavailable (the GAHP's BLAH_PING fails; see {gahp_log})"
                   if unavailable else f": it starts {backend.upper()}_GAHP and submits at its next pass "
                   f"(GridmanagerLog, {gahp_log})"))
        return Hop("GAHP request", WAITING, detail), False
    if len(grid_job_id.split()) < 4:
        return Hop("GAHP request", WAITING, f"the gridmanager sent BLAH_JOB_SUBMIT (sandbox "
                   f"{grid_job_id.split()[-1]}); no answer from the GAHP yet ({gahp_log})"), False
    return Hop("GAHP request", DONE, f"podgahp made pilot {grid_job_id.split()[-1]}"), True


def output_hop(source: Mapping[str, Any]) -> Hop:
    """Output back: the source job completed and its Out is in its directory."""
    out = str(source.get("Out") or "")
    path = out if os.path.isabs(out) else os.path.join(str(source.get("Iwd") or ""), out)
    if source.get("JobStatus") != COMPLETED:
        return Hop(OUTPUT, WAITING,
                   f"job {_job_id(source)} is {_status(source)}: the gridmanager writes Out/Err back, then the "
                   "JobRouter completes the job")
    if out in ("", "/dev/null"):
        return Hop(OUTPUT, DONE, f"job {_job_id(source)} completed (no Out file)")
    try:
        size = os.path.getsize(path)
    except OSError:
        return Hop(OUTPUT, DONE, f"job {_job_id(source)} completed; Out {path} is not readable from here")
    return Hop(OUTPUT, DONE, f"job {_job_id(source)} completed; Out {path} ({size} bytes)")


# ------------------------------------------------------------------------------------------------
# reading the CE


class Ce:
    """The CE's schedd and remote side as a trace reads them (the htcondor bindings and the backends' views)."""

    def __init__(self, knobs: Any, schedd_name: Optional[str], schedd_pool: Optional[str]) -> None:
        self.knobs = knobs
        self.name = schedd_name
        self.pool = schedd_pool
        self._views: Dict[str, Optional[CeView]] = {}
        self._logs: Dict[Tuple[str, str], str] = {}

    def gahp_log(self, backend: str, owner: str) -> str:
        """Where the GAHP of ``owner`` logs (its own directory in the shared one, :func:`gahp.core.logs.find`)."""
        configured = self.knobs.optional("PODGAHP_LOG") or ServerSettings.default_log(self.knobs, backend, owner)
        found = self._logs.get((backend, owner)) or logs.find(configured, owner)
        if found:
            self._logs[(backend, owner)] = found
        return (f"PODGAHP_LOG: {found}" if found else
                f"PODGAHP_LOG: {os.path.basename(configured)} in Podgahp.{owner}.* of {os.path.dirname(configured)}, "
                "once its GAHP has run")

    def schedd(self) -> Any:
        from gahp.core.schedd import SCHEDD_KNOBS, describe, locate

        try:
            return locate(self.name, self.pool)
        except Exception as e:  # noqa: BLE001 - the bindings raise several kinds
            raise TraceError(f"{describe(self.name, self.pool)} cannot be found: {e} {SCHEDD_KNOBS}") from e

    def ad(self, constraint: str) -> Optional[Dict[str, Any]]:
        """The first job matching ``constraint``, in the queue or else in the history."""
        from gahp.core.schedd import SCHEDD_KNOBS

        schedd = self.schedd()
        try:
            ads = list(schedd.query(constraint=constraint, projection=ATTRIBUTES, limit=1))
            if not ads:
                ads = list(schedd.history(constraint, ATTRIBUTES, match=1))
        except Exception as e:  # noqa: BLE001
            raise TraceError(f"the CE's schedd cannot be queried: {e} {SCHEDD_KNOBS}") from e
        return {k: ads[0].get(k) for k in ATTRIBUTES} if ads else None

    def submit(self, description: Dict[str, str]) -> str:
        import htcondor2

        try:
            result = self.schedd().submit(htcondor2.Submit(description))
        except TraceError:
            raise
        except Exception as e:  # noqa: BLE001
            raise TraceError(f"the CE's schedd refused the test pilot: {e}") from e
        return f"{result.cluster()}.0"

    def view(self, backend: str) -> Optional[CeView]:
        """The backend's CE-wide view (None where it has none, or the CE does not use it)."""
        if backend not in self._views:
            try:
                self._views[backend] = backend_class(backend).ce_view(self.knobs)
            except ImportError as e:
                raise TraceError(f"the {backend} backend is not installed here: {e}") from e
        return self._views[backend]

    def remote(self, backend: str, grid_job_id: str, queue: Optional[str], user: str,
               ping: bool) -> Tuple[List[Hop], List[str]]:
        """The remote job's hops, as its backend's view tells them (and the ping's findings when ``ping``);
        none for a backend whose view does not trace."""
        view = self.view(backend)
        if view is None:
            return [], []
        return view.trace(grid_job_id, queue, user, ping)

    def close(self) -> None:
        for view in self._views.values():
            if view is not None:
                view.close()


def look(ce: Ce, job: str, user: str) -> Trace:
    """One look at the pilot whose source job is ``job``."""
    source = ce.ad(f"ClusterId == {job.split('.')[0]} && ProcId == {job.split('.')[1]}")
    routed = ce.ad(f'RoutedFromJobId == "{job}"') if source is not None else None
    backend = gahp_type(routed.get("GridResource")) if routed is not None else None
    routed_here = routed if backend in plugins.backend_names() else None
    hops, has_remote = schedd_hops(source, routed, job, _gahp_log(ce, routed_here, backend))
    problems: List[str] = []
    gahp_stall = any(h.name == "GAHP request" and h.state != DONE for h in hops)
    names: Tuple[str, ...] = ()
    if routed_here is not None and (has_remote or gahp_stall):
        remote, names, problems = _remote_hops(ce, str(backend), routed_here, user, gahp_stall)
        if has_remote:
            hops += remote
    expected = SCHEDD_HOPS + names + (OUTPUT,)
    if source is not None and len(hops) == len(expected) - 1 and all(h.state == DONE for h in hops):
        hops.append(output_hop(source))
    return Trace(job, hops, problems, expected)


def _gahp_log(ce: Ce, routed: Any, backend: Optional[str]) -> str:
    """Where the owner's GAHP logs, for a routed job of a podgahp backend whose GAHP request hop names
    it (no answer from the GAHP yet); else the knob's name."""
    if routed is None or not isinstance(routed.get("Owner"), str) \
            or len(str(routed.get("GridJobId") or "").split()) >= 4:
        return "PODGAHP_LOG"
    return ce.gahp_log(str(backend), str(routed.get("Owner")))


def _remote_hops(ce: Ce, backend: str, routed: Any, user: str,
                 gahp_stall: bool) -> Tuple[List[Hop], Tuple[str, ...], List[str]]:
    """The routed job's remote hops as its backend's view tells them, the names of every remote hop,
    and what the ping found wrong (asked only when the GAHP request stalls)."""
    view = ce.view(backend)
    names = view.hops if view is not None else ()
    remote, problems = ce.remote(backend, str(routed.get("GridJobId") or ""), _text(routed.get("BatchQueue")),
                                 user, ping=gahp_stall)
    if routed.get("JobStatus") == COMPLETED and remote[:1] and remote[0].state != DONE and view is not None:
        # podgahp deletes a remote job once its outcome is reported: the grid job's end stands for it.
        remote = [Hop(name, DONE, f"the {view.noun} is cleaned up; grid job {_job_id(routed)} completed with "
                  f"ExitCode {routed.get('ExitCode')}") for name in names]
    return remote, names, problems


def _text(value: Any) -> Optional[str]:
    return str(value) if isinstance(value, str) and value else None


def follow(ce: Ce, job: str, user: str, timeout_s: float, interval_s: float,
           shown: Callable[[Trace, float], None], clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> Tuple[Trace, str, float]:
    """Look until the pilot is done, a hop failed, or ``timeout_s`` passed; ``shown`` gets each look
    that differs from the one before. Returns the last look, the outcome (``completed``, ``failed``,
    ``stalled``) and the seconds it took."""
    started = clock()
    last: Optional[List[Tuple[str, str, str]]] = None
    while True:
        trace = look(ce, job, user)
        elapsed = clock() - started
        summary = [(h.name, h.state, h.detail) for h in trace.hops]
        if summary != last:
            shown(trace, elapsed)
            last = summary
        if trace.stop is None:
            return trace, "completed", elapsed
        if trace.failed:
            return trace, "failed", elapsed
        if elapsed >= timeout_s:
            return trace, "stalled", elapsed
        sleep(interval_s)


# ------------------------------------------------------------------------------------------------
# the test pilot

TEST_PILOT = """#!/bin/sh
# podgahp trace's test pilot: says where it ran, then exits.
echo "podgahp trace test pilot on $(hostname 2>/dev/null || echo unknown host) at $(date -u 2>/dev/null)"
"""


def test_pilot(queue: Optional[str], directory: Optional[str] = None) -> Tuple[Dict[str, str], str]:
    """A submit description of a small test pilot (1 core, 512 MB, 10 minutes) and its directory."""
    directory = directory or tempfile.mkdtemp(prefix="podgahp-trace-")
    script = os.path.join(directory, "test-pilot.sh")
    with open(script, "w", encoding="utf-8") as f:
        f.write(TEST_PILOT)
    os.chmod(script, 0o755)
    description = {
        "universe": "vanilla", "executable": script, "initialdir": directory,
        "output": "test-pilot.out", "error": "test-pilot.err", "log": "test-pilot.log",
        "request_cpus": "1", "request_memory": "512", "+maxWallTime": "10", "+PodgahpTrace": "true",
        "should_transfer_files": "YES", "when_to_transfer_output": "ON_EXIT",
    }
    if queue:
        description["+queue"] = json.dumps(queue)
    return description, directory


# ------------------------------------------------------------------------------------------------
# what is printed

MARK = {DONE: "ok", WAITING: "..", FAILED: "!!"}

#: Where an admin sees every pilot's pod, node, phase and reason (ce-config/podgahp.cpf, podgahp-ce).
CE_Q = "condor_ce_q -allusers -pr /usr/share/podgahp/podgahp.cpf (or podgahp q)"


# Every detail, event and ping finding carries what users and the remote side wrote (Owner, HoldReason,
# RouteName, GridResource, BatchQueue, paths, a pod's Events and conditions): each printed line is made
# printable, so none can drive the admin's terminal or forge a line of its own.


def text_lines(trace: Trace, elapsed_s: float, printed: Set[Tuple[str, str, str]]) -> List[str]:
    """The hops of one look not printed before (each hop once per state and detail), events under
    the hop that waits."""
    lines = []
    for hop in trace.hops:
        key = (hop.name, hop.state, hop.detail)
        if key not in printed:
            printed.add(key)
            lines.append(f"{elapsed_s:6.1f}s {MARK[hop.state]} {hop.name:<13} {logs.printable(hop.detail)}")
            lines += [f"{'':8}   event: {logs.printable(e)}" for e in hop.events]
        if hop.state != DONE:
            break
    return lines


def verdict(trace: Trace, outcome: str, elapsed_s: float) -> str:
    stop = trace.stop
    if outcome == "completed" or stop is None:
        return f"pilot {trace.job} went through every hop in {elapsed_s:.0f} s"
    lines = [f"pilot {trace.job} {'failed' if outcome == 'failed' else 'stalled'} at \"{stop.name}\" after "
             f"{elapsed_s:.0f} s: {logs.printable(stop.detail)}"]
    lines += [f"  event: {logs.printable(e)}" for e in stop.events]
    lines += [f"  the GAHP's ping finds: {logs.printable(p)}" for p in trace.problems]
    return "\n".join(lines)


def json_text(trace: Trace, outcome: str, elapsed_s: float) -> str:
    """The last look as one JSON document: every character outside printable ASCII is a \\u escape
    (DEL too, which JSON leaves as it is)."""
    return json.dumps(trace.as_dict(elapsed_s, outcome), indent=2, ensure_ascii=True).replace("\x7f", "\\u007f")
