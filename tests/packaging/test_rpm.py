"""The RPMs build with rpmbuild for EL9's Python, pass rpmlint, run the unit tests in %check, and
put every file where HTCondor-CE reads it."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, List, Set

import pytest

from gahp import __version__
from gahp.core import plugins

ROOT = Path(__file__).parent.parent.parent


def _tracked_files() -> List[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [name for name in out.splitlines() if (ROOT / name).is_file()]


#: The backends with a GAHP program, each a subpackage of its own (podgahp-k8s, podgahp-lancium...).
BACKENDS = tuple(plugins.programs())
PACKAGES = ("podgahp", "podgahp-ce", "podgahp-standalone", "podgahp-sim") + tuple(f"podgahp-{b}" for b in BACKENDS)
#: EL9's Python, which the packages are built for (make rpm's RPM_PYTHON_VERSION).
TARGET_PYTHON = "3.9"
SITE = f"/usr/lib/python{TARGET_PYTHON}/site-packages"
#: A quick part of the unit tests for %check here (make rpm's build runs all of them).
CHECK_TESTS = "tests/unit/test_protocol.py"


def _sources(top: Path) -> None:
    sources = top / "SOURCES"
    sources.mkdir()
    prefix = f"podgahp-{__version__}"
    with tarfile.open(sources / f"{prefix}.tar.gz", "w:gz") as tar:
        for name in _tracked_files():
            tar.add(ROOT / name, arcname=f"{prefix}/{name}")
    shutil.copy(ROOT / "rpm" / "podgahp.rpmlintrc", sources)


def _rpmbuild(top: Path, stage: str, *defines: str) -> "subprocess.CompletedProcess[str]":
    args = ["rpmbuild", stage, str(ROOT / "rpm" / "podgahp.spec"), "--define", f"_topdir {top}",
            "--define", f"build_python {sys.executable}", "--define", f"python3_version {TARGET_PYTHON}"]
    for define in defines:
        args += ["--define", define]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> "subprocess.CompletedProcess[str]":
    """``rpmbuild -ba`` for EL9 (its %check running part of the unit tests); the tree is in ``_topdir``."""
    if shutil.which("rpmbuild") is None:
        pytest.fail("rpmbuild not found: `make system-deps` installs Debian's rpm package")
    top = tmp_path_factory.mktemp("rpmbuild")
    _sources(top)
    done = _rpmbuild(top, "-ba", f"check_tests {CHECK_TESTS}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done.args.append(str(top))
    return done


@pytest.fixture(scope="module")
def rpms(build: "subprocess.CompletedProcess[str]") -> Dict[str, Path]:
    """Every binary RPM the spec builds, by package name."""
    top = Path(build.args[-1])
    found = {p.name.rsplit("-", 2)[0]: p for p in (top / "RPMS" / "noarch").glob("podgahp*.noarch.rpm")}
    assert sorted(found) == sorted(PACKAGES)
    return found


def _query(rpm: Path, flag: str) -> Set[str]:
    out = subprocess.run(["rpm", "-qp", flag, str(rpm)], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def _owner(rpms: Dict[str, Path]) -> Dict[str, str]:
    """Installed path -> the package that owns it."""
    return {path: name for name, rpm in rpms.items() for path in _query(rpm, "-l")}


def test_every_shipped_file_is_in_place(rpms: Dict[str, Path]) -> None:
    owner = _owner(rpms)
    site = SITE
    expected = {
        "/usr/bin/podgahp": "podgahp", f"{site}/gahp/program/server.py": "podgahp",
        f"{site}/gahp/data/ce-router-defaults.conf": "podgahp",
        "/etc/condor/config.d/60-podgahp-ce-schedd2.conf": "podgahp-ce",
        "/usr/share/podgahp/podgahp.cpf": "podgahp-ce",
        "/usr/share/man/man1/podgahp.1.gz": "podgahp",
        f"{site}/podgahp_sim/k8s/sim.py": "podgahp-sim", f"{site}/podgahp_sim/lancium/sim.py": "podgahp-sim",
        "/usr/share/podgahp/ce-config/standalone/condor_config": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/bin/condor_ce_q": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/bin/condor_ce_submit": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/bin/condor_ce_router_q": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/standalone/config.d/01-ce-router-defaults.conf": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/standalone/ce-router-env.conf": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/standalone/mapfile": "podgahp-standalone",
        f"{site}/gahp/data/ce-router-env.conf": "podgahp",
    }
    for backend in BACKENDS:
        for path in (f"/usr/bin/{backend}_gahp", f"/usr/share/man/man1/{backend}_gahp.1.gz",
                     f"{site}/gahp/backends/{backend}/backend.py", f"{site}/gahp/backends/{backend}/__init__.py"):
            expected[path] = f"podgahp-{backend}"
    assert {"k8s", "lancium"} <= set(BACKENDS)
    # Every module of the product's packages (gahp/program, gahp/ce, gahp/rules, gahp/core, ...) is the
    # base package's, but a backend package's, which is its subpackage's.
    for module in (ROOT / "gahp").rglob("*.py"):
        relative = module.relative_to(ROOT)
        if relative.parts[1] != "backends" or len(relative.parts) == 3:
            expected[f"{site}/{relative.as_posix()}"] = "podgahp"
        else:
            expected[f"{site}/{relative.as_posix()}"] = f"podgahp-{relative.parts[2]}"
    for conf in (ROOT / "condor_config.d").glob("*.conf"):
        where = "/usr/share/condor-ce" if conf.name.endswith("-defaults.conf") else "/etc/condor-ce"
        expected[f"{where}/config.d/{conf.name}"] = "podgahp-ce"
    for route in (ROOT / "routes").iterdir():
        expected[f"/usr/share/doc/podgahp/routes/{route.name}"] = "podgahp"
    for doc in (ROOT / "docs").iterdir():
        expected[f"/usr/share/doc/podgahp/{doc.name}"] = "podgahp"
    wrong = {path: (owner.get(path), pkg) for path, pkg in expected.items() if owner.get(path) != pkg}
    assert not wrong, f"(owner, expected owner): {wrong}"
    assert not any("/tests/" in f or f.endswith(".pyc") for f in owner)
    # The product's packages hold no simulator.
    assert not any("podgahp_sim" in f for f, pkg in owner.items() if pkg != "podgahp-sim")


def test_license_and_versioned_requires(rpms: Dict[str, Path]) -> None:
    assert any(f.endswith("/LICENSE") for f in _query(rpms["podgahp"], "-l"))
    requires = {name: subprocess.run(["rpm", "-qp", "--requires", str(rpm)], capture_output=True, text=True,
                                     check=True).stdout for name, rpm in rpms.items()}
    assert "python3-kubernetes >= 30.1" in requires["podgahp-k8s"]
    assert "python3-requests >= 2.25" in requires["podgahp-lancium"]
    assert "python3-condor >= 23.9" in requires["podgahp"]
    spec = (Path(__file__).resolve().parents[2] / "rpm" / "podgahp.spec").read_text()
    release = re.search(r"^Release:\s*(\d+)", spec, re.MULTILINE).group(1)  # type: ignore[union-attr]
    for name in set(PACKAGES) - {"podgahp", "podgahp-sim"}:
        assert f"podgahp = {__version__}-{release}" in requires[name], name
    assert "podgahp" not in requires["podgahp-sim"].replace("podgahp-sim", "")


def test_admin_files_are_noreplace_config(rpms: Dict[str, Path]) -> None:
    config = set().union(*(_query(rpm, "-c") for rpm in rpms.values()))
    admin = {f"/etc/condor-ce/config.d/{p.name}" for p in (ROOT / "condor_config.d").glob("*.conf")
             if not p.name.endswith("-defaults.conf")}
    assert admin and admin <= config
    assert not any(f.startswith("/usr/share/condor-ce") for f in config)


def _extract(rpms: Dict[str, Path], where: Path) -> None:
    for rpm in rpms.values():
        subprocess.run(f"rpm2cpio {rpm} | cpio -idm --quiet", shell=True, cwd=where, check=True)


def test_programs_use_the_system_python(rpms: Dict[str, Path], tmp_path: Path) -> None:
    _extract(rpms, tmp_path)
    for program in [f"{backend}_gahp" for backend in BACKENDS] + ["podgahp"]:
        first = (tmp_path / "usr" / "bin" / program).read_text().splitlines()[0]
        assert first == "#!/usr/bin/python3"


def test_the_packaged_pool_finds_its_config(rpms: Dict[str, Path], tmp_path: Path) -> None:
    """The stand-alone pool's condor_config names its config.d and podgahp's knob files relative to
    itself; both must exist in the installed tree, the router defaults as a file (not a link)."""
    _extract(rpms, tmp_path)
    pool = tmp_path / "usr/share/podgahp/ce-config/standalone"
    text = (pool / "condor_config").read_text()
    relative = text.split("PODGAHP_CONFIG_D = $(PODGAHP_CE_CONFIG_DIR)/", 1)[1].split()[0]
    knobs = (pool / relative).resolve()
    assert sorted(p.name for p in knobs.glob("*.conf")) == sorted(p.name for p in (ROOT / "condor_config.d").glob("*.conf"))
    defaults = pool / "config.d" / "01-ce-router-defaults.conf"
    assert not defaults.is_symlink() and "JOB_ROUTER_TRANSFORM_Cpus" in defaults.read_text()
    env = pool / "ce-router-env.conf"
    assert not env.is_symlink() and "JOB_ROUTER_TRANSFORM_Env" in env.read_text()
    assert "LOCAL_CONFIG_FILE = $(PODGAHP_CE_CONFIG_DIR)/ce-router-env.conf" in text
    bootstrap = (tmp_path / "usr/share/podgahp/ce-config/bin/condor_ce_env_bootstrap").read_text()
    assert "/../standalone/condor_config" in bootstrap
    schedd2 = (tmp_path / "etc/condor/config.d/60-podgahp-ce-schedd2.conf").read_text()
    for line in schedd2.splitlines():
        if line.startswith("include ifexist : /"):
            path = line.split(" : ", 1)[1]
            assert (tmp_path / path.lstrip("/")).is_file(), path


def _requires(rpm: Path) -> List[str]:
    return subprocess.run(["rpm", "-qp", "--requires", str(rpm)], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def test_built_for_el9_python(rpms: Dict[str, Path]) -> None:
    """Built here with another Python, the packages are still for EL9's: its site-packages, and the
    python(abi) rpm's generator derives from it, so dnf on EL9 (Python 3.9) can install them."""
    for name in ("podgahp", "podgahp-sim") + tuple(f"podgahp-{backend}" for backend in BACKENDS):
        requires = _requires(rpms[name])
        assert f"python(abi) = {TARGET_PYTHON}" in requires, (name, requires)
        assert not [r for r in requires if r.startswith("python(abi)") and r != f"python(abi) = {TARGET_PYTHON}"]
        python_files = [f for f in _query(rpms[name], "-l") if f.endswith(".py")]
        assert python_files and all(f.startswith(SITE + "/") for f in python_files), name
    # the metadata's requirements (every backend's) are not put on the core package
    assert not [r for r in _requires(rpms["podgahp"]) if "dist(" in r]


