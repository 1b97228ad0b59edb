"""Run a command several times while every core is kept busy, to find tests that depend on timing.

``make stress-unit`` runs the non-live suite this way: a test that passes only when it gets the CPU at
the right moment (a watch opened "soon enough", a thread that "surely" ran) fails here. The load is
``stress-ng --cpu N`` when stress-ng is installed, else one busy process per core; it is stopped when
the runs end, whatever their outcome.

    python tests/contention.py [--runs 3] [--workers N] -- COMMAND ARGS...

Every run is made; exits 1 when any failed (each run's summary names its failures), 0 when all passed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import List


def start_load(workers: int) -> List[subprocess.Popen]:
    """Processes keeping ``workers`` cores busy, each in a process group of its own."""
    stress = shutil.which("stress-ng")
    if stress:
        return [subprocess.Popen([stress, "--cpu", str(workers), "--cpu-method", "all", "--quiet"],
                                 start_new_session=True)]
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(workers)]


def stop_load(procs: List[subprocess.Popen]) -> None:
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="how many times to run the command (default 3)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="busy workers (default: one per core)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    load = start_load(args.workers)
    failed = []
    try:
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            print(f"contention: run {run}/{args.runs} with {args.workers} busy workers: {' '.join(command)}",
                  flush=True)
            status = subprocess.call(command)
            print(f"contention: run {run} {'passed' if status == 0 else f'failed ({status})'} in "
                  f"{time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.1f}", flush=True)
            if status != 0:
                failed.append(run)
    finally:
        stop_load(load)
    print(f"contention: {args.runs - len(failed)} of {args.runs} runs passed"
          + (f" (failed: {', '.join(map(str, failed))})" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
