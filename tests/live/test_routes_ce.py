"""``podgahp routes check --ce``: an HTCondor-CE's whole configuration, read as HTCondor reads it
(the CE's condor_config, its two config.d directories in order, the config pipe after them), with
nothing in it run. The CE here is a tree laid out as HTCondor-CE lays out /etc/condor-ce and
/usr/share/condor-ce, holding podgahp's re-statement of the CE's router defaults, a batch-system
catch-all route, and traps: a config pipe (HTCondor-CE's router-defaults program) and an
``include command`` that would each leave a marker file if run.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from typing import Any, Dict, Iterator, Tuple

import pytest

from harness import Installation

pytestmark = pytest.mark.live

ROUTES = "routes/50-podgahp-routes.conf"
PODGAHP_ROUTES = ["K8s_Opportunistic", "Lancium", "K8s_Gpu", "K8s_Cpu"]

CONDOR_CONFIG = """\
# The CE's own condor_config (its shape: HTCondor-CE's config/condor_config).
CONDOR_HOST = ce.example.org
PORT = 9619
COLLECTOR_HOST = $(CONDOR_HOST):$(PORT)
LOCAL_CONFIG_DIR = {tree}/usr/share/condor-ce/config.d, {tree}/etc/condor-ce/config.d
"""

#: What HTCondor-CE's 02-ce-slurm-defaults.conf holds in substance: a route without REQUIREMENTS.
SLURM_DEFAULTS = """\
JOB_ROUTER_ROUTE_Slurm_Cluster @=jrt
  TargetUniverse = 9
  GridResource = "batch slurm"
