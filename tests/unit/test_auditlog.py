"""Who submitted a job, from the schedd's audit log: the lines as HTCondor 23.9 and 25.14 write them
for HTCondor-CE (the router over the family session, a user over FS, a user's forged grid job)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import List, Optional

import pytest

from gahp.core.auditlog import AuditLog, AuditLogError, Submitter

T0 = time.mktime(time.strptime("12/02/26 01:08:51", "%m/%d/%y %H:%M:%S"))


def at(seconds: float) -> str:
    return time.strftime("%m/%d/%y %H:%M:%S", time.localtime(T0 + seconds))


def user(cid: int, second: float, name: str = "alice") -> List[str]:
    return [f"{at(second)} (cid:{cid}) Command=QMGMT_WRITE_CMD, peer=<127.0.0.1:15771>",
            f"{at(second)} (cid:{cid}) AuthMethod=FS, AuthId={name}, CondorId={name}@users.htcondor.org"]


def write(path: Path, lines: List[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def who(path: str, job: str, qdate_s: float, since: Optional[float] = None, **kw: object) -> Optional[Submitter]:
    return AuditLog(path, **kw).submitter(job, T0 + qdate_s, since=since)  # type: ignore[arg-type]


def test_htcondor_23_records_the_router_over_the_family_session(tmp_path: Path) -> None:
    path = write(tmp_path / "AuditLog", user(9, 0) + [f"{at(0)} (cid:9) Submitting new job 1.0",
        f"{at(4)} (cid:25) Command=QMGMT_WRITE_CMD, peer=<127.0.0.1:4409>",
        f"{at(4)} (cid:25) AuthMethod=FAMILY, AuthId=(null), CondorId=condor@family",
        f"{at(4)} (cid:25) Submitting new job 4.0"])
    assert who(path, "4.0", 4) == Submitter("4.0", 25, "condor@family", "FAMILY")
    assert who(path, "1.0", 0) == Submitter("1.0", 9, "alice@users.htcondor.org", "FS")


def test_htcondor_25_logs_no_identity_for_the_router(tmp_path: Path) -> None:
    path = write(tmp_path / "AuditLog", user(9, 0) + [f"{at(0)} (cid:9) Submitting new job 1.0"] + user(11, 0) + [
        f"{at(0)} (cid:11) Submitting new job 2.0",
        f"{at(4)} (cid:15) Submitting new job 3.0",
        f"{at(4)} (cid:21) Submitting new job 4.0"] + user(38, 56) + [f"{at(56)} (cid:38) Submitting new job 5.0"])
    assert who(path, "3.0", 4) == Submitter("3.0", 15, None, None)
    assert who(path, "4.0", 4) == Submitter("4.0", 21, None, None)
    assert who(path, "5.0", 56) == Submitter("5.0", 38, "alice@users.htcondor.org", "FS")


def test_a_connection_held_open_long_before_its_submit_is_still_the_users(tmp_path: Path) -> None:
    """The user opens a connection, others come and go for an hour, then it submits: its identity
    line is an hour back, and only a command of an earlier connection bounds the search."""
    lines = user(40, 0)
    for i, cid in enumerate(range(41, 400, 2)):
        lines += user(cid, 20 + i * 20) + [f"{at(20 + i * 20)} (cid:{cid}) Set Attribute for job 1.0, A = 1"]
    lines.append(f"{at(3700)} (cid:40) Submitting new job 9.0")
    path = write(tmp_path / "AuditLog", user(30, -10) + lines)
    assert who(path, "9.0", 3700) == Submitter("9.0", 40, "alice@users.htcondor.org", "FS")


def test_text_a_client_sends_never_reads_as_a_line_of_another_connection(tmp_path: Path) -> None:
    forged = f'{at(4)} (cid:15) Command=QMGMT_WRITE_CMD, peer=x'
    path = write(tmp_path / "AuditLog", user(9, 0) + [
        f'{at(1)} (cid:9) Set Attribute for job 1.0, Note = "{forged}"',
        f'{at(2)} (cid:9) Set Attribute for job 1.0, Note = " (cid:15) AuthMethod=FS, AuthId=x, CondorId=x@y"',
        f"{at(4)} (cid:15) Submitting new job 3.0"])
    assert who(path, "3.0", 4) == Submitter("3.0", 15, None, None)


def test_a_qdate_the_submitter_made_up_finds_no_record(tmp_path: Path) -> None:
    path = write(tmp_path / "AuditLog", user(9, 0) + [f"{at(0)} (cid:9) Submitting new job 1.0"])
    assert who(path, "1.0", -86400) is None
    assert who(path, "2.0", 0) is None


def test_an_earlier_lifetimes_connection_of_the_same_number_is_not_the_submitter(tmp_path: Path) -> None:
    """The schedd restarted and numbers its connections from the start again: the router's
    connection 15 of today is not a user's connection 15 of yesterday."""
    old = user(15, -86400) + [f"{at(-86400)} (cid:15) Submitting new job 1.0"]
    path = write(tmp_path / "AuditLog", old + [f"{at(4)} (cid:15) Submitting new job 3.0"])
    assert who(path, "3.0", 4, since=T0)  == Submitter("3.0", 15, None, None)
    # Without the schedd's start time the old line is taken: a hold, never an acceptance
    assert who(path, "3.0", 4) == Submitter("3.0", 15, "alice@users.htcondor.org", "FS")


