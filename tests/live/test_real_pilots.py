"""Real pilots: a user's job runs end to end through the CE on a pilot that really runs in a pod.

A user pool (collector, negotiator, schedd) whose jobs wait; ``podgahp provision`` submits pilots to
a CE-like pool (shipped routes, gridmanager, ``k8s_gahp``); the simulated cluster runs their pods
through runc from the pilot image (the installation's root with HTCondor and the pilot start
script): each pod's ``condor_startd`` joins the user pool with the token staged in its Secret and
runs the users' jobs. One set of pools and one cluster per HTCondor series serve every test here;
each test has jobs and pilots of its own.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import os
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set

import pytest
from kubernetes import client, config

from e2e import (ANN_SANDBOX_ID, E2E_FAST, GPU_TEMPLATE, HELD, K8S_KNOBS, NAMESPACE, RUNNING, container, grid_parts,
                 kubeconfig_text, pod_of, routed_jobs, routes_config, sim_nodes,
                 write_user_file, x509_proxy)
from harness import Installation, Pool
from harness.image import IMAGE_START_SCRIPT, pilot_image
from harness.userpool import CONFIG as USER_POOL_CONFIG
from harness.userpool import LOOPBACK_PILOT_ENVIRONMENT, collector_address, pilot_token
from leftovers import instance_of, machine_leftovers, start_runc_sim, stop_sim
from podgahp_sim.k8s import KubeSim, SimConfig
from podgahp_sim.k8s.quantity import parse_quantity
from podgahp_sim.k8s.store import Expired
from polling import wait_until

pytestmark = pytest.mark.live

COMPLETED = 4
IDLE = 1
#: How long an unclaimed pilot stays (HTCondor reads _CONDOR_* variables over its configuration
#: files), and how often its startd looks. The idle time counts from the startd's start, whose
#: initialisation takes seconds on a busy machine (up to 12 with five pilots starting): a pilot
#: must outlast it by more than a negotiation cycle.
PILOT_ENVIRONMENT = f"_CONDOR_STARTD_NOCLAIM_SHUTDOWN=30 _CONDOR_UPDATE_INTERVAL=5 {LOOPBACK_PILOT_ENVIRONMENT}"

CE_CONFIG = """\
PODGAHP_K8S_IMAGE = {image}
PODGAHP_K8S_DELETE_GRACE_SECONDS = 30
PODGAHP_K8S_GPU_POD_TEMPLATE = $(LOCAL_DIR)/gpu-template.yaml
## The gridmanager looks at a pilot's proxy file this often (HTCondor's default: 600 s).
GRIDMANAGER_CHECKPROXY_INTERVAL = 2
"""


@dataclasses.dataclass
class Site:
    users: Pool
    ce: Pool
    sim: KubeSim
    image: str
    home: str
    """The provisioner's home at the CE, this site's own: pilots are submitted from (and write their
    output into) a directory under ``~/.podgahp/provision`` named for the provisioner and its CE."""
    token_file: str
    """The pool's token in the provisioner's home at the CE."""

    def provision(self, name: str, batch: str = "", **knobs: str) -> List[str]:
        """One ``podgahp provision --once`` on the CE as the factory's user, for the jobs of ``batch``
        (default: the provisioner's name)."""
        env = {"HOME": self.home, "_CONDOR_PODGAHP_PROVISION_POOL": collector_address(self.users),
               "_CONDOR_PODGAHP_PROVISION_NAME": name,
               "_CONDOR_PODGAHP_PROVISION_LOG": f"{self.ce.log_dir}/PodgahpProvisionLog",
               "_CONDOR_PODGAHP_PROVISION_PILOT_TOKEN_FILE": self.token_file,
               "_CONDOR_PODGAHP_PROVISION_PILOT_IDLE_MINUTES": "1",
               "_CONDOR_PODGAHP_PROVISION_PILOT_ENVIRONMENT": PILOT_ENVIRONMENT,
               "_CONDOR_PODGAHP_PROVISION_JOB_FILTER": f'JobBatchName =?= "{batch or name}"'}
        env.update({f"_CONDOR_PODGAHP_PROVISION_{k}": v for k, v in knobs.items()})
        out = self.ce.run([self.ce.installation.bin("podgahp"), "provision", "--once"], user="pilot", env=env,
                          timeout=120)
        return out.stdout.splitlines()

    def pilots(self, name: str) -> List[Dict[str, Any]]:
        """The provisioner's pilots at the CE (not the JobRouter's copies), queue and history."""
        return self.ce.jobs(f'PodgahpProvisioner =?= "{name}" && RoutedFromJobId =?= undefined',
                            ["ClusterId", "ProcId", "JobStatus", "HoldReason", "Out", "Iwd", "RequestMemory",
                             "RequestCpus"])

    def pods_of(self, name: str) -> Dict[str, Dict[str, Any]]:
        """Pod name -> routed job of the provisioner's pilots that have a pod."""
        routed = [ad for ad in routed_jobs(self.ce) if pod_of(ad)]
        sources = {f"{ad['ClusterId']}.{ad['ProcId']}" for ad in self.pilots(name)}
        return {str(pod_of(ad)): ad for ad in routed if ad.get("RoutedFromJobId") in sources}

    def sandboxes(self, name: str) -> Set[str]:
        """The sandboxes of the provisioner's pilots (routed jobs keep them, held or done)."""
        sources = {f"{ad['ClusterId']}.{ad['ProcId']}" for ad in self.pilots(name)}
        return {grid_parts(ad)[2] for ad in routed_jobs(self.ce)
                if ad.get("RoutedFromJobId") in sources and len(grid_parts(ad)) >= 3}

    def slots(self, constraint: str = "true") -> List[Dict[str, Any]]:
        out = self.users.run(["condor_status", "-json", "-constraint", constraint, "-attributes",
                              "Name,Machine,Cpus,Memory,GPUs,State,Activity,PodgahpProvisioner,PodgahpPilotId"]).stdout
        import json
        return json.loads(out) if out.strip() else []


def user_jobs(site: Site, batch: str, count: int, cpus: int, memory: int, script: str, gpus: int = 0) -> int:
    """Submit ``count`` jobs of a shape running ``script`` (sh) as the user; output comes back."""
    home = f"{site.users.user_dir()}/{batch}-{uuid.uuid4().hex[:6]}"
    write_user_file(site.users, f"{home}/job.sh", "#!/bin/sh\n" + script, mode=0o755)
    owner = site.users.installation.user("pilot")
    os.chown(site.users.path(home), owner.uid, owner.gid)
    return site.users.submit("\n".join([
        "universe = vanilla", "executable = job.sh", f"initialdir = {home}", f"batch_name = {batch}",
        "output = out.$(Process)", "error = err.$(Process)", "log = job.log", "should_transfer_files = YES",
        f"request_cpus = {cpus}", f"request_memory = {memory}", "request_disk = 10240",
        *([f"request_gpus = {gpus}"] if gpus else []), f"queue {count}"]) + "\n", cwd=home)


def job_ads(site: Site, cluster: int) -> List[Dict[str, Any]]:
    return site.users.jobs(f"ClusterId == {cluster}", ["ProcId", "JobStatus", "RemoteHost", "LastRemoteHost",
                                                       "NumJobStarts", "Iwd", "ExitCode", "HoldReason"])


class PodWatch:
    """Every state each pod of the cluster went through since the watch began, from the simulator's
    change log as a Kubernetes watch sees it: a pod the GAHP deletes a moment after it ended is not
    missed between two looks (on a busy machine a look can come seconds after the last)."""

    def __init__(self, sim: KubeSim) -> None:
        self.sim = sim
        self.seen: Dict[str, Dict[str, Any]] = {}
        """The last state seen of each pod (kept once it is deleted)."""
        self.ended: Dict[str, Dict[str, Any]] = {}
        """The container's ``terminated`` state of each pod that ended."""
        self.rv = -1
        self.look()

    def look(self) -> Dict[str, Dict[str, Any]]:
        store = self.sim.store
        with store.lock:
            try:
                events = [e.obj for e in store.events_after("pods", self.rv)] if self.rv >= 0 else None
            except Expired:
                events = None
            # the first look, or the log moved past ours: every pod as it is
            changed = copy.deepcopy(store.items("pods", NAMESPACE) if events is None else events)
            self.rv = store.rv
        for pod in changed:
            if pod["metadata"].get("namespace") != NAMESPACE:
                continue
            name = pod["metadata"]["name"]
            self.seen[name] = pod
            statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
            ended = (statuses[0].get("state") or {}).get("terminated")
            if ended:
                self.ended[name] = ended
        return self.seen

    def terminated(self, name: str) -> Optional[Dict[str, Any]]:
        self.look()
        return self.ended.get(name)


@pytest.fixture(scope="module")
def site(installation: Installation, request: pytest.FixtureRequest) -> Iterator[Site]:
    reference, image = pilot_image(installation)
    sim = KubeSim(SimConfig(nodes=tuple(sim_nodes()), namespaces=("default", NAMESPACE)), runtime="runc",
                  images={reference: str(image)}).start()
    sim.add_priority_class("podgahp-opportunistic", -100)
    pools: List[Pool] = []
    failed_before = request.session.testsfailed
    try:
        users = Pool(installation, extra_config=USER_POOL_CONFIG, name="real-pilots-users")
        pools.append(users)
        users.start()
        config = (routes_config(installation) + f"K8S_GAHP = {installation.bin('k8s_gahp')}\n" + K8S_KNOBS
                  + E2E_FAST + CE_CONFIG.format(image=reference))
        ce = Pool(installation, extra_config=config, name="real-pilots-ce",
                  files={"kubeconfig": kubeconfig_text(sim), "gpu-template.yaml": GPU_TEMPLATE})
        pools.append(ce)
        ce.start()
        home = ce.user_dir()
        token_file = f"{home}/pool.token"
        write_user_file(ce, token_file, pilot_token(users), mode=0o600)
        yield Site(users, ce, sim, reference, home, token_file)
    finally:
        failed = request.session.testsfailed > failed_before
        for pool in reversed(pools):
            if failed:
                pool.dump_logs()
            pool.stop(failed=failed)
        sim.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def slot_of(site: Site, job: Dict[str, Any]) -> str:
    return str(job.get("RemoteHost") or job.get("LastRemoteHost") or "")


# ------------------------------------------------------------------------------------------------


def test_user_jobs_run_on_pilots_the_ce_started_as_pods(site: Site) -> None:
    """The whole story: idle jobs of two shapes -> provision -> CE -> routes -> gridmanager ->
    k8s_gahp -> pods whose startds join the pool with the staged token -> the jobs run there and
    their output comes back -> idle pilots exit -> pods Succeeded -> CE jobs complete -> nothing
    for podgahp reap to delete."""
    name = unique("story")
    small = user_jobs(site, name, 3, 1, 512, 'echo "hello from $(hostname)"; sleep 2\n')
    large = user_jobs(site, name, 1, 2, 1024, 'echo "big job on $(hostname)"; nproc\n')
    lines = site.provision(name, RAMP_START="2", MAX_PILOTS="4")
    assert len(lines) == 2, lines
    pods = PodWatch(site.sim)

    def finished() -> Optional[List[Dict[str, Any]]]:
        pods.look()
        ads = job_ads(site, small) + job_ads(site, large)
        return ads if len(ads) == 4 and all(ad["JobStatus"] == COMPLETED for ad in ads) else None
    done = site.users.wait_for(finished, timeout=240, interval=2, what="the user jobs completed")

    # Every job ran in a pilot pod and its output is back at the user's schedd.
    ran_on = {str(ad["LastRemoteHost"]).split("@", 1)[1] for ad in done}
    made = site.pods_of(name)
    assert ran_on <= set(made), (ran_on, sorted(made))
    for ad in done:
        iwd = site.users.path(ad["Iwd"])
        pod = str(ad["LastRemoteHost"]).split("@", 1)[1]
        assert f" {pod}" in (iwd / f"out.{ad['ProcId']}").read_text()

    # Idle pilots leave: their pods end Succeeded, the pilots at the CE complete with exit code 0.
    def pilots_done() -> Optional[List[Dict[str, Any]]]:
        pods.look()
        ads = site.pilots(name)
        return ads if ads and all(ad["JobStatus"] == COMPLETED for ad in ads) else None
    finals = site.ce.wait_for(pilots_done, timeout=180, interval=2, what="the pilots completed at the CE")
    for pod_name in site.pods_of(name):
        ended = pods.terminated(pod_name)
        assert ended is not None and ended["exitCode"] == 0, (pod_name, ended)
        assert pods.seen[pod_name]["status"]["phase"] == "Succeeded"
    # The startd's own lines are the pod's log, and came back as the pilot's Out.
    out = site.ce.path(f"{finals[0]['Iwd']}/{finals[0]['Out']}").read_text()
    assert "condor_startd" in out and "No resources have been claimed for 30 seconds" in out, out[-2000:]

    # Nothing is left for podgahp reap to delete. The pilots have just left the CE's queue: until the
    # schedd's next update of its ad (SCHEDD_INTERVAL) the collector still counts them, and a reap
    # pass that gets an empty queue then trusts no answer (it deletes nothing and says why).
    def reaped() -> Optional[str]:
        done = site.ce.run([site.ce.installation.bin("podgahp"), "reap", "--dry-run"], user="pilot", check=False)
        if done.returncode and "not trusting the answer this pass" in done.stderr:
            return None
        assert done.returncode == 0, done.stderr
        return done.stdout
    out = site.ce.wait_for(reaped, timeout=90, interval=2, what="a reap pass that trusts the schedd's answer")
    assert "Orphans = 0" in out.splitlines(), out


def test_the_startd_advertises_the_pods_limits(site: Site) -> None:
    """Cores and memory from the pod's limits, GPUs from its device plugin (simulated GPUs)."""
    name = unique("limits")
    clusters = [user_jobs(site, name, 1, 3, 1536, "sleep 30\n"), user_jobs(site, name, 1, 1, 1024, "sleep 30\n", gpus=1)]
    site.provision(name, RAMP_START="1")

    def slots() -> Optional[List[Dict[str, Any]]]:
        found = site.slots(f'PodgahpProvisioner =?= "{name}"')
        return found if len(found) == 2 else None
    ads = site.users.wait_for(slots, timeout=150, interval=2, what="the pilots' startds in the pool")
    seen = set()
    for ad in ads:
        pod = site.sim.pod(NAMESPACE, str(ad["Machine"]))
        assert pod is not None, ad
        limits = container(pod)["resources"]["limits"]
        memory_mib = parse_quantity(limits["memory"]) / 2 ** 20  # stored as the API server writes it: 1Gi
        seen.add((limits["cpu"], memory_mib, limits.get("nvidia.com/gpu", "0")))
        assert (str(ad["Cpus"]), ad["Memory"], str(ad.get("GPUs", 0))) == (
            limits["cpu"], memory_mib, limits.get("nvidia.com/gpu", "0")), (ad, limits)
    assert seen == {("3", 1536, "0"), ("1", 1024, "1")}
    for cluster in clusters:
        site.users.run(["condor_rm", str(cluster)], user="pilot")


def test_condor_rm_of_a_pilot_running_a_job_gives_the_job_back(site: Site) -> None:
    """The pilot's startd gets SIGTERM and its grace period: it vacates the job, which goes back to
    idle at the user's schedd (not lost) and runs again, to the end, on another pilot."""
    name = unique("vacate")
    cluster = user_jobs(site, name, 1, 1, 512, 'echo "start on $(hostname)"; sleep 20; echo finished\n')
    site.provision(name, RAMP_START="1", MAX_PILOTS="1")
    job = site.users.wait_for(lambda: [ad for ad in job_ads(site, cluster) if ad["JobStatus"] == RUNNING],
                              timeout=150, interval=1, what="the user job running on a pilot")[0]
    first_pod = slot_of(site, job).split("@", 1)[1]
    pilot = site.pods_of(name)[first_pod]["RoutedFromJobId"]
    pods = PodWatch(site.sim)
    removed = time.monotonic()
    site.ce.run(["condor_rm", str(pilot)], user="pilot")

    back = site.users.wait_for(lambda: [ad for ad in job_ads(site, cluster) if ad["JobStatus"] == IDLE],
                               timeout=60, interval=0.5, what="the user job idle again")[0]
    assert back["NumJobStarts"] == 1, back
    assert time.monotonic() - removed < 30  # within the pod's grace period: vacated, not lost
    assert "Job was evicted" in site.users.path(f"{back['Iwd']}/job.log").read_text()
    site.users.wait_for(lambda: pods.terminated(first_pod) or first_pod not in [
        p["metadata"]["name"] for p in site.sim.pods(NAMESPACE)], timeout=60, interval=0.5,
        what="the first pilot's pod gone")
    ended = pods.terminated(first_pod)
    assert ended is None or ended["exitCode"] == 0, ended  # ended in its grace period, not killed
    log = "\n".join(site.sim.logs(NAMESPACE, first_pod)) if site.sim.pod(NAMESPACE, first_pod) else ""
    assert not log or "Got SIGTERM" in log

    # (another provisioner: this one counts a pilot removed before it saw it in the pool as a failure)
    site.provision(name + "-again", batch=name, RAMP_START="1", MAX_PILOTS="1")
    done = site.users.wait_for(lambda: [ad for ad in job_ads(site, cluster) if ad["JobStatus"] == COMPLETED],
                               timeout=180, interval=2, what="the user job completed on a second pilot")[0]
    second_pod = str(done["LastRemoteHost"]).split("@", 1)[1]
    assert second_pod != first_pod
    output = site.users.path(f"{done['Iwd']}/out.0").read_text()
    assert output.splitlines()[-2:] == [f"start on {second_pod}", "finished"], output


def test_a_payload_over_the_memory_limit_is_oomkilled_and_the_pilot_held(site: Site, tmp_path: Any) -> None:
    name = unique("oom")
    cluster = user_jobs(site, name, 1, 1, 512,
                        "echo hogging; python3 -c 'x = bytearray(1500 * 2 ** 20); import time; time.sleep(60)'\n")
    site.provision(name, RAMP_START="1", MAX_PILOTS="1")
    kubeconfig = tmp_path / "kubeconfig"
    site.sim.write_kubeconfig(str(kubeconfig), namespace=NAMESPACE)
    pods = PodWatch(site.sim)

    def oom_killed() -> Optional[str]:
        killed = [pod_name for pod_name, pod in pods.look().items()
                  if (pods.ended.get(pod_name) or {}).get("reason") == "OOMKilled"
                  and pod["metadata"].get("labels", {}).get("podgahp.htcondor.org/queue")]
        if not killed:
            return None
        # The pilot's pod: its sandbox is its grid job's (the grid job forgets the pod once held).
        ours = site.sandboxes(name)
        mine = [p for p in killed if pods.seen[p]["metadata"].get("annotations", {}).get(ANN_SANDBOX_ID) in ours]
        return mine[0] if mine else None
    # what an admin watching the pods sees (kubectl shows the reason as the pod's status)
    with open(tmp_path / "watch.out", "w") as out:
        watch = subprocess.Popen(["kubectl", "--kubeconfig", str(kubeconfig), "get", "pods", "--watch"],
                                 stdout=out, stderr=subprocess.STDOUT)
    try:
        pod = site.ce.wait_for(oom_killed, timeout=180, interval=0.2, what="the pilot's pod OOMKilled")
        site.ce.wait_for(lambda: re.search(rf"^{pod}\s+0/1\s+OOMKilled\s", (tmp_path / "watch.out").read_text(),
                                           re.M), timeout=30, interval=0.2, what="kubectl showing OOMKilled")
    finally:
        watch.terminate()
        watch.wait(30)
    ended = pods.terminated(pod) or {}
    assert ended.get("exitCode") == 137, ended

    def held() -> Optional[Dict[str, Any]]:
        found = [ad for ad in site.pilots(name) if ad["JobStatus"] == HELD]
        return found[0] if found else None
    pilot = site.ce.wait_for(held, timeout=120, interval=1, what="the pilot held at the CE")
    assert str(pilot["HoldReason"]).startswith("OOMKilled: the pilot exceeded its memory limit"), pilot
    # The user's job lost its pilot: its shadow would wait out the job lease to reconnect (unless
    # the starter saw the kill first and the job ended: nothing left to remove then).
    site.users.run(["condor_rm", str(cluster)], user="pilot", check=False)
    site.users.run(["condor_rm", "-forcex", str(cluster)], user="pilot", check=False)


def test_a_refreshed_proxy_reaches_the_running_pilot(site: Site) -> None:
    """A factory's pilot with a proxy: BLAH_JOB_REFRESH_PROXY puts the new proxy into the running
    pod, where a process of the pilot (its user's job) reads the new content."""
    name = unique("proxy")
    ce_home = site.ce.user_dir()
    old_proxy, new_proxy = x509_proxy(2), x509_proxy(3)
    write_user_file(site.ce, f"{ce_home}/x509up", old_proxy, mode=0o600)
    script = f"{site.ce.installation.src_dir}/gahp/data/podgahp-pilot-startup.sh"
    environment = " ".join([f"CONDOR_HOST={collector_address(site.users)}", "NUM_CPUS=1", "MEMORY=512",
                            "PODGAHP_PILOT_TOKEN_FILE=pool.token", "ACCEPT_IDLE_MINUTES=1",
                            f"PODGAHP_PILOT_START='JobBatchName =?= \"\"{name}\"\"'", PILOT_ENVIRONMENT])
    site.ce.submit("\n".join([
        "universe = vanilla", f"executable = {script}", f"initialdir = {ce_home}", "output = pilot.out",
        "error = pilot.err", "x509userproxy = x509up", f"transfer_input_files = {site.token_file}",
        "+xcount = 1", "+maxMemory = 512", f'environment = "{environment}"', "queue"]) + "\n", cwd=ce_home)
    # The user's job, in the pod that started with the old proxy, waits until the pilot's proxy file
    # (where podgahp staged it) holds something else, and says what.
    old = hashlib.md5(old_proxy.encode()).hexdigest()
    watch = (f"f=/pilot/.podgahp/x509up; n=0\n"
             f"while [ \"$(md5sum < $f | cut -d' ' -f1)\" = {old} ] && [ $n -lt 900 ]; do sleep 0.2; n=$((n+1)); done\n"
             "echo \"now $(md5sum < $f | cut -d' ' -f1)\"\n")
    cluster = user_jobs(site, name, 1, 1, 512, watch)
    site.users.wait_for(lambda: [ad for ad in job_ads(site, cluster) if ad["JobStatus"] == RUNNING],
                        timeout=150, interval=1, what="the user job running on the pilot")
    write_user_file(site.ce, f"{ce_home}/x509up", new_proxy, mode=0o600)
    done = site.users.wait_for(lambda: [ad for ad in job_ads(site, cluster) if ad["JobStatus"] == COMPLETED],
                               timeout=120, interval=1, what="the user job seeing the new proxy")[0]
    output = site.users.path(f"{done['Iwd']}/out.0").read_text()
    assert output == f"now {hashlib.md5(new_proxy.encode()).hexdigest()}\n", output
    assert any("BLAH_JOB_REFRESH_PROXY" in line for line in site.ce.gahp_lines())


def test_kubectl_logs_of_a_pilot_pod_are_its_startds(site: Site, tmp_path: Path) -> None:
    """What an admin reads with ``kubectl logs``: the real condor_startd's lines, up to its claim by
    the user's job."""
    name = unique("logs")
    cluster = user_jobs(site, name, 1, 1, 512, "sleep 120\n")
    site.provision(name, RAMP_START="1", MAX_PILOTS="1")
    job = site.users.wait_for(lambda: [ad for ad in job_ads(site, cluster) if ad["JobStatus"] == RUNNING],
                              timeout=150, interval=1, what="the user job running on a pilot")[0]
    pod = slot_of(site, job).split("@", 1)[1]
    kubeconfig = tmp_path / "kubeconfig"
    site.sim.write_kubeconfig(str(kubeconfig), namespace=NAMESPACE)

    def logs() -> str:
        done = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "logs", pod], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout
    text = wait_until(logs, "the startd's claim in kubectl logs", timeout=60, interval=0.5,
                      done=lambda text: re.search(r"slot1\S*: Changing (?:state and )?activity: \S+ -> (?:Claimed/)?Busy", text))
    assert re.search(r"^.* \*\* condor_startd \(CONDOR_STARTD\) STARTING UP$", text, re.M), text[-3000:]
    assert re.search(r"^.* \*\* condor_master \(CONDOR_MASTER\) STARTING UP$", text, re.M), text[-3000:]
    # the startd's own version banner: the image's HTCondor, the series under test
    version = site.users.installation.condor_version
    assert re.search(rf"\*\* \$CondorVersion: {re.escape(version)} ", text), (version, text[:3000])
    site.users.run(["condor_rm", str(cluster)], user="pilot")


