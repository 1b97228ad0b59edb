"""Each user's own state directory in the shared one: a name nobody can take first, never another's."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from gahp.core import statedir
from gahp.core.statedir import own_directory, state_directories, user_directories

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    path = tmp_path / "user-log"
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


def test_a_users_directory_is_made_once_and_found_again(shared: Path) -> None:
    first = own_directory(str(shared), "alice")
    assert os.path.basename(first).startswith("Podgahp.alice.") and os.path.dirname(first) == str(shared)
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o755
    assert own_directory(str(shared), "alice") == first
    assert own_directory(str(shared), "bob") != first
    assert user_directories(str(shared)) == {"alice": first, "bob": own_directory(str(shared), "bob")}


def test_names_pre_created_by_another_user_neither_block_nor_count(shared: Path) -> None:
    """mallory makes directories, files and links named as alice's before alice's GAHP ever ran."""
    for name in ("Podgahp.alice.000000", "Podgahp.alice.aaaaaa"):
        (shared / name).mkdir(mode=0o777)
        os.chown(shared / name, NOBODY.pw_uid, -1)
    (shared / "Podgahp.alice.111111").write_text("a file")
    os.symlink("/etc", shared / "Podgahp.alice.222222")
    os.makedirs(shared / "Podgahp.alice.333333", mode=0o777)
    os.chmod(shared / "Podgahp.alice.333333", 0o777)  # alice's own uid here, but writable by all
    mine = own_directory(str(shared), "alice")
    assert os.path.basename(mine) not in {"Podgahp.alice.000000", "Podgahp.alice.aaaaaa", "Podgahp.alice.111111",
                                          "Podgahp.alice.222222", "Podgahp.alice.333333"}
    assert os.stat(mine).st_uid == os.getuid() and not os.path.islink(mine)
    # podgahp reap reads alice's figures from alice's directory only
    assert user_directories(str(shared))["alice"] == mine


def test_a_shared_directory_anyone_may_rename_in_is_not_used(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    os.chmod(unsafe, 0o777)
    with pytest.raises(OSError, match="no sticky bit"):
        own_directory(str(unsafe), "alice")
    home = tmp_path / "home" / ".podgahp" / "state"  # ~/.podgahp/state of the user, here under tmp_path
    monkeypatch.setattr(statedir, "_fallback_path", lambda: str(home))
    assert state_directories(str(unsafe), "alice") == [str(home)]
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert state_directories(str(tmp_path), "alice") == [own_directory(str(tmp_path), "alice"), str(home)]