def test_ce_package_requires_htcondor_ce_and_owns_its_directories(rpms: Dict[str, Path]) -> None:
    requires = _requires(rpms["podgahp-ce"])
    assert "htcondor-ce" in requires
    ce_files = _query(rpms["podgahp-ce"], "-l")
    for directory in ("/etc/condor-ce/config.d", "/usr/share/condor-ce/config.d", "/etc/condor/config.d"):
        assert directory in ce_files
    # nothing else installs into the CE's directories (a CE-less stand-alone site needs no htcondor-ce)
    others = {f for name, rpm in rpms.items() if name != "podgahp-ce" for f in _query(rpm, "-l")}
    assert not [f for f in others if "condor-ce" in f.split("/")[:3] or f.startswith("/etc/condor/")]
    assert not [r for name in PACKAGES if name != "podgahp-ce" for r in _requires(rpms[name]) if "htcondor-ce" in r]


#: Directories the packages podgahp's depend on own (filesystem, man, python3, condor).
SYSTEM_DIRS = {"/etc", "/usr/bin", "/usr/share/man/man1", SITE, "/usr/share/doc", "/usr/share/licenses", "/usr/share",
               "/etc/condor"}


def test_every_directory_a_package_installs_into_is_owned(rpms: Dict[str, Path]) -> None:
    """By the package, by the core package it requires, or by the system's own packages."""
    for name, rpm in rpms.items():
        owned = _query(rpm, "-l") | (_query(rpms["podgahp"], "-l") if name != "podgahp-sim" else set())
        for path in _query(rpm, "-l"):
            parent = str(Path(path).parent)
            assert parent in owned or parent in SYSTEM_DIRS, (name, path)


