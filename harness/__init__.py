"""Real HTCondor daemons for podgahp's live tests and demo.

`harness.rootfs` finds a native HTCondor (>= 23) or builds a Debian root filesystem that carries one,
and installs podgahp into it; `harness.pool` runs a CE-like personal pool (collector, schedd,
JobRouter, and the gridmanager the schedd starts) from the files in `ce-config/`;
`harness.controlplane` builds the real Kubernetes control plane's binaries once per machine from
Debian's sources (`python -m harness control-plane`, `make k8s-control-plane`).

The harness is not installed with podgahp and needs only the Python standard library on the host;
it must be run as root (chroot, mount, starting condor_master). Command line: `python -m harness`.
"""

from __future__ import annotations

from harness.pool import Pool, PoolError
from harness.rootfs import HarnessError, Installation, get_installation, series_from_env

__all__ = [
    "HarnessError",
    "Installation",
    "Pool",
    "PoolError",
    "get_installation",
    "series_from_env",
]
