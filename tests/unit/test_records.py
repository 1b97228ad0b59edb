"""Job records: what a GAHP wrote of the jobs it made, read back only from its own files."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from gahp.rules.records import JobRecord, JobRecords, file_name

NOBODY = pwd.getpwnam("nobody")


def record(key: str = "lancium/12", made_at: float = 1000.0) -> JobRecord:
    return JobRecord(key, "ce_1.0_17", "/home/u/iwd", "/home/u/iwd/p.out", None, made_at, "podgahp-x")


def test_put_get_drop_and_prune(tmp_path: Path) -> None:
    records = JobRecords([str(tmp_path)], "ce.example.org", "lancium")
    records.put(record())
    records.put(record("k8s/pilots/pilot-0123456789abcdef0123-1", made_at=5000.0))
    assert records.get("lancium/12") == record()
    assert [r.key for r in records.all()] == ["k8s/pilots/pilot-0123456789abcdef0123-1", "lancium/12"]
    assert records.prune(max_age_s=3000, now=5500.0) == 1
    assert records.get("lancium/12") is None
    records.drop("k8s/pilots/pilot-0123456789abcdef0123-1")
    assert records.all() == []
    assert oct(os.stat(records.directories[0]).st_mode & 0o777) == "0o700"


def test_a_record_is_a_file_of_this_user_alone_replaced_whole(tmp_path: Path) -> None:
    """Each put writes a new file (mode 0600) and renames it over the record; no temporary file stays;
    a state directory removed meanwhile is made again."""
    records = JobRecords([str(tmp_path)], "ce.example.org", "lancium")
    records.put(record())
    records.put(record(made_at=2000.0))
    directory = Path(records.directories[0])
    assert [p.name for p in directory.iterdir()] == ["lancium.12.json"]
    assert oct((directory / "lancium.12.json").stat().st_mode & 0o777) == "0o600"
    assert records.get("lancium/12") == record(made_at=2000.0)
    for path in directory.iterdir():
        path.unlink()
    directory.rmdir()
    records.put(record())
    assert records.get("lancium/12") == record()


@pytest.mark.parametrize("key", ["../x", "lancium/../../etc", "", "a/" + "b" * 300, "lancium/1\n"])
def test_keys_never_name_a_path(key: str) -> None:
    with pytest.raises(ValueError):
        file_name(key)


def test_a_link_a_foreign_file_or_a_damaged_one_is_no_record(tmp_path: Path) -> None:
    records = JobRecords([str(tmp_path)], "ce", "lancium")
    records.put(record())
    directory = Path(records.directories[0])
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(record("lancium/13").to_json())
    os.symlink(elsewhere, directory / file_name("lancium/13"))
    (directory / file_name("lancium/14")).write_text(record("lancium/14").to_json())
    os.chown(directory / file_name("lancium/14"), NOBODY.pw_uid, -1)
    (directory / file_name("lancium/15")).write_text("{not json")
    (directory / file_name("lancium/16")).write_text(record("lancium/99").to_json())  # says another key
    for key in ("lancium/13", "lancium/14", "lancium/15", "lancium/16"):
        assert records.get(key) is None
    assert [r.key for r in records.all()] == ["lancium/12"]


def test_a_record_written_where_the_state_was_kept_before_is_found(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    JobRecords([str(tmp_path / "b")], "ce", "lancium").put(record())
    assert JobRecords([str(tmp_path / "a"), str(tmp_path / "b")], "ce", "lancium").get("lancium/12") == record()
