"""Benchmark: the CE as a whole. N pilots through real HTCondor daemons (schedd, JobRouter with the
shipped routes, gridmanager) with the shipped CE configuration, podgahp on the simulated cluster
against the zero-cost memory backend, and the same with a knob changed.

A CE-like pool of the Debian trixie root (``harness``) runs with HTCondor's own defaults for the
knobs the test harness shortens (router polling, schedd contact, probe interval...) plus podgahp's
shipped ``condor_config.d/10-podgahp-defaults.conf`` (how the gridmanager drives the GAHPs); it gets
N pilots of 10 s by ``condor_submit``; the gridmanager runs ``k8s_gahp`` against the simulated
cluster (in its own process), or ``podgahp gahp --backend memory`` (pilots that take the same time,
with no API behind them). Reported: routed/s (grid jobs the JobRouter made, from the first to the
last), when the first pod was created (the memory backend: its first submit answered) and pods/s
from the first to the last (seen by the simulator), submits answered/s (grid jobs whose
``GridJobId`` holds the job id the GAHP answered), seconds from the submit until every pod ran and
until every pilot completed, and the CPU seconds of each daemon and of the GAHP (per pilot: the
GAHP's whole life, its start included). Every run submits just after a pass of the JobRouter, so
that the router's polling (every 10 s) starts routing at the same moment in every run, whatever
backend: what differs between runs is then the backend, not where the submit fell in the router's
period. Each figure of the shipped configuration is the median of
``--repeat`` runs, the two backends taking turns, with the median ratio of the pairs; each variant
(one knob changed) runs once with podgahp, to show the knob's effect.

With ``--engine real`` podgahp's cluster is the real control plane (Kubernetes' own kube-apiserver,
etcd, scheduler and controller-manager, the simulator's kubelet as one large node), the CE's identity
a ServiceAccount bound to the shipped Role (docs/podgahp-rbac.yaml); the table is then followed by
what the API server served per pilot (its own ``apiserver_request_total`` of the pilots' namespace)
and the CPU of kube-apiserver and etcd per pilot (the simulator's, on the simulated cluster).

    .venv/bin/python benchmarks/e2e_ce.py --pilots 1000
    .venv/bin/python benchmarks/e2e_ce.py --engine real --pilots 1000 --repeat 1 --variants
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "live"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench import (ControlPlaneCluster, Row, SimProcess, add_dependency_wheels, alternate, load, medians,  # noqa: E402
                   ratio)
from e2e import (COMPLETED, HELD, K8S_KNOBS, NAMESPACE, iwd, pilot_submit, routes_config)  # noqa: E402
from engines import RealEngine, shipped_role  # noqa: E402
from harness import Installation, Pool, get_installation  # noqa: E402
from podgahp_sim.k8s import SimConfig, SimNode  # noqa: E402
from podgahp_sim.kube.node import NodeSpec  # noqa: E402

#: How long each pilot runs, in the simulated cluster and in the memory backend alike.
RUN_SECONDS = 10
#: Time from binding to a running container in the simulated cluster (its default); the memory
#: backend's pilots stay idle as long.
START_SECONDS = 0.2

MEMORY_WRAPPER = """\
#!/bin/sh
exec {podgahp} gahp --backend memory
"""

#: HTCondor's defaults of the knobs the test harness shortens (harness.pool.FAST_CONFIG), so the
#: pool is a CE as installed: what is measured is the shipped configuration, not the test one.
HTCONDOR_DEFAULTS = """\
SCHEDD_INTERVAL = 300
JOB_ROUTER_POLLING_PERIOD = 10
PERIODIC_EXPR_INTERVAL = 60
GRIDMANAGER_CONTACT_SCHEDD_DELAY = 5
GRIDMANAGER_JOB_PROBE_INTERVAL = 60
GRIDMANAGER_RESOURCE_PROBE_INTERVAL = 300
GRIDMANAGER_DEBUG = D_ALWAYS
JOB_ROUTER_DEBUG = D_ALWAYS
"""

#: One knob changed from the shipped configuration: its effect is what docs/benchmarks.md reports.
VARIANTS: Dict[str, str] = {
    "GRIDMANAGER_JOB_PROBE_INTERVAL_BATCH = 60 (HTCondor's)": "GRIDMANAGER_JOB_PROBE_INTERVAL_BATCH = 60\n",
    "JOB_ROUTER_POLLING_PERIOD = 2": "JOB_ROUTER_POLLING_PERIOD = 2\n",
    "GRIDMANAGER_CONTACT_SCHEDD_DELAY = 1": "GRIDMANAGER_CONTACT_SCHEDD_DELAY = 1\n",
    "GRIDMANAGER_JOB_PROBE_RATE_BATCH = 5 (HTCondor's)": "GRIDMANAGER_JOB_PROBE_RATE_BATCH = 5\n",
    # what checking each submit with the schedd costs (gahp.rules.provenance); never to be turned off on a CE
    "PODGAHP_ROUTED_ONLY = False": "PODGAHP_ROUTED_ONLY = False\n",
}
#: The variants `make bench` runs (the others: --variants).
DEFAULT_VARIANTS = ("GRIDMANAGER_JOB_PROBE_INTERVAL_BATCH = 60 (HTCondor's)",)

#: Print when each stage was reached, every 5 s of each run (--timeline).
TIMELINE = False

#: The daemons whose CPU is reported, by the name the kernel gives their process (15 characters).
DAEMONS = {"condor_schedd": "schedd", "condor_job_rout": "JobRouter", "condor_gridmana": "gridmanager",
           "condor_collecto": "collector", "condor_master": "master", "condor_shared_p": "shared_port"}


def _pool(installation: Installation, backend: str, kubeconfig: str, extra: str) -> Pool:
    shipped = f"include : {installation.src_dir}/condor_config.d/10-podgahp-defaults.conf\n"
    common = routes_config(installation) + HTCONDOR_DEFAULTS + shipped + "PODGAHP_DEBUG = INFO\n"
    if backend == "k8s":
        config = common + f"K8S_GAHP = {installation.bin('k8s_gahp')}\n" + K8S_KNOBS + "PODGAHP_DEBUG = INFO\n"
        files = {"kubeconfig": kubeconfig}
    else:
        config = (common + "K8S_GAHP = $(LOCAL_DIR)/k8s_gahp\n"
                  f"PODGAHP_MEMORY_IDLE_SECONDS = {START_SECONDS}\nPODGAHP_MEMORY_RUN_SECONDS = {RUN_SECONDS}\n")
        files = {"k8s_gahp": MEMORY_WRAPPER.format(podgahp=installation.bin("podgahp"))}
    return Pool(installation, extra_config=config + extra, files=files, name=f"bench-{backend}").start()


class CpuMeter:
    """CPU seconds of every process of a pool, by daemon (and the GAHP), sampled each second: a
    process that exits keeps what it had used at its last sample."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.seen: Dict[int, Tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-meter", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(1.0):
                return

    def sample(self) -> None:
        for pid in self.pool.processes():
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            name = "GAHP" if any(b"gahp" in a.rsplit(b"/", 1)[-1] for a in argv[:3]) else DAEMONS.get(comm)
            if name is not None:
                self.seen[pid] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))

    def stop(self) -> Dict[str, float]:
        self._stop.set()
        self._thread.join(10)
        self.sample()
        totals: Dict[str, float] = {}
        for name, cpu in self.seen.values():
            totals[name] = totals.get(name, 0.0) + cpu
        return totals


