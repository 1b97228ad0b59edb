"""Benchmark: a GAHP started on a CE that already has N running pilots (a restart, or a second GAHP),
and the zero-cost memory backend asked about N running pilots in the same run.

One pilot is submitted through the real GAHP and left running; its pod (and its Secret) are then
copied N-1 times into the simulated cluster (in its own process, loaded in one go), each a pilot of
its own (its own sandbox key, name, uid, output paths, and times: one pilot started a second), as a
CE that had submitted N pilots would have them. A *new* GAHP process is started and asked for every
pilot's status, as the gridmanager does after a restart. Reported:

- first status s: start of the process to the first status answer (must not wait for the LIST of N pods);
- copy in s: until the watch copy holds the N pods (the paginated LIST done, the watch opened), and
  the GAHP's CPU seconds for it;
- status/s line by line (the gridmanager's way: each line waits for its "S"): the first round (each
  pilot's state is new to this process and logged once), then a steady round, with the GAHP's CPU µs
  per status; pipelined (the GAHP's own capacity);
- RSS (peak) of the GAHP with N pods in its copy; API requests during the status rounds (must be 0);
- the GAHP's CPU per submit of 500 more pilots, with N pods in its copy (must not grow with N).

Each figure is the median of ``--repeat`` runs, k8s and memory taking turns, with the median ratio of
the pairs' CPU per status.

With ``--engine real`` the cluster is the real control plane (Kubernetes' own kube-apiserver and etcd,
the simulator's kubelet as one large node): the N-1 copies are made through the API server (by the
admin, each pod bound to the node, each with its Secret owned by it), and the node runs them. Its
own ``apiserver_request_total`` counts the requests (the pilots' namespace's), and the table adds
what the server holds for N pilots (kube-apiserver's and etcd's memory, before any pilot and with
the N) and its CPU while the GAHP copies the pods in and while it answers the status rounds.

    .venv/bin/python benchmarks/k8s_tracked.py --pods 20000 50000
    .venv/bin/python benchmarks/k8s_tracked.py --engine real --pods 1000 10000 --repeat 1
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Union

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gahp.backends.k8s.cache import PAGE  # noqa: E402
from bench import ControlPlaneCluster, SimProcess, alternate, cpu_s, load, medians, memory_mb, ratio, threads_cpu_s  # noqa: E402
from podgahp_sim.k8s import SimConfig, SimNode  # noqa: E402
from podgahp_sim.kube.node import NodeSpec  # noqa: E402
from gahp_driver import GahpProcess, gahp_env, script  # noqa: E402
from k8s_gahp import BATCH, submit_ad  # noqa: E402

NAMESPACE = "bench"
#: Pilots submitted after the status rounds (the CPU of a submit with N pods in the copy).
SUBMITS = 500


def _statuses(gahp: GahpProcess, job_ids: List[str], first_request: int, pipelined: bool) -> float:
    """Seconds to get every job's status, line by line or written at once (BATCH in flight at most)."""
    started = time.monotonic()
    request = first_request
    for first in range(0, len(job_ids), BATCH):
        chunk = job_ids[first:first + BATCH]
        ids = [str(request + i) for i in range(len(chunk))]
        request += len(chunk)
        if pipelined:
            gahp.send(b"\r\n".join(f"BLAH_JOB_STATUS {rid} {jid}".encode() for rid, jid in zip(ids, chunk)))
            for _ in ids:
                assert gahp.read(timeout=60) == ["S"]
        else:
            for rid, jid in zip(ids, chunk):
                reply = gahp.command("BLAH_JOB_STATUS", rid, jid, timeout=60)
                assert reply == ["S"], reply
        answers = gahp.wait_results(ids, timeout=600)
        assert all(a[:3] == ["0", "NULL", "2"] for a in answers.values()), list(answers.values())[:3]
    return time.monotonic() - started


Cluster = Union[SimProcess, ControlPlaneCluster]


def cluster(engine: str, pods: int) -> Cluster:
    """One node large enough for every pilot: of the simulated API server, or of the real control plane,
    whose node reads its pods' Secrets again only once an hour (every 5 s, its default, it would read N
    Secrets in a row, which the API server's figures would count as the GAHP's cost) and forwards at
    most 100 Events a pass (the N pilots' container Events are no part of what is measured; dropped,
    as a kubelet's recorder drops what is over its rate, with a warning that is not shown here)."""
    if engine == "real":
        logging.getLogger("podgahp_sim.kube.node").setLevel(logging.ERROR)
        return ControlPlaneCluster([NodeSpec("big", cpus="1000000", memory="100000Ti", pods=pods + SUBMITS + 10,
                                             tick_seconds=0.5, sync_seconds=3600, event_log_size=100)],
                                   (NAMESPACE,))
    node = SimNode("big", cpu="1000000", memory="100000Ti", pods=1000000)
    return SimProcess(SimConfig(nodes=(node,), namespaces=("default", NAMESPACE)))


