"""gahp.provenance: a submit is accepted only for a job that a route of this CE made."""

from __future__ import annotations

import re
from typing import Dict, List, Optional

import classad2
import pytest

from gahp.config import Knobs
from gahp.errors import TransientError
from gahp.job import PilotJob
from gahp.provenance import NotRouted, ProvenanceSettings, RouteCheck
from gahp.schedd import ScheddUnavailable

SANDBOX = "ce.example.org_9619_ce.example.org_7.0_1795297304"
ISSUER = "ce.example.org"
ROUTED = {"ClusterId": 8, "ProcId": 0, "Owner": "pilot", "RoutedBy": "htcondor-ce", "RoutedFromJobId": "7.0",
          "AuthTokenSubject": "condor@password", "AuthTokenIssuer": ISSUER}
SOURCE = {"RoutedToJobId": "8.0", "Owner": "pilot"}


class FakeSchedd:
    """Answers the two queries RouteCheck makes from fixed ads, and records them."""

    def __init__(self, routed: List[Dict[str, object]], source: List[Dict[str, object]],
                 down: bool = False) -> None:
        self.routed, self.source, self.down = routed, source, down
        self.asked: List[tuple] = []

    def __call__(self, constraint: str, projection: List[str], name: Optional[str],
                 pool: Optional[str]) -> List[Dict[str, object]]:
        self.asked.append((constraint, name, pool))
        if self.down:
            raise ScheddUnavailable("the local schedd cannot be queried: connection refused")
        return self.routed if "GridJobId" in constraint else self.source


def pilot(sandbox: str = SANDBOX) -> PilotJob:
    return PilotJob(executable="/bin/true", iwd="/tmp", sandbox_id=sandbox)


def check(schedd: FakeSchedd, sandbox: str = SANDBOX, **settings: object) -> None:
    settings.setdefault("token_issuer", ISSUER)
    RouteCheck(ProvenanceSettings(**settings), "k8s", query=schedd).check(pilot(sandbox))  # type: ignore[arg-type]


def test_a_routed_job_is_accepted() -> None:
    schedd = FakeSchedd([ROUTED], [SOURCE])
    check(schedd)
    assert [(c.split(" && ")[0], n) for c, n, _ in schedd.asked] == [("JobUniverse == 9", None),
                                                                      ("ClusterId == 7", None)]


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


def test_a_source_the_job_router_has_not_linked_yet_is_asked_again() -> None:
    """The JobRouter sets RoutedToJobId after submitting the routed job; a submit that comes in between
    waits for the link (a real HTCondor 23 CE held its first two pilots of a burst of 300 without this)."""
    answers = [[dict(SOURCE, RoutedToJobId=None)]] * 3 + [[SOURCE]]
    schedd = FakeSchedd([ROUTED], [])
    waits: List[float] = []

    def query(constraint: str, projection: List[str], name: Optional[str], pool: Optional[str]) -> List[Dict[str, object]]:
        return schedd(constraint, projection, name, pool) if "GridJobId" in constraint else answers.pop(0)

    RouteCheck(ProvenanceSettings(token_issuer=ISSUER), "k8s", query=query, sleep=waits.append).check(pilot())
    assert len(waits) == 3 and answers == []


def test_a_source_never_linked_is_refused_after_the_wait() -> None:
    waits: List[float] = []
    schedd = FakeSchedd([ROUTED], [dict(SOURCE, RoutedToJobId=None)])
    with pytest.raises(NotRouted, match="holds no such job of pilot routed to it"):
        RouteCheck(ProvenanceSettings(token_issuer=ISSUER), "k8s", query=schedd, sleep=waits.append).check(pilot())
    assert 29.9 < sum(waits) <= 30.0


def test_a_crafted_sandbox_id_never_reaches_the_schedd() -> None:
    schedd = FakeSchedd([ROUTED], [SOURCE])
    with pytest.raises(NotRouted, match="not one the gridmanager makes"):
        check(schedd, sandbox='x" || true || "')
    assert schedd.asked == []


def test_schedd_down_is_retryable_and_off_asks_nothing() -> None:
    with pytest.raises(TransientError, match="cannot check that the job came through a route.*refused"):
        check(FakeSchedd([ROUTED], [SOURCE], down=True))
    schedd = FakeSchedd([], [])
    check(schedd, routed_only=False)
    assert schedd.asked == []


