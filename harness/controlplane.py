"""Build the Kubernetes control plane's binaries from Debian's sources, once per machine.

Owns: fetching Debian bookworm's `kubernetes` source package (through a private apt configuration
that leaves the host's sources alone), Debian's `etcd-server` and `golang-github-modern-go-reflect2-dev`
binary packages; building kube-apiserver, kube-controller-manager and kube-scheduler with Debian's Go;
keeping them in a cache directory keyed by the source package's version (the suite's lists are
fetched again once a day: a new Debian release of the package is built then), in the layout envtest's
KUBEBUILDER_ASSETS has (etcd, kube-apiserver, kube-controller-manager, kube-scheduler in one
directory), which `podgahp sim k8s --control-plane DIR` reads.

Three things the release tarball does not say, each handled here: Kubernetes 1.20 builds in GOPATH
mode (its own build sets GO111MODULE=off; -mod=vendor fails); one generated file,
pkg/generated/openapi/zz_generated.openapi.go, is not shipped and is made with the vendored
openapi-gen over the directories build/root/Makefile.generated_files selects; the vendored
github.com/modern-go/reflect2 1.0.1 crashes under Go >= 1.18 (SIGSEGV in UnsafeMapType.UnsafeIterate on
the first custom-resource create), so Debian's 1.0.2 replaces it.

Must not know how the binaries are run (that is `podgahp_sim.controlplane`). Standard library only.

Environment:
    PODGAHP_K8S_CACHE_DIR   cache directory (default /var/cache/podgahp/k8s)
    PODGAHP_K8S_SUITE       the Debian suite whose source package is built (default bookworm)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from harness.rootfs import HarnessError, _locked, debian_mirror

DEFAULT_CACHE_DIR = "/var/cache/podgahp/k8s"
DEFAULT_SUITE = "bookworm"

#: The binaries a control-plane directory holds (envtest's KUBEBUILDER_ASSETS names).
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
_BUILT = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")

_STAMP = ".podgahp-control-plane.json"
_REFLECT2_PACKAGE = "golang-github-modern-go-reflect2-dev"
_REFLECT2_DIR = "github.com/modern-go/reflect2"


def cache_dir() -> Path:
    return Path(os.environ.get("PODGAHP_K8S_CACHE_DIR") or DEFAULT_CACHE_DIR)


def suite() -> str:
    return os.environ.get("PODGAHP_K8S_SUITE") or DEFAULT_SUITE


def _log(msg: str) -> None:
    print(f"[control-plane] {msg}", file=sys.stderr, flush=True)


def _run(cmd: Sequence[str], *, cwd: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
         log: Optional[Path] = None) -> str:
    """Run `cmd`; its output goes to `log` when given (and is returned otherwise)."""
    out = open(log, "ab") if log else None
    try:
        proc = subprocess.run(list(cmd), cwd=cwd, env=dict(env) if env is not None else None,
                              stdout=out or subprocess.PIPE, stderr=subprocess.STDOUT if out else subprocess.PIPE)
    finally:
        if out:
            out.close()
    if proc.returncode != 0:
        detail = f"; see {log}" if log else ": " + (proc.stderr or b"").decode(errors="replace")[-2000:]
        raise HarnessError(f"{' '.join(cmd[:4])}... exited {proc.returncode}{detail}")
    return (proc.stdout or b"").decode(errors="replace") if not out else ""


class _Apt:
    """apt-get with a private configuration: only `deb`/`deb-src` lines of one suite, its own lists."""

    def __init__(self, state: Path, suite_name: str) -> None:
        state.mkdir(parents=True, exist_ok=True)
        (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (state / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        mirror = debian_mirror()
        sources = state / "sources.list"
        sources.write_text(f"deb {mirror} {suite_name} main\ndeb-src {mirror} {suite_name} main\n")
        self.options = [
            "-o", f"Dir::Etc::sourcelist={sources}",
            "-o", "Dir::Etc::sourceparts=-",
            "-o", f"Dir::State::Lists={state / 'lists'}",
            "-o", f"Dir::Cache::Archives={state / 'archives'}",
            "-o", f"Dir::Cache={state}",
            "-o", "APT::Sandbox::User=root",
        ]
        self.log = state / "apt.log"

    def update(self, max_age: float = 86400.0) -> bool:
        """Fetch the suite's lists unless fetched less than ``max_age`` seconds ago; whether it did."""
        stamp = self.log.parent / "updated"
        if stamp.exists() and time.time() - stamp.stat().st_mtime < max_age:
            return False
        _run(["apt-get", *self.options, "-q", "update"], log=self.log)
        stamp.touch()
        return True

    def source_version(self, package: str) -> str:
        return self._version("showsrc", package, "source package")

    def binary_version(self, package: str) -> str:
        return self._version("show", package, "package")

    def _version(self, command: str, package: str, kind: str) -> str:
        """The first version ``apt-cache COMMAND`` lists for ``package``."""
        versions = re.findall(r"^Version: (\S+)", _run(["apt-cache", *self.options, command, package]), re.M)
        if not versions:
            raise HarnessError(f"no {kind} {package} in the apt lists of {self.options[1]}")
        return versions[0]

    def source(self, package: str, into: Path) -> None:
        """Download and unpack (dpkg-source -x, Debian's patches applied) the source package."""
        _run(["apt-get", *self.options, "-q", "source", package], cwd=into, log=self.log)

    def unpack_binary(self, package: str, into: Path) -> None:
        """Download a binary package and extract its files (dpkg -x) under `into`: nothing is installed."""
        work = Path(tempfile.mkdtemp(dir=into.parent, prefix=".download-"))
        try:
            _run(["apt-get", *self.options, "-q", "download", package], cwd=work, log=self.log)
            debs = sorted(work.glob(f"{package}_*.deb"))
            if not debs:
                raise HarnessError(f"apt-get download {package} left no .deb; see {self.log}")
            _run(["dpkg", "-x", str(debs[-1]), str(into)])
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _complete(path: Path) -> bool:
    try:
        stamp = json.loads((path / _STAMP).read_text())
    except (OSError, ValueError):
        return False
    return bool(stamp.get("kubernetes")) and all(os.access(path / b, os.X_OK) for b in BINARIES)


