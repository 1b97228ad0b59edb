"""A CE-like personal HTCondor pool for live tests and the demo.

Owns: the per-run directory and CONDOR_CONFIG of one pool, starting condor_master (collector,
schedd, JobRouter; the schedd starts gridmanagers, which start the GAHP) as root in the
installation, waiting until it is usable, running tools in it, reading its queue and logs, and
stopping it so that no daemon, gridmanager or GAHP process is left behind.

The configuration is the stand-alone CE-like pool shipped in ce-config/standalone (so tests
exercise the shipped files), then podgahp's condor_config.d/*, then the harness's fast-test knobs,
then the caller's extra configuration:

    with Pool("trixie", extra_config=ROUTES) as pool:
        pool.submit(SUBMIT_TEXT, user="pilot")
        pool.wait_for(lambda: pool.q("JobStatus == 4"), timeout=120, what="job completion")

Must not know podgahp's protocol or backends; the caller supplies routes and GAHP knobs.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TextIO, TypeVar, Union

from harness.rootfs import HarnessError, Installation, pid_alive, get_installation

T = TypeVar("T")

#: Chroot directory holding the per-run directories of pools in a root filesystem.
POOLS_DIR = "/srv/podgahp/pools"
#: The same for native installations (host path).
NATIVE_POOLS_DIR = "/var/tmp/podgahp-pools"

#: Per-run directories older than this (seconds) are removed when a pool starts.
KEEP_OLD_RUNS_S = 2 * 86400

#: Knobs that make a test pool react within seconds (htcondor-setup.md §3); the defaults are
#: minutes. Written after ce-config and condor_config.d, before the caller's extra config.
FAST_CONFIG = """\
## Fast-turnaround knobs for tests. HTCondor's defaults (seconds): SCHEDD_INTERVAL 300 (starting
## gridmanagers for new grid jobs), JOB_ROUTER_POLLING_PERIOD 10, PERIODIC_EXPR_INTERVAL 60
## (CE hold/remove policy), GRIDMANAGER_CONTACT_SCHEDD_DELAY 5, GRIDMANAGER_JOB_PROBE_INTERVAL 60
## (BLAH_JOB_STATUS; podgahp's 10-podgahp-defaults.conf sets 20 for "batch"),
## GRIDMANAGER_RESOURCE_PROBE_INTERVAL 300 (re-ping after a failed BLAH_PING).
## (HTCondor has no trailing comments: a "#" after a value would become part of it.)
SCHEDD_INTERVAL = 5
JOB_ROUTER_POLLING_PERIOD = 2
PERIODIC_EXPR_INTERVAL = 5
GRIDMANAGER_CONTACT_SCHEDD_DELAY = 1
GRIDMANAGER_JOB_PROBE_INTERVAL = 5
GRIDMANAGER_JOB_PROBE_INTERVAL_BATCH = 5
GRIDMANAGER_RESOURCE_PROBE_INTERVAL = 10
## podgahp reap (condor_config.d/50-podgahp-reap-defaults.conf) runs only in a test that includes it.
SCHEDD_CRON_JOBLIST =
## Every GAHP line in and out appears in GridmanagerLog.<user>.
GRIDMANAGER_DEBUG = D_FULLDEBUG
JOB_ROUTER_DEBUG = D_FULLDEBUG
## Several pools run side by side: the collector takes a free port (address in LOG).
PODGAHP_CE_PORT = 0
"""

#: Log files shown by dump_logs, in this order; other files in LOG follow.
LOG_ORDER = ("MasterLog", "CollectorLog", "SchedLog", "JobRouterLog")
#: podgahp's logs, which its programs write into their user's own directory in LOG.
_PODGAHP_LOGS = ("PodgahpLog", "PodgahpProvisionLog")

_ROUTER_READY = re.compile(
    r"Routes will be matched in this order|routing table is|JobRouter is disabled|routing will not take place")

#: Name of a pool's per-run directory (and of its user_dir): <prefix>-<pid>-<6 hex digits>.
_RUN_NAME = re.compile(r".+-\d+-[0-9a-f]{6}")

_live_pools: "weakref.WeakSet[Pool]" = weakref.WeakSet()


class PoolError(HarnessError):
    """The pool failed to start, a command failed, or a wait timed out."""


class Pool:
    """One CE-like personal pool. Use as a context manager, or call start() and stop().

    Args:
        series: "trixie", "sid", "native", or an Installation to use.
        extra_config: configuration text read last (routes, K8S_GAHP, PODGAHP_* knobs).
            `$(LOCAL_DIR)` is the per-run directory.
        files: files to create in the per-run directory before start, name -> text; a text
            starting with "#!" is made executable.
        name: prefix of the per-run directory name.
        users: ordinary users to create in a root filesystem (jobs are submitted as one).
        start_timeout: seconds to wait for schedd and JobRouter.
        keep: keep the per-run directory after stop (default: only when stopping after an error).
    """

    def __init__(
        self,
        series: Union[str, Installation] = "trixie",
        extra_config: str = "",
        files: Optional[Mapping[str, str]] = None,
        name: str = "pool",
        users: Sequence[str] = ("pilot",),
        start_timeout: float = 120,
        keep: Optional[bool] = None,
    ) -> None:
        self.installation = series if isinstance(series, Installation) else get_installation(series)
        self.series = self.installation.name
        self.extra_config = extra_config
        self.files = dict(files or {})
        self.users = tuple(users)
        self.start_timeout = start_timeout
        self.keep = keep
        self.name = f"{name}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        base = POOLS_DIR if self.installation.chroot else NATIVE_POOLS_DIR
        #: Per-run directory (LOCAL_DIR) as the daemons see it.
        self.local_dir = f"{base}/{self.name}"
        #: The pool's CONDOR_CONFIG as the daemons see it.
        self.condor_config = f"{self.local_dir}/condor_config"
        self.log_dir = f"{self.local_dir}/log"
        self._master: Optional["subprocess.Popen[str]"] = None
        self._acquired = False
        self._stopped = False
        self._user_dirs: List[str] = []
        self._logs_dumped = False

    # ------------------------------------------------------------------------------------------
    # lifecycle

    def __enter__(self) -> "Pool":
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.dump_logs()
        self.stop(failed=exc_type is not None)

    def start(self) -> "Pool":
        """Write the configuration, start condor_master and wait for schedd and JobRouter."""
        inst = self.installation
        if os.geteuid() != 0:
            raise PoolError("harness.pool needs root (chroot, mount, condor_master switching users)")
        try:
            self._kill_orphans()
            inst.acquire()
            self._acquired = True
            inst.install_podgahp()
            for user in self.users:
                inst.ensure_user(user)
            self._write_config()
            out = open(self.path(f"{self.local_dir}/master.out"), "w")
            with out:
                self._master = inst.popen(
                    ["condor_master", "-f"],
                    cwd=self.local_dir,
                    env={"CONDOR_CONFIG": self.condor_config},
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            _live_pools.add(self)
            self._wait_ready()
        except BaseException:
            self.dump_logs()
            self.stop(failed=True)
            raise
        return self

    def _write_config(self) -> None:
        inst = self.installation
        local = self.path(self.local_dir)
        self._remove_old_runs(local.parent)
        for user in self.users:
            with contextlib.suppress(HarnessError):
                self._remove_old_runs(self.path(inst.user(user).home), only=_RUN_NAME)
        local.mkdir(parents=True)
        condor = inst.user("condor")
        for sub in ("log", "spool", "lock", "execute", "run"):
            (local / sub).mkdir()
            os.chown(local / sub, condor.uid, condor.gid)
        # The GAHP runs as the job owner and logs to $(LOG)/Podgahp.<user>.<random>/PodgahpLog.<backend>.<user>
        # by default; let it make its directory there (sticky, like /tmp) so dump_logs shows it with the rest.
        (local / "log").chmod(0o1777)
        (local / "config.d").mkdir()
        standalone = f"{inst.src_dir}/ce-config/standalone"
        self.path(self.condor_config).write_text(
            f"## CONDOR_CONFIG of pool {self.name} ({self.series}), written by harness.pool.\n"
            f"## The stand-alone CE-like pool, with this run's directory.\n"
            f"include : {standalone}/condor_config\n"
            f"PODGAHP_CE_CONFIG_DIR = {standalone}\n"
            f"PODGAHP_CONFIG_D = {inst.src_dir}/condor_config.d\n"
            f"PODGAHP_CE_LOCAL_DIR = {self.local_dir}\n"
        )
        (local / "config.d" / "10-harness-fast.conf").write_text(FAST_CONFIG)
        (local / "config.d" / "90-extra.conf").write_text(
            "## Configuration given by the caller of harness.pool.Pool.\n" + self.extra_config + "\n"
        )
        for rel, text in self.files.items():
            target = local / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            target.chmod(0o755 if text.startswith("#!") else 0o644)

    def _kill_orphans(self) -> None:
        """Kill daemons of pools whose owning process died without stopping them (e.g. SIGKILL).

        A pool's directory name carries the pid of the process that started it.
        """
        base = POOLS_DIR if self.installation.chroot else NATIVE_POOLS_DIR
        pattern = re.compile(rb"CONDOR_CONFIG=" + re.escape(base.encode()) + rb"/[^/\0]*-(\d+)-[0-9a-f]{6}/condor_config\0")
        killed = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if self.installation.chroot and os.readlink(f"/proc/{entry}/root") != str(self.installation.root):
                    continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    m = pattern.search(f.read() + b"\0")
            except OSError:
                continue
            if m and not pid_alive(int(m.group(1))):
                with contextlib.suppress(OSError):
                    os.kill(int(entry), signal.SIGKILL)
                    killed.append(int(entry))
        if killed:
            print(f"[harness] killed processes of abandoned pools: {killed}", file=sys.stderr)

    @staticmethod
    def _remove_old_runs(parent: Path, only: Optional["re.Pattern[str]"] = None) -> None:
        # Per-run directories (and users' job directories) kept after failures pile up; drop
        # those untouched for two days.
        cutoff = time.time() - KEEP_OLD_RUNS_S
        with contextlib.suppress(OSError):
            for entry in parent.iterdir():
                if only is not None and not only.fullmatch(entry.name):
                    continue
                with contextlib.suppress(OSError):
                    if entry.is_dir() and entry.stat().st_mtime < cutoff:
                        shutil.rmtree(entry, ignore_errors=True)

    def _wait_ready(self) -> None:
        def schedd_up() -> bool:
            return self.run(["condor_q", "-allusers", "-totals"], check=False).returncode == 0

        self.wait_for(schedd_up, timeout=self.start_timeout, interval=0.5, what="the schedd to answer condor_q")

        def router_up() -> bool:
            # Logged once the router has read its routes (or found none).
            return bool(_ROUTER_READY.search(self.log("JobRouterLog")))

        self.wait_for(router_up, timeout=self.start_timeout, interval=0.5, what="the JobRouter to read its routes")
        outside = [a for a in self.advertised_addresses() if not ipaddress.ip_address(a).is_loopback]
        if outside:
            raise PoolError(f"pool {self.name}: daemons advertise non-loopback addresses {sorted(set(outside))}; "
                            f"every test server listens on loopback only (NETWORK_INTERFACE, ENABLE_IPV6)")

    def advertised_addresses(self) -> List[str]:
        """Every IP address that a daemon of this pool advertises in the collector (each ad's
        MyAddress and AddressV1: the sinful string's host and every entry of its addrs list)."""
        out = self.run(["condor_status", "-any", "-af:,", "MyAddress", "AddressV1"]).stdout
        return addresses_of(out)

    @property
    def master_running(self) -> bool:
        return self._master is not None and self._master.poll() is None

    def stop(self, failed: bool = False, timeout: float = 60) -> None:
        """Shut the pool down and wait until none of its processes is left; always unmounts.

        The master's graceful shutdown stops the daemons, the schedd stops its gridmanagers and
        each gridmanager its GAHP. Whatever still runs with this pool's CONDOR_CONFIG after
        `timeout` seconds is killed.
        """
        if self._stopped:
            return
        self._stopped = True
        try:
            if self._master is not None:
                if self._master.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        self._master.send_signal(signal.SIGTERM)
                    try:
                        self._master.wait(timeout)
                    except subprocess.TimeoutExpired:
                        self._master.kill()
                        self._master.wait()
            self._reap(timeout=15)
        finally:
            _live_pools.discard(self)
            if self._acquired:
                self._acquired = False
                self.installation.release()
            keep = self.keep if self.keep is not None else failed
            if keep:
                print(f"[harness] kept {self.path(self.local_dir)}", file=sys.stderr)
            else:
                for path in [self.local_dir] + self._user_dirs:
                    shutil.rmtree(self.path(path), ignore_errors=True)

    def processes(self) -> List[int]:
        """Pids of live processes that run with this pool's CONDOR_CONFIG (daemons, GAHPs, tools)."""
        marker = f"CONDOR_CONFIG={self.condor_config}".encode() + b"\0"
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read() + b"\0"
                if self.installation.chroot:
                    if os.readlink(f"/proc/{entry}/root") != str(self.installation.root):
                        continue
            except OSError:
                continue
            if b"\0" + marker in b"\0" + env:
                pids.append(int(entry))
        return pids

    def _reap(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        left = self.processes()
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if left:
            print(f"[harness] killed leftover processes of {self.name}: {left}", file=sys.stderr)
            time.sleep(0.5)

    # ------------------------------------------------------------------------------------------
    # commands

    def path(self, path: str) -> Path:
        """Host path of a path as the daemons see it (inside the root filesystem)."""
        return self.installation.host_path(path)

    def run(
        self,
        argv: Sequence[str],
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        input: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: float = 60,
        check: bool = True,
    ) -> "subprocess.CompletedProcess[str]":
        """Run a command in the pool's installation with its CONDOR_CONFIG, as `user` (None = root)."""
        full_env = {"CONDOR_CONFIG": self.condor_config}
        full_env.update(env or {})
        try:
            return self.installation.run(argv, user=user, cwd=cwd, input=input, env=full_env,
                                         timeout=timeout, check=check)
        except HarnessError as e:
            raise PoolError(str(e)) from None

    def submit(self, description: str, user: str = "pilot", cwd: Optional[str] = None) -> int:
        """condor_submit a submit description (text) as `user`; returns the cluster id."""
        out = self.run(["condor_submit", "-terse", "-"], user=user, cwd=cwd, input=description).stdout
        m = re.match(r"\s*(\d+)\.\d+", out)
        if not m:
            raise PoolError(f"unexpected condor_submit -terse output: {out!r}")
        return int(m.group(1))

    def user_dir(self, user: str = "pilot") -> str:
        """A fresh directory for this pool in `user`'s home, owned by the user (a job's Iwd)."""
        info = self.installation.user(user)
        path = f"{info.home}/{self.name}"
        host = self.path(path)
        host.mkdir(parents=True, exist_ok=True)
        os.chown(host, info.uid, info.gid)
        self._user_dirs.append(path)
        return path

    def config_val(self, name: str) -> Optional[str]:
        """Value of a configuration knob, None if undefined."""
        res = self.run(["condor_config_val", name], check=False)
        return res.stdout.strip() if res.returncode == 0 else None

    def _json(self, argv: List[str], constraint: str, attrs: Optional[Sequence[str]]) -> List[Dict[str, Any]]:
        argv = argv + ["-json", "-constraint", constraint]
        if attrs:
            argv += ["-attributes", ",".join(attrs)]
        out = self.run(argv).stdout.strip()
        return json.loads(out) if out else []

    def q(self, constraint: str = "true", attrs: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
        """Job ads in the queue matching `constraint` (all users), optionally only `attrs`."""
        return self._json(["condor_q", "-allusers"], constraint, attrs)

    def history(self, constraint: str = "true", attrs: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
        """Ads of jobs that left the queue, newest first."""
        return self._json(["condor_history"], constraint, attrs)

    def jobs(self, constraint: str = "true", attrs: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
        """Ads from the queue and then the history; a job that leaves the queue between the two
        queries is listed once (from the queue)."""
        added = attrs is not None and "GlobalJobId" not in attrs
        want = list(attrs) + ["GlobalJobId"] if attrs is not None and added else attrs
        seen = set()
        ads = []
        for ad in self.q(constraint, want) + self.history(constraint, want):
            key = ad.get("GlobalJobId")
            if key is not None and key in seen:
                continue
            seen.add(key)
            if added:
                ad.pop("GlobalJobId", None)
            ads.append(ad)
        return ads

    def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float = 60,
        interval: float = 1.0,
        what: str = "condition",
    ) -> T:
        """Poll `predicate` until it returns a true value and return it.

        Raises PoolError after `timeout` seconds, or at once if condor_master has exited.
        """
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if self._master is not None and self._master.poll() is not None:
                raise PoolError(f"condor_master exited (rc {self._master.returncode}) while waiting for {what}")
            if time.monotonic() >= deadline:
                raise PoolError(f"timed out after {timeout:.0f} s waiting for {what} (last value: {value!r})")
            time.sleep(interval)

    # ------------------------------------------------------------------------------------------
    # logs

    def log_names(self) -> List[str]:
        """The logs in LOG, daemons' first; podgahp's as <user's own directory>/<file> (a GAHP or
        provisioner logs into its user's own directory there, Podgahp.<user>.<random>)."""
        log = self.path(self.log_dir)
        try:
            names = sorted(p.name for p in log.iterdir() if p.is_file() and not p.name.startswith("."))
            names += sorted(f"{d.name}/{p.name}" for d in log.glob("Podgahp.*") if d.is_dir() and not d.is_symlink()
                            for p in d.iterdir() if p.is_file() and p.name.startswith(_PODGAHP_LOGS))
        except OSError:
            return []
        first = [n for n in LOG_ORDER if n in names]
        return first + [n for n in names if n not in first]

    def log(self, name: str) -> str:
        """Text of a log in LOG (MasterLog, SchedLog, JobRouterLog, GridmanagerLog.pilot, ...), or of
        podgahp's log of that name in a user's own directory there; empty if it does not exist (yet)."""
        log = self.path(self.log_dir)
        for path in [log / name] + sorted(log.glob(f"Podgahp.*/{name}")):
            try:
                return path.read_text(errors="replace")
            except OSError:
                continue
        return ""

    def gahp_lines(self, user: str = "pilot") -> List[str]:
        """The GAHP conversation lines of the gridmanager of `user` (`GAHP[pid] <- ...` / `-> ...`)."""
        return [line for line in self.log(f"GridmanagerLog.{user}").splitlines() if "GAHP[" in line]

    def dump_logs(self, out: Optional[TextIO] = None, max_lines: int = 300, again: bool = False) -> None:
        """Print the end of every log (and the master's stdout) so a failing test shows them.

        Prints only once per pool unless `again`.
        """
        if self._logs_dumped and not again:
            return
        self._logs_dumped = True
        out = out or sys.stdout
        print(f"\n======== logs of pool {self.name} ({self.series}) in {self.path(self.local_dir)}", file=out)
        extra = [f"{self.local_dir}/master.out"]
        for path in [f"{self.log_dir}/{n}" for n in self.log_names()] + extra:
            try:
                lines = self.path(path).read_text(errors="replace").splitlines()
            except OSError:
                continue
            cut = len(lines) - max_lines
            print(f"-------- {path}" + (f" (last {max_lines} of {len(lines)} lines)" if cut > 0 else ""), file=out)
            for line in lines[max(cut, 0):]:
                print(line, file=out)
        out.flush()


_SINFUL_HOST = re.compile(r"<\[?([0-9A-Fa-f.:]+)\]?:\d+")
_ADDRS = re.compile(r"addrs=([^&>]*)")


def addresses_of(text: str) -> List[str]:
    """The IP addresses of every sinful string in ``text`` (``<host:port?addrs=a-p+[b]-q&...>``),
    and those of AddressV1 (``{[ p="primary"; a="host"; port=...; n="..." ], ...}``)."""
    found: List[str] = []
    for host in _SINFUL_HOST.findall(text):
        found.append(host)
    for addrs in _ADDRS.findall(text):
        for entry in addrs.split("+"):
            host = entry.rsplit("-", 1)[0]
            if host.startswith("["):  # an IPv6 address, its colons written as dashes
                host = host.strip("[]").replace("-", ":")
            if host:
                found.append(host)
    found += re.findall(r'\ba="\[?([0-9A-Fa-f.:]+)\]?"', text)
    return found


@atexit.register
def _stop_leftover_pools() -> None:
    for pool in list(_live_pools):
        with contextlib.suppress(Exception):
            pool.stop(failed=True)
