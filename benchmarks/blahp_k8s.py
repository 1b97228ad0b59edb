"""Benchmark: podgahp against HTCondor's own blahp Kubernetes scripts, on the same pilots and cluster.

HTCondor ships ``kubernetes_submit.sh`` and ``kubernetes_status.sh`` with the blahp: blahpd runs one
script per request, and each script runs ``kubectl`` (one process, one API connection, a discovery
of the API's resources) per pilot. They are taken here from the Debian trixie root the tests use
(``harness.rootfs``: HTCondor 23.x) and run as blahpd runs them (``blah_max_threaded_cmds`` of
its shipped ``blah.config`` at once), with the machine's ``kubectl`` against the simulated cluster.
podgahp gets the same pilots through its protocol, as the gridmanager sends them. Reported: wall
time and CPU seconds (the scripts with every ``kubectl`` they start; the GAHP process once it has
started and answered the gridmanager's first ``BLAH_PING``: a GAHP serves for as long as the
gridmanager runs) of submitting N pilots and asking each one's status once: the medians of
``--repeat`` runs of each, taking turns, and the median ratio of the pairs.

    .venv/bin/python benchmarks/blahp_k8s.py --pilots 200
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from harness.rootfs import build_rootfs  # noqa: E402
from bench import SimProcess, alternate, cpu_s, load, medians, ratio  # noqa: E402
from podgahp_sim.k8s import SimConfig, SimNode  # noqa: E402
from gahp_driver import GahpProcess, gahp_env, script  # noqa: E402
from k8s_gahp import submit_ad  # noqa: E402

NAMESPACE = "bench"
IMAGE = "registry.example.org/osg/pilot:1"
SCRIPTS = ("kubernetes_submit.sh", "kubernetes_status.sh", "blah_load_config.sh")


def _blahp_dir(tmp: str) -> Tuple[str, str, int]:
    """The blahp's scripts and configuration copied from the trixie root: (directory, blah.config,
    the commands blahpd runs at once)."""
    root = build_rootfs("trixie")
    where = os.path.join(tmp, "blahp")
    os.mkdir(where)
    for name in SCRIPTS:
        shutil.copy(root / "usr/libexec/blahp" / name, where)
    config = os.path.join(tmp, "blah.config")
    shutil.copy(root / "etc/blah.config", config)
    threads = 50
    for line in Path(config).read_text().splitlines():
        if line.startswith("blah_max_threaded_cmds=") and line.split("=", 1)[1].strip().isdigit():
            threads = int(line.split("=", 1)[1])
    return where, config, threads


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_blahp(sim: SimProcess, tmp: str, pilots: int) -> Dict[str, float]:
    where, config, threads = _blahp_dir(tmp)
    kubeconfig = os.path.join(tmp, "kubeconfig-blahp")
    sim.write_kubeconfig(kubeconfig, namespace=NAMESPACE)
    requirements = os.path.join(tmp, "requirements")
    Path(requirements).write_text(f'k8s_image="{IMAGE}"\nRequestCpus=1\nRequestMemory=100\n'
                                  f'k8s_namespace="{NAMESPACE}"\n')
    env = dict(os.environ, KUBECONFIG=kubeconfig, BLAHPD_CONFIG_LOCATION=config, HOME=tmp)
    before = set(Path("/tmp").glob("k8s_sub.*"))

    def submit(i: int) -> str:
        out = subprocess.run(["bash", f"{where}/kubernetes_submit.sh", "-c", "/bin/true", "-C", requirements,
                              "-D", f"{tmp}/home_bl#{i}.0", "-T", tmp, "-w", tmp],
                             env=env, capture_output=True, text=True, timeout=120)
        lines = [line for line in out.stdout.splitlines() if line.startswith("BLAHP_JOBID_PREFIX")]
        assert out.returncode == 0 and lines, (out.stdout, out.stderr)
        return lines[0][len("BLAHP_JOBID_PREFIX"):]

    def status(job_id: str) -> str:
        out = subprocess.run(["bash", f"{where}/kubernetes_status.sh", job_id], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0 and "JobStatus=" in out.stdout, (out.stdout, out.stderr)
        return out.stdout

    cpu, started = _children_cpu_s(), time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        job_ids = list(pool.map(submit, range(pilots)))
        list(pool.map(status, job_ids))
    result = {"wall_s": time.monotonic() - started, "cpu_s": _children_cpu_s() - cpu}
    for leftover in set(Path("/tmp").glob("k8s_sub.*")) - before:  # the submit script keeps a copy there
        leftover.unlink(missing_ok=True)
    created = sim.count("POST", f"/namespaces/{NAMESPACE}/pods$", status=201)
    assert created == pilots, created
    return result


def run_podgahp(sim: SimProcess, tmp: str, pilots: int) -> Dict[str, float]:
    kubeconfig = os.path.join(tmp, "kubeconfig-podgahp")
    sim.write_kubeconfig(kubeconfig, namespace=NAMESPACE)
    env = gahp_env(tmp, PODGAHP_K8S_KUBECONFIG=kubeconfig, PODGAHP_K8S_IMAGE=IMAGE, PODGAHP_K8S_CE_NAME="bench",
                   PODGAHP_K8S_REAP_INTERVAL_SECONDS="0")
    with GahpProcess([script("k8s_gahp")], env=env, cwd=tmp) as gahp:
        started = time.monotonic()
        gahp.start(timeout=60)
        gahp.command("ASYNC_MODE_ON")
        # as the gridmanager: a ping of the resource before its first submit
        assert gahp.command("BLAH_PING", "1", "k8s") == ["S"]
        assert gahp.wait_results(["1"], timeout=60)["1"][0] == "0"
        startup_s = time.monotonic() - started
        cpu, started = cpu_s(gahp.proc.pid), time.monotonic()
        ids = [str(i + 2) for i in range(pilots)]
        for rid in ids:
            assert gahp.command("BLAH_JOB_SUBMIT", rid, submit_ad(tmp, int(rid))) == ["S"]
        results = gahp.wait_results(ids, timeout=600)
        job_ids: List[str] = [r[2] for r in results.values() if r[0] == "0"]
        assert len(job_ids) == pilots, list(results.values())[:3]
        status_ids = [str(pilots + i + 2) for i in range(pilots)]
        for rid, job_id in zip(status_ids, job_ids):
            assert gahp.command("BLAH_JOB_STATUS", rid, job_id) == ["S"]
        answers = gahp.wait_results(status_ids, timeout=600)
        assert all(a[0] == "0" for a in answers.values()), list(answers.values())[:3]
        result = {"wall_s": time.monotonic() - started, "cpu_s": cpu_s(gahp.proc.pid) - cpu, "startup_s": startup_s}
        gahp.command("QUIT")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pilots", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each, taking turns; the medians and the median ratio of the pairs count")
    args = parser.parse_args()
    if shutil.which("kubectl") is None:
        sys.exit("kubectl is not on PATH (make system-deps installs Debian's kubernetes-client)")
    node = SimNode("big", cpu="100000", memory="100000Gi", pods=100000)
    runners = {"blahp": run_blahp, "podgahp": run_podgahp}

    def run(name: str) -> Dict[str, float]:
        with SimProcess(SimConfig(nodes=(node,), namespaces=("default", NAMESPACE))) as sim, \
                tempfile.TemporaryDirectory() as tmp:
            return runners[name](sim, tmp, args.pilots)

    print(f"`benchmarks/blahp_k8s.py`, median of {args.repeat} runs of each taking turns; {load()} at the start")
    print()
    runs = alternate(list(runners), args.repeat, run)
    blahp, ours = medians(runs["blahp"]), medians(runs["podgahp"])
    print(f"| submit + status of {args.pilots} pilots | wall s | CPU s |")
    print("|---|---:|---:|")
    print(f"| blahp `kubernetes_*.sh` + kubectl | {blahp['wall_s']:.1f} | {blahp['cpu_s']:.1f} |")
    print(f"| podgahp `k8s_gahp` | {ours['wall_s']:.2f} | {ours['cpu_s']:.2f} |")
    print(f"| podgahp faster by | {ratio(runs['blahp'], runs['podgahp'], 'wall_s'):.0f}× "
          f"| {ratio(runs['blahp'], runs['podgahp'], 'cpu_s'):.0f}× |")
    print()
    print(f"podgahp's start-up and first ping, once per gridmanager: {ours['startup_s']:.1f} s; {load()} at the end")


if __name__ == "__main__":
    main()
