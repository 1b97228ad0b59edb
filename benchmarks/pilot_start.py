"""Benchmark: how long a user's job waits for a new pilot pod, hop by hop.

A user pool (collector, negotiator, schedd), ``podgahp provision`` running as a service, a CE-like
pool (shipped routes, gridmanager, ``k8s_gahp``) and the simulated cluster running its pods through
runc from the pilot image, as in ``make demo``. Each round submits one job of a shape no pilot has
yet (so it needs a new pilot) and times, from its ``condor_submit``, when the pilot is submitted to
the CE (provision cycle), its routed copy exists (CE routing), the GAHP receives ``BLAH_JOB_SUBMIT``
(gridmanager), the pod exists (GAHP), its container runs (pod start), its startd is in the user
pool (startd joining), the negotiator matches the job to it (negotiation) and the job runs on it
(claim and job start). The provisioner's, the GAHP's and the negotiator's hops come from their logs
(to the millisecond); the others are seen by polling each pool and the cluster in a thread of its
own, to a few tenths of a second. Printed: the median, least and most of each hop over the rounds,
and the knob that bounds it with its value in this run and HTCondor's or podgahp's default; with
``--debug``, each round's times and, for a round whose negotiation took over three negotiator
intervals, the negotiator's lines of those cycles (the schedd's and shadow's for a slow claim).

    .venv/bin/python benchmarks/pilot_start.py --rounds 6 [--series sid]
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "tests", ROOT / "tests" / "live", ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench import load  # noqa: E402
from e2e import E2E_FAST, K8S_KNOBS, NAMESPACE, kubeconfig_text, routes_config, write_user_file  # noqa: E402
from harness import Installation, Pool, get_installation  # noqa: E402
from harness.image import pilot_image  # noqa: E402
from harness.userpool import CONFIG as USER_POOL_CONFIG  # noqa: E402
from harness.userpool import LOOPBACK_PILOT_ENVIRONMENT, collector_address, pilot_token  # noqa: E402
from podgahp_sim.k8s import KubeSim, SimConfig, SimNode  # noqa: E402

PROVISIONER = "bench-pilot-start"
PROVISION_INTERVAL_S = 10
#: The hops, in order: name, the knob that bounds it (value here, default).
HOPS: Tuple[Tuple[str, str], ...] = (
    ("provision cycle", f"PODGAHP_PROVISION_INTERVAL_SECONDS ({PROVISION_INTERVAL_S} here, default 60): "
                        "the wait for the next cycle, then the cycle's queries and submit"),
    ("CE routing", "JOB_ROUTER_POLLING_PERIOD (2 here, HTCondor's 10)"),
    ("gridmanager", "SCHEDD_INTERVAL (2 here, HTCondor's 300) and GRIDMANAGER_CONTACT_SCHEDD_DELAY "
                    "(1 here, 5): the schedd hands a new grid job to its gridmanager"),
    ("GAHP", "none: the pod and its input Secret, two API writes"),
    ("pod start", "the cluster: scheduling, image pull (none here), container start"),
    ("startd joining", "the pilot image: the start script, condor_master, the startd's first ad"),
    ("negotiation", "NEGOTIATOR_INTERVAL (5 here, HTCondor's 60): the next cycle after the startd's ad"),
    ("claim and job start", "none: the schedd claims the slot and its shadow starts the job (tenths of a second)"),
)
EVENTS = ("submitted", "pilot", "routed", "gahp", "pod", "running", "joined", "matched", "started")
#: The user pool's daemons write times to the millisecond, for the negotiator's match.
SUB_SECOND_LOGS = "NEGOTIATOR_DEBUG = D_MATCH D_SUB_SECOND\nSCHEDD_DEBUG = D_SUB_SECOND\nSHADOW_DEBUG = D_SUB_SECOND\n"
_STAMP = r"(\d\d/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) "


class Watcher:
    """First-seen times of each event of one round, from a thread that polls."""

    def __init__(self, users: Pool, ce: Pool, sim: KubeSim, memory: int) -> None:
        self.users, self.ce, self.sim, self.memory = users, ce, sim, memory
        self.seen: Dict[str, float] = {}
        self.pod = ""
        self.started_pods: Dict[str, float] = {}
        """When each pod's container was first seen running (before the pod's pilot is known)."""
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=target, daemon=True) for target in (self._ce, self._users,
                                                                                  self._cluster)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _mark(self, event: str, when: Optional[float] = None) -> None:
        self.seen.setdefault(event, when if when is not None else time.time())

    def _ce(self) -> None:
        group = f"1c/{self.memory}MiB"
        while not self._stop.is_set() and not self.pod:
            for ad in self.ce.q(f'PodgahpGroup =?= "{group}/1GiB" && RoutedFromJobId =!= undefined', ["GridJobId"]):
                self._mark("routed")
                parts = str(ad.get("GridJobId") or "").split()
                if len(parts) == 4:
                    self.pod = parts[3].rsplit("/", 1)[-1]
            self._stop.wait(0.05)

    def _users(self) -> None:
        while not self._stop.is_set():
            if self.pod and "joined" not in self.seen:
                slots = self.users.run(["condor_status", "-af", "Machine"], check=False).stdout.split()
                if self.pod in slots:
                    self._mark("joined")
            if "joined" in self.seen:
                jobs = self.users.q(f"RequestMemory == {self.memory}", ["JobStatus"])
                if any(ad.get("JobStatus") == 2 for ad in jobs):
                    self._mark("started")
                    return
            self._stop.wait(0.05)

    def _cluster(self) -> None:
        names: set = set()
        while not self._stop.is_set() and "running" not in self.seen:
            for pod in self.sim.pods(NAMESPACE):
                name = pod["metadata"]["name"]
                state = ((pod.get("status") or {}).get("containerStatuses") or [{}])[0].get("state") or {}
                if name not in self.started_pods and ("running" in state or "terminated" in state):
                    names.add(name)
                    self.started_pods[name] = time.time()
            if self.pod and self.pod in self.started_pods:
                self._mark("running", self.started_pods[self.pod])
            self._stop.wait(0.1)


def pilot_submitted(ce: Pool, memory: int) -> float:
    """When the provisioner submitted the pilot of the group of ``memory`` MiB, from its log (ms)."""
    for line in ce.log("PodgahpProvisionLog").splitlines():
        if f"group 1c/{memory}MiB/1GiB: submitted " in line:
            return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise RuntimeError(f"no pilot of 1c/{memory}MiB in the provisioner's log")


def gahp_submit_times(ce: Pool, pod: str) -> Tuple[float, float]:
    """(received, answered) of the BLAH_JOB_SUBMIT that made ``pod``, from the GAHP's log (ms)."""
    for name in ce.log_names():
        if not os.path.basename(name).startswith("PodgahpLog.k8s"):
            continue
        for line in ce.log(name).splitlines():
            if f"job=k8s/{NAMESPACE}/{pod} " in line and "BLAH_JOB_SUBMIT rc=0" in line:
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                took = float(re.search(r"\(([0-9.]+) s\)", line).group(1))  # type: ignore[union-attr]
                return stamp - took, stamp
    raise RuntimeError(f"no BLAH_JOB_SUBMIT for pod {pod} in the GAHP's log")


