"""podgahp's demo: by default, users' jobs run on pilots that a local CE started as pods whose
containers really run (``demo/story.py``); ``--control-plane`` tells that story on the real
Kubernetes control plane (its API server, scheduler and controllers, the simulator's kubelets as nodes).

With ``--factory``, a local CE-like pool routes a batch of a factory's pilots to podgahp, which runs
them as pods of the simulated cluster whose containers are modelled (every failure shape, fast);
``--kubeconfig`` points that CE at a real cluster instead. HTCondor comes from the harness (a native installation, or a Debian
root filesystem built on first use). The pilots are submitted like a factory's: vanilla jobs with
``xcount``/``maxMemory``/``RequestGPUs``, routed by the shipped routes in ``routes/``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.pool import Pool  # noqa: E402
from harness.rootfs import HarnessError, Installation, get_installation, native_condor_version  # noqa: E402

NAMESPACE = "pilots"

POD_TEMPLATES = {
    "cpu": """\
apiVersion: v1
kind: Pod
metadata:
  labels: {site: demo}
spec:
  containers:
  - name: pilot
    image: hub.opensciencegrid.org/osg-htc/ospool-ep:latest
""",
    "gpu": """\
apiVersion: v1
kind: Pod
spec:
  nodeSelector: {demo/gpu: "true"}
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  containers:
  - name: pilot
    image: hub.opensciencegrid.org/osg-htc/ospool-ep:cuda
""",
    "opportunistic": """\
apiVersion: v1
kind: Pod
spec:
  containers:
  - name: pilot
    image: hub.opensciencegrid.org/osg-htc/ospool-ep:latest
