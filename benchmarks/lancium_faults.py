"""Benchmark: lancium_gahp driven over its protocol against the simulated Lancium service with faults.

For each fault rate, submits N pilots through the real GAHP process (as the gridmanager would),
polls their status until they complete, and reports how many completed, how many Lancium jobs
were left half-made (``created``) or made twice for one pilot, and the API requests spent. A share
of the faults (30 %) are lost answers: the service acted, then the answer never arrived.

    .venv/bin/python benchmarks/lancium_faults.py --pilots 300 --rates 0 0.1 0.2 0.3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from podgahp_sim.lancium import LanciumSim, LanciumSimSettings  # noqa: E402
from bench import load  # noqa: E402
from lancium_pilots import run, table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pilots", type=int, default=300)
    parser.add_argument("--rates", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"`benchmarks/lancium_faults.py`: {args.pilots} pilots per fault rate; {load()} at the start")
    outcomes = []
    for rate in args.rates:
        settings = LanciumSimSettings(tick=0.01, submit_seconds=0.02, queue_seconds=0.05, run_seconds=0.3,
                                      delete_seconds=3600, output_prepare_polls=1, total_cores=100000)
        with LanciumSim(settings) as sim, tempfile.TemporaryDirectory() as tmp:
            key = os.path.join(tmp, "lancium.key")
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(sim.api_key + "\n")
            outcomes.append(run(sim, key, tmp, args.pilots, rate, seed=args.seed, deadline_s=600))
    print(table(outcomes, args.rates))
    print(f"{load()} at the end")


if __name__ == "__main__":
    main()
