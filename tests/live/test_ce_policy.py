"""The CE emulation's periodic policy against the real HTCondor-CE's, job by job.

HTCondor-CE's ``config/01-ce-router-defaults.conf`` (v23.10.18 and HEAD) removes a job when
1. it has been held for more than 24 hours (``JobStatus == 5``, ``EnteredCurrentStatus``);
2. it is a source job the JobRouter routed (``RoutedToJobId`` defined), job retries are off, and it
   is idle again after one start or has started more than once (``NumJobStarts``);
3. it completed more than ``COMPLETED_JOB_EXPIRATION`` days ago;
4. it is a running vanilla job past its wall-time limit, counted from ``JobCurrentStartDate``:
   ``maxWalltime`` minutes when defined, else ``BatchRuntime`` seconds, else
   ``ROUTED_JOB_MAX_TIME`` minutes;
the reason naming the first clause that holds. Its ``SYSTEM_PERIODIC_HOLD`` does not parse, so no
hold policy applies. :func:`real_ce_removes` states those rules in Python; the test evaluates
podgahp's emulation (gahp/data/ce-router-defaults.conf) with the HTCondor of each series on every
combination of the attributes involved and asserts the same decision and reason for each job.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any, Dict, List, Optional

import pytest

from harness import Installation

pytestmark = pytest.mark.live

HOUR = 3600
DAY = 24 * HOUR

#: Evaluates SYSTEM_PERIODIC_REMOVE(_REASON) of the configuration in CONDOR_CONFIG on job ads (JSON
#: on stdin) with the installation's own HTCondor bindings; the ads' times are ages in seconds.
EVALUATE = """
import json, subprocess, sys, time
import classad2
def knob(name):
    proc = subprocess.run(["condor_config_val", name], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None
remove, reason, hold = knob("SYSTEM_PERIODIC_REMOVE"), knob("SYSTEM_PERIODIC_REMOVE_REASON"), knob("SYSTEM_PERIODIC_HOLD")
now = int(time.time())
out = []
for job in json.load(sys.stdin):
    ad = classad2.ClassAd()
    for name, value in job.items():
        if name.endswith("Age"):
            ad[name[:-3]] = now - value
        else:
            ad[name] = value
    removed = classad2.ExprTree(remove).eval(ad)
    why = classad2.ExprTree(reason).eval(ad) if removed is True else None
    out.append([removed is True, why if isinstance(why, str) else None])
print(json.dumps({"hold": hold, "results": out}))
"""

REASON_WORDS = {1: "hold state for 24 hours", 2: "disabled job retries", 3: "job completed over 30 days ago",
                4: "exceeded allowed walltime"}


def real_ce_removes(job: Dict[str, Any], retries: bool = False, expiration_days: int = 30,
                    max_time_min: int = 4320) -> Optional[int]:
    """The clause of the real CE's SYSTEM_PERIODIC_REMOVE that removes ``job`` (None: kept)."""
    status, starts = job["JobStatus"], job["NumJobStarts"]
    if status == 5 and job["EnteredCurrentStatusAge"] > DAY:
        return 1
    if "RoutedToJobId" in job and not retries and ((status == 1 and starts == 1) or starts > 1):
        return 2
    if status == 4 and job["EnteredCurrentStatusAge"] > expiration_days * DAY:
        return 3
    if "maxWalltime" in job:
        limit = job["maxWalltime"] * 60
    else:
        limit = job.get("BatchRuntime", max_time_min * 60)
    if job["JobUniverse"] == 5 and status == 2 and job["JobCurrentStartDateAge"] > limit:
        return 4
    return None


def jobs() -> List[Dict[str, Any]]:
    """Every combination of the attributes the rules read (ages kept well away from the limits)."""
    out = []
    for status, starts, kind, entered, universe, started, walltime, runtime in itertools.product(
            (1, 2, 4, 5), (0, 1, 2), ("source", "routed copy", "other"), (10 * 60, 25 * HOUR, 31 * DAY),
            (5, 9), (HOUR, 5 * HOUR, 4 * DAY), (None, 120), (None, 3 * HOUR)):
        job: Dict[str, Any] = {"JobStatus": status, "NumJobStarts": starts, "EnteredCurrentStatusAge": entered,
                               "JobUniverse": universe, "JobCurrentStartDateAge": started}
        if kind == "source":
            job["RoutedToJobId"] = "12.0"
        elif kind == "routed copy":
            job.update(RoutedFromJobId="11.0", RoutedBy="htcondor-ce", RoutedJob=True)
        if walltime is not None:
            job["maxWalltime"] = walltime
        if runtime is not None:
            job["BatchRuntime"] = runtime
        out.append(job)
    return out


@pytest.mark.parametrize("retries", [False, True], ids=["no-retries", "retries"])
def test_periodic_remove_is_the_real_ces(acquired: Installation, retries: bool) -> None:
    inst = acquired
    work = f"/tmp/podgahp-policy-{uuid.uuid4().hex[:8]}"
    inst.host_path(work).mkdir(parents=True)
    try:
        inst.host_path(f"{work}/condor_config").write_text(
            f"include : {inst.src_dir}/gahp/data/ce-router-defaults.conf\n"
            f"ENABLE_JOB_RETRIES = {retries}\n")
        inst.host_path(f"{work}/evaluate.py").write_text(EVALUATE)
        cases = jobs()
        started = time.monotonic()
        proc = inst.run(["python3", f"{work}/evaluate.py"], input=json.dumps(cases),
                        env={"CONDOR_CONFIG": f"{work}/condor_config"}, timeout=300)
        answer = json.loads(proc.stdout)
    finally:
        import shutil

        shutil.rmtree(inst.host_path(work), ignore_errors=True)
    assert time.monotonic() - started < 240  # the ages above stay far from every limit meanwhile
    assert answer["hold"] is None  # no hold policy, as on a real CE
    mismatches = []
    removed = 0
    for job, (emulated, reason) in zip(cases, answer["results"]):
        clause = real_ce_removes(job, retries=retries)
        removed += clause is not None
        if emulated != (clause is not None) or (
                clause is not None and not (reason or "").startswith("CE job removed by SYSTEM_PERIODIC_REMOVE due to ")
                or clause is not None and REASON_WORDS[clause] not in (reason or "")):
            mismatches.append((job, clause, emulated, reason))
    assert not mismatches, mismatches[:5]
    assert removed > 100 and len(cases) - removed > 100  # both outcomes are exercised
