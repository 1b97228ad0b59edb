"""``condor_q -pr`` of the shipped print format (ce-config/podgahp.cpf, /usr/share/podgahp/podgahp.cpf) on
a CE with the real schedd, JobRouter, gridmanager and the schedd cron job ``podgahp reap``: every pilot's
pod, node and phase, a pending pilot's scheduler's reason, the same on the source job through the
router's copy-back; a job owner's condor_qedit of the attributes changes nothing podgahp decides, and
the next pass puts them right. On both engines: on the real one the reason is the real scheduler's."""

from __future__ import annotations

from typing import Callable, Dict, Optional

import pytest

from e2e import IDLE, NAMESPACE, RUNNING, iwd, kube_sim, pilot_submit, routed_jobs, start_k8s_ce, wait_for_pods
from harness import Installation, Pool
from podgahp_sim.k8s import KubeSim
from test_e2e_shared_ce import reap_config

pytestmark = [pytest.mark.live, pytest.mark.both_engines]

__all__ = ["kube_sim"]  # the fixture, imported for pytest

#: The print format as installed in the root (the RPM installs it as /usr/share/podgahp/podgahp.cpf).
CPF = "ce-config/podgahp.cpf"


def table(pool: Pool, installation: Installation) -> Dict[str, Dict[str, str]]:
    """``condor_q -allusers -pr podgahp.cpf`` as job id -> column -> cell, each cell cut at the columns
    of the header (a cell may hold spaces, the reason; an empty one is "")."""
    out = pool.run(["condor_q", "-allusers", "-pr", f"{installation.src_dir}/{CPF}"]).stdout.splitlines()
    header = next(line for line in out if line.lstrip().startswith("ID "))
    titles = header.split()
    starts = [0] + [header.index(f" {t} ") + 1 if f" {t} " in header else header.index(f" {t}") + 1
                    for t in titles[1:]]
    rows = {}
    for line in out[out.index(header) + 1:]:
        if not line.strip():
            break
        cells = {t: line[a:b].strip() for t, a, b in zip(titles, starts, starts[1:] + [len(line) + 1])}
        rows[cells["ID"]] = cells
    return rows


def test_condor_q_shows_each_pilots_pod_node_phase_and_why_it_waits(make_pool: Callable[..., Pool],
                                                                     installation: Installation,
                                                                     kube_sim: KubeSim) -> None:
    pool = start_k8s_ce(make_pool, installation, kube_sim,
                        extra_config=reap_config(installation) + "PODGAHP_K8S_MAX_CPUS = 64\n")
    home = iwd(pool)
    running = pool.submit(pilot_submit(home, "runs", run_seconds=600), cwd=home)
    pending = pool.submit(pilot_submit(home, "waits", run_seconds=600, extra=["+xcount = 32"]), cwd=home)
    pods = {**wait_for_pods(pool, running, 1), **wait_for_pods(pool, pending, 1)}
    routed = {str(ad["RoutedFromJobId"]): f"{ad['ClusterId']}.{ad['ProcId']}"
              for ad in routed_jobs(pool, in_queue_only=True)}
    run_job, wait_job = routed[f"{running}.0"], routed[f"{pending}.0"]

    def shown() -> Optional[Dict[str, Dict[str, str]]]:
        rows = table(pool, installation)
        run, wait = rows.get(run_job), rows.get(wait_job)
        source_run, source_wait = rows.get(f"{running}.0"), rows.get(f"{pending}.0")
        if not (run and wait and source_run and source_wait):
            return None
        if run["PHASE"] != "Running" or wait["PHASE"] != "Pending" or not wait["REASON"]:
            return None
        if run["ST"] != "R":
            return None  # the pass may see the pod run before the gridmanager's next status poll does
        if (source_run["PHASE"], source_wait["PHASE"]) != ("Running", "Pending"):
            return None  # the router copies them back at its next poll
        return rows
    rows = pool.wait_for(shown, timeout=120, interval=1, what="the pilots' pods, nodes and phases in condor_q -pr")
    run, wait = rows[run_job], rows[wait_job]
    assert (run["POD"], run["SOURCE"], run["ST"]) == (pods[f"{running}.0"], f"{running}.0", "R"), rows
    assert run["NODE"] in ("cpu-1", "cpu-2") and run["REASON"] == "", rows
    assert kube_sim.pod(NAMESPACE, run["POD"])["spec"]["nodeName"] == run["NODE"]  # type: ignore[index]
    assert (wait["POD"], wait["NODE"], wait["ST"]) == (pods[f"{pending}.0"], "", "I"), rows
    assert "Insufficient cpu" in wait["REASON"], rows
    assert run["CLUSTER"] == "-" and wait["CLUSTER"] == "-"  # one cluster: not written
    # The source jobs, through the router's copy-back: the same pod, node, phase and reason.
    source = rows[f"{running}.0"]
    assert (source["ROUTED"], source["POD"], source["NODE"], source["PHASE"]) == (
        run_job, run["POD"], run["NODE"], "Running"), rows
    assert rows[f"{pending}.0"]["REASON"] == wait["REASON"]
    # A job that is not a pilot shows nothing of podgahp's: the local universe job is not listed.
    local = pool.submit(f"universe = local\nexecutable = /bin/sleep\narguments = 600\ninitialdir = {home}\nqueue\n",
                        cwd=home)
    assert f"{local}.0" not in table(pool, installation)

    # The owner forges the attributes of the running pilot's grid job, and of the source job.
    for job in (run_job, f"{running}.0"):
        edited = pool.run(["condor_qedit", job, "PodgahpNode", '"gpu-1"', "PodgahpPhase", '"Failed"',
                           "PodgahpPod", f'"{wait["POD"]}"'], user="pilot", check=False)
        assert edited.returncode == 0, edited.stderr
    # The forged values reached the queue (a pass may already have put them right: read the queue's log).
    spool = pool.config_val("SPOOL")
    assert spool
    queue_log = pool.path(f"{spool}/job_queue.log").read_text(errors="replace")
    assert f'103 {run_job} PodgahpPhase "Failed"' in queue_log and f'103 {running}.0 PodgahpNode "gpu-1"' in queue_log

    def put_right() -> Optional[Dict[str, Dict[str, str]]]:
        rows = table(pool, installation)
        fixed = [rows.get(j, {}).get("NODE") == run["NODE"] and rows.get(j, {}).get("POD") == run["POD"]
                 and rows.get(j, {}).get("PHASE") == "Running" for j in (run_job, f"{running}.0")]
        return rows if all(fixed) else None
    pool.wait_for(put_right, timeout=60, interval=1, what="the next pass to put the forged attributes right")
    # Nothing podgahp decides changed: both pods are there, neither job was touched.
    assert kube_sim.pod(NAMESPACE, run["POD"]) is not None and kube_sim.pod(NAMESPACE, wait["POD"]) is not None
    states = {f"{ad['ClusterId']}.{ad['ProcId']}": ad["JobStatus"] for ad in routed_jobs(pool, in_queue_only=True)}
    assert (states[run_job], states[wait_job]) == (RUNNING, IDLE), states
    figures = pool.run(["condor_status", "-schedd", "-af", "PodgahpReapErrors", "PodgahpReapJobAdTransactions"])
    errors, transactions = figures.stdout.split()
    assert errors == "0", pool.log("SchedLog")[-3000:]
    assert int(transactions) >= 0