def find_cached(cache: Optional[Path] = None) -> Optional[Path]:
    """The newest complete control-plane directory in the cache, or None (no network asked)."""
    cache = cache or cache_dir()
    found = sorted(p for p in cache.glob("*/bin") if _complete(p)) if cache.is_dir() else []
    return found[-1] if found else None


def _openapi_dirs(tree: Path) -> List[str]:
    """The Go packages openapi-gen reads for pkg/generated/openapi, as build/root/Makefile.generated_files
    selects them: every directory of the tree (staging/src/X named vendor/X; not the third-party vendor/,
    nor _* and .* directories) with a file carrying a `// +k8s:` tag line and a `+k8s:openapi-gen=` tag,
    but code-generator's and sample-apiserver's, as import paths under k8s.io/kubernetes."""
    tag = re.compile(r"^// *\+k8s:", re.M)
    found = set()
    for path in tree.rglob("*.go"):
        rel = path.relative_to(tree)
        if rel.parts[0] == "vendor" or rel.parts[0].startswith(("_", ".")):
            continue
        directory = rel.parent.as_posix()
        if directory.startswith("staging/src/"):
            directory = "vendor/" + directory[len("staging/src/"):]
        if directory.startswith(("vendor/k8s.io/code-generator/", "vendor/k8s.io/sample-apiserver/")):
            continue
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if "+k8s:openapi-gen=" in text and tag.search(text):
            found.add(f"k8s.io/kubernetes/{directory}")
    return sorted(found)


