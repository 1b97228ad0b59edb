"""gahp.rules.provenance: a submit is accepted only for a job that a route of this CE made."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import classad2
import pytest

from gahp.core.config import Knobs
from gahp.core.errors import TransientError
from gahp.core.job import PilotJob
from gahp.rules.provenance import LINK_WAIT_S, NotRouted, ProvenanceSettings, RouteCheck
from gahp.core.schedd import ScheddUnavailable
from polling import wait_until

SANDBOX = "ce.example.org_9619_ce.example.org_7.0_1795297304"
#: When every job of these tests was submitted (its QDate), and the schedd's audit log of it.
QDATE = 1795297304
ROUTED = {"ClusterId": 8, "ProcId": 0, "Owner": "pilot", "RoutedBy": "htcondor-ce", "RoutedFromJobId": "7.0",
          "QDate": QDATE, "GridJobId": f"batch k8s {SANDBOX}"}
#: Clusters the pilot user submitted itself, as the audit log records them; every other was
#: submitted by the JobRouter over the family session (as HTCondor 23 logs it).
USER_CLUSTERS = (18, 1013)
SOURCE = {"ClusterId": 7, "ProcId": 0, "RoutedToJobId": "8.0", "Owner": "pilot"}


class FakeSchedd:
    """Schedds answering constraint queries over job ads as a real one does: each constraint is
    evaluated (classad2) against every job, so any way of asking finds what the schedd holds. The
    routed jobs (grid universe, GridJobId naming the sandbox unless given) are in the local schedd;
    the source jobs (ClusterId 7, ProcId 0 unless given) too, or in schedd ``source_name``."""

    def __init__(self, routed: List[Dict[str, object]], source: List[Dict[str, object]],
                 down: bool = False, source_name: Optional[str] = None) -> None:
        self.routed = [dict({"JobUniverse": 9, "GridJobId": f"batch k8s {SANDBOX}"}, **ad) for ad in routed]
        self.source = [dict({"ClusterId": 7, "ProcId": 0, "JobUniverse": 5}, **ad) for ad in source]
        self.down, self.source_name = down, source_name
        self.asked: List[tuple] = []

    def jobs(self, name: Optional[str]) -> List[Dict[str, object]]:
        if name is None:
            return self.routed + (self.source if self.source_name is None else [])
        assert name == self.source_name, f"asked schedd {name}, which is neither the local one nor the source's"
        return self.source

    def __call__(self, constraint: str, projection: List[str], name: Optional[str],
                 pool: Optional[str]) -> List[Dict[str, object]]:
        self.asked.append((constraint, name, pool))
        if self.down:
            raise ScheddUnavailable("the local schedd cannot be queried: connection refused")
        return matching(self.jobs(name), constraint, projection)


def matching(jobs: List[Dict[str, object]], constraint: str, projection: List[str]) -> List[Dict[str, object]]:
    """What a schedd answers: the jobs ``constraint`` evaluates to true for, projected."""
    expr = classad2.ExprTree(constraint)
    return [{k: job.get(k) for k in projection} for job in jobs
            if expr.eval(classad2.ClassAd({k: v for k, v in job.items() if v is not None})) is True]


def pilot(sandbox: str = SANDBOX) -> PilotJob:
    return PilotJob(executable="/bin/true", iwd="/tmp", sandbox_id=sandbox)


def write_audit_log(path: Path, clusters: Iterable[int]) -> str:
    """The schedd's audit log of the submits of ``clusters`` at QDATE: by the pilot user over FS for
    USER_CLUSTERS, by the JobRouter over the family session for the others."""
    stamp = time.strftime("%m/%d/%y %H:%M:%S", time.localtime(QDATE))
    lines = []
    for n, cluster in enumerate(clusters):
        cid = 2 * n + 10
        who = ("FS, AuthId=pilot, CondorId=pilot@users.htcondor.org" if cluster in USER_CLUSTERS
               else "FAMILY, AuthId=(null), CondorId=condor@family")
        lines += [f"{stamp} (cid:{cid}) Command=QMGMT_WRITE_CMD, peer=<127.0.0.1:{4000 + n}>",
                  f"{stamp} (cid:{cid}) AuthMethod={who}", f"{stamp} (cid:{cid}) Submitting new job {cluster}.0"]
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


@pytest.fixture(autouse=True)
def audit_log(tmp_path: Path) -> str:
    """The audit log every check of these tests reads (PODGAHP_SCHEDD_AUDIT_LOG)."""
    global AUDIT_LOG
    AUDIT_LOG = write_audit_log(tmp_path / "AuditLog", [8, 9, 18] + list(range(1001, 1041)))
    return AUDIT_LOG


AUDIT_LOG = ""


def settings(**values: object) -> ProvenanceSettings:
    values.setdefault("audit_log", AUDIT_LOG)
    return ProvenanceSettings(**values)  # type: ignore[arg-type]


def check(schedd: FakeSchedd, sandbox: str = SANDBOX, **values: object) -> None:
    RouteCheck(settings(**values), "k8s", query=schedd).check(pilot(sandbox))


def test_a_routed_job_is_accepted_with_two_queries_at_most() -> None:
    schedd = FakeSchedd([ROUTED], [SOURCE])
    check(schedd)
    assert 1 <= len(schedd.asked) <= 2, schedd.asked


@pytest.mark.parametrize(
    "routed, source, message",
    [
        ([], [SOURCE], "0 jobs of the local schedd hold sandbox"),
        ([ROUTED, dict(ROUTED, ProcId=1)], [SOURCE], "2 jobs"),
        ([dict(ROUTED, RoutedBy=None)], [SOURCE], "not made by a route of this CE .RoutedBy = None"),
        ([dict(ROUTED, RoutedBy="my-router")], [SOURCE], "RoutedBy = 'my-router'"),
        ([dict(ROUTED, RoutedFromJobId=None)], [SOURCE], "not made by a route"),
        ([dict(ROUTED, RoutedFromJobId="7.0; true")], [SOURCE], "names no valid source job"),
        ([ROUTED], [], "routed from job 7.0, but the local schedd holds no such job"),
        ([ROUTED], [dict(SOURCE, RoutedToJobId="9.0")], "holds no such job of pilot routed to it"),
        ([ROUTED], [dict(SOURCE, Owner="mallory")], "holds no such job of pilot routed to it"),
    ],
    ids=["no-job", "two-jobs", "not-routed", "other-router", "no-source", "bad-source-id", "source-gone",
         "source-points-elsewhere", "source-of-another-user"],
)
def test_anything_else_is_refused_with_a_reason(routed: List[Dict[str, object]],
                                                source: List[Dict[str, object]], message: str) -> None:
    with pytest.raises(NotRouted, match=message):
        check(FakeSchedd(routed, source))


class LinkedLater(FakeSchedd):
    """The JobRouter writes RoutedToJobId into the source job after the routed job's submit: the
    source job is unlinked for the first ``after`` looks at it."""

    def __init__(self, after: int) -> None:
        super().__init__([ROUTED], [dict(SOURCE, RoutedToJobId=None)])
        self.after = after

    def __call__(self, constraint: str, projection: List[str], name: Optional[str],
                 pool: Optional[str]) -> List[Dict[str, object]]:
        found = super().__call__(constraint, projection, name, pool)
        if any(ad.get("ClusterId", 7) == 7 and "RoutedToJobId" in ad for ad in found):  # a look at the source
            self.after -= 1
            if self.after <= 0:
                self.source[0]["RoutedToJobId"] = "8.0"
        return found


def test_a_source_the_job_router_has_not_linked_yet_is_asked_again() -> None:
    """The JobRouter sets RoutedToJobId after submitting the routed job; a submit that comes in between
    waits for the link (a real HTCondor 23 CE held its first two pilots of a burst of 300 without this)."""
    waits: List[float] = []
    RouteCheck(settings(), "k8s", query=LinkedLater(3), sleep=waits.append).check(pilot())
    assert len(waits) == 3


def test_a_source_never_linked_is_refused_after_the_wait() -> None:
    waits: List[float] = []
    schedd = FakeSchedd([ROUTED], [dict(SOURCE, RoutedToJobId=None)])
    with pytest.raises(NotRouted, match="holds no such job of pilot routed to it"):
        RouteCheck(settings(), "k8s", query=schedd, sleep=waits.append).check(pilot())
    assert LINK_WAIT_S - 0.1 < sum(waits) <= LINK_WAIT_S


def test_a_crafted_sandbox_id_never_reaches_the_schedd() -> None:
    schedd = FakeSchedd([ROUTED], [SOURCE])
    with pytest.raises(NotRouted, match="not one the gridmanager makes"):
        check(schedd, sandbox='x" || true || "')
    assert schedd.asked == []


def test_the_sandbox_of_a_ce_whose_collector_is_an_ipv6_address_is_found() -> None:
    """The gridmanager builds the sandbox id from COLLECTOR_HOST: on an IPv6 CE it keeps the brackets
    ("[::1]:9619" becomes "[__1]_9619"), which a regular expression would read as a class."""
    sandbox = "[__1]_9619_vm_7.0_1795297304"
    schedd = FakeSchedd([dict(ROUTED, GridJobId=f"batch k8s {sandbox}")], [SOURCE])
    check(schedd, sandbox=sandbox)
    other = FakeSchedd([dict(ROUTED, GridJobId="batch k8s _9619_vm_7.0_1795297304")], [SOURCE])
    with pytest.raises(NotRouted, match="0 jobs of the local schedd hold sandbox"):
        check(other, sandbox=sandbox)


def test_schedd_down_is_retryable_and_off_asks_nothing() -> None:
    with pytest.raises(TransientError, match="cannot check that the job came through a route.*refused"):
        check(FakeSchedd([ROUTED], [SOURCE], down=True))
    schedd = FakeSchedd([], [])
    check(schedd, routed_only=False)
    assert schedd.asked == []


def test_source_schedd_knobs_are_used() -> None:
    """JOB_ROUTER_SCHEDD2: the source job is looked up in the CE's schedd only, never in the local one."""
    schedd = FakeSchedd([ROUTED], [SOURCE], source_name="htcondor-ce@ce.example.org")
    check(schedd, source_schedd_name="htcondor-ce@ce.example.org", source_schedd_pool="ce.example.org:9619")
    assert ("htcondor-ce@ce.example.org", "ce.example.org:9619") in [asked[1:] for asked in schedd.asked]
    local_only = FakeSchedd([ROUTED], [], source_name="htcondor-ce@ce.example.org")
    local_only.routed.append(dict({"ClusterId": 7, "ProcId": 0, "JobUniverse": 5}, **SOURCE))
    with pytest.raises(NotRouted, match="schedd htcondor-ce@ce.example.org in pool ce.example.org:9619 holds no such"):
        check(local_only, source_schedd_name="htcondor-ce@ce.example.org", source_schedd_pool="ce.example.org:9619")


