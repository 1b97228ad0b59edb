"""Reading condor_job_router_info's output, and the report an admin reads."""

from __future__ import annotations

import classad2

from gahp import routes
from gahp.routes import gahp_view
from gahp.routes.check import parse_listing, router_errors, transform_failures

#: condor_job_router_info -diagnostic -config on 23.9.6 (trimmed), plus 25.x's empty ERROR lines.
DIAGNOSTIC = """\
Following source schedd (SCHEDD1): job_router_info
route Good converted to :
\tNAME Good
ERROR in route Good :
ERROR in transform Cpus :
route NoReq converted to :
CONFIGURATION ERROR: Missing Requirements in job route.
route BadStmt converted to :
route BadStmt is not valid: FROB is not a valid transform keyword
CONFIGURATION ERROR: FROB is not a valid transform keyword
Ignoring route entry in JOB_ROUTER_ROUTE_BadStmt
CONFIGURATION ERROR: invalid REQUIREMENTS : queue ==
Ignoring route entry in JOB_ROUTER_ROUTE_BadReq
route 'NoReq' from JOB_ROUTER_ROUTE_NAMES not found in the routing table.
route 'Missing' from JOB_ROUTER_ROUTE_NAMES not found in the routing table.
Routes will be matched in this order: Good


Route 1
Name         : "Good"
Source       : Good
Universe     : 9
MaxJobs      : 100
MaxIdleJobs  : 50
GridResource : batch k8s
Requirements : JobUniverse == 5
\tNAME Good
\tREQUIREMENTS JobUniverse == 5
"""


def test_router_errors_belong_to_their_routes() -> None:
    errors, by_route = router_errors(DIAGNOSTIC)
    assert by_route == {
        "NoReq": ["CONFIGURATION ERROR: Missing Requirements in job route."],
        "BadStmt": ["FROB is not a valid transform keyword"],
        "BadReq": ["CONFIGURATION ERROR: invalid REQUIREMENTS : queue =="],
    }
    assert "route 'Missing' from JOB_ROUTER_ROUTE_NAMES not found in the routing table." in errors
    assert not any(e.startswith("ERROR in") for e in errors)  # 25.x noise


def test_route_listing() -> None:
    (route,) = parse_listing(DIAGNOSTIC)
    assert route == routes.Route("Good", "batch k8s", "JobUniverse == 5", "100", "50", False)


def test_transform_failures_name_route_and_reason() -> None:
    messages = ["Checking Job src=2.0 against all routes", "(src=2.0,route=B): claimed job", "\tApplying route: B",
                "failure (route=B): SET needs 2 arguments.",
                "failure (src=2.0,route=B): failed to apply route ClassAd modifications to target ad."]
    assert transform_failures(messages) == {"2.0": ("B", "SET needs 2 arguments")}


def test_report_text() -> None:
    ad = classad2.parseOne('Cmd = "/p"\nIwd = "/h"\nGridResource = "batch k8s"\nRequestMemory = 16000\n'
                           'CERequirements = "RequestCpus"\nRequestCpus = 8\nBatchRuntime = 60\nWholeNodes = true',
                           classad2.ParserType.Old)
    _, job = gahp_view(ad, "ce_1.0")
    report = routes.Report(
        path="/etc/r.conf", mode="emulated", condor_version="23.9.6", transforms="t",
        routes=(routes.Route("K8s_Gpu", "batch k8s", "true", location="/etc/r.conf:3"),),
        samples=(routes.SampleResult("gpu", "2.0", "8 cores", "K8s_Gpu", "batch k8s", "[ ]", job,
                                     notes=("whole node: yes",)),
                 routes.SampleResult("lost", "3.0", error="no route takes it")),
        problems=("/etc/r.conf:7: route X is not valid",))
    text = report.text()
    assert not report.ok and report.ce
    for expected in ("route          K8s_Gpu", "cpus           8", "memory         16000 MiB", "(/etc/r.conf:3)",
                     "whole node     yes", "note: whole node: yes", "no route takes it", "Problems:", "FAILED"):
        assert expected in text
    assert routes.Report(path="p", mode="plain", condor_version="x", transforms="t").ok


def test_mode_follows_the_installed_ce(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from gahp.routes import RoutesError, resolve_mode

    config = tmp_path / "condor_config"
    assert resolve_mode("auto", str(config)) == "emulated"
    config.write_text("")
    assert resolve_mode("auto", str(config)) == "ce"
    assert resolve_mode("plain", str(config)) == "plain"
    import pytest

    with pytest.raises(RoutesError, match="unknown mode"):
        resolve_mode("other", str(config))
