"""Unit tests: state a backend keeps on disk by default (black-hole state, in the temporary
directory when no log directory is configured, or in ~/.podgahp/state when the state directory
cannot be used) stays inside each test's own directory."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from gahp import statedir


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "tmp"
    state.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(state))
    monkeypatch.setattr(statedir, "_fallback_path", lambda: str(tmp_path / "home" / ".podgahp" / "state"))
