"""The RPM builds with rpmbuild and puts every file where HTCondor-CE reads it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path
from typing import List, Set

import pytest

from gahp import __version__

ROOT = Path(__file__).parent.parent.parent


def _tracked_files() -> List[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [name for name in out.splitlines() if (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def rpm_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
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
    (rpm,) = (top / "RPMS" / "noarch").glob("podgahp-*.noarch.rpm")
    return rpm


def _query(rpm: Path, flag: str) -> Set[str]:
    out = subprocess.run(["rpm", "-qp", flag, str(rpm)], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_every_shipped_file_is_in_place(rpm_file: Path) -> None:
    files = _query(rpm_file, "-l")
    site = sysconfig.get_path("purelib", vars={"base": "/usr"})
    expected = {
        "/usr/bin/k8s_gahp", "/usr/bin/lancium_gahp", "/usr/bin/podgahp",
        f"{site}/gahp/server.py", f"{site}/gahp/backends/k8s.py", f"{site}/gahp/backends/lancium.py",
        f"{site}/gahp/sim/k8s.py", f"{site}/gahp/sim/lancium.py",
        "/usr/share/podgahp/ce-config/standalone/condor_config", "/usr/share/podgahp/ce-config/bin/condor_ce_q",
        "/usr/share/podgahp/ce-config/bin/condor_ce_submit", "/usr/share/podgahp/ce-config/bin/condor_ce_router_q",
        "/usr/share/podgahp/ce-config/standalone/config.d/01-ce-router-defaults.conf",
        f"{site}/gahp/data/ce-router-defaults.conf", "/etc/condor/config.d/60-podgahp-ce-schedd2.conf",
    }
    for conf in (ROOT / "condor_config.d").glob("*.conf"):
        where = "/usr/share/condor-ce" if conf.name.endswith("-defaults.conf") else "/etc/condor-ce"
        expected.add(f"{where}/config.d/{conf.name}")
    for conf in (ROOT / "ce-config" / "htcondor-ce").glob("*.conf"):
        where = "/usr/share/condor-ce" if conf.name.endswith("-defaults.conf") else "/etc/condor-ce"
        expected.add(f"{where}/config.d/{conf.name}")
    for route in (ROOT / "routes").iterdir():
        expected.add(f"/usr/share/doc/podgahp/routes/{route.name}")
    for doc in (ROOT / "docs").iterdir():
        expected.add(f"/usr/share/doc/podgahp/{doc.name}")
    missing = expected - files
    assert not missing, f"not in the RPM: {sorted(missing)}"
    assert not any("/tests/" in f or f.endswith(".pyc") for f in files)


def test_admin_files_are_noreplace_config(rpm_file: Path) -> None:
    config = _query(rpm_file, "-c")
    admin = {f"/etc/condor-ce/config.d/{p.name}" for p in (ROOT / "condor_config.d").glob("*.conf")
             if not p.name.endswith("-defaults.conf")}
    assert admin and admin <= config
    assert not any(f.startswith("/usr/share/condor-ce") for f in config)


def test_programs_use_the_system_python(rpm_file: Path, tmp_path: Path) -> None:
    subprocess.run(f"rpm2cpio {rpm_file} | cpio -idm --quiet", shell=True, cwd=tmp_path, check=True)
    for program in ("k8s_gahp", "lancium_gahp", "podgahp"):
        first = (tmp_path / "usr" / "bin" / program).read_text().splitlines()[0]
        assert first == "#!/usr/bin/python3"


def test_the_packaged_pool_finds_its_config(rpm_file: Path, tmp_path: Path) -> None:
    """The stand-alone pool's condor_config names its config.d and podgahp's knob files relative to
    itself; both must exist in the installed tree, the router defaults as a file (not a link)."""
    subprocess.run(f"rpm2cpio {rpm_file} | cpio -idm --quiet", shell=True, cwd=tmp_path, check=True)
    pool = tmp_path / "usr/share/podgahp/ce-config/standalone"
    text = (pool / "condor_config").read_text()
    relative = text.split("PODGAHP_CONFIG_D = $(PODGAHP_CE_CONFIG_DIR)/", 1)[1].split()[0]
    knobs = (pool / relative).resolve()
    assert sorted(p.name for p in knobs.glob("*.conf")) == sorted(p.name for p in (ROOT / "condor_config.d").glob("*.conf"))
    defaults = pool / "config.d" / "01-ce-router-defaults.conf"
    assert not defaults.is_symlink() and "JOB_ROUTER_TRANSFORM_Env" in defaults.read_text()
    bootstrap = (tmp_path / "usr/share/podgahp/ce-config/bin/condor_ce_env_bootstrap").read_text()
    assert "/../standalone/condor_config" in bootstrap
    schedd2 = (tmp_path / "etc/condor/config.d/60-podgahp-ce-schedd2.conf").read_text()
    for line in schedd2.splitlines():
        if line.startswith("include ifexist : /"):
            path = line.split(" : ", 1)[1]
            assert (tmp_path / path.lstrip("/")).is_file(), path
