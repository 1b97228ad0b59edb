"""The RPM builds with rpmbuild and puts every file where HTCondor-CE reads it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path
from typing import Dict, List, Set

import pytest

from gahp import __version__

ROOT = Path(__file__).parent.parent.parent


def _tracked_files() -> List[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [name for name in out.splitlines() if (ROOT / name).is_file()]


PACKAGES = ("podgahp", "podgahp-k8s", "podgahp-lancium", "podgahp-standalone", "podgahp-sim")


@pytest.fixture(scope="module")
def rpms(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """Every binary RPM the spec builds, by package name."""
    if shutil.which("rpmbuild") is None:
        pytest.fail("rpmbuild not found: `make system-deps` installs Debian's rpm package")
    top = tmp_path_factory.mktemp("rpmbuild")
    sources = top / "SOURCES"
    sources.mkdir()
    prefix = f"podgahp-{__version__}"
    with tarfile.open(sources / f"{prefix}.tar.gz", "w:gz") as tar:
        for name in _tracked_files():
            tar.add(ROOT / name, arcname=f"{prefix}/{name}")
    build = subprocess.run(["rpmbuild", "-bb", str(ROOT / "rpm" / "podgahp.spec"),
                            "--define", f"_topdir {top}", "--define", f"build_python {sys.executable}"],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
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
    site = sysconfig.get_path("purelib", vars={"base": "/usr"})
    expected = {
        "/usr/bin/podgahp": "podgahp", f"{site}/gahp/server.py": "podgahp",
        f"{site}/gahp/data/ce-router-defaults.conf": "podgahp",
        "/etc/condor/config.d/60-podgahp-ce-schedd2.conf": "podgahp",
        "/usr/bin/k8s_gahp": "podgahp-k8s", f"{site}/gahp/backends/k8s/backend.py": "podgahp-k8s",
        "/usr/bin/lancium_gahp": "podgahp-lancium", f"{site}/gahp/backends/lancium/backend.py": "podgahp-lancium",
        f"{site}/podgahp_sim/k8s.py": "podgahp-sim", f"{site}/podgahp_sim/lancium.py": "podgahp-sim",
        "/usr/share/podgahp/ce-config/standalone/condor_config": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/bin/condor_ce_q": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/bin/condor_ce_submit": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/bin/condor_ce_router_q": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/standalone/config.d/01-ce-router-defaults.conf": "podgahp-standalone",
        "/usr/share/podgahp/ce-config/standalone/ce-router-env.conf": "podgahp-standalone",
        f"{site}/gahp/data/ce-router-env.conf": "podgahp",
    }
    for conf in list((ROOT / "condor_config.d").glob("*.conf")) + list((ROOT / "ce-config/htcondor-ce").glob("*.conf")):
        where = "/usr/share/condor-ce" if conf.name.endswith("-defaults.conf") else "/etc/condor-ce"
        pkg = ("podgahp-k8s" if "-k8s" in conf.name or "reap" in conf.name
               else "podgahp-lancium" if "-lancium" in conf.name else "podgahp")
        expected[f"{where}/config.d/{conf.name}"] = pkg
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
    import re

    spec = (Path(__file__).resolve().parents[2] / "rpm" / "podgahp.spec").read_text()
    release = re.search(r"^Release:\s*(\d+)", spec, re.MULTILINE).group(1)  # type: ignore[union-attr]
    for name in ("podgahp-k8s", "podgahp-lancium", "podgahp-standalone"):
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
    for program in ("k8s_gahp", "lancium_gahp", "podgahp"):
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
