from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gahp.program import protocol


@pytest.mark.parametrize("value, wire", [
    ("No error", r"No\ error"),
    ("a\\b", r"a\\b"),
    ("two  spaces", r"two\ \ spaces"),
    ("k8s/pilots/condor-ce-1", "k8s/pilots/condor-ce-1"),
    ('[ Cmd = "/bin/sleep"; Args = "30" ]', r'[\ Cmd\ =\ "/bin/sleep";\ Args\ =\ "30"\ ]'),
    ('[ W = "q \\" b \\\\ x" ]', r'[\ W\ =\ "q\ \\"\ b\ \\\\\ x"\ ]'),
    ("line\r\nbreak", "line\\\r\\\nbreak"),
    ("", "NULL"),
], ids=["space", "backslash", "two-spaces", "job-id", "classad", "classad-escapes", "crlf", "empty"])
def test_escape_matches_the_gridmanager(value: str, wire: str) -> None:
    assert protocol.escape(value) == wire


@given(st.lists(st.text(min_size=1), min_size=1, max_size=6))
def test_split_gives_back_every_escaped_field(fields: list) -> None:
    assert protocol.split(protocol.join(fields)) == fields


@given(st.text())
def test_split_of_one_escaped_string_is_that_string(text: str) -> None:
    assert protocol.split(protocol.escape(text)) == [text or "NULL"]


@pytest.mark.parametrize("line, fields", [
    ("A  B", ["A", "", "B"]),
    ("A B ", ["A", "B", ""]),
    ("A\rB", ["AB"]),
    ("A\\\rB", ["A\rB"]),
    ("X\\", ["X"]),
], ids=["double-space-empty-field", "trailing-space", "bare-cr-dropped", "escaped-cr-kept",
        "trailing-backslash"])
def test_split_follows_the_gridmanager_reader(line: str, fields: list) -> None:
    assert protocol.split(line) == fields


def test_join_never_writes_empty_or_trailing_fields() -> None:
    line = protocol.join(["7", "0", "", "x y"])
    assert line == r"7 0 NULL x\ y"
    assert "  " not in line and not line.endswith(" ")


def test_banner_fits_what_the_gridmanager_reads() -> None:
    assert protocol.BANNER.startswith("$") and protocol.BANNER.endswith("$")
    assert len(protocol.BANNER.encode()) <= 150


@pytest.mark.parametrize("name, arity", [
    ("BLAH_PING", 3), ("BLAH_JOB_SUBMIT", 4), ("BLAH_JOB_STATUS", 5),
    ("BLAH_JOB_CANCEL", 3), ("BLAH_JOB_REFRESH_PROXY", 3),
])
def test_failure_results_have_the_exact_arity(name: str, arity: int) -> None:
    fields = ["42", *protocol.ASYNC_COMMANDS[name].failure("broken")]
    assert len(fields) == arity == 1 + protocol.RESULT_FIELDS[name]
    assert fields[1] == "1" and fields[2] == "broken"


@pytest.mark.parametrize("text, ok", [
    ("2", True), ("989999999", True), ("0", False), ("-1", False), ("990000000", False),
    ("x", False), ("", False), ("٣", False),
])
def test_request_ids(text: str, ok: bool) -> None:
    assert protocol.valid_request_id(text) is ok


def test_commands_reply_lists_every_command_and_no_response_prefix() -> None:
    assert "RESPONSE_PREFIX" not in protocol.SUPPORTED
    for name in ("BLAH_PING", "BLAH_JOB_SUBMIT", "BLAH_JOB_STATUS", "BLAH_JOB_CANCEL",
                 "BLAH_JOB_REFRESH_PROXY", "ASYNC_MODE_ON", "RESULTS", "COMMANDS", "QUIT", "VERSION"):
        assert name in protocol.SUPPORTED
