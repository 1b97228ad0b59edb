"""``podgahp routes check`` warns about a GridResource the gridmanager reads one way and an exact
comparison another (``batch K8S``), or that looks like podgahp's and starts no podgahp GAHP."""

from __future__ import annotations

from typing import Optional

import pytest

from gahp.routes.check import spelling_warnings
from gahp.routes.report import Route


@pytest.mark.parametrize("grid_resource, warning", [
    ("batch k8s", None),
    ("batch lancium", None),
    ("batch slurm", None),
    ("batch K8S", 'starts K8S_GAHP (the gridmanager lower-cases the batch type), but tools comparing the exact '
                  'text miss its jobs; write "batch k8s"'),
    ("batch Lancium", 'starts LANCIUM_GAHP'),
    ("Batch k8s", 'starts no podgahp GAHP'),
    ("batch  k8s", 'starts no podgahp GAHP'),
    ("batch k8s ", 'starts no podgahp GAHP'),
], ids=["k8s", "lancium", "other-batch", "upper-type", "capital-lancium", "capital-batch", "two-spaces",
        "trailing-space"])
def test_grid_resource_spellings(grid_resource: str, warning: Optional[str]) -> None:
    warnings = spelling_warnings([Route(name="R", grid_resource=grid_resource)])
    if warning is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warning in warnings[0] and warnings[0].startswith("route R:")