def _pilot_pod(name: str, image: str, collector: str, provisioner: str) -> Dict[str, Any]:
    """A pod running the image's pilot start script, as a pilot's pod does; its startd starts no job."""
    env = {"CONDOR_HOST": collector, "NUM_CPUS": "1", "MEMORY": "256", "PODGAHP_PILOT_TOKEN_FILE": "/pool/token",
           "PODGAHP_PILOT_PROVISIONER": provisioner, "PODGAHP_PILOT_START": "false"}
    return {"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "automountServiceAccountToken": False, "securityContext": {"fsGroup": 1000},
        "containers": [{"name": "pilot", "image": image, "command": [IMAGE_START_SCRIPT], "workingDir": "/pilot",
                        "env": [{"name": k, "value": v} for k, v in env.items()],
                        "resources": {"limits": {"cpu": "1", "memory": "512Mi"}},
                        "volumeMounts": [{"name": "work", "mountPath": "/pilot"},
                                         {"name": "pool", "mountPath": "/pool", "readOnly": True}]}],
        "volumes": [{"name": "work", "emptyDir": {}},
                    {"name": "pool", "secret": {"secretName": "pool", "defaultMode": 0o440}}]}}


def test_a_simulator_killed_while_pilots_run_leaves_nothing_after_the_next_start(site: Site, tmp_path: Path) -> None:
    """``podgahp sim k8s --runtime runc`` killed with -9 while two real pilots (condor_master,
    condor_startd and their children, in the pool) run: the next simulator started on the machine
    removes every process, mount, cgroup and file of theirs before it serves."""
    provisioner = unique("killed")
    reference, image = pilot_image(site.users.installation)
    runtime_dir = tmp_path / "runtime"
    first = start_runc_sim(tmp_path, runtime_dir, "1", {reference: str(image)})
    second: Optional["subprocess.Popen[str]"] = None
    try:
        api = config.new_client_from_config(config_file=str(tmp_path / "kubeconfig-1"), persist_config=False)
        core = client.CoreV1Api(api)
        token = base64.b64encode(pilot_token(site.users).encode()).decode()
        core.create_namespaced_secret("default", {"metadata": {"name": "pool"}, "data": {"token": token}})
        for n in range(2):
            core.create_namespaced_pod("default", _pilot_pod(f"pilot-{n}", reference, collector_address(site.users),
                                                             provisioner))
        site.users.wait_for(lambda: len(site.slots(f'PodgahpProvisioner =?= "{provisioner}"')) == 2, timeout=120,
                            interval=1, what="both pilots' startds in the pool")
        api.close()
        instance = instance_of(runtime_dir, first)
        first.kill()
        first.wait(10)
        left = machine_leftovers(str(runtime_dir), instance)
        assert len([item for item in left if item.startswith("process") and "condor_startd" in item]) == 2, left
        assert any(item.startswith("mount") for item in left) and any(item.startswith("cgroup") for item in left), left
        second = start_runc_sim(tmp_path, runtime_dir, "2", {reference: str(image)})
        # (a killed process's entry stays until its parent, here the machine's init, reaps it)
        wait_until(lambda: machine_leftovers(str(runtime_dir), instance), "nothing left", timeout=30,
                   done=lambda left: left == [])
    finally:
        for proc in (first, second):
            if proc is not None:
                stop_sim(proc)
    assert os.listdir(runtime_dir) == []