@pytest.mark.parametrize(
    "grid_job_id, matches",
    [(f"batch k8s {SANDBOX}", True), (f"batch k8s {SANDBOX} k8s/pilots/pilot-0123456789abcdef0123-0", True),
     (f"batch K8S {SANDBOX}", True), (f"batch k8s {SANDBOX}X", False), (f"batch k8s X{SANDBOX}", False),
     (f"batch k8s {SANDBOX.replace('.', 'x')}", False), (None, False)],
    ids=["submitting", "answered", "upper-case", "longer", "prefixed", "dot-as-any", "none"])
def test_the_job_holding_the_sandbox_is_found_by_its_whole_name(grid_job_id: Optional[str], matches: bool) -> None:
    """Only the job whose GridJobId names this very sandbox is the pilot's (HTCondor's regexp reads "."
    as any character: a sandbox id one character off is another job)."""
    schedd = FakeSchedd([dict(ROUTED, GridJobId=grid_job_id)], [SOURCE])
    if matches:
        check(schedd)
    else:
        with pytest.raises(NotRouted, match="0 jobs of the local schedd hold sandbox"):
            check(schedd)


def test_each_submit_is_checked_on_its_own() -> None:
    """A user whose first pilot was routed gets no pass for a second one: each sandbox is looked up
    and proven again (no answer is kept for a user, a route or a source job)."""
    other = SANDBOX.replace("_7.0_", "_9.0_")
    schedd = FakeSchedd([ROUTED, dict(ROUTED, ClusterId=18, GridJobId=f"batch k8s {other}")], [SOURCE])
    route_check = RouteCheck(settings(), "k8s", query=schedd)
    route_check.check(pilot())
    with pytest.raises(NotRouted, match="job 18.0 was not submitted by the JobRouter"):
        route_check.check(pilot(other))
    route_check.check(pilot())


