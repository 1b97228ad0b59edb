"""The demo's story: users' jobs run on pilots that a CE started as pods, and the pods really run.

A user pool (collector, negotiator, schedd) gets jobs of three shapes. ``podgahp provision`` sees
them wait and submits pilots of those shapes to a local CE-like pool (shipped routes, gridmanager,
``k8s_gahp``), which turns them into pods of the simulated cluster. The cluster runs its pods through
runc from the pilot image (the HTCondor root with podgahp's pilot start script): each pod's startd
joins the user pool with the token staged in its Secret and runs the users' jobs, whose output goes
back to the user. With a control plane's binaries the cluster is the real Kubernetes control plane
(API server, scheduler, controllers) whose nodes are the simulator's kubelets, running the same pods. Idle pilots leave; their pods end Succeeded and the pilots complete at the CE. A
live table shows the users' jobs, the pilots and the pods.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from harness.image import pilot_image
from harness.pool import Pool
from harness.rootfs import Installation
from harness.userpool import CONFIG as USER_POOL_CONFIG
from harness.userpool import LOOPBACK_PILOT_ENVIRONMENT, collector_address, pilot_token

NAMESPACE = "pilots"
#: The submit description the next steps offer for more jobs, in the users' home directory.
MORE_JOBS = "more-jobs.sub"

#: The provisioner's name: one per run (a provisioner remembers its pilots' fate between cycles).
PROVISIONER = "demo-%d-%d" % (os.getpid(), int(time.time()))
#: Users' jobs: (cores, MiB, how many, what they do).
JOBS: Tuple[Tuple[int, int, int, str], ...] = (
    (1, 512, 4, 'echo "job $1 ran on pod $(hostname)"; sleep 8'),
    (2, 1024, 2, 'echo "job $1 ran on pod $(hostname) with $(nproc) cores"; sleep 12'),
    (1, 2048, 1, 'echo "job $1 ran on pod $(hostname), up to 2 GiB"; sleep 5'),
)
#: The pilots leave after 30 s without a job (HTCondor's _CONDOR_* variables override the pilot's
#: configuration); their startds look every 5 s. The idle time counts from the startd's start, whose
#: initialisation took up to 12 s with five pilots starting on a busy machine: 15 s left such a pilot
#: 3 s in the pool, less than a negotiation cycle, and a pilot that leaves unseen makes its group
#: wait a minute for the next.
PILOT_ENVIRONMENT = f"_CONDOR_STARTD_NOCLAIM_SHUTDOWN=30 _CONDOR_UPDATE_INTERVAL=5 {LOOPBACK_PILOT_ENVIRONMENT}"
STATUS = {1: "idle", 2: "running", 3: "removed", 4: "completed", 5: "held", 6: "transferring"}


def ce_config(installation: Installation, routes: str, image: str) -> str:
    return "\n".join([
        f"include : {installation.src_dir}/routes/{routes}",
        f"K8S_GAHP = {installation.bin('k8s_gahp')}",
        "PODGAHP_K8S_QUEUES = cpu",
        "PODGAHP_K8S_DEFAULT_QUEUE = cpu",
        "PODGAHP_K8S_KUBECONFIG = $(LOCAL_DIR)/kubeconfig",
        f"PODGAHP_K8S_NAMESPACE = {NAMESPACE}",
        "PODGAHP_K8S_CE_NAME = demo-ce",
        f"PODGAHP_K8S_IMAGE = {image}",
        "PODGAHP_K8S_FINISHED_RETENTION_SECONDS = 600",
        "GRIDMANAGER_JOB_PROBE_INTERVAL = 2",
        "SCHEDD_INTERVAL = 2",
        "SCHEDD_MIN_INTERVAL = 1",
    ]) + "\n"


def render(rows: List[Tuple[str, ...]], headers: Tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*headers), fmt.format(*("-" * w for w in widths))] +
                     [fmt.format(*map(str, r)) for r in rows])


class Story:
    """The two pools and the cluster, and what the live table reads from them."""

    def __init__(self, users: Pool, ce: Pool, sim: Any, token_file: str) -> None:
        self.users, self.ce, self.sim, self.token_file = users, ce, sim, token_file
        self.pods: Dict[str, Dict[str, Any]] = {}
        self.provision_lines: List[str] = []
        self.home = ""
        """The users' home directory of the story's jobs."""

    def provision(self) -> None:
        env = {"_CONDOR_PODGAHP_PROVISION_POOL": collector_address(self.users),
               "_CONDOR_PODGAHP_PROVISION_NAME": PROVISIONER,
               "_CONDOR_PODGAHP_PROVISION_LOG": f"{self.ce.log_dir}/PodgahpProvisionLog",
               "_CONDOR_PODGAHP_PROVISION_PILOT_TOKEN_FILE": self.token_file,
               "_CONDOR_PODGAHP_PROVISION_PILOT_IDLE_MINUTES": "1",
               "_CONDOR_PODGAHP_PROVISION_PILOT_ENVIRONMENT": PILOT_ENVIRONMENT,
               "_CONDOR_PODGAHP_PROVISION_RAMP_START": "2"}
        out = self.ce.run([self.ce.installation.bin("podgahp"), "provision", "--once"], user="pilot", env=env,
                          timeout=120, check=False)
        self.provision_lines = out.stdout.splitlines() or out.stderr.splitlines()[-1:]

    def tables(self) -> Tuple[str, bool]:
        """The live tables, and whether the story has ended (jobs done, pilots done)."""
        for pod in self.sim.pods(NAMESPACE):
            self.pods[pod["metadata"]["name"]] = pod
        jobs = self.users.jobs("true", ["ClusterId", "ProcId", "JobStatus", "RequestCpus", "RequestMemory",
                                        "RemoteHost", "LastRemoteHost"])
        job_rows = []
        for ad in sorted(jobs, key=lambda a: (a["ClusterId"], a["ProcId"])):
            host = str(ad.get("RemoteHost") or ad.get("LastRemoteHost") or "-")
            job_rows.append((f"{ad['ClusterId']}.{ad['ProcId']}", f"{ad['RequestCpus']}c/{ad['RequestMemory']}MiB",
                             STATUS.get(ad.get("JobStatus", 0), "?"), host.split("@", 1)[-1]))
        routed = {str(ad.get("RoutedFromJobId")): ad for ad in self.ce.jobs(
            "RoutedFromJobId =!= undefined", ["RoutedFromJobId", "GridJobId", "RouteName"])}
        pilots = self.ce.jobs(f'PodgahpProvisioner =?= "{PROVISIONER}" && RoutedFromJobId =?= undefined',
                              ["ClusterId", "ProcId", "JobStatus", "PodgahpGroup", "HoldReason"])
        pilot_rows = []
        for ad in sorted(pilots, key=lambda a: (a["ClusterId"], a["ProcId"])):
            job = routed.get(f"{ad['ClusterId']}.{ad['ProcId']}", {})
            grid = str(job.get("GridJobId") or "").split()
            pod = grid[3].rsplit("/", 1)[-1] if len(grid) > 3 else "-"
            phase = "-"
            if pod in self.pods:
                live = self.sim.pod(NAMESPACE, pod)
                phase = (live or self.pods[pod])["status"].get("phase", "?")
            pilot_rows.append((f"{ad['ClusterId']}.{ad['ProcId']}", str(ad.get("PodgahpGroup", "")),
                               str(job.get("RouteName", "-")), STATUS.get(ad.get("JobStatus", 0), "?"), pod, phase))
        text = (render(job_rows, ("user job", "shape", "status", "on pod")) + "\n\n"
                + render(pilot_rows or [("-",) * 6], ("pilot (CE)", "group", "route", "status", "pod", "pod phase")))
        jobs_done = bool(jobs) and all(ad.get("JobStatus") == 4 for ad in jobs)
        pilots_done = bool(pilots) and all(ad.get("JobStatus") in (3, 4, 5) for ad in pilots)
        return text, jobs_done and pilots_done

    def waiting_jobs(self) -> bool:
        return bool(self.users.q("JobStatus == 1", ["ClusterId"]))


def job_description(home: str, n: int, cpus: int, memory: int, count: int) -> str:
    return "\n".join([
        "universe = vanilla", f"executable = job{n}.sh", "arguments = $(ClusterId).$(ProcId)",
        f"initialdir = {home}", "output = job$(ClusterId).$(ProcId).out", "error = job$(ClusterId).$(ProcId).err",
        "log = jobs.log", "should_transfer_files = YES", f"request_cpus = {cpus}", f"request_memory = {memory}",
        "request_disk = 10240", f"queue {count}"]) + "\n"


def submit_jobs(users: Pool) -> str:
    """The story's jobs, submitted as user pilot; ``more-jobs.sub`` beside them for the next steps."""
    home = users.user_dir("pilot")
    owner = users.installation.user("pilot")
    for n, (cpus, memory, count, script) in enumerate(JOBS):
        path = users.path(f"{home}/job{n}.sh")
        path.write_text("#!/bin/sh\n" + script + "\n")
        os.chmod(path, 0o755)
        os.chown(path, owner.uid, owner.gid)
        users.submit(job_description(home, n, cpus, memory, count), user="pilot", cwd=home)
    more = users.path(f"{home}/{MORE_JOBS}")
    more.write_text(job_description(home, 0, JOBS[0][0], JOBS[0][1], 2))
    os.chown(more, owner.uid, owner.gid)
    return home