def _copied_in(sim: Cluster, pods: int) -> bool:
    """Whether the GAHP's copy holds the namespace's pods: its watch is open (it starts from the LIST's
    version); on the real API server, which counts a watch only when it ends, the LIST's last page
    (:data:`~gahp.backends.k8s.cache.PAGE` pods a page) has been served."""
    if isinstance(sim, ControlPlaneCluster):
        return sim.count("LIST") >= -(-pods // PAGE)
    return sim.count("GET", f"/namespaces/{NAMESPACE}/pods$", watch=True) >= 1


def run(pods: int, backend: str, engine: str = "simulated") -> Dict[str, float]:
    with cluster(engine if backend == "k8s" else "simulated", pods) as sim, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        sim.write_kubeconfig(kubeconfig, namespace=NAMESPACE)
        env = gahp_env(tmp, PODGAHP_K8S_KUBECONFIG=kubeconfig, PODGAHP_K8S_IMAGE="pilot:1",
                       PODGAHP_K8S_CE_NAME="bench", PODGAHP_K8S_REAP_INTERVAL_SECONDS="0",
                       PODGAHP_MEMORY_IDLE_SECONDS="0", PODGAHP_MEMORY_RUN_SECONDS="36000")
        server: Dict[str, float] = {}
        if isinstance(sim, ControlPlaneCluster):
            server.update(apiserver_mb_before=sim.rss_mb("kube-apiserver"), etcd_mb_before=sim.rss_mb("etcd"))
        if backend == "k8s":
            argv = [script("k8s_gahp")]
            job_ids = _k8s_pilots(sim, env, tmp, pods)
        else:
            argv = [script("podgahp"), "gahp", "--backend", backend]
            now_ms = int(time.time() * 1000)
            job_ids = [f"memory/bench_{i}.0/{now_ms - i}.{i}/0" for i in range(pods)]
        if isinstance(sim, ControlPlaneCluster):
            server.update(apiserver_mb=sim.rss_mb("kube-apiserver"), etcd_mb=sim.rss_mb("etcd"))
        sim.clear_requests()
        server_cpu = sim.cpu_s()
        with GahpProcess(argv, env=env, cwd=tmp) as gahp:
            started = time.monotonic()
            gahp.start(timeout=60)
            gahp.command("ASYNC_MODE_ON")
            gahp.command("BLAH_JOB_STATUS", "3", job_ids[-1])
            first = gahp.wait_results(["3"], timeout=60)["3"]
            assert first[:3] == ["0", "NULL", "2"], first
            first_status_s = time.monotonic() - started
            if backend == "k8s":
                while not _copied_in(sim, pods):
                    assert time.monotonic() - started < 600, "the LIST did not finish"
                    time.sleep(0.05)
            copy_in_s = time.monotonic() - started
            copy_in_cpu = cpu_s(gahp.proc.pid)
            server["copy_in_server_cpu_s"] = sim.cpu_s() - server_cpu
            sim.clear_requests()
            server_cpu = sim.cpu_s()
            rounds_started = time.monotonic()
            first_round_s = _statuses(gahp, job_ids, 800_000_000, pipelined=False)
            cpu = threads_cpu_s(gahp.proc.pid)
            line_s = _statuses(gahp, job_ids, 850_000_000, pipelined=False)
            cpu_per_status = (threads_cpu_s(gahp.proc.pid) - cpu) / pods
            pipelined_s = _statuses(gahp, job_ids, 900_000_000, pipelined=True)
            api = sim.count(watch=False)
            # the server's CPU per second of the rounds: what its own work costs (the node's heartbeats,
            # the controllers) whatever podgahp asks, since the rounds ask it nothing
            server["rounds_server_cpu_per_s"] = (sim.cpu_s() - server_cpu) / (time.monotonic() - rounds_started)
            rss_mb, peak_mb = memory_mb(gahp.proc.pid)
            # New pilots on top of the N: what a submit costs with N pods in the copy.
            cpu = cpu_s(gahp.proc.pid)
            ids = [str(950_000_000 + i) for i in range(SUBMITS)]
            for i, rid in enumerate(ids):
                assert gahp.command("BLAH_JOB_SUBMIT", rid, submit_ad(tmp, pods + 1 + i)) == ["S"]
            answers = gahp.wait_results(ids, timeout=600)
            assert all(a[0] == "0" for a in answers.values()), list(answers.values())[:3]
            submit_ms = (cpu_s(gahp.proc.pid) - cpu) * 1000 / SUBMITS
            gahp.command("QUIT")
    return {"pods": pods, "first_status_s": first_status_s, "copy_in_s": copy_in_s, "copy_in_cpu_s": copy_in_cpu,
            "first_round_per_s": pods / first_round_s, "line_per_s": pods / line_s,
            "cpu_us": cpu_per_status * 1e6, "pipelined_per_s": pods / pipelined_s, "rss_mb": rss_mb,
            "peak_mb": peak_mb, "api": api, "submit_ms": submit_ms, **server}


def _k8s_pilots(sim: Cluster, env: Dict[str, str], tmp: str, pods: int) -> List[str]:
    """One pilot submitted by a GAHP and running, then copied into ``pods`` pilots: their job ids."""
    with GahpProcess([script("k8s_gahp")], env=env, cwd=tmp) as gahp:
        gahp.start()
        gahp.command("ASYNC_MODE_ON")
        gahp.command("BLAH_JOB_SUBMIT", "1", submit_ad(tmp, 0))
        (answer,) = gahp.wait_results(["1"], timeout=60).values()
        job_id = answer[2]
        deadline = time.monotonic() + 60
        while True:
            gahp.command("BLAH_JOB_STATUS", "2", job_id)
            if gahp.wait_results(["2"], timeout=60)["2"][:3] == ["0", "NULL", "2"]:
                break
            assert time.monotonic() < deadline, "the pilot did not start"
        gahp.command("QUIT")
    prefix = job_id.rsplit("/", 1)[0]
    return [f"{prefix}/{name}" for name in sim.clone(NAMESPACE, pods)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, nargs="+", default=[20000, 50000])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each backend, taking turns (medians)")
    parser.add_argument("--engine", choices=("simulated", "real"), default="simulated",
                        help="the simulated API server, or the real control plane (make k8s-control-plane)")
    args = parser.parse_args()
    print(f"`benchmarks/k8s_tracked.py --engine {args.engine}`, median of {args.repeat} runs of each backend "
          f"taking turns; {load()} at the start")
    print()
    print("| backend | tracked pods | first status s | copy in s (GAHP CPU s) | first round status/s "
          "| status/s line by line | GAHP CPU µs/status | status/s pipelined | RSS MB (peak) | API requests in rounds "
          f"| GAHP CPU ms/submit of {SUBMITS} more |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    servers = []
    for pods in args.pods:
        runs = alternate(["k8s", "memory"], args.repeat, lambda backend: run(pods, backend, args.engine))
        for backend, rows in runs.items():
            r = medians(rows)
            copy_in = f"{r['copy_in_s']:.1f} ({r['copy_in_cpu_s']:.1f})" if backend == "k8s" else "–"
            print(f"| {backend} | {pods:,} | {r['first_status_s']:.1f} | {copy_in} | {r['first_round_per_s']:,.0f} "
                  f"| {r['line_per_s']:,.0f} | {r['cpu_us']:.0f} | {r['pipelined_per_s']:,.0f} "
                  f"| {r['rss_mb']:.0f} ({r['peak_mb']:.0f}) | {r['api']:.0f} | {r['submit_ms']:.2f} |", flush=True)
            if backend == "k8s" and "apiserver_mb" in r:
                servers.append(r)
        ratios.append((pods, ratio(runs["k8s"], runs["memory"], "cpu_us")))
    if servers:
        print()
        print("| tracked pods | kube-apiserver RSS MB (before the pilots) | etcd RSS MB (before) "
              "| kube-apiserver MB per pilot | kube-apiserver + etcd CPU s of the copy-in "
              "| kube-apiserver + etcd CPU % during the status rounds |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in servers:
            per_pod = (r["apiserver_mb"] - r["apiserver_mb_before"]) / r["pods"]
            print(f"| {r['pods']:,.0f} | {r['apiserver_mb']:,.0f} ({r['apiserver_mb_before']:,.0f}) "
                  f"| {r['etcd_mb']:,.0f} ({r['etcd_mb_before']:,.0f}) | {per_pod:.2f} "
                  f"| {r['copy_in_server_cpu_s']:.1f} | {100 * r['rounds_server_cpu_per_s']:.0f} |", flush=True)
    print()
    for pods, value in ratios:
        print(f"{pods:,} tracked: GAHP CPU per status k8s / memory {value:.2f}")
    print(f"{load()} at the end")


if __name__ == "__main__":
    main()
