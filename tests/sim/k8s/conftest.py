"""The fidelity tests on the real control plane run once: the simulator's two ways of visiting pods
(``PASSES`` in test_k8s_support.py) are the simulator's, so a real-engine test of the second is not
collected."""

from __future__ import annotations

from typing import List

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (dropped if params.get("engine") == "real" and params.get("make_sim") == "changes-only" else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
