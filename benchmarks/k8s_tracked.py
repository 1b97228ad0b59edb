"""Benchmark: a GAHP started on a CE that already has N running pilots (a restart, or a second GAHP).

One pilot is submitted through the real GAHP and left running; its pod (and its Secret) are then
copied N-1 times into the simulated cluster's store, each a pilot of its own (its own sandbox key,
name, uid, output paths, and times: one pilot started a second), as a CE that had submitted N
pilots would have them. A *new* GAHP process is started and
asked for every pilot's status, as the gridmanager does after a restart. Reported:

- first status s: start of the process to the first status answer (must not wait for the LIST of N pods);
- copy in s: until the watch copy holds the N pods (the paginated LIST done);
- status/s line by line (the gridmanager's way: each line waits for its "S"): the first round (each
  pilot's state is new to this process and logged once), then a steady round, with the GAHP's CPU µs
  per status; pipelined (the GAHP's own capacity);
- RSS (peak) of the GAHP with N pods in its copy; API requests during the status rounds (must be 0).

    .venv/bin/python benchmarks/k8s_tracked.py --pods 20000 50000
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gahp.backends.k8s.identity import KEY_LENGTH  # noqa: E402
from gahp.backends.k8s.pod import ANN_ERR, ANN_OUT, ANN_SANDBOX_ID, LABEL_SANDBOX  # noqa: E402
from podgahp_sim.k8s import KubeSim, SimConfig, SimNode  # noqa: E402
from gahp_driver import GahpProcess, gahp_env, script  # noqa: E402
from k8s_gahp import BATCH, _cpu_s, _memory_mb, submit_ad  # noqa: E402

NAMESPACE = "bench"


def _clone(sim: KubeSim, pods: int) -> List[str]:
    """Copy the one pilot's pod, its Secret and its simulated run into ``pods`` pilots in all."""
    store, cluster = sim.store, sim.cluster
    with store.lock:
        (original,) = store.items("pods", NAMESPACE)
        secret = store.get("secrets", NAMESPACE, original["metadata"]["name"])
        run = cluster.runs[original["metadata"]["uid"]]
        names = [original["metadata"]["name"]]
        started = time.time()
        for i in range(1, pods):
            key = f"{i:0{KEY_LENGTH}x}"
            name = f"pilot-{key}-1"
            pod = copy.deepcopy(original)
            meta = pod["metadata"]
            meta.update(name=name, uid=str(uuid.uuid4()))
            meta["labels"] = dict(meta["labels"], **{LABEL_SANDBOX: key})
            # what is each pilot's own in a real CE: its sandbox and output paths
            meta["annotations"] = dict(meta["annotations"], **{
                ANN_SANDBOX_ID: f"bench_{i}.0", ANN_OUT: f"/var/lib/condor-ce/spool/{i}/p.out",
                ANN_ERR: f"/var/lib/condor-ce/spool/{i}/p.err"})
            _started(pod, started - i)  # one pilot a second, as a CE fills up over a day or more
            store.create("pods", pod)
            cluster.runs[meta["uid"]] = copy.copy(run)
            cluster.runs[meta["uid"]].uid, cluster.runs[meta["uid"]].name = meta["uid"], name
            if secret is not None:
                copied = copy.deepcopy(secret)
                copied["metadata"].update(name=name, uid=str(uuid.uuid4()))
                copied["metadata"]["ownerReferences"] = [dict(copied["metadata"]["ownerReferences"][0],
                                                              name=name, uid=meta["uid"])]
                store.create("secrets", copied)
            names.append(name)
    return names


def _started(pod: dict, when: float) -> None:
    """Every time of a running pod set to ``when`` (each pilot has its own)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
    pod["metadata"]["creationTimestamp"] = stamp
    status = pod["status"]
    status["startTime"] = stamp
    for condition in status.get("conditions") or []:
        condition["lastTransitionTime"] = stamp
    for container in status.get("containerStatuses") or []:
        container["state"]["running"]["startedAt"] = stamp


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


def run(pods: int) -> Dict[str, float]:
    node = SimNode("big", cpu="1000000", memory="100000Ti", pods=1000000)
    config = SimConfig(nodes=(node,), namespaces=("default", NAMESPACE), event_log_size=200000)
    with KubeSim(config) as sim, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        sim.write_kubeconfig(kubeconfig, namespace=NAMESPACE)
        env = gahp_env(tmp, PODGAHP_K8S_KUBECONFIG=kubeconfig, PODGAHP_K8S_IMAGE="pilot:1",
                       PODGAHP_K8S_CE_NAME="bench", PODGAHP_K8S_REAP_INTERVAL_SECONDS="0")
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
        job_ids = [f"{prefix}/{name}" for name in _clone(sim, pods)]
        # The cluster settles (one tick over the copies), and the benchmark process's own objects (the
        # simulator's store and event log) leave Python's cyclic collector, whose full passes over
        # them would otherwise stall the simulator's replies.
        sim.tick()
        gc.collect()
        gc.freeze()
        sim.clear_requests()
        with GahpProcess([script("k8s_gahp")], env=env, cwd=tmp) as gahp:
            started = time.monotonic()
            gahp.start(timeout=60)
            gahp.command("ASYNC_MODE_ON")
            gahp.command("BLAH_JOB_STATUS", "3", job_ids[-1])
            assert gahp.wait_results(["3"], timeout=60)["3"][:3] == ["0", "NULL", "2"]
            first_status_s = time.monotonic() - started
            pages = -(-pods // 500)
            while len([r for r in sim.requests("GET", f"/namespaces/{NAMESPACE}/pods$")
                       if not r.query.get("watch")]) < pages:
                assert time.monotonic() - started < 600, "the LIST did not finish"
                time.sleep(0.05)
            copy_in_s = time.monotonic() - started
            time.sleep(1)  # let the watch open before counting requests
            sim.clear_requests()
            first_round_s = _statuses(gahp, job_ids, 800_000_000, pipelined=False)
            cpu = _cpu_s(gahp.proc.pid)
            line_s = _statuses(gahp, job_ids, 850_000_000, pipelined=False)
            cpu_per_status = (_cpu_s(gahp.proc.pid) - cpu) / pods
            pipelined_s = _statuses(gahp, job_ids, 900_000_000, pipelined=True)
            api = len([r for r in sim.requests() if not r.query.get("watch")])
            rss_mb, peak_mb = _memory_mb(gahp.proc.pid)
            gahp.command("QUIT")
    return {"pods": pods, "first_status_s": first_status_s, "copy_in_s": copy_in_s,
            "first_round_per_s": pods / first_round_s, "line_per_s": pods / line_s,
            "cpu_us": cpu_per_status * 1e6, "pipelined_per_s": pods / pipelined_s, "rss_mb": rss_mb,
            "peak_mb": peak_mb, "api": api}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, nargs="+", default=[20000, 50000])
    args = parser.parse_args()
    print("| tracked pods | first status s | copy in s | first round status/s | status/s line by line "
          "| GAHP CPU µs/status "
          "| status/s pipelined | RSS MB (peak) | API requests in rounds |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pods in args.pods:
        r = run(pods)
        print(f"| {r['pods']} | {r['first_status_s']:.1f} | {r['copy_in_s']:.1f} | {r['first_round_per_s']:.0f} "
              f"| {r['line_per_s']:.0f} "
              f"| {r['cpu_us']:.0f} | {r['pipelined_per_s']:.0f} | {r['rss_mb']:.0f} ({r['peak_mb']:.0f}) "
              f"| {r['api']} |", flush=True)


if __name__ == "__main__":
    main()