""",
}


@dataclass(frozen=True)
class Pilot:
    label: str
    submit: str


def pilots(count: int, iwd: str, rng: random.Random) -> List[Pilot]:
    """A factory-like mix: plain pilots of several shapes, GPU pilots, opportunistic ones, one that
    fails and one that runs out of memory."""
    out = []
    for i in range(count):
        env = [f"PODGAHP_SIM_RUN_SECONDS={rng.randint(4, 12)}"]
        extra, label = [], "cpu"
        kind = i % 6
        if kind == 1:
            extra, label = ["request_GPUs = 1", "+xcount = 4", "+maxMemory = 8000"], "gpu"
        elif kind == 2:
            extra, label = ['+queue = "opportunistic"', "+xcount = 2", "+maxMemory = 4000"], "opportunistic"
        elif kind == 3 and i < 6:
            env.append("PODGAHP_SIM_EXIT_CODE=3")
            label = "exits 3"
        elif kind == 4 and i < 6:
            extra, label = ["+xcount = 1", "+maxMemory = 1000"], "OOM"
            env.append("PODGAHP_SIM_MEMORY_MIB=4000")
        else:
            extra = [f"+xcount = {rng.choice([1, 2, 4, 8])}", f"+maxMemory = {rng.choice([2000, 4000, 16000])}"]
        out.append(Pilot(label, "\n".join([
            "universe = vanilla",
            f"executable = {iwd}/pilot.sh",
            f"arguments = pilot-{i}",
            f"output = pilot-{i}.out",
            f"error = pilot-{i}.err",
            f"initialdir = {iwd}",
            f'environment = "{" ".join(env)}"',
            *extra,
            "queue",
        ]) + "\n"))
    return out


PILOT_SCRIPT = """#!/bin/sh
# A stand-in for a glidein: on a real cluster this starts the HTCondor startd.
echo "pilot $1 starting on $(hostname)"
"""


def routes_file() -> Path:
    candidates = sorted(p for p in (ROOT / "routes").glob("*.conf") if ".entries." not in p.name)
    if not candidates:
        raise SystemExit("no routes in routes/")
    return candidates[0]


def pool_config(installation: Installation, routes: Path, kubeconfig: str, real_cluster: bool) -> str:
    lines = [
        f"include : {installation.src_dir}/routes/{routes.name}",
        f"K8S_GAHP = {installation.bin('k8s_gahp')}",
        "PODGAHP_K8S_QUEUES = cpu gpu opportunistic",
        "PODGAHP_K8S_DEFAULT_QUEUE = cpu",
        f"PODGAHP_K8S_KUBECONFIG = {kubeconfig}",
        f"PODGAHP_K8S_NAMESPACE = {NAMESPACE}",
        "PODGAHP_K8S_CE_NAME = demo-ce",
        "PODGAHP_K8S_UNSCHEDULABLE_TIMEOUT_SECONDS = 60",
        "PODGAHP_K8S_DELETE_GRACE_SECONDS = 5",
        "PODGAHP_K8S_GPU_MAX_GPUS = 2",
        "PODGAHP_K8S_OPPORTUNISTIC_ALLOWED_PRIORITY_CLASSES = podgahp-opportunistic",
    ]
    for queue in POD_TEMPLATES:
        lines.append(f"PODGAHP_K8S_{queue.upper()}_POD_TEMPLATE = $(LOCAL_DIR)/pod-template-{queue}.yaml")
    if not real_cluster:
        lines.append("PODGAHP_K8S_FINISHED_RETENTION_SECONDS = 60")
    return "\n".join(lines) + "\n"


PHASE_OF_STATUS = {1: "idle", 2: "running", 3: "removed", 4: "completed", 5: "held", 6: "transferring"}


def render(rows: List[Tuple[str, ...]], headers: Tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*headers), fmt.format(*("-" * w for w in widths))] +
                     [fmt.format(*map(str, r)) for r in rows])


def table(pool: Pool, labels: Dict[int, str], sim: Optional[object]) -> Tuple[str, bool, List[Dict]]:
    """The live table and whether every pilot has reached an end."""
    attrs = ["ClusterId", "ProcId", "JobStatus", "RouteName", "GridJobId", "HoldReason", "ExitCode",
             "ExitBySignal", "ExitSignal", "ExitReason", "RoutedFromJobId", "RemoteWallClockTime"]
    routed = {j.get("RoutedFromJobId"): j for j in pool.jobs("RoutedFromJobId =!= undefined", attrs)}
    sources = pool.jobs(f"ClusterId >= {min(labels)} && RoutedFromJobId =?= undefined", attrs)
    rows, done = [], True
    seen = set()
    for src in sorted(sources, key=lambda j: j["ClusterId"]):
        if src["ClusterId"] in seen:
            continue
        seen.add(src["ClusterId"])
        job = routed.get(f"{src['ClusterId']}.{src['ProcId']}", {})
        grid = (job.get("GridJobId") or "").split()
        pod = grid[3] if len(grid) > 3 else "-"
        phase = "-"
        if sim is not None and pod.startswith("k8s/"):
            _, ns, name = pod.split("/", 2)
            obj = sim.pod(ns, name)  # type: ignore[attr-defined]
            phase = obj["status"].get("phase", "?") if obj else "deleted"
        status = PHASE_OF_STATUS.get(src.get("JobStatus", 0), "?")
        if status not in ("completed", "held", "removed"):
            done = False
        outcome = ""
        if status == "completed":
            if src.get("ExitBySignal"):
                outcome = f"signal {src.get('ExitSignal', '?')}"
            else:
                outcome = f"exit {src.get('ExitCode', '?')}"
            reason = src.get("ExitReason") or job.get("ExitReason")
            if reason:
                outcome += f" ({reason[:60]})"
        elif status == "held":
            outcome = (src.get("HoldReason") or job.get("HoldReason") or "")[:70]
        rows.append((f"{src['ClusterId']}.{src['ProcId']}", labels.get(src["ClusterId"], ""),
                     job.get("RouteName", "-"), pod, phase, status, outcome))
    text = render(rows, ("job", "pilot", "route", "pod", "pod phase", "job status", "outcome"))
    return text, done and bool(rows), sources


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__)
    parser.add_argument("--series", default=None,
                        help="HTCondor to use: native, trixie (23.x) or sid (25.x); default native if "
                             "HTCondor >= 23 is installed, else trixie")
    parser.add_argument("--pilots", type=int, default=12, help="how many pilots to submit (default 12)")
    parser.add_argument("--factory", action="store_true",
                        help="a factory's pilots (stand-ins of several shapes and failures) instead of users' jobs "
                             "on real pilots; the pods' containers are modelled")
    parser.add_argument("--kubeconfig", default=None,
                        help="with --factory: run the pods on this real cluster instead of the simulated one")
    parser.add_argument("--control-plane", nargs="?", const="", default=None, metavar="DIR",
                        help="tell the story on the real Kubernetes control plane: the binaries of make "
                             "k8s-control-plane (make demo builds them first when DEMO_ARGS has --control-plane), or "
                             "those in DIR (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; "
                             "--control-plane=DIR)")
    parser.add_argument("--timeout", type=float, default=300, help="give up after this many seconds")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--keep", action="store_true",
                        help="after the summary, keep the CE and the cluster running (and the outputs in place "
                             "afterwards) and print what to try next; Ctrl-C or SIGTERM stops them")
    args = parser.parse_args(argv)
    series = args.series or ("native" if native_condor_version() else "trixie")
    rng = random.Random(args.seed)
    control_plane = None
    if args.control_plane is not None:
        if args.factory or args.kubeconfig:
            parser.error("--control-plane tells the real-pilot story: not with --factory or --kubeconfig")
        from harness.controlplane import find_cached

        control_plane = Path(args.control_plane) if args.control_plane else find_cached()
        if control_plane is None:
            parser.error("no control plane built yet: make demo DEMO_ARGS=--control-plane builds it "
                         "(make k8s-control-plane), or name a directory of its binaries: --control-plane=DIR")

    print(f"podgahp demo: HTCondor '{series}' ...", flush=True)
    try:
        installation = get_installation(series)
        installation.acquire()
        try:
            installation.install_podgahp()  # so the paths in the pool's config are this checkout's
        finally:
            installation.release()
    except HarnessError as e:
        print(f"cannot get HTCondor: {e}", file=sys.stderr)
        return 1
    if not args.factory and not args.kubeconfig:
        from demo import story
        try:
            return story.run(installation, routes_file().name, Path("demo-run").resolve() / "kubeconfig",
                             args.timeout, args.keep, control_plane)
        except HarnessError as e:
            print(f"the demo could not run: {e}", file=sys.stderr)
            return 1
    sim = None
    files = {f"pod-template-{q}.yaml": text for q, text in POD_TEMPLATES.items()}
    admin = Path(args.kubeconfig).resolve() if args.kubeconfig else Path("demo-run").resolve() / "kubeconfig"
    if args.kubeconfig:
        files["kubeconfig"] = Path(args.kubeconfig).read_text()
        print(f"pods go to the cluster of {args.kubeconfig}", flush=True)
    else:
        from podgahp_sim.k8s import KubeSim, SimConfig, SimNode, Taint

        nodes = (SimNode("cpu-1", cpu="16", memory="64Gi"), SimNode("cpu-2", cpu="16", memory="64Gi"),
                 SimNode("gpu-1", cpu="16", memory="64Gi", gpus=2, labels={"demo/gpu": "true"},
                         taints=(Taint("nvidia.com/gpu", "", "NoSchedule"),)))
        sim = KubeSim(SimConfig(nodes=nodes, namespaces=("default", NAMESPACE))).start()
        sim.add_priority_class("podgahp-opportunistic", -100)  # set by the route
        admin.parent.mkdir(exist_ok=True)
        sim.write_kubeconfig(str(admin), namespace=NAMESPACE)
        admin.chmod(0o600)
        files["kubeconfig"] = admin.read_text()
        print(f"simulated Kubernetes cluster at {sim.url} (HTTPS, its own CA): 3 nodes (one with 2 GPUs)\n"
              f"watch the pilots' pods from another shell:  KUBECONFIG={admin} kubectl get pods -o wide -w",
              flush=True)

    routes = routes_file()
    try:
        with Pool(installation, name="demo", files=files, keep=args.keep or None, extra_config=pool_config(
                installation, routes, "$(LOCAL_DIR)/kubeconfig", bool(args.kubeconfig))) as pool:
            print(f"local CE up ({installation.name}, HTCondor {installation.condor_version}); "
                  f"routes from routes/{routes.name}", flush=True)
            iwd = pool.user_dir("pilot")
            script = pool.path(f"{iwd}/pilot.sh")
            script.write_text(PILOT_SCRIPT)
            os.chmod(script, 0o755)
            owner = installation.user("pilot")
            os.chown(script, owner.uid, owner.gid)
            labels: Dict[int, str] = {}
            for pilot in pilots(args.pilots, iwd, rng):
                labels[pool.submit(pilot.submit, user="pilot", cwd=iwd)] = pilot.label
            print(f"submitted {len(labels)} pilots as user 'pilot'\n", flush=True)
            started = time.monotonic()
            tty = sys.stdout.isatty()
            last = ""
            while True:
                text, done, sources = table(pool, labels, sim)
                if text != last:
                    if tty:
                        sys.stdout.write("\x1b[H\x1b[2J")
                    print(f"t = {time.monotonic() - started:5.0f} s\n{text}\n", flush=True)
                    last = text
                if done or time.monotonic() - started > args.timeout:
                    break
                time.sleep(1)
            status = summary(sources, labels, pool, iwd, done, time.monotonic() - started)
            if args.keep:
                keep_running(pool, iwd, admin)
            return status
    finally:
        if sim is not None:
            sim.stop()


def summary(sources: List[Dict], labels: Dict[int, str], pool: Pool, iwd: str, done: bool,
            elapsed: float) -> int:
    statuses = [PHASE_OF_STATUS.get(j.get("JobStatus", 0), "?") for j in sources]
    completed = statuses.count("completed")
    held = statuses.count("held")
    print("summary")
    print(f"  pilots: {len(labels)}; completed {completed} "
          f"(exit 0: {sum(1 for j in sources if j.get('JobStatus') == 4 and j.get('ExitCode') == 0)}), "
          f"held {held}; {elapsed:.0f} s")
    outs = sorted(pool.path(iwd).glob("pilot-*.out"))
    if outs:
        print(f"  pilot outputs written back to {iwd} ({len(outs)} files), e.g. {outs[0].name}:")
        for line in outs[0].read_text().splitlines()[:3]:
            print(f"    {line}")
    print("  GAHP log: " + ", ".join(n for n in pool.log_names() if n.startswith("Podgahp")))
    if not done:
        print("  not every pilot finished before the timeout")
        return 1
    return 0


def next_steps(pool: Pool, iwd: str, kubeconfig: Path, pid: int) -> List[str]:
    """What to try on the kept CE and cluster: commands to paste, with absolute paths."""
    inst = pool.installation
    enter = f"chroot {inst.root} " if inst.chroot else ""
    as_pilot = f"chroot --userspec=pilot {inst.root} " if inst.chroot else "runuser -u pilot -- "
    env = f"env CONDOR_CONFIG={pool.condor_config}"
    podgahp = inst.bin("podgahp")
    return [
        "next (the CE and the cluster stay up until you stop them):",
        f"  the pods:        KUBECONFIG={kubeconfig} kubectl get pods -o wide -L podgahp.htcondor.org/job",
        f"  one pod:         KUBECONFIG={kubeconfig} kubectl describe pod -l podgahp.htcondor.org/job=<routed job id>",
        f"  the CE's queue:  {enter}{env} condor_q -allusers      (condor_ce_q on an HTCondor-CE)",
        f"  routed jobs:     {enter}{env} condor_router_q -S",
        f"  pilots and pods: {enter}{env} {podgahp} q",
        f"  trace a pilot:   {as_pilot}{env} HOME=/tmp TMPDIR=/tmp {podgahp} trace",
        f"  health figures:  {enter}{env} {podgahp} health --openmetrics",
        f"  outputs:         {pool.path(iwd)}",
        f"  logs:            {pool.path(pool.log_dir)}",
        f"  stop:            Ctrl-C here, or kill -TERM {pid} (the outputs and logs stay)",
    ]


def keep_running(pool: Pool, iwd: str, kubeconfig: Path) -> None:
    """Print the next steps and wait for Ctrl-C or SIGTERM (then the caller stops everything)."""
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("\n".join(next_steps(pool, iwd, kubeconfig, os.getpid())), flush=True)
    try:
        while not stop.wait(1) and pool.master_running:
            pass
    except KeyboardInterrupt:
        pass
    print("stopping the CE and the cluster", flush=True)


if __name__ == "__main__":
    sys.exit(main())
