"""A whole-node pilot through the CE: ``+WantWholeNode = true`` at the CE, the CE's transforms
forward it (``WholeNodes``), the gridmanager sends it to the real ``k8s_gahp``, and the pod takes a
whole node of the queue (the simulated cluster's CPU nodes: 16 cores, 64 GiB); in a queue that runs
no whole-node pilots, the pilot is held with the reason."""

from __future__ import annotations

from typing import Callable

from podgahp_sim.k8s import KubeSim

import pytest

from e2e import HELD, NAMESPACE, container, iwd, kube_sim, pilot_submit, start_k8s_ce, wait_done, wait_for_pods
from harness import Installation, Pool

pytestmark = pytest.mark.live

__all__ = ["kube_sim"]  # the fixture, imported for pytest

#: The cpu queue takes whole nodes (up to the simulated 16-core node); the opportunistic queue
#: runs none.
KNOBS = """\
PODGAHP_K8S_CPU_MAX_CPUS = 16
PODGAHP_K8S_CPU_MAX_MEMORY_MB = 65536
PODGAHP_K8S_OPPORTUNISTIC_WHOLE_NODE = hold
"""


def test_a_whole_node_pilot_gets_a_whole_node(make_pool: Callable[..., Pool], installation: Installation,
                                              kube_sim: KubeSim) -> None:
    pool = start_k8s_ce(make_pool, installation, kube_sim, extra_config=KNOBS)
    path = iwd(pool)
    whole = pool.submit(pilot_submit(path, "whole", run_seconds=60, extra=["+WantWholeNode = true"]),
                        user="pilot", cwd=path)
    plain = pool.submit(pilot_submit(path, "plain", run_seconds=60), user="pilot", cwd=path)
    held = pool.submit(pilot_submit(path, "held", extra=["+WantWholeNode = true", '+queue = "opportunistic"']),
                       user="pilot", cwd=path)

    (whole_pod,) = wait_for_pods(pool, whole, 1).values()
    (plain_pod,) = wait_for_pods(pool, plain, 1).values()
    requests = {name: container(kube_sim.pod(NAMESPACE, name) or {})["resources"]["requests"]
                for name in (whole_pod, plain_pod)}
    assert (requests[whole_pod]["cpu"], requests[whole_pod]["memory"]) == ("16", f"{64 * 1024 * 95 // 100}Mi")
    assert (requests[plain_pod]["cpu"], requests[plain_pod]["memory"]) == ("1", "2000Mi")

    (ad,) = wait_done(pool, held, 1, statuses=(HELD,))
    assert "queue opportunistic runs no whole-node pilots (PODGAHP_K8S_OPPORTUNISTIC_WHOLE_NODE = hold)" in \
        ad["HoldReason"]
