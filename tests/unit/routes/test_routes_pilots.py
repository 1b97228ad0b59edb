"""Pilots built to reach a route: they meet its REQUIREMENTS and none of the routes before it."""

from __future__ import annotations

from typing import Optional

import classad2
import pytest

from gahp.routes.pilots import RouteCondition, condition, meets, pilot_for
from gahp.routes.samples import SAMPLES

CONSTRAINT = "target.JobUniverse =?= 5 || target.JobUniverse =?= 1"
ROUTES = [
    RouteCondition("Opportunistic", 'queue =?= "opportunistic"'),
    RouteCondition("Gpu", '(RequestGPUs ?: 0) > 0 && queue =!= "opportunistic"'),
    RouteCondition("Atlas", 'regexp("^usatlas", Owner)'),
    RouteCondition("Cms", r'regexp("\/cms\/Role\=pilot", x509UserProxyFirstFQAN)'),
    RouteCondition("Big", 'RequestMemory > 9000 && RequestCpus >= 4 && queue == "big" && '
                          '(x509UserProxyVOName == "cms" || x509UserProxyVOName == "atlas")'),
    RouteCondition("Rest", ""),
    RouteCondition("Shadowed", 'queue == "never"'),
]


@pytest.mark.parametrize("index, expected", [
    (0, 'queue = "opportunistic"'),
    (1, "RequestGPUs = 1"),
    (2, 'Owner = "usatlas"'),
    (3, 'x509UserProxyFirstFQAN = "/cms/Role=pilot"'),
    (4, 'RequestMemory = 9001, RequestCpus = 4, queue = "big", x509UserProxyVOName = "cms"'),
    (5, "the plain pilot"),
    (6, None),
], ids=[r.name for r in ROUTES])
def test_a_pilot_reaches_each_route_that_can_be_reached(index: int, expected: Optional[str]) -> None:
    route = ROUTES[index]
    pilot = pilot_for(route, ROUTES[:index], CONSTRAINT, SAMPLES[0], 100 + index)
    if expected is None:
        assert pilot is None  # Rest takes every pilot first
        return
    assert pilot is not None and pilot.description.endswith(expected)
    ad = classad2.parseOne(pilot.ad, classad2.ParserType.Old)
    assert ad["ClusterId"] == 100 + index
    assert meets(condition(route, ROUTES[:index], CONSTRAINT), ad)
    for other in ROUTES[:index]:  # and no earlier route takes it
        assert not meets(condition(other, [], CONSTRAINT), ad)


def test_the_source_constraint_counts() -> None:
    route = RouteCondition("Any", "")
    assert pilot_for(route, [], "JobUniverse == 1", SAMPLES[0], 1) is not None  # JobUniverse changed to 1
    assert pilot_for(route, [], "false", SAMPLES[0], 1) is None


def test_unparsable_requirements_build_nothing() -> None:
    assert pilot_for(RouteCondition("Bad", "queue =="), [], CONSTRAINT, SAMPLES[0], 1) is None
