"""Benchmark: what the route check costs a pilot, reading who submitted it from the schedd's audit log.

Writes an audit log as a busy CE's schedd writes it (a user connection every 0.3 s, each with its
command, identity and submit lines), then a burst of router submits, in HTCondor 23's form (each with
its own command and ``condor@family`` identity) or 25's (no identity line at all, the one that
reads furthest back), and checks every router submit as the GAHP does (``gahp.core.auditlog``). CPU is
this process's, per check, the median of ``--repeat`` runs.

    .venv/bin/python benchmarks/audit_log.py --users 200000 --burst 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench import load  # noqa: E402
from gahp.core.auditlog import AuditLog  # noqa: E402


def write_log(path: Path, users: int, burst: int, series: str, start: float) -> float:
    """The log; returns the time of the burst's first submit."""
    def at(s: float) -> str:
        return time.strftime("%m/%d/%y %H:%M:%S", time.localtime(start + s))
    with path.open("w") as f:
        for i in range(users):
            s, cid = i * 0.3, 2 * i + 10
            f.write(f"{at(s)} (cid:{cid}) Command=QMGMT_WRITE_CMD, peer=<127.0.0.1:1>\n"
                    f"{at(s)} (cid:{cid}) AuthMethod=FS, AuthId=u, CondorId=u@users.htcondor.org\n"
                    f"{at(s)} (cid:{cid}) Submitting new job {i + 1}.0\n")
        base = users * 0.3 + 5
        for k in range(burst):
            cid = 2 * users + 100 + k
            if series == "23":
                f.write(f"{at(base + k / 100)} (cid:{cid}) Command=QMGMT_WRITE_CMD, peer=<127.0.0.1:2>\n"
                        f"{at(base + k / 100)} (cid:{cid}) AuthMethod=FAMILY, AuthId=(null), CondorId=condor@family\n")
            f.write(f"{at(base + k / 100)} (cid:{cid}) Submitting new job {users + 1000 + k}.0\n")
    return base


def run(users: int, burst: int, series: str) -> float:
    """CPU seconds per check of one run."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "AuditLog"
        start = time.time() - users * 0.3 - 600
        base = write_log(path, users, burst, series, start)
        log = AuditLog(str(path))
        began = time.process_time()
        for k in range(burst):
            found = log.submitter(f"{users + 1000 + k}.0", start + base + k / 100, since=start - 10)
            assert found is not None and found.identity in (None, "condor@family"), found
        return (time.process_time() - began) / burst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=200000, help="user connections before the burst")
    parser.add_argument("--burst", type=int, default=1000, help="router submits in the burst")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"\n### The route check's audit-log read: {args.burst} router submits after {args.users:,} user "
          f"connections\n")
    print("| HTCondor's log form | CPU per pilot (ms) |")
    print("|---|---|")
    before = load()
    for series in ("23", "25"):
        cpu = statistics.median(run(args.users, args.burst, series) for _ in range(args.repeat))
        print(f"| {series}.x ({'router logged as condor@family' if series == '23' else 'no identity line'}) "
              f"| {cpu * 1000:.2f} |")
    print(f"\n{before} before, {load()} after")


if __name__ == "__main__":
    main()
