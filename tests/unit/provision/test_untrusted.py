"""Job ads are data, never configuration: what a job owner writes in its requests or GROUP_BY
attributes is not macro-expanded on the way to a pilot (submit description, environment, the pilot's
own configuration), requests that do not evaluate to a number are no demand, a pilot starts the jobs
whose requests were rounded up to it, and a flood of distinct shapes costs a bounded number of groups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import classad2
import htcondor2
import pytest

from gahp.core.config import Knobs
from gahp.provision.demand import group_jobs, tally
from gahp.provision.pilots import (MAX_ENDINGS, ending, endings_constraint, pilot_environment, start_expression,
                                   submit_description)
from gahp.provision.history import History
from gahp.provision.plan import Ending, Pilot, decide
from gahp.provision.settings import SHAPE_ATTRIBUTES, ProvisionSettings
from gahp.provision.shape import Group, Shape, group_of

SECRET = "s3cr3t-of-the-provisioner"

#: GROUP_BY values as a hostile job owner writes them (each in a job's ``Project``).
HOSTILE = [
    "$ENV(PODGAHP_PROBE_SECRET)",
    "$(FULL_HOSTNAME)",
    "$RANDOM_INTEGER(1,1000000)",
    "$RANDOM_CHOICE(a,b,c)",
    "$$(Memory)",
    "$(DOLLAR)(HOME)",
    "it's \"quoted\" \\ and, split=1",
    "ends with a backslash \\",
    "undefined",
]


def settings(**knobs: str) -> ProvisionSettings:
    return ProvisionSettings.from_knobs(Knobs({f"PODGAHP_PROVISION_{k}": v for k, v in knobs.items()}))


SETTINGS = settings(POOL="pool.example:9618", GROUP_BY="Project", NAME="prov-1", JOB_FILTER='Owner =!= "bob"')


def job(**attributes: object) -> classad2.ClassAd:
    ad = classad2.ClassAd({"RequestCpus": 1, "RequestMemory": 2048, "Owner": "alice"})
    for name, value in attributes.items():
        ad[name] = value
    return ad


def expr_job(text: str) -> classad2.ClassAd:
    """A job ad as the schedd holds it (expressions unevaluated), from ClassAd text."""
    return classad2.ClassAd("[RequestCpus = 1; RequestMemory = 2048; Owner = \"alice\"; " + text + "]")


def groups_of(ads: List[classad2.ClassAd], settings: ProvisionSettings = SETTINGS) -> Dict[Group, int]:
    names = list(dict.fromkeys(SHAPE_ATTRIBUTES + settings.group_by))
    jobs = [(dict(zip(names, values)), n) for values, n in tally(ads, names).items()]
    return group_jobs(jobs, settings).groups


@pytest.fixture(autouse=True)
def secret_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODGAHP_PROBE_SECRET", SECRET)


# --- requests that are not numbers ---------------------------------------------------------------

@pytest.mark.parametrize("text, shape", [
    ("RequestMemory = MemoryUsage * 2", None),               # undefined for an idle job: not 2 MiB
    ("RequestGPUs = WantGPUs", None),                        # undefined: not 2 GPUs
    ("RequestGPUs = 1/0", None),                             # error: not 1 GPU
    ("RequestCpus = {4, 8}", None),
    ("RequestDisk = [a = 1]", None),
    ("RequestMemory = \"lots\"", None),
    ("RequestMemory = ifThenElse(MemoryUsage =!= undefined, MemoryUsage, (ImageSize + 1023) / 1024); "
     "ImageSize = 5000000", Shape(1, 4883)),                  # HTCondor's default request evaluates
    ("RequestCpus = 1.5; RequestMemory = 1000.25; RequestGPUs = 0.5", Shape(2, 1001, 1)),
    ("Dummy = 1", Shape(1, 2048)),                           # no GPUs, no disk asked: none
], ids=lambda v: str(v))
def test_requests_that_do_not_evaluate_to_numbers_are_no_demand(text: str, shape: Optional[Shape]) -> None:
    groups = groups_of([expr_job(text)], settings())
    assert groups == ({} if shape is None else {Group(shape): 1})


@pytest.mark.parametrize("text, value", [
    ("Dummy = 1", None),                      # missing: undefined
    ("Project = Undefined", None),
    ("Project = Nothing.here", None),         # evaluates to undefined: undefined
    ("Project = 1/0", "unusable"),            # error: no demand
    ("Project = {1}", "unusable"),
    ("Project = \"astro\"", "astro"),
])
def test_grouping_values_that_do_not_evaluate(text: str, value: object) -> None:
    groups = groups_of([expr_job(text)])
    if value == "unusable":
        assert groups == {}
    else:
        assert groups == {Group(Shape(1, 2048), (("Project", value),)): 1}


# --- no macro expansion anywhere -----------------------------------------------------------------

def expanded(description: Dict[str, str]) -> Dict[str, str]:
    """Each command of a submit description as HTCondor's submit language expands it."""
    submit = htcondor2.Submit(description)
    return {key: str(submit.expand(key.replace("+", "MY.", 1) if key.startswith("+") else key))
            for key in description}


