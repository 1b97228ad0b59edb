from __future__ import annotations

import logging
import os
import pwd
import stat
from pathlib import Path

import pytest

from gahp.core import logs
from gahp.core.config import Knobs, ServerSettings


@pytest.mark.parametrize("text, secret", [
    ("Authorization: Bearer eyJhbGciOi.abc.def", "eyJhbGciOi.abc.def"),
    ('{"token": "s3cr3t-value"}', "s3cr3t-value"),
    ("api_key=K3Y123 rest", "K3Y123"),
    ("password: hunter2", "hunter2"),
], ids=["bearer", "json-token", "api-key", "password"])
def test_credentials_are_masked(text: str, secret: str) -> None:
    masked = logs.mask_secrets(text)
    assert secret not in masked and logs.MASK in masked


def test_lines_carry_request_and_job_ids_and_no_secrets(tmp_path: Path) -> None:
    settings = ServerSettings.from_knobs(Knobs({"PODGAHP_LOG": str(tmp_path / "gahp.log")}), "k8s")
    assert logs.setup(settings) == str(tmp_path / "gahp.log")
    log = logging.getLogger("gahp.test")
    with logs.request_context("17"):
        logs.set_job("k8s/pilots/pilot-x")
        log.info("calling with Bearer abc.def.ghi")
    log.info("outside")
    for handler in logging.getLogger().handlers:
        handler.flush()
    lines = (tmp_path / "gahp.log").read_text().splitlines()
    assert "req=17 job=k8s/pilots/pilot-x" in lines[0] and "abc.def.ghi" not in lines[0]
    assert "req=- job=-" in lines[1]


def test_an_unwritable_log_falls_back_to_home_then_stderr(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    settings = ServerSettings.from_knobs(Knobs({"PODGAHP_LOG": str(blocker / "sub" / "PodgahpLog.k8s.x")}), "k8s")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert logs.setup(settings) == str(tmp_path / "home" / ".podgahp" / "PodgahpLog.k8s.x")
    monkeypatch.setenv("HOME", str(blocker))
    where = logs.setup(settings)
    assert where.startswith("stderr") and "PodgahpLog.k8s.x" in where


def test_the_configured_log_directory_is_not_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # HTCondor's built-in LOG is /log: a GAHP with a wrong configuration must not make it.
    settings = ServerSettings.from_knobs(Knobs({"LOG": str(tmp_path / "log")}), "k8s")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert logs.setup(settings).startswith(str(tmp_path / "home" / ".podgahp" / "PodgahpLog.k8s."))
    assert not (tmp_path / "log").exists()


def test_non_utf8_and_control_characters_are_escaped_on_one_line(tmp_path: Path) -> None:
    import logging as std_logging

    from gahp.core import logs
    from gahp.core.config import ServerSettings

    settings = ServerSettings.from_knobs(Knobs({"PODGAHP_LOG": str(tmp_path / "log")}), "memory")
    logs.setup(settings)
    hostile = b"job \xff\xfe\nFAKE 2026 req=1 job=forged".decode("utf-8", "surrogateescape")
    std_logging.getLogger("gahp.test").warning("refused %s", hostile)
    for handler in std_logging.getLogger().handlers:
        handler.flush()
    lines = (tmp_path / "log").read_bytes().decode("utf-8").splitlines()
    assert len(lines) == 1, lines
    assert "refused job \\udcff\\udcfe\\x0aFAKE 2026" in lines[0]


@pytest.mark.parametrize("text, shown", [
    ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"), ("a\rb", "a\\x0db"), ("\x9b2J", "\\x9b2J"),
    ("abc\u202edef", "abc\\u202edef"), ("zero\u200bwidth", "zero\\u200bwidth"), ("line\u2028sep", "line\\u2028sep"),
    ("café ünïcode 日本", "café ünïcode 日本"), ("tab\there", "tab\\x09here"),
], ids=["osc-title", "cr", "c1-csi", "bidi-override", "zero-width", "line-separator", "printable-unicode", "tab"])
def test_printable_leaves_nothing_that_drives_a_terminal(text: str, shown: str) -> None:
    assert logs.printable(text) == shown and logs.printable(text).isprintable()


def test_a_log_named_in_advance_in_a_shared_directory_is_not_the_victims() -> None:
    """mallory (daemon) creates, in a shared log directory like $(USER_LOG), the file alice's (nobody's)
    GAHP logs to, readable and writable by all, a symbolic link to a file of mallory's in the next
    rotated name, and directories named as alice's own. alice's GAHP logs into its own directory
    there, in a file only alice can read; none of its lines reach mallory's files; readers find
    alice's log where it is."""
    from as_user import run_as, shared_directory

    secret = "pilot k8s/pilots/pilot-alice-0123 of alice"
    with shared_directory() as shared:
        configured = shared / "PodgahpLog.k8s.nobody"

        def mallory() -> None:
            configured.write_text("")
            configured.chmod(0o666)
            (shared / "mallory.txt").write_text("")
            os.symlink(shared / "mallory.txt", shared / "PodgahpLog.k8s.nobody.1")
            for name in ("Podgahp.nobody.000000", "Podgahp.nobody.aaaaaa"):
                (shared / name).mkdir(mode=0o777)
                (shared / name).chmod(0o777)

        def alice() -> None:
            settings = ServerSettings.from_knobs(Knobs({"PODGAHP_LOG": str(configured),
                                                        "PODGAHP_LOG_MAX_BYTES": "200"}), "k8s")
            where = logs.setup(settings)
            assert os.path.dirname(where) != str(shared) and os.path.basename(where) == configured.name, where
            for n in range(5):  # past the size limit: rotated within alice's directory
                logging.getLogger("gahp.test").warning("%s, line %d", secret, n)
            for handler in logging.getLogger().handlers:
                handler.flush()
            assert logs.find(str(configured), "nobody") == where
            assert stat.S_IMODE(os.stat(where).st_mode) == 0o600 and os.stat(where).st_uid == os.getuid()
            assert secret in Path(where).read_text()
            assert secret in Path(where + ".1").read_text()

        def mallory_reads() -> None:
            (own,) = [p for p in shared.glob("Podgahp.nobody.*") if p.owner() == "nobody"]
            with pytest.raises(PermissionError):
                (own / configured.name).read_text()

        run_as("daemon", mallory)
        run_as("nobody", alice)
        run_as("daemon", mallory_reads)
        assert configured.read_text() == "" and (shared / "mallory.txt").read_text() == ""
        found = logs.find(str(configured), "nobody")
        assert found is not None and secret in Path(found).read_text()
        assert Path(found).parent.owner() == "nobody"


def test_a_log_file_of_another_user_or_a_link_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the configured file is a link or another user's file (a directory only root may write,
    so the fixed name is used), the GAHP logs to its user's ~/.podgahp instead, never through it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    private = tmp_path / "log"
    private.mkdir(mode=0o755)
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.symlink(target, private / "PodgahpLog.k8s.link")
    (private / "PodgahpLog.k8s.theirs").write_text("")
    os.chown(private / "PodgahpLog.k8s.theirs", pwd.getpwnam("nobody").pw_uid, -1)
    for name in ("PodgahpLog.k8s.link", "PodgahpLog.k8s.theirs"):
        settings = ServerSettings.from_knobs(Knobs({"PODGAHP_LOG": str(private / name)}), "k8s")
        assert logs.setup(settings) == str(tmp_path / "home" / ".podgahp" / name)
        logging.getLogger("gahp.test").warning("not there")
    assert target.read_text() == "" and (private / "PodgahpLog.k8s.theirs").read_text() == ""