def _build_tree(tree: Path, gopath: Path, version: str, out: Path, log: Path) -> None:
    """Build the three binaries of the tree (at gopath/src/k8s.io/kubernetes) into `out`."""
    env: Dict[str, str] = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(gopath.parent),
        "GOPATH": str(gopath),
        "GOCACHE": str(cache_dir() / "go-build-cache"),
        "GO111MODULE": "off",
        "GOPROXY": "off",
        "GOFLAGS": "",
        "CGO_ENABLED": "0",
    }
    gobin = gopath / "bin"
    gobin.mkdir(parents=True, exist_ok=True)
    generated = tree / "pkg/generated/openapi/zz_generated.openapi.go"
    if not generated.exists():
        _log("openapi-gen: building it and generating pkg/generated/openapi")
        _run(["go", "build", "-o", str(gobin / "openapi-gen"),
              "k8s.io/kubernetes/vendor/k8s.io/kube-openapi/cmd/openapi-gen"], cwd=tree, env=env, log=log)
        dirs = _openapi_dirs(tree)
        _log(f"openapi-gen over {len(dirs)} packages")
        report = gopath.parent / "openapi-api-rules.report"
        _run([str(gobin / "openapi-gen"), "--logtostderr",
              "--input-dirs", ",".join(dirs),
              "--output-base", str(gopath / "src"),
              "--output-package", "k8s.io/kubernetes/pkg/generated/openapi",
              "-O", "zz_generated.openapi",
              "--go-header-file", str(tree / "hack/boilerplate/boilerplate.generatego.txt"),
              "--report-filename", str(report)], cwd=tree, env=env, log=log)
        if not generated.exists():
            raise HarnessError(f"openapi-gen made no {generated}; see {log}")
        known = tree / "api/api-rules/violation_exceptions.list"
        if known.exists() and report.read_text() != known.read_text():
            raise HarnessError(f"openapi-gen's API rule report {report} differs from the tree's {known}: "
                               "the generated file was made from other packages than the release's")
    upstream = f"v{version.split('really', 1)[-1].split('-', 1)[0]}"
    commit = re.search(r'gitCommit\s*=\s*"([0-9a-f]*)"',
                       (tree / "staging/src/k8s.io/component-base/version/base.go").read_text())
    stamps = {"gitVersion": upstream, "gitTreeState": "clean",
              "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "gitMajor": upstream[1:].split(".")[0], "gitMinor": upstream.split(".")[1]}
    if commit and commit.group(1):
        stamps["gitCommit"] = commit.group(1)
    ldflags = ["-s", "-w"]
    for package in ("k8s.io/kubernetes/vendor/k8s.io/component-base/version",
                    "k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version"):
        ldflags += [f"-X {package}.{k}={v}" for k, v in stamps.items()]
    out.mkdir(parents=True, exist_ok=True)
    _log(f"go build {' '.join(_BUILT)} ({upstream})")
    _run(["go", "build", "-trimpath", "-o", str(out), "-ldflags", " ".join(ldflags),
          *[f"k8s.io/kubernetes/cmd/{b}" for b in _BUILT]], cwd=tree, env=env, log=log)


def build_control_plane(cache: Optional[Path] = None) -> Path:
    """The control-plane directory of Debian's current `kubernetes` source package, built first if the
    cache lacks it. Safe to call concurrently (one build at a time, under a lock) and after an
    interrupted build (a build happens in a temporary directory renamed into place when complete)."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for tool in ("go", "dpkg-source", "apt-get"):
        if not shutil.which(tool):
            raise HarnessError(f"{tool} is not installed: run `make system-deps` (golang-go, dpkg-dev)")
    with _locked(cache / ".lock"):
        apt = _Apt(cache / "apt", suite())
        if apt.update():
            _log(f"apt-get update ({suite()} from {debian_mirror()}, private lists in {cache / 'apt'})")
        version = apt.source_version("kubernetes")
        etcd_version = apt.binary_version("etcd-server")
        final = cache / version / "bin"
        if _complete(final):
            return final
        for old in cache.glob(".build-*"):
            shutil.rmtree(old, ignore_errors=True)
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(dir=cache, prefix=".build-"))
        log = work / "build.log"
        _log(f"building kubernetes {version} with {_run(['go', 'version']).strip()}; log {log}")
        src = work / "src"
        src.mkdir()
        apt.source("kubernetes", src)
        trees = [p for p in src.iterdir() if p.is_dir() and (p / "cmd/kube-apiserver").is_dir()]
        if len(trees) != 1:
            raise HarnessError(f"apt-get source kubernetes unpacked no single tree in {src}")
        gopath = work / "gopath"
        tree = gopath / "src/k8s.io/kubernetes"
        tree.parent.mkdir(parents=True)
        trees[0].rename(tree)
        debs = work / "debs"
        debs.mkdir()
        apt.unpack_binary(_REFLECT2_PACKAGE, debs)
        apt.unpack_binary("etcd-server", debs)
        vendored = tree / "vendor" / _REFLECT2_DIR
        shutil.rmtree(vendored)
        shutil.copytree(debs / "usr/share/gocode/src" / _REFLECT2_DIR, vendored,
                        ignore=shutil.ignore_patterns("*_test.go", "test", "tests"))
        out = work / "bin"
        _build_tree(tree, gopath, version, out, log)
        shutil.copy2(debs / "usr/bin/etcd", out / "etcd")
        (out / _STAMP).write_text(json.dumps({
            "kubernetes": version, "etcd-server": etcd_version, "suite": suite(),
            "go": _run(["go", "version"]).strip(), "seconds": round(time.monotonic() - started),
        }, indent=1) + "\n")
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(log, final.parent / "build.log")
        out.rename(final)
        shutil.rmtree(work, ignore_errors=True)
        _log(f"kubernetes {version}, etcd {etcd_version}: {final} ({time.monotonic() - started:.0f} s)")
        return final
