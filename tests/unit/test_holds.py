"""The one registry of holds: unique subcodes, no backend numbering its own, every hold documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gahp.rules import holds
from gahp.core.jobstate import JobState, Phase

ROOT = Path(__file__).resolve().parents[2]
#: The documents with hold tables (each backend's: docs/kubernetes.md, docs/lancium.md...).
BACKEND_DOCS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))


def test_every_hold_is_registered_once_with_one_of_the_two_codes() -> None:
    registered = [v for v in vars(holds).values() if isinstance(v, holds.Hold)]
    assert sorted(holds.HOLDS.values(), key=lambda h: h.subcode) == sorted(registered, key=lambda h: h.subcode)
    assert len({h.subcode for h in registered}) == len(registered)
    assert {h.code for h in registered} == {holds.HOLD_RETRYABLE, holds.HOLD_FATAL}


def test_a_hold_replaces_the_exit_status_and_keeps_the_rest() -> None:
    done = JobState(Phase.COMPLETED, exit_code=3, exit_reason="OOMKilled", batch_id="b", worker_node="n")
    held = holds.OUTPUT.of(done, "cannot write")
    assert (held.phase, held.hold_code, held.hold_subcode, held.hold_reason) == (
        Phase.HELD, holds.HOLD_RETRYABLE, 5, "cannot write")
    assert (held.exit_code, held.exit_reason, held.batch_id, held.worker_node) == (None, None, "b", "n")
    assert "HoldReasonSubCode = 5" in held.status_ad() and "ExitCode" not in held.status_ad()


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "gahp/backends").rglob("*.py")))
def test_no_backend_sets_hold_codes_of_its_own(path: str) -> None:
    text = (ROOT / path).read_text()
    assert not re.search(r"hold_(sub)?code\s*=|Hold\(", text), f"{path}: holds come from gahp.rules.holds"


def _documented() -> "set[tuple[int, int]]":
    rows = set()
    for doc in BACKEND_DOCS:
        for code, subcode in re.findall(r"^\| (100[12]) \| (\d+) \|", (ROOT / doc).read_text(), re.M):
            rows.add((int(code), int(subcode)))
    return rows


def test_every_hold_is_in_a_backend_document_and_every_documented_hold_is_registered() -> None:
    assert _documented() == set(holds.HOLDS)