def _flush() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()


def test_a_line_is_formatted_once_and_the_log_rotates_at_its_size(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gahp.log"
    path.write_text("x" * 50 + "\n")  # a log left by an earlier GAHP counts towards the size
    settings = ServerSettings.from_knobs(Knobs({"PODGAHP_LOG": str(path), "PODGAHP_LOG_MAX_BYTES": "400",
                                                "PODGAHP_LOG_BACKUPS": "2"}), "k8s")
    logs.setup(settings)
    formatted = []
    original = logs._MaskingFormatter.format
    monkeypatch.setattr(logs._MaskingFormatter, "format",
                        lambda self, record: formatted.append(record) or original(self, record))
    log = logging.getLogger("gahp.test")
    for n in range(12):
        log.warning("line %02d é", n)
    _flush()
    assert len(formatted) == 12
    files = [path, tmp_path / "gahp.log.1", tmp_path / "gahp.log.2"]
    sizes = [f.stat().st_size for f in files]
    assert all(0 < size <= 400 for size in sizes), sizes
    assert "line 11 é" in path.read_text().splitlines()[-1]
    assert "x" * 50 not in path.read_text()  # the earlier GAHP's line went with the first rotation


def test_without_backups_the_log_is_never_rotated(tmp_path: Path) -> None:
    path = tmp_path / "gahp.log"
    settings = ServerSettings.from_knobs(Knobs({"PODGAHP_LOG": str(path), "PODGAHP_LOG_MAX_BYTES": "100",
                                                "PODGAHP_LOG_BACKUPS": "0"}), "k8s")
    logs.setup(settings)
    for n in range(10):
        logging.getLogger("gahp.test").warning("line %d", n)
    _flush()
    assert len(path.read_text().splitlines()) == 10 and not (tmp_path / "gahp.log.1").exists()


def test_a_test_that_sets_up_the_gahps_log_and_quietens_it(tmp_path: Path) -> None:
    """With the next test: what one test does to the logging module's state in a process (the GAHP's
    set-up, a quietened ``gahp`` logger) is undone for the next (tests/conftest.py, logging_as_it_was)."""
    logs.setup(ServerSettings.from_knobs(Knobs({"PODGAHP_LOG": str(tmp_path / "gahp.log")}), "k8s"))
    logging.getLogger("gahp").setLevel(logging.CRITICAL)
    logging.getLogger("gahp.test").critical("into the first test's file")
    assert "into the first test's file" in (tmp_path / "gahp.log").read_text()


def test_the_next_test_reads_podgahps_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    logging.getLogger("gahp.core.retry").warning("create pod x: the service throttles")
    assert [r.getMessage() for r in caplog.records] == ["create pod x: the service throttles"]
