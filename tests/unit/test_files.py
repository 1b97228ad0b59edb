"""Inputs a user names are read with bounded memory and never hang: type and size checked first."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from gahp.core.errors import InvalidJob
from gahp.core.files import TooLarge, read_input


def read(path: Path, limit: int = 1024) -> bytes:
    return read_input(str(path), "input file", limit, "A_KNOB")


def test_a_regular_file_and_a_symlink_to_one(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert read(tmp_path / "f") == read(tmp_path / "link") == b"data"
    assert read(tmp_path / "f", limit=4) == b"data"


@pytest.mark.timeout(10)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InvalidJob, match="is a FIFO; only regular files"):
        read(tmp_path / "fifo")


@pytest.mark.parametrize("path,kind", [("/dev/zero", "a character device"), ("/dev/null", "a character device"),
                                       ("/", "a directory")])
def test_devices_and_directories(path: str, kind: str) -> None:
    with pytest.raises(InvalidJob, match=f"is {kind}"):
        read_input(path, "input file", 1024, "A_KNOB")


def test_a_huge_file_is_refused_before_reading(tmp_path: Path) -> None:
    huge = tmp_path / "huge"
    with open(huge, "wb") as f:
        f.truncate(2 * 1024 ** 3)  # a sparse 2 GB file
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TooLarge, match=r"has 2147483648 bytes, more than the 1048576 allowed \(A_KNOB\)"):
        read(huge, limit=1 << 20)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB: nothing was read


def test_missing_and_unreadable(tmp_path: Path) -> None:
    with pytest.raises(InvalidJob, match="cannot be read: No such file"):
        read(tmp_path / "nope")
