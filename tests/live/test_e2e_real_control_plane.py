"""Pilots through real HTCondor daemons onto the real Kubernetes control plane: the CE-like pool's
JobRouter and gridmanager hand them to k8s_gahp, which talks to Kubernetes' own kube-apiserver
(built from Debian's sources, tests/engines.py) as a ServiceAccount with the shipped Role alone; the
real scheduler binds the pods to the simulator's kubelets (``podgahp sim node``), they run and
complete, their Out comes back through the API server's log proxy, and condor_rm deletes a running
pilot's pod, whose input Secret the real garbage collector then removes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from e2e import iwd, pilot_submit, routes_config, shipped_role, wait_done, E2E_FAST, K8S_KNOBS, NAMESPACE, GPU_TEMPLATE
from engines import RealEngine
from harness import Installation, Pool

pytestmark = pytest.mark.live


def start_ce(make_pool: Callable[..., Pool], installation: Installation, engine: RealEngine, tmp_path: Path) -> Pool:
    kubeconfig = tmp_path / "kubeconfig"
    engine.write_kubeconfig(str(kubeconfig))
    config = (routes_config(installation) + f"K8S_GAHP = {installation.bin('k8s_gahp')}\n" + K8S_KNOBS + E2E_FAST
              + "PODGAHP_K8S_GPU_POD_TEMPLATE = $(LOCAL_DIR)/gpu-template.yaml\n"
              + f"PODGAHP_K8S_NAMESPACE = {engine.namespace}\n")
    assert f"PODGAHP_K8S_NAMESPACE = {NAMESPACE}" in K8S_KNOBS  # overridden by the line after it
    return make_pool(extra_config=config, files={"kubeconfig": kubeconfig.read_text(), "gpu-template.yaml": GPU_TEMPLATE})


def test_pilots_run_on_the_real_control_plane_and_condor_rm_deletes_the_pod(
        make_pool: Callable[..., Pool], installation: Installation, real_engine: RealEngine, tmp_path: Path) -> None:
    engine = real_engine
    engine.enforce_role(shipped_role())
    pool = start_ce(make_pool, installation, engine, tmp_path)
    home = iwd(pool)
    done_cluster = pool.submit(pilot_submit(home, "real", run_seconds=1, count=2), cwd=home)
    long_cluster = pool.submit(pilot_submit(home, "long", run_seconds=600), cwd=home)

    done = wait_done(pool, done_cluster, 2, timeout=240)
    assert [ad["ExitCode"] for ad in done] == [0, 0], done
    out = pool.path(f"{home}/real-0.out").read_text()
    assert out, "the pilot's Out came back empty"

    def running() -> List[Dict[str, Any]]:
        return [p for p in engine.pods() if p["metadata"]["name"].startswith("pilot-")
                and (p.get("status") or {}).get("phase") == "Running"
                and (p.get("spec") or {}).get("nodeName", "").startswith("sim-node-")]
    pods = pool.wait_for(running, timeout=180, what="the long pilot's pod running on a node the real scheduler chose")
    name = pods[0]["metadata"]["name"]
    secret_names = [v["secret"]["secretName"] for v in pods[0]["spec"].get("volumes") or [] if v.get("secret")]
    assert secret_names, pods[0]["spec"].get("volumes")
    pool.run(["condor_rm", str(long_cluster)], user="pilot")
    pool.wait_for(lambda: engine.pod(engine.namespace, name) is None, timeout=180,
                  what=f"pod {name} deleted after condor_rm")
    for secret in secret_names:
        pool.wait_for(lambda: engine.secret(engine.namespace, secret) is None, timeout=180,
                      what=f"Secret {secret} removed by the garbage collector")
