"""Grouping idle jobs into demand, and what a pilot is told (submit description, environment)."""

from __future__ import annotations

from typing import Dict

import classad2
import pytest

from gahp.core.config import Knobs
from gahp.core.errors import ConfigError
from gahp.provision.demand import constraint, group_jobs
from gahp.provision.pilots import environment_string, pilots_constraint, start_expression, submit_description
from gahp.provision.settings import ProvisionSettings
from gahp.provision.shape import Group, Shape


def settings(**knobs: str) -> ProvisionSettings:
    return ProvisionSettings.from_knobs(Knobs({f"PODGAHP_PROVISION_{k}": v for k, v in knobs.items()}))


JOBS = [({"RequestCpus": 1, "RequestMemory": 2048}, 5), ({"RequestCpus": 4, "RequestMemory": 8192}, 2),
        ({"RequestCpus": 2, "RequestMemory": 4096, "RequestGPUs": 1}, 1), ({"RequestCpus": "x"}, 1),
        ({"RequestCpus": 64, "RequestMemory": 1}, 1)]


def test_shaped_demand_is_jobs_per_shape() -> None:
    demand = group_jobs(JOBS, settings())
    assert demand.groups == {Group(Shape(1, 2048)): 5, Group(Shape(4, 8192)): 2, Group(Shape(2, 4096, 1)): 1,
                             Group(Shape(64, 1)): 1}
    assert demand.jobs == 10 and demand.unusable == 1


def test_partitionable_demand_is_pilots_of_the_one_shape() -> None:
    demand = group_jobs(JOBS, settings(PILOT_KIND="partitionable", PARTITIONABLE_CPUS="8",
                                       PARTITIONABLE_MEMORY_MB="16384"))
    # 5x1 + 2x4 cores = 13 (the GPU job and the 64-core one fit no pilot): 2 pilots of 8 cores
    assert demand.groups == {Group(Shape(8, 16384)): 2}
    assert demand.unusable == 3


def test_the_query_never_counts_pilots_and_keeps_the_filter_apart() -> None:
    text = constraint(settings(JOB_FILTER='Owner == "alice" || true'))
    assert text.startswith("JobStatus == 1 && JobUniverse =!= 9 && PodgahpProvisioner =?= undefined && (")
    assert text.endswith('(Owner == "alice" || true)')


def test_a_pilot_carries_its_shape_where_the_routes_read_it() -> None:
    group = Group(Shape(4, 8192, 1, 2 * 1024 * 1024), (("Project", 'a"b'),))
    description = submit_description(group, settings(POOL="pool.example:9618", PILOT_QUEUE="lancium",
                                                     NAME="prov-1"), "/tmp/pilots")
    assert description["+xcount"] == description["request_cpus"] == "4"
    assert description["+maxMemory"] == description["request_memory"] == "8192"
    assert description["request_gpus"] == "1" and description["request_disk"] == str(2 * 1024 * 1024)
    assert description["+queue"] == '"lancium"' and description["+PodgahpProvisioner"] == '"prov-1"'
    assert description["+PodgahpGroup"] == '"4c/8192MiB/1gpu/2GiB,Project=\'a%22b\'"'
    env = description["environment"]
    assert env.startswith('"CONDOR_HOST=\'pool.example:9618\' NUM_CPUS=\'4\' MEMORY=\'8192\' NUM_GPUS=\'1\'')
    assert 'TARGET.Project =?= ""a\\""b""' in env  # double quotes doubled inside the environment


def test_start_expression_of_each_kind() -> None:
    group = Group(Shape(4, 8192))
    shaped = start_expression(group, settings(JOB_FILTER="Owner =!= \"bob\""))
    assert shaped == '(Owner =!= "bob") && TARGET.RequestCpus <= 4 && TARGET.RequestMemory <= 8192 && ' \
                     '(TARGET.RequestGPUs ?: 0) <= 0'
    assert start_expression(group, settings(PILOT_KIND="partitionable")) == "(true)"
    extra = Group(Shape(1, 100), (("Project", None), ("Site", "a\\b")))
    assert start_expression(extra, settings(PILOT_KIND="partitionable")) == \
        '(true) && TARGET.Project =?= undefined && TARGET.Site =?= "a\\\\b"'



def test_environment_quoting() -> None:
    assert environment_string([("A", "1"), ("B", "it's \"x\"")]) == '"A=\'1\' B=\'it\'\'s ""x""\'"'


@pytest.mark.parametrize("knobs, message", [
    ({"PILOT_KIND": "huge"}, "PILOT_KIND"),
    ({"GROUP_BY": "Project, 1bad"}, "GROUP_BY"),
    ({"PILOT_QUEUE": "a b\"c"}, "PILOT_QUEUE"),
    ({"PILOT_ENVIRONMENT": "A=\"x\""}, "PILOT_ENVIRONMENT"),
    ({"PILOT_ENVIRONMENT": "A=1 B"}, "PILOT_ENVIRONMENT"),
    ({"PILOT_ENVIRONMENT": "1A=1"}, "PILOT_ENVIRONMENT"),
    ({"MAX_PILOTS": "-1"}, "MAX_PILOTS"),
    ({"PRESSURE_PERCENT": "0"}, "PRESSURE_PERCENT"),
    ({"NAME": 'prov"1'}, "NAME"),
])
def test_bad_knobs_are_named(knobs: Dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(**knobs)


def test_only_the_provisioners_own_pilots_count() -> None:
    mine = settings(NAME="prov-1", CE_OWNER="factory")
    expression = classad2.ExprTree(pilots_constraint(mine))
    base = {"PodgahpProvisioner": "prov-1", "Owner": "factory", "JobStatus": 1}
    assert expression.eval(classad2.ClassAd(base)) is True
    for other in ({"Owner": "mallory"}, {"PodgahpProvisioner": "prov-2"}, {"RoutedFromJobId": "3.0"},
                  {"JobStatus": 4}):
        assert expression.eval(classad2.ClassAd({**base, **other})) is False, other