def _stamp(text: str) -> float:
    return datetime.datetime.strptime(text, "%m/%d/%y %H:%M:%S.%f").timestamp()


def matched(users: Pool, cluster: int, pod: str) -> Optional[float]:
    """When the negotiator matched job ``cluster``.0 to ``pod``'s slot, from its log (ms); None if it
    never did."""
    found = re.search(_STAMP + rf"\s*Matched {cluster}\.0 .* slot\S*@{re.escape(pod)}$", users.log("NegotiatorLog"),
                      re.M)
    return _stamp(found.group(1)) if found else None


def first_start(users: Pool, cluster: int) -> Optional[Tuple[float, str, bool]]:
    """The first start of job ``cluster``.0, from the schedd's log (ms): when, the pod of the slot, and
    whether its shadow was started for it (False: the schedd gave it a claim it held for another job
    when that one ended, with no negotiation); None if the log shows no start."""
    found = re.search(_STAMP + rf"(?:Started shadow for job {cluster}\.0 on slot\S*@(\S+)"
                      rf"|match \(slot\S*@(\S+) .*\) switching to job {cluster}\.0\b)", users.log("SchedLog"))
    if not found:
        return None
    return _stamp(found.group(1)), found.group(2) or found.group(3), bool(found.group(2))


def window(pool: Pool, log: str, since: float, until: float, pattern: str = "") -> List[str]:
    """The lines of one of ``pool``'s logs written between two times (for a slow round's --debug)."""
    lines = []
    for line in pool.log(log).splitlines():
        stamp = re.match(_STAMP, line)
        if stamp and since <= _stamp(stamp.group(1)) <= until and re.search(pattern, line):
            lines.append(f"{log}: {line[:200]}")
    return lines


