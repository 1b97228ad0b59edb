"""The shipped pilot start script: the configuration it writes is HTCondor's to read, from the
environment the provisioner sets; bad values stop it with a message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from gahp.core.config import Knobs
from gahp.provision.pilots import pilot_environment
from gahp.provision.settings import ProvisionSettings
from gahp.provision.shape import Group, Shape

SETTINGS = ProvisionSettings.from_knobs(Knobs({"PODGAHP_PROVISION_POOL": "pool.example:9618",
                                               "PODGAHP_PROVISION_JOB_FILTER": 'Owner =!= "bob"'}))
SCRIPT = SETTINGS.pilot_executable


def run(env: Dict[str, str], *args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(["sh", SCRIPT, *args], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True,
                          text=True, timeout=30)


def read_config(text: str, tmp_path: Path, names: list) -> Dict[str, str]:
    path = tmp_path / "condor_config"
    path.write_text(text)
    probe = f"import json, htcondor2; print(json.dumps({{n: htcondor2.param.get(n) for n in {names!r}}}))"
    out = subprocess.run([sys.executable, "-c", probe], env={"CONDOR_CONFIG": str(path)}, capture_output=True,
                         text=True, timeout=30, check=True)
    return {k: str(v) for k, v in json.loads(out.stdout).items()}


@pytest.mark.parametrize("kind", ["shaped", "partitionable"])
def test_the_provisioners_environment_makes_a_startd_configuration(kind: str, tmp_path: Path) -> None:
    group = Group(Shape(4, 8192), (("Project", "astro"),))
    settings = ProvisionSettings.from_knobs(Knobs({"PODGAHP_PROVISION_POOL": "pool.example:9618",
                                                   "PODGAHP_PROVISION_PILOT_KIND": kind,
                                                   "PODGAHP_PROVISION_JOB_FILTER": 'Owner =!= "bob"'}))
    env = {**dict(pilot_environment(group, settings)), "PODGAHP_PILOT_ID": "12.3"}
    out = run(env, "--print-config")
    assert out.returncode == 0, out.stderr
    values = read_config(out.stdout, tmp_path, ["CONDOR_HOST", "NUM_CPUS", "MEMORY", "START",
                                                "SLOT_TYPE_1_PARTITIONABLE", "PodgahpGroup", "STARTD_NOCLAIM_SHUTDOWN",
                                                "PodgahpProvisioner", "PodgahpPilotId", "STARTD_ATTRS"])
    assert values["CONDOR_HOST"] == "pool.example:9618" and values["NUM_CPUS"] == "4" and values["MEMORY"] == "8192"
    assert env["PODGAHP_PILOT_START"] in values["START"] and 'Owner =!= "bob"' in values["START"]
    assert values["SLOT_TYPE_1_PARTITIONABLE"] == ("True" if kind == "partitionable" else "False")
    assert values["PodgahpGroup"] == '"4c/8192MiB,Project=\'astro\'"'
    assert values["STARTD_NOCLAIM_SHUTDOWN"] == str(20 * 60)
    # what the provisioner finds it by in the pool
    assert values["PodgahpProvisioner"] == f'"{settings.name}"' and values["PodgahpPilotId"] == '"12.3"'
    assert {"PodgahpGroup", "PodgahpProvisioner", "PodgahpPilotId"} <= set(values["STARTD_ATTRS"].split())


def test_a_pilot_id_that_is_not_one_is_not_advertised(tmp_path: Path) -> None:
    out = run({"CONDOR_HOST": "h", "PODGAHP_PILOT_ID": '1.0"; START = true'}, "--print-config")
    assert out.returncode == 0 and read_config(out.stdout, tmp_path, ["PodgahpPilotId"])["PodgahpPilotId"] == '""'


@pytest.mark.parametrize("env, message", [
    ({}, "CONDOR_HOST"),
    ({"CONDOR_HOST": "h", "NUM_CPUS": "4; rm -rf /"}, "NUM_CPUS must be a whole number"),
    ({"CONDOR_HOST": "h", "PODGAHP_PILOT_KIND": "huge"}, "PODGAHP_PILOT_KIND"),
    ({"CONDOR_HOST": "h", "PODGAHP_PILOT_START": "true\nSTART = false"}, "one line"),
])
def test_bad_environment_stops_the_pilot(env: Dict[str, str], message: str) -> None:
    out = run(env, "--print-config")
    assert out.returncode != 0 and message in out.stderr
