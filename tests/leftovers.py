"""The simulated cluster with real containers in a process of its own (``podgahp sim k8s --runtime
runc``), and what its runtime leaves on the machine: containers' processes, mounts, cgroups, files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Mapping

from podgahp_sim.k8s.cluster import Cluster
from podgahp_sim.k8s.runc import CGROUP_PARENT, cgroup_dirs


def machine_leftovers(sim_dir: str, instance: str) -> List[str]:
    """Containers' processes, mounts, cgroups and files of a simulator's runtime still on the machine."""
    found = []
    with open("/proc/self/mountinfo") as f:
        found += ["mount " + line.split()[4] for line in f if line.split()[4].startswith(sim_dir)]
    for directory in cgroup_dirs(os.path.join(CGROUP_PARENT, instance)).values():
        if os.path.exists(directory):
            found.append("cgroup " + directory)
    if os.path.exists(os.path.join(sim_dir, instance)):
        found.append("directory " + os.path.join(sim_dir, instance))
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f, open("/proc/%s/cgroup" % entry, "rb") as g:
                    command = f.read()
                    if instance.encode() in command + g.read():
                        found.append("process %s %s" % (entry, command.replace(b"\0", b" ").decode()[:200]))
            except OSError:
                continue
    return found


def cgroups_of(kubelet: Cluster, uid: str) -> List[str]:
    """The cgroup directories of a pod's containers, as the kubelet that runs them made them."""
    run = kubelet.runs.get(uid)
    return [directory for c in (run.containers if run is not None else []) if c.real is not None
            for directory in cgroup_dirs(c.real.cgroup).values()]


def processes_in(cgroups: List[str]) -> List[int]:
    """The processes in these cgroups (none in one removed: a cgroup is removed only once empty)."""
    found: List[int] = []
    for directory in cgroups:
        try:
            with open(os.path.join(directory, "cgroup.procs")) as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return found


def instance_of(runtime_dir: Path, proc: "subprocess.Popen[str]") -> str:
    """The directory name (``<pid>-<hex>``) of the simulator process ``proc`` in ``runtime_dir``."""
    return next(name for name in os.listdir(runtime_dir) if name.startswith("%d-" % proc.pid))


def start_runc_sim(directory: Path, runtime_dir: Path, tag: str, images: Mapping[str, str],
                   *args: str) -> "subprocess.Popen[str]":
    """``podgahp sim k8s --runtime runc`` in a process of its own, once it serves; its kubeconfig is
    ``directory/kubeconfig-<tag>``, its standard error ``directory/sim-<tag>.err``."""
    kubeconfig = directory / ("kubeconfig-" + tag)
    images_args = [arg for name, root in images.items() for arg in ("--image", "%s=%s" % (name, root))]
    with open(directory / ("sim-%s.err" % tag), "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from gahp.cli import main; main()", "sim", "k8s", "--kubeconfig", str(kubeconfig),
             "--runtime", "runc", *images_args, "--runtime-dir", str(runtime_dir), *args],
            stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the simulator prints where it serves once it does (or exits)
    assert line.startswith("simulated Kubernetes API at"), (line, (directory / ("sim-%s.err" % tag)).read_text())
    return proc


def stop_sim(proc: "subprocess.Popen[str]") -> None:
    """Stop a simulator started by :func:`start_runc_sim` (if it still runs) and close its pipe."""
    if proc.poll() is None:
        proc.terminate()
        proc.wait(60)
    assert proc.stdout is not None
    proc.stdout.close()