@jrt
JOB_ROUTER_ROUTE_NAMES = Slurm_Cluster
"""

ADMIN = """\
CONDORCE_PILOT_JOB_ENV = "SITE_SCRATCH=/scratch"
include command : touch {marker}.include
"""

#: Stands where HTCondor-CE's router-defaults program is; run, it would leave a marker.
PROGRAM = """\
#!/bin/sh
touch {marker}.pipe
echo 'PODGAHP_TEST_PIPE_RAN = True'
"""


@pytest.fixture
def ce(installation: Installation) -> Iterator[Tuple[Installation, str, str]]:
    """(installation, the CE tree, the marker path prefix)."""
    installation.acquire()
    tree = f"/tmp/podgahp-ce-{uuid.uuid4().hex[:8]}"
    marker = f"{tree}/ran"
    host = installation.host_path(tree)
    try:
        for directory in ("etc/condor-ce/config.d", "usr/share/condor-ce/config.d"):
            (host / directory).mkdir(parents=True)
        (host / "etc/condor-ce/condor_config").write_text(CONDOR_CONFIG.format(tree=tree))
        emulation = installation.host_path(f"{installation.src_dir}/gahp/data/ce-router-defaults.conf").read_text()
        pipe = f"{tree}/usr/share/condor-ce/condor_ce_router_defaults"
        (host / "usr/share/condor-ce/config.d/01-ce-router-defaults.conf").write_text(
            emulation + f"\nLOCAL_CONFIG_FILE = {pipe}|\n")
        (host / "usr/share/condor-ce/config.d/02-ce-slurm-defaults.conf").write_text(SLURM_DEFAULTS)
        (host / "usr/share/condor-ce/config.d/02-ce-slurm-defaults.conf.rpmnew").write_text("BROKEN LINE\n")
        (host / "etc/condor-ce/config.d/01-ce-router.conf").write_text(ADMIN.format(marker=marker))
        program = host / "usr/share/condor-ce/condor_ce_router_defaults"
        program.write_text(PROGRAM.format(marker=marker))
        program.chmod(0o755)
        yield installation, tree, marker
    finally:
        shutil.rmtree(host, ignore_errors=True)
        installation.release()


def check(inst: Installation, tree: str, *args: str) -> Tuple[int, Dict[str, Any]]:
    proc = inst.run([inst.bin("podgahp"), "routes", "check", "--json", "--ce", "--ce-config",
                     f"{tree}/etc/condor-ce/condor_config", *args], check=False)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def assert_nothing_ran(inst: Installation, marker: str) -> None:
    for suffix in (".pipe", ".include"):
        assert not os.path.exists(inst.host_path(marker + suffix)), suffix


def test_the_ces_whole_configuration_with_podgahps_routes(ce: Tuple[Installation, str, str]) -> None:
    inst, tree, marker = ce
    routes = f"{inst.src_dir}/{ROUTES}"
    code, report = check(inst, tree, routes)
    assert_nothing_ran(inst, marker)
    assert code == 0 and report["ok"], report["problems"]
    assert report["mode"] == "ce"
    assert "podgahp's re-statement of" in report["transforms"] and "condor_ce_router_defaults" in report["transforms"]
    # podgahp's routes first, then the batch system's catch-all (read earlier, listed after).
    assert [r["name"] for r in report["routes"]] == PODGAHP_ROUTES + ["Slurm_Cluster"]
    # The file under check is read as if it were in the CE's last config.d; the .rpmnew is skipped.
    sources = report["sources"]
    assert sources.index(f"{tree}/usr/share/condor-ce/config.d/02-ce-slurm-defaults.conf") < sources.index(routes)
    assert not any(s.endswith(".rpmnew") for s in sources)
    # The Env transform stands in for the pipe: the CE's collector and the admin's CONDORCE_PILOT_JOB_ENV.
    samples = {s["name"]: s for s in report["samples"]}
    assert samples["plain"]["route"] == "K8s_Cpu"
    assert samples["plain"]["gahp"]["environment"] == {"CONDORCE_COLLECTOR_HOST": "ce.example.org:9619",
                                                       "SITE_SCRATCH": "/scratch"}
    assert samples["minwalltime"]["gahp"]["environment"]["PILOT_GROUP"] == "atlas"
    # The commands are named, not run.
    assert any(w.startswith(f"{tree}/etc/condor-ce/config.d/01-ce-router.conf:2: include of a program not run")
               for w in report["warnings"])


def test_the_ces_own_routes_without_a_file(ce: Tuple[Installation, str, str]) -> None:
    inst, tree, marker = ce
    code, report = check(inst, tree)
    assert_nothing_ran(inst, marker)
    assert code == 0, report["problems"]
    assert [r["name"] for r in report["routes"]] == ["Slurm_Cluster"]
    assert {s["route"] for s in report["samples"]} == {"Slurm_Cluster"}
    assert all(s["error"] == 'not a podgahp route (GridResource "batch slurm")' for s in report["samples"])


def test_a_broken_file_is_named_at_the_admins_line(ce: Tuple[Installation, str, str]) -> None:
    inst, tree, marker = ce
    path = f"{tree}/etc/condor-ce/config.d/50-site-routes.conf"
    inst.host_path(path).write_text(
        "JOB_ROUTER_ROUTE_NAMES = Kube $(JOB_ROUTER_ROUTE_NAMES)\n"
        "JOB_ROUTER_ROUTE_Kube @=jrt\n"
        '  GridResource = "batch k8s"\n'
        "  REQUIREMENTS queue ==\n"
        "@jrt\n")
    code, report = check(inst, tree)
    assert_nothing_ran(inst, marker)
    assert code == 1
    assert f"{path}:2: route Kube is not valid, so the JobRouter drops it: CONFIGURATION ERROR: invalid " \
           "REQUIREMENTS : queue ==" in report["problems"]


def test_pilots_sent_to_a_queue_the_gahp_lacks_are_named(ce: Tuple[Installation, str, str]) -> None:
    """The CE's podgahp configuration serves only the cpu queue: the pilots the routes send to gpu and
    opportunistic would be held, and the check says so; with the three queues, nothing is said."""
    inst, tree, marker = ce
    routes = f"{inst.src_dir}/{ROUTES}"
    knobs = inst.host_path(f"{tree}/etc/condor-ce/config.d/20-podgahp-k8s.conf")
    knobs.write_text("PODGAHP_K8S_QUEUES = cpu\n")
    code, report = check(inst, tree, routes)
    assert_nothing_ran(inst, marker)
    held = sorted(w for w in report["warnings"] if "podgahp would hold it" in w)
    assert held == [
        "pilot gpu on route K8s_Gpu: podgahp would hold it: queue 'gpu' is not configured: PODGAHP_K8S_QUEUES lists cpu",
        "pilot opportunistic on route K8s_Opportunistic: podgahp would hold it: queue 'opportunistic' is not "
        "configured: PODGAHP_K8S_QUEUES lists cpu"], report["warnings"]
    knobs.write_text("PODGAHP_K8S_QUEUES = cpu, GPU, opportunistic\n")
    code, report = check(inst, tree, routes)
    assert code == 0 and not [w for w in report["warnings"] if "podgahp would hold it" in w], report["warnings"]


#: An HTCondor-CE 23.0 keeps routes in the old syntax and the defaults its config pipe writes.
CE_23_0 = """\
JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES = True
MERGE_JOB_ROUTER_DEFAULT_ADS = True
JOB_ROUTER_DEFAULTS = $(JOB_ROUTER_DEFAULTS_GENERATED)
"""

OLD_ROUTES = """\
JOB_ROUTER_ENTRIES @=jre
[
  name = "Old_K8s";
  GridResource = "batch k8s";
  TargetUniverse = 9;
  set_default_maxMemory = 1000;
  set_default_CERequirements = "RequestCpus";
]
@jre
"""


def test_an_htcondor_ce_23_0_with_old_routes(ce: Tuple[Installation, str, str]) -> None:
    """The defaults HTCondor-CE 23.0's pipe wrote (JOB_ROUTER_DEFAULTS_GENERATED) come from podgahp's
    re-statement too: on 23.x the old route gives its pilots its default memory; 25.x reads no old
    routes, and the check says so."""
    inst, tree, marker = ce
    inst.host_path(f"{tree}/etc/condor-ce/config.d/01-ce-router.conf").write_text(CE_23_0)
    path = f"{tree}/etc/condor-ce/config.d/50-old-routes.conf"
    inst.host_path(path).write_text(OLD_ROUTES)
    code, report = check(inst, tree)
    assert_nothing_ran(inst, marker)
    if inst.condor_version.startswith("23."):
        # The batch package's route list leaves the old route out: the JobRouter does not use it.
        assert [r["name"] for r in report["routes"]] == ["Slurm_Cluster"]
        assert any(w.startswith(f"{path}:1: route Old_K8s of JOB_ROUTER_ENTRIES is not in JOB_ROUTER_ROUTE_NAMES")
                   for w in report["warnings"]), report["warnings"]
        # Without it (HTCondor-CE 23.0's batch packages wrote old routes and no list), it is used.
        inst.host_path(f"{tree}/usr/share/condor-ce/config.d/02-ce-slurm-defaults.conf").unlink()
        code, report = check(inst, tree)
        assert [r["name"] for r in report["routes"]] == ["Old_K8s"]
        old = [s for s in report["samples"] if s["route"] == "Old_K8s"]
        assert len(old) == len(report["samples"]), report["samples"]
        memory = {s["name"]: s["gahp"]["memory_mb"] for s in old}
        assert memory["plain"] == 1000 and memory["gpu"] == 16000  # the pilot's maxMemory, else the route's default
        cores = {s["name"]: s["gahp"]["cpus"] for s in old}
        assert cores["plain"] == 1 and cores["gpu"] == 8  # xcount
        for sample in old:
            gahp = sample["gahp"]
            assert gahp["settings"] == {"condorce": 1}  # RequestCpus sent (default_CERequirements) and read as cores
            assert gahp["environment"]["CONDORCE_COLLECTOR_HOST"] == "ce.example.org:9619"
    else:
        assert code == 1
        assert any(f"{path}:1: JOB_ROUTER_ENTRIES (Old_K8s) are not read by HTCondor" in p for p in report["problems"])
