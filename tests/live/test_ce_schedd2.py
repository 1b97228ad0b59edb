"""The ``JOB_ROUTER_SCHEDD2`` layout (htcondor-ce-condor): the CE's JobRouter puts the routed pilots
into the site's schedd, whose gridmanager starts the GAHPs with the site's configuration, while
``podgahp health`` and ``podgahp reap`` run with the CE's. The site pool here reads the shipped
``ce-config/condor/60-podgahp-ce-schedd2.conf`` as the site's /etc/condor/config.d would, and its
``$(LOG)`` is condor's alone, as /var/log/condor is: the GAHPs must write their log, figures and
state where the CE's tools read them. The pilots' submitter is in the site schedd's audit log: the
CE's router, as condor of this host."""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, List, Optional

import pytest

from e2e import (E2E_FAST, HELD, K8S_KNOBS, NAMESPACE, iwd, kube_sim, kubeconfig_text, pilot_submit, routed_jobs,
                 start_k8s_ce, wait_done)
from harness import Installation, Pool
from podgahp_sim.k8s import KubeSim

pytestmark = pytest.mark.live

__all__ = ["kube_sim"]  # the fixture, imported for pytest


def collector(pool: Pool) -> str:
    text = pool.path(f"{pool.log_dir}/.collector_address").read_text()
    m = re.search(r"<([0-9.]+):(\d+)", text)
    assert m, text
    return f"{m.group(1)}:{m.group(2)}"


def schedd_name(pool: Pool) -> str:
    names = pool.run(["condor_status", "-schedd", "-af", "Name"]).stdout.split()
    assert len(names) == 1, names
    return names[0]


