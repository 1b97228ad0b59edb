"""What the provisioner remembers between cycles, as a file: written whole, read back the same, and a
file that is not what it writes (truncated, edited, huge) is a fresh start, never an error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gahp.provision import history
from gahp.provision.history import GroupRecord, History, PilotRecord


def test_a_history_is_read_back_as_written(tmp_path: Path) -> None:
    made = History({"3.1": PilotRecord("1c/2048MiB", 5.0, joined=True, waited=True)},
                   {"1c/2048MiB": GroupRecord(unmatched_at=7.0, unmatched_waiting=4, failures=2, failed_at=6.0)})
    path = str(tmp_path / "sub" / "history.json")
    assert history.save(made, path) is None
    assert history.load(path) == made
    assert oct(os.stat(tmp_path / "sub").st_mode & 0o777) == "0o700"
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["history.json"]  # no temporary left


@pytest.mark.parametrize("text", [
    "{not json", "[]", "null", '{"pilots": []}',
    json.dumps({"pilots": {"1.0": {"group": 5, "first_seen": 1.0}}}),
    json.dumps({"pilots": {"1.0": {"group": "g", "first_seen": 1.0, "evil": True}}}),
    json.dumps({"groups": {"g": {"failures": -1}}}),
    json.dumps({"groups": {"g": {"failures": True}}}),
    json.dumps({"groups": {"g": {"unmatched_at": "now"}}}),
])
def test_what_it_does_not_write_is_dropped(text: str, tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text(text)
    loaded = history.load(str(path))
    assert loaded.pilots == {} and loaded.groups == {}


def test_good_entries_survive_next_to_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text(json.dumps({"pilots": {"1.0": {"group": "g", "first_seen": 1.0}, "2.0": {"group": 2}},
                                "groups": {"g": {"failures": 3, "failed_at": 9.0}, "h": []}}))
    loaded = history.load(str(path))
    assert loaded.pilots == {"1.0": PilotRecord("g", 1.0)} and loaded.groups == {"g": GroupRecord(failures=3,
                                                                                                   failed_at=9.0)}


def test_a_huge_file_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "MAX_FILE_BYTES", 100)
    path = tmp_path / "history.json"
    path.write_text(json.dumps({"pilots": {f"{i}.0": {"group": "g", "first_seen": 1.0} for i in range(20)}}))
    assert history.load(str(path)) == History()


def test_a_history_that_cannot_be_written_says_why(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    error = history.save(History(), str(blocker / "history.json"))
    assert error is not None and "not saved" in error
