"""Many pilots through the real ``lancium_gahp`` against a simulated Lancium service with random faults.

Shared by ``tests/unit/backends/lancium/test_lancium_faults.py`` and ``benchmarks/lancium_faults.py``. The
driver behaves as the gridmanager does: it submits every pilot once (a failed submit is a held, lost
pilot), then polls status until each pilot reports COMPLETED, retrying status requests that fail.
At the end the faults stop and the simulator's jobs are counted: a pilot's sandbox must own exactly
one job that ran, and no job may be left half-made (``created``, never submitted).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List

from gahp.backends.lancium.identity import key_of_name
from podgahp_sim.lancium import LanciumSim
from gahp_driver import GahpProcess, gahp_env, script

#: BLAH_JOB_STATUS code of a completed job.
COMPLETED = "4"


@dataclass(frozen=True)
class Outcome:
    pilots: int
    submitted: int
    """Submits answered with success."""
    completed: int
    """Pilots that reported COMPLETED with their output written back."""
    half_made: int
    """Jobs left ``created`` (never submitted) once the run is over."""
    twice: int
    """Sandboxes with more than one job that was submitted."""
    requests: int
    faults: int
    seconds: float
    submit_errors: Dict[str, int]

    @property
    def completed_share(self) -> float:
        return self.completed / self.pilots if self.pilots else 1.0


def _ad(iwd: str, i: int) -> str:
    return (f'[ Cmd = "/bin/true"; Iwd = "{iwd}"; Out = "p{i}.out"; Err = "p{i}.err"; '
            f'JobDirectory = "home_bl_chaos_{i}.0"; RequestMemory = 2000; BatchRuntime = 3600; '
            f'Environment = "PODGAHP_SIM_STDOUT=pilot{i}"; GridResource = "batch lancium" ]')


def run(sim: LanciumSim, key_file: str, workdir: str, pilots: int, rate: float, seed: int = 1,
        deadline_s: float = 240.0) -> Outcome:
    """Run ``pilots`` pilots with a share ``rate`` of all API requests failing; see the module doc."""
    env = gahp_env(workdir, PODGAHP_LANCIUM_BASE_URL=sim.url, PODGAHP_LANCIUM_API_KEY_FILE=key_file,
                   PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS="0.5", PODGAHP_LANCIUM_BACKOFF_SECONDS="0.01",
                   PODGAHP_LANCIUM_BACKOFF_MAX_SECONDS="0.05", PODGAHP_LANCIUM_REQUEST_TIMEOUT_SECONDS="10")
    sim.clear_log()
    sim.chaos(rate, seed=seed)
    started = time.monotonic()
    job_ids: Dict[int, str] = {}
    errors: Counter[str] = Counter()
    with GahpProcess([script("lancium_gahp")], env=env, cwd=workdir) as gahp:
        gahp.start()
        assert gahp.command("ASYNC_MODE_ON") == ["S"]
        for i in range(pilots):
            assert gahp.command("BLAH_JOB_SUBMIT", str(i + 2), _ad(workdir, i)) == ["S"]
        results = gahp.wait_results([str(i + 2) for i in range(pilots)], timeout=deadline_s)
        for i in range(pilots):
            rc, err, job_id = results[str(i + 2)]
            if rc == "0":
                job_ids[i] = job_id
            else:
                errors[err.split(":")[0][:80]] += 1
        done: Dict[int, bool] = {}
        request = 100000
        end = started + deadline_s
        while len(done) < len(job_ids) and time.monotonic() < end:
            asked: Dict[str, int] = {}
            for i, job_id in job_ids.items():
                if i not in done:
                    request += 1
                    asked[str(request)] = i
                    assert gahp.command("BLAH_JOB_STATUS", str(request), job_id) == ["S"]
            answers = gahp.wait_results(list(asked), timeout=deadline_s)
            for request_id, i in asked.items():
                fields = answers[request_id]
                if fields[0] == "0" and fields[2] == COMPLETED:
                    done[i] = True
            if len(done) < len(job_ids):
                time.sleep(0.2)  # a probe interval; the simulated jobs advance meanwhile
    seconds = time.monotonic() - started
    sim.chaos(0)
    faults = sum(1 for r in sim.request_log if r.status in (0, 429, 500, 502, 503, 504))
    requests = len(sim.request_log)
    completed = sum(1 for i in done if _read(os.path.join(workdir, f"p{i}.out")) == f"pilot{i}")
    ran: Counter[str] = Counter()
    half_made = 0
    for job in sim.jobs().values():
        sandbox = key_of_name(job.get("name"))  # the key of one sandbox
        if sandbox is None:
            continue
        if job["status"] == "created":
            half_made += 1
        elif job.get("submitted_at"):
            ran[sandbox] += 1
    return Outcome(pilots=pilots, submitted=len(job_ids), completed=completed, half_made=half_made,
                   twice=sum(1 for n in ran.values() if n > 1), requests=requests, faults=faults,
                   seconds=seconds, submit_errors=dict(errors))


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def table(outcomes: List[Outcome], rates: List[float]) -> str:
    lines = ["| faults | pilots | submitted | completed | half-made | twice | API requests | faults hit | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for rate, o in zip(rates, outcomes):
        lines.append(f"| {rate:.0%} | {o.pilots} | {o.submitted} | {o.completed} ({o.completed_share:.1%}) | "
                     f"{o.half_made} | {o.twice} | {o.requests} | {o.faults} | {o.seconds:.1f} |")
    return "\n".join(lines)