def test_jobs_of_other_users_and_universes_do_not_count() -> None:
    """A vanilla job or another user's grid job naming the sandbox is not the pilot: the pilot is the
    grid job; a source job of another owner does not vouch for it."""
    with pytest.raises(NotRouted, match="0 jobs"):
        check(FakeSchedd([dict(ROUTED, JobUniverse=5)], [SOURCE]))
    with pytest.raises(NotRouted, match="holds no such job of pilot routed to it"):
        check(FakeSchedd([ROUTED], [dict(SOURCE, Owner="mallory")]))


#: The attack: a user submits a held vanilla job, then a grid job claiming RoutedBy and RoutedFromJobId,
#: then condor_qedit's the vanilla job's RoutedToJobId: every link holds, but the schedd's audit log
#: recorded the user's own connection as the grid job's submitter, not the JobRouter's.
FORGED = dict(ROUTED, ClusterId=18)


def test_a_job_the_router_did_not_submit_is_refused_whatever_its_links() -> None:
    with pytest.raises(NotRouted, match=re.escape(
            "job 18.0 was not submitted by the JobRouter: the schedd's audit log ") + ".*" + re.escape(
            "records its submitter as 'pilot@users.htcondor.org' (FS), not one of the CE's daemons (condor@family; "
            "PODGAHP_ROUTER_IDENTITIES)")):
        check(FakeSchedd([FORGED], [dict(SOURCE, RoutedToJobId="18.0")]))


