"""Benchmark: k8s_gahp driven over its protocol against the simulated cluster, and the zero-cost
memory backend in the same run.

Submits N pilots through the real GAHP process (as the gridmanager would, in async mode), then polls
the status of every pilot several rounds, and reports: how long the GAHP takes to accept requests
(every line must be answered within the gridmanager's 20 s response timeout), submit and status
throughput and CPU, and how many Kubernetes API requests the status rounds cost (they come from one
watch per namespace, so the count must not grow with N). The simulated cluster runs in a process of
its own (its CPU per submit is reported apart). With ``--engine real`` the cluster is the real control
plane (Kubernetes' own kube-apiserver and etcd, whose CPU per submit is reported, and whose own
``apiserver_request_total`` counts the requests). Each figure is the median of ``--repeat`` runs, the
two backends taking turns, with the median ratio of the pairs.

    .venv/bin/python benchmarks/k8s_gahp.py --pilots 1000 5000
    .venv/bin/python benchmarks/k8s_gahp.py --engine real --pilots 1000   # the real control plane
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Union

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench import ControlPlaneCluster, SimProcess, alternate, cpu_s, load, medians, memory_mb, ratio, threads_cpu_s  # noqa: E402
from podgahp_sim.k8s import SimConfig, SimNode  # noqa: E402
from podgahp_sim.kube.node import NodeSpec  # noqa: E402
from gahp_driver import GahpProcess, gahp_env, script  # noqa: E402


#: Requests in flight at once (the GAHP's PODGAHP_MAX_PENDING_REQUESTS is 1000).
BATCH = 500


def submit_ad(iwd: str, i: int) -> str:
    return ("[ Cmd = \"/bin/true\"; Iwd = \"%s\"; Out = \"p%d.out\"; Err = \"p%d.err\"; "
            "JobDirectory = \"home_bl_bench_%d.0\"; RequestMemory = 100; "
            "Environment = \"PODGAHP_SIM_RUN_SECONDS=3600\" ]" % (iwd, i, i, i))


def cluster(engine: str) -> Union[SimProcess, ControlPlaneCluster]:
    """One node large enough for every pilot: of the simulated API server, or of the real control plane."""
    if engine == "real":
        return ControlPlaneCluster([NodeSpec("big", cpus="100000", memory="100000Gi", pods=100000, tick_seconds=0.5)],
                                   ("bench",))
    node = SimNode("big", cpu="100000", memory="100000Gi", pods=100000)
    return SimProcess(SimConfig(nodes=(node,), namespaces=("default", "bench")))


def run(pilots: int, rounds: int, backend: str = "k8s", engine: str = "simulated") -> Dict[str, float]:
    with cluster(engine if backend == "k8s" else "simulated") as sim, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        sim.write_kubeconfig(kubeconfig, namespace="bench")
        env = gahp_env(tmp, PODGAHP_K8S_KUBECONFIG=kubeconfig, PODGAHP_K8S_IMAGE="pilot:1",
                       PODGAHP_K8S_CE_NAME="bench", PODGAHP_K8S_REAP_INTERVAL_SECONDS="0",
                       PODGAHP_MEMORY_RUN_SECONDS="3600")
        argv = [script("k8s_gahp")] if backend == "k8s" else [script("podgahp"), "gahp", "--backend", backend]
        with GahpProcess(argv, env=env, cwd=tmp) as gahp:
            gahp.start()
            gahp.command("ASYNC_MODE_ON")
            sim.clear_requests()
            cpu, sim_cpu = cpu_s(gahp.proc.pid), sim.cpu_s()
            started = time.monotonic()
            slowest_ack = 0.0
            results: Dict[str, List[str]] = {}
            for first in range(0, pilots, BATCH):  # at most BATCH in flight, below the GAHP's queue limit
                batch = range(first, min(first + BATCH, pilots))
                for i in batch:
                    t = time.monotonic()
                    assert gahp.command("BLAH_JOB_SUBMIT", str(i + 2), submit_ad(tmp, i)) == ["S"]
                    slowest_ack = max(slowest_ack, time.monotonic() - t)
                results.update(gahp.wait_results([str(i + 2) for i in batch], timeout=600))
            submit_s = time.monotonic() - started
            cpu_ms = (cpu_s(gahp.proc.pid) - cpu) * 1000 / pilots
            sim_ms = (sim.cpu_s() - sim_cpu) * 1000 / pilots
            writes = sum(sim.count(method) for method in ("POST", "PUT", "PATCH", "DELETE")) / pilots
            job_ids: List[str] = [r[2] for r in results.values() if r[0] == "0"]
            assert len(job_ids) == pilots, [r for r in results.values() if r[0] != "0"][:3]
            # one status round first, so the watch is running before we count
            request = 100000
            gahp.wait_results([_status(gahp, (request := request + 1), j) for j in job_ids], timeout=600)
            sim.clear_requests()
            cpu = threads_cpu_s(gahp.proc.pid)
            started = time.monotonic()
            for _ in range(rounds):
                ids = []
                for job_id in job_ids:
                    request += 1
                    ids.append(_status(gahp, request, job_id))
                gahp.wait_results(ids, timeout=600)
            status_s = time.monotonic() - started
            status_us = (threads_cpu_s(gahp.proc.pid) - cpu) * 1e6 / (pilots * rounds)
            # The GAHP's own capacity: every status line written at once (the gridmanager waits for each
            # "S", so its rate is also bounded by the pipe's round trip).
            started = time.monotonic()
            for first in range(0, len(job_ids), BATCH):
                chunk = job_ids[first:first + BATCH]
                ids = [str(request + 1 + i) for i in range(len(chunk))]
                request += len(chunk)
                gahp.send(b"\r\n".join(f"BLAH_JOB_STATUS {rid} {job_id}".encode() for rid, job_id in zip(ids, chunk)))
                for _ in ids:
                    assert gahp.read(timeout=60) == ["S"]
                gahp.wait_results(ids, timeout=600)
            pipelined_s = time.monotonic() - started
            api_requests = sim.count()
            rss_mb, peak_mb = memory_mb(gahp.proc.pid)
            gahp.command("QUIT")
    return {"pilots": pilots, "submit_s": submit_s, "submits_per_s": pilots / submit_s,
            "cpu_ms": cpu_ms, "sim_cpu_ms": sim_ms, "writes": writes if backend == "k8s" else 0.0,
            "slowest_ack_ms": slowest_ack * 1000, "status_per_s": pilots * rounds / status_s,
            "status_us": status_us, "pipelined_status_per_s": pilots / pipelined_s, "rss_mb": rss_mb,
            "peak_rss_mb": peak_mb, "api_requests_during_status": api_requests}


def _status(gahp: GahpProcess, request: int, job_id: str) -> str:
    assert gahp.command("BLAH_JOB_STATUS", str(request), job_id) == ["S"]
    return str(request)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pilots", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--rounds", type=int, default=3, help="status rounds over every pilot")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each backend, taking turns (medians)")
    parser.add_argument("--engine", choices=("simulated", "real"), default="simulated",
                        help="the simulated API server, or the real control plane (make k8s-control-plane)")
    args = parser.parse_args()
    server = "kube-apiserver + etcd" if args.engine == "real" else "simulator"
    print(f"`benchmarks/k8s_gahp.py --engine {args.engine}`, median of {args.repeat} runs of each backend taking "
          f"turns; {load()} at the start")
    print()
    print(f"| backend | pilots | submits/s | GAHP CPU ms/submit | {server} CPU ms/submit | API writes/submit "
          f"| slowest S ms | status/s line by line | GAHP CPU µs/status | status/s pipelined | RSS MB (peak) "
          f"| API requests in {args.rounds} status rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for n in args.pilots:
        runs = alternate(["k8s", "memory"], args.repeat, lambda backend: run(n, args.rounds, backend, args.engine))
        for backend, rows in runs.items():
            r = medians(rows)
            print(f"| {backend} | {n:,} | {r['submits_per_s']:.0f} | {r['cpu_ms']:.2f} | "
                  f"{r['sim_cpu_ms']:.2f} | {r['writes']:.1f} "
                  f"| {r['slowest_ack_ms']:.0f} | {r['status_per_s']:,.0f} | {r['status_us']:.0f} "
                  f"| {r['pipelined_status_per_s']:,.0f} "
                  f"| {r['rss_mb']:.0f} ({r['peak_rss_mb']:.0f}) | {r['api_requests_during_status']:.0f} |", flush=True)
        ratios.append((n, ratio(runs["k8s"], runs["memory"], "status_us"),
                       ratio(runs["k8s"], runs["memory"], "cpu_ms")))
    print()
    for n, status, submit in ratios:
        print(f"{n:,} pilots: GAHP CPU per status k8s / memory {status:.2f}; per submit {submit:.1f}")
    print(f"{load()} at the end")


if __name__ == "__main__":
    main()