def test_rpmlint_reports_no_error(build: "subprocess.CompletedProcess[str]", rpms: Dict[str, Path]) -> None:
    """rpmlint (Debian's, with the filters and reasons of rpm/podgahp.rpmlintrc) on the binary and
    source packages and the spec: no error, and no warning the rpmlintrc does not explain."""
    if shutil.which("rpmlint") is None:
        pytest.fail("rpmlint not found: `make system-deps` installs Debian's rpmlint package")
    top = Path(build.args[-1])
    sources = list((top / "SRPMS").glob("podgahp-*.src.rpm"))
    assert len(sources) == 1
    lint = subprocess.run(["rpmlint", "-r", str(ROOT / "rpm" / "podgahp.rpmlintrc"), *map(str, rpms.values()),
                           str(sources[0]), str(ROOT / "rpm" / "podgahp.spec")],
                          capture_output=True, text=True, timeout=300)
    summary = re.search(r"(\d+) errors, (\d+) warnings", lint.stdout)
    assert summary is not None, lint.stdout + lint.stderr
    assert summary.groups() == ("0", "0"), lint.stdout
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_man_pages_render_each_programs_help(rpms: Dict[str, Path], tmp_path: Path) -> None:
    _extract(rpms, tmp_path)
    pages = [("podgahp", ("podgahp q", "podgahp trace", "--condor-config"))] + [
        (f"{backend}_gahp", (f"{backend.upper()}_GAHP", f"BLAH_PING 1 {backend}")) for backend in BACKENDS]
    for program, words in pages:
        page = gzip.decompress((tmp_path / "usr/share/man/man1" / f"{program}.1.gz").read_bytes()).decode()
        assert page.startswith(f'.TH {program.upper()} 1 ""'), page[:80]
        assert f"{program.replace('_', '_')} \\- " in page
        for word in words:
            assert word.replace("-", "\\-") in page, (program, word)
        if shutil.which("man"):
            shown = subprocess.run(["man", "-l", "-"], input=page, capture_output=True, text=True, timeout=60,
                                   env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin"})
            assert shown.returncode == 0 and "SYNOPSIS" in shown.stdout, shown.stderr
    assert "podgahp sim" not in gzip.decompress((tmp_path / "usr/share/man/man1/podgahp.1.gz").read_bytes()).decode()


def test_check_runs_the_unit_tests(build: "subprocess.CompletedProcess[str]", tmp_path: Path) -> None:
    """%check runs the unit tests against the installed tree (by default all of tests/unit), and a
    failing test fails the build."""
    log = build.stdout + build.stderr
    assert re.search(r"^Executing\(%check\)", log, re.M)
    assert re.search(rf"PYTHONPATH=\S+/usr/lib/python{re.escape(TARGET_PYTHON)}/site-packages \S+ -m pytest .*"
                     rf"{re.escape(CHECK_TESTS)}", log)
    assert re.search(r"^\d+ passed in ", log, re.M)
    spec = (ROOT / "rpm" / "podgahp.spec").read_text()
    assert "%{!?check_tests:tests/unit}" in spec.split("%check", 1)[1].split("%files", 1)[0]
    failing = tmp_path / "test_fails.py"
    failing.write_text("def test_fails() -> None:\n    assert False, 'a failing unit test'\n")
    top = tmp_path / "top"
    top.mkdir()
    _sources(top)
    broken = _rpmbuild(top, "-bi", f"check_tests {failing}")
    assert broken.returncode != 0
    assert "a failing unit test" in broken.stdout + broken.stderr