def start_pools(installation: Installation, routes: str, image: str, kubeconfig: str,
                keep: bool) -> Tuple[Pool, Pool]:
    """The user pool and the CE, started side by side."""
    users = Pool(installation, extra_config=USER_POOL_CONFIG, name="demo-users", keep=keep or None)
    ce = Pool(installation, extra_config=ce_config(installation, routes, image), name="demo-ce", keep=keep or None,
              files={"kubeconfig": kubeconfig})
    errors: List[BaseException] = []

    def start(pool: Pool) -> None:
        try:
            pool.start()
        except BaseException as e:  # reported by the caller
            errors.append(e)
    threads = [threading.Thread(target=start, args=(pool,)) for pool in (users, ce)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        for pool in (users, ce):
            pool.stop(failed=True)
        raise errors[0]
    return users, ce


def start_cluster(admin: Path, reference: str, image: Path, control_plane: Optional[Path]) -> Tuple[Any, str]:
    """The story's cluster, two nodes whose pods run through runc from the pilot image: the simulated
    API server, or with ``control_plane`` (a directory of its binaries) the real Kubernetes control
    plane with the simulator's kubelets as the nodes. Its admin kubeconfig at ``admin`` (context
    namespace pilots); the cluster (``pods``, ``pod``, ``logs``, ``stop``) and what it is."""
    admin.parent.mkdir(exist_ok=True)
    if control_plane is None:
        from podgahp_sim.k8s import KubeSim, SimConfig, SimNode

        nodes = (SimNode("node-1", cpu="8", memory="16Gi"), SimNode("node-2", cpu="8", memory="16Gi"))
        sim = KubeSim(SimConfig(nodes=nodes, namespaces=("default", NAMESPACE)), runtime="runc",
                      images={reference: str(image)}).start()
        sim.write_kubeconfig(str(admin), namespace=NAMESPACE)
        admin.chmod(0o600)
        return sim, f"simulated Kubernetes cluster at {sim.url}"
    from podgahp_sim.kube.cluster import KubeCluster
    from podgahp_sim.kube.node import NodeSpec

    print(f"starting the real Kubernetes control plane from {control_plane} ...", flush=True)
    specs = [NodeSpec(name, cpus="8", memory="16Gi", runtime="runc", images={reference: str(image)})
             for name in ("node-1", "node-2")]
    cluster = KubeCluster(control_plane, specs).start()
    try:
        cluster.add_namespace(NAMESPACE)
        cluster.write_kubeconfig(str(admin), namespace=NAMESPACE)
        admin.chmod(0o600)
    except BaseException:
        cluster.stop()
        raise
    return cluster, f"real Kubernetes control plane ({cluster.plane.release.text}) at {cluster.url}"


def run(installation: Installation, routes: str, admin: Path, timeout: float, keep: bool,
        control_plane: Optional[Path] = None) -> int:
    reference, image = pilot_image(installation)
    sim, what = start_cluster(admin, reference, image, control_plane)
    try:
        print(f"{what}: 2 nodes whose pods really run (runc), image "
              f"{reference}\nwatch the pods from another shell:  KUBECONFIG={admin} kubectl get pods -w", flush=True)
        users, ce = start_pools(installation, routes, reference, admin.read_text(), keep)
        try:
            token_file = f"{ce.user_dir('pilot')}/pool.token"
            token = ce.path(token_file)
            token.write_text(pilot_token(users))
            owner = installation.user("pilot")
            os.chown(token, owner.uid, owner.gid)
            token.chmod(0o600)
            print(f"user pool and CE up (HTCondor {installation.condor_version}); the pool's token for pilots "
                  f"is at the CE", flush=True)
            home = submit_jobs(users)
            story = Story(users, ce, sim, token_file)
            story.home = home
            print(f"submitted {sum(j[2] for j in JOBS)} jobs of {len(JOBS)} shapes to the user pool\n", flush=True)
            status = watch(story, timeout)
            summarize(story, home, status == 0)
            if keep:
                keep_running(story, admin)
            else:
                again = '"--control-plane --keep"' if control_plane is not None else "--keep"
                print(f"\nto look around, run it again with --keep (make demo DEMO_ARGS={again}): the pools and the "
                      "cluster then stay up, and it prints commands ready to paste, among them:\n"
                      f"  KUBECONFIG={admin} kubectl get pods -o wide     the pilots' pods\n"
                      f"  KUBECONFIG={admin} kubectl logs <pod>           a pilot's startd\n"
                      "  condor_q, condor_status with the user pool's CONDOR_CONFIG   the users' jobs, the pilots' slots\n"
                      "  condor_q, podgahp q with the CE's CONDOR_CONFIG              the pilots, their routes and pods",
                      flush=True)
            return status
        finally:
            ce.stop()
            users.stop()
    finally:
        sim.stop()


def watch(story: Story, timeout: float) -> int:
    started = time.monotonic()
    next_cycle = 0.0
    tty = sys.stdout.isatty()
    last = ""
    while True:
        now = time.monotonic()
        if now >= next_cycle and story.waiting_jobs():
            story.provision()
            next_cycle = now + 15
        text, done = story.tables()
        text += "\n\nprovisioner: " + ("; ".join(story.provision_lines) or "-")
        if text != last:
            if tty:
                sys.stdout.write("\x1b[H\x1b[2J")
            print(f"t = {now - started:5.0f} s\n{text}\n", flush=True)
            last = text
        if done:
            return 0
        if now - started > timeout:
            print("not everything finished before the timeout", flush=True)
            return 1
        time.sleep(1)


def summarize(story: Story, home: str, done: bool) -> None:
    outs = sorted(story.users.path(home).glob("job*.out"))
    story.tables()  # the pods as they are now
    succeeded = [n for n, p in story.pods.items() if (p.get("status") or {}).get("phase") == "Succeeded"]
    print("summary")
    print(f"  {len(outs)} jobs' output back at the user's schedd ({story.users.path(home)}), e.g.:")
    for path in outs[:3]:
        print("    " + path.read_text().strip())
    print(f"  {len(story.pods)} pilot pods, {len(succeeded)} ended Succeeded after their startd left the pool idle")
    if story.pods:
        name = sorted(story.pods)[0]
        lines = [line for line in story.sim.logs(NAMESPACE, name) if "condor_startd" in line][-2:]
        if lines:
            print(f"  the log of pod {name} is its startd's:")
            for line in lines:
                print("    " + line)


def next_steps(story: Story, admin: Path) -> List[str]:
    inst = story.ce.installation
    enter = f"chroot {inst.root} " if inst.chroot else ""
    as_pilot = f"chroot --userspec=pilot {inst.root} " if inst.chroot else "runuser -u pilot -- "
    ce_env = f"env CONDOR_CONFIG={story.ce.condor_config}"
    return [
        "next (the pools and the cluster stay up until you stop them):",
        f"  the pods:             KUBECONFIG={admin} kubectl get pods -o wide",
        f"  a pilot's startd:     KUBECONFIG={admin} kubectl logs <pod>",
        f"  the users' jobs:      {enter}env CONDOR_CONFIG={story.users.condor_config} condor_q -allusers -nobatch",
        f"  the pilots' slots:    {enter}env CONDOR_CONFIG={story.users.condor_config} condor_status",
        f"  the CE's queue:       {enter}{ce_env} condor_q -allusers      (condor_ce_q on an HTCondor-CE)",
        f"  pilots and pods:      {enter}{ce_env} {inst.bin('podgahp')} q",
        f"  trace a pilot:        {as_pilot}{ce_env} HOME=/tmp TMPDIR=/tmp {inst.bin('podgahp')} trace",
        f"  health figures:       {enter}{ce_env} {inst.bin('podgahp')} health",
        f"  more jobs:            {as_pilot}env -C {story.home} CONDOR_CONFIG={story.users.condor_config} "
        f"condor_submit {MORE_JOBS}      (the provisioner still runs every 15 s)",
        f"  logs:                 {story.users.path(story.users.log_dir)}  {story.ce.path(story.ce.log_dir)}",
        f"  stop:                 Ctrl-C here, or kill -TERM {os.getpid()}",
    ]


def keep_running(story: Story, admin: Path) -> None:
    import signal

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("\n".join(next_steps(story, admin)), flush=True)
    next_cycle = 0.0
    try:
        while not stop.wait(1) and story.ce.master_running and story.users.master_running:
            if time.monotonic() >= next_cycle and story.waiting_jobs():
                story.provision()
                next_cycle = time.monotonic() + 15
    except KeyboardInterrupt:
        pass
    print("stopping the pools and the cluster", flush=True)