@pytest.mark.parametrize("ad, message", [
    (dict(ROUTED, ClusterId=77), "has no record of its submission at its QDate"),
    (dict(ROUTED, QDate=QDATE - 86400), "has no record of its submission at its QDate"),
    (dict(ROUTED, QDate=None), "job 8.0 has no QDate"),
    (dict(ROUTED, QDate=float("nan")), "job 8.0 has no QDate"),
], ids=["never-submitted", "qdate-made-up", "no-qdate", "qdate-not-a-number"])
def test_a_job_the_audit_log_does_not_record_is_refused(ad: Dict[str, object], message: str) -> None:
    with pytest.raises(NotRouted, match=re.escape(message)):
        check(FakeSchedd([ad], [dict(SOURCE, RoutedToJobId=f"{ad['ClusterId']}.0")]))


def test_without_an_audit_log_or_when_it_cannot_be_read_the_pilot_is_held_naming_the_knobs(tmp_path: Path) -> None:
    with pytest.raises(NotRouted, match=re.escape("the schedd keeps no audit log (HTCondor-CE ships SCHEDD_AUDIT_LOG = "
                                                  "$(LOG)/AuditLog with SCHEDD_DEBUG = D_AUDIT")):
        check(FakeSchedd([ROUTED], [SOURCE]), audit_log=None)
    with pytest.raises(NotRouted, match="cannot read the schedd's audit log .*PODGAHP_SCHEDD_AUDIT_LOG.*PODGAHP_ROUTED_ONLY"):
        check(FakeSchedd([ROUTED], [SOURCE]), audit_log=str(tmp_path / "nowhere" / "AuditLog"))


def test_identities_of_the_router_are_a_knob() -> None:
    check(FakeSchedd([FORGED], [dict(SOURCE, RoutedToJobId="18.0")]),
          router_identities=("condor@family", "pilot@users.htcondor.org"))