#: What the JobRouter logs at each pass over the queue (HTCondor 23 and 25).
ROUTER_PASS = "JobRouter: Checking for candidate jobs."


def after_router_pass(pool: Pool, timeout: float = 60.0) -> None:
    """Return just after the JobRouter's next pass (its polling period then runs from now)."""
    passes = pool.log("JobRouterLog").count(ROUTER_PASS)
    deadline = time.monotonic() + timeout
    while pool.log("JobRouterLog").count(ROUTER_PASS) <= passes:
        if time.monotonic() > deadline:
            raise SystemExit(f"the JobRouter made no pass in {timeout:.0f} s")
        time.sleep(0.1)


def _first(times: List[Tuple[float, int]], count: int) -> Optional[float]:
    """The first time a count reached ``count``."""
    return next((t for t, n in times if n >= count), None)


def _pace(times: List[Tuple[float, int]], count: int, end: float) -> float:
    """Items a second from the first to the ``count``-th (the pace once a stage has started)."""
    first, last = _first(times, 1) or end, _first(times, count) or end
    return count / max(last - first, 1.0)


Cluster = Union[SimProcess, ControlPlaneCluster]

#: The priority class of the shipped routes' opportunistic queue.
PRIORITY_CLASSES = {"podgahp-opportunistic": -100}


