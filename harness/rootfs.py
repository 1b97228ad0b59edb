"""Locate or build an HTCondor installation and run commands in it.

Owns: finding a native HTCondor >= 23 on PATH; building Debian root filesystems with mmdebstrap
(trixie carries HTCondor 23.x, sid 25.x) into a cache outside the repository; mounting what the
daemons need inside a root and unmounting it when the last user leaves; letting a root resolve the
machine's own name as the machine does (its /etc/hosts); installing the podgahp
checkout into a virtualenv inside the root; running a command in the root as a given user.

Must not know how a pool is configured (that is `harness.pool`). Only the standard library is
used, so the host needs no HTCondor bindings.

Environment:
    PODGAHP_ROOTFS_DIR      cache directory for root filesystems (default /var/cache/podgahp/rootfs)
    PODGAHP_CONDOR_SERIES   space-separated series to test: "trixie", "sid", "native"
                            (default: "native" if condor_version >= 23 is on PATH, else "trixie sid")
    PODGAHP_DEBIAN_MIRROR   Debian mirror URL for mmdebstrap (default: taken from the host's apt sources)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

DEFAULT_CACHE_DIR = "/var/cache/podgahp/rootfs"

#: Debian packages in every root: HTCondor, the interpreter and the libraries podgahp imports
#: (Debian's own builds, so the GAHP runs against what a Debian admin has), and what is needed to
#: build a virtualenv from the checkout without network access.
PACKAGES: Tuple[str, ...] = (
    "condor",
    "python3",
    "python3-venv",
    "python3-pip",
    "python3-setuptools",
    "python3-wheel",
    "python3-kubernetes",
    "python3-requests",
    "python3-click",
    "python3-yaml",
    "ca-certificates",
    "procps",
)

#: Extra apt options per suite. sid's Release file on snapshot mirrors is often past its
#: Valid-Until date.
SUITE_APT_OPTIONS: Dict[str, Tuple[str, ...]] = {
    "trixie": (),
    "sid": ('Acquire::Check-Valid-Until "false"',),
}

#: Where podgahp lives inside a root (paths as the daemons see them): symlinks to the
#: directories of the newest installed checkout (ROOT_SRC_DIR.<digest>, ROOT_PREFIX.<digest>).
ROOT_SRC_DIR = "/opt/podgahp-src"
ROOT_PREFIX = "/opt/podgahp"

#: Files of the checkout that are not copied into a root.
_SKIP_DIRS = {
    ".git", "tests", "harness", "build", "dist", "demo-run", ".venv", "__pycache__",
    ".mypy_cache", ".pytest_cache", ".hypothesis",
}

#: Installed versions of earlier checkouts always kept (see Installation._prune_versions).
KEEP_VERSIONS = 4

_STAMP = ".podgahp-rootfs.json"
_SRC_STAMP = ".podgahp-src.sha256"
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

REPO_DIR = Path(__file__).resolve().parent.parent


class HarnessError(RuntimeError):
    """The harness could not provide HTCondor (build, mount, install or command failure)."""


def cache_dir() -> Path:
    return Path(os.environ.get("PODGAHP_ROOTFS_DIR") or DEFAULT_CACHE_DIR)


def _log(msg: str) -> None:
    print(f"[harness] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Locks


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    """Hold an exclusive flock on `path` (created if missing) for the duration of the block.

    Yields the file descriptor: a child given it (pass_fds) keeps the lock held while it lives.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Native HTCondor


