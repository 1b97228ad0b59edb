"""Command line of the harness (run as root from the repository root).

    python -m harness build [SERIES...]     build or find installations, install podgahp into them
    python -m harness pool [--series S] [--config FILE]...
                                            start a CE-like pool and keep it up until Ctrl-C
    python -m harness image [SERIES...]     make the pilot image of each series and print it as
                                            NAME=DIR for `podgahp sim k8s --runtime runc --image`
    python -m harness control-plane         build (once, cached) kube-apiserver, kube-controller-manager
                                            and kube-scheduler from Debian's sources, etcd from Debian;
                                            print the directory for `podgahp sim k8s --control-plane`

SERIES defaults to PODGAHP_CONDOR_SERIES (see harness.rootfs).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import List, Optional, Sequence

from harness.pool import Pool
from harness.rootfs import HarnessError, get_installation, series_from_env


def build(names: List[str]) -> int:
    for name in names or series_from_env():
        started = time.monotonic()
        inst = get_installation(name)
        inst.acquire()
        try:
            inst.install_podgahp()
            print(f"{name}: {inst.root}: HTCondor {inst.condor_version}, {inst.bin('podgahp')} "
                  f"({time.monotonic() - started:.0f} s)")
        finally:
            inst.release()
    return 0


def image(names: List[str]) -> int:
    from harness.image import pilot_image

    for name in names or series_from_env():
        reference, directory = pilot_image(get_installation(name))
        print(f"{reference}={directory}")
    return 0


def control_plane() -> int:
    from harness.controlplane import build_control_plane

    print(build_control_plane())
    return 0


def pool(series: str, configs: Sequence[str], keep: bool) -> int:
    extra = "".join(open(path).read() + "\n" for path in configs)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with Pool(series, extra_config=extra, name="manual", keep=keep) as p:
        inst = p.installation
        enter = f"chroot {inst.root} " if inst.chroot else ""
        print(f"pool {p.name} up: HTCondor {inst.condor_version}, CONDOR_CONFIG={p.condor_config}\n"
              f"logs: {p.path(p.log_dir)}\n"
              f"tools: {enter}env CONDOR_CONFIG={p.condor_config} condor_q -allusers\n"
              f"Ctrl-C stops the pool.", flush=True)
        try:
            while not stop and p.master_running:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="build or find installations and install podgahp")
    p_build.add_argument("series", nargs="*")
    p_image = sub.add_parser("image", help="make the pilot image of each series, print NAME=DIR")
    p_image.add_argument("series", nargs="*")
    sub.add_parser("control-plane", help="build the Kubernetes control plane once, print its directory")
    p_pool = sub.add_parser("pool", help="run a CE-like pool until Ctrl-C")
    p_pool.add_argument("--series", default=None, help="default: the first of PODGAHP_CONDOR_SERIES")
    p_pool.add_argument("--config", action="append", default=[], help="extra configuration file (repeatable)")
    p_pool.add_argument("--keep", action="store_true", help="keep the per-run directory")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            return build(args.series)
        if args.command == "image":
            return image(args.series)
        if args.command == "control-plane":
            return control_plane()
        return pool(args.series or series_from_env()[0], args.config, args.keep)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