def test_gahps_of_the_site_schedd_write_where_the_ces_tools_read(make_pool: Callable[..., Pool],
                                                                  installation: Installation,
                                                                  kube_sim: KubeSim) -> None:
    site = make_pool(
        # htcondor-ce-condor's 50-condor-ce-defaults.conf lets the CE's router, a queue super user of the
        # site schedd, submit as owners the site has not seen yet.
        extra_config=("SCHEDD_NAME = podgahp-site@\nJOB_ROUTER_ROUTE_NAMES =\nQUEUE_SUPER_USER_MAY_IMPERSONATE = .*\n"
                      f"include : {installation.src_dir}/ce-config/condor/60-podgahp-ce-schedd2.conf\n"
                      f"K8S_GAHP = {installation.bin('k8s_gahp')}\n" + K8S_KNOBS + E2E_FAST),
        files={"kubeconfig": kubeconfig_text(kube_sim)})
    condor = installation.user("condor")
    log = site.path(site.log_dir)
    os.chmod(log, 0o755)  # the site's $(LOG), like /var/log/condor: the job owners cannot write there
    os.chown(log, condor.uid, condor.gid)

    ce = start_k8s_ce(make_pool, installation, kube_sim, extra_config=(
        "SCHEDD_NAME = podgahp-ce@\n"
        # Both pools run on one host from one master each: the CE's daemons must not offer the site's
        # collector the security session of their own family.
        "SEC_USE_FAMILY_SESSION = False\n"
        "USER_LOG = $(LOG)/user\n"
        f"JOB_ROUTER_SCHEDD2_NAME = {schedd_name(site)}\n"
        f"JOB_ROUTER_SCHEDD2_POOL = {collector(site)}\n"
        f"JOB_ROUTER_SCHEDD2_SPOOL = {site.local_dir}/spool\n"))
    user_log = f"{ce.log_dir}/user"
    ce.path(user_log).mkdir()
    os.chmod(ce.path(user_log), 0o1777)  # HTCondor-CE's $(LOG)/user
    # Where this CE's USER_LOG is, and its schedd (the source jobs), as the site admin says in
    # /etc/condor/config.d after the shipped file (their defaults are HTCondor-CE's).
    site.path(f"{site.local_dir}/config.d/95-ce.conf").write_text(
        f"PODGAHP_CE_USER_LOG = {user_log}\n"
        f"PODGAHP_SOURCE_SCHEDD_NAME = {schedd_name(ce)}\n"
        f"PODGAHP_SOURCE_SCHEDD_POOL = {collector(ce)}\n")

    home = iwd(ce)
    cluster = ce.submit(pilot_submit(home, "schedd2", run_seconds=2), cwd=home)
    running = ce.submit(pilot_submit(home, "stays", run_seconds=300), cwd=home)
    routed: List[Dict[str, Any]] = site.wait_for(
        lambda: site.jobs(f'RoutedFromJobId =?= "{cluster}.0"', ["ClusterId", "GridJobId"]),
        timeout=90, what="the routed pilot in the site's schedd")
    assert routed and not routed_jobs(ce, cluster, in_queue_only=True)
    # The site schedd's audit log names the CE's router, which authenticated as condor of this host
    # (HTCondor 24.8 on logs it; before, it logs no identity for its own condor): the pilot's submitter.
    audit = site.log("AuditLog")
    submit = re.search(rf"\(cid:(\d+)\) Submitting new job {routed[0]['ClusterId']}\.0", audit)
    assert submit, audit
    identity = re.findall(rf"\(cid:{submit.group(1)}\) AuthMethod=(\S+), AuthId=\S+, CondorId=(\S+)", audit)
    assert identity in ([], [("FS", "condor@users.htcondor.org")]), identity
    done = wait_done(ce, cluster, 1)
    assert done[0]["ExitCode"] == 0, done

    podgahp = installation.bin("podgahp")

    def created() -> Optional[str]:
        lines = ce.run([podgahp, "health"]).stdout.splitlines()
        figures = dict(line.split(" = ", 1) for line in lines if " = " in line)
        return figures.get("GahpPodsCreated") if figures.get("GahpPodsCreated") == "2" else None  # both pilots
    ce.wait_for(created, timeout=60, interval=1, what="the site GAHP's figures in the CE's podgahp health")
    entries = os.listdir(ce.path(user_log))
    own = [e for e in entries if e.startswith("Podgahp.pilot.")]
    assert len(own) == 1, entries
    inside = os.listdir(ce.path(f"{user_log}/{own[0]}"))
    assert any(n.startswith("PodgahpStats.") for n in inside) and "PodgahpLog.k8s.pilot" in inside, inside
    gahp_log = ce.path(f"{user_log}/{own[0]}/PodgahpLog.k8s.pilot").read_text()
    assert "Permission denied" not in gahp_log, gahp_log

    # podgahp reap, as the CE's schedd cron job runs it (condor, the CE's configuration), writes where
    # the pilot is into its routed job in the site's schedd; the CE's router copies it to the source job.
    def pod() -> Optional[str]:
        ads = site.q(f'RoutedFromJobId =?= "{running}.0"', ["GridJobId"])
        words = str(ads[0].get("GridJobId") or "").split() if ads else []
        return words[3].rsplit("/", 1)[1] if len(words) == 4 else None
    name = site.wait_for(pod, timeout=90, interval=1, what="the second pilot's pod")
    reaped = ce.run([podgahp, "reap"], user="condor", check=False)
    assert reaped.returncode == 0 and "Errors = 0" in reaped.stdout, (reaped.stdout, reaped.stderr)
    (routed_ad,) = site.q(f'RoutedFromJobId =?= "{running}.0"', ["PodgahpPod", "PodgahpNode"])
    assert routed_ad["PodgahpPod"] == name and routed_ad["PodgahpNode"], routed_ad

    def copied() -> Optional[Dict[str, Any]]:
        ads = ce.q(f"ClusterId == {running}", ["PodgahpPod", "PodgahpNode"])
        return ads[0] if ads and ads[0].get("PodgahpPod") == name else None
    source = ce.wait_for(copied, timeout=60, interval=1, what="the pod's attributes copied to the source job")
    assert source["PodgahpNode"] == routed_ad["PodgahpNode"]