def environment_of(text: str) -> Dict[str, str]:
    """The pilot's environment from the expanded ``environment`` command (HTCondor's quoting undone)."""
    assert text.startswith('"') and text.endswith('"')
    pairs, body, i = {}, text[1:-1], 0
    while i < len(body):
        name_end = body.index("='", i)
        name, i, value = body[i:name_end], name_end + 2, []
        while True:
            if body.startswith("''", i):
                value.append("'")
                i += 2
            elif body[i] == "'":
                i += 1
                break
            elif body.startswith('""', i):
                value.append('"')
                i += 2
            else:
                value.append(body[i])
                i += 1
        pairs[name] = "".join(value)
        i += 1  # the blank between pairs
    return pairs


@pytest.mark.parametrize("value", HOSTILE)
def test_grouping_values_are_never_expanded_on_the_way_to_the_pilot(value: str) -> None:
    ad = job(Project=value)
    [group] = groups_of([ad])
    description = submit_description(group, SETTINGS, "/tmp/pilots")
    after = expanded(description)
    # nothing but the pilot's own job id (its output names, PODGAHP_PILOT_ID) is a macro
    ours = {k: v.replace("$(ClusterId).$(ProcId)", "1.0") for k, v in description.items()}
    assert after == ours
    assert SECRET not in json.dumps(after)
    # the CE gives back the group the provisioner made: its pilots are counted, none is added
    assert classad2.ExprTree(after["+PodgahpGroup"]).eval() == str(group)
    pilot = Pilot("1.0", str(group), True, 0.0)
    assert decide({group: 1}, {group: 1}, [pilot], [], SETTINGS.policy, History(), 0.0).submissions == 0
    # the pilot's START, as its environment carries it, starts the job it was made for
    env = environment_of(after["environment"])
    assert env["PODGAHP_PILOT_GROUP"] == str(group) and "$" not in env["PODGAHP_PILOT_GROUP"]
    assert classad2.ExprTree(env["PODGAHP_PILOT_START"]).eval(classad2.ClassAd(), ad) is True
    assert classad2.ExprTree(env["PODGAHP_PILOT_START"]).eval(classad2.ClassAd(), job(Project=value + "x")) is False


def test_labels_of_distinct_values_are_distinct() -> None:
    groups = groups_of([job(Project=v) for v in HOSTILE] + [job(Project=classad2.ExprTree("undefined")),
                                                            job(Project=5), job(Project="5")])
    assert len({str(g) for g in groups}) == len(groups) == len(HOSTILE) + 3


def read_pilot_config(env: Dict[str, str], tmp_path: Path) -> Dict[str, str]:
    """The configuration the shipped pilot script writes from ``env``, as HTCondor reads it."""
    script = SETTINGS.pilot_executable
    out = subprocess.run(["sh", script, "--print-config"], env={"PATH": "/usr/bin:/bin", **env},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    path = tmp_path / "condor_config"
    path.write_text(out.stdout)
    names = ["START", "PodgahpGroup"]
    probe = f"import json, htcondor2; print(json.dumps({{n: htcondor2.param.get(n) for n in {names!r}}}))"
    read = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True,
                          env={"CONDOR_CONFIG": str(path), "PATH": os.environ.get("PATH", "")})
    return {k: str(v) for k, v in json.loads(read.stdout).items()}


@pytest.mark.parametrize("value", HOSTILE[:4] + HOSTILE[6:7])
def test_the_pilots_own_configuration_does_not_expand_them_either(value: str, tmp_path: Path) -> None:
    ad = job(Project=value)
    [group] = groups_of([ad])
    config = read_pilot_config(dict(pilot_environment(group, SETTINGS)), tmp_path)
    assert SECRET not in json.dumps(config)
    assert classad2.ExprTree(config["PodgahpGroup"]).eval() == str(group)
    start = classad2.ExprTree(config["START"])
    machine = classad2.ClassAd({"PodgahpPilotRetireTime": 2 ** 40})
    assert start.eval(machine, ad) is True


@pytest.mark.parametrize("knob, value", [
    ("JOB_FILTER", 'Owner == "$ENV(HOME)"'),
    ("JOB_FILTER", "Owner =="),
    ("PILOT_ENVIRONMENT", "A=$(HOME)"),
    ("POOL", "pool.example $(X)"),
    ("POOL", 'pool"'),
])
def test_admin_values_that_a_pilot_would_expand_are_refused(knob: str, value: str) -> None:
    from gahp.core.errors import ConfigError

    with pytest.raises(ConfigError, match=knob):
        settings(**{knob: value})


