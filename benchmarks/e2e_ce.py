"""Benchmark: pilots end to end through real HTCondor daemons, podgahp on Kubernetes against the
zero-cost memory backend.

A CE-like pool (real schedd, JobRouter with the shipped routes, gridmanager) of the Debian trixie
root (``harness``) gets N pilots by ``condor_submit``; the gridmanager runs ``k8s_gahp`` against the
simulated cluster, or ``podgahp gahp --backend memory`` (pilots that take the same time, with no
API behind them). Reported: seconds from the submit until every pilot has completed, for HTCondor's
default status poll rate per resource (``GRIDMANAGER_JOB_PROBE_RATE`` 5/s), the one podgahp's CE
configuration ships (100/s) and a faster one (200/s), and the ratio of the two backends: what
podgahp adds to a CE's own pace. Each figure is the median of ``--repeat`` runs, the two backends
taking turns (a run on this machine varies by a second or two, as much as the difference measured).

    .venv/bin/python benchmarks/e2e_ce.py --pilots 300
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "live"))

from e2e import (COMPLETED, E2E_FAST, HELD, K8S_KNOBS, NAMESPACE, iwd, kubeconfig_text, pilot_submit,  # noqa: E402
                 routes_config, wait_done)
from harness import Installation, Pool, get_installation  # noqa: E402
from podgahp_sim.k8s import KubeSim, SimConfig, SimNode  # noqa: E402

#: How long each pilot runs, in the simulated cluster and in the memory backend alike.
RUN_SECONDS = 10
#: Time from binding to a running container in the simulated cluster (its default); the memory
#: backend's pilots stay idle as long.
START_SECONDS = 0.2

MEMORY_WRAPPER = """\
#!/bin/sh
exec {podgahp} gahp --backend memory
"""


def _pool(installation: Installation, backend: str, rate: int, sim: KubeSim) -> Pool:
    common = (routes_config(installation) + E2E_FAST + f"GRIDMANAGER_JOB_PROBE_RATE = {rate}\n"
              "PODGAHP_DEBUG = INFO\n")
    if backend == "k8s":
        config = (common + f"K8S_GAHP = {installation.bin('k8s_gahp')}\n" + K8S_KNOBS
                  + "PODGAHP_DEBUG = INFO\n")
        files = {"kubeconfig": kubeconfig_text(sim)}
    else:
        config = (common + "K8S_GAHP = $(LOCAL_DIR)/k8s_gahp\n"
                  f"PODGAHP_MEMORY_IDLE_SECONDS = {START_SECONDS}\nPODGAHP_MEMORY_RUN_SECONDS = {RUN_SECONDS}\n")
        files = {"k8s_gahp": MEMORY_WRAPPER.format(podgahp=installation.bin("podgahp"))}
    return Pool(installation, extra_config=config, files=files, name=f"bench-{backend}").start()


def run(installation: Installation, backend: str, rate: int, pilots: int) -> float:
    """Seconds from condor_submit until every pilot completed."""
    node = SimNode("big", cpu="10000", memory="100000Gi", pods=100000)
    with KubeSim(SimConfig(nodes=(node,), namespaces=("default", NAMESPACE))) as sim:
        pool = _pool(installation, backend, rate, sim)
        try:
            home = iwd(pool)
            started = time.monotonic()
            cluster = pool.submit(pilot_submit(home, "bench", run_seconds=RUN_SECONDS, count=pilots), cwd=home)
            ended = wait_done(pool, cluster, pilots, statuses=(COMPLETED, HELD), timeout=1800)
            held = [ad.get("HoldReason") for ad in ended if ad.get("JobStatus") == HELD]
            if held:
                raise SystemExit(f"{len(held)} of {pilots} pilots held ({backend}), e.g. {held[0]}")
            return time.monotonic() - started
        finally:
            pool.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pilots", type=int, default=300)
    parser.add_argument("--rates", type=int, nargs="+", default=[5, 100, 200],
                        help="GRIDMANAGER_JOB_PROBE_RATE values (status polls per second per resource)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each backend per rate (the median counts)")
    parser.add_argument("--series", default="trixie", help="HTCondor of the harness: trixie (23.x), sid (25.x)")
    args = parser.parse_args()
    installation = get_installation(args.series)
    installation.acquire()
    try:
        installation.install_podgahp()
        print(f"| {args.pilots} pilots of {RUN_SECONDS} s, HTCondor {args.series} | GRIDMANAGER_JOB_PROBE_RATE "
              "| podgahp k8s s | memory backend s | ratio |")
        print("|---|---:|---:|---:|---:|")
        for rate in args.rates:
            times: Dict[str, List[float]] = {"k8s": [], "memory": []}
            for _ in range(args.repeat):
                for backend, runs in times.items():
                    runs.append(run(installation, backend, rate, args.pilots))
            k8s, memory = statistics.median(times["k8s"]), statistics.median(times["memory"])
            print(f"| | {rate} | {k8s:.1f} | {memory:.1f} | {k8s / memory:.2f} |", flush=True)
    finally:
        installation.release()


if __name__ == "__main__":
    main()
