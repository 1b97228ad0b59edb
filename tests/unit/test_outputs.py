"""Out/Err written back only inside the job's directory, never through a symbolic link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gahp.core.outputs import write_output


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    path = tmp_path / "iwd"
    path.mkdir()
    return path


def test_a_new_file_gets_0644_and_an_old_one_keeps_its_mode(job_dir: Path) -> None:
    assert write_output(str(job_dir), str(job_dir / "p.out"), [b"a", b"bc"]) == 3
    assert (job_dir / "p.out").read_bytes() == b"abc"
    assert stat.S_IMODE((job_dir / "p.out").stat().st_mode) == 0o644
    os.chmod(job_dir / "p.out", 0o600)
    write_output(str(job_dir), "p.out", [b"x"])  # relative to the job's directory
    assert (job_dir / "p.out").read_bytes() == b"x" and stat.S_IMODE((job_dir / "p.out").stat().st_mode) == 0o600
    assert sorted(p.name for p in job_dir.iterdir()) == ["p.out"]  # no temporary file left


def test_a_link_in_place_of_the_file_is_replaced_not_followed(job_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("private")
    os.symlink(victim, job_dir / "p.out")
    write_output(str(job_dir), str(job_dir / "p.out"), [b"pilot"])
    assert victim.read_text() == "private"
    assert not (job_dir / "p.out").is_symlink() and (job_dir / "p.out").read_text() == "pilot"


def test_a_linked_directory_on_the_way_is_not_followed(job_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "p.out").write_text("private")
    os.symlink(elsewhere, job_dir / "logs")
    with pytest.raises(OSError, match="logs is a symbolic link or not a directory"):
        write_output(str(job_dir), str(job_dir / "logs" / "p.out"), [b"pilot"])
    assert (elsewhere / "p.out").read_text() == "private" and sorted(os.listdir(elsewhere)) == ["p.out"]


# The absolute path is a file of the test's own: tests run as root, and a write_output that stopped
# refusing would replace whatever file it named.
@pytest.mark.parametrize("path", ["../p.out", "{elsewhere}/p.out", "{dir}x/p.out", "{dir}"],
                         ids=["dot-dot", "absolute", "prefix-sibling", "the-directory"])
def test_a_path_outside_the_job_directory_is_refused(job_dir: Path, tmp_path: Path, path: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "p.out").write_text("private")
    with pytest.raises(OSError, match="not inside the job's directory"):
        write_output(str(job_dir), path.format(dir=job_dir, elsewhere=elsewhere), [b"pilot"])
    assert list(job_dir.iterdir()) == []
    assert (elsewhere / "p.out").read_text() == "private"


def test_a_failed_write_leaves_no_temporary_file(job_dir: Path) -> None:
    def chunks():  # type: ignore[no-untyped-def]
        yield b"part"
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        write_output(str(job_dir), "p.out", chunks())
    assert list(job_dir.iterdir()) == []