@contextlib.contextmanager
def _cluster(engine: str) -> Iterator[Tuple[Cluster, str]]:
    """The cluster of a run, one node large enough for every pilot, and the CE's kubeconfig for it: the
    simulated API server (its own process), or the real control plane, where the CE is a ServiceAccount
    bound to the shipped Role."""
    if engine != "real":
        node = SimNode("big", cpu="10000", memory="100000Gi", pods=100000)
        with SimProcess(SimConfig(nodes=(node,), namespaces=("default", NAMESPACE)),
                        priority_classes=PRIORITY_CLASSES) as sim:
            yield sim, sim.kubeconfig_text(NAMESPACE)
        return
    with ControlPlaneCluster([NodeSpec("big", cpus="10000", memory="100000Gi", pods=100000, tick_seconds=0.5)],
                             (NAMESPACE,)) as plane:
        ce = RealEngine(plane.cluster, NAMESPACE)
        try:
            ce.enforce_role(shipped_role())
            for name, value in PRIORITY_CLASSES.items():
                ce.add_priority_class(name, value)
            with tempfile.TemporaryDirectory() as tmp:
                text = Path(ce.write_kubeconfig(os.path.join(tmp, "kubeconfig"))).read_text()
            yield plane, text
        finally:
            ce.close()


def _sample(sim: Cluster) -> None:
    if isinstance(sim, ControlPlaneCluster):
        sim.sample(NAMESPACE)
    else:
        sim.sample()


def run(installation: Installation, backend: str, pilots: int, extra: str = "", engine: str = "simulated") -> Row:
    with _cluster(engine if backend == "k8s" else "simulated") as (sim, kubeconfig):
        pool = _pool(installation, backend, kubeconfig, extra)
        try:
            home = iwd(pool)
            meter = CpuMeter(pool)
            after_router_pass(pool)
            _sample(sim)
            sim.clear_requests()
            cluster_cpu = sim.cpu_s()
            started = time.time()
            cluster = pool.submit(pilot_submit(home, "bench", run_seconds=RUN_SECONDS, count=pilots), cwd=home)
            routed: List[Tuple[float, int]] = []
            submitted: List[Tuple[float, int]] = []
            completed: List[Tuple[float, int]] = []
            deadline = time.monotonic() + 1800
            while True:
                ads = pool.jobs(attrs=["ClusterId", "ProcId", "JobStatus", "RoutedFromJobId", "GridJobId",
                                       "HoldReason"])
                now = time.time() - started
                grid = {f"{a['ClusterId']}.{a['ProcId']}": a for a in ads if "RoutedFromJobId" in a}
                sources = {f"{a['ClusterId']}.{a['ProcId']}": a for a in reversed(ads)
                           if a.get("ClusterId") == cluster and "RoutedFromJobId" not in a}
                routed.append((now, len(grid)))
                completed.append((now, sum(1 for a in sources.values() if a.get("JobStatus") == COMPLETED)))
                # "batch k8s <sandbox id>" until the GAHP answered the submit, then "... <job id>"
                submitted.append((now, sum(1 for a in grid.values() if len(str(a.get("GridJobId", "")).split()) >= 4)))
                held = [a.get("HoldReason") for a in sources.values() if a.get("JobStatus") == HELD]
                if held:
                    raise SystemExit(f"{len(held)} of {pilots} pilots held ({backend}), e.g. {held[0]}")
                if sum(1 for a in sources.values() if a.get("JobStatus") == COMPLETED) >= pilots:
                    completed_s = now
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"not every pilot completed within 1800 s ({backend})")
                time.sleep(1.0)
            cpu = meter.stop()
            cluster_cpu_ms = (sim.cpu_s() - cluster_cpu) * 1000 / pilots
            requests = (sim.count() / pilots, sum(sim.count(m) for m in ("POST", "PUT", "PATCH", "DELETE")) / pilots) \
                if isinstance(sim, ControlPlaneCluster) else (0.0, 0.0)
            timeline = [(t - started, created, ran) for t, created, ran, _ in sim.timeline()]
        finally:
            pool.stop()
    if TIMELINE:
        print(f"timeline of a run ({backend}): seconds from the submit, grid jobs routed, submitted by the GAHP, "
              "pods created, pods that ran, pilots completed")
        for second in range(0, int(completed_s) + 5, 5):
            def at(series: List[Tuple[float, int]]) -> int:
                return max([n for t, n in series if t <= second], default=0)
            print(f"  {second:4d} s {at(routed):6d} {at(submitted):6d} {at([(t, c) for t, c, _ in timeline]):6d} "
                  f"{at([(t, r) for t, _, r in timeline]):6d} {at(completed):6d}")
    row: Row = {"routed_per_s": _pace(routed, pilots, completed_s), "submitted_per_s": _pace(submitted, pilots, completed_s),
                "first_submit_s": _first(submitted, 1) or completed_s,
                "completed_s": completed_s, "gahp_cpu_ms": cpu.get("GAHP", 0.0) * 1000 / pilots}
    for name in DAEMONS.values():
        row[f"cpu_{name}"] = cpu.get(name, 0.0)
    row["cpu_GAHP"] = cpu.get("GAHP", 0.0)
    if backend == "k8s":
        created = [(t, c) for t, c, _ in timeline]
        row.update(pods_per_s=_pace(created, pilots, completed_s), first_pod_s=_first(created, 1) or completed_s,
                   all_ran_s=_first([(t, r) for t, _, r in timeline], pilots) or completed_s,
                   cluster_cpu_ms=cluster_cpu_ms, api_per_pilot=requests[0], writes_per_pilot=requests[1])
    return row


