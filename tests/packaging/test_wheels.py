"""Two distributions from one repository: the product's wheel holds no simulator, the simulators'
wheel holds nothing of the product, and each brings its own entry points."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

import gahp
import podgahp_sim

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, List[str]]:
    """Distribution name -> the files of its wheel, built from the checkout."""
    out = tmp_path_factory.mktemp("wheels")
    found: Dict[str, List[str]] = {}
    for name, source in (("podgahp", ROOT), ("podgahp_sim", ROOT / "sim")):
        build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                                "-w", str(out / name), str(source)], capture_output=True, text=True, timeout=240)
        assert build.returncode == 0, build.stderr[-3000:]
        (wheel,) = (out / name).glob(f"{name}-*.whl")
        with zipfile.ZipFile(wheel) as z:
            found[name] = z.namelist() + [f"entry_points.txt:{line}" for info in z.namelist()
                                          if info.endswith("entry_points.txt")
                                          for line in z.read(info).decode().splitlines()]
    return found


def test_the_product_wheel_holds_no_simulator(wheels: Dict[str, List[str]]) -> None:
    product = wheels["podgahp"]
    assert "gahp/program/server.py" in product and "gahp/backends/k8s/backend.py" in product
    assert not [f for f in product if "podgahp_sim" in f or f.startswith("sim/")]
    assert "entry_points.txt:k8s = gahp.backends.k8s.backend:KubernetesBackend" in product
    assert not [f for f in product if f.startswith("entry_points.txt:sim")]


def test_the_simulators_wheel_holds_only_the_simulators_and_adds_podgahp_sim(wheels: Dict[str, List[str]]) -> None:
    sim = wheels["podgahp_sim"]
    assert "podgahp_sim/k8s/sim.py" in sim and "podgahp_sim/k8s/http.py" in sim and "podgahp_sim/lancium/sim.py" in sim
    assert not [f for f in sim if f.startswith("gahp/")]
    assert "entry_points.txt:sim = podgahp_sim.cli:sim" in sim


def test_both_carry_the_same_version() -> None:
    assert podgahp_sim.__version__ == gahp.__version__