def parse_condor_version(text: str) -> Optional[Tuple[int, int, int]]:
    """`$CondorVersion: 23.9.6 ...` -> (23, 9, 6)."""
    m = re.search(r"\$CondorVersion:\s*(\d+)\.(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def native_condor_version() -> Optional[str]:
    """Version of an HTCondor >= 23 found on PATH, else None."""
    exe = shutil.which("condor_version")
    if not exe:
        return None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    version = parse_condor_version(out)
    if version is None or version[0] < 23:
        return None
    return "%d.%d.%d" % version


def series_from_env() -> List[str]:
    """HTCondor series to test, from PODGAHP_CONDOR_SERIES (see module docstring)."""
    value = os.environ.get("PODGAHP_CONDOR_SERIES", "").split()
    if value:
        return value
    return ["native"] if native_condor_version() else ["trixie", "sid"]


# --------------------------------------------------------------------------------------------
# Building root filesystems


def debian_mirror() -> str:
    """The Debian mirror the host's apt uses (deb822 sources first, then sources.list)."""
    env = os.environ.get("PODGAHP_DEBIAN_MIRROR")
    if env:
        return env
    candidates: List[str] = []
    sources_d = Path("/etc/apt/sources.list.d")
    for f in sorted(sources_d.glob("*.sources")) if sources_d.is_dir() else []:
        for line in f.read_text(errors="replace").splitlines():
            if line.startswith("URIs:"):
                candidates.extend(line.split()[1:])
    lists = [Path("/etc/apt/sources.list")] + (sorted(sources_d.glob("*.list")) if sources_d.is_dir() else [])
    for f in lists:
        if not f.is_file():
            continue
        for line in f.read_text(errors="replace").splitlines():
            parts = line.split("#", 1)[0].split()
            if parts and parts[0] == "deb":
                uri = next((p for p in parts[1:] if "://" in p), None)
                if uri:
                    candidates.append(uri)
    for uri in candidates:
        if "security" not in uri and "debian" in uri:
            return uri
    raise HarnessError(
        "no Debian mirror found in /etc/apt/sources.list{,.d}; set PODGAHP_DEBIAN_MIRROR to one"
    )


def _rootfs_complete(path: Path) -> bool:
    try:
        stamp = json.loads((path / _STAMP).read_text())
    except (OSError, ValueError):
        return False
    return sorted(stamp.get("packages", [])) == sorted(PACKAGES)


def build_rootfs(suite: str, cache: Optional[Path] = None) -> Path:
    """Return the root filesystem for `suite`, building it first if needed.

    Safe to call concurrently and after an interrupted build: builds happen under a lock file
    into a temporary directory that is renamed into place only when complete; leftovers of
    earlier attempts are removed. A root built with a different package list is rebuilt.
    """
    cache = cache or cache_dir()
    target = cache / suite
    if _rootfs_complete(target):
        return target
    if os.geteuid() != 0:
        raise HarnessError(f"building the {suite} root filesystem needs root (mmdebstrap, chroot)")
    mmdebstrap = shutil.which("mmdebstrap")
    if not mmdebstrap:
        raise HarnessError("mmdebstrap not found: run `apt-get update && apt-get install -y mmdebstrap`")
    with _locked(cache / f"{suite}.lock") as lock_fd:
        if _rootfs_complete(target):
            return target
        # Left by an interrupted build; no builder runs (mmdebstrap holds the lock too).
        for stale in cache.glob(f".{suite}.tmp-*"):
            remove_tree(stale)
        tmp = cache / f".{suite}.tmp-{os.getpid()}"
        log_path = cache / f"{suite}.build.log"
        cmd = [mmdebstrap, "--variant=apt", "--include=" + ",".join(PACKAGES)]
        cmd += [f"--aptopt={opt}" for opt in SUITE_APT_OPTIONS.get(suite, ())]
        cmd += [suite, str(tmp), debian_mirror()]
        _log(f"building {suite} root filesystem in {tmp} (log: {log_path})")
        started = time.monotonic()
        with open(log_path, "w") as log:
            log.write("+ " + " ".join(cmd) + "\n")
            log.flush()
            # mmdebstrap inherits the lock, so a build orphaned by a killed harness still blocks
            # other builders until it ends, and it gets SIGTERM when the harness dies.
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, pass_fds=(lock_fd,),
                                preexec_fn=_terminate_with_parent).returncode
        if rc != 0:
            remove_tree(tmp)
            tail = "".join(log_path.read_text(errors="replace").splitlines(True)[-30:])
            raise HarnessError(f"mmdebstrap {suite} failed (rc {rc}); end of {log_path}:\n{tail}")
        (tmp / _STAMP).write_text(json.dumps({
            "suite": suite, "packages": list(PACKAGES), "built": time.time(),
            "seconds": round(time.monotonic() - started, 1),
        }))
        if target.exists():
            old = cache / f".{suite}.tmp-old-{os.getpid()}"
            target.rename(old)
            remove_tree(old)
        tmp.rename(target)
        _log(f"{suite} root filesystem ready after {time.monotonic() - started:.0f} s")
    return target


