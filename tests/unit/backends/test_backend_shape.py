"""Every backend has the same shape: the same module names for the same concerns, each backend's
package saying so, and none holding what the kit holds for all (a retry loop over requests, the
translation of statuses, a hold code of its own)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BACKENDS = ROOT / "gahp" / "backends"
PACKAGES = sorted(p.name for p in BACKENDS.iterdir() if (p / "__init__.py").exists())

#: The concerns every service backend has, each in a module of this name.
SHARED = ("backend", "settings", "api", "spec", "submit", "cache", "state", "output", "identity", "retention",
          "census")


def test_there_are_backend_packages() -> None:
    assert PACKAGES == ["k8s", "lancium"]


@pytest.mark.parametrize("package", PACKAGES)
def test_each_backend_has_a_module_of_the_same_name_for_each_shared_concern(package: str) -> None:
    modules = {p.stem for p in (BACKENDS / package).glob("*.py")}
    assert set(SHARED) <= modules, sorted(set(SHARED) - modules)
    described = (BACKENDS / package / "__init__.py").read_text()
    for name in SHARED:
        assert f"``{name}``" in described, f"{package}/__init__.py does not say what {name} holds"


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in BACKENDS.glob("*/*.py")))
def test_no_backend_repeats_the_kits_request_rules(path: str) -> None:
    text = (ROOT / path).read_text()
    assert not re.search(r"for attempt in range|TRANSIENT|RETRY_STATUSES|def translate\(method", text), path
    assert "_send(" not in text or "self.door.call(" in text, path