def _print(label: str, r: Row) -> None:
    first = f"{r['first_pod_s']:.0f}" if "first_pod_s" in r else f"({r['first_submit_s']:.0f})"
    pods = f"{r['pods_per_s']:.0f}" if "pods_per_s" in r else "–"
    ran = f"{r['all_ran_s']:.0f}" if "all_ran_s" in r else "–"
    print(f"| {label} | {r['routed_per_s']:.0f} | {first} | {pods} | {r['submitted_per_s']:.0f} | {ran} | "
          f"{r['completed_s']:.0f} | {r['cpu_schedd']:.1f} | {r['cpu_JobRouter']:.1f} | {r['cpu_gridmanager']:.1f} | "
          f"{r['cpu_GAHP']:.1f} | {r['gahp_cpu_ms']:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pilots", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each backend (the medians count); 0: only the variants")
    parser.add_argument("--variants", nargs="*", default=list(DEFAULT_VARIANTS),
                        help="knob changes to run once each with podgahp (names of VARIANTS); none: skip")
    parser.add_argument("--series", default="trixie", help="HTCondor of the harness: trixie (23.x), sid (25.x)")
    parser.add_argument("--timeline", action="store_true", help="print how far each stage got, every 5 s of each run")
    parser.add_argument("--engine", choices=("simulated", "real"), default="simulated",
                        help="podgahp's cluster: the simulated API server, or the real control plane "
                             "(make k8s-control-plane)")
    args = parser.parse_args()
    global TIMELINE
    TIMELINE = args.timeline
    installation = get_installation(args.series)
    installation.acquire()
    try:
        wheels = add_dependency_wheels(installation)
        installation.install_podgahp()
        print(f"`benchmarks/e2e_ce.py --engine {args.engine}`: {args.pilots} pilots of {RUN_SECONDS} s, HTCondor {args.series}, podgahp "
              f"{wheels}; median of {args.repeat} runs of each backend taking turns; {load()} at the start")
        print()
        print("| configuration | routed/s | first pod s | pods/s | submits answered/s | all pods ran s | all completed s "
              "| schedd CPU s | JobRouter CPU s | gridmanager CPU s | GAHP CPU s | GAHP CPU ms/pilot |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        runs = alternate(["k8s", "memory"], args.repeat,
                         lambda backend: run(installation, backend, args.pilots, engine=args.engine))
        if args.repeat:
            _print("shipped, podgahp k8s", medians(runs["k8s"]))
            _print("shipped, memory backend", medians(runs["memory"]))
        for name in args.variants:
            _print(f"`{name}`, podgahp k8s", run(installation, "k8s", args.pilots, VARIANTS[name], args.engine))
        print()
        if args.repeat:
            k8s = medians(runs["k8s"])
            if args.engine == "real":
                print(f"kube-apiserver + etcd CPU per pilot: {k8s['cluster_cpu_ms']:.1f} ms; API requests of the "
                      f"pilots' namespace per pilot, as the API server counts them: {k8s['api_per_pilot']:.1f} "
                      f"({k8s['writes_per_pilot']:.1f} writes)")
            else:
                print(f"simulator CPU per pilot: {k8s['cluster_cpu_ms']:.1f} ms")
        if not args.repeat:
            return
        pairs = ", ".join(f"{k['completed_s'] / m['completed_s']:.2f}" for k, m in zip(runs["k8s"], runs["memory"]))
        print(f"all completed, k8s / memory: {ratio(runs['k8s'], runs['memory'], 'completed_s'):.2f} "
              f"(pairs: {pairs}); {load()} at the end")
    finally:
        installation.release()


if __name__ == "__main__":
    main()
