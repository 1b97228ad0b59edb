"""Job ads to shapes and groups: user input that is missing, odd or huge is no demand, not an error."""

from __future__ import annotations

from typing import Dict, Optional

import pytest

from gahp.provision.shape import DISK_STEP_KB, Group, Shape, fits, group_of, pilots_for, shape_of


@pytest.mark.parametrize("job, shape", [
    ({"RequestCpus": 4, "RequestMemory": 8192}, Shape(4, 8192)),
    ({"RequestCpus": 1, "RequestMemory": 2048.5, "RequestGPUs": 1, "RequestDisk": 1}, Shape(1, 2049, 1, DISK_STEP_KB)),
    ({"RequestMemory": 100}, Shape(1, 100)),
    ({"RequestCpus": 2, "RequestMemory": 100, "RequestDisk": 3 * DISK_STEP_KB + 1}, Shape(2, 100, 0, 4 * DISK_STEP_KB)),
    ({"RequestCpus": 2}, None),
    ({"RequestCpus": "4", "RequestMemory": 100}, None),
    ({"RequestCpus": True, "RequestMemory": 100}, None),
    ({"RequestCpus": 0, "RequestMemory": 100}, None),
    ({"RequestCpus": 10 ** 9, "RequestMemory": 100}, None),
    ({"RequestCpus": 1, "RequestMemory": float("nan")}, None),
    ({"RequestCpus": 1, "RequestMemory": float("inf")}, None),
    ({"RequestCpus": 1, "RequestMemory": 100, "RequestGPUs": -1}, None),
], ids=lambda v: str(v))
def test_shape_of(job: Dict[str, object], shape: Optional[Shape]) -> None:
    assert shape_of(job) == shape


def test_groups_split_by_extra_attributes_and_refuse_odd_values() -> None:
    job = {"RequestCpus": 1, "RequestMemory": 100, "Project": "astro"}
    assert group_of(job, ("Project",)) == Group(Shape(1, 100), (("Project", "astro"),))
    assert str(group_of(job, ("Project",))) == "1c/100MiB,Project='astro'"
    assert group_of({**job, "Project": "x" * 1000}, ("Project",)) is None
    assert group_of({**job, "Project": ["a"]}, ("Project",)) is None
    assert group_of({**job, "Project": "a\nSTART = true"}, ("Project",)) is None
    assert group_of({**job, "Project": float("inf")}, ("Project",)) is None
    undefined = group_of({"RequestCpus": 1, "RequestMemory": 100}, ("Project",))
    assert undefined == Group(Shape(1, 100), (("Project", None),)) and str(undefined) == "1c/100MiB,Project=undefined"
    assert group_of(job, ()) == Group(Shape(1, 100))


def test_partitionable_pilots_by_the_scarcest_resource() -> None:
    pilot = Shape(cpus=8, memory_mb=16384, gpus=0, disk_kb=0)
    assert pilots_for(Shape(8, 1000), pilot) == 1
    assert pilots_for(Shape(9, 1000), pilot) == 2
    assert pilots_for(Shape(2, 16385 * 2), pilot) == 3
    assert fits(Shape(8, 16384), pilot) and not fits(Shape(9, 1), pilot) and not fits(Shape(1, 1, 1), pilot)