def test_the_schedds_start_bounds_the_search_and_is_asked_once_a_minute() -> None:
    asked: List[object] = []

    def start(name: Optional[str], pool: Optional[str]) -> Optional[float]:
        asked.append((name, pool))
        return QDATE - 10.0

    route_check = RouteCheck(settings(), "k8s", query=FakeSchedd([ROUTED], [SOURCE]), start_time=start)
    route_check.check(pilot())
    route_check.check(pilot())
    assert asked == [(None, None)]


def test_knobs() -> None:
    defaults = ProvenanceSettings.from_knobs(Knobs({"UID_DOMAIN": "users.htcondor.org",
                                                    "SCHEDD_AUDIT_LOG": "/var/log/condor-ce/AuditLog"}))
    assert defaults.router_identities == ("condor@family", "condor@users.htcondor.org")
    assert (defaults.audit_log, defaults.deadline_s, defaults.time_format) == (
        "/var/log/condor-ce/AuditLog", 120, "%m/%d/%y %H:%M:%S")
    assert ProvenanceSettings.from_knobs(Knobs({})).audit_log is None
    into_sched_log = ProvenanceSettings.from_knobs(Knobs({"SCHEDD_DEBUG": "D_AUDIT D_FULLDEBUG", "SCHEDD_LOG": "/l/S"}))
    assert into_sched_log.audit_log == "/l/S"
    assert ProvenanceSettings.from_knobs(Knobs({"PODGAHP_SCHEDD_AUDIT_LOG": "/x", "SCHEDD_AUDIT_LOG": "/y",
                                                "SCHEDD.SEC_TCP_SESSION_DEADLINE": "30"})).audit_log == "/x"
    assert ProvenanceSettings.from_knobs(Knobs({"SEC_TCP_SESSION_DEADLINE": "30"})).deadline_s == 30
    assert ProvenanceSettings.from_knobs(Knobs({})).routers == ("htcondor-ce",)
    settings = ProvenanceSettings.from_knobs(Knobs({"JOB_ROUTER_NAME": "site-router", "PODGAHP_ROUTED_ONLY": "false"}))
    assert settings.routers == ("htcondor-ce", "site-router") and not settings.routed_only


class Schedd:
    """A schedd of routed and source jobs that evaluates each constraint on every job, as the schedd
    does. Its queries wait at gates until they open (a busy schedd): ``routed_gate`` for the queries of
    routed jobs, ``source_gate`` for those of source jobs."""

    def __init__(self, jobs: List[Dict[str, object]]) -> None:
        self.jobs = jobs
        self.asked: List[str] = []
        self.routed_gate, self.source_gate = threading.Event(), threading.Event()
        self.routed_gate.set()
        self.source_gate.set()
        self.lock = threading.Lock()

    def __call__(self, constraint: str, projection: List[str], name: Optional[str],
                 pool: Optional[str]) -> List[Dict[str, object]]:
        with self.lock:
            self.asked.append(constraint)
        assert (self.routed_gate if "GridJobId" in constraint else self.source_gate).wait(10)
        return matching(self.jobs, constraint, projection)


def _routed_pair(n: int) -> List[Dict[str, object]]:
    """Pilot ``n``: its routed job (cluster 1000 + n) and its source job (cluster n)."""
    sandbox = f"ce.example.org_ce.example.org_{n}.0_1795297304"
    routed = dict(ROUTED, ClusterId=1000 + n, RoutedFromJobId=f"{n}.0", GridJobId=f"batch k8s {sandbox}",
                  JobUniverse=9)
    return [routed, dict(SOURCE, ClusterId=n, RoutedToJobId=f"{1000 + n}.0", JobUniverse=5)]