def _terminate_with_parent() -> None:
    """In a child: ask the kernel for SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG)."""
    if _prctl is not None:
        _prctl(1, signal.SIGTERM, 0, 0, 0)


try:  # resolved here, not in the forked child
    import ctypes

    _prctl: Optional[Callable[..., int]] = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def _unmount_below(path: Path) -> None:
    prefix = str(path).rstrip("/") + "/"
    for point in sorted((p for p in _mount_points() if p.startswith(prefix)), reverse=True):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)


def remove_tree(path: Path) -> None:
    """Delete a directory tree that may still have file systems mounted in it (a root filesystem
    left by an interrupted build or run): unmount them first, never delete through a mount."""
    if not path.exists():
        return
    _unmount_below(path)
    prefix = str(path).rstrip("/") + "/"
    left = [p for p in _mount_points() if p.startswith(prefix)]
    if left:
        raise HarnessError(f"cannot remove {path}: still mounted: {', '.join(left)}")
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Installations


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: int
    gid: int
    home: str


def _read_passwd(path: Path, name: str) -> Optional[UserInfo]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        f = line.split(":")
        if len(f) >= 7 and f[0] == name:
            return UserInfo(f[0], int(f[2]), int(f[3]), f[5])
    return None


def _mount_points() -> List[str]:
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point))
    return points


def _names(line: str) -> List[str]:
    return line.split("#", 1)[0].split()[1:]


def name_this_machine(root: Path, hosts: Path = Path("/etc/hosts"), name: str = "") -> bool:
    """Add to the root's /etc/hosts the machine's lines that name it (as an installer does), if the
    root's names it nowhere; returns whether it changed the file.

    Every HTCondor daemon and tool looks its host name up when it starts: in a root whose
    /etc/hosts lacks it the lookup goes to the resolver, and one that does not answer holds every
    start for its timeout (5 s a lookup; a shadow starting a job waited 5 s, a pool's start more).
    """
    name = name or socket.gethostname()
    target = root / "etc" / "hosts"
    try:
        mine = [line for line in hosts.read_text().splitlines() if name in _names(line)]
        current = target.read_text()
    except OSError:
        return False
    if not mine or any(name in _names(line) for line in current.splitlines()):
        return False
    tmp = target.with_name(f".hosts.{os.getpid()}")
    tmp.write_text(current.rstrip("\n") + "\n" + "\n".join(mine) + "\n")
    tmp.chmod(0o644)
    os.replace(tmp, target)
    return True


#: A name every root resolves to another loopback address than the one pools listen on (127.0.0.1):
#: a pool that calls itself so (NETWORK_HOSTNAME) is a host whose name does not resolve to the
#: address its daemons connect from.
MISNAMED_HOST = ("podgahp-misnamed.test", "127.0.0.2")


def add_host(root: Path, name: str, address: str) -> bool:
    """Add ``address name`` to the root's /etc/hosts unless it names ``name`` already; returns
    whether it changed the file."""
    target = root / "etc" / "hosts"
    try:
        current = target.read_text()
    except OSError:
        return False
    if any(name in _names(line) for line in current.splitlines()):
        return False
    tmp = target.with_name(f".hosts.{os.getpid()}")
    tmp.write_text(current.rstrip("\n") + f"\n{address}\t{name}\n")
    tmp.chmod(0o644)
    os.replace(tmp, target)
    return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    return True


