"""Benchmark: what the job-ad writes of ``podgahp reap`` cost the CE's schedd (gahp/ce/jobads.py). N grid jobs
of ``batch k8s`` in a real schedd (a CE-like pool of the Debian trixie root), each with a ``GridJobId``
naming its pod, and a census of N running pods on three nodes; then, through the bindings as the
schedd cron job does it (its query of the grid jobs, the plan, the grouped edits):

* the first pass (every job gets its pod, node, phase and reason),
* a pass with no change,
* a pass in which a tenth of the pilots changed phase (Running to Succeeded),
* a pass after a job owner forged the attributes of a tenth of the jobs.

Reported per pass: jobs written, schedd transactions, what one transaction per job would have been
(condor_qedit job by job), seconds for the schedd's query, for the writes and for the pass. The
gridmanager is replaced by a process that does nothing, so that only the pass writes the ads; the
census is made in the process (what it costs is the census' own, k8s_gahp.py / e2e_ce.py), so the
figures are the schedd's side alone.

    .venv/bin/python benchmarks/reap_job_ads.py --pilots 1000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench import load  # noqa: E402
from harness import Pool, get_installation  # noqa: E402

#: Runs inside the root with the pool's CONDOR_CONFIG and podgahp's virtualenv: the passes, as JSON.
PASSES = r'''
import datetime, json, sys, time
from typing import FrozenSet
from gahp.backends.base import Census, CeView, RemoteJob
from gahp.ce.jobads import READ, JobAdSettings
from gahp.ce.reap import reap_views
from gahp.core.schedd import edit_jobs, grid_jobs

cluster, count = int(sys.argv[1]), int(sys.argv[2])
now = datetime.datetime.now(datetime.timezone.utc)

def pods(changed):
    return [RemoteJob(job_id=f"k8s/pilots/pilot-{p}-1", name=f"pilot-{p}-1", queue="cpu",
                      state="Succeeded" if p < changed else "Running", health="Running", alive=True,
                      sandbox=f"bench_{cluster}.{p}_1", created=now, listed_at=now, node=f"cpu-{p % 3 + 1}")
            for p in range(count)]

class View(CeView):
    backend, ce_name = "k8s", "bench"
    def __init__(self, jobs): self.jobs = jobs
    def census(self, held: FrozenSet[str]) -> Census: return Census("k8s", jobs=self.jobs)
    def delete(self, job): raise AssertionError("the benchmark's pods are all held")

def one(name, jobs):
    made = []
    def edit(ids, attribute, expression):
        made.append(len(ids))
        return edit_jobs(ids, attribute, expression)
    start = time.monotonic()
    grid = grid_jobs(None, None, READ)
    queried = time.monotonic()
    result = reap_views([View(jobs)], grid, 600, job_ads=JobAdSettings(), edit=edit)
    done = time.monotonic()
    assert not result.errors and result.deleted == 0, result.errors
    return {"pass": name, "jobs": result.job_ads.jobs, "transactions": result.job_ads.transactions,
            "per_job": result.job_ads.jobs, "query_s": queried - start, "write_s": done - queried,
            "pass_s": done - start, "grid_jobs": grid.jobs}

rows = [one("first pass", pods(0)), one("no change", pods(0)), one(f"{count // 10} changed phase", pods(count // 10))]
print(json.dumps(rows))
'''

#: The forged attributes of a tenth of the jobs, then the pass that puts them right.
FORGE = r'''
import sys
from gahp.core.schedd import locate
cluster, count = int(sys.argv[1]), int(sys.argv[2])
schedd = locate()
ids = [f"{cluster}.{p}" for p in range(0, count, 10)]
for attribute, value in (("PodgahpNode", '"gpu-1"'), ("PodgahpPhase", '"Failed"')):
    schedd.edit(ids, attribute, value)
'''


def submit_description(count: int, home: str) -> str:
    return "\n".join([
        "universe = grid", "grid_resource = batch k8s", "executable = /bin/true", f"initialdir = {home}",
        '+GridJobId = "batch k8s bench_$(Cluster).$(Process)_1 k8s/pilots/pilot-$(Process)-1"', f"queue {count}"]) + "\n"


def run(pilots: int) -> List[Dict[str, object]]:
    installation = get_installation("trixie")
    installation.acquire()
    try:
        installation.install_podgahp()
        files = {"no-gridmanager": "#!/bin/sh\nexec sleep 86400\n", "passes.py": PASSES, "forge.py": FORGE}
        with Pool(installation, extra_config="GRIDMANAGER = $(LOCAL_DIR)/no-gridmanager\n", files=files,
                  name="bench-reap-job-ads") as pool:
            home = pool.user_dir("pilot")
            cluster = pool.submit(submit_description(pilots, home), cwd=home)
            ads = pool.q(f"ClusterId == {cluster}", ["ProcId", "GridJobId"])
            assert len(ads) == pilots and all(str(ad["GridJobId"]).endswith(f"pilot-{ad['ProcId']}-1") for ad in ads)
            python = f"{installation.prefix}/bin/python"
            out = pool.run([python, f"{pool.local_dir}/passes.py", str(cluster), str(pilots)], timeout=1200)
            rows: List[Dict[str, object]] = json.loads(out.stdout)
            pool.run([python, f"{pool.local_dir}/forge.py", str(cluster), str(pilots)], timeout=600)
            again = pool.run([python, "-c", _forged_pass(), str(cluster), str(pilots)], timeout=600)
            rows += json.loads(again.stdout)
            return rows
    finally:
        installation.release()


def _forged_pass() -> str:
    """The passes' script with only the pass after the forgery (the phases as the last pass left them)."""
    head, _ = PASSES.rsplit("rows = ", 1)
    return head + (f'print(json.dumps([one(f"{{count // 10}} forged by their owner", pods(count // 10))]))\n')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pilots", type=int, default=1000)
    args = parser.parse_args()
    before = load()
    rows = run(args.pilots)
    after = load()
    print(f"podgahp reap's job-ad writes, {args.pilots} pilots (HTCondor {get_installation('trixie').condor_version}):\n")
    print("| pass | jobs written | schedd transactions | one per job | schedd query s | writes s | pass s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['pass']} | {row['jobs']} | {row['transactions']} | {row['per_job']} | {row['query_s']:.2f} | "
              f"{row['write_s']:.2f} | {row['pass_s']:.2f} |")
    print(f"\n{before} before, {after} after")


if __name__ == "__main__":
    main()