def test_submits_waiting_together_are_checked_in_two_queries_each_by_its_own_jobs() -> None:
    """The gridmanager sends submits in bursts: those that wait together are asked of the schedd in one
    query for the routed jobs and one for the sources, and each gets the verdict of its own jobs (a
    forged one among them is refused, the others accepted)."""
    jobs = [job for n in range(1, 41) for job in _routed_pair(n)]  # 1013: the user's own (USER_CLUSTERS)
    schedd = Schedd(jobs)
    checker = RouteCheck(settings(), "k8s", query=schedd)
    schedd.routed_gate.clear()
    schedd.source_gate.clear()
    verdicts: Dict[int, str] = {}

    def submit(n: int) -> None:
        try:
            checker.check(pilot(f"ce.example.org_ce.example.org_{n}.0_1795297304"))
            verdicts[n] = "accepted"
        except NotRouted as e:
            verdicts[n] = str(e)

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(1, 41)]
    threads[0].start()
    wait_until(lambda: len(schedd.asked) == 1, "the first query is out", 10)
    for thread in threads[1:]:
        thread.start()
    wait_until(lambda: len(checker.routed._waiting) == 39, "the other submits wait", 10)
    schedd.routed_gate.set()
    # the first submit's source query is out; the others (but the forged one) wait for theirs
    wait_until(lambda: len(checker.sources._waiting) == 38, "the other submits wait for their sources", 10)
    schedd.source_gate.set()
    for thread in threads:
        thread.join(10)
    assert len(verdicts) == 40 and verdicts.pop(13).startswith("job 1013.0 was not submitted by the JobRouter")
    assert set(verdicts.values()) == {"accepted"}
    # the first submit's two queries, then one of each for the 39 that waited together
    assert len(schedd.asked) == 4 and checker.routed.queries == 2 and checker.sources.queries == 2


def test_a_question_is_answered_by_a_query_sent_after_it_was_asked() -> None:
    """A job that appears while a query is out is not missed: the submit asked meanwhile waits for the
    next query, which sees it."""
    first, second = _routed_pair(1), _routed_pair(2)
    schedd = Schedd(first)
    checker = RouteCheck(settings(), "k8s", query=schedd)
    schedd.routed_gate.clear()
    errors: List[BaseException] = []

    def submit(n: int) -> None:
        try:
            checker.check(pilot(f"ce.example.org_ce.example.org_{n}.0_1795297304"))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    one = threading.Thread(target=submit, args=(1,))
    one.start()
    wait_until(lambda: len(schedd.asked) == 1, "the first query is out", 10)
    schedd.jobs = first + second  # pilot 2 is routed while that query is out, then asked for
    two = threading.Thread(target=submit, args=(2,))
    two.start()
    wait_until(lambda: len(checker.routed._waiting) == 1, "the second submit waits", 10)
    schedd.routed_gate.set()
    one.join(10)
    two.join(10)
    assert errors == []
    assert "1795297304" in schedd.asked[0] and "_2[.]0_" not in schedd.asked[0]


def test_a_schedd_failure_reaches_every_submit_of_its_query() -> None:
    down = FakeSchedd([ROUTED], [SOURCE], down=True)
    checker = RouteCheck(settings(), "k8s", query=down)
    for _ in range(2):
        with pytest.raises(TransientError, match="cannot check"):
            checker.check(pilot())
    assert checker.routed.queries == 2  # nothing is kept of a failed query


def test_sandboxes_asked_together_are_told_apart_word_by_word() -> None:
    """One sandbox the start of another (7.0_1 and 7.0_12) or a word of another GridJobId: each gets only
    the jobs that hold it as a whole word."""
    short, long = "ce_ce_7.0_1", "ce_ce_7.0_12"
    jobs = [dict(ROUTED, ClusterId=8, GridJobId=f"batch k8s {short}", JobUniverse=9),
            dict(ROUTED, ClusterId=9, GridJobId=f"batch k8s {long} k8s/ns/pilot-x-1", JobUniverse=9),
            dict(ROUTED, ClusterId=10, GridJobId=f"batch k8s {long}X", JobUniverse=9)]
    checker = RouteCheck(settings(), "k8s", query=Schedd(jobs))
    found = checker._holding([short, long])
    assert [a["ClusterId"] for a in found[short]] == [8] and [a["ClusterId"] for a in found[long]] == [9]