def setup(installation: Installation) -> Tuple[KubeSim, Pool, Pool, "subprocess.Popen[str]"]:
    reference, image = pilot_image(installation)
    nodes = (SimNode("node-1", cpu="16", memory="64Gi"),)
    sim = KubeSim(SimConfig(nodes=nodes, namespaces=("default", NAMESPACE)), runtime="runc",
                  images={reference: str(image)}).start()
    users = Pool(installation, extra_config=USER_POOL_CONFIG + SUB_SECOND_LOGS, name="bench-users").start()
    ce = Pool(installation, name="bench-ce", files={"kubeconfig": kubeconfig_text(sim)},
              extra_config=(routes_config(installation) + f"K8S_GAHP = {installation.bin('k8s_gahp')}\n"
                            + K8S_KNOBS + E2E_FAST + f"PODGAHP_K8S_IMAGE = {reference}\n")
              ).start()
    token = f"{ce.user_dir()}/pool.token"
    write_user_file(ce, token, pilot_token(users), mode=0o600)
    env = {"CONDOR_CONFIG": ce.condor_config,
           "_CONDOR_PODGAHP_PROVISION_POOL": collector_address(users),
           "_CONDOR_PODGAHP_PROVISION_NAME": PROVISIONER,
           "_CONDOR_PODGAHP_PROVISION_LOG": f"{ce.log_dir}/PodgahpProvisionLog",
           "_CONDOR_PODGAHP_PROVISION_PILOT_TOKEN_FILE": token,
           "_CONDOR_PODGAHP_PROVISION_INTERVAL_SECONDS": str(PROVISION_INTERVAL_S),
           "_CONDOR_PODGAHP_PROVISION_RAMP_START": "1",
           "_CONDOR_PODGAHP_PROVISION_PILOT_ENVIRONMENT": "_CONDOR_STARTD_NOCLAIM_SHUTDOWN=15 "
                                                          "_CONDOR_UPDATE_INTERVAL=5 "
                                                          + LOOPBACK_PILOT_ENVIRONMENT}
    provisioner = installation.popen([installation.bin("podgahp"), "provision"], user="pilot", env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return sim, users, ce, provisioner


class NotSplit(Exception):
    """A round whose times cannot be split into the hops of a new pilot (said in the table)."""


def round_(users: Pool, ce: Pool, sim: KubeSim, memory: int) -> Dict[str, float]:
    """One job of a new shape, from its submit to its start on a new pilot: event -> time. Raises
    NotSplit when its first start was not on the pilot made for it, or a log lacks a hop."""
    home = users.user_dir()
    watcher = Watcher(users, ce, sim, memory)
    watcher.start()
    watcher.seen["submitted"] = time.time()
    cluster = users.submit("\n".join([
        "universe = vanilla", "executable = /bin/sleep", "arguments = 5", f"initialdir = {home}", "request_cpus = 1",
        f"request_memory = {memory}", "request_disk = 10240", "queue"]) + "\n", cwd=home)
    deadline = time.monotonic() + 300
    while "started" not in watcher.seen and time.monotonic() < deadline:
        start = first_start(users, cluster)
        if start is not None and watcher.pod and start[1] != watcher.pod:
            break  # started elsewhere: no wait for the pilot made for it
        time.sleep(0.2)
    watcher.stop()
    start = first_start(users, cluster)
    if start is None:
        raise NotSplit(f"job {cluster}.0 ({memory} MiB) did not start within 300 s: seen {sorted(watcher.seen)}")
    started, pod, negotiated = start
    if len(re.findall(rf"Starting add_shadow_birthdate\({cluster}\.0\)", users.log("SchedLog"))) > 1:
        raise NotSplit(f"job {cluster}.0 ({memory} MiB) was evicted from {pod} and started again (its pilot ended)")
    if pod != watcher.pod:
        how = "matched by the negotiator" if negotiated else "on a claim the schedd held for an earlier job"
        raise NotSplit(f"job {cluster}.0 ({memory} MiB) started first on {pod} ({how}), not on {watcher.pod or 'the'}"
                       " pilot made for it")
    if "running" not in watcher.seen and watcher.pod in watcher.started_pods:
        watcher.seen["running"] = watcher.started_pods[watcher.pod]
    match = matched(users, cluster, pod)
    if match is None or "running" not in watcher.seen or "joined" not in watcher.seen:
        missing = ("no match of its own (a claim the schedd held for an earlier job on that pilot)"
                   if not negotiated else "no match in the NegotiatorLog" if match is None
                   else "its pod's start or its startd's ad not seen")
        raise NotSplit(f"job {cluster}.0 ({memory} MiB) started on {pod} made for it, but {missing}")
    try:
        received, answered = gahp_submit_times(ce, watcher.pod)
        times = dict(watcher.seen)
        times["pilot"] = pilot_submitted(ce, memory)
    except RuntimeError as e:
        raise NotSplit(f"job {cluster}.0 ({memory} MiB): {e}") from None
    times["gahp"], times["pod"] = received, answered
    times["matched"] = match
    times.setdefault("started", started)
    # a poll may see two events at once: the order of the hops holds
    for earlier, later in zip(EVENTS, EVENTS[1:]):
        times[later] = max(times[later], times[earlier])
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds split into hops (up to twice as many tried)")
    parser.add_argument("--series", default="trixie")
    parser.add_argument("--debug", action="store_true", help="print the gridmanager's and provisioner's lines")
    args = parser.parse_args()
    installation = get_installation(args.series)
    installation.acquire()
    try:
        installation.install_podgahp()
    finally:
        installation.release()
    before = load()
    sim, users, ce, provisioner = setup(installation)
    rounds: List[Dict[str, float]] = []
    not_split: List[str] = []
    try:
        for n in range(2 * args.rounds):
            if len(rounds) == args.rounds:
                break
            try:
                rounds.append(round_(users, ce, sim, 512 + 64 * n))
            except NotSplit as e:
                not_split.append(str(e))
                print(f"round {n + 1} not split: {e}")
                continue
            if args.debug:
                last = rounds[-1]
                print({k: round(v - last["submitted"], 1) for k, v in last.items()})
                if last["matched"] - last["joined"] > 3 * 5:  # three negotiator intervals
                    print("\n".join(window(users, "NegotiatorLog", last["joined"] - 6, last["matched"] + 1,
                                           r"Phase|Matched|Rejected|[Nn]egotiat|[Ss]ubmitter|Getting|cycle|slot")))
                if last["started"] - last["matched"] > 5:
                    print("\n".join(window(users, "SchedLog", last["matched"], last["started"] + 1)
                                    + window(users, "ShadowLog", last["matched"], last["started"] + 1)))
    finally:
        provisioner.terminate()
        provisioner.wait(60)
        if "--debug" in sys.argv:
            for line in ce.log("GridmanagerLog.pilot").splitlines():
                if re.search(r"STARTING UP|BLAH_PING|BLAH_JOB_SUBMIT|COMMANDS|No jobs left|Adding job|new job", line):
                    print(line[:160])
            print(ce.log("PodgahpProvisionLog")[-3000:])
        ce.stop()
        users.stop()
        sim.stop()
    hops = {name: [r[b] - r[a] for r in rounds] for (name, _), a, b in zip(HOPS, EVENTS, EVENTS[1:])}
    totals = [r["started"] - r["submitted"] for r in rounds]
    print(f"\nuser job's condor_submit to its start on a new pilot pod: {len(rounds)} rounds split of "
          f"{len(rounds) + len(not_split)}, HTCondor {installation.condor_version} ({installation.name}), pods run by runc")
    print(f"| hop | median s | min s | max s | bounded by |\n|---|---:|---:|---:|---|")
    for (name, knob), values in zip(HOPS, hops.values()):
        print(f"| {name} | {_figures(values)} | {knob} |")
    print(f"| **total** | {_figures(totals, bold=True)} | |")
    reasons = "; ".join(not_split) or "none"
    print(f"| rounds not split | {len(not_split)} | | | {reasons} |")
    print(f"{before} before, {load()} after")
    return 0


def _figures(values: List[float], bold: bool = False) -> str:
    """Median, least and most, as three cells ("–" with no round)."""
    if not values:
        return "– | – | –"
    median = f"{statistics.median(values):.1f}"
    return f"{f'**{median}**' if bold else median} | {min(values):.1f} | {max(values):.1f}"


if __name__ == "__main__":
    sys.exit(main())
