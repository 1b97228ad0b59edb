"""The shipped routes under HTCondor's own JobRouter code (condor_job_router_info), offline.

Runs in every installation (23.x and 25.x): the routes parse with the expected route count, each
sample pilot lands on its route and podgahp would receive the expected request; the old-syntax file
and its `podgahp routes convert` output route every sample identically; `podgahp routes check`
exits 0 on the shipped routes and non-zero, naming the route, on a broken one. No daemons run.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict

import pytest

from harness import Installation

pytestmark = pytest.mark.live

NEW = "routes/50-podgahp-routes.conf"
OLD = "routes/50-podgahp-routes.entries.conf"
ROUTE_NAMES = ["K8s_Opportunistic", "Lancium", "K8s_Gpu", "K8s_Cpu"]

#: What podgahp receives for each built-in pilot behind an HTCondor-CE: the real CE's rules
#: (``htcondor-ce-real.md``), written out by hand, so that this fails when the emulation
#: (gahp/data/ce-router-defaults.conf) or the shipped routes stray from them. Cores: xcount, else
#: RequestCpus > 1, else the route's default_xcount macro, else 1. Memory: maxMemory, else
#: default_maxMemory, else 2000. Wall time: maxWallTime min, else BatchRuntime, else the route's
#: default_maxWallTime macro min (K8s_Opportunistic: 720), else 4320 min. GPUs: the job's own.
#: Environment: CONDORCE_COLLECTOR_HOST (the CE's collector) merged with the pilot's own.
EXPECTED_CE: Dict[str, Dict[str, Any]] = {
    "plain": {"route": "K8s_Cpu", "grid_resource": "batch k8s", "queue": "cpu", "cpus": 1,
              "memory_mb": 2000, "disk_kb": 1000000, "gpus": 0, "wall_time_s": 259200,
              "settings": {"condorce": 1}},
    "gpu": {"route": "K8s_Gpu", "grid_resource": "batch k8s", "queue": "gpu", "cpus": 8,
            "memory_mb": 16000, "disk_kb": 20000000, "gpus": 1, "wall_time_s": 172800,
            "settings": {"condorce": 1}},
    "opportunistic": {"route": "K8s_Opportunistic", "grid_resource": "batch k8s", "queue": "opportunistic",
                      "cpus": 4, "memory_mb": 8000, "disk_kb": 4000000, "gpus": 0, "wall_time_s": 43200,
                      "settings": {"condorce": 1, "k8s_priority_class": "podgahp-opportunistic"}},
    "lancium": {"route": "Lancium", "grid_resource": "batch lancium", "queue": "medium", "cpus": 2,
                "memory_mb": 4000, "disk_kb": 2000000, "gpus": 0, "wall_time_s": 259200,
                "settings": {"condorce": 1}},
    "nodisk": {"route": "K8s_Cpu", "grid_resource": "batch k8s", "queue": "cpu", "cpus": 1,
               "memory_mb": 2000, "disk_kb": 50, "gpus": 0, "wall_time_s": 259200,
               "settings": {"condorce": 1}},
    "minwalltime": {"route": "K8s_Cpu", "grid_resource": "batch k8s", "queue": "cpu", "cpus": 1,
                    "memory_mb": 2000, "disk_kb": 1000000, "gpus": 0, "wall_time_s": 7200,
                    "settings": {"condorce": 1}},
    "wholenode": {"route": "K8s_Cpu", "grid_resource": "batch k8s", "queue": "cpu", "cpus": 1,
                  "memory_mb": 2000, "disk_kb": 1000000, "gpus": 0, "wall_time_s": 259200,
                  "settings": {"condorce": 1}},
}

#: The pilot's own environment, per sample (all others have none).
OWN_ENVIRONMENT = {"minwalltime": {"PILOT_GROUP": "atlas"}}

#: The same in a plain pool: the job's own RequestCpus and RequestMemory, no wall time, no CE
#: environment.
EXPECTED_PLAIN: Dict[str, Dict[str, Any]] = {
    name: dict(want, cpus=1, memory_mb=2048, wall_time_s=None,
               settings={k: v for k, v in want["settings"].items() if k != "condorce"})
    for name, want in EXPECTED_CE.items()
}

BROKEN = """\
JOB_ROUTER_ROUTE_NAMES = Good Broken
JOB_ROUTER_ROUTE_Good @=jrt
  GridResource = "batch k8s"
  REQUIREMENTS JobUniverse == 5
  SET CERequirements "RequestCpus,RequestDisk"
