"""``podgahp q``, ``health``, ``reap`` and ``provision`` on a CE, run with no environment variable at
all: as the ``condor_ce_*`` tools, they find ``/etc/condor-ce/condor_config`` themselves.

The CE here is the test pool, named by a ``/etc/condor-ce/condor_config`` that exists only for the
tools of this test: an overlay on the installation's ``/etc`` in a mount namespace of their own, so
no other process (and no other test) ever sees it."""

from __future__ import annotations

import json
import subprocess
from typing import Callable, Dict, List, Optional

import pytest

from e2e import NAMESPACE, iwd, kube_sim, pilot_submit, start_k8s_ce, wait_for_pods
from harness import Installation, Pool
from podgahp_sim.k8s import KubeSim

pytestmark = pytest.mark.live

__all__ = ["kube_sim"]  # the fixture, imported for pytest

#: Mount an overlay holding condor-ce/condor_config on the installation's /etc ($2), then run the
#: tool: only the tool's own mount namespace (unshare) ever has it.
ON_A_CE = ('mount -t overlay overlay -o "lowerdir=$2,upperdir=$1/upper,workdir=$1/work" "$2" && shift 2 '
           '&& exec "$@"')


def on_a_ce(installation: Installation, ce_dir: str, *args: str, user: str = "root") -> "tuple[int, str, str]":
    """``podgahp ARGS`` as ``user`` on the CE, with the installation's bare environment (no
    CONDOR_CONFIG, no _CONDOR_ variable, no PODGAHP_ variable)."""
    tool = [installation.bin("podgahp"), *args]
    info = installation.user(user)
    if installation.chroot:
        tool = ["chroot", f"--userspec={info.uid}:{info.gid}", f"--groups={info.gid}", str(installation.root),
                "/usr/bin/env", "-C", info.home, "--", *tool]
    elif user != "root":
        tool = ["setpriv", f"--reuid={info.uid}", f"--regid={info.gid}", "--clear-groups", *tool]
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", ON_A_CE, "sh",
                           str(installation.host_path(ce_dir)), str(installation.host_path("/etc")), *tool],
                          env=installation.environment(info), capture_output=True, text=True, timeout=180, cwd="/")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def test_ce_tools_find_the_ces_configuration_without_any_variable(make_pool: Callable[..., Pool],
                                                                 installation: Installation,
                                                                 kube_sim: KubeSim) -> None:
    users = make_pool(extra_config="JOB_ROUTER_ROUTE_NAMES =\nJOB_ROUTER_ENTRIES =\n")  # the user pool provision reads
    pool = start_k8s_ce(make_pool, installation, kube_sim)
    collector = users.path(f"{users.log_dir}/.collector_address").read_text().splitlines()[0].strip()
    ce_dir = f"{pool.local_dir}/ce-etc"
    for part in ("upper/condor-ce", "work"):
        pool.path(f"{ce_dir}/{part}").mkdir(parents=True)
    pool.path(f"{ce_dir}/upper/condor-ce/condor_config").write_text(
        f"include : {pool.condor_config}\n"
        f"PODGAHP_PROVISION_POOL = {collector}\nPODGAHP_PROVISION_NAME = ce-tools\n"
        f"PODGAHP_PROVISION_LOG = {pool.log_dir}/PodgahpProvisionLog.ce-tools\n")
    home = iwd(pool)
    cluster = pool.submit(pilot_submit(home, "seen", run_seconds=300), cwd=home)
    (pod,) = wait_for_pods(pool, cluster, 1).values()

    def running() -> Optional[List[Dict[str, str]]]:
        code, out, err = on_a_ce(installation, ce_dir, "q", "--json")
        assert code == 0, err
        rows: List[Dict[str, str]] = json.loads(out)
        return rows if rows and rows[0].get("phase") == "Running" else None
    (row,) = pool.wait_for(running, timeout=90, interval=1, what="podgahp q showing the pilot's pod running")
    assert (row["source"], row["backend"], row["remote"], row["queue"]) == (f"{cluster}.0", "k8s", pod, "cpu"), row
    assert row["route"] == "K8s_Cpu" and row["node"], row

    code, out, err = on_a_ce(installation, ce_dir, "health")
    assert code == 0, err
    figures = dict(line.split(" = ", 1) for line in out.splitlines())
    assert figures["Queue_cpu_PodsRunning"] == "1", out

    code, out, err = on_a_ce(installation, ce_dir, "reap", "--dry-run")
    assert code == 0, err
    lines = dict(line.split(" = ", 1) for line in out.splitlines())
    assert (lines["Pods"], lines["Orphans"], lines["Deleted"], lines["Errors"]) == ("1", "0", "0", "0"), out

    code, out, err = on_a_ce(installation, ce_dir, "provision", "--once", user="pilot")
    assert code == 0, err
    (log,) = pool.path(pool.log_dir).glob("**/PodgahpProvisionLog.ce-tools")  # PODGAHP_PROVISION_LOG of the CE's file
    assert "demand: " in log.read_text()

    assert kube_sim.pod(NAMESPACE, pod) is not None  # a dry run deletes nothing
    assert not installation.host_path("/etc/condor-ce").exists()  # the CE's file was the tools' alone
