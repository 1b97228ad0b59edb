"""The simulated cluster with real containers in a process of its own (``podgahp sim k8s --runtime
runc``, with the simulated API server or ``--control-plane``), and what it leaves on the machine:
containers' processes, mounts, cgroups, files; the control plane's processes and directory; the
listening sockets of them all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Mapping, Optional, Tuple

from podgahp_sim.k8s.cluster import Cluster
from podgahp_sim.k8s.runc import CGROUP_PARENT, cgroup_dirs
from podgahp_sim.kube.controlplane import processes_of


def machine_leftovers(sim_dir: str, instance: str) -> List[str]:
    """Containers' processes, mounts, cgroups and files of a simulator's runtime still on the machine."""
    found = []
    below = os.path.join(sim_dir, instance) + "/"
    with open("/proc/self/mountinfo") as f:
        found += ["mount " + line.split()[4] for line in f if line.split()[4].startswith(below)]
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


def instances_of(runtime_dir: Path, proc: "subprocess.Popen[str]") -> List[str]:
    """The runtime directories (``<pid>-<hex>``) of the simulator process ``proc`` in ``runtime_dir``: one
    with the simulated API server, one per node with ``--control-plane``."""
    return sorted(name for name in os.listdir(runtime_dir) if name.startswith("%d-" % proc.pid))


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
    """The runtime directory of a simulator process that has one (the simulated API server's)."""
    (instance,) = instances_of(runtime_dir, proc)
    return instance


def _socket_inodes(pid: int) -> FrozenSet[int]:
    found = set()
    try:
        entries = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return frozenset()
    for fd in entries:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m:
            found.add(int(m.group(1)))
    return frozenset(found)


def listening_sockets() -> Dict[int, str]:
    """Inode -> ``address:port`` of every listening TCP socket of the machine's network namespace."""
    found: Dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    address, port = fields[1].rsplit(":", 1)
                    found[int(fields[9])] = "%s:%d" % (address, int(port, 16))
    return found


@dataclass(frozen=True)
class Harness:
    """What one ``podgahp sim k8s --runtime runc`` process runs on the machine, as seen while it lives."""

    runtime_dir: str
    runtimes: Tuple[str, ...]
    """Its runtimes' directory names in ``runtime_dir``."""
    control_plane: Optional[Path]
    """Its control plane's directory (``--control-plane``)."""
    sockets: FrozenSet[int]
    """The inodes of the sockets its processes (itself, the control plane's, the containers') listen on."""


def harness_of(proc: "subprocess.Popen[str]", runtime_dir: Path, control_planes: Optional[Path] = None) -> Harness:
    """A snapshot of a running simulator process: its runtimes, its control plane under ``control_planes``
    (the ``PODGAHP_CONTROL_PLANE_DIR`` it was given), the sockets its processes listen on."""
    runtimes = tuple(instances_of(runtime_dir, proc))
    planes = [control_planes / name for name in os.listdir(control_planes)
              if name.startswith("%d-" % proc.pid)] if control_planes is not None and control_planes.is_dir() else []
    plane = planes[0] if planes else None
    pids = {proc.pid, *(processes_of(plane) if plane is not None else [])}
    for runtime in runtimes:
        pids.update(int(item.split()[1]) for item in machine_leftovers(str(runtime_dir), runtime)
                    if item.startswith("process "))
    inodes = frozenset().union(*(_socket_inodes(pid) for pid in pids))
    return Harness(str(runtime_dir), runtimes, plane, frozenset(listening_sockets()) & inodes)


def harness_leftovers(harness: Harness) -> List[str]:
    """What of ``harness`` is still on the machine: its runtimes' containers (processes, mounts, cgroups,
    files), its control plane's processes and directory, and the ports they listened on."""
    found = [item for runtime in harness.runtimes for item in machine_leftovers(harness.runtime_dir, runtime)]
    if harness.control_plane is not None:
        for pid in processes_of(harness.control_plane):
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            found.append("process %d %s" % (pid, command[:200]))
        if harness.control_plane.exists():
            found.append("directory %s" % harness.control_plane)
    listening = listening_sockets()
    found += ["port %s" % listening[inode] for inode in sorted(harness.sockets) if inode in listening]
    return found


def start_runc_sim(directory: Path, runtime_dir: Path, tag: str, images: Mapping[str, str],
                   *args: str, control_planes: Optional[Path] = None) -> "subprocess.Popen[str]":
    """``podgahp sim k8s --runtime runc`` in a process of its own, once it serves; its kubeconfig is
    ``directory/kubeconfig-<tag>``, its standard error ``directory/sim-<tag>.err``. With ``args``
    ``--control-plane DIR``, its control plane's directory is made under ``control_planes``."""
    kubeconfig = directory / ("kubeconfig-" + tag)
    images_args = [arg for name, root in images.items() for arg in ("--image", "%s=%s" % (name, root))]
    env = dict(os.environ)
    if control_planes is not None:
        env["PODGAHP_CONTROL_PLANE_DIR"] = str(control_planes)
    with open(directory / ("sim-%s.err" % tag), "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from gahp.cli import main; main()", "sim", "k8s", "--kubeconfig", str(kubeconfig),
             "--runtime", "runc", *images_args, "--runtime-dir", str(runtime_dir), *args],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the simulator prints where it serves once it does (or exits)
    assert re.match(r"(simulated )?Kubernetes API at ", line), (line, (directory / ("sim-%s.err" % tag)).read_text())
    return proc


def stop_sim(proc: "subprocess.Popen[str]") -> None:
    """Stop a simulator started by :func:`start_runc_sim` (if it still runs) and close its pipe."""
    if proc.poll() is None:
        proc.terminate()
        proc.wait(60)
    assert proc.stdout is not None
    proc.stdout.close()