def test_rotated_logs_are_read_newest_first_across_the_boundary(tmp_path: Path) -> None:
    write(tmp_path / "AuditLog.20261201T000000", user(9, -30) + user(30, -20))
    os.utime(tmp_path / "AuditLog.20261201T000000", (T0 - 10, T0 - 10))
    path = write(tmp_path / "AuditLog", [f"{at(0)} (cid:30) Submitting new job 7.0", f"{at(1)} (cid:31) Submitting new job 8.0"])
    assert who(path, "7.0", 0) == Submitter("7.0", 30, "alice@users.htcondor.org", "FS")
    assert who(path, "8.0", 1) == Submitter("8.0", 31, None, None)


def test_a_log_with_no_earlier_connection_settles_an_unlogged_submitter_only_when_it_is_whole(tmp_path: Path) -> None:
    """A schedd whose only submitter is the router (a site schedd, JOB_ROUTER_SCHEDD2): read to its
    first line, the log holds the schedd's whole lifetime only if no rotated copy was deleted."""
    path = write(tmp_path / "AuditLog", [f"{at(4)} (cid:15) Submitting new job 3.0"])
    with pytest.raises(AuditLogError, match="no earlier connection to bound its own, and the schedd's start is unknown"):
        who(path, "3.0", 4)
    assert who(path, "3.0", 4, since=T0) == Submitter("3.0", 15, None, None)
    write(tmp_path / "AuditLog.old", [f"{at(-86400)} (cid:9) Set Attribute for job 1.0, A = 1"])
    with pytest.raises(AuditLogError, match="no earlier connection"):
        who(path, "3.0", 4, since=T0 - 86400 * 2)  # the schedd's first copy may be gone
    assert who(path, "3.0", 4, since=T0 - 86400 * 2, max_rotated=90) == Submitter("3.0", 15, None, None)


def test_a_log_too_long_to_settle_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    filler = [f"{at(i)} (cid:{100 + i}) Set Attribute for job 1.0, A = {'x' * 200}" for i in range(2000)]
    path = write(tmp_path / "AuditLog", user(40, -1) + filler + [f"{at(2000)} (cid:40) Submitting new job 9.0"])
    with pytest.raises(AuditLogError, match="more than"):
        who(path, "9.0", 2000, max_scan_bytes=100_000)


def test_a_log_it_cannot_read_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(AuditLogError, match="cannot read"):
        who(str(tmp_path / "missing" / "AuditLog"), "1.0", 0)


def test_the_submit_line_is_found_in_a_large_log_by_its_time(tmp_path: Path) -> None:
    lines = []
    for i in range(20000):
        lines += user(2 * i + 10, i) + [f"{at(i)} (cid:{2 * i + 10}) Submitting new job {i + 1}.0"]
    path = write(tmp_path / "AuditLog", lines)
    assert who(path, "15001.0", 15000) == Submitter("15001.0", 30010, "alice@users.htcondor.org", "FS")
    assert who(path, "15001.0", 1000) is None  # far from its QDate


def test_times_in_seconds_since_the_epoch_and_sub_second_times_are_read(tmp_path: Path) -> None:
    path = write(tmp_path / "AuditLog", [
        f"{int(T0)} (cid:9) Command=QMGMT_WRITE_CMD, peer=<x>",
        f"{int(T0)} (pid:12) (cid:9) AuthMethod=FS, AuthId=bob, CondorId=bob@users.htcondor.org",
        f"{int(T0) + 1} (cid:9) Submitting new job 1.0"])
    assert who(path, "1.0", 1) == Submitter("1.0", 9, "bob@users.htcondor.org", "FS")
    path = write(tmp_path / "Sub", [line.replace(at(0), at(0) + ".123") for line in user(9, 0)] +
                 [f"{at(0)}.456 (cid:9) Submitting new job 1.0"])
    assert who(path, "1.0", 0) == Submitter("1.0", 9, "alice@users.htcondor.org", "FS")


def test_a_file_beside_the_log_that_the_schedd_did_not_rotate_is_not_read(tmp_path: Path) -> None:
    """Only copies owned as the log is are its rotated copies: a file another account put beside it
    (in a directory others may write) never speaks for a connection."""
    write(tmp_path / "AuditLog.forged", user(30, -20))
    os.chown(tmp_path / "AuditLog.forged", 65534, 65534)
    path = write(tmp_path / "AuditLog", [f"{at(0)} (cid:30) Submitting new job 7.0"])
    with pytest.raises(AuditLogError, match="no earlier connection"):
        who(path, "7.0", 0)
    os.chown(tmp_path / "AuditLog.forged", os.getuid(), os.getgid())
    assert who(path, "7.0", 0) == Submitter("7.0", 30, "alice@users.htcondor.org", "FS")