@jrt
JOB_ROUTER_ROUTE_Broken @=jrt
  GridResource = "batch k8s"
  SET BatchQueue "cpu"
@jrt
"""

#: A pilot with no CE attributes, as a long-form ad (format with cluster=N).
PLAIN_AD = """\
ClusterId = {cluster}
ProcId = 0
Owner = "pilot"
JobStatus = 1
JobUniverse = 5
Requirements = true
Cmd = "/home/pilot/pilot.sh"
Iwd = "/home/pilot"
RequestCpus = 1
RequestMemory = 2048
RequestDisk = 1000000
"""



@pytest.fixture
def inst(acquired: Installation) -> Installation:
    return acquired


@pytest.fixture
def workdir(scratch: str) -> str:
    return scratch


def src(inst: Installation, path: str) -> str:
    """A file of this checkout as installed in ``inst`` (the checkout's own copy, not the newest)."""
    return f"{inst.src_dir}/{path}"


def check(inst: Installation, path: str, ce: bool, *options: str) -> Dict[str, Any]:
    """``podgahp routes check --json`` inside the installation; its exit status says what ``ok`` says."""
    proc = inst.run([inst.bin("podgahp"), "routes", "check", "--json", "--emulated-ce" if ce else "--no-ce", *options,
                     path], check=False)
    report: Dict[str, Any] = json.loads(proc.stdout)
    assert proc.returncode == (0 if report["ok"] else 1), proc.stderr
    return report


def is_23x(inst: Installation) -> bool:
    return inst.condor_version.startswith("23.")


def gahp_views(report: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    views = {}
    for sample in report["samples"]:
        gahp = sample["gahp"] or {}
        views[sample["name"]] = {
            "route": sample["route"], "grid_resource": sample["grid_resource"],
            **{k: gahp.get(k) for k in ("queue", "cpus", "memory_mb", "disk_kb", "gpus", "wall_time_s",
                                        "settings")},
        }
    return views


def environments(report: Dict[str, Any]) -> Dict[str, Dict[str, str]]:
    return {s["name"]: (s["gahp"] or {}).get("environment") or {} for s in report["samples"]}


def routed_ads(report: Dict[str, Any]) -> Dict[str, str]:
    return {s["name"]: s["routed_ad"] for s in report["samples"]}


@pytest.mark.parametrize("ce, expected", [(True, EXPECTED_CE), (False, EXPECTED_PLAIN)], ids=["ce", "plain"])
def test_shipped_routes_send_each_pilot_where_expected(inst: Installation, ce: bool,
                                                       expected: Dict[str, Dict[str, Any]]) -> None:
    report = check(inst, src(inst, NEW), ce)
    assert report["ok"], report["problems"]
    assert [r["name"] for r in report["routes"]] == ROUTE_NAMES
    assert report["expected_routes"] == ROUTE_NAMES
    assert not any(r["old_syntax"] for r in report["routes"])
    assert report["condor_version"] == inst.condor_version
    assert gahp_views(report) == expected
    assert not report["warnings"]
    for name, env in environments(report).items():
        own = OWN_ENVIRONMENT.get(name, {})
        if ce:
            collector = env.pop("CONDORCE_COLLECTOR_HOST")
            assert collector.endswith(":9619") and len(collector) > len(":9619"), collector
        assert env == own, name


#: What HTCondor-CE's batch-system packages install before podgahp's routes (02-ce-condor-defaults.conf,
#: 02-ce-slurm-defaults.conf): catch-all routes without REQUIREMENTS.
CATCH_ALL = """\
JOB_ROUTER_ROUTE_Condor_Pool @=jrt
  TargetUniverse = 5
@jrt
JOB_ROUTER_ROUTE_NAMES = Condor_Pool
JOB_ROUTER_ROUTE_Slurm_Cluster @=jrt
  TargetUniverse = 9
  GridResource = "batch slurm"
@jrt
JOB_ROUTER_ROUTE_NAMES = $(JOB_ROUTER_ROUTE_NAMES) Slurm_Cluster
"""


def test_pilots_reach_podgahp_with_catch_all_routes_defined_first(inst: Installation, workdir: str) -> None:
    shipped = inst.host_path(src(inst, NEW)).read_text()
    inst.host_path(f"{workdir}/site.conf").write_text(CATCH_ALL + shipped)
    report = check(inst, f"{workdir}/site.conf", ce=True)
    assert report["ok"], report["problems"]
    assert report["expected_routes"] == ROUTE_NAMES + ["Condor_Pool", "Slurm_Cluster"]
    views = gahp_views(report)
    assert {name: views[name] for name in EXPECTED_CE} == EXPECTED_CE
    # A pilot built for the catch-all that follows podgahp's routes reaches it (a standard-universe
    # job escapes K8s_Cpu); nothing can reach the catch-all after a catch-all, and the check says so.
    assert views["for-Condor_Pool"]["route"] == "Condor_Pool"
    (unreachable,) = [w for w in report["warnings"] if "Slurm_Cluster" in w]
    assert "none could be built" in unreachable and "change the order of JOB_ROUTER_ROUTE_NAMES" in unreachable


def test_route_defaults_are_macros_as_on_a_real_ce(inst: Installation, workdir: str) -> None:
    """default_* written the CE's way (macros) apply; as job attributes (SET) they do not."""
    routes = """\
JOB_ROUTER_ROUTE_NAMES = Macros Attributes
JOB_ROUTER_ROUTE_Macros @=jrt
  GridResource = "batch k8s"
  REQUIREMENTS TestRoute =?= "macros"
  default_xcount = 4
  default_maxMemory = 4000
  default_maxWallTime = 90
  default_queue = cpu
  default_pilot_job_env = "ROUTE_VAR=1"
  SET default_CERequirements "RequestCpus"
@jrt
JOB_ROUTER_ROUTE_Attributes @=jrt
  GridResource = "batch k8s"
  REQUIREMENTS TestRoute =?= "attributes"
  SET default_xcount 4
  SET default_maxMemory 4000
  SET default_maxWallTime 90
  SET default_queue "cpu"
  SET default_CERequirements "RequestCpus"
@jrt
"""
    inst.host_path(f"{workdir}/routes.conf").write_text(routes)
    jobs = "".join(
        ad.replace("Owner = ", f'TestRoute = "{route}"\nOwner = ', 1) + "\n"
        for route, ad in (("macros", PLAIN_AD.format(cluster=1)), ("attributes", PLAIN_AD.format(cluster=2))))
    inst.host_path(f"{workdir}/jobs.ad").write_text(jobs)
    report = check(inst, f"{workdir}/routes.conf", True, "--jobs", f"{workdir}/jobs.ad")
    views = {s["route"]: s["gahp"] for s in report["samples"]}
    macros, attributes = views["Macros"], views["Attributes"]
    assert (macros["cpus"], macros["memory_mb"], macros["wall_time_s"], macros["queue"]) == (4, 4000, 5400, "cpu")
    assert macros["environment"]["ROUTE_VAR"] == "1"
    assert (attributes["cpus"], attributes["memory_mb"], attributes["wall_time_s"], attributes["queue"]) == \
        (1, 2000, 259200, None)


def test_old_syntax_and_its_conversion_route_every_pilot_alike(inst: Installation, workdir: str) -> None:
    for mode in ("--emulated-ce", "--no-ce"):
        proc = inst.run([inst.bin("podgahp"), "routes", "convert", mode, src(inst, OLD)], check=False)
        assert proc.returncode == 0, proc.stderr
        for name in ROUTE_NAMES:  # the same pilots, routed by HTCondor through both forms
            assert re.search(rf"^  {name}: same for [1-9]", proc.stderr, re.M), proc.stderr
    converted = proc.stdout
    inst.host_path(f"{workdir}/converted.conf").write_text(converted)
    new = check(inst, f"{workdir}/converted.conf", ce=False)
    assert new["ok"], new["problems"]
    assert [r["name"] for r in new["routes"]] == ROUTE_NAMES
    assert gahp_views(new) == EXPECTED_PLAIN

    old = check(inst, src(inst, OLD), ce=False)
    if is_23x(inst):
        # 23.x reads the old syntax with JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES = True.
        assert old["ok"], old["problems"]
        assert sorted(r["name"] for r in old["routes"]) == sorted(ROUTE_NAMES)
        assert all(r["old_syntax"] for r in old["routes"])
        assert routed_ads(old) == routed_ads(new)
        assert all(routed_ads(old).values())
    else:
        # 24.10 and later dropped it; the check says so and how to fix it.
        assert not old["ok"]
        assert any("not read by HTCondor" in p and "podgahp routes convert" in p for p in old["problems"])

    # Behind a CE, the conversion gives podgahp what the shipped new-syntax file gives.
    assert gahp_views(check(inst, f"{workdir}/converted.conf", ce=True)) == EXPECTED_CE


def test_check_command_exit_status(inst: Installation, workdir: str) -> None:
    good = inst.run([inst.bin("podgahp"), "routes", "check", src(inst, NEW)], check=False)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "cpus           8" in good.stdout and good.stdout.rstrip().endswith("OK")

    broken_path = f"{workdir}/broken.conf"
    inst.host_path(broken_path).write_text(BROKEN)
    broken = inst.run([inst.bin("podgahp"), "routes", "check", "--no-ce", broken_path], check=False)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    # The route's own first line in the admin's file, and HTCondor's reason.
    assert (f"{broken_path}:7: route Broken is not valid, so the JobRouter drops it: CONFIGURATION ERROR: "
            "Missing Requirements in job route.") in broken.stdout
    assert broken.stdout.rstrip().endswith("FAILED")

    missing = inst.run([inst.bin("podgahp"), "routes", "check", f"{workdir}/nothing.conf"], check=False)
    assert missing.returncode != 0 and "nothing.conf" in missing.stderr


@pytest.mark.parametrize("before", ["", "JOB_ROUTER_ROUTE_NAMES = Slurm_Cluster\n"], ids=["first", "after-a-batch-route"])
def test_shipped_route_names_leave_no_empty_name(inst: Installation, workdir: str, before: str) -> None:
    """HTCondor-CE's start-up check splits JOB_ROUTER_ROUTE_NAMES on commas and blanks and warns
    about every empty name: the shipped file must leave no separator at either end."""
    config = f"{workdir}/condor_config"
    inst.host_path(config).write_text(f"{before}include : {src(inst, NEW)}\n")
    value = inst.run(["condor_config_val", "JOB_ROUTER_ROUTE_NAMES"], env={"CONDOR_CONFIG": config}).stdout
    names = re.split(r"[, \t]+", value[:-1] if value.endswith("\n") else value)
    assert names == ROUTE_NAMES + (["Slurm_Cluster"] if before else [])


def test_what_podgahp_does_not_honour_is_said(inst: Installation, workdir: str) -> None:
    """A whole-node request, and attributes the gridmanager sends that podgahp does not use."""
    inst.host_path(f"{workdir}/routes.conf").write_text("""\
JOB_ROUTER_ROUTE_NAMES = K8s
JOB_ROUTER_ROUTE_K8s @=jrt
  GridResource = "batch k8s"
  SET BatchProject "atlas"
  SET GPUModel "A100"
  SET default_CERequirements "RequestCpus,RequestDisk"
@jrt
""")
    report = check(inst, f"{workdir}/routes.conf", True)
    assert report["ok"], report["problems"]
    notes = {s["name"]: s["notes"] for s in report["samples"]}
    assert 'BatchProject = "atlas" reaches podgahp, which does not use it' in notes["plain"]
    assert 'GPUModel = "A100" reaches podgahp, which does not use it' in notes["plain"]
    (whole,) = [n for n in notes["wholenode"] if n.startswith("whole node:")]
    assert "WHOLE_NODE_CPUS" in whole and "held with the reason" in whole
    assert not any(n.startswith("whole node:") for n in notes["plain"])