# --- rounded requests, and pilots that start what fits ---------------------------------------------

@pytest.mark.parametrize("requests, other, starts", [
    ({"RequestCpus": 1.5, "RequestMemory": 1000.5}, {}, True),
    ({"RequestCpus": 2, "RequestMemory": 1001}, {}, True),
    ({"RequestCpus": 1.5, "RequestMemory": 1000.5, "RequestGPUs": 0.5}, {}, True),
    ({"RequestCpus": 1.5, "RequestMemory": 1000.5}, {"RequestCpus": 3}, False),
    ({"RequestCpus": 1.5, "RequestMemory": 1000.5}, {"RequestMemory": 1002}, False),
    ({"RequestCpus": 1.5, "RequestMemory": 1000.5}, {"RequestGPUs": 1}, False),
    ({"RequestCpus": 1.5, "RequestMemory": 1000.5}, {"Owner": "bob"}, False),
], ids=lambda v: str(v))
def test_a_pilot_starts_the_jobs_rounded_up_to_it(requests: Dict[str, float], other: Dict[str, object],
                                                  starts: bool) -> None:
    made_for = classad2.ClassAd({"Owner": "alice", **requests})
    [group] = groups_of([made_for], settings(JOB_FILTER='Owner =!= "bob"'))
    assert group.shape.cpus == 2 and group.shape.memory_mb in (1001,)
    start = classad2.ExprTree(start_expression(group, settings(JOB_FILTER='Owner =!= "bob"')))
    assert start.eval(classad2.ClassAd(), made_for) is True
    assert start.eval(classad2.ClassAd(), classad2.ClassAd({"Owner": "alice", **requests, **other})) is starts


# --- a flood of shapes -----------------------------------------------------------------------------

def test_a_flood_of_distinct_shapes_is_bounded() -> None:
    flood = [({"RequestCpus": 1, "RequestMemory": 100 + i}, 1) for i in range(20_000)]
    big = [({"RequestCpus": 4, "RequestMemory": 8192}, 50)]
    chosen = settings(MAX_GROUPS="100", MAX_STARTING="50")
    demand = group_jobs(flood + big, chosen)
    assert len(demand.groups) == 100 and Group(Shape(4, 8192)) in demand.groups  # the largest first
    assert demand.deferred_groups == 20_001 - 100 and demand.deferred == 20_000 - 99
    assert demand.jobs == 20_050
    decision = decide(demand.groups, demand.waiting, [], [], chosen.policy, History(), 0.0)
    assert len(decision.rows) == 100 and decision.submissions == 50


@pytest.mark.parametrize("ad, expected", [
    ({"JobStatus": 4, "ExitCode": 0, "ExitBySignal": False, "RemoteWallClockTime": 1300.0}, Ending(True, 0, 1300.0)),
    ({"JobStatus": 4, "ExitCode": 0, "JobCurrentStartDate": 1000, "CompletionDate": 2300}, Ending(True, 0, 1300.0)),
    ({"JobStatus": 4, "ExitCode": 0, "ExitBySignal": True, "RemoteWallClockTime": 1300.0}, Ending(True, None, 1300.0)),
    ({"JobStatus": 3, "ExitCode": "0", "RemoteWallClockTime": "1300"}, Ending(False, None, 0.0)),
    ({"JobStatus": 4, "ExitCode": True, "RemoteWallClockTime": float("nan"), "CompletionDate": 2300}, Ending(True, None, 0.0)),
    ({}, Ending(False, None, 0.0)),
], ids=["completed", "dates", "signal", "removed, strings", "not numbers", "nothing"])
def test_a_pilots_ending_from_its_history_ad(ad: Dict[str, object], expected: Ending) -> None:
    assert ending(ad) == expected
    if all(v == v for v in ad.values()):  # as the bindings give it
        assert ending(classad2.ClassAd(ad)) == expected


def test_only_job_ids_of_the_form_cluster_proc_are_asked_for_and_few() -> None:
    settings = ProvisionSettings.from_knobs(Knobs({}))
    assert endings_constraint(settings, ["x.0", "1.0) || (true", "", "1", "1.2.3"]) is None
    constraint = endings_constraint(settings, [f"{i}.0" for i in range(MAX_ENDINGS + 100)] + ["7.1"])
    assert constraint is not None and constraint.count(".0\"") == MAX_ENDINGS and "7.1" not in constraint
    ad = {"PodgahpProvisioner": settings.name, "Owner": settings.ce_owner, "ClusterId": 3, "ProcId": 0}
    assert classad2.ExprTree(constraint).eval(classad2.ClassAd(ad)) is True
    for other in ({"ProcId": 1}, {"ClusterId": 3000}, {"Owner": "someone"}, {"RoutedFromJobId": "3.0"}):
        assert classad2.ExprTree(constraint).eval(classad2.ClassAd({**ad, **other})) is False
