"""kill -9 of the real ``k8s_gahp`` at random moments while 500 pilots are submitted and polled, with
the gridmanager's behaviour after each restart (every submit whose answer it did not get is sent
again): no pilot is lost, none runs twice, no pod or Secret is left without its pilot."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Dict, Iterator, List, Set

import pytest

from gahp.backends.k8s.identity import LABEL_SANDBOX
from podgahp_sim.k8s import KubeSim, SimConfig, SimNode
from gahp_driver import GahpProcess, gahp_env, script

PILOTS = 500
NAMESPACE = "pilots"


@pytest.fixture
def big_sim() -> Iterator[KubeSim]:
    config = SimConfig(namespaces=(NAMESPACE,), tick_seconds=0.1, run_seconds=0.3, container_create_seconds=0.05,
                       nodes=(SimNode("big", cpu="2000", memory="4000Gi", pods=5000),))
    with KubeSim(config) as running:
        yield running


def submit_ad(iwd: Path, sandbox: str) -> str:
    attrs = {"Cmd": f'"{iwd}/pilot.sh"', "Iwd": f'"{iwd}"', "JobDirectory": f'"home_bl_{sandbox}"',
             "gridtype": '"k8s"', "GridResource": '"batch k8s"', "RequestMemory": "64"}
    return "[ " + "; ".join(f"{k} = {v}" for k, v in attrs.items()) + " ]"


@pytest.mark.timeout(600)
def test_random_kills_lose_nothing_and_run_nothing_twice(big_sim: KubeSim, tmp_path: Path) -> None:
    rng = random.Random(20261124)
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    (iwd / "pilot.sh").write_text("#!/bin/sh\necho pilot\n")
    kubeconfig = big_sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NAMESPACE)
    env = gahp_env(str(tmp_path), PODGAHP_K8S_KUBECONFIG=kubeconfig, PODGAHP_K8S_IMAGE="registry.example/pilot:1",
                   PODGAHP_K8S_CE_NAME="ce.test", PODGAHP_K8S_REAP_INTERVAL_SECONDS="0",
                   PODGAHP_K8S_BACKOFF_SECONDS="0.05")
    sandboxes = [f"ce.test_pilot_{i}.0_1795297304" for i in range(PILOTS)]
    job_ids: Dict[str, str] = {}
    done: Set[str] = set()
    kills = submits = 0
    request = 0
    deadline = time.monotonic() + 480  # progress is bounded by the simulated pods' run time, not by kills
    while len(done) < PILOTS:
        assert time.monotonic() < deadline, f"{len(done)} of {PILOTS} done after {kills} kills"
        todo = [s for s in sandboxes if s not in done]
        rng.shuffle(todo)
        batch = todo[:rng.randint(20, 150)]
        gahp = GahpProcess([script("k8s_gahp")], env=env, cwd=str(tmp_path))
        try:
            gahp.start(timeout=60)  # generous: a loaded CI machine starts Python slowly
            assert gahp.command("ASYNC_MODE_ON", timeout=60) == ["S"]
            pending: Dict[str, str] = {}
            for sandbox in batch:
                request += 1
                if sandbox in job_ids:
                    gahp.command("BLAH_JOB_STATUS", str(request), job_ids[sandbox])
                else:
                    submits += 1
                    gahp.command("BLAH_JOB_SUBMIT", str(request), submit_ad(iwd, sandbox))
                pending[str(request)] = sandbox
            # kill -9 at a random moment: after a random part of the answers came back, possibly all
            # (never all would leave the last pilot's answer to chance)
            waited = list(pending)[:rng.randint(0, len(pending))]
            answers = gahp.wait_results(waited, timeout=180) if waited else {}
            answers.update(gahp.results())
            os.kill(gahp.proc.pid, signal.SIGKILL)
            kills += 1
            for rid, fields in answers.items():
                sandbox = pending[rid]
                if sandbox not in job_ids:
                    if fields[:2] == ["0", "NULL"]:
                        job_ids[sandbox] = fields[2]
                elif fields[:3] == ["0", "NULL", "4"]:
                    assert "ExitCode = 0" in fields[3], fields
                    done.add(sandbox)
        finally:
            gahp.close(timeout=10)

    pods = big_sim.pods(NAMESPACE)
    per_sandbox = Counter(p["metadata"]["labels"][LABEL_SANDBOX] for p in pods)
    ran = [p for p in pods if any("startedAt" in ((s.get("state") or {}).get("terminated") or {})
                                  for s in (p.get("status") or {}).get("containerStatuses") or [])]
    reported = {job_id.rsplit("/", 1)[1] for job_id in job_ids.values()}
    twice: List[str] = [k for k, n in per_sandbox.items() if n > 1]
    orphans = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] not in reported]
    secrets_without_pod = [s["metadata"]["name"] for s in big_sim.secrets(NAMESPACE)
                           if big_sim.pod(NAMESPACE, s["metadata"]["name"]) is None]
    print(f"{PILOTS} pilots, {submits} submits, {kills} kills: {len(twice)} twice, "
          f"{PILOTS - len(done)} lost, {len(orphans)} orphan pods, {len(secrets_without_pod)} orphan secrets")
    assert kills >= 5
    assert len(done) == PILOTS and len(ran) == PILOTS
    assert twice == [] and orphans == [] and secrets_without_pod == []
