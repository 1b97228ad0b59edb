"""The built-in sample pilots ``podgahp routes check`` routes: one per kind of shipped route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple




# --------------------------------------------------------------------------------------------
# Sample pilots

@dataclass(frozen=True)
class Sample:
    """A pilot job ad (long form) to route, and what it stands for."""

    name: str
    description: str
    ad: str


def _pilot(cluster: int, extra: str) -> str:
    # What the router's own constraint needs (Owner, JobStatus, ProcId, JobUniverse, Requirements)
    # plus what a CE's schedd holds for a pilot that arrived from a factory.
    return (
        f"ClusterId = {cluster}\n"
        "ProcId = 0\n"
        'Owner = "pilot"\n'
        "JobStatus = 1\n"
        "JobUniverse = 5\n"
        "Requirements = true\n"
        f'GlobalJobId = "ce.example.org#{cluster}.0#1767225600"\n'
        "QDate = 1767225600\n"
        "EnteredCurrentStatus = 1767225600\n"
        'Cmd = "/home/pilot/pilot.sh"\n'
        'Args = "-v"\n'
        + ('' if "Environment = " in extra else 'Environment = ""\n') +
        'In = "/dev/null"\n'
        'Out = "pilot.out"\n'
        'Err = "pilot.err"\n'
        'Iwd = "/home/pilot"\n'
        "RequestCpus = 1\n"
        "RequestMemory = 2048\n"
        + extra
    )


#: Built-in pilots: one per kind of route the example routes (routes/) provide.
SAMPLES: Tuple[Sample, ...] = (
    Sample("plain", "a pilot with no CE attributes: 1 core, 2048 MiB, 1 GB of disk",
           _pilot(1, "RequestDisk = 1000000\n")),
    Sample("gpu", "an 8-core, 16000 MiB, 1-GPU pilot (xcount, maxMemory, RequestGPUs), 20 GB of disk, 48 h",
           _pilot(2, "RequestDisk = 20000000\nxcount = 8\nmaxMemory = 16000\nRequestGPUs = 1\n"
                     "maxWallTime = 2880\n")),
    Sample("opportunistic", 'a 4-core, 8000 MiB pilot asking for queue "opportunistic"',
           _pilot(3, 'RequestDisk = 4000000\nxcount = 4\nmaxMemory = 8000\nqueue = "opportunistic"\n')),
    Sample("lancium", 'a 2-core, 4000 MiB pilot asking for queue "lancium"',
           _pilot(4, 'RequestDisk = 2000000\nxcount = 2\nmaxMemory = 4000\nqueue = "lancium"\n')),
    Sample("nodisk", "a pilot submitted without request_disk (HTCondor 23.x: RequestDisk = DiskUsage, 50 KiB)",
           _pilot(5, "DiskUsage = 50\nRequestDisk = DiskUsage\n")),
    Sample("minwalltime", "a pilot that must run 60 min (minWalltime) of its 120 (maxWallTime), with its own "
                          "environment",
           _pilot(6, 'RequestDisk = 1000000\nminWalltime = 60\nmaxWallTime = 120\n'
                     'Environment = "PILOT_GROUP=atlas"\n')),
    Sample("wholenode", "a pilot asking for a whole node (WantWholeNode)",
           _pilot(7, "RequestDisk = 1000000\nWantWholeNode = true\n")),
)


def samples_text(samples: Sequence[Sample] = SAMPLES) -> str:
    """The samples as one job-ads file (long form, a blank line after each ad)."""
    return "".join(s.ad + "\n" for s in samples)