class Installation:
    """An HTCondor installation: a Debian root filesystem (chroot) or the host itself (native).

    Paths given to `run`/`popen` (argv, cwd) are as the daemons see them; `host_path` maps such a
    path to the host. A chroot installation must be `acquire`d (mounts /proc and /dev/shm) before
    daemons run in it and `release`d afterwards; the last release unmounts.
    """

    def __init__(self, name: str, root: Path, cache: Optional[Path] = None) -> None:
        self.name = name
        self.root = root
        self.chroot = name != "native"
        self._cache = cache or cache_dir()
        self._lease: Optional[Path] = None
        self._users = 0
        self._condor_version: Optional[str] = None
        #: The podgahp virtualenv and the checkout's copy, as the daemons see them; install_podgahp()
        #: sets them to the directories of the installed checkout.
        self.prefix = self._base_prefix()
        self.src_dir = ROOT_SRC_DIR if self.chroot else str(REPO_DIR)
        #: Wheels install_podgahp() adds to the virtualenv (dependencies the root's packages lack, for
        #: the benchmarks: podgahp as pip installs it); a different set is a different virtualenv.
        self.wheels: Tuple[Path, ...] = ()

    def __repr__(self) -> str:
        return f"Installation({self.name!r}, root={str(self.root)!r})"

    # paths and users ------------------------------------------------------------------------

    def host_path(self, path: str) -> Path:
        """Host path of `path` as seen inside the installation."""
        if not self.chroot:
            return Path(path)
        return self.root / str(path).lstrip("/")

    def bin(self, name: str) -> str:
        """Path (inside the installation) of a podgahp console script, e.g. bin("podgahp")."""
        return f"{self.prefix}/bin/{name}"

    def user(self, name: str) -> UserInfo:
        if self.chroot:
            info = _read_passwd(self.root / "etc/passwd", name)
        else:
            info = _read_passwd(Path("/etc/passwd"), name)
        if info is None:
            raise HarnessError(f"user {name!r} does not exist in {self}")
        return info

    def ensure_user(self, name: str) -> UserInfo:
        """Create an ordinary user with a home directory inside a root if it is missing."""
        if self.chroot:
            with _locked(self._cache / f"{self.name}.state.lock"):
                if _read_passwd(self.root / "etc/passwd", name) is None:
                    self.run(["useradd", "--create-home", "--shell", "/bin/sh", name])
        elif _read_passwd(Path("/etc/passwd"), name) is None:
            # Not created on a host installation: that would change the host's accounts.
            raise HarnessError(f"user {name!r} is missing; create it first: useradd --create-home {name}")
        return self.user(name)

    @property
    def condor_version(self) -> str:
        if self._condor_version is None:
            out = self.run(["condor_version"]).stdout
            version = parse_condor_version(out)
            self._condor_version = "%d.%d.%d" % version if version else out.strip()
        return self._condor_version

    # processes ------------------------------------------------------------------------------

    def environment(self, user: Optional[UserInfo] = None, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """A clean environment for a process in the installation."""
        env = {
            "PATH": _SYSTEM_PATH if self.chroot else os.environ.get("PATH", _SYSTEM_PATH),
            "LANG": "C.UTF-8",
            "HOME": user.home if user else "/root",
            "USER": user.name if user else "root",
            "LOGNAME": user.name if user else "root",
        }
        env.update(extra or {})
        return env

    def _command(self, argv: Sequence[str], cwd: str, user: Optional[UserInfo]) -> Tuple[List[str], Dict[str, Any]]:
        # No preexec_fn: tests run simulators in threads, and forking a threaded process into
        # Python code may deadlock. chroot(8) switches root and ids, the root's env(1) the directory.
        if self.chroot:
            cmd = ["chroot"]
            if user is not None:
                cmd += [f"--userspec={user.uid}:{user.gid}", f"--groups={user.gid}"]
            return cmd + [str(self.root), "/usr/bin/env", "-C", cwd, "--", *argv], {}
        kwargs: Dict[str, Any] = {"cwd": cwd}
        if user is not None:
            kwargs.update(user=user.uid, group=user.gid, extra_groups=[user.gid])
        return list(argv), kwargs

    def popen(
        self,
        argv: Sequence[str],
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        **kwargs: Any,
    ) -> "subprocess.Popen[str]":
        """Start `argv` inside the installation as `user` (None = root) in `cwd` (default: home)."""
        info = self.user(user) if user else None
        if cwd is None:
            cwd = info.home if info else "/"
        cmd, extra = self._command(argv, cwd, info)
        kwargs.update(extra)
        return subprocess.Popen(
            cmd, env=self.environment(info, env), universal_newlines=True, **kwargs,
        )

    def run(
        self,
        argv: Sequence[str],
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        input: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: float = 120,
        check: bool = True,
    ) -> "subprocess.CompletedProcess[str]":
        """Run `argv` to completion; with `check`, a non-zero exit raises HarnessError with its output."""
        proc = self.popen(
            argv, user=user, cwd=cwd, env=env,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise HarnessError(
                f"{' '.join(argv)!r} (as {user or 'root'}) timed out after {timeout} s\n"
                f"stdout:\n{out}\nstderr:\n{err}"
            ) from None
        result = subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
        if check and proc.returncode != 0:
            raise HarnessError(
                f"{' '.join(argv)!r} (as {user or 'root'}) exited {proc.returncode}\n"
                f"stdout:\n{out}\nstderr:\n{err}"
            )
        return result

    # mounts ---------------------------------------------------------------------------------

    def _mounts(self) -> List[Tuple[List[str], Path]]:
        return [
            (["-t", "proc", "proc"], self.root / "proc"),
            (["-t", "tmpfs", "-o", "mode=1777,size=64m", "podgahp-shm"], self.root / "dev/shm"),
        ]

    def _leases(self) -> Path:
        return self._cache / f"{self.name}.leases"

    def acquire(self) -> None:
        """Mount /proc and /dev/shm in the root (if not yet) and register one more user.

        Every acquire() needs one release(). Users are counted per Installation object and, across
        processes, by lease files of live pids; the last release anywhere unmounts.
        """
        if not self.chroot:
            return
        with _locked(self._cache / f"{self.name}.state.lock"):
            self._users += 1
            if self._lease is not None:
                return
            self._prune_leases()
            name_this_machine(self.root)
            add_host(self.root, *MISNAMED_HOST)
            mounted = _mount_points()
            for args, point in self._mounts():
                if str(point) not in mounted:
                    point.mkdir(parents=True, exist_ok=True)
                    subprocess.run(["mount", *args, str(point)], check=True)
            leases = self._leases()
            leases.mkdir(parents=True, exist_ok=True)
            self._lease = leases / f"{os.getpid()}.{uuid.uuid4().hex[:8]}"
            self._lease.write_text("")

    def release(self) -> None:
        """Undo one acquire(); the last user of the root unmounts. Never raises for mounts."""
        if not self.chroot or self._lease is None:
            return
        with _locked(self._cache / f"{self.name}.state.lock"):
            self._users -= 1
            if self._users > 0:
                return
            with contextlib.suppress(FileNotFoundError):
                self._lease.unlink()
            self._lease = None
            self._prune_leases()
            if not any(self._leases().iterdir()):
                self.unmount_all()

    def _prune_leases(self) -> None:
        leases = self._leases()
        if not leases.is_dir():
            return
        for lease in leases.iterdir():
            try:
                pid = int(lease.name.split(".")[0])
            except ValueError:
                pid = -1
            if pid != os.getpid() and not pid_alive(pid):
                with contextlib.suppress(FileNotFoundError):
                    lease.unlink()

    def unmount_all(self) -> None:
        """Unmount everything mounted below the root (lazily if busy)."""
        _unmount_below(self.root)

    # podgahp inside the root ----------------------------------------------------------------

    def install_podgahp(self, src: Path = REPO_DIR) -> None:
        """Install the checkout `src` into a virtualenv, unless this exact checkout is installed.

        Each checkout state (a digest of its files) gets its own directories, so pools already
        running keep a consistent installation while another test process installs a newer
        checkout: in a root, a copy of the checkout at ROOT_SRC_DIR.<digest> (so ce-config/,
        condor_config.d/ and routes/ are visible to the daemons) and a virtualenv at
        ROOT_PREFIX.<digest> made with the root's python3 and --system-site-packages (Debian's
        htcondor2/classad2, kubernetes, requests, click, yaml); no network access is needed.
        Afterwards `self.src_dir` and `self.prefix` name these directories, and the symlinks
        ROOT_SRC_DIR and ROOT_PREFIX point at the newest one. Call after `acquire()`.
        """
        files = _source_files(src)
        version = _digest(src, files)[:16]
        if self.wheels:
            version = hashlib.sha256(" ".join([version, *sorted(w.name for w in self.wheels)]).encode()).hexdigest()[:16]
        base_prefix = self._base_prefix()
        prefix = f"{base_prefix}.{version}"
        src_dir = f"{ROOT_SRC_DIR}.{version}" if self.chroot else str(src)
        with _locked(self._cache / f"{self.name}.install.lock"):
            done = self.host_path(prefix) / _SRC_STAMP
            if not done.is_file():
                _log(f"installing podgahp from {src} into {self.name}:{prefix}")
                self._install(src, files, src_dir, prefix)
                done.write_text(version)
            if self.chroot:
                _point_symlink(self.host_path(ROOT_SRC_DIR), Path(src_dir).name)
            _point_symlink(self.host_path(base_prefix), Path(prefix).name)
            self._prune_versions(base_prefix, keep=prefix)
            if self.chroot:
                self._prune_versions(ROOT_SRC_DIR, keep=src_dir)
        self.src_dir, self.prefix = src_dir, prefix

    def _base_prefix(self) -> str:
        return ROOT_PREFIX if self.chroot else str(self._cache / "native" / "podgahp")

    def _install(self, src: Path, files: Sequence[str], src_dir: str, prefix: str) -> None:
        for path in (src_dir, prefix):
            if self.chroot:
                remove_tree(self.host_path(path))
        if self.chroot:
            dest = self.host_path(src_dir)
            for rel in files:
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src / rel, target)
            python = "/usr/bin/python3"
        else:
            shutil.rmtree(prefix, ignore_errors=True)
            python = os.environ.get("PODGAHP_NATIVE_PYTHON") or shutil.which("python3") or sys.executable
        self.run([python, "-m", "venv", "--system-site-packages", prefix], timeout=300)
        wheel_dir = f"{prefix}/wheels"
        if self.wheels:
            self.host_path(wheel_dir).mkdir(parents=True, exist_ok=True)
            for wheel in self.wheels:
                shutil.copy2(wheel, self.host_path(wheel_dir) / wheel.name)
        self.run(
            [f"{prefix}/bin/pip", "install", "--quiet", "--no-index", "--no-deps",
             "--no-build-isolation", src_dir, *[f"{wheel_dir}/{w.name}" for w in self.wheels]],
            env={"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"},
            timeout=600,
        )

    def _prune_versions(self, base: str, keep: str) -> None:
        # Versions of earlier checkouts: keep the newest few and anything used within a day
        # (a long-running pool may still start GAHPs from its version).
        host = self.host_path(base)
        versions = sorted(host.parent.glob(host.name + ".*"), key=lambda p: p.stat().st_mtime, reverse=True)
        cutoff = time.time() - 86400
        for path in versions[KEEP_VERSIONS:]:
            if path.name != Path(keep).name and path.stat().st_mtime < cutoff:
                if self.chroot:
                    remove_tree(path)
                else:
                    shutil.rmtree(path, ignore_errors=True)


def _point_symlink(link: Path, target: str) -> None:
    """Make `link` a symlink to `target` (relative), replacing it atomically."""
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.exists() and not link.is_symlink():
        shutil.rmtree(link)  # a directory from an older harness layout
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(target)
    os.replace(tmp, link)


def _source_files(src: Path) -> List[str]:
    files = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = Path(dirpath) / name
            if full.is_file():
                files.append(str(full.relative_to(src)))
    return files


def _digest(src: Path, files: Sequence[str]) -> str:
    h = hashlib.sha256()
    for rel in files:
        full = src / rel
        h.update(rel.encode() + b"\0" + (b"x" if os.access(full, os.X_OK) else b"-"))
        h.update(full.read_bytes())
    return h.hexdigest()


def get_installation(series: str, cache: Optional[Path] = None) -> Installation:
    """The installation for `series` ("native", or a Debian suite such as "trixie" or "sid")."""
    if series == "native":
        if native_condor_version() is None:
            raise HarnessError("series 'native' asked for, but no condor_version >= 23 on PATH")
        return Installation("native", Path("/"), cache)
    return Installation(series, build_rootfs(series, cache), cache)
