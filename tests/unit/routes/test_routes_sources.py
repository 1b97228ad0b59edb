"""Safe copies of configuration files: nothing a file names is run, every other line stays where it was."""

from __future__ import annotations

import os
from pathlib import Path

import classad2
import pytest

from gahp.routes import RoutesError
from gahp.routes.sources import SAFE_PREFIX, SafeConfig, config_dir_files, osg_environment


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_commands_are_not_run_and_files_are_followed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    included = write(tmp_path / "included.conf", f"INNER = 1\ninclude command : touch {marker}\n")
    routes = write(tmp_path / "routes.conf", "\n".join([
        "JOB_ROUTER_ROUTE_NAMES = A",                        # 1
        f"include : {included}",                              # 2 followed
        f"  INCLUDE ifexist command : touch {marker}",         # 3
        f"@include : /bin/touch {marker} |",                  # 4
        "include : $(SOME_DIR)/x.conf",                       # 5 macros: not followed
        "include : relative.conf",                            # 6
        f"LOCAL_CONFIG_FILE = /bin/touch {marker} |",         # 7
        "JOB_ROUTER.LOCAL_CONFIG_DIR = $(LOCAL_CONFIG_DIR), /etc/x",  # 8
        f"JOB_ROUTER_ENTRIES_CMD = /bin/touch {marker}",      # 9
        "$(NAME_MACRO) = 1",                                  # 10
        "MY_HOOK_TRANSLATE_JOB = /bin/true",                  # 11
        "JOB_ROUTER_ROUTE_A @=jrt",                           # 12
        "  include : not a statement inside a block",         # 13
        "  UNIVERSE 9",                                       # 14
        "@jrt", ""]))
    safe = SafeConfig(str(tmp_path / "tmp"))
    copy = safe.copy_file(routes)
    lines = Path(copy).read_text().splitlines()
    original = Path(routes).read_text().splitlines()
    assert len(lines) == len(original)
    inner_copy = safe.copies[included].copy
    assert lines[1] == f"include : {inner_copy}"
    assert Path(inner_copy).read_text().splitlines()[1].startswith("# (not read by podgahp) include command")
    for index in (2, 3, 4, 5, 9):
        assert lines[index].startswith("# (not read by podgahp) "), lines[index]
    assert lines[6].startswith(f"{SAFE_PREFIX}LOCAL_CONFIG_FILE = ")
    assert lines[7] == f"JOB_ROUTER.{SAFE_PREFIX}LOCAL_CONFIG_DIR = $({SAFE_PREFIX}LOCAL_CONFIG_DIR), /etc/x"
    assert lines[8].startswith(f"{SAFE_PREFIX}JOB_ROUTER_ENTRIES_CMD = ")
    assert lines[10].startswith(f"{SAFE_PREFIX}MY_HOOK_TRANSLATE_JOB = ")
    assert lines[11:] == original[11:]  # the block is untouched
    warned = {w.split(": ", 1)[0] for w in safe.warnings}
    assert warned == {f"{routes}:{n}" for n in (3, 4, 5, 6, 7, 8, 9, 10, 11)} | {f"{included}:2"}
    assert not marker.exists()


def test_warnings_are_not_given_for_what_the_caller_lays_out(tmp_path: Path) -> None:
    path = write(tmp_path / "c.conf", "LOCAL_CONFIG_DIR = /etc/x\nLOCAL_CONFIG_FILE = /etc/y\n")
    safe = SafeConfig(str(tmp_path / "tmp"), handled=("LOCAL_CONFIG_DIR",))
    safe.copy_file(path)
    assert [w.split(": ", 2)[1].split()[0] for w in safe.warnings] == ["LOCAL_CONFIG_FILE"]


def test_messages_name_the_admins_file_and_the_first_line_of_a_block(tmp_path: Path) -> None:
    path = write(tmp_path / "r.conf", "A = 1\nJOB_ROUTER_ROUTE_X @=jrt\n  UNIVERSE 9\n@jrt\n")
    safe = SafeConfig(str(tmp_path / "tmp"))
    copy = safe.copy_file(path)
    assert safe.translate(f"Error in {copy}, line 4") == f"Error in {path}, line 4"
    assert safe.location(path, 4) == f"{path}:2"
    assert safe.location(path, 1) == f"{path}:1"


def test_include_loops_and_sizes_are_bounded(tmp_path: Path) -> None:
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    write(a, f"include : {b}\n")
    write(b, f"include : {a}\n")
    safe = SafeConfig(str(tmp_path / "tmp"))
    safe.copy_file(str(a))  # each file is copied once: the loop ends
    assert set(safe.copies) == {str(a), str(b)}
    binary = tmp_path / "bin.conf"
    binary.write_bytes(b"X = 1\0")
    with pytest.raises(RoutesError, match="NUL"):
        SafeConfig(str(tmp_path / "tmp2")).copy_file(str(binary))


def test_config_dir_files_in_htcondors_order(tmp_path: Path) -> None:
    for name in ("50-b.conf", "02-a.conf", "x.rpmnew", ".hidden", "10-c.conf~", "99.conf"):
        write(tmp_path / name, "")
    (tmp_path / "sub.conf").mkdir()
    assert [os.path.basename(f) for f in config_dir_files(str(tmp_path), None)] == ["02-a.conf", "50-b.conf", "99.conf"]
    assert [os.path.basename(f) for f in config_dir_files(str(tmp_path), r"^(?!.*\.conf$).*$")] == [
        "02-a.conf", "50-b.conf", "99.conf"]


def test_osg_environment_as_the_ce_builds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSG_SITE_NAME_FROM_CE", "MY_SITE")
    first = write(tmp_path / "osg.conf", "\n".join([
        "# a comment",
        "OSG_SITE_NAME=$OSG_SITE_NAME_FROM_CE",
        "export OSG_SITE_NAME",
        'OSG_SQUID="squid.example.org:3128"',
        "export OSG_SQUID",
        "NOT_EXPORTED=1",
        "OSG_UNSET=$NOT_IN_THE_ENVIRONMENT",
        "export OSG_UNSET", ""]))
    local = write(tmp_path / "local.conf", "OSG_SQUID=it's local\nexport OSG_SQUID\n")
    value = classad2.unquote(osg_environment([first, local, str(tmp_path / "missing.conf")]))
    assert value == "OSG_SITE_NAME='MY_SITE' OSG_SQUID='it''s local'"
    assert osg_environment([]) == '""'