def test_source_schedd_knobs_are_used() -> None:
    schedd = FakeSchedd([ROUTED], [SOURCE])
    check(schedd, source_schedd_name="htcondor-ce@ce.example.org", source_schedd_pool="ce.example.org:9619")
    assert schedd.asked[1][1:] == ("htcondor-ce@ce.example.org", "ce.example.org:9619")


@pytest.mark.parametrize(
    "grid_job_id, matches",
    [(f"batch k8s {SANDBOX}", True), (f"batch k8s {SANDBOX} k8s/pilots/pilot-0123456789abcdef0123-0", True),
     (f"batch k8s {SANDBOX}X", False), (f"batch k8s X{SANDBOX}", False), (None, False)],
)
def test_the_constraint_finds_the_sandbox_in_grid_job_id(grid_job_id: Optional[str], matches: bool) -> None:
    schedd = FakeSchedd([ROUTED], [SOURCE])
    check(schedd)
    ad = classad2.ClassAd({"JobUniverse": 9})
    if grid_job_id is not None:
        ad["GridJobId"] = grid_job_id
    assert bool(classad2.ExprTree(schedd.asked[0][0]).eval(ad)) is matches


#: The attack: a user submits a held vanilla job, then a grid job claiming RoutedBy and RoutedFromJobId,
#: then condor_qedit's the vanilla job's RoutedToJobId: every link holds, but the schedd recorded the
#: user's own connection (FS: no token at all), not the JobRouter's.
FORGED = {k: v for k, v in ROUTED.items() if not k.startswith("AuthToken")}


@pytest.mark.parametrize("routed, message", [
    (FORGED, "job 8.0 was not submitted by the JobRouter: the schedd recorded its submitter's token as "
             "AuthTokenSubject = undefined, AuthTokenIssuer = undefined, not condor@password of 'ce.example.org' "
             "(PODGAHP_ROUTER_TOKEN_SUBJECTS, PODGAHP_ROUTER_TOKEN_ISSUER); the CE's JobRouter must authenticate "
             "to its schedd with IDTOKENS"),
    (dict(FORGED, x509UserProxySubject="/DC=org/CN=pilot"), "HTCondor 23.x records no token for a job with an "
                                                            "X.509 proxy: set PODGAHP_ROUTER_TOKEN_REQUIRED = false"),
    (dict(ROUTED, AuthTokenSubject="pilot@users.htcondor.org"), "AuthTokenSubject = 'pilot@users.htcondor.org'"),
    (dict(ROUTED, AuthTokenIssuer="https://scitokens.org/osg-connect"),
     "AuthTokenIssuer = 'https://scitokens.org/osg-connect', not condor@password of 'ce.example.org'"),
    (dict(ROUTED, AuthTokenSubject=None, AuthTokenIssuer=ISSUER), "AuthTokenSubject = undefined"),
], ids=["links-forged-no-token", "links-forged-with-proxy", "user-token", "other-issuer", "issuer-only"])
def test_a_job_the_router_did_not_submit_is_refused_whatever_its_links(routed: Dict[str, object],
                                                                       message: str) -> None:
    with pytest.raises(NotRouted, match=re.escape(message)):
        check(FakeSchedd([routed], [SOURCE]))


def test_without_the_token_requirement_the_links_decide() -> None:
    check(FakeSchedd([FORGED], [SOURCE]), token_required=False)
    check(FakeSchedd([dict(ROUTED, AuthTokenSubject="router@x")], [SOURCE]), token_subjects=("router@x",))


def test_knobs() -> None:
    defaults = ProvenanceSettings.from_knobs(Knobs({"TRUST_DOMAIN": "ce.example.org"}))
    assert (defaults.token_required, defaults.token_subjects, defaults.token_issuer) == (
        True, ("condor@password",), "ce.example.org")
    assert ProvenanceSettings.from_knobs(Knobs({"PODGAHP_ROUTER_TOKEN_REQUIRED": "false",
                                                "PODGAHP_ROUTER_TOKEN_ISSUER": "x"})).token_issuer == "x"
    assert ProvenanceSettings.from_knobs(Knobs({})).routers == ("htcondor-ce",)
    settings = ProvenanceSettings.from_knobs(Knobs({"JOB_ROUTER_NAME": "site-router", "PODGAHP_ROUTED_ONLY": "false"}))
    assert settings.routers == ("htcondor-ce", "site-router") and not settings.routed_only
