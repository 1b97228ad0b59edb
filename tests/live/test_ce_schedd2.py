"""The ``JOB_ROUTER_SCHEDD2`` layout (htcondor-ce-condor): the CE's JobRouter puts the routed pilots
into the site's schedd, whose gridmanager starts the GAHPs with the site's configuration, while
``podgahp health`` and ``podgahp reap`` run with the CE's. The site pool here reads the shipped
``ce-config/condor/60-podgahp-ce-schedd2.conf`` as the site's /etc/condor/config.d would, and its
``$(LOG)`` is condor's alone, as /var/log/condor is: the GAHPs must write their log, figures and
state where the CE's tools read them. The site schedd records the token the router submitted with
only once the CE holds a token of the site's signing key (the admin's one step): before, routing
goes on and podgahp holds the pilots saying what to do."""

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
        extra_config=("SCHEDD_NAME = podgahp-site@\nJOB_ROUTER_ROUTE_NAMES =\n"
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
        # HTCondor's own (HTCondor-CE keeps it): the stand-alone pool reads only *.conf files from its
        # directories, and the same rule would hide the router's token file in tokens.d.
        "LOCAL_CONFIG_DIR_EXCLUDE_REGEXP = ^((\\..*)|(.*~)|(#.*)|(.*\\.rpmsave)|(.*\\.rpmnew))$\n"
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
    # Before the admin's step: the router's own token is not one the site accepts. Routing goes on
    # (the router falls back to its other methods) and podgahp holds the pilot, naming the step.
    refused = ce.submit(pilot_submit(home, "untokened", run_seconds=2), cwd=home)

    def held() -> List[Dict[str, Any]]:
        return [ad for ad in site.q(f'RoutedFromJobId =?= "{refused}.0"', ["JobStatus", "HoldReason"])
                if ad["JobStatus"] == HELD]
    hold = site.wait_for(held, timeout=120, what="the pilot routed without the site's token, held")[0]
    assert "was not submitted by the JobRouter" in hold["HoldReason"], hold
    assert "tokens.d" in hold["HoldReason"] and "condor_token_create" in hold["HoldReason"], hold
    assert not kube_sim.pods(NAMESPACE)
    ce.run(["condor_rm", str(refused)], user="pilot")

    # The admin's step (10-podgahp-defaults.conf): a token of the site's key for the router, in the
    # CE's tokens.d; the JobRouter restarted so that it authenticates again.
    tokens = ce.config_val("SEC_TOKEN_SYSTEM_DIRECTORY")
    assert tokens
    ce.path(tokens).mkdir(mode=0o700, exist_ok=True)
    site.run(["condor_token_create", "-identity", "condor@password", "-authz", "READ", "-authz", "WRITE",
              "-file", f"{tokens}/podgahp-router"])
    assert ce.path(f"{tokens}/podgahp-router").stat().st_mode & 0o077 == 0
    ready = len(re.findall("routing table is", ce.log("JobRouterLog")))
    ce.run(["condor_off", "-daemon", "job_router"])
    ce.wait_for(lambda: re.search(r"The JOB_ROUTER \(pid \d+\) exited", ce.log("MasterLog")), timeout=60,
                what="the JobRouter to stop")
    ce.run(["condor_on", "-daemon", "job_router"])
    ce.wait_for(lambda: len(re.findall("routing table is", ce.log("JobRouterLog"))) > ready, timeout=60,
                what="the JobRouter to read its routes again")

    cluster = ce.submit(pilot_submit(home, "schedd2", run_seconds=2), cwd=home)
    routed: List[Dict[str, Any]] = site.wait_for(
        lambda: site.jobs(f'RoutedFromJobId =?= "{cluster}.0"', ["GridJobId", "AuthTokenSubject", "AuthTokenIssuer"]),
        timeout=90, what="the routed pilot in the site's schedd")
    assert routed and not routed_jobs(ce, cluster, in_queue_only=True)
    assert (routed[0]["AuthTokenSubject"], routed[0]["AuthTokenIssuer"]) == \
        ("condor@password", site.config_val("TRUST_DOMAIN")), routed
    done = wait_done(ce, cluster, 1)
    assert done[0]["ExitCode"] == 0, done

    podgahp = installation.bin("podgahp")

    def created() -> Optional[str]:
        lines = ce.run([podgahp, "health"]).stdout.splitlines()
        figures = dict(line.split(" = ", 1) for line in lines if " = " in line)
        return figures.get("GahpPodsCreated") if figures.get("GahpPodsCreated") == "1" else None
    ce.wait_for(created, timeout=60, interval=1, what="the site GAHP's figures in the CE's podgahp health")
    entries = os.listdir(ce.path(user_log))
    own = [e for e in entries if e.startswith("Podgahp.pilot.")]
    assert len(own) == 1, entries
    inside = os.listdir(ce.path(f"{user_log}/{own[0]}"))
    assert any(n.startswith("PodgahpStats.") for n in inside) and "PodgahpLog.k8s.pilot" in inside, inside
    gahp_log = ce.path(f"{user_log}/{own[0]}/PodgahpLog.k8s.pilot").read_text()
    assert "Permission denied" not in gahp_log, gahp_log
